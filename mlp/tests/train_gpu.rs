//! mlp-train on a GPU, as the tuner runs it: a short run reports a device line, every step
//! (phases adding up to the step, memory, GPU-busy share) and an end line, with the settings
//! given as flags or in the environment; a batch too large for the GPU ends with the
//! out-of-memory line and exit 1.
//!
//! `MLP_TRAIN_BIN` names a prebuilt binary to test (default: the one cargo built).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn bin() -> String {
    std::env::var("MLP_TRAIN_BIN").unwrap_or(env!("CARGO_BIN_EXE_mlp-train").into())
}

fn scratch(name: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("mlp-train-gpu-{}-{name}.jsonl", std::process::id()));
    let _ = std::fs::remove_file(&p);
    p
}

fn train(args: &[&str], env: &[(&str, &str)], report: &Path) -> Output {
    let out = Command::new(bin())
        .args(args)
        .envs(env.iter().copied())
        .env("PERF_LESSONS_REPORT", report)
        .output()
        .expect("mlp-train runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    out
}

fn lines(report: &Path) -> Vec<Value> {
    std::fs::read_to_string(report)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn number(v: &Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("'{key}' missing from {v}"))
}

/// The report of a run of `warmup + steps` steps of `samples` each, held to the protocol.
fn check_report(report: &Path, steps: usize, samples: u64) {
    let all = lines(report);
    let device = &all[0];
    assert_eq!(device["kind"], "device", "the device line comes first");
    assert!(!device["name"].as_str().unwrap().is_empty());
    let (total, free) = (number(device, "total_bytes"), number(device, "free_bytes"));
    assert!(total > 0.0 && free > 0.0 && free <= total, "{device}");

    let step_lines: Vec<&Value> = all.iter().filter(|l| l.get("kind").is_none()).collect();
    assert_eq!(
        step_lines.len(),
        steps,
        "one line per step, warmup included"
    );
    for s in &step_lines {
        assert_eq!(s["samples"].as_u64(), Some(samples), "{s}");
        let step = number(s, "step_s");
        let phases: f64 = ["data_s", "forward_s", "backward_s", "optimizer_s"]
            .iter()
            .map(|k| number(s, k))
            .sum();
        assert!(step > 0.0 && (phases - step).abs() <= 0.01 * step, "{s}");
        let (peak, in_use) = (
            number(s, "peak_memory_bytes"),
            number(s, "memory_in_use_bytes"),
        );
        assert!(
            peak > 0.0 && in_use > 0.0 && in_use <= peak && peak <= total,
            "{s}"
        );
        let busy = number(s, "gpu_busy");
        assert!(busy > 0.0 && busy <= 1.0, "{s}");
    }
    // Every buffer exists before the first step: the memory is steady from it.
    let peaks: Vec<f64> = step_lines
        .iter()
        .map(|s| number(s, "peak_memory_bytes"))
        .collect();
    assert!(peaks.windows(2).all(|w| w[0] == w[1]), "{peaks:?}");

    let end = all.last().unwrap();
    assert_eq!(end["kind"], "end", "{end}");
    assert!(number(end, "samples_per_s") > 0.0);
    assert!(number(end, "peak_memory_bytes") >= peaks[0]);
    let busy = number(end, "gpu_busy");
    assert!(busy > 0.0 && busy <= 1.0, "{end}");
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn a_short_run_reports_the_device_every_step_and_the_end() {
    let report = scratch("flags");
    let out = train(
        &["--steps", "6", "--warmup", "2", "--batch-size", "512"],
        &[],
        &report,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("gradient rel. L2"), "{stdout}");
    check_report(&report, 8, 512);
    let _ = std::fs::remove_file(&report);
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn the_tuner_s_variables_set_a_run_of_bf16_accumulation_and_no_workers() {
    let report = scratch("env");
    let out = train(
        &["--preset", "medium", "--optimizer", "adamw", "--pin", "off"],
        &[
            ("PERF_LESSONS_BATCH_SIZE", "256"),
            ("PERF_LESSONS_WORKERS", "0"),
            ("PERF_LESSONS_AMP", "on"),
            ("PERF_LESSONS_ACCUMULATION", "3"),
            ("PERF_LESSONS_STEPS", "4"),
            ("PERF_LESSONS_WARMUP_STEPS", "1"),
        ],
        &report,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    check_report(&report, 5, 768);
    let _ = std::fs::remove_file(&report);
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn a_batch_too_large_for_the_gpu_ends_with_the_out_of_memory_line() {
    let report = scratch("oom");
    let out = train(
        &["--batch-size", "1073741824", "--steps", "2"],
        &[],
        &report,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("CUDA_ERROR_OUT_OF_MEMORY"), "{stderr}");
    let all = lines(&report);
    assert_eq!(all[0]["kind"], "device");
    assert!(
        all.iter().skip(1).all(|l| l.get("kind").is_some()),
        "no step line"
    );
    let _ = std::fs::remove_file(&report);
}
