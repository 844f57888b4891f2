//! # Chapter 1: performance basics
//!
//! ## The training loop (six variants of one SGD run)
//!
//! The workload is a real, small training step with no framework: an MLP
//! `Linear(256, hidden) -> ReLU -> Linear(hidden, 10)`, softmax cross-entropy and plain SGD, from
//! cuBLAS SGEMMs and NVRTC kernels ([step]). A run trains S samples (16384) in steps of an
//! effective batch of 256 from the same initial weights; every variant trains the same samples
//! with the same math and is checked against a float64 CPU reference ([model]) and the baseline.
//!
//! - **baseline** does what a first training loop often does: 8 microbatches of 32 per step
//!   with gradient accumulation; for every microbatch it allocates its device buffers with
//!   `cuMemAlloc` and frees them with `cuMemFree` (what `cudaMalloc`/`cudaFree` do; the free
//!   waits for the device), copies its input from pageable host memory (the driver stages it
//!   through a bounce buffer, and the host waits), and synchronizes after every operation (as
//!   code that checks each launch, or reads the loss, does). Most of its time the GPU is idle,
//!   waiting for the host.
//! - **pinned**: the data sits in page-locked host memory (pinned once, when it is loaded, as
//!   a data loader with pinned memory does), so each copy is one asynchronous DMA the host
//!   does not wait for, instead of the driver's copy through a bounce buffer that it does wait
//!   for. Expect a small gain: the copies are small (latency-bound) and the other syncs remain.
//! - **prealloc**: device buffers allocated once and reused. Removes two driver calls per buffer
//!   and the device-wide wait in each free.
//! - **batch**: one batch of 256 per step instead of 8 x 32: 8x fewer launches and syncs, and
//!   GEMMs large enough to use the GPU. Same samples, same steps, same gradient (up to summation
//!   order). Expect the largest single gain.
//! - **graphs**: the whole step (copies in, forward, backward, update) captured once as a CUDA
//!   graph and replayed: one launch and one sync per step instead of ~100 launches and syncs.
//!   A graph needs fixed addresses and a page-locked copy source, so it brings those with it.
//! - **optimized**: all of the above, and the step no longer waits for the host: the next batch
//!   is copied on a second stream while this one computes, and the host stages step k+1 while
//!   the GPU runs step k. Expect well over 20x the baseline at the default size, with the GPU
//!   busy computing most of the time (goodput).
//!
//! At `--hidden 4096` the step's GEMMs are 16x larger, so compute takes a larger share of
//! every variant's time and the speedups shrink: overhead only matters next to small work.
//!
//! ## Coalescing ([transpose])
//!
//! Transposing 8192 x 8192 fp32: the naive kernel writes columns, so each warp's 32 stores land
//! in 32 different memory segments; tiling through shared memory (padded against bank
//! conflicts) makes both sides coalesced.
//!
//! ## Double buffering ([pipeline])
//!
//! A 1 GiB pinned array goes through the GPU in chunks: copy in, compute, copy out. One stream
//! runs the three stages one after another; three streams with events and three buffers in
//! flight overlap them, so the total approaches the slowest stage alone.
//!
//! ## One lesson of three parts ([cli])
//!
//! The parts run as one lesson of the harness's runner, each a group of variants with its own
//! baseline ("training:baseline", "transpose:naive", "pipeline:serial"): one report, one JSON
//! shape, whichever parts `--part` picks.

pub mod cli;
pub mod memory;
pub mod model;
pub mod pipeline;
pub mod step;
pub mod train_lesson;
pub mod training;
pub mod transpose;
