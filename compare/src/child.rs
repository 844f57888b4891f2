//! Running one variant in a child process: a crash, a hang past the timeout, a sticky CUDA
//! error or garbage output is that variant's result, and the compare goes on.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::process;

use common::exit::Exit;
use common::report::LessonReport;

/// How a child ended.
#[derive(Debug)]
pub enum Outcome {
    /// It wrote a report (its variants may still have failed verification).
    Report(Box<LessonReport>),
    /// No usable report, and why ("crashed (signal 11)", "timed out after 60 s", ...).
    Failed(String),
    /// The child found no GPU or driver: the whole compare cannot run.
    NoGpu(String),
}

/// Run `program args... --json <tmp>` with a timeout; read the report it wrote.
pub fn run(
    program: &Path,
    args: &[String],
    timeout: Duration,
    scratch: &Path,
    tag: &str,
) -> Outcome {
    let json = scratch.join(format!("{tag}.json"));
    let stderr_path = scratch.join(format!("{tag}.stderr"));
    let _ = std::fs::remove_file(&json);
    let stderr_file = match std::fs::File::create(&stderr_path) {
        Ok(f) => f,
        Err(e) => return Outcome::Failed(format!("cannot create {}: {e}", stderr_path.display())),
    };
    let mut cmd = Command::new(program);
    cmd.args(args)
        .arg("--json")
        .arg(&json)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr_file);
    // A process group of its own: a variant's hang takes whatever it started with it.
    let mut child = match process::spawn_in_group(cmd) {
        Ok(c) => c,
        Err(e) => return Outcome::Failed(format!("could not start {}: {e}", program.display())),
    };
    let end = match process::wait_child(&mut child, Instant::now(), timeout, || false) {
        Ok(end) => end,
        Err(e) => return Outcome::Failed(format!("lost the child process: {e}")),
    };
    let last_line = process::tail_lines(&stderr_path, 1)
        .pop()
        .unwrap_or_default();
    match end {
        process::Exit::Code(code) => read_outcome(Some(code), &json, last_line, String::new),
        process::Exit::Signal(s) => {
            read_outcome(None, &json, last_line, || format!("crashed (signal {s})"))
        }
        _ => Outcome::Failed(format!(
            "timed out after {:.0} s (killed)",
            timeout.as_secs_f64()
        )),
    }
}

/// What a child's exit code (None: killed by a signal) and its report say. The code alone tells
/// a missing GPU from bad flags ([Exit]); its last stderr line only explains.
fn read_outcome(
    code: Option<i32>,
    json: &Path,
    last_line: String,
    signal: impl FnOnce() -> String,
) -> Outcome {
    let Some(code) = code else {
        return Outcome::Failed(signal());
    };
    match Exit::from_code(code) {
        // Done, or a problem found with a report (a variant failed verification: it says so).
        Some(Exit::Done | Exit::Problem) if json.exists() => match LessonReport::read_json(json) {
            Ok(r) => Outcome::Report(Box::new(r)),
            Err(e) => Outcome::Failed(format!("bad output: {e}")),
        },
        Some(Exit::NoGpu) => Outcome::NoGpu(if last_line.is_empty() {
            "no GPU or driver to run on".to_string()
        } else {
            last_line
        }),
        Some(Exit::Usage) => {
            Outcome::Failed(format!("refused its flags: {}", or_no_message(&last_line)))
        }
        _ => Outcome::Failed(format!(
            "exited with code {code}: {}",
            or_no_message(&last_line)
        )),
    }
}

fn or_no_message(line: &str) -> &str {
    if line.is_empty() {
        "(no message)"
    } else {
        line
    }
}

/// A fresh scratch folder for one compare run's child outputs.
pub fn scratch_dir() -> std::io::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("perf-lessons-compare-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(code: Option<i32>, line: &str) -> Outcome {
        let missing = std::env::temp_dir().join("compare-child-test-no-such-report.json");
        read_outcome(code, &missing, line.to_string(), || {
            "crashed (signal 11)".into()
        })
    }

    #[test]
    fn the_exit_code_alone_tells_a_missing_gpu_from_bad_flags() {
        // The line says nothing of GPUs: the code decides.
        assert!(
            matches!(outcome(Some(3), "error: something"), Outcome::NoGpu(l) if l == "error: something")
        );
        assert!(matches!(outcome(Some(3), ""), Outcome::NoGpu(_)));
        // A line that names the driver does not make bad flags a missing GPU.
        match outcome(Some(2), "error: no NVIDIA driver found, --device 7") {
            Outcome::Failed(why) => assert!(
                why.starts_with("refused its flags: error: no NVIDIA"),
                "{why}"
            ),
            other => panic!("{other:?}"),
        }
        match outcome(Some(1), "") {
            Outcome::Failed(why) => assert_eq!(why, "exited with code 1: (no message)"),
            other => panic!("{other:?}"),
        }
        match outcome(Some(101), "thread 'main' panicked") {
            Outcome::Failed(why) => assert!(why.starts_with("exited with code 101"), "{why}"),
            other => panic!("{other:?}"),
        }
        match outcome(None, "") {
            Outcome::Failed(why) => assert_eq!(why, "crashed (signal 11)"),
            other => panic!("{other:?}"),
        }
    }
}
