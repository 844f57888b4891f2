//! Every lesson the compare knows, where its binary is, and its baseline/optimized pairs.

use std::path::{Path, PathBuf};

use common::libraries::{self, Library};

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
    /// The lesson's flags both sides run with (none: the lesson's defaults), so that the pair
    /// runs at a size where its effect stands clear of the noise.
    pub args: &'static [&'static str],
    /// Why the pair runs at `args` rather than at the lesson's defaults.
    pub size_note: &'static str,
}

impl Pair {
    pub fn id(&self) -> String {
        format!("{}/{}", self.lesson, self.name)
    }

    /// A pair run at the lesson's defaults.
    const fn at_defaults(
        lesson: &'static str,
        name: &'static str,
        (baseline, optimized): (&'static str, &'static str),
        ceiling: CeilingKind,
    ) -> Pair {
        Pair {
            lesson,
            name,
            baseline,
            optimized,
            ceiling,
            args: &[],
            size_note: "",
        }
    }

    /// Its two variant runs.
    pub fn runs(&self) -> [VariantKey; 2] {
        [self.baseline, self.optimized].map(|variant| VariantKey {
            lesson: self.lesson,
            variant,
            args: self.args,
        })
    }
}

/// One variant run of the compare: a lesson's variant at the lesson flags a pair asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VariantKey {
    pub lesson: &'static str,
    pub variant: &'static str,
    pub args: &'static [&'static str],
}

/// The lessons the compare runs. Each runs as its own binary, found beside the compare's
/// ([binaries]): the compare builds on no lesson's code.
pub const LESSONS: &[&str] = &[
    "ch1-intensity",
    "ch1-gemm",
    "ch1-basics",
    "ch1-graph-shapes",
];

/// The CUDA libraries a lesson's process loads, in the order it loads them: every lesson opens
/// a GPU (the driver, NVML) and compiles its kernels (NVRTC); the GEMMs and the training loops
/// (the MLP's matrix products) create a cuBLAS handle.
pub fn libraries_of(lesson: &str) -> Vec<Library> {
    let blas: &[Library] = match lesson {
        "ch1-gemm" | "ch1-basics" => libraries::CUBLAS,
        _ => &[],
    };
    [libraries::DRIVER, libraries::NVML, libraries::NVRTC, blas].concat()
}

/// The libraries `lessons` load, in the order they first load them, each once.
pub fn libraries_in_order<'a>(lessons: impl IntoIterator<Item = &'a str>) -> Vec<Library> {
    let mut out: Vec<Library> = Vec::new();
    for library in lessons.into_iter().flat_map(libraries_of) {
        if !out.contains(&library) {
            out.push(library);
        }
    }
    out
}

/// The folder of this executable, where `cargo build` puts every binary of the workspace
/// (target/release/ for `cargo run --release -p compare`); a test's executable sits one
/// folder down, in deps/.
pub fn binaries_dir() -> std::io::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let dir = exe.parent().unwrap_or(Path::new("."));
    Ok(match dir.parent() {
        Some(up) if dir.ends_with("deps") => up.to_path_buf(),
        _ => dir.to_path_buf(),
    })
}

/// The binary of each of `lessons` in `dir`, in order; those missing are one line that names
/// the command that builds them.
pub fn binaries(dir: &Path, lessons: &[&str]) -> anyhow::Result<Vec<PathBuf>> {
    let paths: Vec<PathBuf> = lessons.iter().map(|l| dir.join(l)).collect();
    let missing: Vec<&str> = lessons
        .iter()
        .zip(&paths)
        .filter(|(_, p)| !p.is_file())
        .map(|(l, _)| *l)
        .collect();
    if missing.is_empty() {
        return Ok(paths);
    }
    let release = if dir.ends_with("debug") {
        ""
    } else {
        " --release"
    };
    anyhow::bail!(
        "compare runs each lesson's own binary and finds no {} in {}: build every lesson with `cargo build{release}` (or `cargo build{release} -p {}`)",
        missing.join(", "),
        dir.display(),
        missing.join(" -p ")
    )
}

/// Flags of the pinned pair: one pass of 4096 samples per step copies 4 MiB, where a pinned
/// DMA (about 52 GB/s at 4 MiB on an H100) is several times faster than a pageable copy (about
/// 6-7 GB/s at large sizes on an H200); at the chapter's 32 KiB the two cost about the same.
pub const PINNED_ARGS: &[&str] = &["--batch", "4096", "--microbatch", "4096"];

/// Flags of the prealloc pair: passes of 1024 samples through 4096 hidden units allocate and free
/// 16 MiB activation buffers each time, where the chapter's passes allocate 32 KiB ones.
pub const PREALLOC_ARGS: &[&str] = &[
    "--hidden",
    "4096",
    "--samples",
    "4096",
    "--batch",
    "1024",
    "--microbatch",
    "1024",
];

pub const PAIRS: &[Pair] = &[
    Pair::at_defaults(
        "ch1-intensity",
        "fusion",
        ("baseline", "fused"),
        CeilingKind::CopyBandwidth,
    ),
    Pair::at_defaults(
        "ch1-gemm",
        "batched-gemm",
        ("baseline", "strided"),
        CeilingKind::Sgemm,
    ),
    Pair::at_defaults(
        "ch1-gemm",
        "pointer-array-gemm",
        ("baseline", "batched"),
        CeilingKind::Sgemm,
    ),
    Pair::at_defaults(
        "ch1-basics",
        "training",
        ("training:baseline", "training:optimized"),
        CeilingKind::None,
    ),
    Pair {
        args: PINNED_ARGS,
        size_note: "4 MiB copies per pass: at the chapter's 32 KiB a pageable copy costs about what a pinned one does; `ch1-basics --sweep pinned` shows where pinning starts to pay",
        ..Pair::at_defaults(
            "ch1-basics",
            "pinned",
            ("training:baseline", "training:pinned"),
            CeilingKind::None,
        )
    },
    Pair {
        args: PREALLOC_ARGS,
        size_note: "16 MiB buffers allocated and freed per pass: the chapter's 32 KiB ones cost little next to a pass's synchronized launches; `ch1-basics --sweep prealloc` shows what an allocation costs by size",
        ..Pair::at_defaults(
            "ch1-basics",
            "prealloc",
            ("training:baseline", "training:prealloc"),
            CeilingKind::None,
        )
    },
    Pair::at_defaults(
        "ch1-basics",
        "batch",
        ("training:baseline", "training:batch"),
        CeilingKind::None,
    ),
    Pair::at_defaults(
        "ch1-basics",
        "graphs",
        ("training:baseline", "training:graphs"),
        CeilingKind::None,
    ),
    Pair::at_defaults(
        "ch1-basics",
        "coalescing",
        ("transpose:naive", "transpose:tiled32-vec4"),
        CeilingKind::CopyBandwidth,
    ),
    Pair::at_defaults(
        "ch1-basics",
        "double-buffering",
        ("pipeline:serial", "pipeline:overlapped"),
        CeilingKind::None,
    ),
    Pair::at_defaults(
        "ch1-graph-shapes",
        "graph-buckets",
        ("per-shape", "bucketed"),
        CeilingKind::None,
    ),
];

/// Pairs whose id ("lesson/pair") contains one of `filters` (all when there is none).
pub fn select<S: AsRef<str>>(filters: &[S]) -> Vec<Pair> {
    PAIRS
        .iter()
        .filter(|p| filters.is_empty() || filters.iter().any(|f| p.id().contains(f.as_ref())))
        .copied()
        .collect()
}

/// The variant runs `pairs` need, each once, in order (a baseline shared by pairs at the same
/// flags runs once).
pub fn variants_of(pairs: &[Pair]) -> Vec<VariantKey> {
    let mut out: Vec<VariantKey> = Vec::new();
    for run in pairs.iter().flat_map(Pair::runs) {
        if !out.contains(&run) {
            out.push(run);
        }
    }
    out
}

/// Variant runs that share one child process: one lesson at one set of flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Child {
    pub lesson: &'static str,
    pub args: &'static [&'static str],
    pub variants: Vec<&'static str>,
}

impl Child {
    /// Its variant runs, in order.
    pub fn runs(&self) -> Vec<VariantKey> {
        self.variants
            .iter()
            .map(|&variant| VariantKey {
                lesson: self.lesson,
                variant,
                args: self.args,
            })
            .collect()
    }
}

/// The child processes that run `runs`: with `isolate`, one per variant; otherwise one per
/// lesson and set of flags, its variants in the order of `runs` (a lesson run in parts builds
/// each part when its turn comes and drops it after, so no part's buffers sit beside
/// another's, as in a process of its own).
pub fn children_of(runs: &[VariantKey], isolate: bool) -> Vec<Child> {
    let mut out: Vec<Child> = Vec::new();
    for run in runs {
        let shared = out
            .iter_mut()
            .find(|c| !isolate && c.lesson == run.lesson && c.args == run.args);
        match shared {
            Some(child) => child.variants.push(run.variant),
            None => out.push(Child {
                lesson: run.lesson,
                args: run.args,
                variants: vec![run.variant],
            }),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pair_names_a_known_lesson() {
        for p in PAIRS {
            assert!(LESSONS.contains(&p.lesson), "{}", p.id());
        }
    }

    #[test]
    fn a_missing_binary_is_one_line_naming_the_build() {
        let dir = std::env::temp_dir().join(format!("compare-bins-{}", std::process::id()));
        let release = dir.join("release");
        std::fs::create_dir_all(&release).unwrap();
        std::fs::write(release.join("ch1-gemm"), "").unwrap();
        let found = binaries(&release, &["ch1-gemm"]).unwrap();
        assert_eq!(found, [release.join("ch1-gemm")]);
        let err = binaries(&release, &["ch1-gemm", "ch1-basics", "ch1-intensity"])
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with(
                "compare runs each lesson's own binary and finds no ch1-basics, ch1-intensity in "
            ),
            "{err}"
        );
        assert!(
            err.ends_with("`cargo build --release` (or `cargo build --release -p ch1-basics -p ch1-intensity`)"),
            "{err}"
        );
        assert_eq!(err.lines().count(), 1);
        let debug = dir.join("debug");
        let err = binaries(&debug, &["ch1-gemm"]).unwrap_err().to_string();
        assert!(
            err.contains("`cargo build` (or `cargo build -p ch1-gemm`)"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn names(runs: &[VariantKey]) -> Vec<(&str, &str, usize)> {
        runs.iter()
            .map(|r| (r.lesson, r.variant, r.args.len()))
            .collect()
    }

    #[test]
    fn shared_baselines_run_once() {
        let v = variants_of(&select(&["ch1-gemm"]));
        assert_eq!(
            names(&v),
            vec![
                ("ch1-gemm", "baseline", 0),
                ("ch1-gemm", "strided", 0),
                ("ch1-gemm", "batched", 0)
            ]
        );
    }

    #[test]
    fn a_baseline_at_other_flags_is_a_run_of_its_own() {
        let v = variants_of(&select(&["ch1-basics"]));
        let baselines: Vec<_> = v
            .iter()
            .filter(|r| r.variant == "training:baseline")
            .map(|r| r.args)
            .collect();
        assert_eq!(baselines, vec![&[][..], PINNED_ARGS, PREALLOC_ARGS]);
        // Each pair's two runs share the pair's flags.
        for p in select(&["ch1-basics"]) {
            let [b, o] = p.runs();
            assert_eq!((b.args, o.args), (p.args, p.args), "{}", p.id());
            assert!(v.contains(&b) && v.contains(&o), "{}", p.id());
        }
        assert_eq!(v.len(), 12, "{:?}", names(&v));
    }

    #[test]
    fn pairs_at_other_sizes_say_why() {
        for p in PAIRS {
            assert_eq!(p.args.is_empty(), p.size_note.is_empty(), "{}", p.id());
        }
        // 4096 samples of the MLP's 256 fp32 features: 4 MiB per copy. (That ch1-basics takes
        // these flags: tests/lesson_binaries.rs.)
        let microbatch = PINNED_ARGS
            .windows(2)
            .find(|w| w[0] == "--microbatch")
            .map(|w| w[1].parse::<u64>().unwrap());
        assert_eq!(microbatch.map(|m| m * 256 * 4), Some(4 << 20));
    }

    #[test]
    fn variants_of_one_lesson_at_one_size_share_a_child() {
        let runs = variants_of(&select::<&str>(&[]));
        let children = children_of(&runs, false);
        let summary: Vec<(&str, usize, usize)> = children
            .iter()
            .map(|c| (c.lesson, c.args.len(), c.variants.len()))
            .collect();
        assert_eq!(
            summary,
            [
                ("ch1-intensity", 0, 2),
                ("ch1-gemm", 0, 3),
                ("ch1-basics", 0, 8),
                ("ch1-basics", 4, 2),
                ("ch1-basics", 8, 2),
                ("ch1-graph-shapes", 0, 2),
            ]
        );
        // Every run once, none lost.
        let mut again: Vec<VariantKey> = children.iter().flat_map(Child::runs).collect();
        assert_eq!(again.len(), runs.len());
        again.retain(|r| runs.contains(r));
        assert_eq!(again.len(), runs.len());
        assert_eq!(
            children[2].variants,
            [
                "training:baseline",
                "training:optimized",
                "training:batch",
                "training:graphs",
                "transpose:naive",
                "transpose:tiled32-vec4",
                "pipeline:serial",
                "pipeline:overlapped"
            ]
        );
        // Isolated: one child per run, in the same order.
        let isolated = children_of(&runs, true);
        assert_eq!(isolated.len(), runs.len());
        assert!(isolated.iter().all(|c| c.variants.len() == 1));
    }

    #[test]
    fn libraries_come_in_the_order_the_children_first_load_them() {
        use common::libraries::{CUBLAS, DRIVER, NVML, NVRTC};
        let children = children_of(&variants_of(PAIRS), false);
        let order = libraries_in_order(children.iter().map(|c| c.lesson));
        assert_eq!(order, [DRIVER, NVML, NVRTC, CUBLAS].concat());
        // The first child, the intensity lesson, loads no cuBLAS; the graph lesson neither.
        assert_eq!(children[0].lesson, "ch1-intensity");
        for lesson in ["ch1-intensity", "ch1-graph-shapes"] {
            assert!(libraries_of(lesson).iter().all(|l| !CUBLAS.contains(l)));
        }
        assert!(CUBLAS.iter().all(|l| libraries_of("ch1-gemm").contains(l)));
        assert!(libraries_in_order([]).is_empty());
    }

    #[test]
    fn filters_match_substrings_of_ids() {
        assert_eq!(select(&["fusion"]).len(), 1);
        assert_eq!(select(&["fusion", "batched-gemm"]).len(), 2);
        assert!(select(&["no-such-pair"]).is_empty());
        assert_eq!(select::<&str>(&[]).len(), PAIRS.len());
    }
}
