//! The result document: JSON round trip, schema checks, and the markdown table.

use common::bench::Measurement;
use common::ceilings::CeilingRef;
use common::counters::{Traffic, Work};
use common::gpu::DeviceInfo;
use common::nvml::GpuState;
use common::report::{
    LessonReport, Metric, Provenance, Section, Status, VariantReport, SCHEMA_VERSION,
};
use common::stats::Summary;
use common::stop::StopReason;
use common::table::{unpadded, Table};
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
        group: String::new(),
        description: format!("{name} variant"),
        precision: Precision::Fp32,
        status: if passed { Status::Ok } else { Status::Failed },
        checks: vec![verification],
        work,
        traffic: Traffic::DeviceMemory,
        throughput: Some(work.throughput(summary.median / 1e3)),
        fraction_of_copy_bandwidth: Some(0.5),
        speedup: None,
        metrics: Vec::new(),
        measurement: passed.then(|| Measurement {
            samples_s: ms.iter().map(|m| m / 1e3).collect(),
            batch: 4,
            cold: false,
            held: true,
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
            cpu: None,
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
        sections: Vec::new(),
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
fn a_variant_says_where_its_bytes_move_and_older_files_mean_device_memory() {
    let mut r = report();
    r.variants[0].traffic = Traffic::HostDevice;
    let path = temp("traffic.json");
    r.write_json(&path).unwrap();
    let mut raw: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(raw["variants"][0]["traffic"], "host_device");
    assert_eq!(raw["variants"][1]["traffic"], "device_memory");
    assert_eq!(
        LessonReport::read_json(&path).unwrap().variants[0].traffic,
        Traffic::HostDevice
    );
    // A report written before the field: its bytes went through device memory.
    raw["variants"][0]
        .as_object_mut()
        .unwrap()
        .remove("traffic");
    std::fs::write(&path, raw.to_string()).unwrap();
    assert_eq!(
        LessonReport::read_json(&path).unwrap().variants[0].traffic,
        Traffic::DeviceMemory
    );
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
    let md = unpadded(&report().markdown());
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

#[test]
fn groups_metrics_checks_and_sections_are_printed_and_kept() {
    let mut r = report();
    r.variants.truncate(1);
    let mut pinned = variant("pinned", &[0.5], true);
    pinned.group = "training".into();
    pinned.speedup = Some(2.0);
    pinned.metrics = vec![Metric::new("goodput", 97.4, "%")];
    pinned
        .checks
        .push(check(&[1.0, 2.0], &[1.0, 2.0], 1e-5, "the baseline").named("loss curve"));
    r.variants.push(pinned);
    let mut grid = Table::new().left("size").right("speedup");
    grid.row(vec!["64".into(), "3.00x".into()]);
    r.sections.push(Section {
        table: Some(grid),
        lines: vec!["batching stops mattering from size 512".into()],
        data: serde_json::json!({ "crossover": 512 }),
        ..Section::new("sweep")
    });
    let md = unpadded(&r.markdown());
    assert!(
        md.contains("| group | variant | status | median |"),
        "a group column once any variant has a group: {md}"
    );
    assert!(
        md.contains("| training | pinned | ok | 500.00 us |"),
        "{md}"
    );
    assert!(
        md.contains("rel. error | loss curve error | goodput (%) |"),
        "{md}"
    );
    assert!(md.contains("| 2.00x | 0.0e0 | 0.0e0 | 97.4 |"), "{md}");
    assert!(
        md.contains("runs per sample: baseline 4, training:pinned 4"),
        "{md}"
    );
    assert!(md.contains("### sweep\n\n| size | speedup |"), "{md}");
    assert!(
        md.contains("batching stops mattering from size 512\n"),
        "{md}"
    );
    assert!(r.variant("training:pinned").is_some() && r.variant("pinned").is_none());
    let path = temp("sections.json");
    r.write_json(&path).unwrap();
    assert_eq!(LessonReport::read_json(&path).unwrap(), r);
    std::fs::remove_file(path).unwrap();
}
