//! The sizes of one training run, and the samples each step and pass takes.

use std::ops::Range;

use mlp::Arch;
use serde::Serialize;

/// The sizes of one training run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct TrainConfig {
    /// Hidden units of the MLP (256 -> hidden -> 10).
    pub hidden: usize,
    /// Samples trained on (one pass).
    pub samples: usize,
    /// Samples per optimizer step (the effective batch).
    pub step_batch: usize,
    /// Samples per microbatch of the gradient-accumulating variants.
    pub microbatch: usize,
    pub lr: f32,
    pub seed: u64,
}

impl TrainConfig {
    /// The chapter's training, as the command line gives it by default: hidden 256, 16384
    /// samples, 64 steps of 256 in microbatches of 32, seed 42.
    pub fn chapter() -> TrainConfig {
        TrainConfig {
            hidden: 256,
            samples: 16384,
            step_batch: 256,
            microbatch: 32,
            lr: TrainConfig::default_lr(256),
            seed: 42,
        }
    }

    /// The learning rate unless one is given: 0.05, scaled down for layers wider than 256
    /// (wider layers need smaller steps; 0.05 diverges at hidden 4096).
    pub fn default_lr(hidden: usize) -> f32 {
        0.05 * (256.0 / hidden as f32).min(1.0)
    }

    pub fn arch(&self) -> Arch {
        Arch::one_hidden_layer(self.hidden)
    }

    pub fn steps(&self) -> usize {
        self.samples / self.step_batch
    }

    /// The dataset's samples of the pass `first..first + n` of step `step`.
    pub fn samples_of(&self, step: usize, first: usize, n: usize) -> Range<usize> {
        let start = step * self.step_batch + first;
        start..start + n
    }

    /// The sizes must be sane and divide evenly; every message says what to change.
    pub fn validate(&self) -> std::result::Result<(), String> {
        if self.samples == 0 || self.step_batch == 0 || self.microbatch == 0 {
            return Err("samples, batch and microbatch must be at least 1".into());
        }
        self.arch().validate()?;
        if !(self.lr.is_finite() && self.lr > 0.0) {
            return Err(format!("--lr must be a positive number, got {}", self.lr));
        }
        if self.samples % self.step_batch != 0 {
            return Err(format!(
                "the batch ({}) does not divide the samples ({}): every step must be full; use a multiple of the batch",
                self.step_batch, self.samples
            ));
        }
        if self.step_batch % self.microbatch != 0 {
            return Err(format!(
                "the microbatch ({}) does not divide the batch ({}): gradient accumulation needs equal microbatches",
                self.microbatch, self.step_batch
            ));
        }
        Ok(())
    }
}
