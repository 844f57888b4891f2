//! The harness's one error type. Messages are written for the person at the terminal: each says
//! what went wrong and, where there is one, what to do about it.

use cudarc::driver::sys::cudaError_enum;
use cudarc::driver::DriverError;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("no NVIDIA driver found (libcuda.so could not be loaded): install the NVIDIA driver, or run on a machine with an NVIDIA GPU")]
    NoDriver,
    #[error("no CUDA-capable GPU found{0}: check `nvidia-smi` and CUDA_VISIBLE_DEVICES")]
    NoDevice(String),
    #[error("GPU {requested} does not exist: this machine has {count} GPU(s), numbered from 0")]
    BadDevice { requested: usize, count: usize },
    #[error("{0} could not be loaded: install the CUDA {1} libraries (no full toolkit is needed) or add their folder to LD_LIBRARY_PATH")]
    MissingLibrary(&'static str, &'static str),
    #[error("out of device memory: {what} needs {needed}, the GPU has {free} free of {total}")]
    OutOfMemory {
        what: String,
        needed: String,
        free: String,
        total: String,
    },
    #[error("CUDA error in {what}: {source}")]
    Cuda {
        what: String,
        #[source]
        source: DriverError,
    },
    #[error("NVRTC could not compile {name}:\n{log}")]
    Compile { name: String, log: String },
    #[error("{0}")]
    Invalid(String),
    #[error("{path}: {message}")]
    File { path: String, message: String },
}

impl Error {
    pub fn invalid(message: impl Into<String>) -> Self {
        Error::Invalid(message.into())
    }

    /// True when the error is an allocation failure the context survives (free, sync, go on).
    pub fn is_out_of_memory(&self) -> bool {
        match self {
            Error::OutOfMemory { .. } => true,
            Error::Cuda { source, .. } => source.0 == cudaError_enum::CUDA_ERROR_OUT_OF_MEMORY,
            Error::Invalid(m) => m.starts_with("out of host memory"),
            _ => false,
        }
    }
}

/// Attach a description of what was being done to a raw driver error.
pub trait CudaContext<T> {
    fn cuda(self, what: &str) -> Result<T>;
}

impl<T> CudaContext<T> for std::result::Result<T, DriverError> {
    fn cuda(self, what: &str) -> Result<T> {
        self.map_err(|source| Error::Cuda {
            what: what.to_string(),
            source,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_memory_is_recognised_from_the_driver_code() {
        let oom = Error::Cuda {
            what: "alloc".into(),
            source: DriverError(cudaError_enum::CUDA_ERROR_OUT_OF_MEMORY),
        };
        assert!(oom.is_out_of_memory());
        let other = Error::Cuda {
            what: "launch".into(),
            source: DriverError(cudaError_enum::CUDA_ERROR_ILLEGAL_ADDRESS),
        };
        assert!(!other.is_out_of_memory());
    }
}
