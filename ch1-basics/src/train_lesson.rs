//! Running the training variants as a lesson: verify each run's weights and loss curve, time
//! whole runs, measure goodput, and report. The harness's `Lesson` trait assumes a reference
//! known before any variant runs and runs it can queue behind a blocking kernel; a naive training
//! loop synchronizes on its own, so this runner uses the harness's `measure` and `Timer` directly
//! (hold off) and fills the harness's report types.

use serde::Serialize;

use common::bench::{measure, BenchConfig, Timer};
use common::cli::{mark, marks, process_start, CommonArgs};
use common::counters::Work;
use common::gpu::Gpu;
use common::lesson::apply_speedups;
use common::report::{LessonReport, Provenance, Status, VariantReport, SCHEMA_VERSION};
use common::stats::Summary;
use common::verify::{Precision, Verification};
use common::Result;

use crate::model::{loss_curve, reference_cost_flops, train_reference, ReferenceRun};
use crate::training::{RunOutput, TrainConfig, Trainer, Variant};

/// Relative L2 tolerance on the weight change (final - initial weights). The change is about
/// 1e-2 of the weights it is added to, so fp32 rounding of the weights alone is ~1e-5 of it;
/// summation order (8 x 32 accumulated vs 256 at once, cuBLAS vs the CPU) adds to that over the
/// run's steps. A dropped microbatch or a wrong sign moves it by >10%.
pub const WEIGHT_CHANGE_TOLERANCE: f64 = 5e-4;
/// Relative L2 tolerance on the loss curve (per-step mean losses, ~2.3 falling).
pub const LOSS_CURVE_TOLERANCE: f64 = 2e-5;
/// Above this many float64 FLOPs the CPU reference is skipped (variants are then checked
/// against the baseline only).
pub const REFERENCE_FLOP_LIMIT: u64 = 200_000_000_000;

/// What one variant's run measured beyond the harness's fields.
#[derive(Debug, Clone, Serialize)]
pub struct TrainingMetrics {
    pub variant: String,
    pub features: crate::training::Features,
    pub samples_per_s: Option<f64>,
    pub ms_per_step: Option<f64>,
    /// GPU time of the step's GEMMs and kernels alone (compute-only graph replayed back to back).
    pub compute_ms_per_step: Option<f64>,
    /// compute_ms_per_step / ms_per_step.
    pub goodput: Option<f64>,
    pub speedup: Option<f64>,
    pub weights_vs_reference: Option<Verification>,
    pub losses_vs_reference: Option<Verification>,
    pub weights_vs_baseline: Option<Verification>,
    pub losses_vs_baseline: Option<Verification>,
    pub loss_curve: Vec<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct TrainingReport {
    #[serde(flatten)]
    pub report: LessonReport,
    pub config: TrainConfig,
    pub steps: usize,
    pub weight_change_tolerance: f64,
    pub loss_curve_tolerance: f64,
    pub reference_loss_curve: Option<Vec<f64>>,
    pub goodput_method: &'static str,
    pub allocation: &'static str,
    pub training: Vec<TrainingMetrics>,
}

fn rel_l2(got: &[f64], want: &[f64]) -> f64 {
    if got.len() != want.len() || got.iter().any(|g| !g.is_finite()) {
        return f64::INFINITY;
    }
    let diff: f64 = got.iter().zip(want).map(|(g, w)| (g - w) * (g - w)).sum();
    let norm: f64 = want.iter().map(|w| w * w).sum();
    if norm == 0.0 {
        return if diff == 0.0 { 0.0 } else { f64::INFINITY };
    }
    (diff / norm).sqrt()
}

fn verification(got: &[f64], want: &[f64], tolerance: f64, against: &str) -> Verification {
    let non_finite = got.iter().filter(|g| !g.is_finite()).count();
    let err = rel_l2(got, want);
    Verification {
        rel_l2_error: err,
        tolerance,
        non_finite,
        elements: got.len(),
        passed: non_finite == 0 && err <= tolerance,
        against: against.into(),
    }
}

/// A run's weight change and loss curve, in float64.
pub struct Trained {
    pub weight_change: Vec<f64>,
    pub losses: Vec<f64>,
}

impl Trained {
    pub fn from_gpu(out: &RunOutput, init: &[f32], samples_per_step: usize) -> Trained {
        Trained {
            weight_change: out
                .params
                .iter()
                .zip(init)
                .map(|(&p, &i)| p as f64 - i as f64)
                .collect(),
            losses: loss_curve(&out.losses, samples_per_step),
        }
    }

    pub fn from_reference(r: &ReferenceRun, init: &[f32]) -> Trained {
        Trained {
            weight_change: r
                .params
                .iter()
                .zip(init)
                .map(|(&p, &i)| p - i as f64)
                .collect(),
            losses: r.losses.clone(),
        }
    }

    /// (weights, losses) checks of this run against `other`.
    pub fn check(&self, other: &Trained, against: &str) -> (Verification, Verification) {
        (
            verification(
                &self.weight_change,
                &other.weight_change,
                WEIGHT_CHANGE_TOLERANCE,
                &format!("{against}: weight change (final - initial)"),
            ),
            verification(
                &self.losses,
                &other.losses,
                LOSS_CURVE_TOLERANCE,
                &format!("{against}: loss curve"),
            ),
        )
    }
}

/// The float64 reference of the trainer's run, when it is affordable.
pub fn reference(trainer: &Trainer) -> Option<Trained> {
    let cfg = trainer.cfg;
    (reference_cost_flops(cfg.dims, cfg.samples) <= REFERENCE_FLOP_LIMIT).then(|| {
        let r = train_reference(
            cfg.dims,
            &trainer.init,
            &trainer.data,
            cfg.step_batch,
            cfg.lr as f64,
        );
        Trained::from_reference(&r, &trainer.init)
    })
}

/// Verify, time and report the selected variants.
pub fn run_training(
    gpu: &Gpu,
    cfg: TrainConfig,
    variants: &[Variant],
    args: &CommonArgs,
) -> Result<TrainingReport> {
    let mut trainer = Trainer::new(gpu, cfg)?;
    let reference = reference(&trainer);
    mark("float64 reference trained");
    let mut timer = Timer::new(gpu)?;
    let bench = BenchConfig {
        hold: false,
        warmup_runs: 2,
        ..args.bench_config()
    };
    let mut provenance = Provenance::now();
    let steps = cfg.steps();
    let mut reports = Vec::new();
    let mut metrics = Vec::new();
    let mut baseline: Option<Trained> = None;
    for &v in variants {
        let out = trainer.run_checked(v)?;
        let trained = Trained::from_gpu(&out, &trainer.init, cfg.step_batch);
        let (wr, lr) = match &reference {
            Some(r) => {
                let (w, l) = trained.check(r, "float64 CPU reference");
                (Some(w), Some(l))
            }
            None => (None, None),
        };
        let (wb, lb) = match &baseline {
            Some(b) if v != Variant::Baseline => {
                let (w, l) = trained.check(b, "baseline");
                (Some(w), Some(l))
            }
            _ => (None, None),
        };
        let checks = [&wr, &lr, &wb, &lb];
        let passed = checks.iter().all(|c| c.as_ref().is_none_or(|c| c.passed))
            && checks.iter().any(|c| c.is_some());
        // The table's one verification: against the reference when there is one.
        let primary = wr
            .clone()
            .or_else(|| wb.clone())
            .unwrap_or_else(|| Verification {
                rel_l2_error: f64::INFINITY,
                tolerance: WEIGHT_CHANGE_TOLERANCE,
                non_finite: 0,
                elements: 0,
                passed: false,
                against: "nothing: no reference (too large) and no baseline in this run".into(),
            });
        let mut report = VariantReport::checked(
            v.name(),
            v.description(),
            Precision::Fp32,
            Verification { passed, ..primary },
            Work {
                bytes_read: (cfg.samples * (cfg.dims.input + 1) * 4) as u64,
                bytes_written: 0,
                flops: cfg.dims.flops(cfg.samples as u64),
            },
        );
        let mut m = TrainingMetrics {
            variant: v.name().into(),
            features: v.features(),
            samples_per_s: None,
            ms_per_step: None,
            compute_ms_per_step: None,
            goodput: None,
            speedup: None,
            weights_vs_reference: wr,
            losses_vs_reference: lr,
            weights_vs_baseline: wb,
            losses_vs_baseline: lb,
            loss_curve: trained.losses.clone(),
        };
        if v == Variant::Baseline {
            baseline = Some(trained);
        }
        if passed {
            if provenance.startup_to_first_sample_s.is_none() {
                mark("first variant verified");
                provenance.startup_to_first_sample_s =
                    Some(process_start().elapsed().as_secs_f64());
                provenance.startup_phases = marks();
            }
            let _variant = common::nvtx::range(&format!("ch1-basics:{}", v.name()));
            let meas = measure(gpu, &mut timer, &bench, &mut || trainer.run(v))?;
            let ms: Vec<f64> = meas.samples_s.iter().map(|s| s * 1e3).collect();
            let summary =
                Summary::of(&ms).ok_or_else(|| common::Error::invalid("no valid samples"))?;
            let compute = trainer.compute_ms_per_step(v, &mut timer, &args.bench_config())?;
            let per_step = summary.median / steps as f64;
            m.samples_per_s = Some(cfg.samples as f64 / (summary.median / 1e3));
            m.ms_per_step = Some(per_step);
            m.compute_ms_per_step = Some(compute);
            m.goodput = Some(compute / per_step);
            report.throughput = Some(report.work.throughput(summary.median / 1e3));
            report.time_ms = Some(summary);
            report.measurement = Some(meas);
        } else {
            report.note = Some("not timed: a wrong answer has no speed".into());
        }
        reports.push(report);
        metrics.push(m);
    }
    apply_speedups(&mut reports, "baseline");
    for (m, r) in metrics.iter_mut().zip(&reports) {
        m.speedup = r.speedup;
    }
    Ok(TrainingReport {
        report: LessonReport {
            schema_version: SCHEMA_VERSION,
            lesson: "ch1-basics".into(),
            device: gpu.info.clone(),
            provenance,
            parameters: serde_json::json!({
                "part": "training",
                "hidden": cfg.dims.hidden,
                "input": cfg.dims.input,
                "classes": cfg.dims.classes,
                "samples": cfg.samples,
                "batch": cfg.step_batch,
                "microbatch": cfg.microbatch,
                "lr": cfg.lr,
                "seed": cfg.seed,
                "timing": "CUDA events around each whole training run on the lesson's stream, no blocking kernel (the runs synchronize on their own); time per run",
            }),
            ceilings: Vec::new(),
            variants: reports,
        },
        config: cfg,
        steps,
        weight_change_tolerance: WEIGHT_CHANGE_TOLERANCE,
        loss_curve_tolerance: LOSS_CURVE_TOLERANCE,
        reference_loss_curve: reference.map(|r| r.losses),
        goodput_method: "compute = the step's GEMMs and kernels alone (no copies, no host waits), captured as a CUDA graph and replayed back to back behind a blocking kernel, CUDA events, median per replay; goodput = compute / (run time / steps)",
        allocation: "baseline allocates per microbatch with cuMemAlloc/cuMemFree (what cudaMalloc/cudaFree do); preallocated buffers come from the stream-ordered pool once",
        training: metrics,
    })
}

impl TrainingReport {
    pub fn all_passed(&self) -> bool {
        self.report.all_passed()
    }

    pub fn markdown(&self) -> String {
        let d = &self.report.device;
        let c = &self.config;
        let mut out = format!(
            "## ch1-basics training on {} (sm_{}{}, driver {}, CUDA {})\n\nMLP {}-{}-{}, {} samples, {} steps of {} (microbatch {}), lr {}\n\n",
            d.name,
            d.compute_capability.0,
            d.compute_capability.1,
            d.driver_version,
            d.cuda_driver_version,
            c.dims.input,
            c.dims.hidden,
            c.dims.classes,
            c.samples,
            self.steps,
            c.step_batch,
            c.microbatch,
            c.lr
        );
        out.push_str("| variant | status | run (median) | noise | samples/s | ms/step | compute ms/step | goodput | speedup | dW err (ref) | loss err (ref) | dW err (baseline) |\n");
        out.push_str("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
        let e = |v: &Option<Verification>| {
            v.as_ref()
                .map(|v| format!("{:.1e}", v.rel_l2_error))
                .unwrap_or_else(|| "-".into())
        };
        let f = |x: Option<f64>, p: &dyn Fn(f64) -> String| x.map(p).unwrap_or_else(|| "-".into());
        for (r, m) in self.report.variants.iter().zip(&self.training) {
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                r.name,
                if r.status == Status::Ok {
                    "ok"
                } else {
                    "FAILED"
                },
                f(r.time_ms.as_ref().map(|s| s.median), &|v| format!(
                    "{v:.2} ms"
                )),
                f(r.time_ms.as_ref().map(|s| s.rel_stddev), &|v| format!(
                    "{:.1}%",
                    v * 100.0
                )),
                f(m.samples_per_s, &|v| format!("{v:.0}")),
                f(m.ms_per_step, &|v| format!("{v:.4}")),
                f(m.compute_ms_per_step, &|v| format!("{v:.4}")),
                f(m.goodput, &|v| format!("{:.1}%", v * 100.0)),
                f(m.speedup, &|v| format!("{v:.2}x")),
                e(&m.weights_vs_reference),
                e(&m.losses_vs_reference),
                e(&m.weights_vs_baseline),
            ));
        }
        out.push_str(&format!(
            "\ntolerances: weight change {:.0e}, loss curve {:.0e} (relative L2)\ngoodput: {}\nallocation: {}\n",
            self.weight_change_tolerance, self.loss_curve_tolerance, self.goodput_method, self.allocation
        ));
        if self.reference_loss_curve.is_none() {
            out.push_str("note: float64 reference skipped at this size (too costly on the CPU); variants checked against the baseline\n");
        }
        for r in &self.report.variants {
            if let Some(m) = &r.measurement {
                if m.clock_dropped {
                    out.push_str(&format!(
                        "warning: {}: SM clock dropped during the run\n",
                        r.name
                    ));
                }
            }
        }
        out
    }
}
