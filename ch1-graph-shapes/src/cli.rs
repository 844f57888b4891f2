//! The pair's command line: the shared flags plus the request stream.

use std::process::ExitCode;

use clap::Parser;
use common::cli::{parse_count_with_max, run_lesson_with, CommonArgs};
use common::report::Startup;
use common::verify::Rng;

use crate::GraphShapes;

/// Longest request accepted: 2^26 elements (256 MiB per staged buffer).
pub const MAX_LENGTH: u64 = 1 << 26;

#[derive(Parser, Debug, Clone)]
#[command(
    version = common::cli::VERSION,
    about = "CUDA graphs with changing shapes: a graph per shape vs one per padded size bucket"
)]
pub struct Args {
    /// Requests in the stream; each has its own length.
    #[arg(long, default_value = "64", value_parser = |s: &str| parse_count_with_max(s, 1 << 16))]
    pub requests: u64,
    /// Longest request, in elements; lengths are drawn from 1 to this, all different.
    #[arg(long, default_value = "16K", value_parser = |s: &str| parse_count_with_max(s, MAX_LENGTH))]
    pub max_length: u64,
    /// Seed of the lengths and the inputs.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    #[command(flatten)]
    pub common: CommonArgs,
}

impl Args {
    /// The request lengths: `requests` different values in 1..=max_length.
    pub fn lengths(&self) -> anyhow::Result<Vec<usize>> {
        if self.requests > self.max_length {
            anyhow::bail!(
                "--requests ({}) is more than --max-length ({}) allows: every request needs its own length",
                self.requests,
                self.max_length
            );
        }
        Ok(distinct_lengths(
            self.requests as usize,
            self.max_length as usize,
            self.seed,
        ))
    }
}

/// `count` different lengths in 1..=max_length, drawn from `seed`.
pub fn distinct_lengths(count: usize, max_length: usize, seed: u64) -> Vec<usize> {
    let mut rng = Rng::new(seed);
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::with_capacity(count);
    while out.len() < count.min(max_length) {
        let len = 1 + (rng.next_u64() % max_length as u64) as usize;
        if seen.insert(len) {
            out.push(len);
        }
    }
    out
}

/// The pair's variants named in `only` (all when empty).
pub fn run(args: &Args, only: &[&str], startup: Startup) -> anyhow::Result<ExitCode> {
    let lengths = args.lengths()?;
    run_lesson_with(&args.common, only, startup, |gpu| {
        let elements: usize = lengths.iter().sum();
        let staged = args.max_length.next_power_of_two() as usize;
        gpu.check_fits(
            "the requests and the staged buffer",
            4 * (2 * elements + staged) as u64,
        )?;
        GraphShapes::new(gpu, lengths, args.seed)
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
    fn lengths_are_distinct_seeded_and_in_range() {
        let l = distinct_lengths(64, 16384, 42);
        assert_eq!(l.len(), 64);
        let set: std::collections::HashSet<_> = l.iter().collect();
        assert_eq!(set.len(), 64, "every request has its own length");
        assert!(l.iter().all(|&x| (1..=16384).contains(&x)));
        assert_eq!(l, distinct_lengths(64, 16384, 42));
        assert_ne!(l, distinct_lengths(64, 16384, 43));
        // Every length of a small range, in some order.
        let mut all = distinct_lengths(5, 5, 1);
        all.sort();
        assert_eq!(all, vec![1, 2, 3, 4, 5]);
    }
}
