//! The lesson's command line: the shared flags plus the problem size.

use std::process::ExitCode;

use clap::Parser;
use common::cli::{finish, parse_elements, CommonArgs};
use common::gpu::Gpu;
use common::report::Startup;
use common::runner::{run_lesson, Lesson};

use crate::vector_add::VectorAdd;
use crate::Intensity;

#[derive(Parser, Debug, Clone)]
#[command(about = "Arithmetic intensity: one elementwise function written five ways")]
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

/// Open the GPU, build the lesson, run the named variants (all when `only` is empty), report.
fn run_with<L: Lesson>(
    args: &Args,
    only: &[&str],
    mut startup: Startup,
    build: impl FnOnce(&Gpu) -> common::Result<L>,
) -> anyhow::Result<ExitCode> {
    let gpu = Gpu::open(args.common.device)?;
    startup.mark("GPU opened (context, stream, NVML)");
    let mut lesson = build(&gpu)?;
    startup.mark("kernels, inputs and float64 reference ready");
    let options = args.common.options(&startup).only(only);
    let report = run_lesson(&gpu, &mut lesson, &options)?;
    Ok(finish(&report, args.common.json.as_deref())?)
}

/// The lesson's variants.
pub fn run(args: &Args, only: &[&str], startup: Startup) -> anyhow::Result<ExitCode> {
    run_with(args, only, startup, |gpu| {
        Intensity::new(gpu, args.elements, args.seed)
    })
}

/// The harness check: a plain vector add.
pub fn run_vector_add(args: &Args, startup: Startup) -> anyhow::Result<ExitCode> {
    run_with(args, &[], startup, |gpu| {
        VectorAdd::new(gpu, args.elements, args.seed)
    })
}

/// The body of every binary of this crate.
pub fn main(only: &[&str]) -> ExitCode {
    common::cli::main_with(|startup| run(&Args::parse(), only, startup))
}
