//! cuBLAS, loaded at run time like the other CUDA libraries: probe for it first, so a missing
//! library is a one-line error instead of cudarc's panic, and turn allocation failures into
//! out-of-memory answers.

use cudarc::cublas::result::CublasError;
use cudarc::cublas::sys::cublasStatus_t;
use cudarc::cublas::CudaBlas;

use crate::error::{Error, Result};
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
                free: crate::error::human_bytes(free),
                total: crate::error::human_bytes(total),
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
