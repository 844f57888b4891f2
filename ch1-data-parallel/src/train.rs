//! The pair on the runner. Every run trains `steps` steps from the same initial weights; each
//! step's global batch of `per_rank * ranks` samples is split over the ranks, one thread per
//! GPU. The loss is the mean over the global batch (each rank scales its shard's gradient by
//! 1 / global batch), so the all-reduce's sum is the gradient of the global batch.
//!
//! The reference is the ranks' arithmetic on one GPU: each step's batch split as the ranks
//! split it, each shard's gradient computed on its own, the gradients added in rank order.
//! From the same weights a rank computes its shard's gradient exactly as the reference does, so
//! the first step's all-reduced gradient differs from the reference's only by the order the
//! all-reduce adds the shares in (for two ranks not at all: a + b = b + a), and is checked
//! tightly. The end of a run (weight change, loss curve) is not a smooth function of that
//! order: fp32 training through ReLUs turns a last-bit difference into a slightly different
//! trajectory. It is checked against a tolerance from the reference's own spread: the distance
//! between the reference and the same run with its shares added in another order. Every
//! rank's weights are checked against rank 0's. The runner times rank 0's stream, which waits
//! at the end of a run on every other rank's stream, so a sample spans the slowest rank.

use std::sync::Arc;

use cudarc::driver::{CudaEvent, CudaStream};
use serde_json::json;

use common::bench::BenchConfig;
use common::counters::Work;
use common::error::CudaContext as _;
use common::report::{Metric, Section, VariantReport};
use common::runner::{Lesson, Meter, Output, Reference, VariantSpec};
use common::stop::StopRule;
use common::verify::{check, Precision};
use common::{Error, Gpu, Result};
use mlp::reference::loss_curve;
use mlp::{initial_params, Arch, Exec, Init, LossSlot, Samples};

use crate::checks::{
    end_tolerances, rotated, Distance, FIRST_GRADIENT_TOLERANCE, RANKS_AGREE_TOLERANCE,
};
use crate::nccl::{all_reduce_all, Communicator, RankCall};
use crate::plan::{Plan, ELEMENT_BYTES};
use crate::replica::{Fault, Replica};
use crate::scaling::{self, Figures};

const FIRST_GRADIENT: &str = "first gradient";
const WEIGHT_CHANGE: &str = "weight change";
const LOSS_CURVE: &str = "loss curve";
const REFERENCE_LABEL: &str =
    "one GPU, each step's batch split as the ranks split it, the shares added in rank order (fp32)";
/// The learning rate of plain SGD, unless `--lr` says otherwise.
pub const DEFAULT_LEARNING_RATE: f32 = 0.05;
const SEED: u64 = 2024;

/// What one run trains.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TrainConfig {
    pub hidden: usize,
    pub depth: usize,
    pub per_rank: usize,
    pub steps: usize,
    pub bucket_bytes: usize,
    pub runs: usize,
    pub learning_rate: f32,
}

impl TrainConfig {
    pub fn arch(&self) -> Arch {
        Arch {
            depth: self.depth,
            ..Arch::one_hidden_layer(self.hidden)
        }
    }

    /// Every size at least 1; one line saying which is not.
    pub fn validate(&self) -> std::result::Result<(), String> {
        self.arch().validate()?;
        for (name, v) in [
            ("--per-rank", self.per_rank),
            ("--steps", self.steps),
            ("--bucket-mib", self.bucket_bytes),
            ("--runs", self.runs),
        ] {
            if v == 0 {
                return Err(format!("{name} must be at least 1"));
            }
        }
        if !(self.learning_rate.is_finite() && self.learning_rate > 0.0) {
            return Err(format!(
                "--lr must be a positive number, not {}",
                self.learning_rate
            ));
        }
        Ok(())
    }

    /// The work of one run over `ranks`: forward and backward over every sample of every step.
    pub fn work(&self, ranks: usize) -> Work {
        Work {
            bytes_read: 0,
            bytes_written: 0,
            flops: self
                .arch()
                .flops((self.steps * self.per_rank * ranks) as u64),
        }
    }
}

/// The two sides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// Backward, one all-reduce of the whole gradient, the host waits, then the update.
    Baseline,
    /// Buckets all-reduced on a second stream as backward produces them; the update waits on
    /// an event.
    Optimized,
}

impl Side {
    pub const ALL: [Side; 2] = [Side::Baseline, Side::Optimized];

    pub fn name(self) -> &'static str {
        match self {
            Side::Baseline => "baseline",
            Side::Optimized => "optimized",
        }
    }

    fn description(self) -> &'static str {
        match self {
            Side::Baseline => {
                "backward, then one all-reduce of the whole gradient, the host waits, then the update"
            }
            Side::Optimized => {
                "buckets all-reduced on a second stream while backward goes on; the update waits on an event"
            }
        }
    }
}

/// A rank: its replica, communicator, communication stream and events.
struct Rank<'g> {
    replica: Replica<'g>,
    comm: Communicator,
    comm_stream: Arc<CudaStream>,
    /// Recorded on the compute stream when a bucket's gradients are queued.
    bucket_ready: Vec<CudaEvent>,
    /// Recorded on the communication stream after a step's last bucket.
    reduced: CudaEvent,
    /// Recorded on the compute stream at the end of a run (rank 0 waits on the others').
    done: CudaEvent,
}

impl Rank<'_> {
    /// One run of `side`; `fault`, when it names this rank, plants its wrong gradient;
    /// `keep_first` keeps the first step's all-reduced gradient.
    fn train(
        &mut self,
        side: Side,
        plan: &Plan,
        fault: Option<Fault>,
        keep_first: bool,
    ) -> Result<()> {
        let fault = fault.filter(|f| f.rank() == self.comm.rank);
        let r = &mut self.replica;
        r.start()?;
        let gpu = r.gpu;
        let ex = Exec::queued(gpu);
        let grads = r.grads_ptr();
        for step in 0..r.steps() {
            let input = r.forward(&ex, step)?;
            match side {
                Side::Baseline => {
                    r.backward(&ex, input, fault, &mut |_| Ok(()))?;
                    self.comm
                        .all_reduce_sum(&gpu.stream, grads, plan.elements())?;
                    gpu.stream
                        .synchronize()
                        .cuda("waiting for the all-reduce")?;
                }
                Side::Optimized => {
                    let (comm, comm_stream) = (&self.comm, &self.comm_stream);
                    let ready = &self.bucket_ready;
                    r.backward(&ex, input, fault, &mut |layer| {
                        for &b in &plan.schedule[layer] {
                            let range = &plan.buckets[b].range;
                            ready[b].record(&gpu.stream).cuda("recording a bucket")?;
                            comm_stream.wait(&ready[b]).cuda("waiting for a bucket")?;
                            let at = grads + (range.start * ELEMENT_BYTES) as u64;
                            comm.all_reduce_sum(comm_stream, at, range.len())?;
                        }
                        Ok(())
                    })?;
                    self.reduced
                        .record(comm_stream)
                        .cuda("recording the reduction")?;
                    gpu.stream
                        .wait(&self.reduced)
                        .cuda("waiting for the reduction")?;
                }
            }
            r.update(&ex)?;
            if step == 0 && keep_first {
                r.keep_first_gradient()?;
            }
        }
        self.done
            .record(&gpu.stream)
            .cuda("recording the end of the run")
    }
}

/// The pair over every rank, and the one-GPU runs it is checked and timed against.
pub struct DataParallel<'g> {
    cfg: TrainConfig,
    plan: Plan,
    ranks: Vec<Rank<'g>>,
    /// The global batch on the first GPU alone: the reference, and the scaling's one GPU.
    alone: Replica<'g>,
    reference: Reference,
    /// The reference with its shares added in another order (rotated by one rank), against
    /// the reference: its own spread. None for one or two ranks, where the order cannot change
    /// a sum.
    spread: Option<Distance>,
    /// The run with one backward over the whole global batch (no shares), against the
    /// reference: what splitting the batch alone does to the end of a run.
    whole_batch: Option<Distance>,
    init: Vec<f32>,
    fault: Option<Fault>,
    /// Keep the first step's gradient in the next run (the run that is checked).
    keep_first: bool,
}

/// The end of a run and its first gradient, in float64.
struct RunEnd {
    first_gradient: Vec<f64>,
    weight_change: Vec<f64>,
    loss_curve: Vec<f64>,
}

impl RunEnd {
    fn distance_from(&self, other: &RunEnd) -> Distance {
        Distance {
            weight_change: distance(&self.weight_change, &other.weight_change),
            loss_curve: distance(&self.loss_curve, &other.loss_curve),
        }
    }
}

/// The weight change (final - initial) in float64.
fn change(params: &[f32], init: &[f32]) -> Vec<f64> {
    params
        .iter()
        .zip(init)
        .map(|(&p, &i)| p as f64 - i as f64)
        .collect()
}

fn to_f64(values: &[f32]) -> Vec<f64> {
    values.iter().map(|&v| v as f64).collect()
}

/// Relative L2 distance of `got` from `want`.
fn distance(got: &[f64], want: &[f64]) -> f64 {
    check(got, want, f64::INFINITY, "").rel_l2_error
}

impl<'g> DataParallel<'g> {
    /// Data, weights, communicators and streams on every GPU (rank r on `gpus[r]`), and the
    /// one-GPU runs of the global batch on the first: split as the ranks split it (the
    /// reference), its shares added in another order, and whole.
    pub fn new(gpus: &[&'g Gpu], cfg: TrainConfig) -> Result<DataParallel<'g>> {
        cfg.validate().map_err(Error::invalid)?;
        let arch = cfg.arch();
        let n = gpus.len();
        let global = cfg.per_rank * n;
        let init = initial_params(&arch, SEED, Init::HE_LECUN_OUTPUT);
        let data = Samples::synthetic(arch.input, arch.classes, cfg.steps * global, SEED + 1);
        let comms = Communicator::for_each(gpus)?;
        let plan = Plan::new(&arch, cfg.bucket_bytes);
        let mut ranks = Vec::with_capacity(n);
        for (rank, (gpu, comm)) in gpus.iter().zip(comms).enumerate() {
            // The rank's shard of every step: rows rank*P..(rank+1)*P of each global batch.
            let rows: Vec<usize> = (0..cfg.steps)
                .flat_map(|s| (0..cfg.per_rank).map(move |b| s * global + rank * cfg.per_rank + b))
                .collect();
            let shard = Samples {
                features: rows
                    .iter()
                    .flat_map(|&i| {
                        data.features[i * arch.input..(i + 1) * arch.input]
                            .iter()
                            .copied()
                    })
                    .collect(),
                labels: rows.iter().map(|&i| data.labels[i]).collect(),
            };
            let slot = LossSlot {
                samples_per_step: global,
                offset: rank * cfg.per_rank,
            };
            let replica = Replica::new(
                gpu,
                arch,
                &init,
                &shard,
                (cfg.per_rank, slot),
                cfg.learning_rate,
            )?;
            let event = || gpu.ctx.new_event(None).cuda("creating an event");
            ranks.push(Rank {
                replica,
                comm,
                comm_stream: gpu
                    .ctx
                    .new_stream()
                    .cuda("creating the communication stream")?,
                bucket_ready: (0..plan.buckets.len())
                    .map(|_| event())
                    .collect::<Result<_>>()?,
                reduced: event()?,
                done: event()?,
            });
        }
        let mut alone = Replica::new(
            gpus[0],
            arch,
            &init,
            &data,
            (global, LossSlot::whole_step(global)),
            cfg.learning_rate,
        )?;
        let mut end_of_run = |order: &[usize]| -> Result<RunEnd> {
            alone.train_alone(order, true)?;
            gpus[0].sync()?;
            let first = alone.first_gradient.as_ref().expect("kept by the run");
            Ok(RunEnd {
                first_gradient: to_f64(&gpus[0].download(first)?),
                weight_change: change(&gpus[0].download(&alone.model.params)?, &init),
                loss_curve: loss_curve(&gpus[0].download(&alone.losses.values)?, global),
            })
        };
        let rank_order: Vec<usize> = (0..n).collect();
        let reference = end_of_run(&rank_order)?;
        let spread = if n > 2 {
            Some(end_of_run(&rotated(n))?.distance_from(&reference))
        } else {
            None
        };
        let whole_batch = if n > 1 {
            Some(end_of_run(&[0])?.distance_from(&reference))
        } else {
            None
        };
        let reference = Reference {
            label: REFERENCE_LABEL.into(),
            parts: vec![
                (FIRST_GRADIENT.into(), reference.first_gradient),
                (WEIGHT_CHANGE.into(), reference.weight_change),
                (LOSS_CURVE.into(), reference.loss_curve),
            ],
        };
        Ok(DataParallel {
            cfg,
            plan,
            ranks,
            alone,
            reference,
            spread,
            whole_batch,
            init,
            fault: None,
            keep_first: false,
        })
    }

    /// Plant `fault` in every run from now on (the tests that show the check catches it).
    pub fn with_fault(mut self, fault: Fault) -> Self {
        self.fault = Some(fault);
        self
    }

    pub fn ranks(&self) -> usize {
        self.ranks.len()
    }

    fn global(&self) -> usize {
        self.cfg.per_rank * self.ranks.len()
    }

    /// Samples per second of a run that took `seconds`.
    fn samples_per_s(&self, seconds: f64) -> f64 {
        (self.cfg.steps * self.global()) as f64 / seconds
    }

    /// How the runs are measured: `runs` samples of one whole run each, after two warmup runs,
    /// not held behind the blocking kernel (the baseline waits on the host every step).
    pub fn bench(runs: usize) -> BenchConfig {
        BenchConfig {
            stop: StopRule {
                min_samples: runs,
                max_samples: runs,
                min_time_s: 0.0,
                host_link_min_time_s: 0.0,
                max_time_s: 600.0,
                max_noise: 1.0,
                max_median_error: None,
            },
            cold: false,
            warmup_runs: 2,
            warmup_time_s: 0.0,
            min_sample_s: 0.0,
            max_batch: 1,
            hold: false,
        }
    }

    /// One run of `side` on every rank, one thread each; the first GPU's stream then waits on
    /// every other rank's end.
    fn run_side(&mut self, gpu: &Gpu, side: Side) -> Result<()> {
        let (plan, fault, keep_first) = (&self.plan, self.fault, self.keep_first);
        self.keep_first = false;
        std::thread::scope(|s| {
            let handles: Vec<_> = self
                .ranks
                .iter_mut()
                .map(|rank| s.spawn(move || rank.train(side, plan, fault, keep_first)))
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(Error::invalid("a rank's thread panicked")))
                })
                .collect::<Result<Vec<()>>>()
        })?;
        for rank in &self.ranks[1..] {
            gpu.stream.wait(&rank.done).cuda("waiting for a rank")?;
        }
        Ok(())
    }

    /// The whole gradient all-reduced once over every rank, in place.
    fn all_reduce_gradient(&self) -> Result<()> {
        let comms: Vec<&Communicator> = self.ranks.iter().map(|r| &r.comm).collect();
        let calls: Vec<RankCall> = self
            .ranks
            .iter()
            .map(|r| RankCall {
                stream: &r.replica.gpu.stream,
                src: r.replica.grads_ptr(),
                dst: r.replica.grads_ptr(),
                done: &r.done,
            })
            .collect();
        all_reduce_all(&comms, &calls, self.plan.elements())
    }
}

impl Lesson for DataParallel<'_> {
    fn name(&self) -> &str {
        "ch1-data-parallel"
    }

    fn parameters(&self) -> serde_json::Value {
        let c = self.cfg;
        json!({
            "ranks": self.ranks.len(),
            "devices": self.ranks.iter().map(|r| r.replica.gpu.info.ordinal).collect::<Vec<_>>(),
            "hidden": c.hidden,
            "depth": c.depth,
            "per_rank": c.per_rank,
            "global_batch": self.global(),
            "steps": c.steps,
            "bucket_bytes": c.bucket_bytes,
            "buckets": self.plan.buckets.iter().map(|b| b.range.len() * ELEMENT_BYTES).collect::<Vec<_>>(),
            "learning_rate": c.learning_rate,
            "optimizer": "SGD",
            "seed": SEED,
            "reference_spread": self.spread,
            "whole_batch_vs_reference": self.whole_batch,
            "end_tolerances": end_tolerances(self.spread),
            "fault": self.fault.map(|f| format!("{f:?}")),
            "nccl_version": crate::nccl::version(),
            "nccl_nvls_enable": std::env::var("NCCL_NVLS_ENABLE").ok(),
        })
    }

    fn variants(&self) -> Vec<VariantSpec> {
        Side::ALL
            .iter()
            .map(|s| {
                VariantSpec::new(
                    s.name(),
                    s.description(),
                    Precision::Fp32,
                    self.cfg.work(self.ranks.len()),
                )
                .with_tolerance(FIRST_GRADIENT_TOLERANCE)
            })
            .collect()
    }

    fn reference(&self, _index: usize) -> Option<&Reference> {
        Some(&self.reference)
    }

    fn check_against_baseline(&self, _index: usize) -> bool {
        true
    }

    fn run(&mut self, gpu: &Gpu, index: usize) -> Result<()> {
        self.run_side(gpu, Side::ALL[index])
    }

    fn poison(&mut self, _gpu: &Gpu, _index: usize) -> Result<()> {
        self.keep_first = true;
        for rank in &mut self.ranks {
            let r = &mut rank.replica;
            r.gpu.poison(&mut r.losses.values)?;
            r.gpu.poison(&mut r.model.grads)?;
        }
        Ok(())
    }

    fn output(&mut self, _gpu: &Gpu, _index: usize) -> Result<Output> {
        let global = self.global();
        let mut losses = vec![f32::NAN; self.cfg.steps * global];
        let mut weights: Vec<Vec<f32>> = Vec::new();
        for rank in &self.ranks {
            let r = &rank.replica;
            r.gpu.sync()?;
            let values = r.gpu.download(&r.losses.values)?;
            for s in 0..self.cfg.steps {
                let own = s * global + r.slot.offset..s * global + r.slot.offset + r.batch;
                losses[own.clone()].copy_from_slice(&values[own]);
            }
            weights.push(r.gpu.download(&r.model.params)?);
        }
        let first: Vec<f64> = to_f64(&weights[0]);
        let r0 = &self.ranks[0].replica;
        let first_gradient = match &r0.first_gradient {
            Some(g) => to_f64(&r0.gpu.download(g)?),
            None => Vec::new(),
        };
        let tolerances = end_tolerances(self.spread);
        let agree = weights[1..]
            .iter()
            .enumerate()
            .map(|(i, w)| {
                check(w, &first, RANKS_AGREE_TOLERANCE, "rank 0's weights")
                    .named(format!("rank {} weights", i + 1))
            })
            .collect();
        Ok(Output {
            checks: agree,
            ..Output::default()
                .part(
                    FIRST_GRADIENT,
                    first_gradient,
                    Some(FIRST_GRADIENT_TOLERANCE),
                )
                .part(
                    WEIGHT_CHANGE,
                    change(&weights[0], &self.init),
                    Some(tolerances.weight_change),
                )
                .part(
                    LOSS_CURVE,
                    loss_curve(&losses, global),
                    Some(tolerances.loss_curve),
                )
        })
    }

    fn metrics(
        &mut self,
        _gpu: &Gpu,
        _index: usize,
        timed: &VariantReport,
        _meter: &mut Meter,
    ) -> Result<Vec<Metric>> {
        let out: Vec<Metric> = timed
            .time_ms
            .as_ref()
            .map(|t| Metric::new("samples/s", self.samples_per_s(t.median / 1e3), ""))
            .into_iter()
            .collect();
        Ok(out)
    }

    fn sections(
        &mut self,
        _gpu: &Gpu,
        variants: &[VariantReport],
        meter: &mut Meter,
    ) -> Result<Vec<Section>> {
        let n = self.ranks.len();
        let one_gpu_ms = if n > 1 {
            Some(self.time_one_gpu(meter)?.time_ms.median)
        } else {
            None
        };
        let compute_ms = self.time_compute(meter)?.time_ms.median;
        let all_reduce_ms = if n > 1 {
            Some(self.time_all_reduce(meter)?.time_ms.median)
        } else {
            None
        };
        let c = self.cfg;
        let figures = Figures {
            ranks: n,
            per_rank: c.per_rank,
            steps: c.steps,
            buckets: self.plan.buckets.len(),
            bucket_bytes: c.bucket_bytes,
            learning_rate: c.learning_rate,
            gradient_bytes: (self.plan.elements() * ELEMENT_BYTES) as u64,
            one_gpu_ms,
            compute_ms,
            all_reduce_ms,
            spread: self.spread,
            whole_batch: self.whole_batch,
        };
        Ok(vec![scaling::section(&figures, variants)])
    }
}

/// The one-GPU runs and the all-reduce the scaling section is made of, timed.
impl DataParallel<'_> {
    /// The global batch trained on the first GPU alone, timed.
    fn time_one_gpu(&mut self, meter: &mut Meter) -> Result<common::runner::Timed> {
        let cfg = meter.bench;
        let alone = &mut self.alone;
        meter.measure(&cfg, &mut || alone.train_alone(&[0], false))
    }

    /// One rank's share of every step on its GPU alone, no communication, timed: the compute
    /// a data-parallel step cannot do without.
    fn time_compute(&mut self, meter: &mut Meter) -> Result<common::runner::Timed> {
        let cfg = meter.bench;
        let first = &mut self.ranks[0].replica;
        meter.measure(&cfg, &mut || first.train_alone(&[0], false))
    }

    /// One all-reduce of the whole gradient over every rank, timed (the median call).
    fn time_all_reduce(&mut self, meter: &mut Meter) -> Result<common::runner::Timed> {
        let cfg = BenchConfig {
            stop: StopRule {
                min_samples: 20,
                max_samples: 200,
                ..StopRule::sweep()
            },
            warmup_runs: 3,
            ..meter.bench
        };
        let this = &*self;
        meter.measure(&cfg, &mut || this.all_reduce_gradient())
    }
}
