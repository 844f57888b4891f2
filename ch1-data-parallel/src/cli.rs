//! The command line: which GPUs, the model and batch sizes, the bucket size, how many timed
//! runs; `--allreduce` measures the all-reduce alone. Checks run before anything starts: bad
//! sizes and unknown GPUs are one line; no GPU or driver, and no NCCL, exit with code 2.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

use common::cli::{finish, parse_count_with_max, parse_positive_usize};
use common::gpu::{probe_driver, DeviceList};
use common::report::Startup;
use common::runner::{run_lesson, RunOptions};
use common::stop::StopRule;
use common::Gpu;

use crate::allreduce;
use crate::nccl_lib;
use crate::train::{DataParallel, TrainConfig};

#[derive(Parser, Debug, Clone)]
#[command(
    about = "Data-parallel training over NCCL: one all-reduce after backward against bucketed all-reduces overlapped with backward"
)]
pub struct Args {
    /// GPUs to train on, one rank each: `all`, or CUDA ordinals `0,1`.
    #[arg(long, default_value = "all", value_name = "all|LIST")]
    pub devices: String,
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
    /// Timed runs per side (each a whole run of --steps steps), after two warmup runs.
    #[arg(long, default_value = "3", value_parser = parse_positive_usize, value_name = "N")]
    pub runs: usize,
    /// Write the full result as JSON here.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Measure the all-reduce's bus bandwidth over 1 MiB .. 1 GiB instead of training.
    #[arg(long)]
    pub allreduce: bool,
    /// Largest all-reduce message of `--allreduce` (K, M, G suffixes).
    #[arg(long, default_value = "1G", value_parser = parse_bytes, value_name = "BYTES")]
    pub max_size: u64,
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
    pub fn config(&self) -> TrainConfig {
        TrainConfig {
            hidden: self.hidden,
            depth: self.depth,
            per_rank: self.per_rank,
            steps: self.steps,
            bucket_bytes: self.bucket_mib << 20,
            runs: self.runs,
        }
    }
}

/// The body of every binary of the crate: `only` names the sides to run (all when empty).
pub fn run(args: Args, only: &[&str], mut startup: Startup) -> anyhow::Result<ExitCode> {
    nccl_lib::disable_nvlink_multicast();
    let cfg = args.config();
    cfg.validate().map_err(anyhow::Error::msg)?;
    // The list's words are checked before looking for GPUs, the ordinals against them after.
    let devices: DeviceList = args.devices.parse().map_err(anyhow::Error::msg)?;
    let ordinals = devices
        .resolve(probe_driver()?)
        .map_err(anyhow::Error::msg)?;
    if let Err(line) = nccl_lib::ensure_loadable() {
        eprintln!("error: {line}");
        return Ok(ExitCode::from(2));
    }
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
        let results = allreduce::measure_sizes(&gpus, args.max_size, stop)?;
        println!(
            "## ch1-data-parallel: all-reduce, fp32 sum, {} rank(s) on {}\n",
            gpus.len(),
            gpus[0].info.name
        );
        print!("{}", allreduce::table(&results).markdown());
        if gpus.len() == 1 {
            println!("\nOne rank: nothing crosses a link, so bus bandwidth is undefined (the nccl-tests factor 2(n-1)/n is 0); algbw is the copy NCCL makes.");
        }
        if let Some(path) = &args.json {
            common::files::write_json_file(
                path,
                &allreduce::to_json(&results, &gpus),
                "the all-reduce results",
            )?;
            println!("wrote {}", path.display());
        }
        let ok = results.iter().all(|r| r.check.passed);
        return Ok(if ok {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        });
    }
    let mut lesson = DataParallel::new(&gpus, cfg)?;
    startup.mark("ranks ready (communicators, data, one-GPU reference)");
    let options = RunOptions {
        only: only.iter().map(|s| s.to_string()).collect(),
        bench: DataParallel::bench(args.runs),
        startup: Some(startup),
        ..RunOptions::default()
    };
    let report = run_lesson(gpus[0], &mut lesson, &options)?;
    Ok(finish(&report, args.json.as_deref())?)
}
