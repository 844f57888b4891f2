//! GPU tests: run on a machine with an NVIDIA GPU and NCCL with `cargo test -- --ignored`. One
//! GPU is enough: one rank verifies against the one-GPU run, and the all-reduce path runs.

use std::process::Command;

use common::report::{LessonReport, Status};

/// The binary: beside the test, or where CH1_DATA_PARALLEL_BIN says (on a GPU machine the
/// binary travels apart from the build tree).
fn bin() -> String {
    std::env::var("CH1_DATA_PARALLEL_BIN").unwrap_or(env!("CARGO_BIN_EXE_ch1-data-parallel").into())
}

fn run(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(bin()).args(args).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

/// A small model trained on `devices` (with `extra` flags); small buckets, so the overlapped
/// side reduces several of them per step. The exit code, the report and the output.
fn small_run(devices: &str, extra: &[&str], name: &str) -> (Option<i32>, LessonReport, String) {
    let json = std::env::temp_dir().join(format!("ch1-dp-{}-{name}.json", std::process::id()));
    let mut args = vec![
        "--devices",
        devices,
        "--hidden",
        "1024",
        "--depth",
        "3",
        "--steps",
        "8",
        "--bucket-mib",
        "1",
        "--json",
    ];
    args.push(json.to_str().unwrap());
    args.extend(extra);
    let (code, stdout, stderr) = run(&args);
    let report =
        LessonReport::read_json(&json).unwrap_or_else(|e| panic!("{e}\n{stdout}\n{stderr}"));
    let _ = std::fs::remove_file(&json);
    (code, report, format!("{stdout}\n{stderr}"))
}

#[test]
#[ignore = "needs an NVIDIA GPU and NCCL"]
fn one_rank_verifies_both_sides() {
    let (code, report, stdout) = small_run("0", &[], "one");
    assert_eq!(code, Some(0), "{stdout}");
    assert_eq!(report.variants.len(), 2);
    for v in &report.variants {
        assert_eq!(v.status, Status::Ok, "{}: {:?}", v.name, v.checks);
        let parts: Vec<&str> = v.checks.iter().map(|c| c.part.as_str()).collect();
        for part in ["first gradient", "weight change", "loss curve"] {
            assert!(parts.contains(&part), "{part}: {parts:?}");
        }
        assert!(v.metric("samples/s").unwrap() > 0.0);
    }
    assert_eq!(report.parameters["ranks"], 1);
    assert_eq!(report.parameters["nccl_nvls_enable"], "0");
    assert!(report.parameters["buckets"].as_array().unwrap().len() > 1);
    assert!(stdout.contains("samples/s"), "{stdout}");
}

/// A small run over every GPU (two or more), optionally with a planted fault.
fn small_run_on_every_gpu(fault: Option<&str>) -> (Option<i32>, LessonReport, String) {
    let extra: Vec<&str> = match fault {
        Some(f) => vec!["--quick", "--plant-fault", f],
        None => vec!["--quick"],
    };
    let name = format!("all-{}", fault.unwrap_or("none").replace(':', "-"));
    let (code, report, out) = small_run("all", &extra, &name);
    let ranks = report.parameters["ranks"].as_u64().unwrap();
    assert!(
        ranks >= 2,
        "this test needs two GPUs or more; the host has {ranks}"
    );
    (code, report, out)
}

fn error_of(report: &LessonReport, variant: &str, part: &str) -> f64 {
    let v = report.variants.iter().find(|v| v.name == variant).unwrap();
    v.checks
        .iter()
        .find(|c| c.part == part && c.against.starts_with("one GPU"))
        .unwrap_or_else(|| panic!("{variant}: no {part} check: {:?}", v.checks))
        .rel_l2_error
}

#[test]
#[ignore = "needs two NVIDIA GPUs or more and NCCL"]
fn every_gpu_verifies_both_sides_and_the_first_gradient_is_exact_to_the_sum_order() {
    let (code, report, out) = small_run_on_every_gpu(None);
    assert_eq!(code, Some(0), "{out}");
    let ranks = report.parameters["ranks"].as_u64().unwrap();
    for side in ["baseline", "optimized"] {
        let v = report.variants.iter().find(|v| v.name == side).unwrap();
        assert_eq!(v.status, Status::Ok, "{side}: {:?}", v.checks);
        let first = error_of(&report, side, "first gradient");
        assert!(first <= 1e-5, "{side}: {first:e}");
        if ranks == 2 {
            // Two shares add up the same in either order: the ranks' arithmetic is the
            // reference's, bit for bit.
            assert_eq!(first, 0.0, "{side}");
            assert_eq!(error_of(&report, side, "weight change"), 0.0, "{side}");
        }
    }
}

#[test]
#[ignore = "needs two NVIDIA GPUs or more and NCCL"]
fn a_rank_s_gradient_missing_or_counted_twice_fails_both_sides() {
    for fault in ["missing:1", "twice:1"] {
        let (code, report, out) = small_run_on_every_gpu(Some(fault));
        assert_eq!(code, Some(1), "{fault}: {out}");
        for side in ["baseline", "optimized"] {
            let v = report.variants.iter().find(|v| v.name == side).unwrap();
            assert_eq!(v.status, Status::Failed, "{fault} {side}");
            let first = error_of(&report, side, "first gradient");
            assert!(first > 1e-2, "{fault} {side}: {first:e}");
        }
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU and NCCL"]
fn the_allreduce_prints_every_size_from_1_mib_to_1_gib() {
    let (code, stdout, stderr) = run(&["--devices", "0", "--allreduce", "--max-size", "1G"]);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    for size in ["1 MiB", "4 MiB", "16 MiB", "64 MiB", "256 MiB", "1024 MiB"] {
        assert!(
            stdout.contains(&format!("| {size}")) || stdout.contains(size),
            "{size}: {stdout}"
        );
    }
    assert!(
        stdout.contains("undefined"),
        "one rank has no busbw: {stdout}"
    );
    assert!(!stdout.contains("FAILED"), "{stdout}");
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn a_gpu_that_is_not_there_is_one_line() {
    let (code, _, stderr) = run(&["--devices", "99"]);
    // A GPU ordinal that does not exist is bad usage, as every binary of the workspace has it.
    assert_eq!(code, Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("GPU 99 is not visible"), "{stderr}");
}
