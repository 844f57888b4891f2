//! `--sweep batch` and `--sweep graphs`: two of the training loop's changes over the size that
//! decides them, on the training part's engine, every run checked like the training variants
//! (weight change and loss curve against the float64 reference and the group's baseline).
//!
//! - **batch**: a fixed effective batch of [BATCH] samples per step, accumulated over
//!   microbatches of 8 to 4096 by the baseline loop (allocations, pageable copies, a wait after
//!   every operation), against one pass of the whole batch by the same loop (the batch
//!   variant). Small microbatches pay the loop's per-pass overhead many times per step; once a
//!   microbatch is large enough to keep the GPU busy, splitting the batch costs little.
//! - **graphs**: the chapter's step (8 microbatches of 32, each copied in from page-locked
//!   memory) launched operation by operation, against the same operations replayed as one CUDA
//!   graph per 1 to 64 steps; the host waits once per graph's worth of steps either way, so what
//!   differs is launching each operation against launching the graph.

use std::ops::Range;

use serde_json::json;

use common::bench::BenchConfig;
use common::gpu::Gpu;
use common::report::{Metric, Section, VariantReport};
use common::runner::{Lesson, Meter, Output, Reference, VariantSpec};
use common::verify::Precision;
use common::Result;
use mlp::Exec;

use super::{points, sweep_bench, Kind, Planned, Summary};
use crate::training::engine::{Captured, Engine};
use crate::training::lesson::{run_work, WEIGHT_CHANGE_TOLERANCE};
use crate::training::{baseline, batch, TrainConfig, TrainingLesson};

/// The batch sweep's effective batch: large enough that one pass of it keeps an H100 busy.
pub const BATCH: usize = 4096;
/// The batch sweep's microbatches.
pub const MICROBATCHES: [usize; 10] = [8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096];
/// The graphs sweep's steps per graph.
pub const STEPS_PER_GRAPH: [usize; 7] = [1, 2, 4, 8, 16, 32, 64];

/// The metric the graph side of each graphs point gets.
pub const GRAPH_NODES: &str = "nodes per graph";

/// Which of the two sweeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Which {
    Batch,
    Graphs,
}

impl Which {
    pub fn kind(self) -> Kind {
        match self {
            Which::Batch => Kind::Batch,
            Which::Graphs => Kind::Graphs,
        }
    }

    /// The two sides: the group's baseline first.
    pub fn sides(self) -> [&'static str; 2] {
        match self {
            Which::Batch => ["accumulated", "whole batch"],
            Which::Graphs => ["eager", "graph"],
        }
    }

    /// The training the sweep runs, from the lesson's: the batch sweep's effective batch is
    /// [BATCH] (its smallest microbatch first, for the engine's warm-up).
    pub fn config(self, base: TrainConfig, xs: &[usize]) -> TrainConfig {
        match self {
            Which::Batch => TrainConfig {
                step_batch: BATCH,
                microbatch: xs.iter().copied().min().unwrap_or(BATCH),
                ..base
            },
            Which::Graphs => base,
        }
    }

    /// The sweep's sizes for `cfg` (sorted, each once): microbatches that divide the effective
    /// batch, or steps per graph that divide the run's steps. An error says what to change when
    /// none is left or the training itself does not fit.
    pub fn plan(self, cfg: &TrainConfig, xs: &[usize]) -> std::result::Result<Vec<usize>, String> {
        cfg.validate()?;
        let mut xs = xs.to_vec();
        xs.sort_unstable();
        xs.dedup();
        let (whole, what) = match self {
            Which::Batch => (cfg.step_batch, "microbatch divides the effective batch"),
            Which::Graphs => (
                cfg.steps(),
                "number of steps per graph divides the run's steps",
            ),
        };
        xs.retain(|&x| x > 0 && whole % x == 0);
        if xs.is_empty() {
            return Err(format!("no {what} ({whole}): change --samples or --batch"));
        }
        Ok(xs)
    }

    /// "microbatch 8", "4 steps per graph": the group of a point.
    pub fn group(self, x: usize) -> String {
        match self {
            Which::Batch => format!("microbatch {x}"),
            Which::Graphs => format!("{x} steps per graph"),
        }
    }

    /// The sweep's one line.
    pub fn series(self, cfg: &TrainConfig) -> String {
        match self {
            Which::Batch => format!("effective batch {}", cfg.step_batch),
            Which::Graphs => format!(
                "steps of {} x {}",
                cfg.step_batch / cfg.microbatch,
                cfg.microbatch
            ),
        }
    }
}

/// Queue steps `steps` of the chapter's step: each microbatch copied from the page-locked
/// dataset into device slot 0 (fixed addresses, so a graph can replay it), its pass, then the
/// update.
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

/// The graphs sweep's baseline: every operation launched as the host goes, one wait per
/// `per_wait` steps.
pub fn eager(e: &mut Engine, per_wait: usize) -> Result<()> {
    let ex = Exec::queued(e.gpu);
    for first in (0..e.cfg.steps()).step_by(per_wait) {
        queue_steps(e, &ex, first..first + per_wait)?;
        e.gpu.sync()?;
    }
    Ok(())
}

/// The graphs sweep's change: the same operations, `per_graph` steps captured as one graph
/// (once, then replayed), one wait per graph.
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

/// A sweep on the training lesson: its engine, reference, checks and poisoning, with loops of
/// the sweep's own as variants.
pub struct TrainingSweep<'g> {
    which: Which,
    training: TrainingLesson<'g>,
    xs: Vec<usize>,
}

impl<'g> TrainingSweep<'g> {
    /// The training lesson of `which`'s training from the lesson's `base` (its engine and its
    /// float64 reference when affordable), and the sizes of [Which::plan].
    pub fn new(gpu: &'g Gpu, which: Which, base: TrainConfig, xs: &[usize]) -> Result<Self> {
        let cfg = which.config(base, xs);
        let xs = which.plan(&cfg, xs).map_err(common::Error::invalid)?;
        Ok(TrainingSweep {
            which,
            training: TrainingLesson::new(gpu, cfg)?,
            xs,
        })
    }

    fn locate(&self, index: usize) -> (usize, bool) {
        (self.xs[index / 2], index % 2 == 1)
    }

    pub fn plan(&self) -> Vec<Planned> {
        let series = self.which.series(&self.training.config());
        self.xs
            .iter()
            .map(|&x| Planned {
                group: self.which.group(x),
                series: series.clone(),
                x: x as u64,
            })
            .collect()
    }
}

impl Lesson for TrainingSweep<'_> {
    fn name(&self) -> &str {
        match self.which {
            Which::Batch => "ch1-basics-sweep-batch",
            Which::Graphs => "ch1-basics-sweep-graphs",
        }
    }

    fn parameters(&self) -> serde_json::Value {
        let cfg = self.training.config();
        json!({
            "config": cfg,
            "steps": cfg.steps(),
            "sizes": self.xs,
            "stop_rule": sweep_bench(BenchConfig::default()).stop,
            "weight_change_tolerance": WEIGHT_CHANGE_TOLERANCE,
        })
    }

    fn variants(&self) -> Vec<VariantSpec> {
        let c = self.training.config();
        let work = run_work(&c);
        let which = self.which;
        self.xs
            .iter()
            .flat_map(|&x| {
                let descriptions = match which {
                    Which::Batch => [
                        format!(
                            "{} microbatches of {x} per step, the naive loop",
                            c.step_batch / x
                        ),
                        format!("one pass of {} per step, the naive loop", c.step_batch),
                    ],
                    Which::Graphs => [
                        format!("every operation launched, a wait per {x} steps"),
                        format!("one CUDA graph per {x} steps, a wait per graph"),
                    ],
                };
                which
                    .sides()
                    .into_iter()
                    .zip(descriptions)
                    .map(move |(side, description)| {
                        VariantSpec::new(side, description, Precision::Fp32, work)
                            .with_tolerance(WEIGHT_CHANGE_TOLERANCE)
                            .host_device()
                            .in_group(which.group(x))
                    })
            })
            .collect()
    }

    fn reference(&self, _index: usize) -> Option<&Reference> {
        self.training.reference(0)
    }

    fn check_against_baseline(&self, _index: usize) -> bool {
        true
    }

    fn poison(&mut self, gpu: &Gpu, _index: usize) -> Result<()> {
        self.training.poison(gpu, 0)
    }

    fn run(&mut self, _gpu: &Gpu, index: usize) -> Result<()> {
        let (x, changed) = self.locate(index);
        let e = self.training.engine();
        e.reset()?;
        match (self.which, changed) {
            (Which::Batch, false) => {
                e.cfg.microbatch = x;
                baseline::run(e)
            }
            (Which::Batch, true) => batch::run(e),
            (Which::Graphs, false) => eager(e, x),
            (Which::Graphs, true) => {
                // Only this point's graphs stay on the device.
                e.graphs
                    .retain(|k| !matches!(k, Captured::Steps { count, .. } if *count != x));
                graphed(e, x)
            }
        }
    }

    fn output(&mut self, gpu: &Gpu, _index: usize) -> Result<Output> {
        self.training.output(gpu, 0)
    }

    fn bench_config(&self, _index: usize, cfg: BenchConfig) -> BenchConfig {
        sweep_bench(cfg)
    }

    fn metrics(
        &mut self,
        _gpu: &Gpu,
        index: usize,
        _timed: &VariantReport,
        _meter: &mut Meter,
    ) -> Result<Vec<Metric>> {
        let (x, changed) = self.locate(index);
        if self.which != Which::Graphs || !changed {
            return Ok(Vec::new());
        }
        let key = Captured::Steps { first: 0, count: x };
        Ok(self
            .training
            .engine()
            .graphs
            .nodes(key)
            .map(|n| vec![Metric::new(GRAPH_NODES, n as f64, "")])
            .unwrap_or_default())
    }

    fn sections(
        &mut self,
        _gpu: &Gpu,
        variants: &[VariantReport],
        _meter: &mut Meter,
    ) -> Result<Vec<Section>> {
        let cfg = self.training.config();
        Ok(vec![section(self.which, &cfg, &self.plan(), variants)])
    }
}

/// The sweep's section from the variant reports (the graphs sweep's points with the nodes of
/// their graphs).
pub fn section(
    which: Which,
    cfg: &TrainConfig,
    plan: &[Planned],
    variants: &[VariantReport],
) -> Section {
    let [baseline, changed] = which.sides();
    let mut pts = points(plan, variants, (baseline, changed));
    for (p, planned) in pts.iter_mut().zip(plan) {
        let nodes = variants
            .iter()
            .find(|v| v.group == planned.group && v.name == changed)
            .and_then(|v| v.metric(GRAPH_NODES));
        if let Some(n) = nodes {
            p.figures.push((GRAPH_NODES.into(), n));
        }
    }
    let (title, notes) = match which {
        Which::Batch => (
            "one pass of the whole batch vs accumulated microbatches, by microbatch",
            vec![format!(
                "both sides run the naive loop (cuMemAlloc per pass, pageable copies, a wait after every operation) over {} samples in steps of {}; the line reads where splitting the step into microbatches stops costing",
                cfg.samples, cfg.step_batch
            )],
        ),
        Which::Graphs => (
            "a CUDA graph per k steps vs launching every operation, by steps per graph",
            vec![format!(
                "{} steps of {} microbatches of {}, each microbatch copied from page-locked memory; both sides wait once per k steps, so the difference is launching each operation against launching the graph; {GRAPH_NODES}: the captured graph's copies and kernels",
                cfg.steps(),
                cfg.step_batch / cfg.microbatch,
                cfg.microbatch
            )],
        ),
    };
    Summary::new(which.kind(), (baseline, changed), pts).section(title, notes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_batch_sweep_splits_a_batch_of_4096_into_every_microbatch_that_divides_it() {
        let cfg = Which::Batch.config(TrainConfig::chapter(), &MICROBATCHES);
        assert_eq!((cfg.step_batch, cfg.microbatch), (BATCH, 8));
        assert_eq!(cfg.steps(), 4);
        let xs = Which::Batch.plan(&cfg, &[4096, 8, 96, 8]).unwrap();
        assert_eq!(xs, vec![8, 4096], "96 does not divide 4096; repeats once");
        assert_eq!(Which::Batch.plan(&cfg, &MICROBATCHES).unwrap().len(), 10);
        assert_eq!(Which::Batch.group(64), "microbatch 64");
        assert_eq!(Which::Batch.series(&cfg), "effective batch 4096");
        assert_eq!(Which::Batch.sides()[0], "accumulated", "the baseline first");
        // Samples that make no whole step of 4096: one line saying what to change.
        let few = Which::Batch.config(
            TrainConfig {
                samples: 1024,
                ..TrainConfig::chapter()
            },
            &MICROBATCHES,
        );
        let err = Which::Batch.plan(&few, &MICROBATCHES).unwrap_err();
        assert!(err.contains("does not divide the samples"), "{err}");
    }

    #[test]
    fn the_graphs_sweep_takes_steps_per_graph_that_divide_the_run() {
        let cfg = Which::Graphs.config(TrainConfig::chapter(), &STEPS_PER_GRAPH);
        assert_eq!(cfg, TrainConfig::chapter());
        assert_eq!(
            Which::Graphs.plan(&cfg, &STEPS_PER_GRAPH).unwrap(),
            STEPS_PER_GRAPH.to_vec()
        );
        let short = TrainConfig {
            samples: 256 * 6,
            ..TrainConfig::chapter()
        };
        assert_eq!(
            Which::Graphs.plan(&short, &STEPS_PER_GRAPH).unwrap(),
            vec![1, 2]
        );
        let err = Which::Graphs.plan(&short, &[4, 5]).unwrap_err();
        assert!(err.contains("divides the run's steps (6)"), "{err}");
        assert_eq!(Which::Graphs.group(4), "4 steps per graph");
        assert_eq!(Which::Graphs.series(&cfg), "steps of 8 x 32");
    }
}
