//! The training-loop variants: the same SGD run (same samples, same steps, same initial
//! weights) executed six ways. See the crate documentation for the lesson.

use std::collections::HashMap;

use cudarc::cublas::CudaBlas;
use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{CudaEvent, CudaGraph, CudaSlice, CudaStream, DevicePtrMut};
use serde::Serialize;

use common::blas::BlasContext as _;
use common::error::CudaContext as _;
use common::gpu::Gpu;
use common::Result;

use crate::memory::{Allocator, DeviceBuf, Pinned};
use crate::model::{Dataset, Dims};
use crate::step::{Activations, Exec, LossSlot, Mlp, ModelState, StepKernels};

pub use crate::train_lesson::TrainingLesson;

/// The sizes of one training run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct TrainConfig {
    pub dims: Dims,
    /// Samples trained on (one pass).
    pub samples: usize,
    /// Samples per optimizer step (the effective batch).
    pub step_batch: usize,
    /// Samples per microbatch of the gradient-accumulating variants.
    pub microbatch: usize,
    pub lr: f32,
    pub seed: u64,
}

impl TrainConfig {
    pub fn steps(&self) -> usize {
        self.samples / self.step_batch
    }

    /// The sizes must divide evenly; every message says what to change.
    pub fn validate(&self) -> std::result::Result<(), String> {
        if self.samples == 0 || self.step_batch == 0 || self.microbatch == 0 {
            return Err("samples, batch and microbatch must be at least 1".into());
        }
        if self.samples % self.step_batch != 0 {
            return Err(format!(
                "the batch ({}) does not divide the samples ({}): every step must be full; use a multiple of the batch",
                self.step_batch, self.samples
            ));
        }
        if self.step_batch % self.microbatch != 0 {
            return Err(format!(
                "the microbatch ({}) does not divide the batch ({}): gradient accumulation needs equal microbatches",
                self.microbatch, self.step_batch
            ));
        }
        Ok(())
    }
}

/// What each variant changes relative to the baseline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Features {
    /// Input copied from page-locked host memory with asynchronous copies.
    pub pinned: bool,
    /// Device buffers allocated once, not per microbatch.
    pub prealloc: bool,
    /// One batch per step instead of microbatches with gradient accumulation.
    pub batch: bool,
    /// The step is captured once as a CUDA graph and replayed.
    pub graphs: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Variant {
    Baseline,
    Pinned,
    Prealloc,
    Batch,
    Graphs,
    Optimized,
}

impl Variant {
    pub const ALL: [Variant; 6] = [
        Variant::Baseline,
        Variant::Pinned,
        Variant::Prealloc,
        Variant::Batch,
        Variant::Graphs,
        Variant::Optimized,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Variant::Baseline => "baseline",
            Variant::Pinned => "pinned",
            Variant::Prealloc => "prealloc",
            Variant::Batch => "batch",
            Variant::Graphs => "graphs",
            Variant::Optimized => "optimized",
        }
    }

    pub fn by_name(name: &str) -> Option<Variant> {
        Variant::ALL.into_iter().find(|v| v.name() == name)
    }

    pub fn description(self) -> &'static str {
        match self {
            Variant::Baseline => "8 x 32 accumulated; cuMemAlloc/cuMemFree per microbatch, pageable copies, sync after every op",
            Variant::Pinned => "baseline, but the data sits in page-locked host memory: each copy is one asynchronous DMA",
            Variant::Prealloc => "baseline, but device buffers allocated once and reused",
            Variant::Batch => "baseline, but one batch of 256 per step instead of 8 x 32",
            Variant::Graphs => "8 x 32, the whole step (copies in, forward, backward, update) one CUDA graph, one sync per step",
            Variant::Optimized => "pinned + prealloc + batch 256 + graphs; next batch copied while this one computes, no per-step sync",
        }
    }

    pub fn features(self) -> Features {
        let none = Features {
            pinned: false,
            prealloc: false,
            batch: false,
            graphs: false,
        };
        match self {
            Variant::Baseline => none,
            Variant::Pinned => Features {
                pinned: true,
                ..none
            },
            Variant::Prealloc => Features {
                prealloc: true,
                ..none
            },
            Variant::Batch => Features {
                batch: true,
                ..none
            },
            // A graph needs fixed addresses (preallocated buffers) and a page-locked source
            // for the copies it contains; those come with it.
            Variant::Graphs => Features {
                graphs: true,
                pinned: true,
                prealloc: true,
                batch: false,
            },
            Variant::Optimized => Features {
                pinned: true,
                prealloc: true,
                batch: true,
                graphs: true,
            },
        }
    }
}

/// How a captured step gets its input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum CopyIn {
    /// Copy each microbatch from pinned slot 0 into device slot 0, then compute on it.
    PerMicrobatch,
    /// Compute on device slot `compute` (copied earlier); meanwhile, on the copy stream, copy
    /// pinned slot `prefetch` into the device slot of the same number.
    Overlapped {
        compute: usize,
        prefetch: Option<usize>,
    },
    /// Compute on device slot 0, `pass` samples per pass, no copies: the step's compute alone.
    ComputeOnly { pass: usize },
}

/// What a finished run left on the device, brought back.
pub struct RunOutput {
    pub params: Vec<f32>,
    pub losses: Vec<f32>,
}

/// The GPU side of the lesson: the model, the data, and every buffer any variant uses.
pub struct Trainer<'g> {
    gpu: &'g Gpu,
    pub cfg: TrainConfig,
    pub data: Dataset,
    pub init: Vec<f32>,
    init_dev: CudaSlice<f32>,
    state: ModelState,
    kernels: StepKernels,
    blas: CudaBlas,
    _workspace: CudaSlice<u8>,
    /// The dataset again, in page-locked memory (pinned once when it is loaded, as a data loader
    /// with pinned memory does): the pinned variant copies from here.
    pinned_x: Pinned<f32>,
    pinned_labels: Pinned<i32>,
    /// Pinned staging at fixed addresses for the graphs: two slots of one step.
    staged_x: Pinned<f32>,
    staged_labels: Pinned<i32>,
    /// Preallocated device input: two slots of one step.
    x_dev: CudaSlice<f32>,
    labels_dev: CudaSlice<i32>,
    acts: Activations,
    copy_stream: std::sync::Arc<CudaStream>,
    fork: CudaEvent,
    join: CudaEvent,
    slot_free: [CudaEvent; 2],
    graphs: HashMap<CopyIn, CudaGraph>,
}

/// cuBLAS's recommended workspace on Hopper, set explicitly so that nothing is allocated while
/// a graph is captured.
const BLAS_WORKSPACE_BYTES: usize = 32 << 20;

impl<'g> Trainer<'g> {
    pub fn new(gpu: &'g Gpu, cfg: TrainConfig) -> Result<Trainer<'g>> {
        cfg.validate().map_err(common::Error::invalid)?;
        let d = cfg.dims;
        let device_bytes = 4
            * (3 * d.param_count()
                + cfg.samples
                + 2 * cfg.step_batch * (d.input + 1)
                + cfg.step_batch * (2 * d.hidden + d.classes))
            + BLAS_WORKSPACE_BYTES;
        gpu.check_fits("the training run's buffers", device_bytes as u64)?;
        common::gpu::check_host_fits("the dataset", (cfg.samples * (d.input + 1) * 4) as u64 * 2)?;
        let kernels = StepKernels::load(gpu)?;
        let blas = common::blas::handle(gpu)?;
        let mut workspace = gpu.alloc::<u8>(BLAS_WORKSPACE_BYTES, "the cuBLAS workspace")?;
        {
            let (ptr, _record) = workspace.device_ptr_mut(&gpu.stream);
            // SAFETY: the workspace outlives the handle's use (both live in the Trainer, and the
            // handle is only used through it).
            unsafe {
                cudarc::cublas::sys::cublasSetWorkspace_v2(
                    *blas.handle(),
                    ptr as *mut std::ffi::c_void,
                    BLAS_WORKSPACE_BYTES,
                )
            }
            .result()
            .blas(gpu, "setting the cuBLAS workspace")?;
        }
        let data = Dataset::synthetic(d, cfg.samples, cfg.seed);
        let init = crate::model::initial_params(d, cfg.seed.wrapping_add(100));
        let slot = cfg.step_batch;
        let mut pinned_x = Pinned::new(gpu, data.features.len(), "the pinned dataset")?;
        pinned_x.as_mut_slice().copy_from_slice(&data.features);
        let mut pinned_labels = Pinned::new(gpu, data.labels.len(), "the pinned labels")?;
        pinned_labels.as_mut_slice().copy_from_slice(&data.labels);
        let event = || gpu.ctx.new_event(None).cuda("creating an event");
        let mut trainer = Trainer {
            gpu,
            cfg,
            init_dev: gpu.upload(&init, "initial weights")?,
            state: ModelState::new(gpu, d, cfg.samples)?,
            kernels,
            blas,
            _workspace: workspace,
            pinned_x,
            pinned_labels,
            staged_x: Pinned::new(gpu, 2 * slot * d.input, "pinned staging of features")?,
            staged_labels: Pinned::new(gpu, 2 * slot, "pinned staging of labels")?,
            x_dev: gpu.alloc(2 * slot * d.input, "device input")?,
            labels_dev: gpu.alloc(2 * slot, "device labels")?,
            acts: Activations::new(gpu, d, slot, Allocator::Pool)?,
            copy_stream: gpu.ctx.new_stream().cuda("creating the copy stream")?,
            fork: event()?,
            join: event()?,
            slot_free: [event()?, event()?],
            graphs: HashMap::new(),
            data,
            init,
        };
        trainer.warm_up()?;
        Ok(trainer)
    }

    /// Samples per forward/backward pass of a variant.
    pub fn pass_batch(&self, v: Variant) -> usize {
        if v.features().batch {
            self.cfg.step_batch
        } else {
            self.cfg.microbatch
        }
    }

    /// One complete training run of `v` (queued; eager variants have finished when it returns).
    pub fn run(&mut self, v: Variant) -> Result<()> {
        self.state.reset(self.gpu, &self.init_dev)?;
        let f = v.features();
        if f.graphs {
            self.run_graphs(v)
        } else {
            self.run_eager(f)
        }
    }

    /// Poison the losses, run once, and bring the result back.
    pub fn run_checked(&mut self, v: Variant) -> Result<RunOutput> {
        self.poison()?;
        self.run(v)?;
        self.gpu.sync()?;
        self.result()
    }

    /// Fill the run's losses with NaN, so that a step that writes none cannot pass.
    pub fn poison(&mut self) -> Result<()> {
        self.gpu.poison(&mut self.state.losses)
    }

    /// What the last (finished) run left on the device.
    pub fn result(&self) -> Result<RunOutput> {
        Ok(RunOutput {
            params: self.gpu.download(&self.state.params)?,
            losses: self.gpu.download(&self.state.losses)?,
        })
    }

    /// Copy step `step`'s samples (features and labels) into pinned slot `slot` (CPU work).
    fn stage(&mut self, step: usize, slot: usize) {
        let (sb, ni) = (self.cfg.step_batch, self.cfg.dims.input);
        let s = step * sb;
        self.staged_x.as_mut_slice()[slot * sb * ni..(slot + 1) * sb * ni]
            .copy_from_slice(&self.data.features[s * ni..(s + sb) * ni]);
        self.staged_labels.as_mut_slice()[slot * sb..(slot + 1) * sb]
            .copy_from_slice(&self.data.labels[s..s + sb]);
    }

    fn run_eager(&mut self, f: Features) -> Result<()> {
        let gpu = self.gpu;
        let cfg = self.cfg;
        let (ni, sb) = (cfg.dims.input, cfg.step_batch);
        let mb = if f.batch { sb } else { cfg.microbatch };
        let mut ex = Exec::new(gpu, true);
        for step in 0..cfg.steps() {
            for m in 0..sb / mb {
                let first = step * sb + m * mb;
                let (mut own_x, mut own_labels, mut own_acts) = (None, None, None);
                if !f.prealloc {
                    own_x = Some(DeviceBuf::<f32>::new(
                        gpu,
                        Allocator::Driver,
                        mb * ni,
                        "input",
                    )?);
                    own_labels = Some(DeviceBuf::<i32>::new(gpu, Allocator::Driver, mb, "labels")?);
                    own_acts = Some(Activations::new(gpu, cfg.dims, mb, Allocator::Driver)?);
                }
                let x: &mut CudaSlice<f32> = match own_x.as_mut() {
                    Some(b) => b,
                    None => &mut self.x_dev,
                };
                let labels: &mut CudaSlice<i32> = match own_labels.as_mut() {
                    Some(b) => b,
                    None => &mut self.labels_dev,
                };
                // An asynchronous copy from pinned memory is queued and left to run: the host
                // does not wait for it (the next operation's sync covers it). A pageable copy
                // makes the host wait anyway, and the baseline then syncs as after every op.
                ex.sync_every_op = !f.pinned;
                let copy_phase = common::nvtx::range("copy in");
                ex.op("copy input", || {
                    if f.pinned {
                        let st = &gpu.stream;
                        self.pinned_x.copy_to_device(
                            first * ni..(first + mb) * ni,
                            &mut x.slice_mut(..mb * ni),
                            st,
                        )?;
                        self.pinned_labels.copy_to_device(
                            first..first + mb,
                            &mut labels.slice_mut(..mb),
                            st,
                        )
                    } else {
                        gpu.stream
                            .memcpy_htod(
                                &self.data.features[first * ni..(first + mb) * ni],
                                &mut x.slice_mut(..mb * ni),
                            )
                            .cuda("copying input")?;
                        gpu.stream
                            .memcpy_htod(
                                &self.data.labels[first..first + mb],
                                &mut labels.slice_mut(..mb),
                            )
                            .cuda("copying labels")
                    }
                })?;
                drop(copy_phase);
                ex.sync_every_op = true;
                let acts = match own_acts.as_mut() {
                    Some(a) => a,
                    None => &mut self.acts,
                };
                let mlp = Mlp {
                    dims: cfg.dims,
                    blas: &self.blas,
                    kernels: &self.kernels,
                };
                let xv = x.slice(..mb * ni);
                let lv = labels.slice(..mb);
                let slot = LossSlot {
                    samples_per_step: sb,
                    offset: m * mb,
                };
                mlp.forward_loss(&mut ex, &mut self.state, &xv, &lv, acts, mb, slot)?;
                mlp.backward(&mut ex, &mut self.state, &xv, acts, mb, m > 0)?;
                // Buffers allocated for this microbatch are freed here (cuMemFree).
            }
            let mlp = Mlp {
                dims: cfg.dims,
                blas: &self.blas,
                kernels: &self.kernels,
            };
            mlp.sgd_update(&mut ex, &mut self.state, cfg.lr)?;
        }
        Ok(())
    }

    fn run_graphs(&mut self, v: Variant) -> Result<()> {
        let steps = self.cfg.steps();
        if v == Variant::Graphs {
            for step in 0..steps {
                self.stage(step, 0);
                self.graph(CopyIn::PerMicrobatch)?
                    .launch()
                    .cuda("launching the step graph")?;
                self.gpu.sync()?;
            }
            return Ok(());
        }
        // Optimized: step k computes on device slot k % 2 while the copy stream brings step
        // k + 1 into the other slot. The host fills pinned slot s only after the GPU has
        // finished copying out of it (event slot_free[s]).
        self.stage(0, 0);
        self.copy_slot(0, &self.gpu.stream.clone())?;
        self.slot_free[0]
            .record(&self.gpu.stream)
            .cuda("recording an event")?;
        for step in 0..steps {
            let next = (step + 1 < steps).then_some((step + 1) % 2);
            if let Some(s) = next {
                self.slot_free[s]
                    .synchronize()
                    .cuda("waiting for a staging slot")?;
                self.stage(step + 1, s);
            }
            let key = CopyIn::Overlapped {
                compute: step % 2,
                prefetch: next,
            };
            self.graph(key)?.launch().cuda("launching the step graph")?;
            if let Some(s) = next {
                self.slot_free[s]
                    .record(&self.gpu.stream)
                    .cuda("recording an event")?;
            }
        }
        Ok(())
    }

    /// Queue the copy of pinned slot `s` into device slot `s` on `stream`.
    fn copy_slot(&mut self, s: usize, stream: &std::sync::Arc<CudaStream>) -> Result<()> {
        let (sb, ni) = (self.cfg.step_batch, self.cfg.dims.input);
        self.staged_x.copy_to_device(
            s * sb * ni..(s + 1) * sb * ni,
            &mut self.x_dev.slice_mut(s * sb * ni..(s + 1) * sb * ni),
            stream,
        )?;
        self.staged_labels.copy_to_device(
            s * sb..(s + 1) * sb,
            &mut self.labels_dev.slice_mut(s * sb..(s + 1) * sb),
            stream,
        )
    }

    /// The captured graph for `key`, capturing it on first use (outside any timed run's
    /// steady state: warmup runs capture every graph a run needs).
    fn graph(&mut self, key: CopyIn) -> Result<&CudaGraph> {
        if !self.graphs.contains_key(&key) {
            let g = self.capture(key)?;
            self.graphs.insert(key, g);
        }
        Ok(&self.graphs[&key])
    }

    fn capture(&mut self, key: CopyIn) -> Result<CudaGraph> {
        let gpu = self.gpu;
        let stream = gpu.stream.clone();
        // Capture queues nothing; make sure no earlier work is pending either.
        gpu.sync()?;
        stream
            .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .cuda("beginning stream capture")?;
        let queued = self.queue_step(key);
        let graph = stream.end_capture(CUgraphInstantiate_flags(0));
        queued?;
        let graph = graph
            .cuda("ending stream capture")?
            .ok_or_else(|| common::Error::invalid("stream capture produced no graph"))?;
        graph.upload().cuda("uploading the step graph")?;
        Ok(graph)
    }

    /// The operations of one step, as captured into a graph.
    fn queue_step(&mut self, key: CopyIn) -> Result<()> {
        let gpu = self.gpu;
        let cfg = self.cfg;
        let mut ex = Exec::new(gpu, false);
        let (compute, mb) = match key {
            CopyIn::PerMicrobatch => (0, cfg.microbatch),
            CopyIn::ComputeOnly { pass } => (0, pass),
            CopyIn::Overlapped { compute, prefetch } => {
                if let Some(p) = prefetch {
                    self.fork.record(&gpu.stream).cuda("recording the fork")?;
                    let side = self.copy_stream.clone();
                    side.wait(&self.fork).cuda("forking the copy stream")?;
                    self.copy_slot(p, &side)?;
                    self.join.record(&side).cuda("recording the join")?;
                }
                (compute, cfg.step_batch)
            }
        };
        self.queue_compute_step(&mut ex, compute, mb, key == CopyIn::PerMicrobatch)?;
        if let CopyIn::Overlapped {
            prefetch: Some(_), ..
        } = key
        {
            gpu.stream
                .wait(&self.join)
                .cuda("joining the copy stream")?;
        }
        Ok(())
    }

    /// One step's compute on device slot `slot`, `mb` samples per pass, optionally copying
    /// each pass's input from pinned slot `slot` first: the operations a graph captures.
    fn queue_compute_step(
        &mut self,
        ex: &mut Exec,
        slot: usize,
        mb: usize,
        copy_each_pass: bool,
    ) -> Result<()> {
        let cfg = self.cfg;
        let (ni, sb) = (cfg.dims.input, cfg.step_batch);
        for m in 0..sb / mb {
            let rows = slot * sb + m * mb..slot * sb + (m + 1) * mb;
            if copy_each_pass {
                let _copy = common::nvtx::range("copy in");
                let stream = &ex.gpu.stream;
                self.staged_x.copy_to_device(
                    rows.start * ni..rows.end * ni,
                    &mut self.x_dev.slice_mut(rows.start * ni..rows.end * ni),
                    stream,
                )?;
                self.staged_labels.copy_to_device(
                    rows.clone(),
                    &mut self.labels_dev.slice_mut(rows.clone()),
                    stream,
                )?;
            }
            let mlp = Mlp {
                dims: cfg.dims,
                blas: &self.blas,
                kernels: &self.kernels,
            };
            let xv = self.x_dev.slice(rows.start * ni..rows.end * ni);
            let lv = self.labels_dev.slice(rows);
            let loss_slot = LossSlot {
                samples_per_step: sb,
                offset: m * mb,
            };
            mlp.forward_loss(ex, &mut self.state, &xv, &lv, &mut self.acts, mb, loss_slot)?;
            mlp.backward(ex, &mut self.state, &xv, &mut self.acts, mb, m > 0)?;
        }
        let mlp = Mlp {
            dims: cfg.dims,
            blas: &self.blas,
            kernels: &self.kernels,
        };
        mlp.sgd_update(ex, &mut self.state, cfg.lr)
    }

    /// Run each pass shape once, eagerly, so that cuBLAS's and the driver's lazy setup (kernel
    /// selection, module loading) never happens inside a stream capture.
    fn warm_up(&mut self) -> Result<()> {
        self.stage(0, 0);
        self.copy_slot(0, &self.gpu.stream.clone())?;
        let mut ex = Exec::new(self.gpu, false);
        for mb in [self.cfg.microbatch, self.cfg.step_batch] {
            self.state.reset(self.gpu, &self.init_dev)?;
            self.queue_compute_step(&mut ex, 0, mb, false)?;
        }
        self.gpu.sync()
    }

    /// GPU time of one step's compute alone (GEMMs and kernels, no copies, no host waits) for
    /// variant `v`'s pass size, in ms: the step's compute captured as a graph and replayed back
    /// to back behind the harness's blocking kernel, median per replay. It includes the graph's
    /// own gaps between kernels (about a microsecond each), nothing else.
    pub fn compute_ms_per_step(
        &mut self,
        v: Variant,
        meter: &mut common::runner::Meter,
    ) -> Result<f64> {
        let gpu = self.gpu;
        // Real data in the device slot, as a run would have it.
        self.stage(0, 0);
        self.copy_slot(0, &gpu.stream.clone())?;
        self.state.reset(gpu, &self.init_dev)?;
        let pass = self.pass_batch(v);
        let graph = self.graph(CopyIn::ComputeOnly { pass })?;
        let bench = meter.bench;
        let timed = meter.measure(&bench, &mut || {
            graph.launch().cuda("replaying the compute graph")
        })?;
        Ok(timed.time_ms.median)
    }
}
