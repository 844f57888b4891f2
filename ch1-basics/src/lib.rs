//! # Chapter 1: performance basics
//!
//! ## The training loop ([training])
//!
//! Six variants of one SGD run of a small MLP, from a naive loop (allocations, pageable copies
//! and a wait after every operation) to one that keeps the GPU busy; each variant is its own
//! short loop, read as a diff against the one before it.
//!
//! ## Where each training change starts to pay ([sweep])
//!
//! `--sweep pinned|prealloc|batch|graphs|all`: pinned memory over the copy size, preallocation
//! over the buffer size and count, the larger batch over the microbatch, CUDA graphs over the
//! steps per graph; each point a checked pair with its speedup's 95% interval, where the change
//! pays read off by one rule, a section and a plot per sweep.
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
pub mod pipeline;
pub mod sweep;
pub mod training;
pub mod transpose;
