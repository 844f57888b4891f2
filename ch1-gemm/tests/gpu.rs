//! GPU tests: run on a machine with an NVIDIA GPU with `cargo test -- --ignored`.

use std::process::Command;

use ch1_gemm::layout::strided_config;
use ch1_gemm::problem::{tolerance, Shape};
use ch1_gemm::sweep::{memory_at_hand, point_group, GemmSweep, BAR, SPEEDUP_TITLE, TIME_CAP};
use ch1_gemm::{GemmLesson, Variant, PER_PRODUCT};
use common::blas::BlasContext as _;
use common::gpu::Gpu;
use common::report::{LessonReport, Status};
use common::runner::{run_lesson, Lesson, RunOptions, Values};
use common::stop::StopRule;
use common::sweep::{Summary, SweepLesson};
use common::testing::Planted;
use common::verify::{check, rel_l2_error, Precision};
use cudarc::cublas::Gemm;

/// The chapter's shape, non-square and odd shapes, a vector-like one, and K = 1024.
const SHAPES: [Shape; 7] = [
    Shape::CHAPTER,
    Shape {
        m: 1,
        n: 1,
        k: 1,
        count: 1,
    },
    Shape {
        m: 3,
        n: 5,
        k: 7,
        count: 2,
    },
    Shape {
        m: 17,
        n: 33,
        k: 65,
        count: 3,
    },
    Shape {
        m: 100,
        n: 1,
        k: 37,
        count: 5,
    },
    Shape {
        m: 257,
        n: 129,
        k: 63,
        count: 4,
    },
    Shape {
        m: 64,
        n: 48,
        k: 1024,
        count: 2,
    },
];

/// Quick runs: fewer samples, a looser noise bound.
fn quick() -> RunOptions {
    let mut options = RunOptions::default();
    options.bench.stop = StopRule::quick();
    options
}

/// The lesson's whole float64 reference.
fn reference_of(lesson: &GemmLesson) -> Vec<f64> {
    lesson.reference(0).unwrap().parts[0].1.clone()
}

/// Each variant's relative error at `shape`, asserting that it verifies.
fn verify_all(gpu: &Gpu, shape: Shape, precision: Precision) -> Vec<f64> {
    let mut lesson = GemmLesson::new(gpu, shape, precision, 11).unwrap();
    let reference = reference_of(&lesson);
    Variant::ALL
        .iter()
        .enumerate()
        .map(|(i, v)| {
            lesson.poison(gpu, i).unwrap();
            lesson.run(gpu, i).unwrap();
            gpu.sync().unwrap();
            let out = lesson.output(gpu, i).unwrap();
            let Values::F32(got) = &out.parts[0].values else {
                panic!("an f32 output")
            };
            let c = check(got, &reference, tolerance(precision, shape.k), "ref");
            assert!(c.passed, "{} {precision:?} at {shape:?}: {c:?}", v.name());
            c.rel_l2_error
        })
        .collect()
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn every_variant_verifies_at_several_shapes_in_both_precisions() {
    let gpu = Gpu::open(0).unwrap();
    for shape in SHAPES {
        for precision in [Precision::Fp32, Precision::Tf32] {
            verify_all(&gpu, shape, precision);
        }
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn tf32_math_is_really_on_and_fp32_really_off() {
    // TF32 keeps 10 mantissa bits: errors near 1e-4..1e-3. Plain fp32: near 1e-7.
    let gpu = Gpu::open(0).unwrap();
    let fp32 = verify_all(&gpu, Shape::CHAPTER, Precision::Fp32);
    let tf32 = verify_all(&gpu, Shape::CHAPTER, Precision::Tf32);
    for (f, t) in fp32.iter().zip(&tf32) {
        assert!(*f < 2e-6, "fp32 error {f}");
        assert!(*t > 2e-5, "tf32 error {t}: was TF32 math used?");
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn a_prefix_of_the_batch_writes_only_its_products() {
    let gpu = Gpu::open(0).unwrap();
    let shape = Shape {
        m: 9,
        n: 11,
        k: 13,
        count: 5,
    };
    let mut lesson = GemmLesson::new(&gpu, shape, Precision::Fp32, 3).unwrap();
    let reference = reference_of(&lesson);
    let c = shape.c_len();
    for v in Variant::ALL {
        let batch = lesson.batch_mut();
        batch.poison(&gpu).unwrap();
        batch.run(&gpu, v, 3).unwrap();
        gpu.sync().unwrap();
        let got = batch.output(&gpu).unwrap();
        assert!(
            rel_l2_error(&got[..3 * c], &reference[..3 * c]) < 1e-6,
            "{}",
            v.name()
        );
        assert!(got[3 * c..].iter().all(|x| x.is_nan()), "{}", v.name());
        assert_eq!(batch.product(&gpu, 2).unwrap(), got[2 * c..3 * c].to_vec());
        assert!(
            batch.run(&gpu, v, 6).is_err(),
            "more products than the batch"
        );
        assert!(batch.run(&gpu, v, 0).is_err());
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn a_planted_layout_bug_is_caught_and_gets_no_speedup() {
    let gpu = Gpu::open(0).unwrap();
    // The lesson plus one planted wrong variant: A passed first, as if cuBLAS were row-major.
    let mut lesson = Planted::new(
        GemmLesson::new(&gpu, Shape::square(64, 8), Precision::Fp32, 5).unwrap(),
        "ch1-gemm-planted",
        (
            "unswapped",
            "A first, as if cuBLAS were row-major",
            "strided",
        ),
        |inner: &mut GemmLesson, gpu: &Gpu| {
            let shape = inner.shape();
            let cfg = strided_config(&shape, shape.count);
            let (blas, a, b, c) = inner.batch_mut().parts_mut();
            // The test's shape is square, so every access stays in bounds: only the order of
            // the operands is wrong.
            unsafe { blas.gemm_strided_batched(cfg, a, b, c) }.blas(gpu, "planted")
        },
    );
    let report = run_lesson(&gpu, &mut lesson, &quick()).unwrap();
    let planted = report.variant("unswapped").unwrap();
    assert_eq!(planted.status, Status::Failed);
    assert_eq!(planted.checks[0].non_finite, 0, "written, but wrong");
    assert!(planted.checks[0].rel_l2_error > 0.5);
    assert_eq!(planted.speedup, None);
    for name in ["baseline", "batched", "strided"] {
        assert_eq!(report.variant(name).unwrap().status, Status::Ok, "{name}");
    }
    assert!(!report.all_passed());
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn the_chapter_run_is_held_and_batching_wins() {
    let gpu = Gpu::open(0).unwrap();
    let mut lesson = GemmLesson::new(&gpu, Shape::CHAPTER, Precision::Fp32, 42).unwrap();
    let report = run_lesson(&gpu, &mut lesson, &quick()).unwrap();
    assert!(report.all_passed());
    for v in &report.variants {
        let m = v.measurement.as_ref().unwrap();
        assert_eq!(
            m.hold_timeouts, 0,
            "{}: the blocking kernel timed out",
            v.name
        );
        assert_eq!(v.precision, Precision::Fp32);
        // The time per product is the run's median over the 40 products.
        let per_product = v.metric(PER_PRODUCT).unwrap();
        let median_us = v.time_ms.as_ref().unwrap().median * 1e3;
        assert!((per_product - median_us / 40.0).abs() < 1e-9 * median_us);
    }
    for name in ["batched", "strided"] {
        let s = report.variant(name).unwrap().speedup.unwrap();
        assert!(
            s > 5.0,
            "{name} only {s:.1}x faster than one call per product"
        );
    }
}

/// The sweep's summary, as its report keeps it.
fn sweep_data(report: &LessonReport) -> Summary {
    let section = report
        .sections
        .iter()
        .find(|s| s.title == SPEEDUP_TITLE)
        .expect("the speedup section");
    Summary::from_section(section).expect("the sweep's summary")
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn a_small_sweep_measures_and_verifies_every_point() {
    let gpu = Gpu::open(0).unwrap();
    let options = RunOptions::default();
    let memory = memory_at_hand(&gpu).unwrap();
    let sweep = GemmSweep::new(&[16, 48], &[8, 300], Precision::Tf32, 1, 60.0, memory).unwrap();
    let report = run_lesson(&gpu, &mut SweepLesson(sweep), &options).unwrap();
    let summary = sweep_data(&report);
    assert_eq!(summary.points.len(), 4);
    assert_eq!(report.variants.len(), 8, "two sides per point");
    assert!(report.all_passed());
    for (i, p) in summary.points.iter().enumerate() {
        assert!(p.skipped.is_none(), "{p:?}");
        let count = [8, 300][i % 2];
        // 300 calls are too many to hold; 8 are not.
        let baseline = report
            .variant(&format!("{}:baseline", point_group(p.x as usize, count)))
            .unwrap();
        assert_eq!(baseline.measurement.as_ref().unwrap().held, count == 8);
        // The strided side's speedup is the point's, taken by the runner within its group.
        let strided = report
            .variant(&format!("{}:strided", point_group(p.x as usize, count)))
            .unwrap();
        assert!(strided.measurement.as_ref().unwrap().held);
        let s = strided.speedup.unwrap();
        assert!((s - p.speedup().unwrap().value).abs() < 1e-9 * s, "{p:?}");
        assert_eq!(strided.checks.len(), 2, "products 0 and count-1");
    }
    assert_eq!(summary.bar, BAR);
    assert_eq!(summary.crossovers.len(), 2, "a line per count");
    assert!(common::table::unpadded(&report.markdown()).contains("| 48 |"));
    // A zero time cap skips everything after the first check.
    let capped = GemmSweep::new(&[16, 32], &[8], Precision::Fp32, 1, 0.0, memory).unwrap();
    let capped = run_lesson(&gpu, &mut SweepLesson(capped), &options).unwrap();
    let summary = sweep_data(&capped);
    assert_eq!(summary.points.len(), 2);
    assert!(summary
        .points
        .iter()
        .all(|p| p.skipped.as_deref() == Some(TIME_CAP)));
    assert!(capped
        .variants
        .iter()
        .all(|v| v.status == Status::Skipped && v.note.as_deref() == Some(TIME_CAP)));
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn buffers_beyond_device_memory_exit_with_a_clear_message() {
    // On a GPU machine the binary travels apart from the build tree: CH1_GEMM_BIN says where.
    let bin = std::env::var("CH1_GEMM_BIN").unwrap_or(env!("CARGO_BIN_EXE_ch1-gemm").into());
    let out = Command::new(bin)
        .args(["--shape", "65536x65536x65536", "--count", "64"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("out of device memory"), "{stderr}");
    assert!(stderr.contains("needs 3 TiB"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}
