//! The lesson's command line: the shared flags plus the problem size.

use std::process::ExitCode;

use clap::Parser;
use common::cli::{parse_elements, CommonArgs};
use common::gpu::Gpu;
use common::lesson::{finish, run_lesson};

use crate::vector_add::VectorAdd;
use crate::Intensity;

#[derive(Parser, Debug, Clone)]
#[command(about = "Arithmetic intensity: one elementwise function written five ways")]
pub struct Args {
    /// Number of float32 elements; K, M, G are powers of two (10M = 10 * 2^20).
    #[arg(long, default_value = "10M", value_parser = parse_elements)]
    pub n: u64,
    /// Seed of the random inputs.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    #[command(flatten)]
    pub common: CommonArgs,
}

/// Run the named variants (all when `only` is empty) and report.
pub fn run(args: &Args, only: &[&str]) -> anyhow::Result<ExitCode> {
    let gpu = Gpu::open(args.common.device)?;
    let mut lesson = Intensity::new(&gpu, args.n, args.seed)?;
    let report = run_lesson(&gpu, &mut lesson, only, &args.common)?;
    Ok(finish(&report, &args.common)?)
}

/// The harness check: a plain vector add.
pub fn run_vector_add(args: &Args) -> anyhow::Result<ExitCode> {
    let gpu = Gpu::open(args.common.device)?;
    let mut lesson = VectorAdd::new(&gpu, args.n, args.seed)?;
    let report = run_lesson(&gpu, &mut lesson, &[], &args.common)?;
    Ok(finish(&report, &args.common)?)
}

/// The body of every binary of this crate.
pub fn main(only: &[&str]) -> ExitCode {
    common::cli::main_with(|| run(&Args::parse(), only))
}
