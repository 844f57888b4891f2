//! The lesson's command line: the shared flags, the shape, the precision, and the sweep.

use std::process::ExitCode;

use clap::Parser;
use common::cli::{parse_count_with_max, parse_seconds, run_lesson_with, CommonArgs};
use common::report::Startup;
use common::sweep::SweepLesson;
use common::verify::Precision;

use crate::problem::{Shape, MAX_DIM};
use crate::sweep::{memory_at_hand, GemmSweep};
use crate::{sweep, GemmLesson};

#[derive(Parser, Debug, Clone)]
#[command(
    version = common::cli::VERSION,
    about = "Many small GEMMs: one cuBLAS call per product vs one batched call",
    long_about = "Many small GEMMs: one cuBLAS call per product vs one batched call.\n\n\
        Computes COUNT independent row-major products C_i (M x N) = A_i (M x K) B_i (K x N) \
        three ways (one cublasSgemm per product, one cublasSgemmBatched, one strided-batched \
        call), checks each against a float64 CPU reference, and times them."
)]
pub struct Args {
    /// Each product's M x N x K: A_i is M x K, B_i is K x N, C_i is M x N.
    #[arg(long, value_name = "MxNxK", default_value = "32x256x256", value_parser = parse_shape,
          conflicts_with = "sweep", allow_hyphen_values = true)]
    pub shape: [usize; 3],
    /// Number of independent products.
    #[arg(long, default_value = "40", value_parser = parse_dim, conflicts_with = "sweep",
          allow_negative_numbers = true)]
    pub count: usize,
    /// Compute with TF32 tensor-op math (cuBLAS CUBLAS_TF32_TENSOR_OP_MATH); default plain fp32.
    #[arg(long)]
    pub tf32: bool,
    /// Time square products over a grid of sizes and counts instead of one shape.
    #[arg(long)]
    pub sweep: bool,
    /// Sizes the sweep covers (square products).
    #[arg(long, value_delimiter = ',', value_parser = parse_dim, requires = "sweep",
          default_values_t = sweep::SIZES)]
    pub sweep_sizes: Vec<usize>,
    /// Product counts the sweep covers.
    #[arg(long, value_delimiter = ',', value_parser = parse_dim, requires = "sweep",
          default_values_t = sweep::COUNTS)]
    pub sweep_counts: Vec<usize>,
    /// Wall time after which the sweep skips the points it has not reached.
    #[arg(long, value_name = "SECONDS", default_value = "60", value_parser = parse_seconds,
          requires = "sweep")]
    pub sweep_time_cap: f64,
    /// Seed of the random inputs.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    #[command(flatten)]
    pub common: CommonArgs,
}

/// A dimension or count: a positive integer (K, M, G suffixes allowed) that cuBLAS's `int` holds.
pub fn parse_dim(s: &str) -> Result<usize, String> {
    parse_count_with_max(s, MAX_DIM).map(|v| v as usize)
}

/// "MxNxK", each a [parse_dim] dimension: "32x256x256", "1Kx1Kx64".
pub fn parse_shape(s: &str) -> Result<[usize; 3], String> {
    let dims: Vec<&str> = s.trim().split(['x', 'X']).collect();
    let [m, n, k] = dims[..] else {
        return Err(format!("'{s}' is not a shape: give MxNxK, e.g. 32x256x256"));
    };
    let dim = |name: &str, text: &str| parse_dim(text).map_err(|e| format!("{name} of '{s}': {e}"));
    Ok([dim("M", m)?, dim("N", n)?, dim("K", k)?])
}

impl Args {
    pub fn shape(&self) -> Shape {
        let [m, n, k] = self.shape;
        Shape::new(m, n, k, self.count)
    }

    pub fn precision(&self) -> Precision {
        if self.tf32 {
            Precision::Tf32
        } else {
            Precision::Fp32
        }
    }
}

/// Run the named variants (all when `only` is empty), or the sweep, and report.
pub fn run(args: &Args, only: &[&str], startup: Startup) -> anyhow::Result<ExitCode> {
    let (precision, seed) = (args.precision(), args.seed);
    if !args.sweep {
        let shape = args.shape();
        // Before the GPU: a shape that cannot be counted is wrong on any machine.
        shape.validate()?;
        return run_lesson_with(&args.common, only, startup, |gpu| {
            GemmLesson::new(gpu, shape, precision, seed)
        });
    }
    if !only.is_empty() {
        anyhow::bail!("--sweep times both sides of every point: run it as `ch1-gemm --sweep`");
    }
    let (sizes, counts) = (&args.sweep_sizes, &args.sweep_counts);
    run_lesson_with(&args.common, &[], startup, |gpu| {
        let (memory, cap) = (memory_at_hand(gpu)?, args.sweep_time_cap);
        let sweep = GemmSweep::new(sizes, counts, precision, seed, cap, memory)?;
        Ok(SweepLesson(sweep))
    })
}

/// The body of every binary of this crate.
pub fn main(only: &[&str]) -> ExitCode {
    common::cli::main_with(|startup| run(&Args::parse(), only, startup))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_are_three_dimensions_each_named_when_refused() {
        assert_eq!(parse_shape(" 1Kx2X64 "), Ok([1024, 2, 64]));
        for bad in ["32x256", "32x256x256x4", "", "32*256*256"] {
            let err = parse_shape(bad).unwrap_err();
            assert!(err.contains("is not a shape: give MxNxK"), "{bad}: {err}");
        }
        let err = parse_shape("32x0x256").unwrap_err();
        assert!(err.starts_with("N of '32x0x256': a count of 0"), "{err}");
        assert!(parse_shape("2147483648x1x1")
            .unwrap_err()
            .starts_with("M of '2147483648x1x1': '2147483648' is too large"));
        assert_eq!(parse_dim("2147483647"), Ok(i32::MAX as usize));
    }

    #[test]
    fn defaults_are_the_chapter_in_fp32_and_the_sweeps_grid() {
        let args = Args::parse_from(["ch1-gemm"]);
        assert_eq!(
            (args.shape(), args.precision()),
            (Shape::CHAPTER, Precision::Fp32)
        );
        assert_eq!(
            (&args.sweep_sizes[..], &args.sweep_counts[..]),
            (&sweep::SIZES[..], &sweep::COUNTS[..])
        );
        let tf32 = Args::parse_from(["ch1-gemm", "--tf32", "--shape", "3x256x256", "--count", "2"]);
        assert_eq!(
            (tf32.precision(), tf32.shape()),
            (Precision::Tf32, Shape::new(3, 256, 256, 2))
        );
        let sweep = [
            "ch1-gemm",
            "--sweep",
            "--sweep-sizes",
            "64,16",
            "--sweep-counts=8,32",
        ];
        let args = Args::parse_from(sweep);
        assert_eq!(
            (args.sweep_sizes, args.sweep_counts),
            (vec![64, 16], vec![8, 32])
        );
    }
}
