//! The lesson's command line: the shared flags plus the problem size.

use std::process::ExitCode;

use clap::Parser;
use common::cli::{parse_elements, run_lesson_with, CommonArgs};
use common::report::Startup;

use crate::vector_add::VectorAdd;
use crate::Intensity;

#[derive(Parser, Debug, Clone)]
#[command(
    version = common::cli::VERSION,
    about = "Arithmetic intensity: one elementwise function written five ways"
)]
pub struct Args {
    /// Number of float32 elements; K, M, G are powers of two (10M = 10 * 2^20).
    #[arg(long, default_value = "10M", value_parser = parse_elements)]
    pub elements: u64,
    /// Seed of the random inputs.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    #[command(flatten)]
    pub common: CommonArgs,
}

/// The lesson's variants named in `only` (all when empty).
pub fn run(args: &Args, only: &[&str], startup: Startup) -> anyhow::Result<ExitCode> {
    run_lesson_with(&args.common, only, startup, |gpu| {
        Intensity::new(gpu, args.elements, args.seed)
    })
}

/// The harness check: a plain vector add.
pub fn run_vector_add(args: &Args, startup: Startup) -> anyhow::Result<ExitCode> {
    run_lesson_with(&args.common, &[], startup, |gpu| {
        VectorAdd::new(gpu, args.elements, args.seed)
    })
}

/// The body of every binary of this crate.
pub fn main(only: &[&str]) -> ExitCode {
    common::cli::main_with(|startup| run(&Args::parse(), only, startup))
}
