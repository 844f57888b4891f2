//! The measuring harness every lesson stands on. Lessons describe their variants and launch
//! them; this crate opens the GPU, compiles kernels, verifies, times, and reports.
//!
//! Modules in layers, each using only those above it:
//!
//! - [error], [exit], [par], [files], [table], [affinity], [process], [named], [protocol]: errors,
//!   the exit codes, parallel host work and the state threads share, files, the table printer,
//!   keeping the measuring thread on one CPU core, child processes in groups of their own, values
//!   by name in their order, the report protocol training programs speak to the tuner
//! - [stats], [stop], [counters], [verify]: summary statistics, the stopping rule, bytes and
//!   FLOPs, seeded inputs and the relative L2 check
//! - [libraries], [nvml], [gpu], [pinned], [kernels], [blas], [nvtx], [trace]: where the CUDA
//!   libraries are (and reading them ahead), the device, page-locked host memory, NVRTC
//!   kernels, cuBLAS, NVTX ranges and the built-in CUPTI trace
//! - [bench]: CUDA-event timing (the timer, warmup, samples, the stopping rule applied)
//! - [ceilings]: measured device limits, cached per device
//! - [report]: the one report type, its markdown and JSON
//! - [runner]: the one runner (the [runner::Lesson] trait, [runner::run_lesson])
//! - [sweep]: a pair across the size that decides it (axes, points, the crossover rule, the plot)
//! - [cli]: the edge: shared flags, parsers, `main` and exit codes
//! - [testing]: support for the lessons' tests

pub mod affinity;
pub mod error;
pub mod exit;
pub mod files;
pub mod named;
pub mod par;
pub mod process;
pub mod protocol;
pub mod table;

pub mod counters;
pub mod stats;
pub mod stop;
pub mod verify;

pub mod blas;
pub mod gpu;
pub mod kernels;
pub mod libraries;
pub mod nvml;
pub mod nvtx;
pub mod pinned;
pub mod trace;

pub mod bench;
pub mod ceilings;

pub mod report;
pub mod runner;
pub mod sweep;

pub mod cli;
pub mod testing;

pub use error::{Error, Result};
pub use gpu::Gpu;
