//! The command line: `tuner sweep ...`. Every setting is also a config key; a flag given here
//! wins over the config file (see [crate::config]).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::config::{self, OptimizerKind, Overrides, Switch};
use crate::preset::Preset;

#[derive(Parser, Debug)]
#[command(
    name = "tuner",
    version,
    about = "Training tools on the shared MLP step: sweep the settings that decide throughput."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Benchmark the training step across batch sizes, workers, precision and pinning, and
    /// recommend a configuration.
    Sweep(Box<SweepArgs>),
    /// Where device memory goes for a batch size, estimated and measured, and which batch
    /// sizes fit.
    Memory(Box<MemoryArgs>),
    /// Find the largest batch that really fits (real training steps) and write it into the
    /// config.
    Autobatch(Box<AutobatchArgs>),
    /// Redraw the plot of a sweep from its JSON (no GPU needed).
    Plot(PlotArgs),
}

fn parse_batch(s: &str) -> Result<usize, String> {
    common::cli::parse_count_with_max(s, config::MAX_BATCH).map(|v| v as usize)
}

fn parse_margin(s: &str) -> Result<f64, String> {
    let v = common::cli::parse_percent(s)?;
    if v >= 0.9 {
        return Err(format!("a margin of '{s}' leaves nothing: at most 90%"));
    }
    Ok(v)
}

#[derive(Args, Debug, Clone)]
pub struct MemoryArgs {
    #[command(flatten)]
    pub settings: SettingsArgs,
    /// The batch to estimate and measure, or a list of them (256,4096,65536) shown side by side
    /// (default: the config's batch_size, else 1024).
    #[arg(long, value_name = "B[,B...]", value_parser = |s: &str| config::parse_batch_sizes(s).map(List))]
    pub batch_size: Option<List>,
    /// Recommend multiples of N instead of powers of two.
    #[arg(long, value_name = "N", value_parser = parse_batch)]
    pub multiple_of: Option<usize>,
    /// Safety margin (percent of the maximum kept free); default by the GPU's memory class.
    #[arg(long, value_name = "PERCENT", value_parser = parse_margin)]
    pub margin: Option<f64>,
    /// Print memory in use and GPU utilization every second (NVML; no CUDA context).
    #[arg(long)]
    pub watch: bool,
    /// With --watch: stop after this many seconds.
    #[arg(long, value_name = "SECONDS", value_parser = common::cli::parse_seconds)]
    pub watch_seconds: Option<f64>,
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

#[derive(Args, Debug, Clone)]
pub struct AutobatchArgs {
    #[command(flatten)]
    pub settings: SettingsArgs,
    /// First batch tried; the search doubles it until the first out-of-memory.
    #[arg(long, default_value = "8", value_parser = parse_batch)]
    pub start: usize,
    /// Granularity of the answer (default 8).
    #[arg(long, value_name = "N", value_parser = parse_batch, conflicts_with = "pow2")]
    pub multiple_of: Option<usize>,
    /// Answer in powers of two.
    #[arg(long)]
    pub pow2: bool,
    /// Safety margin (percent); default by the GPU's memory class (<16 GiB 20%, <48 GiB 10%,
    /// else 5%).
    #[arg(long, value_name = "PERCENT", value_parser = parse_margin)]
    pub margin: Option<f64>,
    /// Effective batch to keep with gradient accumulation (default: the config's batch_size x
    /// accumulation_steps).
    #[arg(long, value_parser = parse_batch)]
    pub effective_batch: Option<usize>,
    /// Print the result only; do not write the config.
    #[arg(long)]
    pub test_only: bool,
    /// Add or update this GPU's entry in a shared team-settings TOML.
    #[arg(long, value_name = "FILE")]
    pub team: Option<PathBuf>,
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// No line per trial on stderr.
    #[arg(long)]
    pub quiet: bool,
}

#[derive(Args, Debug, Clone)]
pub struct PlotArgs {
    /// A JSON written by `tuner sweep --json`.
    #[arg(long, value_name = "FILE")]
    pub from: PathBuf,
    /// Write FILE.png and FILE.svg.
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
}

fn parse_preset(s: &str) -> Result<Preset, String> {
    Preset::by_name(s).ok_or_else(|| format!("'{s}' is not a preset: use small, medium or large"))
}

fn parse_width(s: &str) -> Result<usize, String> {
    common::cli::parse_count_with_max(s, mlp::arch::MAX_WIDTH as u64).map(|v| v as usize)
}

fn parse_depth(s: &str) -> Result<usize, String> {
    common::cli::parse_count_with_max(s, mlp::arch::MAX_DEPTH as u64).map(|v| v as usize)
}

fn parse_steps(s: &str) -> Result<usize, String> {
    common::cli::parse_count_with_max(s, 1_000_000).map(|v| v as usize)
}

fn parse_warmup(s: &str) -> Result<usize, String> {
    if s.trim() == "0" {
        return Ok(0);
    }
    parse_steps(s)
}

fn parse_float(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a number"))?;
    if !v.is_finite() || v < 0.0 {
        return Err(format!("'{s}' must be a non-negative number"));
    }
    Ok(v)
}

/// A comma-separated list given as one flag value (clap would otherwise take a Vec as
/// repeated values).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct List(pub Vec<usize>);

/// The settings every subcommand shares.
#[derive(Args, Debug, Clone, Default)]
pub struct SettingsArgs {
    /// TOML config with [model], [data] and [training] sections; flags override it.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Model size: small (depth 3, hidden 16), medium (6, 64), large (12, 128).
    #[arg(long, value_parser = parse_preset)]
    pub preset: Option<Preset>,
    /// Features per sample (default 256).
    #[arg(long, value_parser = parse_width)]
    pub input: Option<usize>,
    /// Units per hidden layer.
    #[arg(long, value_parser = parse_width)]
    pub hidden: Option<usize>,
    /// Number of hidden layers.
    #[arg(long, value_parser = parse_depth)]
    pub depth: Option<usize>,
    /// Output classes (default 10).
    #[arg(long, value_parser = parse_width)]
    pub classes: Option<usize>,
    /// Features and labels from a file: .npy (labels from --labels), .safetensors or .h5
    /// (arrays named features and labels).
    #[arg(long, value_name = "FILE")]
    pub data: Option<PathBuf>,
    /// Labels of a .npy features file.
    #[arg(long, value_name = "FILE")]
    pub labels: Option<PathBuf>,
    /// Samples of the synthetic dataset (default 32768).
    #[arg(long, value_parser = parse_steps)]
    pub samples: Option<usize>,
    #[arg(long)]
    pub seed: Option<u64>,
    /// Loader threads, a list to sweep (0 = prepare batches on the training thread).
    #[arg(long, value_parser = |s: &str| config::parse_workers(s).map(List))]
    pub workers: Option<List>,
    /// Page-locked batch buffers: on, off or both.
    #[arg(long, value_parser = Switch::parse)]
    pub pin: Option<Switch>,
    /// Busy CPU time per sample in the loader, imitating decoding (microseconds).
    #[arg(long, value_name = "US", value_parser = parse_float)]
    pub cpu_cost_us: Option<f64>,
    /// sgd or adamw.
    #[arg(long, value_parser = OptimizerKind::parse)]
    pub optimizer: Option<OptimizerKind>,
    #[arg(long, value_parser = parse_float)]
    pub lr: Option<f64>,
    /// SGD momentum (0 = plain SGD).
    #[arg(long, value_parser = parse_float)]
    pub momentum: Option<f64>,
    #[arg(long, value_parser = parse_float)]
    pub weight_decay: Option<f64>,
    /// Batch sizes to sweep: a list (64,128) or a power-of-two range (1..8192).
    #[arg(long, value_parser = |s: &str| config::parse_batch_sizes(s).map(List))]
    pub batch_sizes: Option<List>,
    /// Mixed precision (bf16 GEMMs, fp32 master weights): on, off or both.
    #[arg(long, value_parser = Switch::parse)]
    pub amp: Option<Switch>,
    /// Measured steps per trial.
    #[arg(long, value_parser = parse_steps)]
    pub steps: Option<usize>,
    /// Steps run before measuring.
    #[arg(long, value_parser = parse_warmup)]
    pub warmup_steps: Option<usize>,
    /// GPU to run on (CUDA ordinal).
    #[arg(long)]
    pub device: Option<usize>,
}

impl SettingsArgs {
    pub fn overrides(&self) -> Overrides {
        Overrides {
            preset: self.preset,
            input: self.input,
            hidden: self.hidden,
            depth: self.depth,
            classes: self.classes,
            data: self.data.clone(),
            labels: self.labels.clone(),
            samples: self.samples,
            seed: self.seed,
            workers: self.workers.clone().map(|l| l.0),
            pin: self.pin,
            cpu_cost_us: self.cpu_cost_us,
            optimizer: self.optimizer,
            lr: self.lr,
            momentum: self.momentum,
            weight_decay: self.weight_decay,
            batch_sizes: self.batch_sizes.clone().map(|l| l.0),
            batch_size: None,
            accumulation_steps: None,
            amp: self.amp,
            steps: self.steps,
            warmup_steps: self.warmup_steps,
            device: self.device,
        }
    }

    /// Defaults, then the config file, then these flags.
    pub fn settings(&self) -> Result<config::Settings, String> {
        let file = match &self.config {
            Some(path) => config::load(path)?,
            None => Overrides::default(),
        };
        file.merge(self.overrides()).resolve()
    }
}

#[derive(Args, Debug, Clone)]
pub struct SweepArgs {
    #[command(flatten)]
    pub settings: SettingsArgs,
    /// Write the full result (device, provenance, every trial, picks, diagnosis) as JSON.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write the plot as FILE.png and FILE.svg (extension ignored).
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,
    /// No progress bar on stderr.
    #[arg(long)]
    pub quiet: bool,
}
