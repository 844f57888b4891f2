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

#[test]
#[ignore = "needs an NVIDIA GPU and NCCL"]
fn one_rank_verifies_both_sides() {
    let json = std::env::temp_dir().join(format!("ch1-dp-{}.json", std::process::id()));
    // Small buckets, so the overlapped side reduces several of them per step.
    let (code, stdout, stderr) = run(&[
        "--devices",
        "0",
        "--hidden",
        "1024",
        "--depth",
        "3",
        "--steps",
        "8",
        "--bucket-mib",
        "1",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    let report = LessonReport::read_json(&json).unwrap();
    assert_eq!(report.variants.len(), 2);
    for v in &report.variants {
        assert_eq!(v.status, Status::Ok, "{}: {:?}", v.name, v.checks);
        let parts: Vec<&str> = v.checks.iter().map(|c| c.part.as_str()).collect();
        assert!(
            parts.contains(&"weight change") && parts.contains(&"loss curve"),
            "{parts:?}"
        );
        assert!(v.metric("samples/s").unwrap() > 0.0);
    }
    assert_eq!(report.parameters["ranks"], 1);
    assert_eq!(report.parameters["nccl_nvls_enable"], "0");
    assert!(report.parameters["buckets"].as_array().unwrap().len() > 1);
    assert!(stdout.contains("samples/s"), "{stdout}");
    let _ = std::fs::remove_file(&json);
}

#[test]
#[ignore = "needs an NVIDIA GPU and NCCL"]
fn the_allreduce_prints_every_size_from_1_mib_to_1_gib() {
    let (code, stdout, stderr) = run(&["--devices", "0", "--allreduce"]);
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
