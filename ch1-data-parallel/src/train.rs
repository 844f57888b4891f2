//! The pair on the runner. Every run trains `steps` steps from the same initial weights; each
//! step's global batch of `per_rank * ranks` samples is split over the ranks, one thread per
//! GPU. The loss is the mean over the global batch (each rank scales its shard's gradient by
//! 1 / global batch), so the all-reduce's sum is the one-GPU gradient of the global batch, and
//! both sides are checked against a one-GPU run of it on rank 0's GPU: the weight change after
//! the run and the loss curve, plus every rank's weights against rank 0's. The runner times
//! rank 0's stream, which waits at the end of a run on every other rank's stream, so a sample
//! spans the slowest rank.

use std::sync::Arc;

use cudarc::driver::{CudaEvent, CudaSlice, CudaStream, DevicePtr};
use serde_json::json;

use common::bench::{BenchConfig, Measurement};
use common::counters::Work;
use common::error::CudaContext as _;
use common::report::{Metric, Section, VariantReport};
use common::runner::{Lesson, Meter, Output, Reference, VariantSpec};
use common::stop::StopRule;
use common::table::{three_figures, Table};
use common::verify::{check, Precision};
use common::{Error, Gpu, Result};
use mlp::reference::loss_curve;
use mlp::{
    initial_params, Activations, Allocator, Arch, Exec, Init, Input, LossSlot, Losses, Mlp, Model,
    Optimizer, Samples,
};

use crate::nccl::Communicator;
use crate::plan::{Plan, ELEMENT_BYTES};

/// Relative L2 tolerance on the weight change against the one-GPU run: the ranks' partial sums
/// add in another order than one GEMM over the global batch, which moves fp32 rounding, never
/// by 1e-4 of the change; a rank's gradient counted twice or missing moves it by >10%.
pub const WEIGHT_CHANGE_TOLERANCE: f64 = 5e-4;
/// Relative L2 tolerance on the loss curve (per-step mean losses, ~2.3 falling).
pub const LOSS_CURVE_TOLERANCE: f64 = 2e-5;
/// Ranks end with the same weights: they apply the same reduced gradient to the same weights.
pub const RANKS_AGREE_TOLERANCE: f64 = 1e-6;

const WEIGHT_CHANGE: &str = "weight change";
const LOSS_CURVE: &str = "loss curve";
const REFERENCE_LABEL: &str = "one GPU, the global batch per step (fp32)";
const LEARNING_RATE: f32 = 0.05;
const SEED: u64 = 2024;

/// What one run trains.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrainConfig {
    pub hidden: usize,
    pub depth: usize,
    pub per_rank: usize,
    pub steps: usize,
    pub bucket_bytes: usize,
    pub runs: usize,
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

/// One model training on one GPU: its weights, a batch's activations, its samples of every
/// step and where their losses go.
struct Replica<'g> {
    gpu: &'g Gpu,
    mlp: Mlp,
    model: Model,
    act: Activations,
    x: CudaSlice<f32>,
    labels: CudaSlice<i32>,
    losses: Losses,
    init: CudaSlice<f32>,
    /// Samples of this replica per step, and where they sit in the global batch.
    batch: usize,
    slot: LossSlot,
}

impl<'g> Replica<'g> {
    /// A replica training on `samples` (`steps` batches of `batch`), its losses placed at
    /// `slot` within each step of `global` samples.
    fn new(
        gpu: &'g Gpu,
        arch: Arch,
        init: &[f32],
        samples: &Samples,
        batch: usize,
        slot: LossSlot,
    ) -> Result<Replica<'g>> {
        let steps = samples.len() / batch;
        Ok(Replica {
            gpu,
            mlp: Mlp::new(gpu)?,
            model: Model::new(gpu, arch, Optimizer::PLAIN_SGD, false, init)?,
            act: Activations::new(gpu, &arch, false, batch, Allocator::Pool)?,
            x: gpu.upload(&samples.features, "the rank's samples")?,
            labels: gpu.upload(&samples.labels, "the rank's labels")?,
            losses: Losses::new(gpu, steps * slot.samples_per_step)?,
            init: gpu.upload(init, "the initial parameters")?,
            batch,
            slot,
        })
    }

    fn steps(&self) -> usize {
        self.labels.len() / self.batch
    }

    fn input(&self, step: usize) -> Input {
        let arch = self.model.arch;
        let x = self.x.slice(step * self.batch * arch.input..);
        let labels = self.labels.slice(step * self.batch..);
        Input::new(self.gpu, &arch, &x, &labels, self.batch)
    }

    fn start(&mut self) -> Result<()> {
        self.gpu.ctx.bind_to_thread().cuda("binding the context")?;
        let ex = Exec::queued(self.gpu);
        self.mlp.reset(&ex, &mut self.model, &self.init)?;
        self.losses.rewind(self.gpu)
    }

    /// One whole run on one GPU, no communication: the reference.
    fn train_alone(&mut self) -> Result<()> {
        self.start()?;
        let ex = Exec::queued(self.gpu);
        for step in 0..self.steps() {
            let input = self.input(step);
            let m = &self.mlp;
            m.forward_loss(
                &ex,
                &self.model,
                &mut self.act,
                input,
                &mut self.losses,
                self.slot,
            )?;
            m.backward(&ex, &mut self.model, &mut self.act, input, false)?;
            m.update(&ex, &mut self.model, LEARNING_RATE, Some(&mut self.losses))?;
        }
        Ok(())
    }

    fn grads_ptr(&self) -> u64 {
        self.model.grads.device_ptr(&self.gpu.stream).0
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
    fn train(&mut self, side: Side, plan: &Plan) -> Result<()> {
        let r = &mut self.replica;
        r.start()?;
        let gpu = r.gpu;
        let ex = Exec::queued(gpu);
        let grads = r.grads_ptr();
        for step in 0..r.steps() {
            let input = r.input(step);
            r.mlp
                .forward_loss(&ex, &r.model, &mut r.act, input, &mut r.losses, r.slot)?;
            match side {
                Side::Baseline => {
                    r.mlp
                        .backward(&ex, &mut r.model, &mut r.act, input, false)?;
                    self.comm
                        .all_reduce_sum(&gpu.stream, grads, plan.elements())?;
                    gpu.stream
                        .synchronize()
                        .cuda("waiting for the all-reduce")?;
                }
                Side::Optimized => {
                    let (comm, comm_stream) = (&self.comm, &self.comm_stream);
                    let ready = &self.bucket_ready;
                    r.mlp.backward_with(
                        &ex,
                        &mut r.model,
                        &mut r.act,
                        input,
                        false,
                        &mut |layer| {
                            for &b in &plan.schedule[layer] {
                                let range = &plan.buckets[b].range;
                                ready[b].record(&gpu.stream).cuda("recording a bucket")?;
                                comm_stream.wait(&ready[b]).cuda("waiting for a bucket")?;
                                let at = grads + (range.start * ELEMENT_BYTES) as u64;
                                comm.all_reduce_sum(comm_stream, at, range.len())?;
                            }
                            Ok(())
                        },
                    )?;
                    self.reduced
                        .record(comm_stream)
                        .cuda("recording the reduction")?;
                    gpu.stream
                        .wait(&self.reduced)
                        .cuda("waiting for the reduction")?;
                }
            }
            r.mlp
                .update(&ex, &mut r.model, LEARNING_RATE, Some(&mut r.losses))?;
        }
        self.done
            .record(&gpu.stream)
            .cuda("recording the end of the run")
    }
}

/// The pair over every rank, and the one-GPU run it is checked against.
pub struct DataParallel<'g> {
    cfg: TrainConfig,
    plan: Plan,
    ranks: Vec<Rank<'g>>,
    alone: Replica<'g>,
    reference: Reference,
    init: Vec<f32>,
}

/// The weight change (final - initial) in float64.
fn change(params: &[f32], init: &[f32]) -> Vec<f64> {
    params
        .iter()
        .zip(init)
        .map(|(&p, &i)| p as f64 - i as f64)
        .collect()
}

impl<'g> DataParallel<'g> {
    /// Data, weights, communicators and streams on every GPU (rank r on `gpus[r]`), and the
    /// one-GPU run of the global batch on the first.
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
            let replica = Replica::new(gpu, arch, &init, &shard, cfg.per_rank, slot)?;
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
            global,
            LossSlot::whole_step(global),
        )?;
        alone.train_alone()?;
        gpus[0].sync()?;
        let reference = Reference {
            label: REFERENCE_LABEL.into(),
            parts: vec![
                (
                    WEIGHT_CHANGE.into(),
                    change(&gpus[0].download(&alone.model.params)?, &init),
                ),
                (
                    LOSS_CURVE.into(),
                    loss_curve(&gpus[0].download(&alone.losses.values)?, global),
                ),
            ],
        };
        Ok(DataParallel {
            cfg,
            plan,
            ranks,
            alone,
            reference,
            init,
        })
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
            "learning_rate": LEARNING_RATE,
            "optimizer": "SGD",
            "seed": SEED,
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
                .with_tolerance(WEIGHT_CHANGE_TOLERANCE)
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
        let side = Side::ALL[index];
        let plan = &self.plan;
        std::thread::scope(|s| {
            let handles: Vec<_> = self
                .ranks
                .iter_mut()
                .map(|rank| s.spawn(move || rank.train(side, plan)))
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

    fn poison(&mut self, _gpu: &Gpu, _index: usize) -> Result<()> {
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
        let first: Vec<f64> = weights[0].iter().map(|&w| w as f64).collect();
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
                .part(WEIGHT_CHANGE, change(&weights[0], &self.init), None)
                .part(
                    LOSS_CURVE,
                    loss_curve(&losses, global),
                    Some(LOSS_CURVE_TOLERANCE),
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
        Ok(timed
            .time_ms
            .as_ref()
            .map(|t| {
                vec![Metric::new(
                    "samples/s",
                    self.samples_per_s(t.median / 1e3),
                    "",
                )]
            })
            .unwrap_or_default())
    }

    fn sections(
        &mut self,
        _gpu: &Gpu,
        variants: &[VariantReport],
        meter: &mut Meter,
    ) -> Result<Vec<Section>> {
        let mut section = Section::new("Throughput and scaling");
        let n = self.ranks.len();
        let one_gpu = if n > 1 {
            let cfg = meter.bench;
            let alone = &mut self.alone;
            let timed = meter.measure(&cfg, &mut || alone.train_alone())?;
            Some(timed)
        } else {
            None
        };
        let one_gpu_rate = one_gpu
            .as_ref()
            .map(|t| self.samples_per_s(t.time_ms.median / 1e3));
        let mut table = Table::new()
            .left("side")
            .right("GPUs")
            .right("samples/s")
            .right("verified")
            .right("vs one GPU");
        if let Some(rate) = one_gpu_rate {
            table.row(vec![
                "one GPU, the global batch".into(),
                "1".into(),
                three_figures(rate),
                "reference".into(),
                "1.00x".into(),
            ]);
        }
        for v in variants {
            let rate = v.metric("samples/s");
            table.row(vec![
                v.name.clone(),
                n.to_string(),
                rate.map(three_figures).unwrap_or_else(|| "-".into()),
                format!("{:?}", v.status),
                match (rate, one_gpu_rate) {
                    (Some(r), Some(one)) => format!("{:.2}x", r / one),
                    _ => "-".into(),
                },
            ]);
        }
        section.table = Some(table);
        section.lines.push(format!(
            "{} rank(s), global batch {} ({} per rank), {} steps per run, {} bucket(s) of at most {} MiB.",
            n,
            self.global(),
            self.cfg.per_rank,
            self.cfg.steps,
            self.plan.buckets.len(),
            self.cfg.bucket_bytes >> 20,
        ));
        if n == 1 {
            section.lines.push(
                "One rank: the all-reduce moves nothing between GPUs, so both sides pay only its launch; scaling needs two or more GPUs.".into(),
            );
        }
        section.data = json!({
            "one_gpu_samples_per_s": one_gpu_rate,
            "one_gpu": one_gpu.map(|t| t.measurement).map(|m: Measurement| m.samples_s),
        });
        Ok(vec![section])
    }
}
