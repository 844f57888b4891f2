//! The command line: which GPUs, the model and batch sizes, the bucket size, how many timed
//! runs, and the flags every lesson shares; `--allreduce` measures the all-reduce alone. Checks
//! run before anything starts: bad sizes and unknown GPUs are one line and exit 2 (bad usage);
//! no GPU or driver, and no NCCL, exit 3 ([common::exit]).

use std::process::ExitCode;

use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches, Parser};

use common::bench::BenchConfig;
use common::cli::{finish, parse_count_with_max, parse_positive_usize, CommonArgs};
use common::exit::{no_gpu, usage, Exit};
use common::gpu::{probe_driver, DeviceList};
use common::report::Startup;
use common::runner::{run_lesson, RunOptions};
use common::stop::StopRule;
use common::Gpu;

use crate::allreduce::{self, ALLREDUCE_CHANNELS};
use crate::nccl_lib;
use crate::replica::Fault;
use crate::train::{DataParallel, TrainConfig, DEFAULT_LEARNING_RATE};

#[derive(Parser, Debug, Clone)]
#[command(
    version = common::cli::VERSION,
    about = "Data-parallel training over NCCL: one all-reduce after backward against bucketed all-reduces overlapped with backward"
)]
pub struct Args {
    /// GPUs to train on, one rank each: `all` (the default), or CUDA ordinals `0,1`; the shared
    /// `--device N` alone means one rank on GPU N.
    #[arg(long, value_name = "all|LIST", conflicts_with = "device")]
    pub devices: Option<String>,
    /// Width of the hidden layers.
    #[arg(long, default_value = "4096", value_parser = parse_positive_usize, value_name = "N")]
    pub hidden: usize,
    /// Hidden layers (Linear + ReLU); with one, only the top layer's gradients can overlap.
    #[arg(long, default_value = "4", value_parser = parse_positive_usize, value_name = "N")]
    pub depth: usize,
    /// Samples per rank per step (the global batch is this times the number of GPUs).
    #[arg(long, default_value = "256", value_parser = parse_positive_usize, value_name = "N")]
    pub per_rank: usize,
    /// Optimizer steps per run.
    #[arg(long, default_value = "32", value_parser = parse_positive_usize, value_name = "N")]
    pub steps: usize,
    /// Largest bucket of gradients reduced by one all-reduce, in MiB.
    #[arg(long, default_value = "25", value_parser = parse_mib, value_name = "MIB")]
    pub bucket_mib: usize,
    /// Learning rate of plain SGD.
    #[arg(long = "lr", default_value_t = DEFAULT_LEARNING_RATE, value_name = "RATE")]
    pub learning_rate: f32,
    /// Timed runs per side (each a whole run of --steps steps), after two warmup runs.
    #[arg(long, default_value = "3", value_parser = parse_positive_usize, value_name = "N")]
    pub runs: usize,
    /// Measure the all-reduce's bus bandwidth over 1 MiB .. 4 GiB instead of training.
    #[arg(long)]
    pub allreduce: bool,
    /// Largest all-reduce message of `--allreduce` (K, M, G suffixes).
    #[arg(long, default_value = "4G", value_parser = parse_bytes, value_name = "BYTES")]
    pub max_size: u64,
    /// With `--allreduce`: buffers from NCCL's allocator, registered with the communicators
    /// (user buffer registration), instead of plain device allocations.
    #[arg(long, requires = "allreduce")]
    pub register: bool,
    /// With `--allreduce`: channels per collective (NCCL_MIN/MAX_NCHANNELS; 0: NCCL's own
    /// choice); the NCCL_*_NCHANNELS variables, when set, win.
    #[arg(long, default_value_t = ALLREDUCE_CHANNELS, requires = "allreduce", value_name = "N")]
    pub channels: u32,
    /// Test only: plant a wrong gradient on one rank before every all-reduce (`missing:R`, its
    /// gradient left out; `twice:R`, counted twice), for the tests that show the check fails.
    #[arg(long, hide = true, value_name = "missing:R|twice:R")]
    pub plant_fault: Option<Fault>,
    /// The flags every lesson shares: the stopping rule's flags count whole runs as samples
    /// (`--quick`: two runs a side).
    #[command(flatten)]
    pub common: CommonArgs,
}

fn parse_mib(s: &str) -> Result<usize, String> {
    parse_count_with_max(s, 1 << 20).map(|v| v as usize)
}

fn parse_bytes(s: &str) -> Result<u64, String> {
    let v = parse_count_with_max(s, 16 << 30)?;
    if v < allreduce::MIN_BYTES {
        return Err(format!("'{s}' is below the smallest size measured, 1M"));
    }
    Ok(v)
}

impl Args {
    /// The command line of this process.
    pub fn from_command_line() -> Args {
        Args::parse_argv(std::env::args_os()).unwrap_or_else(|e| e.exit())
    }

    /// Parse `argv`; `--device N` without `--devices` is one rank on GPU N (clap's defaults
    /// cannot tell `--device 0` from no flag, so the matches are asked).
    pub fn parse_argv<I, T>(argv: I) -> Result<Args, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let matches = Args::command().try_get_matches_from(argv)?;
        let mut args = Args::from_arg_matches(&matches)?;
        if args.devices.is_none()
            && matches.value_source("device") == Some(ValueSource::CommandLine)
        {
            args.devices = Some(args.common.device.to_string());
        }
        Ok(args)
    }

    /// How whole runs are measured: `--runs` of them (two with `--quick`, `--min-samples` when
    /// given), the shared stopping-rule flags applied on top.
    pub fn bench(&self) -> BenchConfig {
        let c = &self.common;
        let runs = if c.quick { self.runs.min(2) } else { self.runs };
        let mut bench = DataParallel::bench(runs);
        if c.min_time.is_some() || c.max_noise.is_some() {
            // A time or noise bound decides when to stop, not the count of runs.
            bench.stop.max_samples = 100_000;
        }
        bench.stop = c.overlay(bench.stop);
        bench.cold = c.cold;
        bench
    }

    pub fn config(&self) -> TrainConfig {
        TrainConfig {
            hidden: self.hidden,
            depth: self.depth,
            per_rank: self.per_rank,
            steps: self.steps,
            bucket_bytes: self.bucket_mib << 20,
            runs: self.runs,
            learning_rate: self.learning_rate,
        }
    }
}

/// The body of every binary of the crate: `only` names the sides to run (all when empty).
pub fn run(args: Args, only: &[&str], mut startup: Startup) -> anyhow::Result<ExitCode> {
    nccl_lib::disable_nvlink_multicast();
    if args.allreduce && args.channels > 0 {
        nccl_lib::set_channels(args.channels);
    }
    let cfg = args.config();
    cfg.validate().map_err(usage)?;
    args.bench().stop.validate().map_err(usage)?;
    // The list's words are checked before looking for GPUs, the ordinals against them after.
    let devices: DeviceList = args
        .devices
        .as_deref()
        .unwrap_or("all")
        .parse()
        .map_err(usage)?;
    let ordinals = devices.resolve(probe_driver()?).map_err(usage)?;
    nccl_lib::ensure_loadable().map_err(no_gpu)?;
    let gpus = ordinals
        .iter()
        .map(|&o| Gpu::open(o))
        .collect::<common::Result<Vec<Gpu>>>()?;
    let gpus: Vec<&Gpu> = gpus.iter().collect();
    startup.mark("GPUs opened");
    if args.allreduce {
        let stop = StopRule {
            min_samples: args.runs.max(5),
            ..StopRule::sweep()
        };
        let results = allreduce::measure_sizes(&gpus, args.max_size, args.register, stop)?;
        println!(
            "## ch1-data-parallel: all-reduce, fp32 sum, {} rank(s) on {}\n",
            gpus.len(),
            gpus[0].info.name
        );
        print!("{}", allreduce::table(&results).markdown());
        if gpus.len() == 1 {
            println!("\nOne rank: nothing crosses a link, so bus bandwidth is undefined (the nccl-tests factor 2(n-1)/n is 0); algbw is the copy NCCL makes.");
        }
        if let Some(path) = &args.common.json {
            common::files::write_json_file(
                path,
                &allreduce::to_json(&results, &gpus, args.register),
                "the all-reduce results",
            )?;
            println!("wrote {}", path.display());
        }
        let ok = results.iter().all(|r| r.check.passed);
        return Ok(if ok { Exit::Done } else { Exit::Problem }.into());
    }
    if let Some(f) = args.plant_fault {
        if f.rank() >= gpus.len() {
            return Err(usage(format!(
                "--plant-fault names rank {} of {}",
                f.rank(),
                gpus.len()
            )));
        }
    }
    let mut lesson = DataParallel::new(&gpus, cfg)?;
    if let Some(f) = args.plant_fault {
        lesson = lesson.with_fault(f);
    }
    startup.mark("ranks ready (communicators, data, one-GPU reference)");
    let options = RunOptions {
        bench: args.bench(),
        ..args.common.options(&startup).only(only)
    };
    let report = run_lesson(gpus[0], &mut lesson, &options)?;
    Ok(finish(&report, args.common.json.as_deref())?)
}
