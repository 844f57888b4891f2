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
    about = "Training tools: sweep the settings that decide throughput, see where memory goes, find the largest batch; on the tuner's own MLP, or on your training program given after --."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Benchmark training across batch sizes, workers, precision and pinning, and recommend a
    /// configuration. With `-- COMMAND ARGS...`, each trial runs your program.
    Sweep(Box<SweepArgs>),
    /// Where device memory goes for a batch size, estimated and measured, and which batch
    /// sizes fit. With `-- COMMAND ARGS...`, one trial of your program per batch size.
    Memory(Box<MemoryArgs>),
    /// Find the largest batch that really fits (real training steps) and write it into the
    /// config. With `-- COMMAND ARGS...`, each trial is a fresh process of your program.
    Autobatch(Box<AutobatchArgs>),
    /// Print a team-settings file (written by `autobatch --team`) as a table.
    Team(TeamArgs),
    /// Redraw the plot of a sweep from its JSON (no GPU needed).
    Plot(PlotArgs),
}

/// Running your own training program: the command after `--`, and where its trials run.
#[derive(Args, Debug, Clone, Default)]
pub struct ProgramArgs {
    /// GPUs for the program's trials, one trial per GPU at a time: a list of positions among
    /// the visible GPUs (0,2) or all (default).
    #[arg(long, value_name = "LIST|all")]
    pub devices: Option<String>,
    /// Seconds one trial may run; past it its whole process group is killed and the trial is
    /// a HANG (default 600).
    #[arg(long, value_name = "SECONDS", value_parser = parse_time_limit)]
    pub time_limit: Option<f64>,
    /// Keep each trial's report, stdout and stderr in DIR (default: a temporary folder, removed
    /// unless a trial hung or failed).
    #[arg(long, value_name = "DIR")]
    pub trials_dir: Option<PathBuf>,
    /// Your training command and its arguments, after `--`. Placeholders {batch_size},
    /// {workers}, {amp}, {accumulation}, {steps}, {warmup} are replaced by each trial's values,
    /// which are also in PERF_LESSONS_BATCH_SIZE and the like.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

impl ProgramArgs {
    /// The flags that only mean something with a command.
    pub fn program_only_flags(&self) -> Vec<&'static str> {
        [
            ("--devices", self.devices.is_some()),
            ("--time-limit", self.time_limit.is_some()),
            ("--trials-dir", self.trials_dir.is_some()),
        ]
        .into_iter()
        .filter_map(|(f, set)| set.then_some(f))
        .collect()
    }
}

fn parse_time_limit(s: &str) -> Result<f64, String> {
    let v = common::cli::parse_seconds(s)?;
    if v < 1.0 {
        return Err(format!(
            "a time limit of '{s}' s leaves no time to start: at least 1"
        ));
    }
    Ok(v)
}

#[derive(Args, Debug, Clone)]
pub struct TeamArgs {
    /// The team-settings TOML.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
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
    /// Safety margin: the share of the memory the recommended batch leaves free; default by
    /// the GPU's memory class.
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
    /// No line per trial on stderr (a program's trials).
    #[arg(long)]
    pub quiet: bool,
    #[command(flatten)]
    pub program: ProgramArgs,
}

#[derive(Args, Debug, Clone)]
pub struct AutobatchArgs {
    #[command(flatten)]
    pub settings: SettingsArgs,
    /// First batch tried; from there the search doubles until the first out-of-memory, or aims
    /// at the limit by the peak memory the trials report.
    #[arg(long, default_value = "8", value_parser = parse_batch)]
    pub start: usize,
    /// Granularity of the answer (default 8).
    #[arg(long, value_name = "N", value_parser = parse_batch, conflicts_with = "pow2")]
    pub multiple_of: Option<usize>,
    /// Answer in powers of two.
    #[arg(long)]
    pub pow2: bool,
    /// Safety margin: the share of the memory the recommended batch leaves free; default by
    /// the GPU's memory class (<16 GiB 20%, <48 GiB 10%, else 5%).
    #[arg(long, value_name = "PERCENT", value_parser = parse_margin)]
    pub margin: Option<f64>,
    /// Effective batch to keep with gradient accumulation (default: the config's batch_size x
    /// accumulation_steps).
    #[arg(long, value_parser = parse_batch)]
    pub effective_batch: Option<usize>,
    /// Print the result only: write neither the config nor the team file.
    #[arg(long)]
    pub test_only: bool,
    /// Add or update this GPU and model's entry in a shared team-settings TOML.
    #[arg(long, value_name = "FILE")]
    pub team: Option<PathBuf>,
    /// The model's name in the team file (default: the preset, or the command as given).
    #[arg(long, value_name = "NAME")]
    pub model_name: Option<String>,
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// No line per trial on stderr.
    #[arg(long)]
    pub quiet: bool,
    #[command(flatten)]
    pub program: ProgramArgs,
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

    /// The config file's settings with these flags over them.
    pub fn merged(&self) -> Result<Overrides, String> {
        let file = match &self.config {
            Some(path) => config::load(path)?,
            None => Overrides::default(),
        };
        Ok(file.merge(self.overrides()))
    }

    /// Defaults, then the config file, then these flags.
    pub fn settings(&self) -> Result<config::Settings, String> {
        self.merged()?.resolve()
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
    /// Safety margin: the share of the memory the recommended configuration leaves free;
    /// default by the GPU's memory class (<16 GiB 20%, <48 GiB 10%, else 5%).
    #[arg(long, value_name = "PERCENT", value_parser = parse_margin)]
    pub margin: Option<f64>,
    /// No progress on stderr.
    #[arg(long)]
    pub quiet: bool,
    #[command(flatten)]
    pub program: ProgramArgs,
}
