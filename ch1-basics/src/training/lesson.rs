//! The training variants as a lesson of the runner: checks, timing of whole runs, and each
//! variant's step split into compute and the host's share ([super::host]).

use serde_json::json;

use common::bench::BenchConfig;
use common::counters::Work;
use common::gpu::Gpu;
use common::report::{Metric, Section, VariantReport};
use common::runner::{Lesson, Meter, Output, Reference, VariantSpec};
use common::table::{cell, Table};
use common::verify::Precision;
use common::Result;
use mlp::reference::{loss_curve, train_sgd};

use super::config::TrainConfig;
use super::engine::{Captured, Engine};
use super::host::{self, COMPUTE_MS, HOST_MS, HOST_SHARE, STEP_MS};
use super::variant::Variant;

/// Relative L2 tolerance on the weight change (final - initial weights). The change is about
/// 1e-2 of the weights it is added to, so fp32 rounding of the weights alone is ~1e-5 of it;
/// summation order (8 x 32 accumulated vs 256 at once, cuBLAS vs the CPU) adds to that over the
/// run's steps. A dropped microbatch or a wrong sign moves it by >10%.
pub const WEIGHT_CHANGE_TOLERANCE: f64 = 5e-4;
/// Relative L2 tolerance on the loss curve (per-step mean losses, ~2.3 falling).
pub const LOSS_CURVE_TOLERANCE: f64 = 2e-5;
/// Above this many float64 FLOPs the CPU reference is skipped (then checked against the
/// baseline only).
pub const REFERENCE_FLOP_LIMIT: u64 = 200_000_000_000;

const WEIGHT_CHANGE: &str = "weight change";
const LOSS_CURVE: &str = "loss curve";
const REFERENCE_LABEL: &str = "float64 CPU reference";

const GOODPUT_METHOD: &str = "compute = the step's GEMMs and kernels alone (no copies, no host waits), captured as a CUDA graph and replayed back to back behind a blocking kernel, CUDA events, median per replay; goodput = compute / (run time / steps)";
const ALLOCATION: &str = "baseline, pinned and batch allocate per pass with cuMemAlloc/cuMemFree (what cudaMalloc/cudaFree do); preallocated buffers come from the stream-ordered pool once";

fn weight_change<T: Copy + Into<f64>>(params: &[T], init: &[f32]) -> Vec<f64> {
    let change = params.iter().zip(init);
    change.map(|(&p, &i)| p.into() - i as f64).collect()
}

fn reference_of(engine: &Engine) -> Option<Reference> {
    let (cfg, init) = (engine.cfg, &engine.init);
    let arch = cfg.arch();
    if arch.flops(cfg.samples as u64) > REFERENCE_FLOP_LIMIT {
        return None;
    }
    let data = &engine.data.samples;
    let (batch, lr) = (cfg.step_batch, cfg.lr as f64);
    let run = train_sgd(&arch, init, &data.features, &data.labels, batch, lr);
    Some(Reference {
        label: REFERENCE_LABEL.into(),
        parts: vec![
            (WEIGHT_CHANGE.into(), weight_change(&run.params, init)),
            (LOSS_CURVE.into(), run.losses),
        ],
    })
}

/// Every sample's features and label copied in, forward and backward over every sample.
pub fn run_work(cfg: &TrainConfig) -> Work {
    let arch = cfg.arch();
    Work {
        bytes_read: (cfg.samples * (arch.input + 1) * 4) as u64,
        bytes_written: 0,
        flops: arch.flops(cfg.samples as u64),
    }
}

pub fn specs(cfg: &TrainConfig) -> Vec<VariantSpec> {
    let work = run_work(cfg);
    Variant::ALL
        .iter()
        .map(|v| {
            VariantSpec::new(v.name(), v.description(), Precision::Fp32, work)
                .with_tolerance(WEIGHT_CHANGE_TOLERANCE)
                .host_device()
        })
        .collect()
}

/// How whole training runs are timed: not held (the naive runs synchronize with the host, and
/// a held stream would never drain), each sample several whole runs long.
pub fn host_bound_bench(cfg: BenchConfig) -> BenchConfig {
    BenchConfig {
        hold: false,
        warmup_runs: 2,
        min_sample_s: cfg.min_sample_s.max(host::sample_time(&cfg.stop)),
        ..cfg
    }
}

pub struct TrainingLesson<'g> {
    engine: Engine<'g>,
    reference: Option<Reference>,
    /// Each variant's loss curve from its checked run.
    curves: serde_json::Map<String, serde_json::Value>,
}

impl<'g> TrainingLesson<'g> {
    pub fn new(gpu: &'g Gpu, cfg: TrainConfig) -> Result<TrainingLesson<'g>> {
        let engine = Engine::new(gpu, cfg)?;
        let reference = reference_of(&engine);
        Ok(TrainingLesson {
            engine,
            reference,
            curves: serde_json::Map::new(),
        })
    }

    pub fn config(&self) -> TrainConfig {
        self.engine.cfg
    }

    /// For a lesson that runs loops of its own on it (a sweep).
    pub fn engine(&mut self) -> &mut Engine<'g> {
        &mut self.engine
    }

    pub fn reference_loss_curve(&self) -> Option<&[f64]> {
        let r = self.reference.as_ref()?;
        r.parts
            .iter()
            .find(|(name, _)| name == LOSS_CURVE)
            .map(|(_, v)| v.as_slice())
    }

    fn check_table(variants: &[VariantReport]) -> Table {
        let columns = [
            (WEIGHT_CHANGE, REFERENCE_LABEL, "reference"),
            (LOSS_CURVE, REFERENCE_LABEL, "reference"),
            (WEIGHT_CHANGE, "the baseline", "baseline"),
            (LOSS_CURVE, "the baseline", "baseline"),
        ];
        let mut t = Table::new().left("variant");
        for (part, _, short) in columns {
            t = t.right(format!("{part} vs {short}"));
        }
        for v in variants {
            let error = |(part, against, _): (&str, &str, &str)| {
                let c = v
                    .checks
                    .iter()
                    .find(|c| c.part == part && c.against == against);
                cell(c, |c| format!("{:.1e}", c.rel_l2_error))
            };
            t.row(
                std::iter::once(v.name.clone())
                    .chain(columns.map(error))
                    .collect(),
            );
        }
        t
    }
}

impl Lesson for TrainingLesson<'_> {
    fn name(&self) -> &str {
        "ch1-basics"
    }

    fn parameters(&self) -> serde_json::Value {
        let c = self.engine.cfg;
        let arch = c.arch();
        json!({
            "hidden": c.hidden,
            "input": arch.input,
            "classes": arch.classes,
            "samples": c.samples,
            "batch": c.step_batch,
            "microbatch": c.microbatch,
            "steps": c.steps(),
            "lr": c.lr,
            "seed": c.seed,
            "weight_change_tolerance": WEIGHT_CHANGE_TOLERANCE,
            "loss_curve_tolerance": LOSS_CURVE_TOLERANCE,
            "timing": "CUDA events around whole training runs on the lesson's stream, no blocking kernel (the runs synchronize on their own), each sample several whole runs long, the measuring thread kept on one CPU core; time per run",
        })
    }

    fn variants(&self) -> Vec<VariantSpec> {
        specs(&self.engine.cfg)
    }

    fn reference(&self, _index: usize) -> Option<&Reference> {
        self.reference.as_ref()
    }

    fn check_against_baseline(&self, _index: usize) -> bool {
        true
    }

    fn poison(&mut self, gpu: &Gpu, _index: usize) -> Result<()> {
        gpu.poison(&mut self.engine.train.losses.values)
    }

    fn run(&mut self, _gpu: &Gpu, index: usize) -> Result<()> {
        self.engine.reset()?;
        Variant::ALL[index].run(&mut self.engine)
    }

    fn output(&mut self, _gpu: &Gpu, index: usize) -> Result<Output> {
        let (e, run) = (&self.engine, self.engine.download()?);
        let curve = loss_curve(&run.losses, e.cfg.step_batch);
        let name = Variant::ALL[index].name();
        self.curves.insert(name.into(), json!(curve));
        Ok(Output::default()
            .part(
                WEIGHT_CHANGE,
                weight_change(&run.params, &e.init),
                Some(WEIGHT_CHANGE_TOLERANCE),
            )
            .part(LOSS_CURVE, curve, Some(LOSS_CURVE_TOLERANCE)))
    }

    fn bench_config(&self, _index: usize, cfg: BenchConfig) -> BenchConfig {
        host_bound_bench(cfg)
    }

    fn metrics(
        &mut self,
        _gpu: &Gpu,
        index: usize,
        timed: &VariantReport,
        meter: &mut Meter,
    ) -> Result<Vec<Metric>> {
        let c = self.engine.cfg;
        let Some(run_ms) = timed.time_ms.as_ref().map(|s| s.median) else {
            return Ok(Vec::new());
        };
        let pass = Variant::ALL[index].pass_batch(&c);
        self.engine.prepare_compute_only(pass)?;
        let bench = meter.bench;
        let engine = &self.engine;
        let compute = meter
            .measure(&bench, &mut || {
                engine.graphs.launch(Captured::ComputeOnly { pass })
            })?
            .time_ms
            .median;
        let per_step = run_ms / c.steps() as f64;
        let (host_ms, host_share) = host::host_part(per_step, compute);
        Ok(vec![
            Metric::new("samples/s", c.samples as f64 / (run_ms / 1e3), ""),
            Metric::new(STEP_MS, per_step, "ms"),
            Metric::new(COMPUTE_MS, compute, "ms"),
            Metric::new("goodput", 100.0 * compute / per_step, "%"),
            Metric::new(HOST_MS, host_ms, "ms"),
            Metric::new(HOST_SHARE, 100.0 * host_share, "%"),
        ])
    }

    fn sections(
        &mut self,
        _gpu: &Gpu,
        variants: &[VariantReport],
        _meter: &mut Meter,
    ) -> Result<Vec<Section>> {
        let c = self.engine.cfg;
        let arch = c.arch();
        let mut section = Section::new("training: checks, goodput and allocation");
        section.table = Some(Self::check_table(variants));
        section.lines = vec![
            format!(
                "MLP {}-{}-{}, {} samples, {} steps of {} (microbatch {}), lr {}",
                arch.input,
                arch.hidden,
                arch.classes,
                c.samples,
                c.steps(),
                c.step_batch,
                c.microbatch,
                c.lr
            ),
            format!(
                "tolerances: weight change {WEIGHT_CHANGE_TOLERANCE:.0e}, loss curve {LOSS_CURVE_TOLERANCE:.0e} (relative L2)"
            ),
            format!("goodput: {GOODPUT_METHOD}"),
            format!("allocation: {ALLOCATION}"),
        ];
        if self.reference.is_none() {
            section.lines.push("note: float64 reference skipped at this size (too costly on the CPU); variants checked against the baseline".into());
        }
        section.data = json!({
            "config": c,
            "steps": c.steps(),
            "weight_change_tolerance": WEIGHT_CHANGE_TOLERANCE,
            "loss_curve_tolerance": LOSS_CURVE_TOLERANCE,
            "goodput_method": GOODPUT_METHOD,
            "allocation": ALLOCATION,
            "reference_loss_curve": self.reference_loss_curve(),
            "loss_curves": self.curves,
        });
        Ok(vec![section, host::section(variants)])
    }
}
