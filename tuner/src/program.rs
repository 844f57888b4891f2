//! The user's command and one trial's values: placeholders in the arguments, the same values in
//! the environment.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use common::named::Named;

/// One trial's values of the user's own axes (`--axis lr=0.1,0.01`), in the order the axes were
/// given.
pub type Axes = Named<String>;

/// One trial's settings: what the tuner varies and how long the program runs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Params {
    /// Samples per micro-batch.
    pub batch_size: usize,
    /// Data-loader worker processes.
    pub workers: usize,
    /// The precision: off (fp32), bf16 or fp16; `on` until the trial's GPU resolves it.
    pub amp: Precision,
    /// `amp` is what `on` resolved to on the trial's GPU.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub amp_from_on: bool,
    /// Micro-batches per optimizer step.
    pub accumulation: usize,
    /// Measured optimizer steps.
    pub steps: usize,
    /// Optimizer steps run (and reported) before measuring.
    pub warmup_steps: usize,
    /// The user's own axes: `{name}` in the command, `PERF_LESSONS_<NAME>` in the environment.
    #[serde(default, skip_serializing_if = "Named::is_empty")]
    pub axes: Axes,
}

impl Params {
    /// Every step the program is told to run, warmup included.
    pub fn total_steps(&self) -> usize {
        self.warmup_steps + self.steps
    }

    /// `batch 256, workers 4, amp bf16 (on), accumulation 2`: for progress lines and messages.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "batch {}, workers {}, amp {}",
            self.batch_size,
            self.workers,
            self.amp_text()
        );
        if self.accumulation > 1 {
            s.push_str(&format!(", accumulation {}", self.accumulation));
        }
        for (name, value) in self.axes.iter() {
            s.push_str(&format!(", {name} {value}"));
        }
        s
    }

    /// `bf16`, or `bf16 (on)` where `on` chose it.
    pub fn amp_text(&self) -> String {
        let on = if self.amp_from_on { " (on)" } else { "" };
        format!("{}{on}", self.amp.as_str())
    }

    /// These settings on a GPU of compute capability `capability` (None: not read): `on`
    /// becomes the precision it resolves to there.
    pub fn on_gpu(&self, capability: Option<Capability>) -> Params {
        let mut p = self.clone();
        if p.amp == Precision::On {
            (p.amp, p.amp_from_on) = (Precision::resolve_on(capability), true);
        }
        p
    }

    /// The settings as they were asked for, before a GPU resolved `on`.
    pub fn as_asked(&self) -> Params {
        let mut p = self.clone();
        if p.amp_from_on {
            (p.amp, p.amp_from_on) = (Precision::On, false);
        }
        p
    }
}

/// A GPU's compute capability: (major, minor).
pub use crate::nvml::Capability;

/// The precision a trial trains in: what `{amp}` and `PERF_LESSONS_AMP` carry. Ordered fp32
/// first, so a tie between configurations goes to fp32.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// fp32 throughout.
    #[default]
    Off,
    /// bf16 autocast: fp32's range, no gradient scaler needed; from compute capability 8.0.
    Bf16,
    /// fp16 autocast with a gradient scaler: on every GPU with tensor cores.
    Fp16,
    /// The best the trial's GPU supports: bf16 from compute capability 8.0, else fp16.
    On,
}

/// The compute capability from which a GPU computes in bf16 (Ampere).
pub const BF16_FROM: Capability = (8, 0);

impl Precision {
    /// The name, as `{amp}` carries it, in the variants' order.
    pub fn as_str(self) -> &'static str {
        ["off", "bf16", "fp16", "on"][self as usize]
    }

    /// The name in a line of the plot or a pick: `fp32` for off.
    pub fn label(self) -> &'static str {
        match self {
            Precision::Off => "fp32",
            p => p.as_str(),
        }
    }

    /// A name, or `true` (on) and `false` (off).
    pub fn parse(s: &str) -> Result<Precision, String> {
        match s.trim() {
            "off" | "false" => Ok(Precision::Off),
            "bf16" => Ok(Precision::Bf16),
            "fp16" => Ok(Precision::Fp16),
            "on" | "true" => Ok(Precision::On),
            s => Err(format!("'{s}' is not off, bf16, fp16 or on")),
        }
    }

    /// What `on` is on a GPU of this capability: bf16 from [BF16_FROM], else fp16; fp16 too
    /// where the capability could not be read, since fp16 with a gradient scaler trains on
    /// every GPU.
    pub fn resolve_on(capability: Option<Capability>) -> Precision {
        match capability {
            Some(c) if c >= BF16_FROM => Precision::Bf16,
            _ => Precision::Fp16,
        }
    }

    /// Why `on` is what it is on a GPU of this capability, in words.
    pub fn why_on(capability: Option<Capability>) -> String {
        let on = Precision::resolve_on(capability).as_str();
        match capability {
            Some((major, minor)) if Precision::resolve_on(capability) == Precision::Bf16 => {
                format!("{on} (compute capability {major}.{minor}, bf16 from 8.0)")
            }
            Some((major, minor)) => {
                format!("{on} (compute capability {major}.{minor}, under bf16's 8.0)")
            }
            None => format!(
                "{on} (compute capability not read: fp16 with a gradient scaler trains on every GPU)"
            ),
        }
    }
}

impl<'de> Deserialize<'de> for Precision {
    /// A name, or a boolean as results written before the precisions had names hold it (bf16
    /// autocast on or off).
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Precision, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Bool(bool),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Bool(b) => Ok(if b { Precision::Bf16 } else { Precision::Off }),
            Raw::Text(t) => Precision::parse(&t).map_err(serde::de::Error::custom),
        }
    }
}

/// One of the user's own axes: a name and the values a sweep tries, as written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Axis {
    pub name: String,
    pub values: Vec<String>,
}

impl Axis {
    /// `NAME=V1,V2,...`: a lowercase identifier that is none of the tuner's own placeholders,
    /// and values kept as written (`1e-3` stays `1e-3`), repeats dropped.
    pub fn parse(s: &str) -> Result<Axis, String> {
        let Some((name, values)) = s.split_once('=') else {
            return Err(format!(
                "'{s}' is not an axis: write NAME=V1,V2,... (e.g. lr=0.1,0.01)"
            ));
        };
        let name = name.trim();
        let identifier = name.starts_with(|c: char| c.is_ascii_lowercase())
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !identifier {
            return Err(format!(
                "axis name '{name}': use a lowercase identifier (letters, digits, _; a letter first)"
            ));
        }
        let env = Axis::env_of(name);
        let ours = placeholders(&Params::default());
        if let Some((own, _)) = (ours.iter()).find(|(n, _)| *n == name || Axis::env_of(n) == env) {
            return Err(format!(
                "axis name '{name}' is the tuner's own {{{own}}}: give it with its own flag, or name the axis otherwise"
            ));
        }
        if env == REPORT_ENV || env == TRIAL_ENV {
            return Err(format!(
                "axis name '{name}' would set {env}, which the tuner sets itself: name the axis otherwise"
            ));
        }
        let mut list: Vec<String> = Vec::new();
        for v in values.split(',').map(str::trim) {
            if v.is_empty() {
                return Err(format!("axis '{name}' has an empty value: '{s}'"));
            }
            if !list.iter().any(|x| x == v) {
                list.push(v.to_string());
            }
        }
        Ok(Axis {
            name: name.to_string(),
            values: list,
        })
    }

    /// `PERF_LESSONS_<NAME>`; `{warmup}`'s is `PERF_LESSONS_WARMUP_STEPS`, as programs read it.
    pub fn env_of(name: &str) -> String {
        let name = match name {
            "warmup" => "warmup_steps",
            other => other,
        };
        format!("PERF_LESSONS_{}", name.to_ascii_uppercase())
    }

    /// Every combination of the axes' values, the first axis slowest; one empty combination
    /// without axes.
    pub fn grid(axes: &[Axis]) -> Vec<Axes> {
        axes.iter().fold(vec![Axes::default()], |combos, axis| {
            combos
                .iter()
                .flat_map(|c| {
                    axis.values.iter().map(move |v| {
                        let mut c = c.clone();
                        c.set(&axis.name, v.clone());
                        c
                    })
                })
                .collect()
        })
    }

    /// The same axis given twice is a mistake worth a line.
    pub fn check_distinct(axes: &[Axis]) -> Result<(), String> {
        for (i, a) in axes.iter().enumerate() {
            if axes[..i].iter().any(|b| b.name == a.name) {
                return Err(format!(
                    "--axis {} is given twice: list all its values in one --axis {}=V1,V2,...",
                    a.name, a.name
                ));
            }
        }
        Ok(())
    }
}

/// The environment variable naming the report file.
pub const REPORT_ENV: &str = "PERF_LESSONS_REPORT";
/// The environment variable holding the trial's number.
pub const TRIAL_ENV: &str = "PERF_LESSONS_TRIAL";

/// The values the tuner puts into the command line (`{name}` in an argument) and the
/// environment (the variable [Axis::env_of] the name): each one's name and value in `p` (the
/// names alone are those of any params, such as the default's).
pub fn placeholders(p: &Params) -> [(&'static str, String); 6] {
    [
        ("batch_size", p.batch_size.to_string()),
        ("workers", p.workers.to_string()),
        ("amp", p.amp.as_str().to_string()),
        ("accumulation", p.accumulation.to_string()),
        ("steps", p.steps.to_string()),
        ("warmup", p.warmup_steps.to_string()),
    ]
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

    /// The command line of one trial: each `{name}` of a placeholder or an axis replaced by its
    /// value.
    pub fn argv_for(&self, p: &Params) -> Vec<String> {
        let substitute = |arg: &String| {
            values(p).fold(arg.clone(), |out, (name, value)| {
                out.replace(&format!("{{{name}}}"), &value)
            })
        };
        self.argv.iter().map(substitute).collect()
    }

    /// The environment every trial gets for these values (placeholders' variables and the
    /// axes').
    pub fn env_for(p: &Params) -> Vec<(String, OsString)> {
        values(p)
            .map(|(n, v)| (Axis::env_of(&n), v.into()))
            .collect()
    }

    /// Words in braces that look like placeholders but are none of ours nor an axis's
    /// (`{batch}` for `{batch_size}`): worth a warning, since they reach the program as they are.
    pub fn unknown_placeholders(&self, axes: &[Axis]) -> Vec<String> {
        let mut out = Vec::new();
        for a in &self.argv {
            let mut rest = a.as_str();
            while let Some((word, after)) =
                (rest.split_once('{')).and_then(|(_, s)| s.split_once('}'))
            {
                let looks_like_one =
                    !word.is_empty() && word.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
                if looks_like_one
                    && !placeholders(&Params::default())
                        .iter()
                        .any(|(n, ..)| *n == word)
                    && !axes.iter().any(|a| a.name == word)
                    && !out.iter().any(|w: &String| w == word)
                {
                    out.push(word.to_string());
                }
                rest = after;
            }
        }
        out
    }

    /// The launcher at the head of the command that starts ranks of its own (torchrun,
    /// `python -m torch.distributed.run`, `accelerate launch`, `deepspeed`), where there is one.
    fn launcher(&self) -> Option<String> {
        let words: Vec<&str> = self.argv.iter().map(String::as_str).collect();
        let name = Path::new(words[0]).file_name()?.to_str()?;
        match (name, words.get(1).copied()) {
            ("torchrun" | "deepspeed", _) => Some(name.into()),
            ("accelerate", Some("launch")) => Some("accelerate launch".into()),
            (python, _) if python.starts_with("python") => {
                let module = words.windows(2).find(|w| w[0] == "-m")?[1];
                (module.starts_with("torch.distributed.")).then(|| format!("python -m {module}"))
            }
            _ => None,
        }
    }

    /// Fail before any trial when the program cannot be found or run, or is a launcher that
    /// would start ranks the tuner cannot give GPUs to and watch.
    pub fn check_runnable(&self) -> Result<(), String> {
        if let Some(launcher) = self.launcher() {
            return Err(format!(
                "{launcher} starts ranks of its own, where the tuner starts each rank itself to give it its GPU and watch it: put the training script after -- without {launcher}, and give --ranks N for N GPUs a trial (each rank gets torchrun's variables)"
            ));
        }
        let program = &self.argv[0];
        match program.contains('/') {
            true if !profiling::discover::is_executable(Path::new(program)) => Err(format!(
                "'{program}' is not an executable file: check the command after --"
            )),
            false if on_path(program).is_none() => Err(format!(
                "'{program}' is not on PATH: check the command after -- (or give its path)"
            )),
            _ => Ok(()),
        }
    }

    /// The command as one shell-like line (for messages; quoting only where needed).
    pub fn display(argv: &[String]) -> String {
        let plain = |c: char| c.is_ascii_alphanumeric() || "-_./=:,+@%{}".contains(c);
        let word = |a: &String| match !a.is_empty() && a.chars().all(plain) {
            true => a.clone(),
            false => quoted(a),
        };
        argv.iter().map(word).collect::<Vec<_>>().join(" ")
    }
}

/// `s` in single quotes for a POSIX shell (a single quote inside becomes '\'').
pub fn quoted(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Each placeholder's and axis's name and value in `p`.
fn values(p: &Params) -> impl Iterator<Item = (String, String)> + '_ {
    let ours = placeholders(p).map(|(name, v)| (name.to_string(), v));
    ours.into_iter().chain(p.axes.iter().cloned())
}

/// The executable `name` on the PATH, where there is one.
pub fn on_path(name: &str) -> Option<PathBuf> {
    profiling::discover::on_path(name, std::env::var_os("PATH").as_deref())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_launcher_that_starts_ranks_itself_is_refused() {
        for (command, launcher) in [
            ("torchrun --nproc-per-node 2 train.py", "torchrun "),
            ("/opt/venv/bin/torchrun train.py", "torchrun "),
            (
                "python3 -m torch.distributed.run --nproc_per_node=4 train.py",
                "python -m torch.distributed.run ",
            ),
            (
                "python -m torch.distributed.launch train.py",
                "python -m torch.distributed.launch ",
            ),
            ("accelerate launch train.py", "accelerate launch "),
            ("deepspeed train.py", "deepspeed "),
        ] {
            let argv = command.split(' ').map(String::from).collect();
            let why = Program { argv }.check_runnable().unwrap_err();
            assert!(why.starts_with(launcher), "{command}: {why}");
            assert!(why.contains("--ranks N"), "{why}");
        }
        for fine in [
            "python3 train.py -m torch.x",
            "python3 -m pkg.train",
            "accelerate-config",
        ] {
            let argv: Vec<String> = fine.split(' ').map(String::from).collect();
            assert_eq!(Program { argv }.launcher(), None, "{fine}");
        }
    }

    fn params() -> Params {
        Params {
            batch_size: 96,
            workers: 4,
            amp: Precision::Bf16,
            amp_from_on: false,
            accumulation: 2,
            steps: 20,
            warmup_steps: 3,
            axes: Axes::default(),
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
            words("python3 train.py --batch-size=96 --workers 4 --amp bf16 --accumulation 2 --steps 20 --warmup 3 --out run-96-bf16.log")
        );
        // Each value is in the environment too (what the program sees: tests/external_trial.rs).
        assert_eq!(
            Program::env_for(&params()).len(),
            placeholders(&params()).len()
        );
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
        assert_eq!(prog.unknown_placeholders(&[]), vec!["batch", "epoch"]);
        let argv = prog.argv_for(&params());
        assert_eq!(argv[2], "{\"json\": 1}");
        assert_eq!(argv[3], "96");
    }

    #[test]
    fn axes_become_placeholders_and_environment_variables() {
        let lr = Axis::parse("lr=1e-3, 0.01,1e-3").unwrap();
        assert_eq!(lr.values, ["1e-3", "0.01"], "as written, repeats dropped");
        let model = Axis::parse("model_2=resnet18,vit").unwrap();
        let grid = Axis::grid(&[lr.clone(), model.clone()]);
        let pairs: Vec<String> = grid
            .iter()
            .map(|a| {
                a.iter()
                    .map(|(_, v)| v.as_str())
                    .collect::<Vec<_>>()
                    .join("/")
            })
            .collect();
        assert_eq!(
            pairs,
            ["1e-3/resnet18", "1e-3/vit", "0.01/resnet18", "0.01/vit"]
        );
        assert_eq!(Axis::grid(&[]), vec![Axes::default()]);

        let mut p = params();
        p.axes = grid[3].clone();
        let prog = Program::new(words(
            "train.py --lr={lr} --model {model_2} --b {batch_size} {lr2}",
        ))
        .unwrap();
        let axes = [lr, model];
        assert_eq!(prog.unknown_placeholders(&axes), ["lr2"]);
        assert_eq!(
            prog.argv_for(&p),
            words("train.py --lr=0.01 --model vit --b 96 {lr2}")
        );
        let env = Program::env_for(&p);
        assert!(env.contains(&("PERF_LESSONS_LR".into(), "0.01".into())));
        assert!(env.contains(&("PERF_LESSONS_MODEL_2".into(), "vit".into())));
        assert_eq!(env.len(), placeholders(&p).len() + 2);
        assert!(
            p.describe().ends_with(", lr 0.01, model_2 vit"),
            "{}",
            p.describe()
        );
        // The axes travel with the trial's params, in their order.
        let json = serde_json::to_string(&p).unwrap();
        assert!(
            json.contains(r#""axes":{"lr":"0.01","model_2":"vit"}"#),
            "{json}"
        );
        assert_eq!(serde_json::from_str::<Params>(&json).unwrap(), p);
        let plain = serde_json::to_string(&params()).unwrap();
        assert!(!plain.contains("axes"), "{plain}");
    }

    #[test]
    fn an_axis_that_is_not_one_is_refused_in_one_line() {
        let refused = [
            ("lr", "NAME=V1,V2"),
            ("LR=0.1", "lowercase identifier"),
            ("2lr=0.1", "lowercase identifier"),
            ("l-r=0.1", "lowercase identifier"),
            ("=0.1", "lowercase identifier"),
            ("batch_size=8,16", "the tuner's own {batch_size}"),
            ("amp=bf16", "the tuner's own {amp}"),
            ("warmup_steps=1", "the tuner's own {warmup}"),
            ("report=x", "PERF_LESSONS_REPORT"),
            ("trial=1", "PERF_LESSONS_TRIAL"),
            ("lr=0.1,,0.2", "empty value"),
            ("lr=", "empty value"),
        ];
        for (arg, says) in refused {
            let e = Axis::parse(arg).unwrap_err();
            assert!(e.contains(says) && !e.contains('\n'), "{arg}: {e}");
        }
        let twice = [Axis::parse("lr=1").unwrap(), Axis::parse("lr=2").unwrap()];
        assert!(Axis::check_distinct(&twice).unwrap_err().contains("twice"));
        assert!(Axis::check_distinct(&twice[..1]).is_ok());
    }

    #[test]
    fn on_is_the_best_precision_the_gpu_has_and_says_it_came_from_on() {
        let on = Params {
            amp: Precision::On,
            ..params()
        };
        let cases = [
            (Some((9, 0)), Precision::Bf16),
            (Some((8, 0)), Precision::Bf16),
            (Some((7, 5)), Precision::Fp16),
            (Some((7, 0)), Precision::Fp16),
            (None, Precision::Fp16),
        ];
        for (capability, expected) in cases {
            let p = on.on_gpu(capability);
            assert_eq!((p.amp, p.amp_from_on), (expected, true), "{capability:?}");
            assert_eq!(p.as_asked(), on);
            let env = Program::env_for(&p);
            let amp = ("PERF_LESSONS_AMP".to_string(), expected.as_str().into());
            assert!(env.contains(&amp), "{env:?}");
        }
        let p = on.on_gpu(Some((7, 0)));
        assert!(p.describe().contains("amp fp16 (on)"), "{}", p.describe());
        let json = serde_json::to_string(&p).unwrap();
        assert!(
            json.contains(r#""amp":"fp16","amp_from_on":true"#),
            "{json}"
        );
        assert_eq!(serde_json::from_str::<Params>(&json).unwrap(), p);
        // A precision asked by name is left as it is on every GPU.
        for asked in [Precision::Off, Precision::Bf16, Precision::Fp16] {
            let p = Params {
                amp: asked,
                ..params()
            };
            assert_eq!(p.on_gpu(Some((7, 0))), p);
            assert_eq!(p.on_gpu(None), p);
        }
        assert!(Precision::why_on(None).contains("not read"));
        assert!(Precision::why_on(Some((7, 5))).starts_with("fp16 (compute capability 7.5"));
        assert!(Precision::why_on(Some((9, 0))).starts_with("bf16 (compute capability 9.0"));
        // Results written when AMP was on or off read as bf16 autocast and fp32.
        let old = r#"{"batch_size":8,"workers":0,"amp":true,"accumulation":1,"steps":1,"warmup_steps":0}"#;
        assert_eq!(
            serde_json::from_str::<Params>(old).unwrap().amp,
            Precision::Bf16
        );
        assert!(Precision::parse("fp8")
            .unwrap_err()
            .contains("off, bf16, fp16 or on"));
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
        let described = "batch 96, workers 4, amp bf16, accumulation 2";
        assert_eq!(params().describe(), described);
    }
}
