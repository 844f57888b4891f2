use std::ops::Range;

use mlp::Arch;
use serde::Serialize;

/// The sizes of one training run (the command line's flags say what each is).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct TrainConfig {
    pub hidden: usize,
    pub samples: usize,
    /// The effective batch.
    pub step_batch: usize,
    pub microbatch: usize,
    pub lr: f32,
    pub seed: u64,
}

impl TrainConfig {
    /// The command line's defaults: 64 steps of 256 in microbatches of 32, hidden 256.
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

    /// 0.05, scaled down for layers wider than 256 (0.05 diverges at hidden 4096).
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

    /// Every message says what to change.
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
