//! The model and a batch on the device: the parameters with their gradient and optimizer state,
//! the activations of a batch, where each sample's loss goes, and the batch's input.

use cudarc::driver::{CudaSlice, DevicePtr};

use common::error::CudaContext as _;
use common::gpu::Gpu;
use common::Result;

use crate::arch::Arch;
use crate::buffers::{Allocator, DeviceBuf};
use crate::optimizer::Optimizer;

/// Batches up to this size take the bias gradient in one pass (one block per 32 features walks
/// the whole batch); larger ones in chunks of at least `BIAS_CHUNK_ROWS` samples, at most
/// `MAX_BIAS_CHUNKS` of them, then a pass over the chunks.
const ONE_PASS_BIAS_BATCH: usize = 65536;
const BIAS_CHUNK_ROWS: usize = 32768;
const MAX_BIAS_CHUNKS: usize = 1024;

/// How many chunks the bias gradient of `batch` samples is summed in (1: one pass, no scratch).
pub fn bias_chunks(batch: usize) -> usize {
    if batch <= ONE_PASS_BIAS_BATCH {
        1
    } else {
        batch.div_ceil(BIAS_CHUNK_ROWS).min(MAX_BIAS_CHUNKS)
    }
}

/// Floats of the bias-gradient scratch for a batch: the chunks' partial sums of the widest
/// layer output (none for a one-pass batch).
pub fn bias_scratch_len(arch: &Arch, batch: usize) -> usize {
    match bias_chunks(batch) {
        1 => 0,
        c => c * arch.max_width(),
    }
}

/// Activation-gradient buffers of `max_width x batch` a backward pass needs: one per hidden
/// layer, reused in turn (two at most, ping-pong).
pub fn gradient_buffers(arch: &Arch) -> usize {
    arch.depth.min(2)
}

/// The model on the device: fp32 master parameters, their gradient, the optimizer's state, and
/// the bf16 copy of the weights under mixed precision.
pub struct Model {
    pub arch: Arch,
    pub optimizer: Optimizer,
    pub params: CudaSlice<f32>,
    pub grads: CudaSlice<f32>,
    pub(crate) state1: Option<CudaSlice<f32>>,
    pub(crate) state2: Option<CudaSlice<f32>>,
    pub params16: Option<CudaSlice<u16>>,
    /// Optimizer steps taken (AdamW's bias correction is computed from it on the host).
    pub steps: u32,
}

impl Model {
    /// The model at `init` (the flat parameter vector), with zeroed optimizer state.
    pub fn new(
        gpu: &Gpu,
        arch: Arch,
        optimizer: Optimizer,
        amp: bool,
        init: &[f32],
    ) -> Result<Model> {
        let n = arch.param_count();
        assert_eq!(init.len(), n, "initial parameters of another model");
        let params = gpu.upload(init, "the parameters")?;
        let zeros = |what: &str| gpu.alloc_zeros::<f32>(n, what);
        let copies = optimizer.state_copies();
        let state1 = if copies >= 1 {
            Some(zeros("optimizer state (momentum / first moment)")?)
        } else {
            None
        };
        let state2 = if copies >= 2 {
            Some(zeros("optimizer state (second moment)")?)
        } else {
            None
        };
        let params16 = if amp {
            let bits: Vec<u16> = init.iter().map(|&x| common::blas::bf16_bits(x)).collect();
            Some(gpu.upload(&bits, "the bf16 weight copy")?)
        } else {
            None
        };
        Ok(Model {
            arch,
            optimizer,
            params,
            grads: gpu.alloc_zeros(n, "the gradients")?,
            state1,
            state2,
            params16,
            steps: 0,
        })
    }

    pub fn amp(&self) -> bool {
        self.params16.is_some()
    }
}

/// Where each sample's loss goes: `values[step * samples_per_step + offset + b]`, with `step` a
/// counter on the device (so a replayed CUDA graph writes each step's losses to their own
/// place). A run that keeps every sample's loss advances it with each update; a buffer of one
/// batch keeps it at 0.
pub struct Losses {
    pub values: CudaSlice<f32>,
    pub step: CudaSlice<i32>,
}

impl Losses {
    /// Room for `samples` losses, the counter at 0.
    pub fn new(gpu: &Gpu, samples: usize) -> Result<Losses> {
        Ok(Losses {
            values: gpu.alloc(samples, "per-sample losses")?,
            step: gpu.alloc_zeros(1, "the loss slot counter")?,
        })
    }

    /// Start a run: the counter back to 0.
    pub fn rewind(&mut self, gpu: &Gpu) -> Result<()> {
        gpu.stream
            .memset_zeros(&mut self.step)
            .cuda("resetting the step counter")
    }
}

/// Where a batch sits in its optimizer step: the loss is the mean over `samples_per_step`
/// samples (so microbatches add up to the step's gradient), and this batch's losses start at
/// `offset` within the step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LossSlot {
    pub samples_per_step: usize,
    pub offset: usize,
}

impl LossSlot {
    /// A batch that is the whole step.
    pub fn whole_step(samples: usize) -> LossSlot {
        LossSlot {
            samples_per_step: samples,
            offset: 0,
        }
    }
}

/// A batch's input on the device: `samples x input` fp32 features and `samples` i32 labels.
#[derive(Debug, Clone, Copy)]
pub struct Input {
    pub(crate) x: u64,
    pub(crate) labels: u64,
    pub samples: usize,
}

impl Input {
    /// The first `samples` rows of `x` and `labels` (checked to hold them).
    pub fn new<X: DevicePtr<f32>, L: DevicePtr<i32>>(
        gpu: &Gpu,
        arch: &Arch,
        x: &X,
        labels: &L,
        samples: usize,
    ) -> Input {
        assert!(samples >= 1, "a batch of no samples");
        assert!(x.len() >= samples * arch.input && labels.len() >= samples);
        // Event tracking is off (Gpu::open), so the guards cudarc returns record nothing.
        Input {
            x: x.device_ptr(&gpu.stream).0,
            labels: labels.device_ptr(&gpu.stream).0,
            samples,
        }
    }
}

/// One batch's activations and activation gradients, for up to `capacity` samples, from either
/// allocator.
pub struct Activations {
    pub capacity: usize,
    /// One per hidden layer, `hidden x batch`, post-ReLU (kept for backward).
    pub(crate) hidden: Vec<DeviceBuf<f32>>,
    /// `classes x batch`: logits, then their gradient (in place).
    pub(crate) logits: DeviceBuf<f32>,
    /// `max_width x batch` activation gradients, reused in turn ([gradient_buffers]).
    pub(crate) grads: Vec<DeviceBuf<f32>>,
    /// AMP: the input, each hidden activation and the current activation gradient in bf16.
    pub(crate) x16: Option<DeviceBuf<u16>>,
    pub(crate) hidden16: Vec<DeviceBuf<u16>>,
    pub(crate) grad16: Option<DeviceBuf<u16>>,
    /// Large batches: the bias gradient's partial sums per chunk ([bias_chunks]).
    pub(crate) bias_partials: Option<DeviceBuf<f32>>,
}

impl Activations {
    pub fn new(
        gpu: &Gpu,
        arch: &Arch,
        amp: bool,
        capacity: usize,
        alloc: Allocator,
    ) -> Result<Activations> {
        let b = capacity;
        let w = arch.max_width();
        let buf = |len: usize, what: &str| DeviceBuf::<f32>::new(gpu, alloc, len, what);
        let half = |len: usize, what: &str| DeviceBuf::<u16>::new(gpu, alloc, len, what);
        let hidden = (0..arch.depth)
            .map(|l| buf(arch.hidden * b, &format!("activations of layer {l}")))
            .collect::<Result<Vec<_>>>()?;
        let logits = buf(arch.classes * b, "the logits")?;
        let grads = (0..gradient_buffers(arch))
            .map(|_| buf(w * b, "activation gradients"))
            .collect::<Result<Vec<_>>>()?;
        let (x16, hidden16, grad16) = if amp {
            (
                Some(half(arch.input * b, "the bf16 input")?),
                (0..arch.depth)
                    .map(|l| half(arch.hidden * b, &format!("bf16 activations {l}")))
                    .collect::<Result<Vec<_>>>()?,
                Some(half(w * b, "the bf16 activation gradient")?),
            )
        } else {
            (None, Vec::new(), None)
        };
        let bias_partials = match bias_scratch_len(arch, b) {
            0 => None,
            n => Some(buf(n, "the bias gradient's partial sums")?),
        };
        Ok(Activations {
            capacity,
            hidden,
            logits,
            grads,
            x16,
            hidden16,
            grad16,
            bias_partials,
        })
    }
}
