//! What the six training variants share, so that each variant's file holds its loop and
//! nothing else.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use cudarc::driver::{sys, CudaEvent, CudaGraph, CudaSlice, CudaStream};

use common::error::CudaContext as _;
use common::gpu::Gpu;
use common::pinned::Pinned;
use common::Result;
use mlp::{
    initial_params, Activations, Allocator, Arch, DeviceBuf, Exec, Init, Input, LossSlot, Losses,
    Mlp, Model, Optimizer, Samples, BLAS_WORKSPACE_BYTES,
};

use super::config::TrainConfig;

/// The model, its operations and every sample's loss of the run.
pub struct Trainer {
    mlp: Mlp,
    pub model: Model,
    pub losses: Losses,
    lr: f32,
    samples_per_step: usize,
}

impl Trainer {
    /// Forward, loss and backward of `rows` of `buf`, `offset` samples into their step: the
    /// step's first pass overwrites the gradient, later ones add to it.
    pub fn pass(
        &mut self,
        ex: &Exec,
        buf: &mut Buffers,
        rows: Range<usize>,
        offset: usize,
    ) -> Result<()> {
        let input = buf.input(ex.gpu, rows);
        let slot = LossSlot {
            samples_per_step: self.samples_per_step,
            offset,
        };
        let act = &mut buf.act;
        self.mlp
            .forward_loss(ex, &self.model, act, input, &mut self.losses, slot)?;
        self.mlp
            .backward(ex, &mut self.model, act, input, offset > 0)
    }

    /// The SGD step; the losses' step counter moves on.
    pub fn update(&mut self, ex: &Exec) -> Result<()> {
        self.mlp
            .update(ex, &mut self.model, self.lr, Some(&mut self.losses))
    }
}

/// Device features and labels for some rows of samples, and the activations of a pass.
pub struct Buffers {
    arch: Arch,
    x: DeviceBuf<f32>,
    labels: DeviceBuf<i32>,
    act: Activations,
}

impl Buffers {
    pub fn new(gpu: &Gpu, arch: Arch, rows: usize, allocator: Allocator) -> Result<Buffers> {
        Buffers::with_slots(gpu, arch, rows, 1, allocator)
    }

    /// Input for `slots` passes of `rows` each, activations for one.
    fn with_slots(gpu: &Gpu, arch: Arch, rows: usize, slots: usize, a: Allocator) -> Result<Self> {
        Ok(Buffers {
            arch,
            x: DeviceBuf::new(gpu, a, slots * rows * arch.input, "input")?,
            labels: DeviceBuf::new(gpu, a, slots * rows, "labels")?,
            act: Activations::new(gpu, &arch, false, rows, a)?,
        })
    }

    fn input(&self, gpu: &Gpu, rows: Range<usize>) -> Input {
        let ni = self.arch.input;
        let x = self.x.slice(rows.start * ni..rows.end * ni);
        let labels = self.labels.slice(rows.clone());
        Input::new(gpu, &self.arch, &x, &labels, rows.len())
    }
}

/// The dataset in pageable memory and again in page-locked memory (pinned once, when loaded,
/// as a data loader does), and pinned staging of two steps at fixed addresses for the graphs.
pub struct Data {
    pub samples: Samples,
    width: usize,
    step_batch: usize,
    pinned_x: Pinned<f32>,
    pinned_labels: Pinned<i32>,
    staged_x: Pinned<f32>,
    staged_labels: Pinned<i32>,
}

impl Data {
    fn new(gpu: &Gpu, samples: Samples, width: usize, step_batch: usize) -> Result<Data> {
        Ok(Data {
            width,
            step_batch,
            pinned_x: Pinned::from_slice(gpu, &samples.features, "the pinned dataset")?,
            pinned_labels: Pinned::from_slice(gpu, &samples.labels, "the pinned labels")?,
            staged_x: Pinned::new(gpu, 2 * step_batch * width, "pinned staging of features")?,
            staged_labels: Pinned::new(gpu, 2 * step_batch, "pinned staging of labels")?,
            samples,
        })
    }

    /// Copy `samples` to the first rows of `buf`: through the driver's bounce buffer, the host
    /// waiting.
    pub fn copy_pageable(&self, gpu: &Gpu, samples: Range<usize>, buf: &mut Buffers) -> Result<()> {
        let _copy = common::nvtx::range("copy in");
        let (ni, n) = (self.width, samples.len());
        gpu.stream
            .memcpy_htod(
                &self.samples.features[samples.start * ni..samples.end * ni],
                &mut buf.x.slice_mut(..n * ni),
            )
            .cuda("copying input")?;
        gpu.stream
            .memcpy_htod(
                &self.samples.labels[samples],
                &mut buf.labels.slice_mut(..n),
            )
            .cuda("copying labels")
    }

    /// Copy `samples` to the first rows of `buf`: one DMA each, queued; the host goes on.
    pub fn copy_pinned(&self, gpu: &Gpu, samples: Range<usize>, buf: &mut Buffers) -> Result<()> {
        let _copy = common::nvtx::range("copy in");
        let (ni, n) = (self.width, samples.len());
        self.pinned_x.copy_to_device(
            samples.start * ni..samples.end * ni,
            &mut buf.x.slice_mut(..n * ni),
            &gpu.stream,
        )?;
        self.pinned_labels
            .copy_to_device(samples, &mut buf.labels.slice_mut(..n), &gpu.stream)
    }

    /// Copy step `step`'s samples into staging slot `slot` (no copy out of it may be in flight).
    pub fn stage(&mut self, step: usize, slot: usize) {
        let (sb, ni) = (self.step_batch, self.width);
        let s = step * sb;
        self.staged_x.as_mut_slice()[slot * sb * ni..(slot + 1) * sb * ni]
            .copy_from_slice(&self.samples.features[s * ni..(s + sb) * ni]);
        self.staged_labels.as_mut_slice()[slot * sb..(slot + 1) * sb]
            .copy_from_slice(&self.samples.labels[s..s + sb]);
    }

    /// Queue the copy of staged `rows` (of both slots) into the same rows of `buf`.
    pub fn copy_staged(
        &self,
        rows: Range<usize>,
        buf: &mut Buffers,
        stream: &Arc<CudaStream>,
    ) -> Result<()> {
        let _copy = common::nvtx::range("copy in");
        let ni = self.width;
        self.staged_x.copy_to_device(
            rows.start * ni..rows.end * ni,
            &mut buf.x.slice_mut(rows.start * ni..rows.end * ni),
            stream,
        )?;
        self.staged_labels
            .copy_to_device(rows.clone(), &mut buf.labels.slice_mut(rows), stream)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Captured {
    /// A whole step of microbatches, each copied in from staging slot 0 first.
    StepWithCopies,
    /// A step computing on device slot `.0` while the copy stream brings staging slot `.1`
    /// (when there is a next step) into the device slot of the same number.
    Overlapped(usize, Option<usize>),
    /// A step's compute alone on device slot 0, `pass` samples per pass, no copies.
    ComputeOnly { pass: usize },
    /// Steps `first..first + count`, each microbatch copied straight from the page-locked
    /// dataset into device slot 0 (the steps-per-graph sweep).
    Steps { first: usize, count: usize },
}

/// CUDA graphs captured from the compute stream, each once, replayed after.
#[derive(Default)]
pub struct Graphs(HashMap<Captured, CudaGraph>);

impl Graphs {
    /// Launch the graph for `key`, captured from what `queue` queues the first time (warmup
    /// runs capture every graph a run needs, so timed runs only replay).
    pub fn replay(
        &mut self,
        gpu: &Gpu,
        key: Captured,
        queue: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        self.capture_once(gpu, key, queue)?;
        self.launch(key)
    }

    pub fn capture_once(
        &mut self,
        gpu: &Gpu,
        key: Captured,
        queue: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        if self.0.contains_key(&key) {
            return Ok(());
        }
        // Capture queues nothing; make sure no earlier work is pending either.
        gpu.sync()?;
        let graph = gpu.capture(queue)?;
        graph.upload().cuda("uploading the step graph")?;
        self.0.insert(key, graph);
        Ok(())
    }

    /// The copies and kernels of the graph for `key`.
    pub fn nodes(&self, key: Captured) -> Option<usize> {
        let graph = self.0.get(&key)?;
        let mut count = 0usize;
        // SAFETY: a null node array asks only for the count.
        unsafe { sys::cuGraphGetNodes(graph.cu_graph(), std::ptr::null_mut(), &mut count) }
            .result()
            .ok()?;
        Some(count)
    }

    pub fn retain(&mut self, keep: impl Fn(&Captured) -> bool) {
        self.0.retain(|key, _| keep(key));
    }

    pub fn launch(&self, key: Captured) -> Result<()> {
        self.0
            .get(&key)
            .ok_or_else(|| common::Error::invalid(format!("no graph captured for {key:?}")))?
            .launch()
            .cuda("launching the step graph")
    }
}

/// A second stream for copies, the events that order it against the compute stream, and an
/// event per staging slot that says when the GPU has copied out of it.
pub struct Overlap {
    copy_stream: Arc<CudaStream>,
    fork: CudaEvent,
    join: CudaEvent,
    staging_copied: [CudaEvent; 2],
}

impl Overlap {
    pub fn new(gpu: &Gpu) -> Result<Overlap> {
        let event = || gpu.ctx.new_event(None).cuda("creating an event");
        Ok(Overlap {
            copy_stream: gpu.ctx.new_stream().cuda("creating the copy stream")?,
            fork: event()?,
            join: event()?,
            staging_copied: [event()?, event()?],
        })
    }

    /// The copy stream, starting after what the compute stream has queued so far.
    pub fn fork(&self, gpu: &Gpu) -> Result<&Arc<CudaStream>> {
        self.fork.record(&gpu.stream).cuda("recording the fork")?;
        self.copy_stream
            .wait(&self.fork)
            .cuda("forking the copy stream")?;
        Ok(&self.copy_stream)
    }

    /// The compute stream goes on only after what the copy stream has queued so far.
    pub fn join(&self, gpu: &Gpu) -> Result<()> {
        self.join
            .record(&self.copy_stream)
            .cuda("recording the join")?;
        gpu.stream.wait(&self.join).cuda("joining the copy stream")
    }

    /// Mark, in compute-stream order, that staging slot `slot` has been copied out of.
    pub fn staging_copied(&self, gpu: &Gpu, slot: usize) -> Result<()> {
        self.staging_copied[slot]
            .record(&gpu.stream)
            .cuda("recording an event")
    }

    /// The host waits until staging slot `slot` may be written again.
    pub fn wait_for_staging(&self, slot: usize) -> Result<()> {
        self.staging_copied[slot]
            .synchronize()
            .cuda("waiting for a staging slot")
    }
}

pub struct RunOutput {
    pub params: Vec<f32>,
    pub losses: Vec<f32>,
}

pub struct Engine<'g> {
    pub gpu: &'g Gpu,
    pub cfg: TrainConfig,
    pub train: Trainer,
    pub data: Data,
    /// Device buffers allocated once: two step-sized input slots and one step's activations.
    pub pre: Buffers,
    pub graphs: Graphs,
    pub overlap: Overlap,
    pub init: Vec<f32>,
    init_dev: CudaSlice<f32>,
}

impl<'g> Engine<'g> {
    /// Every buffer a variant uses, the dataset and initial weights, each pass size run once.
    pub fn new(gpu: &'g Gpu, cfg: TrainConfig) -> Result<Engine<'g>> {
        cfg.validate().map_err(common::Error::invalid)?;
        let arch = cfg.arch();
        let (params, sb) = (arch.param_count(), cfg.step_batch);
        let device_bytes = 4
            * (3 * params
                + cfg.samples
                + 2 * sb * (arch.input + 1)
                + sb * (2 * arch.hidden + arch.classes))
            + BLAS_WORKSPACE_BYTES;
        gpu.check_fits("the training run's buffers", device_bytes as u64)?;
        common::gpu::check_host_fits(
            "the dataset",
            (cfg.samples * (arch.input + 1) * 4) as u64 * 2,
        )?;
        let mlp = Mlp::new(gpu)?;
        let samples = Samples::synthetic(arch.input, arch.classes, cfg.samples, cfg.seed);
        let init = initial_params(&arch, cfg.seed.wrapping_add(100), Init::HE_LECUN_OUTPUT);
        let mut engine = Engine {
            gpu,
            cfg,
            train: Trainer {
                mlp,
                model: Model::new(gpu, arch, Optimizer::PLAIN_SGD, false, &init)?,
                losses: Losses::new(gpu, cfg.samples)?,
                lr: cfg.lr,
                samples_per_step: sb,
            },
            data: Data::new(gpu, samples, arch.input, sb)?,
            pre: Buffers::with_slots(gpu, arch, sb, 2, Allocator::Pool)?,
            graphs: Graphs::default(),
            overlap: Overlap::new(gpu)?,
            init_dev: gpu.upload(&init, "initial weights")?,
            init,
        };
        engine.warm_up()?;
        Ok(engine)
    }

    pub fn reset(&mut self) -> Result<()> {
        let t = &mut self.train;
        t.mlp
            .reset(&Exec::queued(self.gpu), &mut t.model, &self.init_dev)?;
        t.losses.rewind(self.gpu)
    }

    pub fn download(&self) -> Result<RunOutput> {
        Ok(RunOutput {
            params: self.gpu.download(&self.train.model.params)?,
            losses: self.gpu.download(&self.train.losses.values)?,
        })
    }

    /// One step's compute on device slot 0, `pass` samples per pass.
    fn queue_compute(&mut self, ex: &Exec, pass: usize) -> Result<()> {
        for first in (0..self.cfg.step_batch).step_by(pass) {
            self.train
                .pass(ex, &mut self.pre, first..first + pass, first)?;
        }
        self.train.update(ex)
    }

    fn load_slot_zero(&mut self) -> Result<()> {
        self.data.stage(0, 0);
        let rows = 0..self.cfg.step_batch;
        self.data.copy_staged(rows, &mut self.pre, &self.gpu.stream)
    }

    /// Run each pass shape once, eagerly, so that cuBLAS's and the driver's lazy setup (kernel
    /// selection, module loading) never happens inside a stream capture.
    fn warm_up(&mut self) -> Result<()> {
        self.load_slot_zero()?;
        let ex = Exec::queued(self.gpu);
        for pass in [self.cfg.microbatch, self.cfg.step_batch] {
            self.reset()?;
            self.queue_compute(&ex, pass)?;
        }
        self.gpu.sync()
    }

    /// Capture one step's GEMMs and kernels alone (no copies, no host waits) at `pass` samples
    /// per pass, with real data in place and the initial weights.
    pub fn prepare_compute_only(&mut self, pass: usize) -> Result<()> {
        self.load_slot_zero()?;
        self.reset()?;
        let gpu = self.gpu;
        let mut graphs = std::mem::take(&mut self.graphs);
        let captured = graphs.capture_once(gpu, Captured::ComputeOnly { pass }, || {
            self.queue_compute(&Exec::queued(gpu), pass)
        });
        self.graphs = graphs;
        captured
    }
}
