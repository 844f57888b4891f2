//! GPU tests (`cargo test -p tuner -- --ignored` on a machine with an NVIDIA GPU).

use std::sync::Arc;

use tuner::analysis::TrialStatus;
use tuner::config::{Overrides, Switch};
use tuner::preset::Preset;
use tuner::sweep::{self, Output};
use tuner::trial::Session;

fn gpu() -> common::Gpu {
    common::Gpu::open(0).expect("a GPU")
}

fn session<'g>(gpu: &'g common::Gpu, o: Overrides) -> Session<'g> {
    let s = o.resolve().unwrap();
    let data = Arc::new(sweep::load_data(&s).unwrap());
    Session::new(gpu, s, data).unwrap()
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn the_step_matches_the_float64_reference() {
    let gpu = gpu();
    for opt in [
        tuner::config::OptimizerKind::Sgd,
        tuner::config::OptimizerKind::AdamW,
    ] {
        let s = session(
            &gpu,
            Overrides {
                preset: Some(Preset::Medium),
                samples: Some(1024),
                optimizer: Some(opt),
                ..Default::default()
            },
        );
        for amp in [false, true] {
            let c = s.check_gradient(amp, 64, 1).unwrap();
            let tol = sweep::gradient_tolerance(amp, Preset::Medium.arch().depth + 1);
            println!(
                "{opt:?} amp={amp}: gradient rel. L2 {:.3e}, biases {:.3e} (tolerance {tol:e}), loss error {:.2e}",
                c.rel_l2, c.bias_rel_l2, c.loss_error
            );
            assert!(c.rel_l2 <= tol && c.bias_rel_l2 <= tol, "amp={amp}: {c:?}");
            assert!(c.loss_error < if amp { 2e-2 } else { 1e-5 });
        }
    }
}

/// Four micro-batches of 64 accumulated give the gradient of the step's 256 samples: in fp32
/// against float64, in AMP as closely as one pass of all 256 samples does (bf16's own rounding
/// is the error there; accumulating must add nothing to it); and accumulating needs no memory
/// beyond one micro-batch's.
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn the_accumulated_step_matches_the_float64_reference_and_its_memory() {
    let gpu = gpu();
    let mut s = session(
        &gpu,
        Overrides {
            preset: Some(Preset::Small),
            samples: Some(1024),
            ..Default::default()
        },
    );
    for amp in [false, true] {
        let c = s.check_gradient(amp, 64, 4).unwrap();
        let one = s.check_gradient(amp, 256, 1).unwrap();
        let tol = sweep::gradient_tolerance(amp, Preset::Small.arch().depth + 1);
        println!(
            "amp={amp}, 4 x 64 accumulated: gradient rel. L2 {:.3e}, biases {:.3e}, loss error {:.2e}; \
             one pass of 256: {:.3e}, biases {:.3e} (fp32 tolerance {tol:e})",
            c.rel_l2, c.bias_rel_l2, c.loss_error, one.rel_l2, one.bias_rel_l2
        );
        if amp {
            // bf16 rounds each micro-batch's activations on its own: the errors of four
            // passes partly average, never compound, so within a quarter of one pass's.
            assert!(
                c.rel_l2 <= 1.25 * one.rel_l2 && c.bias_rel_l2 <= 1.25 * one.bias_rel_l2,
                "amp: accumulated {c:?}, one pass {one:?}"
            );
            assert!(c.loss_error < 2e-2, "{c:?}");
        } else {
            assert!(c.rel_l2 <= tol && c.bias_rel_l2 <= tol, "fp32: {c:?}");
            assert!(c.loss_error < 1e-5, "{c:?}");
        }
        let one = s.fits(4096, amp, 3, 1).unwrap().expect("fits");
        let four = s.fits(4096, amp, 3, 4).unwrap().expect("fits");
        println!(
            "amp={amp}: peak in use {} bytes alone, {} accumulating 4",
            one.used, four.used
        );
        assert_eq!(one.used, four.used);
    }
}

/// Above 64K samples the bias gradient is summed in chunks (two kernels); at 100,000 samples
/// (4 chunks, the last one short) the whole gradient and the biases alone match float64.
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn the_chunked_bias_gradient_matches_the_float64_reference() {
    let gpu = gpu();
    let batch = 100_000;
    assert_eq!(mlp::bias_chunks(batch), 4);
    let s = session(
        &gpu,
        Overrides {
            preset: Some(Preset::Small),
            samples: Some(4096),
            ..Default::default()
        },
    );
    let c = s.check_gradient(false, batch, 1).unwrap();
    let tol = sweep::gradient_tolerance(false, Preset::Small.arch().depth + 1);
    println!(
        "batch {batch}: gradient rel. L2 {:.3e}, biases {:.3e} (tolerance {tol:e}), loss error {:.2e}",
        c.rel_l2, c.bias_rel_l2, c.loss_error
    );
    assert!(c.rel_l2 <= tol && c.bias_rel_l2 <= tol, "{c:?}");
}

/// AMP's loss curve stays within 2% (relative) + 0.01 (absolute) of fp32's, step by step, over
/// 100 steps of the small and medium presets, and both fall.
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn amp_and_fp32_losses_agree() {
    let gpu = gpu();
    for preset in [Preset::Small, Preset::Medium] {
        for opt in [
            tuner::config::OptimizerKind::Sgd,
            tuner::config::OptimizerKind::AdamW,
        ] {
            let s = session(
                &gpu,
                Overrides {
                    preset: Some(preset),
                    samples: Some(16384),
                    optimizer: Some(opt),
                    ..Default::default()
                },
            );
            let fp32 = s.loss_curve(false, 256, 100).unwrap();
            let amp = s.loss_curve(true, 256, 100).unwrap();
            let worst = fp32
                .iter()
                .zip(&amp)
                .map(|(f, a)| (f - a).abs() - (0.02 * f + 0.01))
                .fold(f64::NEG_INFINITY, f64::max);
            println!(
                "{preset:?} {opt:?}: fp32 {:.4} -> {:.4}, AMP {:.4} -> {:.4}, worst margin {worst:.4}",
                fp32[0], fp32[99], amp[0], amp[99]
            );
            assert!(worst <= 0.0, "AMP left the tolerance band by {worst}");
            assert!(fp32[99] < 0.8 * fp32[0], "fp32 did not learn");
            assert!(amp[99] < 0.8 * amp[0], "AMP did not learn");
        }
    }
}

/// A width that cannot fit at the larger batches: the fp32 configuration runs out of memory
/// at 1M, skips 2M, and the AMP configuration after it still runs; memory comes back.
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn a_sweep_that_runs_out_of_memory_recovers_and_goes_on() {
    let gpu = gpu();
    let free_before = gpu.memory().unwrap().0;
    let settings = Overrides {
        input: Some(64),
        hidden: Some(65536),
        depth: Some(1),
        samples: Some(4096),
        batch_sizes: Some(vec![4096, 1 << 20, 1 << 21]),
        workers: Some(vec![2]),
        amp: Some(Switch::Both),
        steps: Some(3),
        warmup_steps: Some(1),
        ..Default::default()
    }
    .resolve()
    .unwrap();
    let out = Output {
        json: None,
        plot: None,
        progress: false,
        margin: None,
    };
    let (report, verified) =
        sweep::run(&gpu, settings, &out, common::report::Startup::now()).unwrap();
    print!("{}", sweep::render_text(&report));
    assert!(verified);
    let status: Vec<TrialStatus> = report.trials.iter().map(|t| t.status).collect();
    assert_eq!(
        status,
        vec![
            TrialStatus::Ok,
            TrialStatus::Oom,
            TrialStatus::Skipped,
            TrialStatus::Ok,
            TrialStatus::Oom,
            TrialStatus::Skipped
        ]
    );
    assert!(
        report.trials[3].key.amp,
        "the AMP configuration ran after the fp32 OOM"
    );
    assert!(report.trials[1]
        .note
        .as_deref()
        .unwrap_or("")
        .contains("out of device memory"));
    let (free_after, total) = gpu.memory().unwrap();
    println!("free before {free_before}, after {free_after}, total {total}");
    assert!(
        (free_before as i64 - free_after as i64).unsigned_abs() < total / 100,
        "free memory did not come back: {free_before} -> {free_after}"
    );
}

/// The memory estimate is within 10% of the pool's measured peak of real steps, for the three
/// presets at three batch sizes each, fp32 and AMP.
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn the_memory_estimate_matches_measured_peaks() {
    let gpu = gpu();
    for preset in Preset::ALL {
        let mut s = session(
            &gpu,
            Overrides {
                preset: Some(preset),
                samples: Some(1024),
                optimizer: Some(tuner::config::OptimizerKind::AdamW),
                ..Default::default()
            },
        );
        for amp in [false, true] {
            for batch in [256usize, 8192, 262_144] {
                let est =
                    tuner::memory::estimate(&s.settings.arch, &s.settings.optimizer, amp, batch)
                        .total;
                let peak = s.fits(batch, amp, 3, 1).unwrap().expect("fits");
                let err = (est as f64 - peak.used as f64) / peak.used as f64;
                println!(
                    "{preset:?} amp={amp} batch {batch}: estimate {est}, measured {} in use, {:?} from the device, error {:+.4}%",
                    peak.used, peak.reserved, 100.0 * err
                );
                assert!(err.abs() < 0.10);
            }
        }
    }
}

/// The finder's answer fits and the next multiple does not, within the trial bound and a
/// minute; the memory estimate predicts it within 1%; the recommended batch trains; free memory
/// comes back; a target effective batch that fits in one step is kept.
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn the_finder_answer_fits_and_the_next_multiple_does_not() {
    let gpu = gpu();
    let settings = Overrides {
        preset: Some(Preset::Small),
        samples: Some(1024),
        ..Default::default()
    }
    .resolve()
    .unwrap();
    let options = tuner::commands::AutobatchOptions {
        start: 8,
        granularity: tuner::search::Granularity::Multiple(8),
        margin: None,
        effective_batch: Some(1 << 20),
        config: None,
        test_only: true,
        team: None,
        model_name: None,
        progress: true,
    };
    let r = tuner::commands::autobatch(&gpu, settings, &options).unwrap();
    print!("{}", tuner::commands::render_autobatch(&r));
    assert!(r.found.trials.len() <= r.trial_bound);
    assert!(r.next_fails, "maximum + 8 must fail");
    assert!(
        r.check.trained,
        "the split written trains {} steps",
        r.check.steps
    );
    assert!(r.search_wall_s < 60.0);
    let off = (r.estimate_limit as f64 - r.found.maximum as f64) / r.found.maximum as f64;
    assert!(
        off.abs() < 0.01,
        "the estimate's limit {} is {:+.3}% from the maximum found",
        r.estimate_limit,
        100.0 * off
    );
    let a = r.accumulation.as_ref().expect("a target was given");
    assert_eq!(
        (a.steps, a.batch),
        (1, 1 << 20),
        "the target fits in one step"
    );
    let drift =
        (r.free_after_bytes as f64 - r.free_before_bytes as f64).abs() / r.free_before_bytes as f64;
    assert!(drift < 0.01, "free memory moved by {:.3}%", 100.0 * drift);
}
