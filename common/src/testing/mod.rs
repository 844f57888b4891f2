//! Support for tests: run a built binary with every GPU hidden, so the no-GPU path is taken on
//! GPU machines too, and check it never panics; a device description for reports built by hand;
//! a crate's modules checked for import loops.

use std::process::Command;

use crate::bench::BenchConfig;
use crate::gpu::Gpu;
use crate::runner::{Lesson, Output, Reference, VariantSpec};

mod imports;
pub use imports::{
    assert_import_depth, assert_no_import_cycles, import_cycles, longest_import_chain,
};

/// Link each of `tools` from /usr/bin or /bin into `dir`, for a test that runs a command with
/// only `dir` on its PATH. Fails the test where a tool is in neither.
pub fn link_system_tools(dir: &std::path::Path, tools: &[&str]) {
    for tool in tools {
        let found = ["/usr/bin", "/bin"]
            .iter()
            .map(|d| std::path::Path::new(d).join(tool))
            .find(|p| p.exists())
            .unwrap_or_else(|| panic!("{tool} is in neither /usr/bin nor /bin"));
        std::os::unix::fs::symlink(found, dir.join(tool)).unwrap();
    }
}

/// Run `bin args...` without a GPU; returns (exit code, stderr). Fails the test on a panic or
/// a backtrace hint.
pub fn run_without_gpu(bin: &str, args: &[&str]) -> (i32, String) {
    let out = Command::new(bin)
        .args(args)
        .env("CUDA_VISIBLE_DEVICES", "")
        .env(
            "PERF_LESSONS_CACHE",
            std::env::temp_dir().join("perf-lessons-cli-test"),
        )
        .output()
        .expect("binary runs");
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!stderr.contains("panicked"), "panic on {args:?}: {stderr}");
    assert!(
        !stderr.contains("RUST_BACKTRACE"),
        "backtrace hint on {args:?}: {stderr}"
    );
    (out.status.code().unwrap_or(-1), stderr)
}

/// Run `bin args...` without a GPU and hold it to the answer every lesson gives there: exit 3
/// ([crate::exit::Exit::NoGpu]) and one line saying the driver or the GPU is missing.
pub fn assert_refused_without_gpu(bin: &str, args: &[&str]) {
    let (code, stderr) = run_without_gpu(bin, args);
    assert_eq!(code, 3, "{bin} {args:?}: {stderr}");
    assert!(
        stderr.contains("no NVIDIA driver found") || stderr.contains("no CUDA-capable GPU found"),
        "{stderr}"
    );
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
}

/// The flags the README's table lists as shared by every lesson binary and compare, each with
/// the placeholder of its value where it takes one (`--json FILE`: ("json", Some("FILE"))).
pub fn readme_shared_flags() -> Vec<(String, Option<String>)> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"))
        .expect("the workspace README");
    let start = readme
        .find("## Flags every lesson binary and `compare` share")
        .expect("the shared flags section");
    let first_cells: String = readme[start..]
        .lines()
        .skip(1)
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .map(|l| l.split('|').nth(1).unwrap_or_default().to_string() + "\n")
        .collect();
    let mut flags: Vec<(String, Option<String>)> = first_cells
        .split('`')
        .filter_map(|t| t.strip_prefix("--"))
        .map(|t| {
            let mut words = t.split_whitespace();
            let flag = words.next().unwrap_or_default().to_string();
            (flag, words.next().map(str::to_string))
        })
        .collect();
    flags.sort();
    flags.dedup();
    flags
}

/// Run `bin` with each flag the README lists as shared (and with all of them at once), every
/// GPU hidden: each must get past the argument parser to the GPU, so it exits with the code
/// for no GPU (3), never with bad usage (2).
pub fn assert_accepts_shared_flags(bin: &str) {
    let scratch = std::env::temp_dir().join(format!("shared-flags-{}", std::process::id()));
    let value = |placeholder: &str| -> String {
        match placeholder {
            "N" => "1".into(),
            "S" => "0.5".into(),
            "PCT" => "2".into(),
            "FILE" => scratch.join("out.json").display().to_string(),
            other => panic!("no sample value for the README's placeholder {other}"),
        }
    };
    let mut all: Vec<String> = Vec::new();
    let flags = readme_shared_flags();
    assert!(flags.len() >= 8, "read the README's table: {flags:?}");
    for (flag, placeholder) in &flags {
        let mut args = vec![format!("--{flag}")];
        args.extend(placeholder.as_deref().map(value));
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, stderr) = run_without_gpu(bin, &refs);
        assert_eq!(
            code,
            crate::exit::Exit::NoGpu.code() as i32,
            "{bin} {args:?} did not reach the GPU: {stderr}"
        );
        all.extend(args);
    }
    let refs: Vec<&str> = all.iter().map(String::as_str).collect();
    let (code, stderr) = run_without_gpu(bin, &refs);
    assert_eq!(code, 3, "{bin} {all:?}: {stderr}");
}

/// What every lesson binary owes its users without a GPU: it takes the README's shared flags
/// ([assert_accepts_shared_flags]), answers `--version` ([assert_prints_version]) and says in
/// one line that there is no GPU ([assert_refused_without_gpu]).
pub fn assert_lesson_binaries(bins: &[&str]) {
    for bin in bins {
        assert_accepts_shared_flags(bin);
        assert_prints_version(bin);
        assert_refused_without_gpu(bin, &[]);
    }
}

/// `bin --version` prints the project's version and the commit ([crate::cli::VERSION]), exit 0.
pub fn assert_prints_version(bin: &str) {
    let out = Command::new(bin)
        .arg("--version")
        .output()
        .expect("binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{bin} --version: {stdout}");
    assert!(
        stdout.trim_end().ends_with(crate::cli::VERSION),
        "{bin} --version: {stdout}"
    );
}

/// A measurement of `samples_s` (seconds per run, one run per sample, held behind the blocking
/// kernel), for reports built without a GPU.
pub fn measurement(samples_s: &[f64]) -> crate::bench::Measurement {
    crate::bench::Measurement {
        samples_s: samples_s.to_vec(),
        batch: 1,
        cold: false,
        held: true,
        warmup_runs: 1,
        stop_reason: crate::stop::StopReason::Converged,
        wall_s: samples_s.iter().sum(),
        before: Default::default(),
        after: Default::default(),
        clock_dropped: false,
        hold_timeouts: 0,
        trace: None,
        cpu: None,
    }
}

/// An H200 as [crate::gpu::DeviceInfo] describes it, for reports built without a GPU.
pub fn h200_info() -> crate::gpu::DeviceInfo {
    crate::gpu::DeviceInfo {
        ordinal: 0,
        name: "NVIDIA H200".into(),
        uuid: "GPU-00000000-0000-0000-0000-000000000000".into(),
        compute_capability: (9, 0),
        sm_count: 132,
        total_memory_bytes: 150_000_000_000,
        l2_bytes: 62_914_560,
        max_sm_clock_mhz: 1980,
        memory_clock_mhz: 3201,
        memory_bus_width_bits: 6144,
        driver_version: "580.159.04".into(),
        cuda_driver_version: "13.0".into(),
        nvrtc_version: "13.0".into(),
    }
}

/// A lesson with one planted variant more, for tests that show a wrong variant is caught: the
/// planted spec copies `like`'s (group, work, tolerance) under the name `variant`,
/// `run_planted` queues it, and everything else (reference, poisoning, output, bench config) is
/// the inner lesson's, as for `like`.
pub struct Planted<L, F> {
    pub inner: L,
    lesson_name: &'static str,
    variant: &'static str,
    description: &'static str,
    like: usize,
    run_planted: F,
    /// The inner lesson's variant count: indexes from here on are the planted one.
    inner_variants: usize,
}

impl<L, F> Planted<L, F>
where
    L: Lesson,
    F: FnMut(&mut L, &Gpu) -> crate::Result<()>,
{
    /// `lesson_name` names the report ("ch1-gemm-planted"); `like` must be one of the inner
    /// lesson's variants.
    pub fn new(
        inner: L,
        lesson_name: &'static str,
        (variant, description, like): (&'static str, &'static str, &'static str),
        run_planted: F,
    ) -> Planted<L, F> {
        let specs = inner.variants();
        let like = specs
            .iter()
            .position(|s| s.name == like)
            .unwrap_or_else(|| panic!("the lesson has no variant '{like}'"));
        Planted {
            inner,
            lesson_name,
            variant,
            description,
            like,
            run_planted,
            inner_variants: specs.len(),
        }
    }

    /// The inner lesson's index for `index` (the planted variant stands in for `like`).
    fn inner_index(&self, index: usize) -> usize {
        if index < self.inner_variants {
            index
        } else {
            self.like
        }
    }
}

impl<L, F> Lesson for Planted<L, F>
where
    L: Lesson,
    F: FnMut(&mut L, &Gpu) -> crate::Result<()>,
{
    fn name(&self) -> &str {
        self.lesson_name
    }
    fn parameters(&self) -> serde_json::Value {
        self.inner.parameters()
    }
    fn variants(&self) -> Vec<VariantSpec> {
        let mut v = self.inner.variants();
        let like = v[self.like].clone();
        v.push(VariantSpec {
            name: self.variant.into(),
            description: self.description.into(),
            ..like
        });
        v
    }
    fn reference(&self, index: usize) -> Option<&Reference> {
        self.inner.reference(self.inner_index(index))
    }
    fn check_against_baseline(&self, index: usize) -> bool {
        self.inner.check_against_baseline(self.inner_index(index))
    }
    fn poison(&mut self, gpu: &Gpu, index: usize) -> crate::Result<()> {
        let inner = self.inner_index(index);
        self.inner.poison(gpu, inner)
    }
    fn run(&mut self, gpu: &Gpu, index: usize) -> crate::Result<()> {
        if index < self.inner_variants {
            self.inner.run(gpu, index)
        } else {
            (self.run_planted)(&mut self.inner, gpu)
        }
    }
    fn output(&mut self, gpu: &Gpu, index: usize) -> crate::Result<Output> {
        let inner = self.inner_index(index);
        self.inner.output(gpu, inner)
    }
    fn bench_config(&self, index: usize, cfg: BenchConfig) -> BenchConfig {
        self.inner.bench_config(self.inner_index(index), cfg)
    }
}
