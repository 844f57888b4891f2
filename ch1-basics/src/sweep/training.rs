//! `--sweep batch` and `--sweep graphs` on the training part's engine, every run checked like
//! the training variants. **batch**: an effective batch of [BATCH] accumulated over microbatches
//! of 8 to 4096 by the baseline loop, against one pass of the whole batch by the same loop.
//! **graphs**: the chapter's step (each microbatch copied in from page-locked memory) launched
//! operation by operation, against one CUDA graph per 1 to 64 steps; the host waits once per
//! graph's worth of steps either way, so what differs is launching each operation against
//! launching the graph.

use std::ops::Range;

use serde_json::json;

use common::bench::BenchConfig;
use common::gpu::Gpu;
use common::report::{Metric, Section, VariantReport};
use common::runner::{Lesson, Output, Reference, VariantSpec};
use common::sweep::{Axis, Plan, Point, Summary, Sweep};
use common::verify::Precision;
use common::Result;
use mlp::Exec;

use super::{sweep_bench, Kind, BAR};
use crate::training::engine::{Captured, Engine};
use crate::training::lesson::{run_work, WEIGHT_CHANGE_TOLERANCE};
use crate::training::{baseline, batch, TrainConfig, TrainingLesson};

/// The batch sweep's effective batch: large enough that one pass of it keeps an H100 busy.
pub const BATCH: usize = 4096;
/// The batch sweep's microbatches.
pub const MICROBATCHES: [usize; 10] = [8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096];
/// The graphs sweep's steps per graph.
pub const STEPS_PER_GRAPH: [usize; 7] = [1, 2, 4, 8, 16, 32, 64];

pub const GRAPH_NODES: &str = "nodes per graph";

/// The sizes sweep `kind` (batch or graphs) takes by default.
pub fn sizes(kind: Kind) -> &'static [usize] {
    match kind {
        Kind::Batch => &MICROBATCHES,
        _ => &STEPS_PER_GRAPH,
    }
}

/// The training sweep `kind` (batch, else graphs) runs from the lesson's `base` (batch: an
/// effective batch of [BATCH], its smallest microbatch first for the engine's warm-up), and its
/// points: the sizes of `xs` that divide the effective batch or the run's steps.
pub fn plan(kind: Kind, base: TrainConfig, xs: &[usize]) -> Result<(TrainConfig, Plan), String> {
    base.validate()?;
    let (cfg, whole, what, axis, sides, series) = if kind == Kind::Batch {
        let microbatch = xs.iter().copied().min().unwrap_or(BATCH);
        let cfg = TrainConfig {
            step_batch: BATCH,
            microbatch,
            ..base
        };
        let what = "microbatch divides the effective batch";
        let series = format!("effective batch {BATCH}");
        let sides = ["accumulated", "whole batch"];
        (cfg, BATCH, what, "samples per microbatch", sides, series)
    } else {
        let what = "number of steps per graph divides the run's steps";
        let series = format!(
            "steps of {} x {}",
            base.step_batch / base.microbatch,
            base.microbatch
        );
        (
            base,
            base.steps(),
            what,
            "steps per graph",
            ["eager", "graph"],
            series,
        )
    };
    cfg.validate()?;
    let xs: Vec<u64> = xs
        .iter()
        .filter(|&&x| x > 0 && whole % x == 0)
        .map(|&x| x as u64)
        .collect();
    if xs.is_empty() {
        return Err(format!("no {what} ({whole}): change --samples or --batch"));
    }
    let axes = vec![
        Axis::names("line", &[series.as_str()]),
        Axis::counts(axis, &xs),
    ];
    Ok((cfg, Plan::product(axes, axis, sides, BAR)))
}

/// "microbatch 8", "4 steps per graph".
pub fn group(kind: Kind, x: usize) -> String {
    match kind {
        Kind::Batch => format!("microbatch {x}"),
        _ => format!("{x} steps per graph"),
    }
}

/// Queue `steps`, each microbatch copied from the page-locked dataset into device slot 0 (fixed
/// addresses, so a graph can replay it).
fn queue_steps(e: &mut Engine, ex: &Exec, steps: Range<usize>) -> Result<()> {
    let (gpu, cfg) = (e.gpu, e.cfg);
    let mb = cfg.microbatch;
    for step in steps {
        for first in (0..cfg.step_batch).step_by(mb) {
            e.data
                .copy_pinned(gpu, cfg.samples_of(step, first, mb), &mut e.pre)?;
            e.train.pass(ex, &mut e.pre, 0..mb, first)?;
        }
        e.train.update(ex)?;
    }
    Ok(())
}

/// The graphs sweep's baseline: one wait per `per_wait` steps.
pub fn eager(e: &mut Engine, per_wait: usize) -> Result<()> {
    let ex = Exec::queued(e.gpu);
    for first in (0..e.cfg.steps()).step_by(per_wait) {
        queue_steps(e, &ex, first..first + per_wait)?;
        e.gpu.sync()?;
    }
    Ok(())
}

/// The graphs sweep's change: `per_graph` steps captured once as one graph, one wait per graph.
pub fn graphed(e: &mut Engine, per_graph: usize) -> Result<()> {
    let gpu = e.gpu;
    for first in (0..e.cfg.steps()).step_by(per_graph) {
        let key = Captured::Steps {
            first,
            count: per_graph,
        };
        let mut graphs = std::mem::take(&mut e.graphs);
        let replayed = graphs.replay(gpu, key, || {
            queue_steps(e, &Exec::queued(gpu), first..first + per_graph)
        });
        e.graphs = graphs;
        replayed?;
        gpu.sync()?;
    }
    Ok(())
}

/// The training lesson's engine, reference, checks and poisoning, with loops of the sweep's own.
pub struct TrainingSweep<'g> {
    kind: Kind,
    training: TrainingLesson<'g>,
    plan: Plan,
}

impl<'g> TrainingSweep<'g> {
    /// Sweep `kind` (batch or graphs) over the sizes of [plan].
    pub fn new(gpu: &'g Gpu, kind: Kind, base: TrainConfig, xs: &[usize]) -> Result<Self> {
        let (cfg, plan) = plan(kind, base, xs).map_err(common::Error::invalid)?;
        Ok(TrainingSweep {
            kind,
            plan,
            training: TrainingLesson::new(gpu, cfg)?,
        })
    }

    fn x(&self, point: usize) -> usize {
        self.plan.x(point) as usize
    }
}

impl Sweep for TrainingSweep<'_> {
    fn name(&self) -> &str {
        self.kind.lesson()
    }

    fn plan(&self) -> &Plan {
        &self.plan
    }

    fn group(&self, point: usize) -> String {
        group(self.kind, self.x(point))
    }

    fn parameters(&self) -> serde_json::Value {
        let cfg = self.training.config();
        json!({
            "config": cfg,
            "steps": cfg.steps(),
            "stop_rule": sweep_bench(BenchConfig::default()).stop,
            "weight_change_tolerance": WEIGHT_CHANGE_TOLERANCE,
        })
    }

    fn spec(&self, point: usize, changed: bool) -> VariantSpec {
        let (c, x) = (self.training.config(), self.x(point));
        let description = match (self.kind, changed) {
            (Kind::Batch, false) => format!(
                "{} microbatches of {x} per step, the naive loop",
                c.step_batch / x
            ),
            (Kind::Batch, true) => {
                format!("one pass of {} per step, the naive loop", c.step_batch)
            }
            (_, false) => format!("every operation launched, a wait per {x} steps"),
            (_, true) => format!("one CUDA graph per {x} steps, a wait per graph"),
        };
        VariantSpec::new("", description, Precision::Fp32, run_work(&c))
            .with_tolerance(WEIGHT_CHANGE_TOLERANCE)
            .host_device()
    }

    fn reference(&self, _point: usize) -> Option<&Reference> {
        self.training.reference(0)
    }

    fn check_against_baseline(&self) -> bool {
        true
    }

    fn poison(&mut self, gpu: &Gpu, _point: usize) -> Result<()> {
        self.training.poison(gpu, 0)
    }

    fn run(&mut self, _gpu: &Gpu, point: usize, changed: bool) -> Result<()> {
        let x = self.x(point);
        let e = self.training.engine();
        e.reset()?;
        match (self.kind, changed) {
            (Kind::Batch, false) => {
                e.cfg.microbatch = x;
                baseline::run(e)
            }
            (Kind::Batch, true) => batch::run(e),
            (_, false) => eager(e, x),
            (_, true) => {
                // Only this point's graphs stay on the device.
                e.graphs
                    .retain(|k| !matches!(k, Captured::Steps { count, .. } if *count != x));
                graphed(e, x)
            }
        }
    }

    fn output(&mut self, gpu: &Gpu, _point: usize, _changed: bool) -> Result<Output> {
        self.training.output(gpu, 0)
    }

    fn bench_config(&self, _point: usize, _changed: bool, cfg: BenchConfig) -> BenchConfig {
        sweep_bench(cfg)
    }

    fn metrics(&mut self, point: usize, changed: bool, _: &VariantReport) -> Result<Vec<Metric>> {
        if self.kind != Kind::Graphs || !changed {
            return Ok(Vec::new());
        }
        let key = Captured::Steps {
            first: 0,
            count: self.x(point),
        };
        let nodes = self.training.engine().graphs.nodes(key);
        Ok(nodes
            .map(|n| vec![Metric::new(GRAPH_NODES, n as f64, "")])
            .unwrap_or_default())
    }

    fn figures(&self, _: usize, _: &Point, changed: Option<&VariantReport>) -> Vec<(String, f64)> {
        let nodes = changed.and_then(|v| v.metric(GRAPH_NODES));
        nodes.map(|n| (GRAPH_NODES.into(), n)).into_iter().collect()
    }

    fn sections(&mut self, summary: Summary, _bench: BenchConfig) -> Vec<Section> {
        let cfg = self.training.config();
        let (title, note) = match self.kind {
            Kind::Batch => (
                "one pass of the whole batch vs accumulated microbatches, by microbatch",
                format!(
                    "both sides run the naive loop (cuMemAlloc per pass, pageable copies, a wait after every operation) over {} samples in steps of {}; the line reads where splitting the step into microbatches stops costing",
                    cfg.samples, cfg.step_batch
                ),
            ),
            _ => (
                "a CUDA graph per k steps vs launching every operation, by steps per graph",
                format!(
                    "{} steps of {} microbatches of {}, each microbatch copied from page-locked memory; both sides wait once per k steps, so the difference is launching each operation against launching the graph; {GRAPH_NODES}: the captured graph's copies and kernels",
                    cfg.steps(),
                    cfg.step_batch / cfg.microbatch,
                    cfg.microbatch
                ),
            ),
        };
        vec![summary.section(title, vec![note])]
    }
}
