//! GPU tests: run on a machine with an NVIDIA GPU with `cargo test -- --ignored`.

use std::process::Command;

use ch1_basics::pipeline::{Mode, Pipeline, PipelineConfig, PipelineLesson, SAME_AS_SERIAL};
use ch1_basics::transpose::Transpose;
use common::gpu::Gpu;
use common::report::Status;
use common::runner::{run_lesson, RunOptions};
use common::stop::StopRule;

/// Options for a short run: the quick stopping rule, capped.
fn quick() -> RunOptions {
    let mut options = RunOptions::default();
    options.bench.stop = StopRule {
        max_time_s: 0.05,
        min_samples: 3,
        ..StopRule::quick()
    };
    options
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn every_transpose_is_exact_at_odd_sizes() {
    let gpu = Gpu::open(0).unwrap();
    for n in [1, 31, 33, 65, 1000] {
        let mut lesson = Transpose::new(&gpu, n, 3).unwrap();
        let report = run_lesson(&gpu, &mut lesson, &quick()).unwrap();
        assert_eq!(report.variants.len(), 7);
        for v in &report.variants {
            assert_eq!(v.status, Status::Ok, "n={n} {}: {:?}", v.name, v.checks);
            assert!(!v.checks.is_empty());
            for c in &v.checks {
                assert_eq!(c.rel_l2_error, 0.0, "n={n} {}: {c:?}", v.name);
                assert_eq!(c.tolerance, 0.0);
            }
        }
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn serial_and_overlapped_pipelines_agree_with_the_closed_form() {
    let gpu = Gpu::open(0).unwrap();
    // A short tail chunk, two and three buffers, one buffer.
    for (n, chunk, buffers) in [
        (1_000_003, 65_536, 3),
        (1_000_003, 100_000, 2),
        (4096, 4096, 1),
    ] {
        let cfg = PipelineConfig {
            elements: n,
            chunk,
            buffers,
            iterations: 64,
            seed: 9,
        };
        let mut p = Pipeline::new(&gpu, cfg).unwrap();
        let mut outputs = Vec::new();
        for mode in [Mode::Serial, Mode::Overlapped] {
            p.poison_output();
            p.queue(&gpu.stream, mode).unwrap();
            gpu.sync().unwrap();
            let check = p.check_closed_form();
            assert_eq!(check.non_finite, 0, "{mode:?} n={n} chunk={chunk}");
            assert!(check.rel_l2_error < 1e-5, "{mode:?}: {check:?}");
            outputs.push(p.output().to_vec());
        }
        assert!(outputs[0]
            .iter()
            .zip(&outputs[1])
            .all(|(a, b)| a.to_bits() == b.to_bits()));
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn the_pipeline_part_checks_both_modes_and_derives_the_overlap() {
    let gpu = Gpu::open(0).unwrap();
    let cfg = PipelineConfig {
        elements: 1_000_003,
        chunk: 100_000,
        buffers: 3,
        iterations: 64,
        seed: 9,
    };
    let mut lesson = PipelineLesson::new(&gpu, cfg, true, false).unwrap();
    let report = run_lesson(&gpu, &mut lesson, &quick()).unwrap();
    let serial = report.variant("serial").unwrap();
    let overlapped = report.variant("overlapped").unwrap();
    for v in [serial, overlapped] {
        assert_eq!(v.status, Status::Ok, "{}: {:?}", v.name, v.checks);
        let closed = v.checks.iter().find(|c| c.part == "output").unwrap();
        assert!(closed.rel_l2_error < 1e-5, "{closed:?}");
        assert!(v.time_ms.is_some());
    }
    // The overlapped output against the serial one, exactly.
    let same = overlapped
        .checks
        .iter()
        .find(|c| c.part == SAME_AS_SERIAL)
        .expect("compared with the serial output");
    assert_eq!((same.rel_l2_error, same.tolerance), (0.0, 0.0));
    assert!(overlapped.speedup.is_some());
    let titles: Vec<&str> = report.sections.iter().map(|s| s.title.as_str()).collect();
    assert_eq!(titles.len(), 2, "{titles:?}");
    let overlap = &report.sections[0].data;
    assert_eq!(overlap["serial_and_overlapped_bitwise_equal"], true);
    for figure in [
        "copy_in_fraction_of_ceiling",
        "overlapped_over_slowest",
        "pinned_htod_ceiling_gb_per_s",
    ] {
        assert!(
            overlap[figure].as_f64().unwrap() > 0.0,
            "{figure}: {overlap}"
        );
    }
    let rates = report.sections[1].data.as_array().unwrap();
    assert_eq!(
        rates.len(),
        2 * 5,
        "five sizes (the chunk is 400 kB), both directions"
    );

    // One mode alone: checked against the closed form only, and nothing derived.
    let mut alone = PipelineLesson::new(&gpu, cfg, false, false).unwrap();
    let report = run_lesson(&gpu, &mut alone, &quick().only(&["overlapped"])).unwrap();
    let v = report.variant("overlapped").unwrap();
    assert_eq!(v.status, Status::Ok);
    assert_eq!(v.checks.len(), 1);
    assert!(report.sections.is_empty());
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn an_absurd_pipeline_exits_with_a_clear_message() {
    // On a GPU machine the binary travels apart from the build tree: CH1_BASICS_BIN says where.
    let bin = std::env::var("CH1_BASICS_BIN").unwrap_or(env!("CARGO_BIN_EXE_ch1-basics").into());
    let out = Command::new(bin)
        .args(["--part", "pipeline", "--pipeline-elements", "60G"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("out of host memory"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}
