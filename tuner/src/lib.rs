//! # tuner: training tools, on the shared MLP step or on the user's own program
//!
//! The same three commands (`sweep`, `memory`, `autobatch`) run either the tuner's own MLP
//! in-process (below) or, with a command after `--`, the user's training program as one fresh
//! process per trial ([external] is the machinery, [program] the commands): any language, any
//! model, reporting through a small protocol. Both conclude by the same rules ([analysis],
//! [recommend]) and print the same report shape. `docs/tuner.md` is the user's page.
//!
//! Before a long training run, people sweep the settings that decide throughput: batch size,
//! loader workers, mixed precision, pinned memory. A typical "GPU benchmark" script times each
//! setting with the host clock around an unsynchronized loop, counts the first (compiling,
//! allocating) steps, ignores where the step's time goes, and crashes at the first
//! out-of-memory. `tuner sweep` does the same sweep measured right:
//!
//! - the workload is a real training step: the `mlp` crate's MLP at the depth and width of a
//!   [preset] or the user's choice, the same step ch1-basics trains, verified against a float64
//!   reference before anything is timed;
//! - each trial times every step's phases (data, forward, backward, optimizer) with CUDA events
//!   on the training stream after warmup (common's phase timer), and reports medians with
//!   spread ([trial]);
//! - the GPU's busy fraction is measured, not guessed: the step's device time with no host gaps
//!   over the loop's step time;
//! - peak memory is the memory pool's high watermark; out-of-memory is an answer (the trial's
//!   buffers freed, the pool trimmed, larger batches of that configuration skipped);
//! - the conclusions follow from the numbers by stated rules ([analysis]).
//!
//! Expected shape of the results: at small batches the step is launch-bound (time per step
//! nearly flat, samples/s growing with the batch); past the point where the GEMMs fill the GPU,
//! the step time grows with the batch and samples/s levels off, or the loader becomes the limit
//! (the data phase grows) unless enough workers prepare batches.

pub mod analysis;
pub mod cli;
pub mod commands;
pub mod config;
pub mod data;
pub mod external;
pub mod loader;
pub mod memory;
pub mod monitor;
pub mod plot;
pub mod preset;
pub mod program;
pub mod recommend;
pub mod search;
pub mod sweep;
pub mod trial;
pub mod writeback;
