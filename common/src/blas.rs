//! cuBLAS, loaded at run time like the other CUDA libraries: probe for it first, so a missing
//! library is a one-line error instead of cudarc's panic, and turn allocation failures into
//! out-of-memory answers.

use cudarc::cublas::result::CublasError;
use cudarc::cublas::sys::cublasStatus_t;
use cudarc::cublas::CudaBlas;
use cudarc::driver::CudaSlice;

use crate::error::{CudaContext as _, Error, Result};
use crate::gpu::{ensure_library, Gpu};

/// A cuBLAS handle bound to the GPU's lesson stream.
pub fn handle(gpu: &Gpu) -> Result<CudaBlas> {
    ensure_library(
        cudarc::cublas::sys::is_culib_present,
        "libcublas",
        "cuBLAS (libcublas)",
    )?;
    CudaBlas::new(gpu.stream.clone()).map_err(|e| blas_error(gpu, e, "creating the cuBLAS handle"))
}

/// A cuBLAS error as the harness's error: allocation failures become out-of-memory.
pub fn blas_error(gpu: &Gpu, e: CublasError, what: &str) -> Error {
    match e.0 {
        cublasStatus_t::CUBLAS_STATUS_ALLOC_FAILED => {
            let (free, total) = gpu.memory().unwrap_or((0, gpu.info.total_memory_bytes));
            Error::OutOfMemory {
                what: what.to_string(),
                needed: "workspace beyond what is free".into(),
                free: plotting::format::human_bytes(free),
                total: plotting::format::human_bytes(total),
            }
        }
        _ => Error::invalid(format!("cuBLAS error in {what}: {e:?}")),
    }
}

/// Map a cuBLAS result, naming what was being done.
pub trait BlasContext<T> {
    fn blas(self, gpu: &Gpu, what: &str) -> Result<T>;
}

impl<T> BlasContext<T> for std::result::Result<T, CublasError> {
    fn blas(self, gpu: &Gpu, what: &str) -> Result<T> {
        self.map_err(|e| blas_error(gpu, e, what))
    }
}

/// The arithmetic a GEMM runs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GemmPrecision {
    /// Plain SGEMM on CUDA cores.
    Fp32,
    /// fp32 in and out, tensor cores with TF32 inputs (CUBLAS_COMPUTE_32F_FAST_TF32).
    Tf32,
    /// bf16 in and out, fp32 accumulation on tensor cores (GemmEx, CUBLAS_COMPUTE_32F).
    Bf16,
}

impl GemmPrecision {
    pub fn precision(self) -> crate::verify::Precision {
        match self {
            GemmPrecision::Fp32 => crate::verify::Precision::Fp32,
            GemmPrecision::Tf32 => crate::verify::Precision::Tf32,
            GemmPrecision::Bf16 => crate::verify::Precision::Bf16,
        }
    }

    pub fn element_bytes(self) -> u64 {
        match self {
            GemmPrecision::Bf16 => 2,
            _ => 4,
        }
    }

    /// Tolerance for the relative L2 error against a float64 reference. fp32 uses 1e-4, the top
    /// of the guide's fp32 range, because error grows with K (up to 8192 here).
    pub fn tolerance(self) -> f64 {
        match self {
            GemmPrecision::Fp32 => 1e-4,
            other => other.precision().tolerance(),
        }
    }
}

/// Round an f32 to the nearest bf16 (ties to even), as bits.
pub fn bf16_bits(x: f32) -> u16 {
    let bits = x.to_bits();
    if x.is_nan() {
        return ((bits >> 16) as u16) | 0x0040;
    }
    let round = 0x7fff + ((bits >> 16) & 1);
    ((bits + round) >> 16) as u16
}

pub fn bf16_to_f32(bits: u16) -> f32 {
    f32::from_bits((bits as u32) << 16)
}

enum GemmBuffers {
    F32 {
        a: CudaSlice<f32>,
        b: CudaSlice<f32>,
        c: CudaSlice<f32>,
    },
    Bf16 {
        a: CudaSlice<u16>,
        b: CudaSlice<u16>,
        c: CudaSlice<u16>,
    },
}

/// C (m x n) = A (m x k) * B (k x n), column-major, seeded random inputs, on the GPU's stream.
pub struct GemmProblem {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub precision: GemmPrecision,
    /// Inputs as the GPU sees them (bf16-rounded for bf16), for the reference.
    a_host: Vec<f32>,
    b_host: Vec<f32>,
    buffers: GemmBuffers,
}

impl GemmProblem {
    pub fn new(
        gpu: &Gpu,
        m: usize,
        n: usize,
        k: usize,
        precision: GemmPrecision,
        seed: u64,
    ) -> Result<Self> {
        gpu.check_fits(
            &format!("a {m}x{n}x{k} GEMM"),
            Self::device_bytes(m, n, k, precision),
        )?;
        crate::gpu::check_host_fits(
            &format!("a {m}x{n}x{k} GEMM's inputs"),
            (m * k + k * n) as u64 * 8,
        )?;
        let mut a_host = crate::verify::normal_f32(seed, m * k, 1.0);
        let mut b_host = crate::verify::normal_f32(seed.wrapping_add(1), k * n, 1.0);
        let buffers = match precision {
            GemmPrecision::Fp32 | GemmPrecision::Tf32 => GemmBuffers::F32 {
                a: gpu.upload(&a_host, "GEMM A")?,
                b: gpu.upload(&b_host, "GEMM B")?,
                c: gpu.alloc(m * n, "GEMM C")?,
            },
            GemmPrecision::Bf16 => {
                let a16: Vec<u16> = a_host.iter().map(|&x| bf16_bits(x)).collect();
                let b16: Vec<u16> = b_host.iter().map(|&x| bf16_bits(x)).collect();
                a_host = a16.iter().map(|&x| bf16_to_f32(x)).collect();
                b_host = b16.iter().map(|&x| bf16_to_f32(x)).collect();
                GemmBuffers::Bf16 {
                    a: gpu.upload(&a16, "GEMM A")?,
                    b: gpu.upload(&b16, "GEMM B")?,
                    c: gpu.alloc(m * n, "GEMM C")?,
                }
            }
        };
        Ok(GemmProblem {
            m,
            n,
            k,
            precision,
            a_host,
            b_host,
            buffers,
        })
    }

    /// Device bytes of A, B and C, known before anything is allocated.
    pub fn device_bytes(m: usize, n: usize, k: usize, precision: GemmPrecision) -> u64 {
        (m * k + k * n + m * n) as u64 * precision.element_bytes()
    }

    /// The work of a GEMM of these sizes, known before it is set up: FLOPs 2mnk; bytes: A and
    /// B read once, C written once (beta = 0).
    pub fn work_of(
        m: usize,
        n: usize,
        k: usize,
        precision: GemmPrecision,
    ) -> crate::counters::Work {
        let e = precision.element_bytes();
        crate::counters::Work {
            bytes_read: (m * k + k * n) as u64 * e,
            bytes_written: (m * n) as u64 * e,
            flops: 2 * (m * n * k) as u64,
        }
    }

    /// [GemmProblem::work_of] this problem.
    pub fn work(&self) -> crate::counters::Work {
        Self::work_of(self.m, self.n, self.k, self.precision)
    }

    /// Queue one GEMM on the handle's stream.
    pub fn run(&mut self, gpu: &Gpu, blas: &CudaBlas) -> Result<()> {
        use cudarc::cublas::sys::{
            cublasComputeType_t as Compute, cublasGemmAlgo_t, cublasOperation_t as Op,
            cudaDataType_t as Dt,
        };
        use cudarc::driver::{DevicePtr, DevicePtrMut};
        let (m, n, k) = (self.m as i32, self.n as i32, self.k as i32);
        let (alpha, beta) = (1.0f32, 0.0f32);
        let stream = &gpu.stream;
        let (a, b, c, dtype, compute) = match &mut self.buffers {
            GemmBuffers::F32 { a, b, c } => {
                let compute = match self.precision {
                    GemmPrecision::Tf32 => Compute::CUBLAS_COMPUTE_32F_FAST_TF32,
                    _ => Compute::CUBLAS_COMPUTE_32F,
                };
                (
                    a.device_ptr(stream).0,
                    b.device_ptr(stream).0,
                    c.device_ptr_mut(stream).0,
                    Dt::CUDA_R_32F,
                    compute,
                )
            }
            GemmBuffers::Bf16 { a, b, c } => (
                a.device_ptr(stream).0,
                b.device_ptr(stream).0,
                c.device_ptr_mut(stream).0,
                Dt::CUDA_R_16BF,
                Compute::CUBLAS_COMPUTE_32F,
            ),
        };
        // SAFETY: column-major m x k, k x n and m x n buffers of the stated type, all live;
        // event tracking is off, so the raw pointers need no guards.
        unsafe {
            cudarc::cublas::result::gemm_ex(
                *blas.handle(),
                Op::CUBLAS_OP_N,
                Op::CUBLAS_OP_N,
                m,
                n,
                k,
                (&alpha) as *const f32 as *const _,
                a as *const _,
                dtype,
                m,
                b as *const _,
                dtype,
                k,
                (&beta) as *const f32 as *const _,
                c as *mut _,
                dtype,
                m,
                compute,
                cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .blas(
            gpu,
            &format!(
                "a {}x{}x{} {:?} GEMM",
                self.m, self.n, self.k, self.precision
            ),
        )
    }

    /// Fill C with NaN (bf16 NaN bits 0x7fc0 for bf16).
    pub fn poison(&mut self, gpu: &Gpu) -> Result<()> {
        match &mut self.buffers {
            GemmBuffers::F32 { c, .. } => gpu.poison(c),
            GemmBuffers::Bf16 { c, .. } => {
                let nan = vec![0x7fc0u16; c.len()];
                gpu.stream.memcpy_htod(&nan, c).cuda("poisoning C")
            }
        }
    }

    /// C as f32.
    pub fn output(&self, gpu: &Gpu) -> Result<Vec<f32>> {
        Ok(match &self.buffers {
            GemmBuffers::F32 { c, .. } => gpu.download(c)?,
            GemmBuffers::Bf16 { c, .. } => gpu.download(c)?.into_iter().map(bf16_to_f32).collect(),
        })
    }

    /// Check `samples` entries of C (spread over rows and columns) against float64 dot
    /// products of the inputs the GPU saw; a full reference would cost as much as the GEMM.
    pub fn check_sampled(&self, gpu: &Gpu, samples: usize) -> Result<crate::verify::Verification> {
        let c = self.output(gpu)?;
        let mut rng = crate::verify::Rng::new(0x5eed);
        let picks: Vec<(usize, usize)> = (0..samples.max(1))
            .map(|_| {
                (
                    (rng.next_u64() % self.m as u64) as usize,
                    (rng.next_u64() % self.n as u64) as usize,
                )
            })
            .collect();
        let reference: Vec<f64> = crate::par::map(picks.len(), |s| {
            let (i, j) = picks[s];
            (0..self.k)
                .map(|p| self.a_host[i + p * self.m] as f64 * self.b_host[p + j * self.k] as f64)
                .sum()
        });
        let got: Vec<f32> = picks.iter().map(|&(i, j)| c[i + j * self.m]).collect();
        // Every element must have been written, not only the sampled ones.
        let unwritten = c.iter().filter(|v| !v.is_finite()).count();
        let mut v = crate::verify::check(
            &got,
            &reference,
            self.precision.tolerance(),
            "float64 dot products of sampled entries",
        );
        v.non_finite += unwritten;
        v.passed &= unwritten == 0;
        v.elements = c.len();
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_rounds_to_nearest_even() {
        assert_eq!(bf16_bits(1.0), 0x3f80);
        assert_eq!(bf16_to_f32(bf16_bits(1.0)), 1.0);
        // 1 + 2^-8 is exactly halfway between bf16 1.0 and 1.0078125: ties to even (1.0).
        assert_eq!(bf16_to_f32(bf16_bits(1.0 + 1.0 / 256.0)), 1.0);
        // 1 + 3 * 2^-8 is halfway between 1.0078125 and 1.015625: ties to even (1.015625).
        assert_eq!(bf16_to_f32(bf16_bits(1.0 + 3.0 / 256.0)), 1.015625);
        assert!(bf16_to_f32(bf16_bits(f32::NAN)).is_nan());
        assert_eq!(bf16_to_f32(bf16_bits(-2.5)), -2.5);
        let x = 1.234_567f32;
        assert!((bf16_to_f32(bf16_bits(x)) - x).abs() / x < 1.0 / 256.0);
    }

    #[test]
    fn gemm_work_and_bytes_before_set_up() {
        let w = GemmProblem::work_of(4, 3, 2, GemmPrecision::Bf16);
        assert_eq!((w.bytes_read, w.bytes_written, w.flops), (28, 24, 48));
        let w = GemmProblem::work_of(8192, 8192, 8192, GemmPrecision::Fp32);
        assert_eq!(w.flops, 2 << 39);
        assert_eq!(w.bytes(), 3 * 4 * 8192 * 8192);
        assert_eq!(GemmProblem::device_bytes(4, 3, 2, GemmPrecision::Bf16), 52);
        assert_eq!(GemmProblem::device_bytes(4, 3, 2, GemmPrecision::Tf32), 104);
    }

    #[test]
    fn gemm_tolerances() {
        assert_eq!(GemmPrecision::Fp32.tolerance(), 1e-4);
        assert_eq!(GemmPrecision::Tf32.tolerance(), 1e-3);
        assert_eq!(GemmPrecision::Bf16.tolerance(), 1e-2);
    }
}
