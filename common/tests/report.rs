//! The result document: JSON round trip, schema checks, and the markdown table.

use common::bench::Measurement;
use common::counters::Work;
use common::gpu::DeviceInfo;
use common::nvml::GpuState;
use common::report::{CeilingRef, LessonReport, Provenance, Status, VariantReport, SCHEMA_VERSION};
use common::stats::Summary;
use common::stop::StopReason;
use common::verify::{check, Precision};

fn device() -> DeviceInfo {
    common::testing::h200_info()
}

fn variant(name: &str, ms: &[f64], passed: bool) -> VariantReport {
    let work = Work::elementwise_f32(1 << 20, 2, 1, 1);
    let summary = Summary::of(ms).unwrap();
    let verification = if passed {
        check(&[1.0, 2.0], &[1.0, 2.0], 1e-5, "float64 CPU reference")
    } else {
        check(&[1.0, f32::NAN], &[1.0, 2.0], 1e-5, "float64 CPU reference")
    };
    VariantReport {
        name: name.into(),
        description: format!("{name} variant"),
        precision: Precision::Fp32,
        status: if passed { Status::Ok } else { Status::Failed },
        verification,
        work,
        throughput: Some(work.throughput(summary.median / 1e3)),
        fraction_of_copy_bandwidth: Some(0.5),
        speedup: None,
        measurement: passed.then(|| Measurement {
            samples_s: ms.iter().map(|m| m / 1e3).collect(),
            batch: 4,
            cold: false,
            warmup_runs: 3,
            stop_reason: StopReason::Converged,
            wall_s: 0.3,
            before: GpuState {
                sm_clock_mhz: Some(1980),
                ..GpuState::default()
            },
            after: GpuState {
                sm_clock_mhz: Some(1980),
                ..GpuState::default()
            },
            clock_dropped: false,
            hold_timeouts: 0,
            trace: None,
        }),
        time_ms: passed.then_some(summary),
        note: None,
    }
}

fn report() -> LessonReport {
    LessonReport {
        schema_version: SCHEMA_VERSION,
        lesson: "ch1-test".into(),
        device: device(),
        provenance: Provenance::now(),
        parameters: serde_json::json!({ "n": 1048576 }),
        ceilings: vec![CeilingRef {
            name: "measured copy bandwidth".into(),
            value: 4200.0,
            unit: "GB/s".into(),
            method: "copy kernel".into(),
            candidates: vec![("copy kernel".into(), 4200.0), ("memcpy".into(), 4100.0)],
        }],
        variants: vec![
            variant("baseline", &[1.0, 1.1, 0.9], true),
            variant("broken", &[1.0], false),
        ],
    }
}

fn temp(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("perf-lessons-{}-{name}", std::process::id()))
}

#[test]
fn json_round_trip_keeps_everything() {
    let r = report();
    let path = temp("round-trip.json");
    r.write_json(&path).unwrap();
    let back = LessonReport::read_json(&path).unwrap();
    assert_eq!(back, r);
    let raw: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(raw["schema_version"], SCHEMA_VERSION);
    assert_eq!(raw["variants"][1]["status"], "FAILED");
    assert_eq!(
        raw["variants"][0]["measurement"]["samples_s"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
    assert!(raw["provenance"]["git_commit"].as_str().is_some());
    std::fs::remove_file(path).unwrap();
}

#[test]
fn wrong_schema_version_is_refused_with_advice() {
    let path = temp("old-schema.json");
    let mut raw = serde_json::to_value(report()).unwrap();
    raw["schema_version"] = serde_json::json!(SCHEMA_VERSION + 1);
    std::fs::write(&path, raw.to_string()).unwrap();
    let err = LessonReport::read_json(&path).unwrap_err().to_string();
    assert!(
        err.contains("schema version") && err.contains("re-run"),
        "{err}"
    );
    std::fs::remove_file(path).unwrap();
}

#[test]
fn malformed_and_missing_files_say_so() {
    let path = temp("malformed.json");
    std::fs::write(&path, "{ not json").unwrap();
    let err = LessonReport::read_json(&path).unwrap_err().to_string();
    assert!(err.contains("not valid JSON"), "{err}");
    std::fs::write(&path, r#"{"hello": 1}"#).unwrap();
    let err = LessonReport::read_json(&path).unwrap_err().to_string();
    assert!(err.contains("no schema_version"), "{err}");
    std::fs::write(&path, format!(r#"{{"schema_version": {SCHEMA_VERSION}}}"#)).unwrap();
    let err = LessonReport::read_json(&path).unwrap_err().to_string();
    assert!(err.contains("not a perf-lessons result"), "{err}");
    std::fs::remove_file(&path).unwrap();
    let err = LessonReport::read_json(&path).unwrap_err().to_string();
    assert!(err.contains("cannot read"), "{err}");
}

#[test]
fn markdown_names_the_gpu_the_mode_and_the_failure() {
    let md = report().markdown();
    assert!(md.contains("ch1-test on NVIDIA H200"), "{md}");
    assert!(md.contains("| variant | status | median |"));
    assert!(md.contains("| baseline | ok | 1.000 ms |"), "{md}");
    assert!(md.contains("| broken | FAILED |"));
    assert!(
        md.contains("hot (L2 warm, runs queued back-to-back"),
        "{md}"
    );
    assert!(md.contains("runs per sample: baseline 4"), "{md}");
    assert!(md.contains("FAILED: broken"));
    assert!(md.contains("measured copy bandwidth: 4200 GB/s"));
    assert!(!report().all_passed());
}
