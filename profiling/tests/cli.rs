//! The wrapper's command line without a GPU or any NVIDIA tool: dry runs print the exact
//! command; bad arguments and missing tools are one line and exit code 2, never a panic.

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_profiling");

fn run(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let mut c = Command::new(BIN);
    c.args(args).env_remove("NSYS").env_remove("NCU");
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().expect("the wrapper runs");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!stderr.contains("panicked"), "panic on {args:?}: {stderr}");
    (out.status.code().unwrap_or(-1), stdout, stderr)
}

/// A program that exists everywhere, standing in for a lesson binary.
const PROGRAM: &str = "/bin/sh";

#[test]
fn nsys_dry_run_prints_the_exact_command() {
    let out_dir = std::env::temp_dir().join("profiling-cli-nsys");
    let out = out_dir.to_str().unwrap();
    let (code, stdout, stderr) = run(
        &[
            "nsys",
            "--dry-run",
            "--timed-regions",
            "--out-dir",
            out,
            "--lesson",
            "ch1-intensity",
            "--",
            PROGRAM,
            "--elements",
            "64M",
            "--json",
            "a file.json",
        ],
        &[],
    );
    assert_eq!(code, 0, "{stderr}");
    let line = stdout.lines().next().unwrap();
    assert!(line.starts_with("$ "), "{line}");
    assert!(
        line.contains(
            "nsys profile --trace=cuda,nvtx,osrt --capture-range=cudaProfilerApi \
             --capture-range-end=repeat --stats=false --force-overwrite=true"
        ),
        "{line}"
    );
    assert!(
        line.contains(&format!("--output={out}/ch1-intensity-all-")),
        "{line}"
    );
    assert!(
        line.ends_with("/bin/sh --elements 64M --json 'a file.json'"),
        "{line}"
    );
    assert!(!out_dir.exists(), "a dry run creates nothing");
}

#[test]
fn a_program_not_built_on_the_harness_is_recorded_whole_and_told_so() {
    // /bin/sh, like python3 running a PyTorch script, never calls cudaProfilerStart: under a
    // capture range nsys would record nothing.
    let (code, stdout, stderr) = run(&["nsys", "--dry-run", "--", PROGRAM, "-c", "true"], &[]);
    assert_eq!(code, 0, "{stderr}");
    let mut lines = stdout.lines();
    let command = lines.next().unwrap();
    assert!(
        command.contains("nsys profile --trace=cuda,nvtx,osrt --stats=false"),
        "{command}"
    );
    assert!(!command.contains("capture-range"), "{command}");
    let why = lines.next().unwrap();
    assert!(
        why.starts_with("nsys records the whole process: sh does not mark timed regions"),
        "{why}"
    );
    assert!(why.contains("--timed-regions"), "{why}");
    // The two flags contradict each other: a usage error.
    let (code, _, stderr) = run(
        &[
            "nsys",
            "--dry-run",
            "--timed-regions",
            "--whole-process",
            "--",
            PROGRAM,
        ],
        &[],
    );
    assert_eq!(code, 2, "{stderr}");
}

#[test]
fn ncu_dry_run_with_filters() {
    let (code, stdout, stderr) = run(
        &[
            "ncu",
            "--dry-run",
            "--kernel",
            "regex:fused.*",
            "--launch-count",
            "3",
            "--nvtx-include",
            "ch1-intensity:fused/",
            "--variant",
            "fused",
            "--",
            PROGRAM,
        ],
        &[],
    );
    assert_eq!(code, 0, "{stderr}");
    let line = stdout.lines().next().unwrap();
    for part in [
        "ncu --clock-control none --section SpeedOfLight",
        "--kernel-name 'regex:fused.*' --launch-count 3",
        "--nvtx --nvtx-include ch1-intensity:fused/",
        "--export results/profiles/sh-fused-",
        "--force-overwrite /bin/sh",
    ] {
        assert!(line.contains(part), "{part} missing from {line}");
    }
    let (_, full, _) = run(&["ncu", "--dry-run", "--full", "--", PROGRAM], &[]);
    assert!(
        full.contains("--set full") && !full.contains("--section"),
        "{full}"
    );
}

#[test]
fn bad_arguments_are_one_line_and_exit_2() {
    let cases: &[(&[&str], &str)] = &[
        (&["ncu", "--launch-count", "0", "--", PROGRAM], "at least 1"),
        (
            &["ncu", "--full", "--section", "Occupancy", "--", PROGRAM],
            "drop --section",
        ),
        (
            &["ncu", "--cache-control", "maybe", "--", PROGRAM],
            "--cache-control maybe",
        ),
        (
            &["nsys", "--dry-run", "--", "./no/such/lesson"],
            "does not exist",
        ),
        (
            &["nsys", "--dry-run", "--", "no-such-lesson-binary"],
            "not on PATH",
        ),
        (
            &["nsys", "--nsys", "/no/such/nsys", "--", PROGRAM],
            "--nsys /no/such/nsys: no such executable file",
        ),
        (&["headline", "/no/such.ncu-rep"], "no such report"),
    ];
    for (args, want) in cases {
        let (code, _, stderr) = run(args, &[]);
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert!(stderr.contains(want), "{args:?}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{args:?}: {stderr}");
    }
    // No program after -- at all: clap's usage error, also exit 2.
    let (code, _, stderr) = run(&["nsys"], &[]);
    assert_eq!(code, 2, "{stderr}");
    let (code, _, _) = run(&["ncu", "--launch-count", "many", "--", PROGRAM], &[]);
    assert_eq!(code, 2);
}

#[test]
fn a_wrong_tool_variable_is_named() {
    let (code, _, stderr) = run(
        &["ncu", "--", PROGRAM],
        &[("PATH", "/nonexistent"), ("NCU", "/no/such/ncu")],
    );
    // The variable is read after PATH and before the install folders, so a wrong one is an
    // error even on a machine where ncu sits in a usual folder.
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("NCU=/no/such/ncu: no such executable file"),
        "{stderr}"
    );
}

#[test]
fn a_missing_tool_names_what_to_install() {
    let installed = ["/usr/local/cuda/bin/nsys", "/opt/nvidia"]
        .iter()
        .any(|p| std::path::Path::new(p).exists());
    if installed {
        return; // a machine with Nsight tools: the unit tests cover the search itself
    }
    let (code, _, stderr) = run(&["nsys", "--", PROGRAM], &[("PATH", "/nonexistent")]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.starts_with("error: nsys (Nsight Systems) not found: install Nsight Systems"),
        "{stderr}"
    );
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    // A dry run still prints the command, with a note.
    let (code, stdout, stderr) = run(
        &["nsys", "--dry-run", "--", PROGRAM],
        &[("PATH", "/nonexistent")],
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.starts_with("$ nsys profile"), "{stdout}");
    assert!(
        stderr.contains("note: nsys (Nsight Systems) not found"),
        "{stderr}"
    );
}

#[test]
fn it_says_its_version() {
    common::testing::assert_prints_version(env!("CARGO_BIN_EXE_profiling"));
}
