//! The compare against fake variant programs: crashes, hangs and garbage are reported per
//! variant and the rest goes on; good reports are judged against expectations. No GPU needed.

use std::path::{Path, PathBuf};
use std::process::Command;

use common::counters::Work;
use common::gpu::DeviceInfo;
use common::report::{LessonReport, Provenance, Status, VariantReport, SCHEMA_VERSION};
use common::stats::Summary;
use common::verify::{check, Precision};

const BIN: &str = env!("CARGO_BIN_EXE_compare");

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("compare-test-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn report(variant: &str, median_ms: f64, passed: bool) -> LessonReport {
    let samples: Vec<f64> = (0..50)
        .map(|i| median_ms * (1.0 + 0.001 * ((i % 5) as f64 - 2.0)))
        .collect();
    let verification = if passed {
        check(&[1.0], &[1.0], 1e-5, "ref")
    } else {
        check(&[f32::NAN], &[1.0], 1e-5, "ref")
    };
    LessonReport {
        schema_version: SCHEMA_VERSION,
        lesson: "ch1-intensity".into(),
        device: DeviceInfo {
            ordinal: 0,
            name: "NVIDIA Fake GPU".into(),
            uuid: "GPU-fake".into(),
            compute_capability: (9, 0),
            sm_count: 1,
            total_memory_bytes: 1,
            l2_bytes: 1,
            max_sm_clock_mhz: 1,
            memory_clock_mhz: 1,
            memory_bus_width_bits: 1,
            driver_version: "0".into(),
            cuda_driver_version: "13.0".into(),
            nvrtc_version: "13.0".into(),
        },
        provenance: Provenance::now(),
        parameters: serde_json::json!({}),
        ceilings: vec![],
        variants: vec![VariantReport {
            name: variant.into(),
            group: String::new(),
            description: String::new(),
            precision: Precision::Fp32,
            status: if passed { Status::Ok } else { Status::Failed },
            checks: vec![verification],
            work: Work::default(),
            time_ms: Some(Summary::of(&samples).unwrap()),
            throughput: None,
            fraction_of_copy_bandwidth: Some(0.9),
            speedup: None,
            metrics: Vec::new(),
            measurement: None,
            note: None,
        }],
        sections: Vec::new(),
    }
}

/// A fake variant program: what it does for each variant is read from files next to it
/// (`<variant>.mode`: crash, hang, garbage, or the name of a report file to copy).
fn fake_program(d: &Path) -> PathBuf {
    let script = d.join("fake-variant.sh");
    std::fs::write(
        &script,
        r#"#!/bin/sh
# args: __run-variant LESSON VARIANT ... --json PATH
variant="$3"
for a in "$@"; do last_but_one="$prev"; prev="$a"; done
json="$prev"
echo "$@" >> "$(dirname "$0")/calls.log"
mode=$(cat "$(dirname "$0")/$variant.mode")
case "$mode" in
  crash) kill -SEGV $$ ;;
  hang) sleep 30 ;;
  garbage) echo "this is not json" > "$json"; exit 0 ;;
  *) cp "$(dirname "$0")/$mode" "$json"; exit 0 ;;
esac
"#,
    )
    .unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    script
}

fn set_mode(d: &Path, variant: &str, mode: &str) {
    std::fs::write(d.join(format!("{variant}.mode")), mode).unwrap();
}

fn put_report(d: &Path, variant: &str, median_ms: f64, passed: bool) {
    let file = format!("{variant}-report.json");
    report(variant, median_ms, passed)
        .write_json(&d.join(&file))
        .unwrap();
    set_mode(d, variant, &file);
}

fn compare(d: &Path, extra: &[&str]) -> (i32, String, String) {
    compare_pairs(d, "ch1-intensity/fusion", extra)
}

fn compare_pairs(d: &Path, filter: &str, extra: &[&str]) -> (i32, String, String) {
    let fake = fake_program(d);
    let out = Command::new(BIN)
        .args(["--filter", filter, "--timeout", "2", "--child-program"])
        .arg(&fake)
        .args(extra)
        .current_dir(d)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!stderr.contains("panicked"), "{stderr}");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).to_string(),
        stderr,
    )
}

#[test]
fn a_crash_is_that_variants_result_and_the_run_goes_on() {
    let d = dir("crash");
    set_mode(&d, "baseline", "crash");
    put_report(&d, "fused", 0.2, true);
    let (code, out, err) = compare(&d, &[]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains("ch1-intensity/baseline | ERROR: crashed (signal 11)"),
        "{out}"
    );
    assert!(out.contains("ch1-intensity/fused | ok"), "{out}");
    assert!(err.contains("crashed"), "{err}");
}

#[test]
fn a_hang_is_killed_at_the_timeout() {
    let d = dir("hang");
    set_mode(&d, "baseline", "hang");
    put_report(&d, "fused", 0.2, true);
    let started = std::time::Instant::now();
    let (code, out, _) = compare(&d, &[]);
    assert_eq!(code, 1);
    assert!(started.elapsed().as_secs() < 20, "the hang was killed");
    assert!(out.contains("timed out after 2 s (killed)"), "{out}");
}

#[test]
fn garbage_output_is_reported_not_trusted() {
    let d = dir("garbage");
    set_mode(&d, "baseline", "garbage");
    put_report(&d, "fused", 0.2, true);
    let (code, out, _) = compare(&d, &[]);
    assert_eq!(code, 1);
    assert!(
        out.contains("bad output") && out.contains("not valid JSON"),
        "{out}"
    );
}

#[test]
fn a_failed_verification_fails_the_run_and_has_no_speedup() {
    let d = dir("failed");
    put_report(&d, "baseline", 1.0, true);
    put_report(&d, "fused", 0.2, false);
    let (code, out, err) = compare(&d, &[]);
    assert_eq!(code, 1);
    assert!(out.contains("| NO |"), "{out}");
    assert!(err.contains("FAILED verification"), "{err}");
}

#[test]
fn expectations_round_trip_and_catch_a_regression() {
    let d = dir("expect");
    let exp = d.join("expectations.json");
    let exp_arg = exp.to_str().unwrap();
    put_report(&d, "baseline", 1.0, true);
    put_report(&d, "fused", 0.2, true);
    let (code, out, err) = compare(&d, &["--expectations", exp_arg, "--update-expectations"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("5.00x"), "{out}");
    assert!(out.contains("| faster (5.00x..5.00x) |"), "{out}");
    // The same figures again: SAME.
    let (code, out, _) = compare(&d, &["--expectations", exp_arg]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("| SAME |"), "{out}");
    // fused 50% slower: SLOWER, non-zero exit.
    put_report(&d, "fused", 0.3, true);
    let (code, out, err) = compare(&d, &["--expectations", exp_arg]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("| SLOWER |") && err.contains("SLOWER than expected by 50.0%"),
        "{out}{err}"
    );
    // 10% faster: FASTER, which is no failure.
    put_report(&d, "fused", 0.18, true);
    let (code, out, _) = compare(&d, &["--expectations", exp_arg]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("| FASTER |"), "{out}");
}

#[test]
fn malformed_expectations_are_a_clear_note() {
    let d = dir("malformed");
    let exp = d.join("expectations.json");
    std::fs::write(&exp, "{ broken").unwrap();
    put_report(&d, "baseline", 1.0, true);
    put_report(&d, "fused", 0.2, true);
    let (code, out, err) = compare(&d, &["--expectations", exp.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    assert!(err.contains("not valid JSON"), "{err}");
}

#[test]
fn cli_errors() {
    let out = Command::new(BIN)
        .args(["--filter", "nothing-matches-this"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--list"));
    let out = Command::new(BIN)
        .args(["--threshold", "0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = Command::new(BIN).arg("--list").output().unwrap();
    let list = String::from_utf8_lossy(&out.stdout);
    assert!(list.contains("ch1-intensity/fusion"), "{list}");
    assert!(
        list.contains("ch1-basics/pinned  (training:baseline -> training:pinned)\n    at --batch 4096 --microbatch 4096: 4 MiB copies"),
        "{list}"
    );
    // Without a GPU (CI), the real run is one line and exit 2.
    let out = Command::new(BIN)
        .env("CUDA_VISIBLE_DEVICES", "")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("no NVIDIA driver") || err.contains("no CUDA-capable GPU"),
        "{err}"
    );
}

#[test]
fn a_pair_at_other_flags_runs_both_sides_with_them_and_judges_its_effect() {
    let d = dir("flags");
    put_report(&d, "training:baseline", 12.0, true);
    put_report(&d, "training:pinned", 12.1, true);
    let (code, out, err) = compare_pairs(&d, "ch1-basics/pinned", &[]);
    assert_eq!(code, 0, "{out}{err}");
    let calls = std::fs::read_to_string(d.join("calls.log")).unwrap();
    assert_eq!(calls.lines().count(), 2, "{calls}");
    for line in calls.lines() {
        assert!(
            line.contains("--max-time 2 --batch 4096 --microbatch 4096 --json"),
            "{line}"
        );
    }
    assert!(
        out.contains("ch1-basics/pinned (training:baseline -> training:pinned) at --batch 4096 --microbatch 4096 |"),
        "{out}"
    );
    assert!(
        out.contains("ch1-basics/training:baseline --batch 4096 --microbatch 4096 | ok"),
        "{out}"
    );
    // 12.0 against 12.1 ms at 0.1% noise: clear of 1.0 but under the threshold, so no effect,
    // said with the reason the pair runs at this size.
    assert!(
        out.contains("| no effect at this size (0.99x..0.99x) |"),
        "{out}"
    );
    assert!(
        out.contains("under the 5% that counts; run at this size because: 4 MiB copies per pass"),
        "{out}"
    );
}
