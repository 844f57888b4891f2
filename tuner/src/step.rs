//! The training step on the GPU: ch1-basics's step generalized to any depth, two optimizers and
//! mixed precision. The element-wise kernels of ch1-basics (bias + ReLU, softmax cross-entropy,
//! bias gradients) are reused as they are; `kernels/train.cu` adds the optimizers and the bf16
//! copies. GEMMs are cuBLAS GemmEx: fp32 in and out with fp32 compute (plain SGEMM, no TF32),
//! or under `--amp` bf16 inputs with fp32 output and fp32 accumulation, against fp32 master
//! weights (the optimizer updates fp32 and writes the bf16 copy in the same pass).
//!
//! Layout as in ch1-basics: activations sample-major, so a `batch x features` activation is a
//! column-major `features x batch` matrix to cuBLAS, and a row-major `[out][in]` weight is an
//! `in x out` column-major matrix.

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

use crate::model::{Arch, Optimizer};

pub const KERNELS: KernelSource = KernelSource {
    name: "tuner-train",
    code: include_str!("../kernels/train.cu"),
};

/// cuBLAS's recommended workspace on Hopper, given from the pool so it counts in the peak.
pub const BLAS_WORKSPACE_BYTES: usize = 32 << 20;
const THREADS: u32 = 256;

/// Batches up to this size take the bias gradient in one pass (ch1-basics's kernel: one block
/// per 32 features walks the whole batch); larger ones in chunks of at least
/// `BIAS_CHUNK_ROWS` samples, at most `MAX_BIAS_CHUNKS` of them, then a pass over the chunks.
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
        c => c * arch.hidden.max(arch.classes),
    }
}

/// The kernels of the step: ch1-basics's module and this crate's.
pub struct StepKernels {
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

impl StepKernels {
    pub fn load(gpu: &Gpu) -> Result<StepKernels> {
        let basics = kernels::load(gpu, ch1_basics::step::KERNELS, &[])?;
        let own = kernels::load(gpu, KERNELS, &[])?;
        Ok(StepKernels {
            add_bias_relu: basics.function("add_bias_relu")?,
            add_bias: basics.function("add_bias")?,
            relu_backward: basics.function("relu_backward")?,
            softmax_xent: basics.function("softmax_xent")?,
            sum_over_batch: basics.function("sum_over_batch")?,
            sum_over_batch_chunks: own.function("sum_over_batch_chunks")?,
            sum_chunks: own.function("sum_chunks")?,
            cast_to_bf16: own.function("cast_to_bf16")?,
            add_bias_relu_bf16: own.function("add_bias_relu_bf16")?,
            relu_backward_bf16: own.function("relu_backward_bf16")?,
            sgd_update: own.function("sgd_update")?,
            adamw_update: own.function("adamw_update")?,
        })
    }
}

/// Bytes of device memory a trial's model and step buffers take ([crate::memory]'s estimate).
pub fn device_bytes(arch: &Arch, optimizer: &Optimizer, amp: bool, batch: usize) -> u64 {
    crate::memory::estimate(arch, optimizer, amp, batch).total
}

/// The model on the device: fp32 master parameters, gradients, optimizer state, the bf16 copy
/// under AMP.
pub struct ModelState {
    pub arch: Arch,
    pub optimizer: Optimizer,
    pub params: CudaSlice<f32>,
    pub grads: CudaSlice<f32>,
    state1: Option<CudaSlice<f32>>,
    state2: Option<CudaSlice<f32>>,
    pub params16: Option<CudaSlice<u16>>,
    /// Optimizer steps taken (AdamW's bias correction).
    pub steps: u32,
}

impl ModelState {
    pub fn new(
        gpu: &Gpu,
        arch: Arch,
        optimizer: Optimizer,
        amp: bool,
        init: &[f32],
    ) -> Result<ModelState> {
        let n = arch.param_count();
        assert_eq!(init.len(), n);
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
        Ok(ModelState {
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

/// Activations and gradients of one batch of up to `capacity` samples.
pub struct StepBuffers {
    pub capacity: usize,
    /// One per hidden layer, `hidden x batch`, post-ReLU (kept for backward).
    acts: Vec<CudaSlice<f32>>,
    /// `classes x batch`: logits, then their gradient.
    logits: CudaSlice<f32>,
    /// Two `max_width x batch` ping-pong buffers for the activation gradients.
    grad_a: [CudaSlice<f32>; 2],
    /// Per-sample losses of the last batch.
    pub losses: CudaSlice<f32>,
    /// Always 0: softmax_xent's step counter (losses go to losses[0..batch]).
    step_zero: CudaSlice<i32>,
    /// AMP: the input, each hidden activation and the current activation gradient in bf16.
    x16: Option<CudaSlice<u16>>,
    acts16: Vec<CudaSlice<u16>>,
    grad16: Option<CudaSlice<u16>>,
    /// Large batches: the bias gradient's partial sums per chunk ([bias_chunks]).
    bias_partials: Option<CudaSlice<f32>>,
}

impl StepBuffers {
    pub fn new(gpu: &Gpu, arch: &Arch, amp: bool, capacity: usize) -> Result<StepBuffers> {
        let b = capacity;
        let acts = (0..arch.depth)
            .map(|l| gpu.alloc::<f32>(arch.hidden * b, &format!("activations of layer {l}")))
            .collect::<Result<Vec<_>>>()?;
        let w = arch.max_width();
        let (x16, acts16, grad16) = if amp {
            (
                Some(gpu.alloc::<u16>(arch.input * b, "the bf16 input")?),
                (0..arch.depth)
                    .map(|l| gpu.alloc::<u16>(arch.hidden * b, &format!("bf16 activations {l}")))
                    .collect::<Result<Vec<_>>>()?,
                Some(gpu.alloc::<u16>(w * b, "the bf16 activation gradient")?),
            )
        } else {
            (None, Vec::new(), None)
        };
        Ok(StepBuffers {
            capacity,
            acts,
            logits: gpu.alloc(arch.classes * b, "the logits")?,
            grad_a: [
                gpu.alloc(w * b, "activation gradients")?,
                gpu.alloc(w * b, "activation gradients")?,
            ],
            losses: gpu.alloc(b, "the per-sample losses")?,
            step_zero: gpu.alloc_zeros(1, "the loss slot counter")?,
            x16,
            acts16,
            grad16,
            bias_partials: match bias_scratch_len(arch, b) {
                0 => None,
                n => Some(gpu.alloc(n, "the bias gradient's partial sums")?),
            },
        })
    }
}

fn grid(count: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: ((count as u64).div_ceil(THREADS as u64).max(1) as u32, 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
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

/// C (fp32, m x n) = op(A) op(B) + beta C, column-major, fp32 compute.
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
    // SAFETY: the callers size every operand for these shapes and leading dimensions; all
    // buffers are live on the handle's stream.
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
    .blas(gpu, &format!("a {m}x{n}x{k} GEMM"))
}

/// Queue one kernel with its arguments (each pushed by reference, as cudarc's builder wants).
macro_rules! launch {
    ($step:expr, $f:expr, $cfg:expr, $what:expr, [$($arg:expr),*]) => {{
        let mut b = $step.gpu.stream.launch_builder($f);
        $( b.arg($arg); )*
        // SAFETY: every call site pushes the arguments of the named kernel's signature, over
        // buffers sized for the launch.
        unsafe { b.launch($cfg) }.cuda($what).map(|_| ())
    }};
}

/// The step's operations bound to a GPU, a cuBLAS handle and the kernels.
pub struct Step<'a> {
    pub gpu: &'a Gpu,
    pub blas: &'a CudaBlas,
    pub kernels: &'a StepKernels,
}

impl Step<'_> {
    /// Forward and loss of `batch` samples at `x` / `labels` (device addresses of fp32 features
    /// and i32 labels): leaves the logits' gradient (of the mean loss) in the buffers and each
    /// sample's loss in `buf.losses`.
    pub fn forward(
        &self,
        m: &ModelState,
        buf: &mut StepBuffers,
        x: u64,
        labels: u64,
        batch: usize,
    ) -> Result<()> {
        assert!(batch >= 1 && batch <= buf.capacity);
        let gpu = self.gpu;
        let k = self.kernels;
        let arch = m.arch;
        let layers = arch.layers();
        let amp = m.amp();
        if let Some(x16) = buf.x16.as_mut() {
            let count = (arch.input * batch) as i64;
            let dst = ptr_mut(gpu, x16);
            launch!(
                self,
                &k.cast_to_bf16,
                grid(count as usize),
                "cast_to_bf16",
                [&x, &dst, &count]
            )?;
        }
        for (l, layer) in layers.iter().enumerate() {
            let input = if l == 0 {
                match &buf.x16 {
                    Some(x16) => Operand {
                        ptr: ptr(gpu, x16),
                        dtype: Dt::CUDA_R_16BF,
                        ld: arch.input,
                    },
                    None => Operand {
                        ptr: x,
                        dtype: Dt::CUDA_R_32F,
                        ld: arch.input,
                    },
                }
            } else if amp {
                Operand {
                    ptr: ptr(gpu, &buf.acts16[l - 1]),
                    dtype: Dt::CUDA_R_16BF,
                    ld: arch.hidden,
                }
            } else {
                Operand {
                    ptr: ptr(gpu, &buf.acts[l - 1]),
                    dtype: Dt::CUDA_R_32F,
                    ld: arch.hidden,
                }
            };
            let weight = match &m.params16 {
                Some(p16) => Operand {
                    ptr: ptr(gpu, &p16.slice(layer.w.clone())),
                    dtype: Dt::CUDA_R_16BF,
                    ld: layer.fan_in,
                },
                None => Operand {
                    ptr: ptr(gpu, &m.params.slice(layer.w.clone())),
                    dtype: Dt::CUDA_R_32F,
                    ld: layer.fan_in,
                },
            };
            let last = l == arch.depth;
            let out = if last {
                ptr_mut(gpu, &mut buf.logits)
            } else {
                ptr_mut(gpu, &mut buf.acts[l])
            };
            // out (fan_out x B) = W (fan_in x fan_out to cuBLAS, transposed) x input (fan_in x B)
            gemm(
                gpu,
                self.blas,
                (true, false),
                (layer.fan_out, batch, layer.fan_in),
                weight,
                input,
                0.0,
                out,
                layer.fan_out,
            )?;
            let bias = ptr(gpu, &m.params.slice(layer.b.clone()));
            let count = (layer.fan_out * batch) as i64;
            let features = layer.fan_out as i32;
            let cfg = grid(count as usize);
            if last {
                launch!(
                    self,
                    &k.add_bias,
                    cfg,
                    "add_bias",
                    [&out, &bias, &features, &count]
                )?;
            } else if amp {
                let out16 = ptr_mut(gpu, &mut buf.acts16[l]);
                launch!(
                    self,
                    &k.add_bias_relu_bf16,
                    cfg,
                    "add_bias_relu_bf16",
                    [&out, &bias, &features, &count, &out16]
                )?;
            } else {
                launch!(
                    self,
                    &k.add_bias_relu,
                    cfg,
                    "add_bias_relu",
                    [&out, &bias, &features, &count]
                )?;
            }
        }
        let logits = ptr_mut(gpu, &mut buf.logits);
        let losses = ptr_mut(gpu, &mut buf.losses);
        let step_zero = ptr(gpu, &buf.step_zero);
        let (classes, batch_i, scale) = (arch.classes as i32, batch as i32, 1.0f32 / batch as f32);
        let total = buf.capacity as i64;
        let (per_step, offset) = (batch as i32, 0i32);
        launch!(
            self,
            &k.softmax_xent,
            grid(batch),
            "softmax_xent",
            [
                &logits, &labels, &classes, &batch_i, &scale, &losses, &total, &step_zero,
                &per_step, &offset
            ]
        )
    }

    /// Backward of the batch `forward` left in `buf`: every parameter's gradient (overwritten).
    pub fn backward(
        &self,
        m: &mut ModelState,
        buf: &mut StepBuffers,
        x: u64,
        batch: usize,
    ) -> Result<()> {
        let gpu = self.gpu;
        let k = self.kernels;
        let arch = m.arch;
        let layers = arch.layers();
        let amp = m.amp();
        // The current layer's output gradient: the logits buffer at the top, then ping-pong.
        let mut dz = ptr_mut(gpu, &mut buf.logits);
        let mut pong = 0usize;
        let grad16 = buf.grad16.as_mut().map(|g| ptr_mut(gpu, g));
        if let Some(g16) = grad16 {
            let count = (arch.classes * batch) as i64;
            launch!(
                self,
                &k.cast_to_bf16,
                grid(count as usize),
                "cast_to_bf16",
                [&dz, &g16, &count]
            )?;
        }
        for (l, layer) in layers.iter().enumerate().rev() {
            let (fi, fo) = (layer.fan_in, layer.fan_out);
            let dz_op = match grad16 {
                Some(g16) => Operand {
                    ptr: g16,
                    dtype: Dt::CUDA_R_16BF,
                    ld: fo,
                },
                None => Operand {
                    ptr: dz,
                    dtype: Dt::CUDA_R_32F,
                    ld: fo,
                },
            };
            let input = if l == 0 {
                match &buf.x16 {
                    Some(x16) => Operand {
                        ptr: ptr(gpu, x16),
                        dtype: Dt::CUDA_R_16BF,
                        ld: fi,
                    },
                    None => Operand {
                        ptr: x,
                        dtype: Dt::CUDA_R_32F,
                        ld: fi,
                    },
                }
            } else if amp {
                Operand {
                    ptr: ptr(gpu, &buf.acts16[l - 1]),
                    dtype: Dt::CUDA_R_16BF,
                    ld: fi,
                }
            } else {
                Operand {
                    ptr: ptr(gpu, &buf.acts[l - 1]),
                    dtype: Dt::CUDA_R_32F,
                    ld: fi,
                }
            };
            // dW (fan_in x fan_out to cuBLAS) = input (fan_in x B) x dz^T (B x fan_out).
            let dw = ptr_mut(gpu, &mut m.grads.slice_mut(layer.w.clone()));
            gemm(
                gpu,
                self.blas,
                (false, true),
                (fi, fo, batch),
                input,
                dz_op,
                0.0,
                dw,
                fi,
            )?;
            // db = sum over the batch of dz (fp32).
            let db = ptr_mut(gpu, &mut m.grads.slice_mut(layer.b.clone()));
            let (f, b_i) = (fo as i32, batch as i32);
            let chunks = bias_chunks(batch);
            let by_32_features = |chunks: usize| LaunchConfig {
                grid_dim: (fo.div_ceil(32) as u32, chunks as u32, 1),
                block_dim: (32, 8, 1),
                shared_mem_bytes: 0,
            };
            match (&mut buf.bias_partials, chunks) {
                (Some(partials), c) if c > 1 => {
                    let part = ptr_mut(gpu, partials);
                    let (rows, c_i) = (batch.div_ceil(c) as i32, c as i32);
                    launch!(
                        self,
                        &k.sum_over_batch_chunks,
                        by_32_features(c),
                        "sum_over_batch_chunks",
                        [&dz, &f, &b_i, &rows, &part]
                    )?;
                    launch!(
                        self,
                        &k.sum_chunks,
                        grid(fo),
                        "sum_chunks",
                        [&part, &f, &c_i, &db]
                    )?;
                }
                _ => {
                    let acc = 0i32;
                    launch!(
                        self,
                        &k.sum_over_batch,
                        by_32_features(1),
                        "sum_over_batch",
                        [&dz, &f, &b_i, &db, &acc]
                    )?;
                }
            }
            if l == 0 {
                break;
            }
            // d(input) (fan_in x B) = W (fan_in x fan_out, as stored) x dz (fan_out x B).
            let weight = match &m.params16 {
                Some(p16) => Operand {
                    ptr: ptr(gpu, &p16.slice(layer.w.clone())),
                    dtype: Dt::CUDA_R_16BF,
                    ld: fi,
                },
                None => Operand {
                    ptr: ptr(gpu, &m.params.slice(layer.w.clone())),
                    dtype: Dt::CUDA_R_32F,
                    ld: fi,
                },
            };
            let next = ptr_mut(gpu, &mut buf.grad_a[pong]);
            gemm(
                gpu,
                self.blas,
                (false, false),
                (fi, batch, fo),
                weight,
                dz_op,
                0.0,
                next,
                fi,
            )?;
            let act = ptr(gpu, &buf.acts[l - 1]);
            let count = (fi * batch) as i64;
            match grad16 {
                Some(g16) => launch!(
                    self,
                    &k.relu_backward_bf16,
                    grid(count as usize),
                    "relu_backward_bf16",
                    [&next, &act, &count, &g16]
                )?,
                None => launch!(
                    self,
                    &k.relu_backward,
                    grid(count as usize),
                    "relu_backward",
                    [&next, &act, &count]
                )?,
            }
            dz = next;
            pong ^= 1;
        }
        Ok(())
    }

    /// One optimizer step over every parameter (and the bf16 copy under AMP).
    pub fn update(&self, m: &mut ModelState, lr: f32) -> Result<()> {
        let gpu = self.gpu;
        let count = m.arch.param_count() as i64;
        m.steps += 1;
        let params = ptr_mut(gpu, &mut m.params);
        let grads = ptr(gpu, &m.grads);
        let p16 = m.params16.as_mut().map(|p| ptr_mut(gpu, p)).unwrap_or(0);
        let s1 = m.state1.as_mut().map(|s| ptr_mut(gpu, s)).unwrap_or(0);
        let s2 = m.state2.as_mut().map(|s| ptr_mut(gpu, s)).unwrap_or(0);
        let cfg = grid(count as usize);
        match m.optimizer {
            Optimizer::Sgd {
                momentum,
                weight_decay,
            } => {
                launch!(
                    self,
                    &self.kernels.sgd_update,
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
                        &p16
                    ]
                )
            }
            Optimizer::AdamW {
                beta1,
                beta2,
                eps,
                weight_decay,
            } => {
                let t = m.steps as i32;
                let c1 = 1.0 - beta1.powi(t);
                let c2 = 1.0 - beta2.powi(t);
                launch!(
                    self,
                    &self.kernels.adamw_update,
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
                        &p16
                    ]
                )
            }
        }
    }
}

/// A cuBLAS handle whose workspace comes from the pool (so the step allocates nothing itself
/// and the pool's watermark sees the workspace).
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
