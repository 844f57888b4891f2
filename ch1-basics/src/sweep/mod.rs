//! # Where each change starts to pay (`--sweep`)
//!
//! At the chapter's sizes some training changes barely show; each sweep runs one change over
//! the size that decides it through `common::sweep` (the table of sweeps is in the README):
//! every point two checked variants of the one runner, the way things were as the group's
//! baseline and the change, which pays where its speedup's 95% interval lies above [BAR].

pub mod allocations;
pub mod copies;
pub mod training;

use clap::ValueEnum;

use common::bench::BenchConfig;
use common::stop::StopRule;

use crate::training::lesson::host_bound_bench;

/// At least 10% faster, beyond doubt.
pub const BAR: f64 = 1.1;

/// `N` sizes from `first` on, each `factor` times the one before.
pub const fn geometric<const N: usize>(first: u64, factor: u64) -> [u64; N] {
    let mut sizes = [first; N];
    let mut i = 1;
    while i < N {
        sizes[i] = sizes[i - 1] * factor;
        i += 1;
    }
    sizes
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Kind {
    Pinned,
    Prealloc,
    Batch,
    Graphs,
    /// Every sweep, one after the other.
    All,
}

impl Kind {
    pub fn each(self) -> Vec<Kind> {
        match self {
            Kind::All => vec![Kind::Pinned, Kind::Prealloc, Kind::Batch, Kind::Graphs],
            k => vec![k],
        }
    }

    pub fn name(self) -> &'static str {
        self.lesson().trim_start_matches("ch1-basics-sweep-")
    }

    /// The lesson name of its report, and the stem of its files.
    pub fn lesson(self) -> &'static str {
        match self {
            Kind::Pinned => "ch1-basics-sweep-pinned",
            Kind::Prealloc => "ch1-basics-sweep-prealloc",
            Kind::Batch => "ch1-basics-sweep-batch",
            Kind::Graphs => "ch1-basics-sweep-graphs",
            Kind::All => "ch1-basics-sweep-all",
        }
    }
}

/// A sweep side's measuring settings: a short stopping rule (a few samples place a point on a
/// curve of ratios), samples made long as the host paces every side, the run's cold flag kept.
pub fn sweep_bench(cfg: BenchConfig) -> BenchConfig {
    host_bound_bench(BenchConfig {
        stop: StopRule::sweep(),
        cold: cfg.cold,
        ..BenchConfig::default()
    })
}
