//! The batch on the GPU and the three ways to ask cuBLAS for it. Everything a call needs (the
//! handle, its math mode, its workspace, the pointer arrays) is made here, before anything is
//! timed, so a timed run only queues cuBLAS calls: nothing in it allocates or synchronizes.

use cudarc::cublas::sys::{self as blas_sys, cublasMath_t};
use cudarc::cublas::{CudaBlas, Gemm, GemmConfig};
use cudarc::driver::{CudaSlice, DevicePtr};

use common::blas::BlasContext as _;
use common::error::CudaContext as _;
use common::gpu::Gpu;
use common::verify::Precision;
use common::{Error, Result};

use crate::layout::{gemm_config, offsets, pointer_table, strided_config};
use crate::problem::{inputs, reference, Shape, WORKSPACE_BYTES};
use crate::Variant;

/// One operand of every product on the device, back to back: A, B or C.
pub type Matrices = CudaSlice<f32>;

/// A, B and C of `shape.count` products on the device (A and B on the host too, for the float64
/// reference), the device arrays of pointers into them for the pointer-array batched call, and a
/// cuBLAS handle set up for `precision`.
///
/// The pointer arrays hold raw addresses of A, B and C; they live and die with this struct,
/// which owns those buffers too, so no address in them can outlive its buffer.
pub struct GemmBatch {
    shape: Shape,
    cfg: GemmConfig<f32>,
    precision: Precision,
    host: (Vec<f32>, Vec<f32>),
    a: Matrices,
    b: Matrices,
    c: Matrices,
    /// The addresses of every product's A, B and C, in that order.
    pointers: [CudaSlice<u64>; 3],
    // Declared before the workspace: the handle is destroyed before its workspace is freed.
    blas: CudaBlas,
    _workspace: CudaSlice<u8>,
}

impl GemmBatch {
    /// Make the seeded inputs ([inputs]), upload them and set everything up. The shape must be
    /// validated and its memory checked first (see [crate::problem::MemoryPlan]).
    pub fn new(gpu: &Gpu, shape: Shape, seed: u64, precision: Precision) -> Result<GemmBatch> {
        let host = inputs(&shape, seed);
        let blas = common::blas::handle(gpu)?;
        // SAFETY: a live handle and a valid enum value.
        unsafe { blas_sys::cublasSetMathMode(*blas.handle(), math_mode(precision)?) }
            .result()
            .blas(gpu, "setting the cuBLAS math mode")?;
        let workspace = gpu.alloc::<u8>(WORKSPACE_BYTES as usize, "the cuBLAS workspace")?;
        {
            let (ptr, _record) = workspace.device_ptr(&gpu.stream);
            // SAFETY: a live device allocation of WORKSPACE_BYTES, kept (in this struct) until
            // after the handle is destroyed; the handle is bound to the same stream.
            unsafe {
                blas_sys::cublasSetWorkspace_v2(
                    *blas.handle(),
                    ptr as *mut std::ffi::c_void,
                    WORKSPACE_BYTES as usize,
                )
            }
            .result()
            .blas(gpu, "setting the cuBLAS workspace")?;
        }
        let a = gpu.upload(&host.0, "A")?;
        let b = gpu.upload(&host.1, "B")?;
        let c = gpu.alloc::<f32>(shape.c_len() * shape.count, "C")?;
        let table = |buf: &Matrices, stride: usize, what: &str| {
            let (base, _record) = buf.device_ptr(&gpu.stream);
            gpu.upload(&pointer_table(base, stride, shape.count), what)
        };
        let pointers = [
            table(&a, shape.a_len(), "the pointer array of A")?,
            table(&b, shape.b_len(), "the pointer array of B")?,
            table(&c, shape.c_len(), "the pointer array of C")?,
        ];
        gpu.sync()?;
        let cfg = gemm_config(&shape);
        Ok(GemmBatch {
            shape,
            cfg,
            precision,
            host,
            a,
            b,
            c,
            pointers,
            blas,
            _workspace: workspace,
        })
    }

    /// The float64 products `first..first + products` of the inputs ([reference]).
    pub fn reference(&self, first: usize, products: usize) -> Vec<f64> {
        reference(&self.shape, &self.host.0, &self.host.1, first, products)
    }

    pub fn shape(&self) -> &Shape {
        &self.shape
    }

    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// Queue one run of `variant` over the first `count` products on the GPU's stream.
    pub fn run(&mut self, gpu: &Gpu, variant: Variant, count: usize) -> Result<()> {
        let size = self.shape.count;
        if count == 0 || count > size {
            return Err(Error::invalid(format!(
                "asked for {count} products of a batch of {size}"
            )));
        }
        match variant {
            Variant::Baseline => self.one_by_one(gpu, count),
            Variant::Batched => self.pointer_array_batched(gpu, count),
            Variant::Strided => self.strided_batched(gpu, count),
        }
    }

    /// `count` separate SGEMM calls, one per product: `count` launches.
    fn one_by_one(&mut self, gpu: &Gpu, count: usize) -> Result<()> {
        let (s, cfg) = (self.shape, self.cfg);
        for i in 0..count {
            let (ao, bo, co) = offsets(&s, i);
            let a = self.a.slice(ao..ao + s.a_len());
            let b = self.b.slice(bo..bo + s.b_len());
            let mut c = self.c.slice_mut(co..co + s.c_len());
            // SAFETY: each view holds exactly one matrix of the sizes `cfg` describes (B first,
            // see layout.rs), inside buffers this struct owns.
            unsafe { self.blas.gemm(cfg, &b, &a, &mut c) }.blas(gpu, "cublasSgemm")?;
        }
        Ok(())
    }

    /// One cublasSgemmBatched call reading the device arrays of per-product pointers.
    fn pointer_array_batched(&mut self, gpu: &Gpu, count: usize) -> Result<()> {
        let (cfg, [a, b, c]) = (self.cfg, &self.pointers);
        let (first, _r1) = b.device_ptr(&gpu.stream);
        let (second, _r2) = a.device_ptr(&gpu.stream);
        let (c, _r3) = c.device_ptr(&gpu.stream);
        // SAFETY: the three device arrays hold `shape.count >= count` addresses of whole
        // matrices inside A, B and C, which live as long as `self` (built in `new`); the sizes
        // and leading dimensions are those of the column-major call in layout.rs.
        unsafe {
            blas_sys::cublasSgemmBatched(
                *self.blas.handle(),
                cfg.transa,
                cfg.transb,
                cfg.m,
                cfg.n,
                cfg.k,
                &cfg.alpha,
                first as *const *const f32,
                cfg.lda,
                second as *const *const f32,
                cfg.ldb,
                &cfg.beta,
                c as *const *mut f32,
                cfg.ldc,
                count as i32,
            )
        }
        .result()
        .blas(gpu, "cublasSgemmBatched")
    }

    /// One strided-batched call: product i is at i * stride in each buffer.
    fn strided_batched(&mut self, gpu: &Gpu, count: usize) -> Result<()> {
        let cfg = strided_config(&self.shape, count);
        // SAFETY: the buffers hold shape.count >= count matrices at exactly these strides.
        unsafe {
            self.blas
                .gemm_strided_batched(cfg, &self.b, &self.a, &mut self.c)
        }
        .blas(gpu, "cublasSgemmStridedBatched")
    }

    /// Fill C with NaN so that a product nobody wrote cannot pass.
    pub fn poison(&mut self, gpu: &Gpu) -> Result<()> {
        gpu.poison(&mut self.c)
    }

    /// All of C (synchronizes).
    pub fn output(&self, gpu: &Gpu) -> Result<Vec<f32>> {
        gpu.download(&self.c)
    }

    /// Product `i` of C alone (synchronizes).
    pub fn product(&self, gpu: &Gpu, i: usize) -> Result<Vec<f32>> {
        let (_, _, co) = offsets(&self.shape, i);
        gpu.stream
            .clone_dtoh(&self.c.slice(co..co + self.shape.c_len()))
            .cuda("copying a product back from the GPU")
    }

    /// A, B and C and the handle, for tests that make calls of their own.
    pub fn parts_mut(&mut self) -> (&CudaBlas, &Matrices, &Matrices, &mut Matrices) {
        (&self.blas, &self.a, &self.b, &mut self.c)
    }
}

/// cuBLAS's math mode for a precision: plain fp32 (no tensor-op shortcuts) or TF32 tensor ops.
pub fn math_mode(precision: Precision) -> Result<cublasMath_t> {
    match precision {
        Precision::Fp32 => Ok(cublasMath_t::CUBLAS_DEFAULT_MATH),
        Precision::Tf32 => Ok(cublasMath_t::CUBLAS_TF32_TENSOR_OP_MATH),
        other => Err(Error::invalid(format!(
            "this lesson computes in fp32 or tf32, not {}",
            other.label()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn math_modes_by_precision() {
        use cublasMath_t::*;
        assert_eq!(math_mode(Precision::Fp32).unwrap(), CUBLAS_DEFAULT_MATH);
        assert_eq!(
            math_mode(Precision::Tf32).unwrap(),
            CUBLAS_TF32_TENSOR_OP_MATH
        );
        assert!(math_mode(Precision::Bf16).is_err());
    }
}
