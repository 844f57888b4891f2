//! `tuner profile` end to end against the fake training program: under a stand-in nsys on the
//! PATH (a script that records its arguments, runs the command after them and writes a report
//! file), and without nsys, where the program's perf_lessons records the measured steps with
//! (a stand-in for) PyTorch's profiler into a Chrome trace. No GPU, no nsys, no PyTorch.

mod fake;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use fake::{argv, listing, log_entries, places, run, Out};
use serde_json::Value;

/// A stand-in nsys: records its arguments (one a line) in FAKE_NSYS_ARGV, runs the command
/// after its options, and writes `<--output>.nsys-rep`; FAKE_NSYS_FAIL makes it refuse its
/// options as a real one does, FAKE_NSYS_NO_REPORT makes it write nothing.
const STAND_IN_NSYS: &str = r#"#!/bin/sh
printf '%s\n' "$@" > "$FAKE_NSYS_ARGV"
if [ -n "$FAKE_NSYS_FAIL" ]; then
  echo "illegal --capture-range-end argument" >&2
  exit 1
fi
shift
out=
while [ $# -gt 0 ]; do
  case "$1" in
    --output=*) out="${1#--output=}"; shift ;;
    --*) shift ;;
    *) break ;;
  esac
done
"$@"
code=$?
if [ -z "$FAKE_NSYS_NO_REPORT" ]; then
  echo "stand-in report" > "$out.nsys-rep"
fi
exit $code
"#;

/// The PATH without any folder holding an nsys, and a folder with the stand-in in front where
/// `with_nsys` says.
fn path_var(with_nsys: Option<&Path>) -> std::ffi::OsString {
    let system = std::env::var_os("PATH").unwrap_or_default();
    let folders = with_nsys
        .map(Path::to_path_buf)
        .into_iter()
        .chain(std::env::split_paths(&system).filter(|d| !d.join("nsys").exists()));
    std::env::join_paths(folders).unwrap()
}

fn stand_in_nsys(dir: &Path) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let nsys = bin.join("nsys");
    std::fs::write(&nsys, STAND_IN_NSYS).unwrap();
    std::fs::set_permissions(&nsys, std::fs::Permissions::from_mode(0o755)).unwrap();
    bin
}

/// `tuner profile ARGS -- env VARS python3 fake_trainer.py ...` with `tool_vars` in the tuner's
/// own environment (the stand-in nsys reads them) and the PATH given.
fn profile(
    args: &[&str],
    vars: &[(&str, &str)],
    tool_vars: &[(&str, &str)],
    path: &std::ffi::OsStr,
    work: &Path,
    tmp: &Path,
) -> Out {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tuner"));
    cmd.arg("profile").args(args).arg("--").args(argv(vars));
    cmd.env("PATH", path).env_remove("NSYS");
    for (k, v) in tool_vars {
        cmd.env(k, v);
    }
    run(cmd, "0", work, tmp)
}

fn only_entry(log: &Path) -> Value {
    let entries = log_entries(log);
    assert_eq!(entries.len(), 1, "{entries:?}");
    entries.into_iter().next().unwrap()
}

/// The one line an error is, exit code and all.
fn one_line_error(o: &Out, code: i32) -> &str {
    assert_eq!(o.code, code, "{}\n{}", o.stdout, o.stderr);
    let lines: Vec<&str> = o.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{}", o.stderr);
    lines[0]
}

#[test]
fn under_nsys_the_measured_steps_only_and_the_program_runs_to_its_end() {
    let (s, work, tmp) = places("profile-nsys");
    let bin = stand_in_nsys(&s.0);
    let (log, nsys_argv) = (s.str("log.jsonl"), s.str("nsys-argv"));
    let o = profile(
        &["--batch-size", "16", "--warmup", "2", "--steps", "3"],
        &[("FAKE_LOG", &log)],
        &[("FAKE_NSYS_ARGV", &nsys_argv)],
        &path_var(Some(&bin)),
        &work,
        &tmp,
    );
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    let entry = only_entry(Path::new(&log));
    assert_eq!(entry["env"]["PERF_LESSONS_PROFILE"], "cuda-api");
    assert_eq!(entry["args"]["batch_size"], 16);
    // cudaProfilerStart as the last warmup step is reported, Stop after the last measured one.
    assert_eq!(
        entry["profiler"],
        serde_json::json!([["start", 2], ["stop", 5]])
    );
    assert_eq!(
        entry["outcome"], "ok",
        "the program ran on after the capture"
    );

    let words: Vec<String> = std::fs::read_to_string(&nsys_argv)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    assert_eq!(words[0], "profile");
    for w in [
        "--capture-range=cudaProfilerApi",
        "--capture-range-end=stop",
        "--trace=cuda,nvtx,osrt",
    ] {
        assert!(words.iter().any(|x| x == w), "{w} in {words:?}");
    }
    let output = words
        .iter()
        .find_map(|w| w.strip_prefix("--output="))
        .unwrap();
    assert!(output.starts_with("profiles/fake_trainer-b16-"), "{output}");
    assert!(words.iter().any(|w| w == "--batch-size") && words.contains(&"16".to_string()));

    let report = format!("{output}.nsys-rep");
    assert!(work.join(&report).is_file());
    for says in [
        format!("report: {report}"),
        format!("`nsys-ui {report}`"),
        "batch 16, workers 4, amp off (--batch-size), on GPU 0: steps 3 to 5 measured".into(),
        format!(
            "nsys ({}) records the measured steps",
            bin.join("nsys").display()
        ),
    ] {
        assert!(o.stdout.contains(&says), "{says}\n{}", o.stdout);
    }
    assert_eq!(listing(&work), ["profiles"]);
    assert!(listing(&tmp).is_empty(), "{:?}", listing(&tmp));
}

#[test]
fn without_nsys_pytorch_s_profiler_writes_a_chrome_trace() {
    let (s, work, tmp) = places("profile-torch");
    let log = s.str("log.jsonl");
    let o = profile(
        &["--batch-size", "8", "--json", "profile.json"],
        &[("FAKE_LOG", &log)],
        &[],
        &path_var(None),
        &work,
        &tmp,
    );
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    let entry = only_entry(Path::new(&log));
    let trace = entry["env"]["PERF_LESSONS_PROFILE_OUT"].as_str().unwrap();
    assert_eq!(entry["env"]["PERF_LESSONS_PROFILE"], "torch");
    // The tuner's defaults: 5 warmup steps, 30 measured.
    assert_eq!(
        entry["profiler"],
        serde_json::json!([["torch start", 5], ["torch stop", 35]])
    );
    assert!(trace.starts_with("profiles/fake_trainer-b8-") && trace.ends_with(".pt.trace.json"));
    let written: Value =
        serde_json::from_str(&std::fs::read_to_string(work.join(trace)).unwrap()).unwrap();
    assert!(written["traceEvents"].is_array());
    assert!(o.stdout.contains("nsys is not on the PATH"), "{}", o.stdout);
    assert!(
        o.stdout.contains(&format!("trace: {trace}")),
        "{}",
        o.stdout
    );
    assert!(o.stdout.contains("https://ui.perfetto.dev"), "{}", o.stdout);
    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(work.join("profile.json")).unwrap()).unwrap();
    assert_eq!(json["schema"], "tuner-profile/1");
    assert_eq!(json["profiler"], "torch");
    assert_eq!(json["files"][0], trace);
    assert_eq!(json["trial"]["status"], "OK");
    assert_eq!(json["device"]["label"], "GPU 0");
    assert!(json["provenance"].is_object());
}

#[test]
fn the_team_file_s_answer_is_profiled() {
    let (s, work, tmp) = places("profile-team");
    let log = s.str("log.jsonl");
    std::fs::write(
        work.join("team.toml"),
        "[gpus.\"Fake H100\".fake_trainer]\nbatch_size = 24\naccumulation_steps = 2\nprecision = \"amp\"\n",
    )
    .unwrap();
    let o = profile(
        &["--team", "team.toml", "--steps", "2"],
        &[("FAKE_LOG", &log)],
        &[],
        &path_var(None),
        &work,
        &tmp,
    );
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    let args = &only_entry(Path::new(&log))["args"];
    assert_eq!(
        (&args["batch_size"], &args["accumulation"], &args["amp"]),
        // The entry's `amp` is the GPU's best: fp16 here, where no NVML reads the capability.
        (&Value::from(24), &Value::from(2), &Value::from("fp16"))
    );
    assert!(
        o.stdout.contains("(team.toml: fake_trainer on Fake H100)"),
        "{}",
        o.stdout
    );
    let o = profile(
        &["--team", "team.toml", "--model-name", "resnet"],
        &[],
        &[],
        &path_var(None),
        &work,
        &tmp,
    );
    let e = one_line_error(&o, 2);
    assert!(e.contains("no entry for the model 'resnet'"), "{e}");
}

/// The stand-in nsys's variables, the fake's, the PATH, and what the error line says.
type Vars<'a> = Vec<(&'a str, &'a str)>;
type Case<'a> = (Vars<'a>, Vars<'a>, &'a std::ffi::OsStr, &'a [&'a str]);

#[test]
fn a_failing_nsys_and_a_missing_report_or_trace_are_one_line_each() {
    let (s, work, tmp) = places("profile-errors");
    let bin = stand_in_nsys(&s.0);
    let nsys_argv = s.str("nsys-argv");
    let with_nsys = path_var(Some(&bin));
    let without = path_var(None);
    let nsys = |what: &'static str| vec![("FAKE_NSYS_ARGV", nsys_argv.as_str()), (what, "1")];
    let cases: [Case; 3] = [
        (
            nsys("FAKE_NSYS_FAIL"),
            Vec::new(),
            &with_nsys,
            &["error: the trial under nsys FAILED: exit status 1; stderr ended with: illegal --capture-range-end argument (its output: "],
        ),
        (
            nsys("FAKE_NSYS_NO_REPORT"),
            Vec::new(),
            &with_nsys,
            &["error: nsys wrote no report at profiles/fake_trainer-b8-"],
        ),
        (
            Vec::new(),
            vec![("FAKE_PROFILE_NO_TORCH", "1")],
            &without,
            &[
                "error: no trace written at profiles/fake_trainer-b8-",
                "; perf_lessons: PyTorch is not imported by this program: no trace to record",
            ],
        ),
    ];
    for (tool_vars, vars, path, says) in cases {
        let batch = ["--batch-size", "8", "--steps", "2"];
        let o = profile(&batch, &vars, &tool_vars, path, &work, &tmp);
        let e = one_line_error(&o, 1);
        assert!(e.starts_with(says[0]), "{e}");
        assert!(says.iter().all(|s| e.contains(s)), "{e}");
    }
    // The trial's output is kept for a look.
    assert!(!listing(&tmp).is_empty());
}

#[test]
fn bad_flags_are_refused_before_anything_runs() {
    let (s, work, tmp) = places("profile-flags");
    let log = s.str("log.jsonl");
    let refused: [(&[&str], &str); 6] = [
        (&["--batch-size", "8", "--ranks", "2"], "leave out --ranks"),
        (
            &["--batch-size", "8", "--warmup", "0"],
            "at least one warmup step",
        ),
        (&[], "which batch? give --batch-size N"),
        (
            &["--batch-size", "8", "--nsys", "/nonexistent/nsys"],
            "--nsys /nonexistent/nsys: no such executable file",
        ),
        (
            &[
                "--batch-size",
                "8",
                "--nsys",
                "/bin/sh",
                "--profiler",
                "torch",
            ],
            "choose one",
        ),
        (
            &["--batch-size", "8", "--team", "team.toml"],
            "cannot be used with",
        ),
    ];
    for (args, says) in refused {
        let o = profile(
            args,
            &[("FAKE_LOG", &log)],
            &[],
            &path_var(None),
            &work,
            &tmp,
        );
        assert_eq!(o.code, 2, "{args:?}: {}", o.stderr);
        assert!(o.stderr.contains(says), "{args:?}: {}", o.stderr);
    }
    let o = profile(
        &["--profiler", "ncu"],
        &[],
        &[],
        &path_var(None),
        &work,
        &tmp,
    );
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(log_entries(Path::new(&log)).is_empty(), "nothing ran");
    assert!(listing(&work).is_empty(), "{:?}", listing(&work));
}
