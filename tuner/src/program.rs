//! The user's command and one trial's values: placeholders in the arguments, the same values in
//! the environment.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// One trial's settings: what the tuner varies and how long the program runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Params {
    /// Samples per micro-batch.
    pub batch_size: usize,
    /// Data-loader worker processes.
    pub workers: usize,
    /// bf16 autocast on or off.
    pub amp: bool,
    /// Micro-batches per optimizer step.
    pub accumulation: usize,
    /// Measured optimizer steps.
    pub steps: usize,
    /// Optimizer steps run (and reported) before measuring.
    pub warmup_steps: usize,
}

impl Params {
    /// Every step the program is told to run, warmup included.
    pub fn total_steps(&self) -> usize {
        self.warmup_steps + self.steps
    }

    /// Samples one optimizer step consumes.
    pub fn samples_per_step(&self) -> usize {
        self.batch_size * self.accumulation.max(1)
    }

    /// `batch 256, workers 4, amp on, accumulation 2`: for progress lines and messages.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "batch {}, workers {}, amp {}",
            self.batch_size,
            self.workers,
            on_off(self.amp)
        );
        if self.accumulation > 1 {
            s.push_str(&format!(", accumulation {}", self.accumulation));
        }
        s
    }
}

pub fn on_off(b: bool) -> &'static str {
    if b {
        "on"
    } else {
        "off"
    }
}

/// The environment variable naming the report file.
pub const REPORT_ENV: &str = "PERF_LESSONS_REPORT";
/// The environment variable holding the trial's number.
pub const TRIAL_ENV: &str = "PERF_LESSONS_TRIAL";

/// A value the tuner puts into the command line (`{name}` in an argument) and the environment.
#[derive(Debug, Clone, Copy)]
pub struct Placeholder {
    pub name: &'static str,
    pub env: &'static str,
    pub value: fn(&Params) -> String,
}

impl Placeholder {
    pub const ALL: [Placeholder; 6] = [
        Placeholder {
            name: "batch_size",
            env: "PERF_LESSONS_BATCH_SIZE",
            value: |p| p.batch_size.to_string(),
        },
        Placeholder {
            name: "workers",
            env: "PERF_LESSONS_WORKERS",
            value: |p| p.workers.to_string(),
        },
        Placeholder {
            name: "amp",
            env: "PERF_LESSONS_AMP",
            value: |p| on_off(p.amp).to_string(),
        },
        Placeholder {
            name: "accumulation",
            env: "PERF_LESSONS_ACCUMULATION",
            value: |p| p.accumulation.to_string(),
        },
        Placeholder {
            name: "steps",
            env: "PERF_LESSONS_STEPS",
            value: |p| p.steps.to_string(),
        },
        Placeholder {
            name: "warmup",
            env: "PERF_LESSONS_WARMUP_STEPS",
            value: |p| p.warmup_steps.to_string(),
        },
    ];

    fn token(self) -> String {
        format!("{{{}}}", self.name)
    }
}

/// The user's command: a program and its arguments, placeholders not yet replaced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Program {
    pub argv: Vec<String>,
}

impl Program {
    /// The words after `--`. An empty command is an error.
    pub fn new(argv: Vec<String>) -> Result<Program, String> {
        match argv.first() {
            None => Err("no command given: put the training command after --, e.g. \
                 `tuner autobatch -- python3 train.py --batch-size {batch_size}`"
                .into()),
            Some(p) if p.trim().is_empty() => Err("the command's program is empty".into()),
            Some(_) => Ok(Program { argv }),
        }
    }

    /// The command line of one trial.
    pub fn argv_for(&self, p: &Params) -> Vec<String> {
        self.argv.iter().map(|a| substitute(a, p)).collect()
    }

    /// The environment every trial gets for these values (placeholders' variables).
    pub fn env_for(p: &Params) -> Vec<(&'static str, String)> {
        Placeholder::ALL
            .iter()
            .map(|ph| (ph.env, (ph.value)(p)))
            .collect()
    }

    /// Words in braces that look like placeholders but are none of ours (`{batch}` for
    /// `{batch_size}`): worth a warning, since they reach the program as they are.
    pub fn unknown_placeholders(&self) -> Vec<String> {
        let mut out = Vec::new();
        for a in &self.argv {
            let mut rest = a.as_str();
            while let Some(open) = rest.find('{') {
                let after = &rest[open + 1..];
                let Some(close) = after.find('}') else { break };
                let word = &after[..close];
                let looks_like_one =
                    !word.is_empty() && word.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
                if looks_like_one
                    && !Placeholder::ALL.iter().any(|p| p.name == word)
                    && !out.iter().any(|w: &String| w == word)
                {
                    out.push(word.to_string());
                }
                rest = &after[close + 1..];
            }
        }
        out
    }

    /// Fail before any trial when the program cannot be found or run.
    pub fn check_runnable(&self) -> Result<PathBuf, String> {
        let program = &self.argv[0];
        let path = Path::new(program);
        if program.contains('/') {
            return if is_executable(path) {
                Ok(path.to_path_buf())
            } else {
                Err(format!(
                    "'{program}' is not an executable file: check the command after --"
                ))
            };
        }
        let search = std::env::var_os("PATH").unwrap_or_default();
        std::env::split_paths(&search)
            .map(|dir| dir.join(program))
            .find(|candidate| is_executable(candidate))
            .ok_or_else(|| {
                format!("'{program}' is not on PATH: check the command after -- (or give its path)")
            })
    }

    /// The command as one shell-like line (for messages; quoting only where needed).
    pub fn display(argv: &[String]) -> String {
        argv.iter()
            .map(|a| {
                if !a.is_empty()
                    && a.chars()
                        .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%{}".contains(c))
                {
                    a.clone()
                } else {
                    format!("'{}'", a.replace('\'', r"'\''"))
                }
            })
            .collect::<Vec<_>>()
            .join(" ")
    }
}

fn substitute(arg: &str, p: &Params) -> String {
    let mut out = arg.to_string();
    for ph in Placeholder::ALL {
        let token = ph.token();
        if out.contains(&token) {
            out = out.replace(&token, &(ph.value)(p));
        }
    }
    out
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> Params {
        Params {
            batch_size: 96,
            workers: 4,
            amp: true,
            accumulation: 2,
            steps: 20,
            warmup_steps: 3,
        }
    }

    fn words(line: &str) -> Vec<String> {
        line.split(' ').map(String::from).collect()
    }

    #[test]
    fn placeholders_are_replaced_inside_arguments() {
        let prog = Program::new(words(
            "python3 train.py --batch-size={batch_size} --workers {workers} --amp {amp} --accumulation {accumulation} --steps {steps} --warmup {warmup} --out run-{batch_size}-{amp}.log",
        ))
        .unwrap();
        assert_eq!(
            prog.argv_for(&params()),
            words("python3 train.py --batch-size=96 --workers 4 --amp on --accumulation 2 --steps 20 --warmup 3 --out run-96-on.log")
        );
        // Each value is in the environment too (what the program sees: tests/external_trial.rs).
        assert_eq!(Program::env_for(&params()).len(), Placeholder::ALL.len());
    }

    #[test]
    fn unknown_placeholders_are_found_and_other_braces_left_alone() {
        let argv = [
            "prog",
            "--b={batch}",
            "{\"json\": 1}",
            "{batch_size}",
            "{epoch}/{batch}",
        ];
        let prog = Program::new(argv.map(String::from).to_vec()).unwrap();
        assert_eq!(prog.unknown_placeholders(), vec!["batch", "epoch"]);
        let argv = prog.argv_for(&params());
        assert_eq!(argv[2], "{\"json\": 1}");
        assert_eq!(argv[3], "96");
    }

    #[test]
    fn empty_and_missing_programs_are_refused() {
        assert!(Program::new(vec![]).unwrap_err().contains("after --"));
        assert!(Program::new(vec![" ".into()]).is_err());
        // A program not on PATH or not executable: tests/program_cli.rs, through the command.
        assert!(Program::new(vec!["sh".into()])
            .unwrap()
            .check_runnable()
            .is_ok());
    }

    #[test]
    fn display_quotes_only_what_needs_it() {
        let argv = ["python3", "a b.py", "--x={batch_size}", "it's"].map(String::from);
        assert_eq!(
            Program::display(&argv),
            r"python3 'a b.py' --x={batch_size} 'it'\''s'"
        );
        let described = "batch 96, workers 4, amp on, accumulation 2";
        assert_eq!(params().describe(), described);
    }
}
