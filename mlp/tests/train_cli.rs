//! mlp-train as a tool sees it, without a GPU: bad flags exit 2 as clap's do, no GPU exits 3
//! with one line, and neither writes a report line.

use std::process::Command;

use common::testing::run_without_gpu;

const BIN: &str = env!("CARGO_BIN_EXE_mlp-train");

fn scratch(name: &str) -> std::path::PathBuf {
    let p = std::env::temp_dir().join(format!("mlp-train-cli-{}-{name}.jsonl", std::process::id()));
    let _ = std::fs::remove_file(&p);
    p
}

#[test]
fn without_a_gpu_it_says_so_in_one_line_and_exits_3() {
    let report = scratch("no-gpu");
    let out = Command::new(BIN)
        .args(["--steps", "2"])
        .env("CUDA_VISIBLE_DEVICES", "")
        .env("PERF_LESSONS_REPORT", &report)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("no NVIDIA driver found") || stderr.contains("no CUDA-capable GPU found"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"));
    let written = std::fs::read_to_string(&report).unwrap_or_default();
    assert!(written.is_empty(), "no device, no line: {written}");
    let _ = std::fs::remove_file(&report);
}

#[test]
fn bad_flags_and_bad_variables_exit_2_before_any_gpu_work() {
    for (args, env) in [
        (&["--batch-size", "0"][..], None),
        (&["--amp", "fp8"], None),
        (&["--frobnicate"], None),
        (&[], Some(("PERF_LESSONS_AMP", "maybe"))),
        (&[], Some(("PERF_LESSONS_STEPS", "-4"))),
    ] {
        let mut cmd = Command::new(BIN);
        cmd.args(args).env("CUDA_VISIBLE_DEVICES", "");
        if let Some((k, v)) = env {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?} {env:?}: {stderr}");
        assert!(stderr.starts_with("error: "), "{stderr}");
    }
}

#[test]
fn an_unwritable_report_file_is_one_line_and_exit_1() {
    let out = Command::new(BIN)
        .env("CUDA_VISIBLE_DEVICES", "")
        .env("PERF_LESSONS_REPORT", "/nonexistent-dir/report.jsonl")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("PERF_LESSONS_REPORT") && stderr.trim().lines().count() == 1);
}

#[test]
fn help_names_every_flag_and_its_variable_and_version_prints() {
    let (code, _) = run_without_gpu(BIN, &["--version"]);
    assert_eq!(code, 0);
    let out = Command::new(BIN).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--batch-size",
        "--workers",
        "--amp",
        "--accumulation",
        "--steps",
        "--warmup",
        "--pin",
        "--preset",
        "--hidden",
        "--depth",
        "--optimizer",
        "--lr",
        "--device",
        "--seed",
        "--samples",
        "--cpu-cost-us",
        "--log-every",
        "--version",
    ] {
        assert!(help.contains(flag), "{flag} missing from --help:\n{help}");
    }
    for var in [
        "PERF_LESSONS_BATCH_SIZE",
        "PERF_LESSONS_WORKERS",
        "PERF_LESSONS_AMP",
        "PERF_LESSONS_ACCUMULATION",
        "PERF_LESSONS_STEPS",
        "PERF_LESSONS_WARMUP_STEPS",
        "PERF_LESSONS_REPORT",
    ] {
        assert!(help.contains(var), "{var} missing from --help:\n{help}");
    }
}
