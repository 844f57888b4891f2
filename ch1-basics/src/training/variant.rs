//! The six variants of the training loop, by name, and the loop each one runs.

use common::Result;

use super::config::TrainConfig;
use super::engine::Engine;
use super::{baseline, batch, graphs, optimized, pinned, prealloc};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    Baseline,
    Pinned,
    Prealloc,
    Batch,
    Graphs,
    Optimized,
}

impl Variant {
    pub const ALL: [Variant; 6] = [
        Variant::Baseline,
        Variant::Pinned,
        Variant::Prealloc,
        Variant::Batch,
        Variant::Graphs,
        Variant::Optimized,
    ];

    pub fn name(self) -> &'static str {
        [
            "baseline",
            "pinned",
            "prealloc",
            "batch",
            "graphs",
            "optimized",
        ][self as usize]
    }

    pub fn description(self) -> &'static str {
        match self {
            Variant::Baseline => "8 x 32 accumulated; cuMemAlloc/cuMemFree per microbatch, pageable copies, sync after every op",
            Variant::Pinned => "baseline, but the data sits in page-locked host memory: each copy is one asynchronous DMA",
            Variant::Prealloc => "baseline, but device buffers allocated once and reused",
            Variant::Batch => "baseline, but one batch of 256 per step instead of 8 x 32",
            Variant::Graphs => "8 x 32, the whole step (copies in, forward, backward, update) one CUDA graph, one sync per step",
            Variant::Optimized => "pinned + prealloc + batch 256 + graphs; next batch copied while this one computes, no per-step sync",
        }
    }

    pub fn pass_batch(self, cfg: &TrainConfig) -> usize {
        match self {
            Variant::Batch | Variant::Optimized => cfg.step_batch,
            _ => cfg.microbatch,
        }
    }

    /// Queue one whole run from the engine's current state (the eager variants have finished
    /// when it returns).
    pub fn run(self, e: &mut Engine) -> Result<()> {
        match self {
            Variant::Baseline => baseline::run(e),
            Variant::Pinned => pinned::run(e),
            Variant::Prealloc => prealloc::run(e),
            Variant::Batch => batch::run(e),
            Variant::Graphs => graphs::run(e),
            Variant::Optimized => optimized::run(e),
        }
    }
}
