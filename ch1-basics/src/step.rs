//! One MLP training step on the GPU, as reusable pieces: the kernels, the model's device state,
//! activation buffers, and `forward_loss` / `backward` / `sgd_update` that queue the step's
//! operations on the GPU's stream. Nothing here knows about the lesson's variants; how often
//! the host synchronizes is the caller's [Exec].
//!
//! cuBLAS is column-major: a sample-major `batch x features` activation matrix is, to cuBLAS, a
//! `features x batch` matrix with leading dimension `features`, and a row-major `[out][in]`
//! weight is an `in x out` matrix with leading dimension `in`. The GEMMs below are written in
//! those terms (and checked against the float64 reference in the GPU tests).

use cudarc::cublas::sys::cublasOperation_t as Op;
use cudarc::cublas::{CudaBlas, Gemm, GemmConfig};
use cudarc::driver::{
    CudaFunction, CudaSlice, CudaView, DevicePtr, DevicePtrMut, LaunchConfig, PushKernelArg,
};

use common::blas::BlasContext as _;
use common::error::CudaContext as _;
use common::gpu::Gpu;
use common::kernels::{self, KernelSource};
use common::Result;

use crate::memory::{Allocator, DeviceBuf};
use crate::model::Dims;

pub const KERNELS: KernelSource = KernelSource {
    name: "mlp",
    code: include_str!("../kernels/mlp.cu"),
};

const THREADS: u32 = 256;

/// The step's NVRTC kernels.
pub struct StepKernels {
    add_bias_relu: CudaFunction,
    add_bias: CudaFunction,
    relu_backward: CudaFunction,
    softmax_xent: CudaFunction,
    sum_over_batch: CudaFunction,
    sgd_step: CudaFunction,
}

impl StepKernels {
    pub fn load(gpu: &Gpu) -> Result<StepKernels> {
        let m = kernels::load(gpu, KERNELS, &[])?;
        Ok(StepKernels {
            add_bias_relu: m.function("add_bias_relu")?,
            add_bias: m.function("add_bias")?,
            relu_backward: m.function("relu_backward")?,
            softmax_xent: m.function("softmax_xent")?,
            sum_over_batch: m.function("sum_over_batch")?,
            sgd_step: m.function("sgd_step")?,
        })
    }
}

/// How operations are queued: whether the host waits after each one (the naive loop does).
pub struct Exec<'a> {
    pub gpu: &'a Gpu,
    pub sync_every_op: bool,
}

impl<'a> Exec<'a> {
    pub fn new(gpu: &'a Gpu, sync_every_op: bool) -> Exec<'a> {
        Exec { gpu, sync_every_op }
    }

    /// Queue one operation.
    pub fn op(&mut self, what: &str, queue: impl FnOnce() -> Result<()>) -> Result<()> {
        queue()?;
        if self.sync_every_op {
            self.gpu
                .stream
                .synchronize()
                .cuda(&format!("synchronizing after {what}"))?;
        }
        Ok(())
    }
}

/// The model on the device: parameters, their gradient, the step counter the loss kernel reads,
/// and every sample's loss of the run.
pub struct ModelState {
    pub dims: Dims,
    pub params: CudaSlice<f32>,
    pub grads: CudaSlice<f32>,
    pub step: CudaSlice<i32>,
    pub losses: CudaSlice<f32>,
}

impl ModelState {
    pub fn new(gpu: &Gpu, dims: Dims, samples: usize) -> Result<ModelState> {
        Ok(ModelState {
            dims,
            params: gpu.alloc(dims.param_count(), "parameters")?,
            grads: gpu.alloc(dims.param_count(), "gradients")?,
            step: gpu.alloc_zeros(1, "the step counter")?,
            losses: gpu.alloc(samples, "per-sample losses")?,
        })
    }

    /// Start a run: parameters from `init` (device to device), step counter to 0.
    pub fn reset(&mut self, gpu: &Gpu, init: &CudaSlice<f32>) -> Result<()> {
        gpu.stream
            .memcpy_dtod(init, &mut self.params)
            .cuda("resetting the parameters")?;
        gpu.stream
            .memset_zeros(&mut self.step)
            .cuda("resetting the step counter")
    }
}

/// A batch's activations, for up to `capacity` samples.
pub struct Activations {
    pub capacity: usize,
    /// `hidden x batch`: pre-activation, then ReLU output (in place).
    pub hidden: DeviceBuf<f32>,
    /// `hidden x batch`: gradient of the hidden layer.
    pub d_hidden: DeviceBuf<f32>,
    /// `classes x batch`: logits, then their gradient (in place).
    pub logits: DeviceBuf<f32>,
}

impl Activations {
    pub fn new(gpu: &Gpu, dims: Dims, capacity: usize, alloc: Allocator) -> Result<Activations> {
        Ok(Activations {
            capacity,
            hidden: DeviceBuf::new(gpu, alloc, dims.hidden * capacity, "hidden activations")?,
            d_hidden: DeviceBuf::new(gpu, alloc, dims.hidden * capacity, "hidden gradients")?,
            logits: DeviceBuf::new(gpu, alloc, dims.classes * capacity, "logits")?,
        })
    }
}

/// Where a batch's losses go in the run's loss vector: `step * samples_per_step + offset`.
#[derive(Debug, Clone, Copy)]
pub struct LossSlot {
    pub samples_per_step: usize,
    pub offset: usize,
}

/// The step's operations, bound to a cuBLAS handle and the kernels.
pub struct Mlp<'a> {
    pub dims: Dims,
    pub blas: &'a CudaBlas,
    pub kernels: &'a StepKernels,
}

fn grid(count: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: ((count as u64).div_ceil(THREADS as u64).max(1) as u32, 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// C = op(A) op(B) + beta C, column-major, fp32 (plain SGEMM, no TF32).
#[allow(clippy::too_many_arguments)]
fn sgemm<A: DevicePtr<f32>, B: DevicePtr<f32>, C: DevicePtrMut<f32>>(
    gpu: &Gpu,
    blas: &CudaBlas,
    (ta, tb): (bool, bool),
    (m, n, k): (usize, usize, usize),
    a: &A,
    lda: usize,
    b: &B,
    ldb: usize,
    beta: f32,
    c: &mut C,
    ldc: usize,
) -> Result<()> {
    let op = |t: bool| if t { Op::CUBLAS_OP_T } else { Op::CUBLAS_OP_N };
    let cfg = GemmConfig {
        transa: op(ta),
        transb: op(tb),
        m: m as i32,
        n: n as i32,
        k: k as i32,
        alpha: 1.0f32,
        lda: lda as i32,
        ldb: ldb as i32,
        beta,
        ldc: ldc as i32,
    };
    // SAFETY: the callers size every operand for these shapes and leading dimensions.
    unsafe { blas.gemm(cfg, a, b, c) }.blas(gpu, "SGEMM")
}

impl Mlp<'_> {
    /// Forward pass and loss of `batch` samples, ending with the logits' gradient (scaled by
    /// `scale`, 1 / samples per step) in `act.logits` and each sample's loss in `state.losses`.
    #[allow(clippy::too_many_arguments)]
    pub fn forward_loss(
        &self,
        ex: &mut Exec,
        state: &mut ModelState,
        x: &CudaView<f32>,
        labels: &CudaView<i32>,
        act: &mut Activations,
        batch: usize,
        slot: LossSlot,
    ) -> Result<()> {
        let _phase = common::nvtx::range("forward");
        let d = self.dims;
        let (gpu, k) = (ex.gpu, self.kernels);
        assert!(batch <= act.capacity && x.len() >= batch * d.input && labels.len() >= batch);
        let w1 = state.params.slice(d.w1());
        let b1 = state.params.slice(d.b1());
        let w2 = state.params.slice(d.w2());
        let b2 = state.params.slice(d.b2());
        // hidden (H x B) = W1 (H x IN) x (IN x B): W1 is IN x H to cuBLAS, transposed.
        ex.op("forward GEMM 1", || {
            sgemm(
                gpu,
                self.blas,
                (true, false),
                (d.hidden, batch, d.input),
                &w1,
                d.input,
                x,
                d.input,
                0.0,
                &mut *act.hidden,
                d.hidden,
            )
        })?;
        let count = (d.hidden * batch) as i64;
        let features = d.hidden as i32;
        ex.op("add_bias_relu", || {
            let mut b = gpu.stream.launch_builder(&k.add_bias_relu);
            b.arg(&mut *act.hidden).arg(&b1).arg(&features).arg(&count);
            // SAFETY: add_bias_relu(float*, const float*, int, i64) over count elements.
            unsafe { b.launch(grid(count as usize)) }.cuda("add_bias_relu")?;
            Ok(())
        })?;
        // logits (C x B) = W2 (C x H) x hidden (H x B).
        ex.op("forward GEMM 2", || {
            sgemm(
                gpu,
                self.blas,
                (true, false),
                (d.classes, batch, d.hidden),
                &w2,
                d.hidden,
                &*act.hidden,
                d.hidden,
                0.0,
                &mut *act.logits,
                d.classes,
            )
        })?;
        let count = (d.classes * batch) as i64;
        let classes = d.classes as i32;
        ex.op("add_bias", || {
            let mut b = gpu.stream.launch_builder(&k.add_bias);
            b.arg(&mut *act.logits).arg(&b2).arg(&classes).arg(&count);
            // SAFETY: add_bias(float*, const float*, int, i64) over count elements.
            unsafe { b.launch(grid(count as usize)) }.cuda("add_bias")?;
            Ok(())
        })?;
        let scale = 1.0f32 / slot.samples_per_step as f32;
        let total = state.losses.len() as i64;
        let (batch_i, per_step, offset) = (
            batch as i32,
            slot.samples_per_step as i32,
            slot.offset as i32,
        );
        ex.op("softmax_xent", || {
            let mut b = gpu.stream.launch_builder(&k.softmax_xent);
            b.arg(&mut *act.logits)
                .arg(labels)
                .arg(&classes)
                .arg(&batch_i)
                .arg(&scale)
                .arg(&mut state.losses)
                .arg(&total)
                .arg(&state.step)
                .arg(&per_step)
                .arg(&offset);
            // SAFETY: matches softmax_xent's signature; losses holds every sample of the run.
            unsafe { b.launch(grid(batch)) }.cuda("softmax_xent")?;
            Ok(())
        })
    }

    /// Backward pass of the batch `forward_loss` left in `act`: parameter gradients into
    /// `state.grads`, added to what is there when `accumulate`, else overwriting it.
    pub fn backward(
        &self,
        ex: &mut Exec,
        state: &mut ModelState,
        x: &CudaView<f32>,
        act: &mut Activations,
        batch: usize,
        accumulate: bool,
    ) -> Result<()> {
        let _phase = common::nvtx::range("backward");
        let d = self.dims;
        let (gpu, k) = (ex.gpu, self.kernels);
        let beta = if accumulate { 1.0 } else { 0.0 };
        let acc = accumulate as i32;
        let (w1_r, b1_r, w2_r, b2_r) = (d.w1(), d.b1(), d.w2(), d.b2());
        // dW2 (H x C to cuBLAS) = hidden (H x B) x dlogits^T (B x C).
        ex.op("dW2 GEMM", || {
            sgemm(
                gpu,
                self.blas,
                (false, true),
                (d.hidden, d.classes, batch),
                &*act.hidden,
                d.hidden,
                &*act.logits,
                d.classes,
                beta,
                &mut state.grads.slice_mut(w2_r.clone()),
                d.hidden,
            )
        })?;
        self.sum_over_batch(ex, &act.logits, d.classes, batch, state, b2_r, acc)?;
        // d_hidden (H x B) = W2^T (H x C to cuBLAS, as stored) x dlogits (C x B).
        let w2 = state.params.slice(w2_r);
        ex.op("dA1 GEMM", || {
            sgemm(
                gpu,
                self.blas,
                (false, false),
                (d.hidden, batch, d.classes),
                &w2,
                d.hidden,
                &*act.logits,
                d.classes,
                0.0,
                &mut *act.d_hidden,
                d.hidden,
            )
        })?;
        let count = (d.hidden * batch) as i64;
        ex.op("relu_backward", || {
            let mut b = gpu.stream.launch_builder(&k.relu_backward);
            b.arg(&mut *act.d_hidden).arg(&*act.hidden).arg(&count);
            // SAFETY: relu_backward(float*, const float*, i64) over count elements.
            unsafe { b.launch(grid(count as usize)) }.cuda("relu_backward")?;
            Ok(())
        })?;
        // dW1 (IN x H to cuBLAS) = x (IN x B) x d_hidden^T (B x H).
        ex.op("dW1 GEMM", || {
            sgemm(
                gpu,
                self.blas,
                (false, true),
                (d.input, d.hidden, batch),
                x,
                d.input,
                &*act.d_hidden,
                d.hidden,
                beta,
                &mut state.grads.slice_mut(w1_r.clone()),
                d.input,
            )
        })?;
        self.sum_over_batch(ex, &act.d_hidden, d.hidden, batch, state, b1_r, acc)
    }

    #[allow(clippy::too_many_arguments)]
    fn sum_over_batch(
        &self,
        ex: &mut Exec,
        grad: &CudaSlice<f32>,
        features: usize,
        batch: usize,
        state: &mut ModelState,
        out: std::ops::Range<usize>,
        accumulate: i32,
    ) -> Result<()> {
        let gpu = ex.gpu;
        let (f, b) = (features as i32, batch as i32);
        ex.op("sum_over_batch", || {
            let mut out = state.grads.slice_mut(out);
            let mut l = gpu.stream.launch_builder(&self.kernels.sum_over_batch);
            l.arg(grad).arg(&f).arg(&b).arg(&mut out).arg(&accumulate);
            let cfg = LaunchConfig {
                grid_dim: (features.div_ceil(32) as u32, 1, 1),
                block_dim: (32, 8, 1),
                shared_mem_bytes: 0,
            };
            // SAFETY: sum_over_batch(const float*, int, int, float*, int); grad holds
            // features * batch elements and out holds features.
            unsafe { l.launch(cfg) }.cuda("sum_over_batch")?;
            Ok(())
        })
    }

    /// SGD over every parameter, and the step counter moves on.
    pub fn sgd_update(&self, ex: &mut Exec, state: &mut ModelState, lr: f32) -> Result<()> {
        let _phase = common::nvtx::range("update");
        let gpu = ex.gpu;
        let count = state.dims.param_count() as i64;
        ex.op("sgd_step", || {
            let mut b = gpu.stream.launch_builder(&self.kernels.sgd_step);
            b.arg(&mut state.params)
                .arg(&state.grads)
                .arg(&count)
                .arg(&lr)
                .arg(&mut state.step);
            // SAFETY: sgd_step(float*, const float*, i64, float, int*) over count elements.
            unsafe { b.launch(grid(count as usize)) }.cuda("sgd_step")?;
            Ok(())
        })
    }
}
