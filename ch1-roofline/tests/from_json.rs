//! The no-GPU path: re-drawing a saved roofline, and refusing bad files clearly. Runs in CI.

use std::path::{Path, PathBuf};
use std::process::Command;

use ch1_roofline::report::{place_operations, sections, LESSON};
use ch1_roofline::roofs_from;
use common::ceilings::{Ceiling, DeviceCeilings};
use common::counters::Work;
use common::gpu::DeviceInfo;
use common::report::{LessonReport, Provenance, VariantReport, SCHEMA_VERSION};
use common::stats::Summary;
use common::verify::{check, Precision};

const BIN: &str = env!("CARGO_BIN_EXE_ch1-roofline");

fn device() -> DeviceInfo {
    DeviceInfo {
        ordinal: 0,
        name: "NVIDIA Test GPU".into(),
        uuid: "GPU-test".into(),
        compute_capability: (9, 0),
        sm_count: 132,
        total_memory_bytes: 80 << 30,
        l2_bytes: 50 << 20,
        max_sm_clock_mhz: 1980,
        memory_clock_mhz: 2619,
        memory_bus_width_bits: 5120,
        driver_version: "580.00".into(),
        cuda_driver_version: "13.0".into(),
        nvrtc_version: "13.0".into(),
    }
}

fn ceiling(value: f64, unit: &str) -> Ceiling {
    Ceiling {
        value,
        unit: unit.into(),
        method: "test fixture".into(),
        time_s: Summary::of(&[1e-3]).unwrap(),
        candidates: vec![("test fixture".into(), value)],
        theoretical: None,
        sm_clock_mhz: Some(1980),
        verification_error: None,
    }
}

fn ceilings() -> DeviceCeilings {
    let mut c = DeviceCeilings::empty(&device());
    c.copy_bandwidth = Some(ceiling(3000.0, "GB/s"));
    c.read_bandwidth = Some(ceiling(3100.0, "GB/s"));
    c.fp32_fma = Some(ceiling(60_000.0, "GFLOP/s"));
    c.gemm_tf32 = Some(ceiling(350_000.0, "GFLOP/s"));
    c.gemm_bf16 = Some(ceiling(650_000.0, "GFLOP/s"));
    c
}

/// An operation as the runner reports it: verified, timed at `seconds` per run (0.1% noise).
fn variant(
    family: &str,
    label: &str,
    precision: Precision,
    work: Work,
    seconds: f64,
) -> VariantReport {
    let ok = check(
        &[1.0f32],
        &[1.0],
        1e-5,
        "float64 reference at sampled elements",
    );
    let mut v = VariantReport::checked(family, "fixture", precision, vec![ok], work);
    v.group = label.into();
    let ms = seconds * 1e3;
    v.time_ms = Summary::of(&[ms, ms * 1.001]);
    v.throughput = Some(work.throughput(seconds));
    v
}

/// Operations on both sides of the ridge, as a real run reports them.
fn fixture_variants() -> Vec<VariantReport> {
    let mut out = Vec::new();
    for n in [16u64 << 20, 64 << 20, 256 << 20] {
        let w = Work::elementwise_f32(n, 2, 1, 1);
        let t = w.bytes() as f64 / 2.9e12;
        out.push(variant(
            "vector add",
            &format!("add {}M", n >> 20),
            Precision::Fp32,
            w,
            t,
        ));
        out.push(variant(
            "vector multiply",
            &format!("mul {}M", n >> 20),
            Precision::Fp32,
            w,
            t,
        ));
    }
    for d in [1u64, 4, 16, 64, 256, 1024] {
        let w = Work::elementwise_f32(64 << 20, 1, 1, 2 * d);
        let t = (w.bytes() as f64 / 2.9e12).max(w.flops as f64 / 55e12);
        out.push(variant(
            "polynomial (fused Horner)",
            &format!("poly D={d}"),
            Precision::Fp32,
            w,
            t,
        ));
    }
    for s in [1024u64, 4096, 8192] {
        let w = Work {
            bytes_read: 4 * s * s,
            bytes_written: 2 * s * s,
            flops: 2 * s * s * s,
        };
        out.push(variant(
            "GEMM bf16 (cuBLAS)",
            &format!("bf16 {s}"),
            Precision::Bf16,
            w,
            w.flops as f64 / 500e12,
        ));
    }
    out
}

/// The roofline's report of `variants`: placed and written into sections by the lesson's own
/// code.
fn report_of(variants: Vec<VariantReport>) -> LessonReport {
    let c = ceilings();
    let roofs = roofs_from(&c).unwrap();
    let points = place_operations(&variants, &roofs, "fixture");
    LessonReport {
        schema_version: SCHEMA_VERSION,
        lesson: LESSON.into(),
        device: device(),
        provenance: Provenance::now(),
        parameters: serde_json::json!({ "fixture": true }),
        ceilings: Vec::new(),
        variants,
        sections: sections(&c, &roofs, &points, &["fixture for tests".into()]),
    }
}

/// A report shaped like a real run: the roofs, and points on both sides of the ridge.
pub fn fixture() -> LessonReport {
    report_of(fixture_variants())
}

fn temp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("roofline-test-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(BIN)
        .args(args)
        .env("CUDA_VISIBLE_DEVICES", "")
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

fn png_size(path: &Path) -> (u32, u32) {
    let img = image::open(path).expect("the PNG decodes");
    (img.width(), img.height())
}

#[test]
fn from_json_draws_svg_and_png_without_a_gpu() {
    let dir = temp("draw");
    let json = dir.join("roofline.json");
    fixture().write_json(&json).unwrap();
    let out_dir = dir.join("plot");
    let (code, stdout, stderr) = run(&[
        "--from-json",
        json.to_str().unwrap(),
        "--out",
        out_dir.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(
        common::table::unpadded(&stdout).contains("| poly D=1024 |"),
        "{stdout}"
    );
    assert!(stdout.contains("ridge point"), "{stdout}");
    let svg = std::fs::read_to_string(out_dir.join("roofline.svg")).unwrap();
    assert!(svg.len() > 10_000 && svg.contains("<svg") && svg.contains("poly D=1024"));
    assert!(svg.contains("arithmetic intensity"));
    assert_eq!(
        png_size(&out_dir.join("roofline.png")),
        (ch1_roofline::plot::WIDTH, ch1_roofline::plot::HEIGHT)
    );
    let png_bytes = std::fs::metadata(out_dir.join("roofline.png"))
        .unwrap()
        .len();
    assert!(
        png_bytes > 20_000,
        "a drawn plot, not a blank image: {png_bytes} bytes"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_point_above_its_roof_fails_the_run() {
    let dir = temp("above");
    let json = dir.join("roofline.json");
    let mut variants = fixture_variants();
    let w = Work::elementwise_f32(64 << 20, 2, 1, 1);
    // 20% faster than the memory roof allows: bytes were under-counted.
    let mut miscounted = variant("vector add", "miscounted", Precision::Fp32, w, 1.0);
    miscounted.time_ms = Summary::of(&[w.bytes() as f64 / 3.72e12 * 1e3]);
    variants.push(miscounted);
    report_of(variants).write_json(&json).unwrap();
    let (code, _, stderr) = run(&[
        "--from-json",
        json.to_str().unwrap(),
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("miscounted") && stderr.contains("counting error"),
        "{stderr}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn bad_from_json_files_are_clear_errors() {
    let dir = temp("bad");
    let missing = dir.join("missing.json");
    let (code, _, stderr) = run(&[
        "--from-json",
        missing.to_str().unwrap(),
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(code, 1);
    assert!(stderr.contains("cannot read"), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");

    let malformed = dir.join("malformed.json");
    std::fs::write(&malformed, "{ nope").unwrap();
    let (code, _, stderr) = run(&[
        "--from-json",
        malformed.to_str().unwrap(),
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(code, 1);
    assert!(stderr.contains("not valid JSON"), "{stderr}");

    let old = dir.join("old.json");
    let mut v = serde_json::to_value(fixture()).unwrap();
    v["schema_version"] = serde_json::json!(SCHEMA_VERSION + 7);
    std::fs::write(&old, v.to_string()).unwrap();
    let (code, _, stderr) = run(&[
        "--from-json",
        old.to_str().unwrap(),
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(code, 1);
    assert!(
        stderr.contains("schema version") && stderr.contains("re-run"),
        "{stderr}"
    );

    // Another lesson's report of the same schema.
    let lesson = dir.join("lesson.json");
    let mut other = fixture();
    other.lesson = "ch1-intensity".into();
    other.write_json(&lesson).unwrap();
    let (code, _, stderr) = run(&[
        "--from-json",
        lesson.to_str().unwrap(),
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(code, 1);
    assert!(stderr.contains("not a roofline result"), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");

    // A roofline report without its points.
    let partial = dir.join("partial.json");
    let mut r = fixture();
    r.sections.retain(|s| s.title != "Operations");
    r.write_json(&partial).unwrap();
    let (code, _, stderr) = run(&[
        "--from-json",
        partial.to_str().unwrap(),
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(code, 1);
    assert!(
        stderr.contains("not a roofline result: no 'Operations' section"),
        "{stderr}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn the_binary_takes_the_shared_flags_and_says_its_version() {
    common::testing::assert_accepts_shared_flags(BIN);
    common::testing::assert_prints_version(BIN);
}

#[test]
fn without_a_gpu_the_measuring_path_exits_3() {
    let (code, _, stderr) = run(&[]);
    assert_eq!(code, 3, "{stderr}");
    assert!(
        stderr.contains("no NVIDIA driver") || stderr.contains("no CUDA-capable GPU"),
        "{stderr}"
    );
}
