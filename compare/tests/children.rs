//! The compare against fake variant programs: crashes, hangs and garbage are reported per
//! variant and the rest goes on; good reports are judged against expectations. No GPU needed.

use std::path::{Path, PathBuf};
use std::process::Command;

use common::counters::{Traffic, Work};
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

/// How a fake variant was timed, and on which GPU board (a second board is a second machine).
#[derive(Clone, Copy)]
struct Timed<'a> {
    held: bool,
    gpu_uuid: &'a str,
    traffic: Traffic,
}

const DEVICE_PACED: Timed = Timed {
    held: true,
    gpu_uuid: "GPU-fake",
    traffic: Traffic::DeviceMemory,
};
const HOST_PACED: Timed = Timed {
    held: false,
    gpu_uuid: "GPU-fake",
    traffic: Traffic::DeviceMemory,
};
/// Held, and its bytes copied between host and device.
const OVER_THE_HOST_LINK: Timed = Timed {
    traffic: Traffic::HostDevice,
    ..DEVICE_PACED
};

fn measurement(samples: &[f64], timed: Timed) -> common::bench::Measurement {
    serde_json::from_value(serde_json::json!({
        "samples_s": samples.iter().map(|ms| ms / 1e3).collect::<Vec<_>>(),
        "batch": 1, "cold": false, "held": timed.held, "warmup_runs": 1,
        "stop_reason": "converged", "wall_s": 0.1,
        "before": {}, "after": {}, "clock_dropped": false, "hold_timeouts": 0
    }))
    .unwrap()
}

fn report(variant: &str, median_ms: f64, passed: bool) -> LessonReport {
    timed_report(variant, median_ms, passed, DEVICE_PACED)
}

fn timed_report(variant: &str, median_ms: f64, passed: bool, timed: Timed) -> LessonReport {
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
            uuid: timed.gpu_uuid.into(),
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
            traffic: timed.traffic,
            time_ms: Some(Summary::of(&samples).unwrap()),
            throughput: None,
            fraction_of_copy_bandwidth: Some(0.9),
            speedup: None,
            metrics: Vec::new(),
            measurement: Some(measurement(&samples, timed)),
            note: None,
        }],
        sections: Vec::new(),
    }
}

/// A folder of fake lesson binaries, one per lesson, in `d/lessons`: what one does for its
/// variants (`--variants`) is read from files in `d`: crash, hang, garbage, or the name of a
/// report file to copy. The first file found of `<variant>-planted.mode` (when the call has
/// `--plant-slowdown`), `<variant>-dev<N>-<K>.mode` (the K-th call, from 0, of these variants
/// on `--device N`), `<variant>-dev<N>.mode` and `<variant>.mode` says. Several variants at
/// once (`baseline,fused`) read `baseline,fused.mode`; without one, the program fails without a
/// report, and the compare runs each variant on its own. Each call is a line of `d/calls.log`:
/// the lesson, then its arguments.
fn fake_lessons(d: &Path) -> PathBuf {
    let script = r#"#!/bin/sh
# args: --variants VARIANT[,VARIANT...] ... --json PATH
here="$(dirname "$0")/.."
variant=""; dev=""; p=""
for a in "$@"; do
  [ "$p" = "--variants" ] && variant="$a"
  [ "$p" = "--device" ] && dev="$a"
  p="$a"
done
json="$p"
calls=$(grep -c -- "--variants $variant --device $dev " "$here/calls.log" 2>/dev/null)
echo "$(basename "$0") $*" >> "$here/calls.log"
mode_file="$here/$variant-dev$dev-${calls:-0}.mode"
case " $* " in *" --plant-slowdown "*) [ -f "$here/$variant-planted.mode" ] && mode_file="$here/$variant-planted.mode" ;; esac
[ -f "$mode_file" ] || mode_file="$here/$variant-dev$dev.mode"
[ -f "$mode_file" ] || mode_file="$here/$variant.mode"
if [ ! -f "$mode_file" ]; then echo "error: no fake report for $variant" >&2; exit 1; fi
mode=$(cat "$mode_file")
case "$mode" in
  crash) kill -SEGV $$ ;;
  hang) sleep 30 ;;
  garbage) echo "this is not json" > "$json"; exit 0 ;;
  *) cp "$here/$mode" "$json"; exit 0 ;;
esac
"#;
    let lessons = d.join("lessons");
    std::fs::create_dir_all(&lessons).unwrap();
    for lesson in compare::lessons::LESSONS {
        let bin = lessons.join(lesson);
        std::fs::write(&bin, script).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    lessons
}

fn set_mode(d: &Path, variant: &str, mode: &str) {
    std::fs::write(d.join(format!("{variant}.mode")), mode).unwrap();
}

fn put_report(d: &Path, variant: &str, median_ms: f64, passed: bool) {
    put(d, variant, report(variant, median_ms, passed));
}

fn put_timed(d: &Path, variant: &str, median_ms: f64, timed: Timed) {
    put(d, variant, timed_report(variant, median_ms, true, timed));
}

/// One report of several variants, handed back when they run in one process.
fn put_together(d: &Path, variants: &[(&str, f64)]) {
    let mut together = report(variants[0].0, variants[0].1, true);
    for (variant, median_ms) in &variants[1..] {
        together
            .variants
            .extend(report(variant, *median_ms, true).variants);
    }
    let names: Vec<&str> = variants.iter().map(|(v, _)| *v).collect();
    put(d, &names.join(","), together);
}

/// The report the fake program hands back for `variant`.
fn put(d: &Path, variant: &str, report: LessonReport) {
    let file = format!("{variant}-report.json");
    report.write_json(&d.join(&file)).unwrap();
    set_mode(d, variant, &file);
}

fn compare(d: &Path, extra: &[&str]) -> (i32, String, String) {
    compare_pairs(d, "ch1-intensity/fusion", extra)
}

fn compare_pairs(d: &Path, filter: &str, extra: &[&str]) -> (i32, String, String) {
    let fake = fake_lessons(d);
    let out = Command::new(BIN)
        .args(["--filter", filter, "--timeout", "2", "--lessons-dir"])
        .arg(&fake)
        .args(extra)
        .current_dir(d)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!stderr.contains("panicked"), "{stderr}");
    (
        out.status.code().unwrap_or(-1),
        common::table::unpadded(&String::from_utf8_lossy(&out.stdout)),
        stderr,
    )
}

#[test]
fn a_process_that_fails_is_run_again_one_variant_at_a_time() {
    let d = dir("fallback");
    set_mode(&d, "baseline,fused", "crash");
    put_report(&d, "baseline", 1.0, true);
    put_report(&d, "fused", 0.2, true);
    let json = d.join("out.json");
    let (code, out, err) = compare(&d, &["--json", json.to_str().unwrap(), "--phases"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        err.contains("note: ch1-intensity (baseline, fused) in one process: crashed (signal 11); each runs in a process of its own"),
        "{err}"
    );
    assert!(out.contains("ch1-intensity/fused | ok"), "{out}");
    let calls = std::fs::read_to_string(d.join("calls.log")).unwrap();
    let firsts: Vec<&str> = calls
        .lines()
        .map(|l| l.split(' ').nth(2).unwrap())
        .collect();
    assert_eq!(firsts, ["baseline,fused", "baseline", "fused"]);
    // The table of phases names every process, the failed one too (no phases to show).
    assert!(out.contains("### where the time went (seconds)"), "{out}");
    assert!(out.contains("| ch1-intensity (baseline, fused) |"), "{out}");
    assert!(out.contains("| ch1-intensity (fused) |"), "{out}");
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(written["children"].as_array().unwrap().len(), 3);
    assert_eq!(written["ceilings_time"]["what"], "cached");
    // What was read ahead for the children is kept, and said under the phases.
    assert!(written["read_ahead"]["files"].is_array(), "{written}");
    assert!(out.contains("read ahead: "), "{out}");
    // With --isolate, one process per variant from the start.
    std::fs::remove_file(d.join("calls.log")).unwrap();
    let (code, _, _) = compare(&d, &["--isolate"]);
    assert_eq!(code, 0);
    let calls = std::fs::read_to_string(d.join("calls.log")).unwrap();
    assert_eq!(calls.lines().count(), 2, "{calls}");
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
fn compare_takes_the_shared_flags_and_says_its_version() {
    common::testing::assert_accepts_shared_flags(BIN);
    common::testing::assert_prints_version(BIN);
}

#[test]
fn cli_errors() {
    let out = Command::new(BIN)
        .args(["--filter", "nothing-matches-this"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "a filter naming nothing is bad usage"
    );
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
    // Without a GPU (CI), the real run is one line and exit 3.
    let out = Command::new(BIN)
        .env("CUDA_VISIBLE_DEVICES", "")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains("no NVIDIA driver") || err.contains("no CUDA-capable GPU"),
        "{err}"
    );
}

#[test]
fn a_pair_at_other_flags_runs_both_sides_with_them_and_judges_its_effect() {
    let d = dir("flags");
    put_together(
        &d,
        &[("training:baseline", 12.0), ("training:pinned", 12.1)],
    );
    let (code, out, err) = compare_pairs(&d, "ch1-basics/pinned", &[]);
    assert_eq!(code, 0, "{out}{err}");
    let calls = std::fs::read_to_string(d.join("calls.log")).unwrap();
    assert_eq!(
        calls.lines().count(),
        1,
        "both sides in one process: {calls}"
    );
    assert!(
        calls.starts_with("ch1-basics --variants training:baseline,training:pinned "),
        "{calls}"
    );
    assert!(
        calls.contains("--measure-only --batch 4096 --microbatch 4096 --json"),
        "{calls}"
    );
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

/// The verdict line of `variant` in the variant table, e.g. "| SAME |".
fn verdict_of(out: &str, variant: &str) -> String {
    let row = out
        .lines()
        .find(|l| l.starts_with(&format!("| ch1-intensity/{variant} |")))
        .unwrap_or_else(|| panic!("no row for {variant} in\n{out}"));
    row.rsplit('|').nth(1).unwrap().trim().to_string()
}

#[test]
fn without_expectations_every_verdict_is_no_expectation_and_passes() {
    let d = dir("none");
    put_report(&d, "baseline", 1.0, true);
    put_timed(&d, "fused", 0.2, HOST_PACED);
    let exp = d.join("missing.json");
    let (code, out, err) = compare(&d, &["--expectations", exp.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(verdict_of(&out, "baseline"), "NO EXPECTATION");
    assert_eq!(verdict_of(&out, "fused"), "NO EXPECTATION");
    assert!(out.contains("no expectations for this GPU model"), "{out}");
    assert!(out.contains("gate: 0 judged; 2 NO EXPECTATION"), "{out}");
    assert!(out.contains("| ch1-intensity/fused | ok | host |"), "{out}");
}

#[test]
fn device_paced_variants_are_judged_by_the_gpu_model_on_any_machine() {
    let d = dir("device");
    let exp = d.join("expectations.json");
    let exp = exp.to_str().unwrap();
    put_report(&d, "baseline", 1.0, true);
    put_report(&d, "fused", 0.2, true);
    let (code, _, _) = compare(&d, &["--expectations", exp, "--update-expectations"]);
    assert_eq!(code, 0);
    // Another board of the same model: a device-paced variant is still judged.
    let other = Timed {
        gpu_uuid: "GPU-second-machine",
        ..DEVICE_PACED
    };
    put_timed(&d, "baseline", 1.0, other);
    put_timed(&d, "fused", 0.3, other);
    let (code, out, err) = compare(&d, &["--expectations", exp]);
    assert_eq!(code, 1, "{out}{err}");
    assert_eq!(verdict_of(&out, "baseline"), "SAME");
    assert_eq!(verdict_of(&out, "fused"), "SLOWER");
    assert!(err.contains("ch1-intensity/fused: SLOWER"), "{err}");
}

#[test]
fn host_paced_variants_are_judged_by_their_runs_on_this_machine() {
    let d = dir("host");
    let exp = d.join("expectations.json");
    let exp = exp.to_str().unwrap();
    put_report(&d, "baseline", 1.0, true);
    // Recorded: five processes at 0.20, 0.21, 0.19, 0.20 and 0.22 ms, about 5% apart.
    put_timed(&d, "fused", 0.20, HOST_PACED);
    let (code, out, _) = compare(&d, &["--expectations", exp, "--update-expectations"]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(verdict_of(&out, "fused"), "NO EXPECTATION");
    // One run recorded: its run-to-run noise is not known yet.
    put_timed(&d, "fused", 0.21, HOST_PACED);
    let (code, out, _) = compare(&d, &["--expectations", exp, "--update-expectations"]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(verdict_of(&out, "fused"), "UNSURE");
    assert!(
        out.contains("1 of 3 runs recorded on this machine"),
        "{out}"
    );
    for ms in [0.19, 0.20, 0.22] {
        put_timed(&d, "fused", ms, HOST_PACED);
        let (code, _, _) = compare(&d, &["--expectations", exp, "--update-expectations"]);
        assert_eq!(code, 0);
    }
    // 20% slower than their center is inside their own spread: the same. (The device-paced
    // rule, at this run's 0.1% noise, would call it SLOWER.)
    put_timed(&d, "fused", 0.24, HOST_PACED);
    let (code, out, err) = compare(&d, &["--expectations", exp]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(verdict_of(&out, "fused"), "SAME");
    // Four times slower is not.
    put_timed(&d, "fused", 0.8, HOST_PACED);
    let (code, out, err) = compare(&d, &["--expectations", exp]);
    assert_eq!(code, 1, "{out}");
    assert_eq!(verdict_of(&out, "fused"), "SLOWER");
    assert!(err.contains("ch1-intensity/fused: SLOWER"), "{err}");
    // Four times faster is news, not a failure.
    put_timed(&d, "fused", 0.05, HOST_PACED);
    let (code, out, _) = compare(&d, &["--expectations", exp]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(verdict_of(&out, "fused"), "FASTER");
    // On a second machine of the same GPU model the host-paced variant has no expectation,
    // however slow it runs; the device-paced baseline is judged as ever.
    let second = Timed {
        gpu_uuid: "GPU-second-machine",
        ..HOST_PACED
    };
    put_timed(
        &d,
        "baseline",
        1.0,
        Timed {
            held: true,
            ..second
        },
    );
    put_timed(&d, "fused", 0.8, second);
    let (code, out, err) = compare(&d, &["--expectations", exp]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(verdict_of(&out, "fused"), "NO EXPECTATION");
    assert_eq!(verdict_of(&out, "baseline"), "SAME");
    assert!(
        out.contains("no run of it was recorded on this machine"),
        "{out}"
    );
}

#[test]
fn an_update_accepts_a_slower_figure() {
    let d = dir("accept");
    let exp = d.join("expectations.json");
    let exp = exp.to_str().unwrap();
    put_report(&d, "baseline", 1.0, true);
    put_report(&d, "fused", 0.2, true);
    compare(&d, &["--expectations", exp, "--update-expectations"]);
    put_report(&d, "fused", 0.3, true);
    let (code, out, err) = compare(&d, &["--expectations", exp, "--update-expectations"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(verdict_of(&out, "fused"), "SLOWER");
    assert!(
        out.contains("accepted: ch1-intensity/fused: SLOWER"),
        "{out}"
    );
    // ... and judges the next run by it.
    let (code, out, _) = compare(&d, &["--expectations", exp]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(verdict_of(&out, "fused"), "SAME");
}

/// `compare --devices 0,1`: one compare per GPU at once, each GPU's table, then the fleet check;
/// the fake GPU 1 runs the fused kernel 10% slower and is flagged, and a fleet in step passes.
#[test]
fn the_fleet_flags_a_gpu_off_its_peers() {
    let d = dir("fleet");
    put_report(&d, "baseline", 1.0, true);
    put_report(&d, "fused", 0.2, true);
    let json = d.join("fleet.json");
    let (code, out, err) = compare(
        &d,
        &[
            "--devices",
            "0,1",
            "--phases",
            "--json",
            json.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("# GPU 0") && out.contains("# GPU 1"), "{out}");
    // Each GPU's phases table, after its table.
    assert_eq!(out.matches("### where the time went").count(), 2, "{out}");
    assert!(out.contains("## The fleet"), "{out}");
    assert!(out.contains("| ch1-intensity/fused | device |"), "{out}");
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(written["members"].as_array().unwrap().len(), 2);
    let calls = std::fs::read_to_string(d.join("calls.log")).unwrap();
    assert!(
        calls.contains("--device 0") && calls.contains("--device 1"),
        "{calls}"
    );

    let file = "fused-slow-report.json";
    report("fused", 0.22, true)
        .write_json(&d.join(file))
        .unwrap();
    set_mode(&d, "fused-dev1", file);
    let (code, out, err) = compare(&d, &["--devices", "0,1", "--fleet-bar", "3"]);
    assert_eq!(code, 1, "{out}{err}");
    // Two GPUs: each is 4.8% off their median, and which one is off is not for two to say.
    assert!(
        err.contains("error: GPU 1: ch1-intensity/fused is 4.8% slower"),
        "{err}"
    );
    assert!(
        err.contains("error: GPU 0: ch1-intensity/fused is 4.8% faster"),
        "{err}"
    );
    // The bar is the smallest change that counts unless given: 5% lets 4.8% pass, 3% does not.
    let (code, out, err) = compare(&d, &["--devices", "0,1"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("more than 5.0% off its peers' median"),
        "{out}"
    );
    let (code, out, err) = compare(&d, &["--devices", "0,1", "--threshold", "3"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("ch1-intensity/fused is 4.8% slower"), "{err}");
}

/// One report of the double-buffering pair (its bytes copied over the host link), handed back
/// to the `call`-th run of the pair on GPU `dev` (all calls when None), or when planted.
fn put_pipeline(d: &Path, serial_ms: f64, dev: Option<usize>, call: Option<usize>) {
    let names = "pipeline:serial,pipeline:overlapped";
    let mut r = timed_report("pipeline:serial", serial_ms, true, OVER_THE_HOST_LINK);
    r.variants
        .extend(timed_report("pipeline:overlapped", 0.5, true, OVER_THE_HOST_LINK).variants);
    let which = match (dev, call) {
        (Some(g), Some(k)) => format!("{names}-dev{g}-{k}"),
        (Some(g), None) => format!("{names}-dev{g}"),
        _ => names.to_string(),
    };
    let file = format!("{which}-report.json");
    r.write_json(&d.join(&file)).unwrap();
    set_mode(d, &which, &file);
}

/// `compare --devices 0,1` on a device-bound pair and a pair whose copies cross the host link:
/// the copying pair runs again one GPU at a time and is judged by those runs, in the fleet and
/// in each GPU's own gate, so the slowdown the GPUs' shared host gives it at once is no alarm
/// and no error line; a slowdown planted on one GPU is.
#[test]
fn the_fleet_runs_copies_over_the_host_link_one_gpu_at_a_time() {
    let d = dir("fleet-alone");
    put_together(&d, &[("baseline", 1.0), ("fused", 0.2)]);
    put_pipeline(&d, 1.0, None, None);
    let exp = d.join("expectations.json");
    let exp = exp.to_str().unwrap();
    let filter = ["--filter", "ch1-basics/double-buffering"];
    let record = ["--expectations", exp, "--update-expectations"];
    let (code, out, err) = compare(&d, &[&filter[..], &record[..]].concat());
    assert_eq!(code, 0, "{out}{err}");
    std::fs::remove_file(d.join("calls.log")).unwrap();
    // At once, GPU 1's copies wait on GPU 0's: 30% slower than its model's expected figure,
    // SLOWER by its gate. Alone, the two are in step and as expected.
    put_pipeline(&d, 1.3, Some(1), Some(0));
    let json = d.join("fleet.json");
    let pairs = [
        "--filter",
        "ch1-basics/double-buffering",
        "--devices",
        "0,1",
        "--expectations",
        exp,
    ];
    let (code, out, err) = compare(
        &d,
        &[&pairs[..], &["--json", json.to_str().unwrap()]].concat(),
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        !err.contains("SLOWER") && !out.contains("| SLOWER"),
        "{out}{err}"
    );
    assert!(
        out.contains("taken with this GPU alone, after the others: ch1-basics/double-buffering"),
        "{out}"
    );
    assert!(
        out.contains("| ch1-basics/pipeline:serial | device | one at a time | 1.000 ms (+0.0%) | 1.000 ms (+0.0%) |"),
        "{out}"
    );
    assert!(
        out.contains("| ch1-intensity/fused | device | at once |"),
        "{out}"
    );
    assert!(out.contains("fleet wall time: "), "{out}");
    // The device-bound pair ran once per GPU, the copying pair twice (at once, then alone),
    // the second time with a filter of its own in place of the run's.
    let calls = std::fs::read_to_string(d.join("calls.log")).unwrap();
    let count = |what: &str| calls.lines().filter(|l| l.contains(what)).count();
    assert_eq!(count("--variants baseline,fused "), 2, "{calls}");
    assert_eq!(
        count("--variants pipeline:serial,pipeline:overlapped --device 1 "),
        2,
        "{calls}"
    );
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let time = &written["time"];
    assert!(time["wall_s"].as_f64().unwrap() >= time["at_once_s"].as_f64().unwrap());
    assert!(time["alone_s"].as_f64().unwrap() > 0.0);
    let serial = written["fleet"]["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["variant"] == "ch1-basics/pipeline:serial")
        .unwrap();
    assert_eq!(serial["taken"], "alone");
    // The pair's rows in GPU 1's compare are the ones run alone.
    let gpu1 = &written["members"][1]["report"]["pairs"];
    let row = gpu1
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["id"] == "ch1-basics/double-buffering")
        .unwrap();
    assert!(
        (row["baseline_s"].as_f64().unwrap() - 1.0e-3).abs() < 1e-9,
        "{row}"
    );

    // Extra work planted on GPU 1's copying pair: caught when the GPUs run one at a time.
    std::fs::remove_file(d.join("calls.log")).unwrap();
    let mut slow = timed_report("pipeline:serial", 2.0, true, OVER_THE_HOST_LINK);
    slow.variants
        .extend(timed_report("pipeline:overlapped", 0.5, true, OVER_THE_HOST_LINK).variants);
    slow.write_json(&d.join("planted.json")).unwrap();
    set_mode(
        &d,
        "pipeline:serial,pipeline:overlapped-planted",
        "planted.json",
    );
    let plant = [
        "--plant-slowdown",
        "ch1-basics/pipeline:serial",
        "--plant-on",
        "1",
    ];
    let (code, out, err) = compare(&d, &[&pairs[..], &plant[..]].concat());
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains("error: GPU 1: ch1-basics/pipeline:serial is 33.3% slower than the median"),
        "{err}"
    );
    let calls = std::fs::read_to_string(d.join("calls.log")).unwrap();
    for line in calls.lines() {
        assert_eq!(
            line.contains("--plant-slowdown"),
            line.contains("--device 1 ") && line.contains("pipeline:serial"),
            "{calls}"
        );
    }
}

#[test]
fn a_fleet_run_takes_no_expectations_update_and_names_its_gpus() {
    let d = dir("fleet-flags");
    let (code, _, err) = compare(&d, &["--devices", "0,1", "--update-expectations"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--update-expectations"), "{err}");
    let (code, _, err) = compare(&d, &["--devices", "0,0"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("GPU 0 is named twice"), "{err}");
    let (code, _, err) = compare(
        &d,
        &[
            "--devices",
            "0,1",
            "--plant-slowdown",
            "a/b",
            "--plant-on",
            "2",
        ],
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--plant-on 2: GPU 2 is not one of --devices"),
        "{err}"
    );
    let (code, _, err) = compare(&d, &["--devices", "0", "--fleet-bar", "0"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.starts_with("error: invalid value '0' for '--fleet-bar"),
        "{err}"
    );
}

#[test]
fn a_missing_lesson_binary_is_one_line_naming_the_build() {
    let d = dir("missing");
    let empty = d.join("no-lessons-here");
    std::fs::create_dir_all(&empty).unwrap();
    let out = Command::new(BIN)
        .args(["--filter", "ch1-gemm", "--lessons-dir"])
        .arg(&empty)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains("finds no ch1-gemm in") && err.contains("`cargo build --release`"),
        "{err}"
    );
}
