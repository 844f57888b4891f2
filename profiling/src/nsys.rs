//! The Nsight Systems command.
//!
//! `nsys profile --trace=cuda,nvtx,osrt --capture-range=cudaProfilerApi
//! --capture-range-end=repeat`: the harness calls cuProfilerStart/cuProfilerStop around each
//! variant's timed sample loop, so collection runs only while samples are taken; not during
//! compilation, input generation, verification or warmup. `repeat` because a lesson binary
//! times several variants in one process: the default (`stop-shutdown`) would end the run at
//! the first variant's stop, `stop` would ignore every later start, and `none` would keep
//! collecting from the first start to the exit (verification of later variants included).
//! `repeat` captures each timed region and nothing between them, one report per region,
//! numbered by nsys after the output name; the wrapper lists every report it finds.

use std::path::Path;

use crate::command::ToolCommand;

/// What nsys traces by default: CUDA API and GPU work, NVTX ranges, OS runtime calls.
pub const DEFAULT_TRACE: &str = "cuda,nvtx,osrt";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NsysOptions {
    /// nsys's --trace list.
    pub trace: String,
    /// Capture only the timed regions (cudaProfilerApi); off records the whole process.
    pub timed_regions_only: bool,
    /// Print nsys's summary tables after the run (--stats=true).
    pub stats: bool,
}

impl Default for NsysOptions {
    fn default() -> Self {
        NsysOptions {
            trace: DEFAULT_TRACE.into(),
            timed_regions_only: true,
            stats: false,
        }
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
    if opts.timed_regions_only {
        c.arg("--capture-range=cudaProfilerApi")
            .arg("--capture-range-end=repeat");
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
            timed_regions_only: false,
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
}
