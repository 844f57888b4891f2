//! mlp-train's flags and the plain [Options] they become. The settings a tuner varies read
//! their `PERF_LESSONS_*` variable when the flag is not given, so the program runs the same
//! with placeholders in its command line or with the environment alone.

use std::time::Duration;

use clap::{Parser, ValueEnum};

use crate::arch::{Arch, MAX_DEPTH, MAX_WIDTH};
use crate::optimizer::Optimizer;
use crate::train::preset::Preset;

/// Largest micro-batch: the kernels index samples with 32-bit integers.
pub const MAX_BATCH: u64 = 1 << 30;
/// Largest synthetic dataset (samples of 256 fp32 features: 1 GiB of host memory).
pub const MAX_SAMPLES: u64 = 1 << 20;

/// Trains the MLP of ch1-basics on synthetic data and reports every optimizer step (its
/// CUDA-event phases, memory and GPU-busy share) as JSON lines to the file named by
/// PERF_LESSONS_REPORT, the protocol the tuner reads.
#[derive(Parser, Debug, Clone)]
#[command(name = "mlp-train", version)]
pub struct Args {
    /// Samples per micro-batch.
    #[arg(long, env = "PERF_LESSONS_BATCH_SIZE", default_value_t = 1024, value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..=MAX_BATCH))]
    pub batch_size: u64,
    /// Host threads preparing batches (shuffle, gather, normalize); 0 prepares each batch on the
    /// training thread, between steps.
    #[arg(long, env = "PERF_LESSONS_WORKERS", default_value_t = 4, value_name = "N",
          value_parser = clap::value_parser!(u64).range(0..=256))]
    pub workers: u64,
    /// Mixed precision: `on` or `bf16` runs the GEMMs on bf16 copies of the weights and
    /// activations against fp32 master weights; `off` is fp32 throughout (plain SGEMM, no TF32).
    #[arg(
        long,
        env = "PERF_LESSONS_AMP",
        default_value = "off",
        value_name = "MODE"
    )]
    pub amp: Amp,
    /// Micro-batches per optimizer step (gradient accumulation).
    #[arg(long, env = "PERF_LESSONS_ACCUMULATION", default_value_t = 1, value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub accumulation: u64,
    /// Optimizer steps measured after the warmup.
    #[arg(long, env = "PERF_LESSONS_STEPS", default_value_t = 30, value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub steps: u64,
    /// Optimizer steps run (and reported) before the measured ones.
    #[arg(long, env = "PERF_LESSONS_WARMUP_STEPS", default_value_t = 5, value_name = "N",
          value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    pub warmup: u64,
    /// Page-locked host buffers, whose copies to the GPU are one asynchronous DMA; `off` copies
    /// from pageable memory, staged by the driver while the host waits.
    #[arg(long, default_value = "on", value_name = "on|off")]
    pub pin: Switch,
    /// Model size by name; --hidden and --depth change it.
    #[arg(long, value_name = "NAME")]
    pub preset: Option<Preset>,
    /// Units per hidden layer (default: the preset's; the small preset's without one).
    #[arg(long, value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..=MAX_WIDTH as u64))]
    pub hidden: Option<u64>,
    /// Hidden layers (default: the preset's; the small preset's without one).
    #[arg(long, value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..=MAX_DEPTH as u64))]
    pub depth: Option<u64>,
    /// Optimizer: plain SGD, SGD with momentum 0.9, or AdamW (weight decay 0.01).
    #[arg(long, default_value = "sgd", value_name = "NAME")]
    pub optimizer: OptimizerChoice,
    /// Learning rate (default 0.05 for SGD and momentum, 0.001 for AdamW).
    #[arg(long, value_name = "RATE", value_parser = parse_lr)]
    pub lr: Option<f64>,
    /// GPU to train on (CUDA ordinal, after CUDA_VISIBLE_DEVICES).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub device: usize,
    /// Seed of the data, its shuffling and the initial weights.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub seed: u64,
    /// Samples in the synthetic dataset (normal features, labels from a random linear teacher).
    #[arg(long, default_value_t = 32768, value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..=MAX_SAMPLES))]
    pub samples: u64,
    /// Busy CPU time per sample in the loader, as decoding or augmentation would take.
    #[arg(long, default_value_t = 0.0, value_name = "MICROSECONDS", value_parser = parse_cpu_cost)]
    pub cpu_cost_us: f64,
    /// Print a line every N steps (0: only the first and last lines).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub log_every: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Amp {
    Off,
    On,
    Bf16,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Switch {
    On,
    Off,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OptimizerChoice {
    Sgd,
    Momentum,
    Adamw,
}

fn parse_lr(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v > 0.0 && v <= 10.0 => Ok(v),
        _ => Err(format!("'{s}' must be a number above 0 and at most 10")),
    }
}

fn parse_cpu_cost(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if (0.0..=1e6).contains(&v) => Ok(v),
        _ => Err(format!(
            "'{s}' must be a number of microseconds from 0 to 1000000"
        )),
    }
}

/// What one run trains and how.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// The preset's name when the model is one.
    pub preset: Option<&'static str>,
    pub arch: Arch,
    pub optimizer: Optimizer,
    pub lr: f32,
    pub batch: usize,
    pub accumulation: usize,
    pub workers: usize,
    pub amp: bool,
    pub pinned: bool,
    pub steps: usize,
    pub warmup: usize,
    pub device: usize,
    pub seed: u64,
    pub samples: usize,
    pub cpu_cost_per_sample: Duration,
    pub log_every: usize,
}

impl Options {
    /// Samples one optimizer step consumes.
    pub fn samples_per_step(&self) -> usize {
        self.batch * self.accumulation
    }

    /// Optimizer steps in all, warmup included.
    pub fn total_steps(&self) -> usize {
        self.warmup + self.steps
    }

    /// "small (3 x 16), batch 1024 x 2, bf16, adamw, 4 workers, pinned".
    pub fn describe(&self) -> String {
        let a = &self.arch;
        let model = match self.preset {
            Some(p) => format!("{p} ({} x {})", a.depth, a.hidden),
            None => format!("{} x {}", a.depth, a.hidden),
        };
        format!(
            "{model}, batch {} x {}, {}, {}, {} workers, {}",
            self.batch,
            self.accumulation,
            if self.amp { "bf16" } else { "fp32" },
            self.optimizer.name(),
            self.workers,
            if self.pinned { "pinned" } else { "pageable" },
        )
    }
}

impl Args {
    /// The options these flags ask for; one line saying what is wrong otherwise.
    pub fn options(&self) -> Result<Options, String> {
        let base = self.preset.unwrap_or(Preset::Small);
        let arch = Arch {
            hidden: self.hidden.map_or(base.arch().hidden, |h| h as usize),
            depth: self.depth.map_or(base.arch().depth, |d| d as usize),
            ..base.arch()
        };
        arch.validate()?;
        // A preset a size flag changed is no longer that preset.
        let preset = (arch == base.arch()).then_some(base.name());
        let (optimizer, default_lr) = match self.optimizer {
            OptimizerChoice::Sgd => (Optimizer::PLAIN_SGD, 0.05),
            OptimizerChoice::Momentum => (
                Optimizer::Sgd {
                    momentum: 0.9,
                    weight_decay: 0.0,
                },
                0.05,
            ),
            OptimizerChoice::Adamw => (Optimizer::adamw_default(), 1e-3),
        };
        Ok(Options {
            preset,
            arch,
            optimizer,
            lr: self.lr.unwrap_or(default_lr) as f32,
            batch: self.batch_size as usize,
            accumulation: self.accumulation as usize,
            workers: self.workers as usize,
            amp: self.amp != Amp::Off,
            pinned: self.pin == Switch::On,
            steps: self.steps as usize,
            warmup: self.warmup as usize,
            device: self.device,
            seed: self.seed,
            samples: self.samples as usize,
            cpu_cost_per_sample: Duration::from_nanos((self.cpu_cost_us * 1e3).round() as u64),
            log_every: self.log_every as usize,
        })
    }
}
