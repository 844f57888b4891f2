//! The measuring harness every lesson stands on. Lessons describe their variants and launch
//! them; this crate opens the GPU, compiles kernels, verifies, times, and reports.
//!
//! - [gpu]: open a device, read what it is, allocate with clear out-of-memory errors
//! - [kernels]: NVRTC compilation for the device's architecture, cached on disk
//! - [bench], [stop], [stats]: CUDA-event timing, the stopping rule, summary statistics
//! - [counters]: bytes and FLOPs, rates, arithmetic intensity
//! - [verify]: seeded inputs, NaN poisoning, relative L2 error by precision
//! - [ceilings]: measured device limits, cached per device
//! - [report]: the JSON document and the markdown table
//! - [lesson], [cli]: the runner and the flags every lesson binary shares
//! - [nvtx], [trace]: NVTX ranges for Nsight, and the built-in CUPTI kernel trace (`--trace`)
//! - [par]: parallel host-side helpers for inputs and references

pub mod bench;
pub mod blas;
pub mod ceilings;
pub mod cli;
pub mod counters;
pub mod error;
pub mod gpu;
pub mod kernels;
pub mod lesson;
pub mod nvml;
pub mod nvtx;
pub mod par;
pub mod report;
pub mod stats;
pub mod stop;
pub mod testing;
pub mod trace;
pub mod verify;

pub use error::{Error, Result};
pub use gpu::Gpu;
