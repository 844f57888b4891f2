//! # mlp-train: the MLP as a training program
//!
//! `mlp-train` trains the model of this crate on a synthetic dataset through a real input
//! pipeline (loader threads, host buffers pinned or not, copies on their own stream, double
//! buffering) and speaks the tuner's protocol, so the tuner runs it exactly as it runs any
//! user's program:
//!
//! - [options]: the flags, each setting a tuner varies also read from its `PERF_LESSONS_*`
//!   variable;
//! - [check]: one step's gradient against the float64 reference before anything is timed;
//! - [run]: the loop, its CUDA-event phases and its GPU-busy share;
//! - [report]: the JSON lines written to the file `PERF_LESSONS_REPORT` names;
//! - [gauge]: the device memory held (the pool's reserved bytes and what was taken outside it);
//! - [memory]: the memory a model and batch need, by the model definition alone;
//! - [feed], [loader], [sampler], [trainer], [preset]: the pieces of the loop.
//!
//! How it ends, for a tool that reads only the exit status and stderr: 0 trained; 1 failed, with
//! one line on stderr, which says `CUDA_ERROR_OUT_OF_MEMORY` when the device ran out of memory;
//! 2 bad flags (clap's); 3 no GPU or driver to run on.

pub mod check;
pub mod feed;
pub mod gauge;
pub mod loader;
pub mod memory;
pub mod options;
pub mod preset;
pub mod report;
pub mod run;
pub mod sampler;
pub mod trainer;

use common::error::Error;
use plotting::format::human_bytes;

pub use options::{Args, Options};
pub use report::Report;
pub use run::{run, Summary};

/// Exit code of a run that failed (out of memory included).
pub const EXIT_FAILED: u8 = 1;
/// Exit code when there is no GPU or driver to run on.
pub const EXIT_NO_GPU: u8 = 3;

/// Whether the device ran out of memory (an allocation of the driver or of cuBLAS); host
/// memory is not the GPU's and is not counted here.
pub fn device_out_of_memory(error: &Error) -> bool {
    use cudarc::driver::sys::cudaError_enum;
    match error {
        Error::OutOfMemory { .. } => true,
        Error::Cuda { source, .. } => source.0 == cudaError_enum::CUDA_ERROR_OUT_OF_MEMORY,
        _ => false,
    }
}

/// The line for stderr and the exit code of a run that failed; `estimated` is what the run
/// needs by the model definition, said beside an out-of-memory error.
pub fn failure(error: &Error, estimated: u64) -> (String, u8) {
    match error {
        Error::NoDriver | Error::NoDevice(_) | Error::BadDevice { .. } | Error::MissingLibrary(..) => {
            (format!("error: {error}"), EXIT_NO_GPU)
        }
        e if device_out_of_memory(e) => (
            format!(
                "error: CUDA_ERROR_OUT_OF_MEMORY: {e} (the model and one micro-batch need about {} by the estimate)",
                human_bytes(estimated)
            ),
            EXIT_FAILED,
        ),
        e => (format!("error: {e}"), EXIT_FAILED),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cudarc::driver::sys::cudaError_enum;
    use cudarc::driver::DriverError;

    #[test]
    fn out_of_memory_says_so_in_the_words_tools_look_for() {
        let oom = Error::OutOfMemory {
            what: "the logits".into(),
            needed: "4.00 GiB".into(),
            free: "1.00 GiB".into(),
            total: "80.0 GiB".into(),
        };
        let (line, code) = failure(&oom, 5 << 30);
        assert_eq!(code, EXIT_FAILED);
        assert!(line.contains("CUDA_ERROR_OUT_OF_MEMORY") && line.contains("the logits"));
        assert!(line.contains(&human_bytes(5 << 30)), "{line}");
        assert_eq!(line.lines().count(), 1);
        // (A driver error's text comes from the driver, which this test may not have.)
        let driver = Error::Cuda {
            what: "cuMemAllocAsync".into(),
            source: DriverError(cudaError_enum::CUDA_ERROR_OUT_OF_MEMORY),
        };
        assert!(device_out_of_memory(&driver));
    }

    #[test]
    fn other_failures_are_not_out_of_memory() {
        let host = Error::invalid("out of host memory: 64 GiB for a pinned batch");
        let (line, code) = failure(&host, 0);
        assert_eq!(code, EXIT_FAILED);
        assert!(!line.contains("CUDA_ERROR_OUT_OF_MEMORY") && !line.contains("out of memory"));
        let illegal = Error::Cuda {
            what: "a kernel".into(),
            source: DriverError(cudaError_enum::CUDA_ERROR_ILLEGAL_ADDRESS),
        };
        assert!(!device_out_of_memory(&illegal));
    }

    #[test]
    fn no_gpu_has_its_own_code() {
        for e in [
            Error::NoDriver,
            Error::NoDevice(String::new()),
            Error::BadDevice {
                requested: 3,
                count: 1,
            },
        ] {
            let (line, code) = failure(&e, 0);
            assert_eq!(code, EXIT_NO_GPU);
            assert!(line.starts_with("error: ") && line.lines().count() == 1);
        }
    }
}
