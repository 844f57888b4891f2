//! The Nsight Systems command.
//!
//! For a program built on the harness, `nsys profile --trace=cuda,nvtx,osrt
//! --capture-range=cudaProfilerApi --capture-range-end=repeat`: the harness calls
//! cuProfilerStart/cuProfilerStop around each variant's timed sample loop, so collection runs
//! only while samples are taken; not during compilation, input generation, verification or
//! warmup. `repeat` because a lesson binary times several variants in one process: the default
//! (`stop-shutdown`) would end the run at the first variant's stop, `stop` would ignore every
//! later start, and `none` would keep collecting from the first start to the exit (verification
//! of later variants included). `repeat` captures each timed region and nothing between them,
//! one report per region, numbered by nsys after the output name; the wrapper lists every
//! report it finds.
//!
//! Any other program (a PyTorch script, a program of one's own) most likely never calls
//! cudaProfilerStart, and under that capture range nsys would record nothing at all: such a
//! program is recorded whole. Which kind a program is shows in its executable, which carries
//! the harness's [common::bench::TIMED_REGIONS_MARKER]; `--timed-regions` and
//! `--whole-process` decide instead, and the wrapper says which it chose and why.

use std::path::Path;

use crate::command::ToolCommand;

/// What nsys traces by default: CUDA API and GPU work, NVTX ranges, OS runtime calls.
pub const DEFAULT_TRACE: &str = "cuda,nvtx,osrt";

/// What nsys records of the program's run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capture {
    /// From each cudaProfilerStart to its cudaProfilerStop (the harness's timed samples).
    TimedRegions,
    /// Everything from the start to the exit.
    WholeProcess,
    /// From the first cudaProfilerStart to its cudaProfilerStop, the program then running on
    /// unrecorded to its own end (a training program's measured steps: `tuner profile`).
    FirstRegion,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NsysOptions {
    /// nsys's --trace list.
    pub trace: String,
    pub capture: Capture,
    /// Print nsys's summary tables after the run (--stats=true).
    pub stats: bool,
}

impl Default for NsysOptions {
    fn default() -> Self {
        NsysOptions {
            trace: DEFAULT_TRACE.into(),
            capture: Capture::TimedRegions,
            stats: false,
        }
    }
}

/// Whether the executable `program` is built on the harness, which brackets its timed samples
/// with cuProfilerStart/Stop. A file that cannot be read is taken as not.
pub fn marks_timed_regions(program: &Path) -> bool {
    let marker = common::bench::TIMED_REGIONS_MARKER.as_bytes();
    std::fs::read(program)
        .map(|bytes| memchr::memmem::find(&bytes, marker).is_some())
        .unwrap_or(false)
}

/// The capture for `program` (the one `asked` for by a flag, else by what the program is),
/// and the line that tells the user which and why.
pub fn choose_capture(program: &Path, asked: Option<Capture>) -> (Capture, String) {
    let name = program
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| program.display().to_string());
    match asked {
        Some(Capture::TimedRegions) => (
            Capture::TimedRegions,
            "nsys records only from each cudaProfilerStart to its cudaProfilerStop \
             (--timed-regions); a program that never calls them leaves nothing to record"
                .into(),
        ),
        Some(Capture::WholeProcess) => (
            Capture::WholeProcess,
            "nsys records the whole process (--whole-process)".into(),
        ),
        Some(Capture::FirstRegion) => (
            Capture::FirstRegion,
            "nsys records from the first cudaProfilerStart to its cudaProfilerStop".into(),
        ),
        None if marks_timed_regions(program) => (
            Capture::TimedRegions,
            format!(
                "nsys records the timed regions only: {name} brackets its timed samples with \
                 cuProfilerStart/Stop (--whole-process records everything)"
            ),
        ),
        None => (
            Capture::WholeProcess,
            format!(
                "nsys records the whole process: {name} does not mark timed regions as the \
                 lessons do (--timed-regions if it calls cudaProfilerStart/Stop itself)"
            ),
        ),
    }
}

/// `nsys profile ... --output <base> <program> <args>`.
pub fn command(
    nsys: &Path,
    opts: &NsysOptions,
    base: &Path,
    program: &Path,
    args: &[String],
) -> ToolCommand {
    let mut c = ToolCommand::new(nsys);
    c.arg("profile").arg(format!("--trace={}", opts.trace));
    let end = match opts.capture {
        Capture::TimedRegions => Some("repeat"),
        // `stop`, not the default `stop-shutdown`, which would end the program at its stop.
        Capture::FirstRegion => Some("stop"),
        Capture::WholeProcess => None,
    };
    if let Some(end) = end {
        c.arg("--capture-range=cudaProfilerApi")
            .arg(format!("--capture-range-end={end}"));
    }
    c.arg(format!("--stats={}", opts.stats))
        .arg("--force-overwrite=true")
        .arg(format!("--output={}", base.display()));
    c.arg(program.display().to_string());
    for a in args {
        c.arg(a.clone());
    }
    c
}

/// Why nsys left no `.nsys-rep` at `base`: raw capture streams it could not import (the copy
/// bundled with Nsight Compute lacks the importer), named; else `otherwise`.
pub fn why_no_report(nsys: &Path, base: &Path, otherwise: &str) -> String {
    let streams = crate::target::reports_with(base, ".qdstrm");
    if streams.is_empty() {
        return otherwise.to_string();
    }
    format!(
        "this nsys ({}) left {} raw capture stream(s) (.qdstrm) it could not turn into \
         .nsys-rep reports; the copy bundled with Nsight Compute lacks the importer. {}. The \
         streams (large; delete them) are: {}",
        nsys.display(),
        streams.len(),
        crate::discover::NSYS.install,
        streams
            .iter()
            .map(|s| s.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_command_captures_timed_regions() {
        let c = command(
            Path::new("/usr/local/cuda/bin/nsys"),
            &NsysOptions::default(),
            Path::new("results/profiles/ch1-intensity-all-20260121T000000Z"),
            Path::new("target/release/ch1-intensity"),
            &["--elements".into(), "64M".into()],
        );
        assert_eq!(
            c.display(),
            "/usr/local/cuda/bin/nsys profile --trace=cuda,nvtx,osrt \
             --capture-range=cudaProfilerApi --capture-range-end=repeat --stats=false \
             --force-overwrite=true \
             --output=results/profiles/ch1-intensity-all-20260121T000000Z \
             target/release/ch1-intensity --elements 64M"
        );
    }

    #[test]
    fn whole_process_and_stats_on_request_and_odd_arguments_quoted() {
        let opts = NsysOptions {
            trace: "cuda,nvtx".into(),
            capture: Capture::WholeProcess,
            stats: true,
        };
        let c = command(
            Path::new("nsys"),
            &opts,
            Path::new("my profiles/x"),
            Path::new("./bin/lesson"),
            &["--json".into(), "out dir/r.json".into()],
        );
        let s = c.display();
        assert!(!s.contains("capture-range"), "{s}");
        assert!(s.contains("--stats=true"), "{s}");
        assert!(s.contains("'--output=my profiles/x'"), "{s}");
        assert!(s.ends_with("./bin/lesson --json 'out dir/r.json'"), "{s}");
    }

    #[test]
    fn the_first_region_lets_the_program_run_on_after_it() {
        let opts = NsysOptions {
            capture: Capture::FirstRegion,
            ..NsysOptions::default()
        };
        let c = command(
            Path::new("nsys"),
            &opts,
            Path::new("p"),
            Path::new("python3"),
            &[],
        );
        let s = c.display();
        assert!(
            s.contains("--capture-range=cudaProfilerApi --capture-range-end=stop "),
            "{s}"
        );
    }

    #[test]
    fn the_capture_follows_the_program_unless_a_flag_says() {
        let dir = tempfile::tempdir().unwrap();
        let lesson = dir.path().join("ch1-intensity");
        let mut bytes = b"\x7fELF...".to_vec();
        bytes.extend_from_slice(common::bench::TIMED_REGIONS_MARKER.as_bytes());
        bytes.extend_from_slice(b"...");
        std::fs::write(&lesson, bytes).unwrap();
        let script = dir.path().join("train.py");
        std::fs::write(&script, "import torch\n").unwrap();

        let (capture, line) = choose_capture(&lesson, None);
        assert_eq!(capture, Capture::TimedRegions);
        assert!(line.contains("timed regions only: ch1-intensity"), "{line}");
        let (capture, line) = choose_capture(&script, None);
        assert_eq!(capture, Capture::WholeProcess);
        assert!(
            line.starts_with("nsys records the whole process: train.py"),
            "{line}"
        );
        let missing = dir.path().join("no-such-program");
        assert_eq!(choose_capture(&missing, None).0, Capture::WholeProcess);

        let asked = |program: &Path, c| choose_capture(program, Some(c)).0;
        assert_eq!(asked(&lesson, Capture::WholeProcess), Capture::WholeProcess);
        assert_eq!(asked(&script, Capture::TimedRegions), Capture::TimedRegions);
    }
}
