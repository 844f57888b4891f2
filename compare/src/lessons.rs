//! Every lesson the compare knows, how to run one of its variants in this process (the child
//! side), and its baseline/optimized pairs.

use std::process::ExitCode;

use clap::Parser;
use common::report::Startup;

/// Which measured ceiling a pair's optimized variant is judged against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CeilingKind {
    /// Device copy bandwidth (GB/s).
    CopyBandwidth,
    /// cuBLAS SGEMM (GFLOP/s); TF32 runs against the TF32 GEMM ceiling.
    Sgemm,
    /// Nothing single bounds it (a whole training step).
    None,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pair {
    pub lesson: &'static str,
    pub name: &'static str,
    pub baseline: &'static str,
    pub optimized: &'static str,
    pub ceiling: CeilingKind,
}

impl Pair {
    pub fn id(&self) -> String {
        format!("{}/{}", self.lesson, self.name)
    }
}

type RunFn = fn(&[String], &[&str], Startup) -> anyhow::Result<ExitCode>;

pub struct LessonEntry {
    pub name: &'static str,
    pub run: RunFn,
}

/// Parse a lesson's own flags and run its `cli::run`, as its binary would.
fn run_parsed<A: Parser>(
    argv: &[String],
    only: &[&str],
    startup: Startup,
    run: fn(&A, &[&str], Startup) -> anyhow::Result<ExitCode>,
) -> anyhow::Result<ExitCode> {
    let args = A::try_parse_from(argv).map_err(|e| anyhow::anyhow!("{}", e.to_string().trim()))?;
    run(&args, only, startup)
}

pub fn lessons() -> Vec<LessonEntry> {
    vec![
        LessonEntry {
            name: "ch1-intensity",
            run: |argv, only, s| run_parsed(argv, only, s, ch1_intensity::cli::run),
        },
        LessonEntry {
            name: "ch1-gemm",
            run: |argv, only, s| run_parsed(argv, only, s, ch1_gemm::cli::run),
        },
        LessonEntry {
            name: "ch1-basics",
            run: |argv, only, s| run_parsed(argv, only, s, ch1_basics::cli::run),
        },
        LessonEntry {
            name: "ch1-graph-shapes",
            run: |argv, only, s| run_parsed(argv, only, s, ch1_graph_shapes::cli::run),
        },
    ]
}

pub const PAIRS: &[Pair] = &[
    Pair {
        lesson: "ch1-intensity",
        name: "fusion",
        baseline: "baseline",
        optimized: "fused",
        ceiling: CeilingKind::CopyBandwidth,
    },
    Pair {
        lesson: "ch1-gemm",
        name: "batched-gemm",
        baseline: "baseline",
        optimized: "strided",
        ceiling: CeilingKind::Sgemm,
    },
    Pair {
        lesson: "ch1-gemm",
        name: "pointer-array-gemm",
        baseline: "baseline",
        optimized: "batched",
        ceiling: CeilingKind::Sgemm,
    },
    Pair {
        lesson: "ch1-basics",
        name: "training",
        baseline: "training:baseline",
        optimized: "training:optimized",
        ceiling: CeilingKind::None,
    },
    Pair {
        lesson: "ch1-basics",
        name: "pinned",
        baseline: "training:baseline",
        optimized: "training:pinned",
        ceiling: CeilingKind::None,
    },
    Pair {
        lesson: "ch1-basics",
        name: "prealloc",
        baseline: "training:baseline",
        optimized: "training:prealloc",
        ceiling: CeilingKind::None,
    },
    Pair {
        lesson: "ch1-basics",
        name: "batch",
        baseline: "training:baseline",
        optimized: "training:batch",
        ceiling: CeilingKind::None,
    },
    Pair {
        lesson: "ch1-basics",
        name: "graphs",
        baseline: "training:baseline",
        optimized: "training:graphs",
        ceiling: CeilingKind::None,
    },
    Pair {
        lesson: "ch1-basics",
        name: "coalescing",
        baseline: "transpose:naive",
        optimized: "transpose:tiled32-vec4",
        ceiling: CeilingKind::CopyBandwidth,
    },
    Pair {
        lesson: "ch1-basics",
        name: "double-buffering",
        baseline: "pipeline:serial",
        optimized: "pipeline:overlapped",
        ceiling: CeilingKind::None,
    },
    Pair {
        lesson: "ch1-graph-shapes",
        name: "graph-buckets",
        baseline: "per-shape",
        optimized: "bucketed",
        ceiling: CeilingKind::None,
    },
];

pub fn lesson(name: &str) -> Option<LessonEntry> {
    lessons().into_iter().find(|l| l.name == name)
}

/// Pairs whose id ("lesson/pair") contains `filter` (all when None).
pub fn select(filter: Option<&str>) -> Vec<Pair> {
    PAIRS
        .iter()
        .filter(|p| filter.is_none_or(|f| p.id().contains(f)))
        .copied()
        .collect()
}

/// The variants to run for `pairs`, each once, in order: (lesson, variant).
pub fn variants_of(pairs: &[Pair]) -> Vec<(&'static str, &'static str)> {
    let mut out: Vec<(&'static str, &'static str)> = Vec::new();
    for p in pairs {
        for v in [p.baseline, p.optimized] {
            if !out.contains(&(p.lesson, v)) {
                out.push((p.lesson, v));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pair_names_a_known_lesson() {
        let names: Vec<_> = lessons().iter().map(|l| l.name).collect();
        for p in PAIRS {
            assert!(names.contains(&p.lesson), "{}", p.id());
        }
    }

    #[test]
    fn shared_baselines_run_once() {
        let v = variants_of(&select(Some("ch1-gemm")));
        assert_eq!(
            v,
            vec![
                ("ch1-gemm", "baseline"),
                ("ch1-gemm", "strided"),
                ("ch1-gemm", "batched")
            ]
        );
    }

    #[test]
    fn filters_match_substrings_of_ids() {
        assert_eq!(select(Some("fusion")).len(), 1);
        assert!(select(Some("no-such-pair")).is_empty());
        assert_eq!(select(None).len(), PAIRS.len());
    }
}
