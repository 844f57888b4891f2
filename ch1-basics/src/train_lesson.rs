//! The training variants as a lesson of the one runner: each run's weight change and loss curve
//! checked against the float64 reference (when affordable) and the baseline, whole runs timed
//! (held off: the naive runs synchronize on their own), and goodput measured per variant.

use common::bench::BenchConfig;
use common::counters::Work;
use common::gpu::Gpu;
use common::report::{Metric, Section, VariantReport};
use common::runner::{Lesson, Meter, Output, Reference, VariantSpec};
use common::verify::{check, Precision, Verification};
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

const WEIGHT_CHANGE: &str = "weight change";
const LOSS_CURVE: &str = "loss curve";

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
            check(
                &self.weight_change,
                &other.weight_change,
                WEIGHT_CHANGE_TOLERANCE,
                against,
            )
            .named(WEIGHT_CHANGE),
            check(&self.losses, &other.losses, LOSS_CURVE_TOLERANCE, against).named(LOSS_CURVE),
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

/// The six training variants of one SGD run.
pub struct TrainingLesson<'g> {
    trainer: Trainer<'g>,
    reference: Option<Reference>,
    /// Each checked run's loss curve, by variant, for the JSON.
    loss_curves: Vec<(&'static str, Vec<f64>)>,
}

impl<'g> TrainingLesson<'g> {
    /// The model, the data and every buffer, then the float64 reference when affordable.
    pub fn new(gpu: &'g Gpu, cfg: TrainConfig) -> Result<TrainingLesson<'g>> {
        let trainer = Trainer::new(gpu, cfg)?;
        let reference = reference(&trainer).map(|r| Reference {
            label: "float64 CPU reference".into(),
            parts: vec![
                (WEIGHT_CHANGE.into(), r.weight_change),
                (LOSS_CURVE.into(), r.losses),
            ],
        });
        Ok(TrainingLesson {
            trainer,
            reference,
            loss_curves: Vec::new(),
        })
    }
}

impl Lesson for TrainingLesson<'_> {
    fn name(&self) -> &str {
        "ch1-basics"
    }

    fn parameters(&self) -> serde_json::Value {
        let cfg = self.trainer.cfg;
        serde_json::json!({
            "hidden": cfg.dims.hidden,
            "input": cfg.dims.input,
            "classes": cfg.dims.classes,
            "samples": cfg.samples,
            "batch": cfg.step_batch,
            "microbatch": cfg.microbatch,
            "steps": cfg.steps(),
            "lr": cfg.lr,
            "seed": cfg.seed,
            "weight_change_tolerance": WEIGHT_CHANGE_TOLERANCE,
            "loss_curve_tolerance": LOSS_CURVE_TOLERANCE,
            "timing": "CUDA events around each whole training run on the lesson's stream, no blocking kernel (the runs synchronize on their own); time per run",
        })
    }

    fn variants(&self) -> Vec<VariantSpec> {
        let cfg = self.trainer.cfg;
        let work = Work {
            bytes_read: (cfg.samples * (cfg.dims.input + 1) * 4) as u64,
            bytes_written: 0,
            flops: cfg.dims.flops(cfg.samples as u64),
        };
        Variant::ALL
            .iter()
            .map(|v| {
                VariantSpec::new(v.name(), v.description(), Precision::Fp32, work).host_device()
            })
            .collect()
    }

    fn reference(&self, _index: usize) -> Option<&Reference> {
        self.reference.as_ref()
    }

    fn check_against_baseline(&self, _index: usize) -> bool {
        true
    }

    fn poison(&mut self, _gpu: &Gpu, _index: usize) -> Result<()> {
        self.trainer.poison()
    }

    fn run(&mut self, _gpu: &Gpu, index: usize) -> Result<()> {
        self.trainer.run(Variant::ALL[index])
    }

    fn output(&mut self, _gpu: &Gpu, index: usize) -> Result<Output> {
        let out = self.trainer.result()?;
        let trained = Trained::from_gpu(&out, &self.trainer.init, self.trainer.cfg.step_batch);
        self.loss_curves
            .push((Variant::ALL[index].name(), trained.losses.clone()));
        Ok(Output::default()
            .part(
                WEIGHT_CHANGE,
                trained.weight_change,
                Some(WEIGHT_CHANGE_TOLERANCE),
            )
            .part(LOSS_CURVE, trained.losses, Some(LOSS_CURVE_TOLERANCE)))
    }

    fn bench_config(&self, _index: usize, cfg: BenchConfig) -> BenchConfig {
        // The naive runs synchronize with the host: they cannot queue behind the blocking
        // kernel.
        BenchConfig {
            hold: false,
            warmup_runs: 2,
            ..cfg
        }
    }

    fn metrics(
        &mut self,
        _gpu: &Gpu,
        index: usize,
        timed: &VariantReport,
        meter: &mut Meter,
    ) -> Result<Vec<Metric>> {
        let cfg = self.trainer.cfg;
        let Some(run_ms) = timed.time_ms.as_ref().map(|t| t.median) else {
            return Ok(Vec::new());
        };
        let compute = self
            .trainer
            .compute_ms_per_step(Variant::ALL[index], meter)?;
        let per_step = run_ms / cfg.steps() as f64;
        Ok(vec![
            Metric::new("samples/s", cfg.samples as f64 / (run_ms / 1e3), ""),
            Metric::new("step", per_step, "ms"),
            Metric::new("compute/step", compute, "ms"),
            Metric::new("goodput", 100.0 * compute / per_step, "%"),
        ])
    }

    fn sections(
        &mut self,
        _gpu: &Gpu,
        _variants: &[VariantReport],
        _meter: &mut Meter,
    ) -> Result<Vec<Section>> {
        let mut lines = vec![
            format!(
                "tolerances: weight change {WEIGHT_CHANGE_TOLERANCE:.0e}, loss curve {LOSS_CURVE_TOLERANCE:.0e} (relative L2)"
            ),
            "goodput: compute = the step's GEMMs and kernels alone (no copies, no host waits), captured as a CUDA graph and replayed back to back behind a blocking kernel, CUDA events, median per replay; goodput = compute / (run time / steps)".into(),
            "allocation: baseline allocates per microbatch with cuMemAlloc/cuMemFree (what cudaMalloc/cudaFree do); preallocated buffers come from the stream-ordered pool once".into(),
        ];
        if self.reference.is_none() {
            lines.push("note: float64 reference skipped at this size (too costly on the CPU); variants checked against the baseline".into());
        }
        let reference_curve = self
            .reference
            .as_ref()
            .and_then(|r| r.parts.iter().find(|(n, _)| n == LOSS_CURVE))
            .map(|(_, v)| v.clone());
        let curves: serde_json::Map<String, serde_json::Value> = self
            .loss_curves
            .iter()
            .map(|(name, curve)| (name.to_string(), serde_json::json!(curve)))
            .collect();
        Ok(vec![Section {
            lines,
            data: serde_json::json!({
                "reference_loss_curve": reference_curve,
                "loss_curves": curves,
            }),
            ..Section::new("training: checks, goodput and allocation")
        }])
    }
}
