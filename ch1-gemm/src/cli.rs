//! The lesson's command line: the shared flags, the shape, the precision, and the sweep.

use std::process::ExitCode;

use clap::Parser;
use common::cli::{parse_count_with_max, parse_seconds, CommonArgs};
use common::gpu::Gpu;
use common::lesson::{finish, run_lesson};
use common::report::LessonReport;
use common::verify::Precision;

use crate::problem::{tolerance, Shape, MAX_DIM};
use crate::{sweep, GemmLesson};

#[derive(Parser, Debug, Clone)]
#[command(
    about = "Many small GEMMs: one cuBLAS call per product vs one batched call",
    long_about = "Many small GEMMs: one cuBLAS call per product vs one batched call.\n\n\
        Computes COUNT independent row-major products C_i (m x n) = A_i (m x k) B_i (k x n) \
        three ways (one cublasSgemm per product, one cublasSgemmBatched, one strided-batched \
        call), checks each against a float64 CPU reference, and times them."
)]
pub struct Args {
    /// Rows of each A and C.
    #[arg(long, default_value = "32", value_parser = parse_dim, conflicts_with = "sweep",
          allow_negative_numbers = true)]
    pub m: usize,
    /// Columns of each B and C.
    #[arg(long, default_value = "256", value_parser = parse_dim, conflicts_with = "sweep",
          allow_negative_numbers = true)]
    pub n: usize,
    /// Inner dimension: columns of A, rows of B.
    #[arg(long, default_value = "256", value_parser = parse_dim, conflicts_with = "sweep",
          allow_negative_numbers = true)]
    pub k: usize,
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

impl Args {
    pub fn shape(&self) -> Shape {
        Shape {
            m: self.m,
            n: self.n,
            k: self.k,
            count: self.count,
        }
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
pub fn run(args: &Args, only: &[&str]) -> anyhow::Result<ExitCode> {
    let precision = args.precision();
    if args.sweep {
        return run_sweep(args, precision);
    }
    let shape = args.shape();
    // Before the GPU: a shape that cannot be counted is wrong on any machine.
    shape.validate()?;
    let gpu = Gpu::open(args.common.device)?;
    let mut lesson = GemmLesson::new(&gpu, shape, precision, args.seed)?;
    let report = run_lesson(&gpu, &mut lesson, only, &args.common)?;
    println!(
        "{}, {} (tolerance {:.1e} relative L2 against float64)\n",
        shape.label(),
        precision_label(precision),
        tolerance(precision, shape.k)
    );
    let code = finish(&report, &args.common)?;
    print!("{}", per_product(&report, shape.count));
    Ok(code)
}

fn run_sweep(args: &Args, precision: Precision) -> anyhow::Result<ExitCode> {
    let mut sizes = args.sweep_sizes.clone();
    let mut counts = args.sweep_counts.clone();
    for v in [&mut sizes, &mut counts] {
        v.sort_unstable();
        v.dedup();
    }
    let gpu = Gpu::open(args.common.device)?;
    let report = sweep::run(
        &gpu,
        &sizes,
        &counts,
        precision,
        args.seed,
        args.sweep_time_cap,
        &args.common,
    )?;
    Ok(finish(&report, &args.common)?)
}

pub fn precision_label(precision: Precision) -> &'static str {
    match precision {
        Precision::Tf32 => "tf32 (cuBLAS TF32 tensor-op math)",
        _ => "fp32 (cuBLAS default math, no tensor-op shortcuts)",
    }
}

/// "strided: 0.29 us per product (16 runs per sample)" for every timed variant: the table's
/// footer names the first variant's runs per sample only.
pub fn per_product(report: &LessonReport, count: usize) -> String {
    report
        .variants
        .iter()
        .filter_map(|v| {
            let ms = v.time_ms.as_ref()?.median;
            let batch = v.measurement.as_ref()?.batch;
            Some(format!(
                "{}: {} per product ({batch} run(s) per sample)\n",
                v.name,
                common::report::format_ms(ms / count as f64)
            ))
        })
        .collect()
}

/// The body of every binary of this crate.
pub fn main(only: &[&str]) -> ExitCode {
    common::cli::main_with(|| run(&Args::parse(), only))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dims_are_positive_and_fit_in_int() {
        assert_eq!(parse_dim("256"), Ok(256));
        assert_eq!(parse_dim("1K"), Ok(1024));
        assert!(parse_dim("0").unwrap_err().contains("a count of 0"));
        assert!(parse_dim("-3").unwrap_err().contains("negative"));
        assert!(parse_dim("2147483648").unwrap_err().contains("too large"));
        assert_eq!(parse_dim("2147483647"), Ok(i32::MAX as usize));
    }

    #[test]
    fn defaults_are_the_chapter_and_fp32() {
        let args = Args::parse_from(["ch1-gemm"]);
        assert_eq!(args.shape(), Shape::CHAPTER);
        assert_eq!(args.precision(), Precision::Fp32);
        assert_eq!(args.sweep_sizes, sweep::SIZES);
        assert_eq!(args.sweep_counts, sweep::COUNTS);
        let tf32 = Args::parse_from(["ch1-gemm", "--tf32", "--m", "3", "--count", "2"]);
        assert_eq!(tf32.precision(), Precision::Tf32);
        assert_eq!((tf32.m, tf32.count), (3, 2));
    }

    #[test]
    fn sweep_lists_parse() {
        let args = Args::parse_from([
            "ch1-gemm",
            "--sweep",
            "--sweep-sizes",
            "64,16",
            "--sweep-counts=8,32",
            "--sweep-time-cap",
            "5",
        ]);
        assert!(args.sweep);
        assert_eq!(args.sweep_sizes, vec![64, 16]);
        assert_eq!(args.sweep_counts, vec![8, 32]);
        assert_eq!(args.sweep_time_cap, 5.0);
    }
}
