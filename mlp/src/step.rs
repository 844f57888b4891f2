//! One training step on the GPU, as operations a loop composes: forward and loss, backward
//! (overwriting the gradient or adding to it, for accumulation over microbatches), and the
//! optimizer's update. GEMMs are cuBLAS GemmEx with fp32 output and fp32 accumulation: fp32
//! inputs (plain SGEMM math, no TF32), or under mixed precision bf16 inputs against fp32 master
//! weights (the update writes the bf16 copy in the same pass). How often the host waits is the
//! caller's [Exec].
//!
//! cuBLAS is column-major: a sample-major `batch x features` activation matrix is, to cuBLAS, a
//! `features x batch` matrix with leading dimension `features`, and a row-major `[out][in]`
//! weight is an `in x out` matrix with leading dimension `in`. The GEMMs below are written in
//! those terms (and checked against the float64 reference in the GPU tests).

use std::ffi::c_void;

use cudarc::cublas::sys::{
    cublasComputeType_t as Compute, cublasGemmAlgo_t, cublasOperation_t as Op, cudaDataType_t as Dt,
};
use cudarc::cublas::CudaBlas;
use cudarc::driver::{
    CudaFunction, CudaSlice, DevicePtr, DevicePtrMut, LaunchConfig, PushKernelArg,
};

use common::blas::BlasContext as _;
use common::error::CudaContext as _;
use common::gpu::Gpu;
use common::kernels::{self, KernelSource};
use common::Result;

use crate::device::{bias_chunks, Activations, Input, LossSlot, Losses, Model};
use crate::exec::Exec;
use crate::optimizer::Optimizer;

/// The element-wise and reduction kernels of the step.
pub const LAYER_KERNELS: KernelSource = KernelSource {
    name: "mlp-layers",
    code: concat!(
        include_str!("../kernels/common.cuh"),
        include_str!("../kernels/layers.cu")
    ),
};

/// The optimizers' kernels.
pub const OPTIMIZER_KERNELS: KernelSource = KernelSource {
    name: "mlp-optimizers",
    code: concat!(
        include_str!("../kernels/common.cuh"),
        include_str!("../kernels/optimizers.cu")
    ),
};

/// cuBLAS's recommended workspace on Hopper, set explicitly and taken from the pool, so that
/// nothing is allocated while a graph is captured and the pool's watermark sees it.
pub const BLAS_WORKSPACE_BYTES: usize = 32 << 20;

const THREADS: u32 = 256;

struct Kernels {
    add_bias_relu: CudaFunction,
    add_bias: CudaFunction,
    relu_backward: CudaFunction,
    softmax_xent: CudaFunction,
    sum_over_batch: CudaFunction,
    sum_over_batch_chunks: CudaFunction,
    sum_chunks: CudaFunction,
    cast_to_bf16: CudaFunction,
    add_bias_relu_bf16: CudaFunction,
    relu_backward_bf16: CudaFunction,
    sgd_update: CudaFunction,
    adamw_update: CudaFunction,
}

impl Kernels {
    fn load(gpu: &Gpu) -> Result<Kernels> {
        let layers = kernels::load(gpu, LAYER_KERNELS, &[])?;
        let optimizers = kernels::load(gpu, OPTIMIZER_KERNELS, &[])?;
        Ok(Kernels {
            add_bias_relu: layers.function("add_bias_relu")?,
            add_bias: layers.function("add_bias")?,
            relu_backward: layers.function("relu_backward")?,
            softmax_xent: layers.function("softmax_xent")?,
            sum_over_batch: layers.function("sum_over_batch")?,
            sum_over_batch_chunks: layers.function("sum_over_batch_chunks")?,
            sum_chunks: layers.function("sum_chunks")?,
            cast_to_bf16: layers.function("cast_to_bf16")?,
            add_bias_relu_bf16: layers.function("add_bias_relu_bf16")?,
            relu_backward_bf16: layers.function("relu_backward_bf16")?,
            sgd_update: optimizers.function("sgd_update")?,
            adamw_update: optimizers.function("adamw_update")?,
        })
    }
}

/// A cuBLAS handle on the GPU's stream with its workspace set ([BLAS_WORKSPACE_BYTES]).
pub struct Blas {
    pub handle: CudaBlas,
    _workspace: CudaSlice<u8>,
}

impl Blas {
    pub fn new(gpu: &Gpu) -> Result<Blas> {
        let handle = common::blas::handle(gpu)?;
        let mut workspace = gpu.alloc::<u8>(BLAS_WORKSPACE_BYTES, "the cuBLAS workspace")?;
        let p = ptr_mut(gpu, &mut workspace);
        // SAFETY: the workspace lives as long as the handle (both in this struct).
        unsafe {
            cudarc::cublas::sys::cublasSetWorkspace_v2(
                *handle.handle(),
                p as *mut c_void,
                BLAS_WORKSPACE_BYTES,
            )
        }
        .result()
        .blas(gpu, "setting the cuBLAS workspace")?;
        Ok(Blas {
            handle,
            _workspace: workspace,
        })
    }
}

fn grid(count: usize) -> LaunchConfig {
    common::kernels::grid_1d(count as u64, THREADS)
}

/// A raw device pointer for GEMMs and nullable kernel arguments (event tracking is off, so the
/// guards cudarc returns record nothing).
fn ptr<T, S: DevicePtr<T>>(gpu: &Gpu, s: &S) -> u64 {
    s.device_ptr(&gpu.stream).0
}

fn ptr_mut<T, S: DevicePtrMut<T>>(gpu: &Gpu, s: &mut S) -> u64 {
    s.device_ptr_mut(&gpu.stream).0
}

/// A GEMM operand: device address, element type, leading dimension.
#[derive(Clone, Copy)]
struct Operand {
    ptr: u64,
    dtype: Dt,
    ld: usize,
}

impl Operand {
    fn f32(ptr: u64, ld: usize) -> Operand {
        Operand {
            ptr,
            dtype: Dt::CUDA_R_32F,
            ld,
        }
    }

    fn bf16(ptr: u64, ld: usize) -> Operand {
        Operand {
            ptr,
            dtype: Dt::CUDA_R_16BF,
            ld,
        }
    }
}

/// C (fp32, m x n) = op(A) op(B) + beta C, column-major, fp32 compute: the one GEMM of the step.
#[allow(clippy::too_many_arguments)]
fn gemm(
    gpu: &Gpu,
    blas: &CudaBlas,
    (ta, tb): (bool, bool),
    (m, n, k): (usize, usize, usize),
    a: Operand,
    b: Operand,
    beta: f32,
    c: u64,
    ldc: usize,
) -> Result<()> {
    let op = |t: bool| if t { Op::CUBLAS_OP_T } else { Op::CUBLAS_OP_N };
    let alpha = 1.0f32;
    let fp32 = a.dtype == Dt::CUDA_R_32F && b.dtype == Dt::CUDA_R_32F;
    // SAFETY (both calls): the callers size every operand for these shapes and leading
    // dimensions; all buffers are live on the handle's stream.
    if fp32 {
        // Plain SGEMM: the same math as GemmEx with fp32 compute, through the entry point with
        // the least host work per call (it matters to a loop that waits after every GEMM).
        unsafe {
            cudarc::cublas::sys::cublasSgemm_v2(
                *blas.handle(),
                op(ta),
                op(tb),
                m as i32,
                n as i32,
                k as i32,
                &alpha,
                a.ptr as *const f32,
                a.ld as i32,
                b.ptr as *const f32,
                b.ld as i32,
                &beta,
                c as *mut f32,
                ldc as i32,
            )
            .result()
        }
    } else {
        unsafe {
            cudarc::cublas::result::gemm_ex(
                *blas.handle(),
                op(ta),
                op(tb),
                m as i32,
                n as i32,
                k as i32,
                (&alpha) as *const f32 as *const c_void,
                a.ptr as *const c_void,
                a.dtype,
                a.ld as i32,
                b.ptr as *const c_void,
                b.dtype,
                b.ld as i32,
                (&beta) as *const f32 as *const c_void,
                c as *mut c_void,
                Dt::CUDA_R_32F,
                ldc as i32,
                Compute::CUBLAS_COMPUTE_32F,
                cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
    }
    .blas(gpu, &format!("a {m}x{n}x{k} GEMM"))
}

/// Queue one kernel with its arguments (each pushed by reference, as cudarc's builder wants),
/// then let the [Exec] wait if it synchronizes after every operation.
macro_rules! launch {
    ($ex:expr, $f:expr, $cfg:expr, $what:expr, [$($arg:expr),*]) => {{
        let mut b = $ex.gpu.stream.launch_builder($f);
        $( b.arg($arg); )*
        // SAFETY: every call site pushes the arguments of the named kernel's signature, over
        // buffers sized for the launch.
        unsafe { b.launch($cfg) }.cuda($what)?;
        $ex.done($what)
    }};
}

/// The step's operations: the kernels and a cuBLAS handle.
pub struct Mlp {
    kernels: Kernels,
    pub blas: Blas,
}

impl Mlp {
    /// Compile (or load from the cache) the kernels and open cuBLAS with its workspace.
    pub fn new(gpu: &Gpu) -> Result<Mlp> {
        Ok(Mlp {
            kernels: Kernels::load(gpu)?,
            blas: Blas::new(gpu)?,
        })
    }

    fn gemm_done(
        &self,
        ex: &Exec,
        transposes: (bool, bool),
        shape: (usize, usize, usize),
        (a, b): (Operand, Operand),
        beta: f32,
        (c, ldc): (u64, usize),
    ) -> Result<()> {
        gemm(
            ex.gpu,
            &self.blas.handle,
            transposes,
            shape,
            a,
            b,
            beta,
            c,
            ldc,
        )?;
        ex.done("a GEMM")
    }

    /// Forward pass and loss of `input`'s samples: leaves the logits' gradient (of the loss
    /// scaled by 1 / the step's samples) in `act` and each sample's loss in `losses` at `slot`.
    pub fn forward_loss(
        &self,
        ex: &Exec,
        model: &Model,
        act: &mut Activations,
        input: Input,
        losses: &mut Losses,
        slot: LossSlot,
    ) -> Result<()> {
        let _phase = common::nvtx::range("forward");
        let batch = input.samples;
        assert!(batch <= act.capacity, "a batch larger than its activations");
        let gpu = ex.gpu;
        let k = &self.kernels;
        let arch = model.arch;
        let layers = arch.layers();
        let amp = model.amp();
        if let Some(x16) = act.x16.as_mut() {
            let count = (arch.input * batch) as i64;
            let dst = ptr_mut(gpu, &mut **x16);
            launch!(
                ex,
                &k.cast_to_bf16,
                grid(count as usize),
                "cast_to_bf16",
                [&input.x, &dst, &count]
            )?;
        }
        for (l, layer) in layers.iter().enumerate() {
            let input_op = if l == 0 {
                match &act.x16 {
                    Some(x16) => Operand::bf16(ptr(gpu, &**x16), arch.input),
                    None => Operand::f32(input.x, arch.input),
                }
            } else if amp {
                Operand::bf16(ptr(gpu, &*act.hidden16[l - 1]), arch.hidden)
            } else {
                Operand::f32(ptr(gpu, &*act.hidden[l - 1]), arch.hidden)
            };
            let weight = match &model.params16 {
                Some(p16) => Operand::bf16(ptr(gpu, &p16.slice(layer.w.clone())), layer.fan_in),
                None => Operand::f32(ptr(gpu, &model.params.slice(layer.w.clone())), layer.fan_in),
            };
            let last = l == arch.depth;
            let out = if last {
                ptr_mut(gpu, &mut *act.logits)
            } else {
                ptr_mut(gpu, &mut *act.hidden[l])
            };
            // out (fan_out x B) = W (fan_in x fan_out to cuBLAS, transposed) x input (fan_in x B)
            self.gemm_done(
                ex,
                (true, false),
                (layer.fan_out, batch, layer.fan_in),
                (weight, input_op),
                0.0,
                (out, layer.fan_out),
            )?;
            let bias = ptr(gpu, &model.params.slice(layer.b.clone()));
            let count = (layer.fan_out * batch) as i64;
            let features = layer.fan_out as i32;
            let cfg = grid(count as usize);
            if last {
                launch!(
                    ex,
                    &k.add_bias,
                    cfg,
                    "add_bias",
                    [&out, &bias, &features, &count]
                )?;
            } else if amp {
                let out16 = ptr_mut(gpu, &mut *act.hidden16[l]);
                launch!(
                    ex,
                    &k.add_bias_relu_bf16,
                    cfg,
                    "add_bias_relu_bf16",
                    [&out, &bias, &features, &count, &out16]
                )?;
            } else {
                launch!(
                    ex,
                    &k.add_bias_relu,
                    cfg,
                    "add_bias_relu",
                    [&out, &bias, &features, &count]
                )?;
            }
        }
        let logits = ptr_mut(gpu, &mut *act.logits);
        let values = ptr_mut(gpu, &mut losses.values);
        let step = ptr(gpu, &losses.step);
        let total = losses.values.len() as i64;
        let (classes, batch_i) = (arch.classes as i32, batch as i32);
        let scale = 1.0f32 / slot.samples_per_step as f32;
        let (per_step, offset) = (slot.samples_per_step as i32, slot.offset as i32);
        launch!(
            ex,
            &k.softmax_xent,
            grid(batch),
            "softmax_xent",
            [
                &logits,
                &input.labels,
                &classes,
                &batch_i,
                &scale,
                &values,
                &total,
                &step,
                &per_step,
                &offset
            ]
        )
    }

    /// Backward pass of the batch `forward_loss` left in `act`: every parameter's gradient into
    /// `model.grads`, added to what is there when `accumulate` (gradient accumulation over
    /// microbatches), else overwriting it.
    pub fn backward(
        &self,
        ex: &Exec,
        model: &mut Model,
        act: &mut Activations,
        input: Input,
        accumulate: bool,
    ) -> Result<()> {
        self.backward_with(ex, model, act, input, accumulate, &mut |_| Ok(()))
    }

    /// [Mlp::backward], calling `on_layer_done(l)` as soon as layer `l`'s weight and bias
    /// gradients are queued (last layer first), before the pass moves on to the layer below: a
    /// data-parallel step starts reducing those gradients there, while backward goes on.
    pub fn backward_with(
        &self,
        ex: &Exec,
        model: &mut Model,
        act: &mut Activations,
        input: Input,
        accumulate: bool,
        on_layer_done: &mut dyn FnMut(usize) -> Result<()>,
    ) -> Result<()> {
        let _phase = common::nvtx::range("backward");
        let batch = input.samples;
        let gpu = ex.gpu;
        let k = &self.kernels;
        let arch = model.arch;
        let layers = arch.layers();
        let amp = model.amp();
        let beta = if accumulate { 1.0 } else { 0.0 };
        let acc = accumulate as i32;
        // The current layer's output gradient: the logits buffer at the top, then in turn.
        let mut dz = ptr_mut(gpu, &mut *act.logits);
        let mut next_buffer = 0usize;
        let grad16 = act.grad16.as_mut().map(|g| ptr_mut(gpu, &mut **g));
        if let Some(g16) = grad16 {
            let count = (arch.classes * batch) as i64;
            launch!(
                ex,
                &k.cast_to_bf16,
                grid(count as usize),
                "cast_to_bf16",
                [&dz, &g16, &count]
            )?;
        }
        for (l, layer) in layers.iter().enumerate().rev() {
            let (fi, fo) = (layer.fan_in, layer.fan_out);
            let dz_op = match grad16 {
                Some(g16) => Operand::bf16(g16, fo),
                None => Operand::f32(dz, fo),
            };
            let layer_input = if l == 0 {
                match &act.x16 {
                    Some(x16) => Operand::bf16(ptr(gpu, &**x16), fi),
                    None => Operand::f32(input.x, fi),
                }
            } else if amp {
                Operand::bf16(ptr(gpu, &*act.hidden16[l - 1]), fi)
            } else {
                Operand::f32(ptr(gpu, &*act.hidden[l - 1]), fi)
            };
            // dW (fan_in x fan_out to cuBLAS) = input (fan_in x B) x dz^T (B x fan_out).
            let dw = ptr_mut(gpu, &mut model.grads.slice_mut(layer.w.clone()));
            self.gemm_done(
                ex,
                (false, true),
                (fi, fo, batch),
                (layer_input, dz_op),
                beta,
                (dw, fi),
            )?;
            // db = sum over the batch of dz (fp32).
            let db = ptr_mut(gpu, &mut model.grads.slice_mut(layer.b.clone()));
            let (f, b_i) = (fo as i32, batch as i32);
            let chunks = bias_chunks(batch);
            let by_32_features = |chunks: usize| LaunchConfig {
                grid_dim: (fo.div_ceil(32) as u32, chunks as u32, 1),
                block_dim: (32, 8, 1),
                shared_mem_bytes: 0,
            };
            match (&mut act.bias_partials, chunks) {
                (Some(partials), c) if c > 1 => {
                    let part = ptr_mut(gpu, &mut **partials);
                    let (rows, c_i) = (batch.div_ceil(c) as i32, c as i32);
                    launch!(
                        ex,
                        &k.sum_over_batch_chunks,
                        by_32_features(c),
                        "sum_over_batch_chunks",
                        [&dz, &f, &b_i, &rows, &part]
                    )?;
                    launch!(
                        ex,
                        &k.sum_chunks,
                        grid(fo),
                        "sum_chunks",
                        [&part, &f, &c_i, &db, &acc]
                    )?;
                }
                _ => {
                    launch!(
                        ex,
                        &k.sum_over_batch,
                        by_32_features(1),
                        "sum_over_batch",
                        [&dz, &f, &b_i, &db, &acc]
                    )?;
                }
            }
            on_layer_done(l)?;
            if l == 0 {
                break;
            }
            // d(input) (fan_in x B) = W (fan_in x fan_out, as stored) x dz (fan_out x B).
            let weight = match &model.params16 {
                Some(p16) => Operand::bf16(ptr(gpu, &p16.slice(layer.w.clone())), fi),
                None => Operand::f32(ptr(gpu, &model.params.slice(layer.w.clone())), fi),
            };
            let next = ptr_mut(gpu, &mut *act.grads[next_buffer]);
            self.gemm_done(
                ex,
                (false, false),
                (fi, batch, fo),
                (weight, dz_op),
                0.0,
                (next, fi),
            )?;
            let activation = ptr(gpu, &*act.hidden[l - 1]);
            let count = (fi * batch) as i64;
            match grad16 {
                Some(g16) => launch!(
                    ex,
                    &k.relu_backward_bf16,
                    grid(count as usize),
                    "relu_backward_bf16",
                    [&next, &activation, &count, &g16]
                )?,
                None => launch!(
                    ex,
                    &k.relu_backward,
                    grid(count as usize),
                    "relu_backward",
                    [&next, &activation, &count]
                )?,
            }
            dz = next;
            next_buffer = (next_buffer + 1) % act.grads.len();
        }
        Ok(())
    }

    /// One optimizer step over every parameter (and the bf16 copy under AMP). With `losses`,
    /// their step counter moves on, so the next step's losses go to their own place.
    pub fn update(
        &self,
        ex: &Exec,
        model: &mut Model,
        lr: f32,
        losses: Option<&mut Losses>,
    ) -> Result<()> {
        let _phase = common::nvtx::range("update");
        let gpu = ex.gpu;
        let k = &self.kernels;
        let count = model.arch.param_count() as i64;
        model.steps += 1;
        let params = ptr_mut(gpu, &mut model.params);
        let grads = ptr(gpu, &model.grads);
        let p16 = model
            .params16
            .as_mut()
            .map(|p| ptr_mut(gpu, p))
            .unwrap_or(0);
        let s1 = model.state1.as_mut().map(|s| ptr_mut(gpu, s)).unwrap_or(0);
        let s2 = model.state2.as_mut().map(|s| ptr_mut(gpu, s)).unwrap_or(0);
        let step = losses.map(|l| ptr_mut(gpu, &mut l.step)).unwrap_or(0);
        let cfg = grid(count as usize);
        match model.optimizer {
            Optimizer::Sgd {
                momentum,
                weight_decay,
            } => launch!(
                ex,
                &k.sgd_update,
                cfg,
                "sgd_update",
                [
                    &params,
                    &grads,
                    &s1,
                    &count,
                    &lr,
                    &momentum,
                    &weight_decay,
                    &p16,
                    &step
                ]
            ),
            Optimizer::AdamW {
                beta1,
                beta2,
                eps,
                weight_decay,
            } => {
                let t = model.steps as i32;
                let c1 = 1.0 - beta1.powi(t);
                let c2 = 1.0 - beta2.powi(t);
                launch!(
                    ex,
                    &k.adamw_update,
                    cfg,
                    "adamw_update",
                    [
                        &params,
                        &grads,
                        &s1,
                        &s2,
                        &count,
                        &lr,
                        &beta1,
                        &beta2,
                        &eps,
                        &weight_decay,
                        &c1,
                        &c2,
                        &p16,
                        &step
                    ]
                )
            }
        }
    }

    /// Back to the start of a run: parameters from `init` (device to device, and the bf16 copy
    /// from them under AMP), optimizer state zeroed, no steps taken.
    pub fn reset(&self, ex: &Exec, model: &mut Model, init: &CudaSlice<f32>) -> Result<()> {
        let gpu = ex.gpu;
        gpu.stream
            .memcpy_dtod(init, &mut model.params)
            .cuda("resetting the parameters")?;
        for state in [model.state1.as_mut(), model.state2.as_mut()]
            .into_iter()
            .flatten()
        {
            gpu.stream
                .memset_zeros(state)
                .cuda("resetting the optimizer state")?;
        }
        if let Some(p16) = model.params16.as_mut() {
            let (src, dst) = (ptr(gpu, &model.params), ptr_mut(gpu, p16));
            let count = model.arch.param_count() as i64;
            launch!(
                ex,
                &self.kernels.cast_to_bf16,
                grid(count as usize),
                "cast_to_bf16",
                [&src, &dst, &count]
            )?;
        }
        model.steps = 0;
        ex.done("resetting the model")
    }
}
