//! Profiling the lessons with NVIDIA's tools, and where those are missing, without them.
//!
//! - `profiling nsys -- PROGRAM [ARGS]`: Nsight Systems, CUDA + NVTX + OS runtime, report under
//!   `results/profiles/<lesson>-<variant>-<time>`; a lesson's timed regions only (the harness
//!   brackets each variant's timed samples with cuProfilerStart/Stop), any other program (a
//!   PyTorch script) whole, since it never marks a region.
//! - `profiling ncu -- PROGRAM [ARGS]`: Nsight Compute with clocks left alone, a small set of
//!   sections (or `--full`), a kernel filter, a launch count and NVTX filters; then the headline
//!   (duration, DRAM and SM throughput in % of peak) read back from the report.
//! - Without either tool: `--trace FILE` on any lesson binary records a CUPTI kernel trace
//!   (see `common::trace`).
//!
//! Every run prints the exact command first; `--dry-run` prints it and stops. A missing tool is
//! one line naming what to install.

pub mod cli;
pub mod command;
pub mod discover;
pub mod error;
pub mod ncu;
pub mod nsys;
pub mod target;

pub use error::{Error, Result};
