//! `profiling nsys|ncu [options] -- PROGRAM [ARGS...]` and `profiling headline REPORT`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::SystemTime;

use clap::{Args, Parser, Subcommand};
use common::exit::Exit;

use crate::command::{resolve_program, ToolCommand};
use crate::discover::{self, Places, Tool};
use crate::error::{Error, Result};
use crate::ncu::{self, NcuOptions};
use crate::nsys::{self, Capture, NsysOptions};
use crate::target::{self, naming, report_base};

#[derive(Parser, Debug)]
#[command(
    version = common::cli::VERSION,
    name = "profiling",
    about = "Run a lesson under Nsight Systems or Nsight Compute: print the exact command, run it, say where the report went",
    after_help = "Examples:\n  profiling nsys -- target/release/ch1-intensity --elements 64M\n  profiling nsys -- python3 examples/pytorch/train_resnet.py\n  profiling ncu --kernel fused_vec4 -- target/release/ch1-intensity --elements 64M\n  profiling ncu --nvtx-include ch1-intensity:fused/ -- target/release/ch1-intensity"
)]
pub struct Cli {
    #[command(subcommand)]
    pub tool: ToolArgs,
}

#[derive(Subcommand, Debug)]
pub enum ToolArgs {
    /// Timeline (CUDA, NVTX, OS runtime) with Nsight Systems: a lesson's timed regions, any
    /// other program's whole run.
    Nsys(NsysArgs),
    /// Per-kernel metrics with Nsight Compute, then the headline (duration, DRAM %, SM %).
    Ncu(NcuArgs),
    /// Print the headline of an existing Nsight Compute report.
    Headline(HeadlineArgs),
}

#[derive(Args, Debug)]
pub struct TargetArgs {
    /// Folder for the reports.
    #[arg(long, value_name = "DIR", default_value = target::DEFAULT_OUT_DIR)]
    pub out_dir: PathBuf,
    /// Lesson name in the report's file name (default: the program's name).
    #[arg(long)]
    pub lesson: Option<String>,
    /// Variant name in the report's file name (default: "all").
    #[arg(long)]
    pub variant: Option<String>,
    /// Print the command and stop.
    #[arg(long)]
    pub dry_run: bool,
    /// The program to profile and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "PROGRAM [ARGS]")]
    pub command: Vec<String>,
}

#[derive(Args, Debug)]
pub struct NsysArgs {
    /// nsys to use (else PATH, then $NSYS, then the usual install folders).
    #[arg(long, value_name = "PATH")]
    pub nsys: Option<PathBuf>,
    /// What nsys traces.
    #[arg(long, default_value = nsys::DEFAULT_TRACE)]
    pub trace: String,
    /// Record the whole process (the default for a program not built on the harness).
    #[arg(long, conflicts_with = "timed_regions")]
    pub whole_process: bool,
    /// Record only from each cudaProfilerStart to its cudaProfilerStop (the default for a
    /// lesson binary, which brackets its timed samples with them).
    #[arg(long)]
    pub timed_regions: bool,
    /// Print nsys's summary tables after the run.
    #[arg(long)]
    pub stats: bool,
    #[command(flatten)]
    pub target: TargetArgs,
}

#[derive(Args, Debug)]
pub struct NcuArgs {
    /// ncu to use (else PATH, then $NCU, then the usual install folders).
    #[arg(long, value_name = "PATH")]
    pub ncu: Option<PathBuf>,
    /// Profile kernels of this name (`regex:...` for a regular expression).
    #[arg(long, short = 'k')]
    pub kernel: Option<String>,
    /// Launches (of matching kernels) to skip first.
    #[arg(long, default_value_t = 0)]
    pub launch_skip: u64,
    /// Launches to profile.
    #[arg(long, short = 'c', default_value_t = 1)]
    pub launch_count: u64,
    /// Collect every section (`--set full`) instead of the small default set.
    #[arg(long)]
    pub full: bool,
    /// A section to collect (repeatable); default SpeedOfLight, LaunchStats, Occupancy.
    #[arg(long = "section", value_name = "NAME")]
    pub sections: Vec<String>,
    /// Extra metrics, comma-separated.
    #[arg(long)]
    pub metrics: Option<String>,
    /// Only kernels inside this NVTX range (repeatable), e.g. `ch1-intensity:fused/`.
    #[arg(long, value_name = "FILTER")]
    pub nvtx_include: Vec<String>,
    /// Not kernels inside this NVTX range (repeatable).
    #[arg(long, value_name = "FILTER")]
    pub nvtx_exclude: Vec<String>,
    /// `all` flushes caches before each replay (ncu's default), `none` keeps them warm.
    #[arg(long, value_name = "all|none")]
    pub cache_control: Option<String>,
    #[command(flatten)]
    pub target: TargetArgs,
}

#[derive(Args, Debug)]
pub struct HeadlineArgs {
    /// ncu to use (else PATH, then $NCU, then the usual install folders).
    #[arg(long, value_name = "PATH")]
    pub ncu: Option<PathBuf>,
    /// An .ncu-rep file.
    pub report: PathBuf,
}

/// The tool's path, or in a dry run its bare name with a note when it is not installed.
fn locate(tool: &Tool, explicit: Option<PathBuf>, dry_run: bool) -> Result<PathBuf> {
    match discover::find(tool, &Places::from_env(tool, explicit)) {
        Ok(p) => Ok(p),
        Err(e @ Error::ToolNotFound { .. }) if dry_run => {
            eprintln!("note: {e}");
            Ok(PathBuf::from(tool.exe))
        }
        Err(e) => Err(e),
    }
}

struct Prepared {
    program: PathBuf,
    args: Vec<String>,
    base: PathBuf,
}

fn prepare(t: &TargetArgs) -> Result<Prepared> {
    let (first, rest) = t
        .command
        .split_first()
        .ok_or_else(|| Error::BadArgument("no program to profile after --".into()))?;
    let program = resolve_program(first, std::env::var_os("PATH").as_deref())?;
    let names = naming(&program, t.lesson.as_deref(), t.variant.as_deref());
    let base = report_base(&t.out_dir, &names, SystemTime::now());
    Ok(Prepared {
        program,
        args: rest.to_vec(),
        base,
    })
}

fn create_out_dir(t: &TargetArgs) -> Result<()> {
    std::fs::create_dir_all(&t.out_dir).map_err(|e| {
        Error::Io(format!(
            "cannot create the report folder {}: {e}",
            t.out_dir.display()
        ))
    })
}

fn announce(c: &ToolCommand) {
    println!("$ {}", c.display());
}

fn exit_for(status: std::process::ExitStatus) -> ExitCode {
    if status.success() {
        Exit::Done.into()
    } else {
        Exit::Problem.into()
    }
}

pub fn run_nsys(a: &NsysArgs) -> Result<ExitCode> {
    let p = prepare(&a.target)?;
    let nsys_path = locate(&discover::NSYS, a.nsys.clone(), a.target.dry_run)?;
    let asked = match (a.timed_regions, a.whole_process) {
        (true, _) => Some(Capture::TimedRegions),
        (_, true) => Some(Capture::WholeProcess),
        _ => None,
    };
    let (capture, why) = nsys::choose_capture(&p.program, asked);
    let opts = NsysOptions {
        trace: a.trace.clone(),
        capture,
        stats: a.stats,
    };
    let c = nsys::command(&nsys_path, &opts, &p.base, &p.program, &p.args);
    announce(&c);
    println!("{why}");
    if a.target.dry_run {
        return Ok(ExitCode::SUCCESS);
    }
    create_out_dir(&a.target)?;
    let status = c.run()?;
    let reports = target::reports_with(&p.base, ".nsys-rep");
    for r in &reports {
        println!("report: {}", r.display());
    }
    if reports.is_empty() {
        println!(
            "no report written ({}): {}",
            describe(status),
            nsys::why_no_report(&nsys_path, &p.base, "see nsys's messages above")
        );
        return Ok(Exit::Problem.into());
    }
    if !status.success() {
        println!("nsys {}", describe(status));
    }
    Ok(exit_for(status))
}

fn describe(status: std::process::ExitStatus) -> String {
    match status.code() {
        Some(c) => format!("exit status {c}"),
        None => "killed by a signal".into(),
    }
}

pub fn run_ncu(a: &NcuArgs) -> Result<ExitCode> {
    let opts = NcuOptions {
        kernel: a.kernel.clone(),
        launch_skip: a.launch_skip,
        launch_count: a.launch_count,
        full: a.full,
        sections: a.sections.clone(),
        metrics: a.metrics.clone(),
        nvtx_include: a.nvtx_include.clone(),
        nvtx_exclude: a.nvtx_exclude.clone(),
        cache_control: a.cache_control.clone(),
    };
    opts.validate()?;
    let p = prepare(&a.target)?;
    let ncu_path = locate(&discover::NCU, a.ncu.clone(), a.target.dry_run)?;
    let c = ncu::command(&ncu_path, &opts, &p.base, &p.program, &p.args);
    announce(&c);
    if a.target.dry_run {
        return Ok(ExitCode::SUCCESS);
    }
    create_out_dir(&a.target)?;
    let status = c.run()?;
    let report = p.base.with_file_name(format!(
        "{}.ncu-rep",
        p.base.file_name().unwrap_or_default().to_string_lossy()
    ));
    if !report.is_file() {
        println!(
            "no report written ({}): ncu profiled no kernel; check --kernel and the NVTX filters against ncu's messages above",
            describe(status)
        );
        return Ok(Exit::Problem.into());
    }
    println!("report: {}", report.display());
    print_headline(&ncu_path, &report)?;
    Ok(exit_for(status))
}

/// Read a report back and print (and save beside it) its headline.
fn print_headline(ncu_path: &Path, report: &Path) -> Result<()> {
    let import = ncu::import_command(ncu_path, report);
    announce(&import);
    let (status, csv) = import.output()?;
    if !status.success() {
        return Err(Error::Io(format!(
            "ncu could not read {} back ({})",
            report.display(),
            describe(status)
        )));
    }
    let rows = ncu::parse_details_csv(&csv)?;
    let table = format!(
        "ncu headline of {} (clocks not locked):\n\n{}",
        report.display(),
        ncu::headline_table(&rows)
    );
    print!("\n{table}");
    let saved = report.with_extension("headline.md");
    common::files::write_atomically(&saved, table.as_bytes())
        .map_err(|e| Error::Io(format!("cannot write {}: {e}", saved.display())))?;
    println!("headline: {}", saved.display());
    Ok(())
}

pub fn run_headline(a: &HeadlineArgs) -> Result<ExitCode> {
    if !a.report.is_file() {
        return Err(Error::BadArgument(format!(
            "{}: no such report",
            a.report.display()
        )));
    }
    let ncu_path = locate(&discover::NCU, a.ncu.clone(), false)?;
    print_headline(&ncu_path, &a.report)?;
    Ok(ExitCode::SUCCESS)
}

/// Run the parsed command line; an error is one line on stderr, its exit code by
/// [Error::exit].
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.tool {
        ToolArgs::Nsys(a) => run_nsys(a),
        ToolArgs::Ncu(a) => run_ncu(a),
        ToolArgs::Headline(a) => run_headline(a),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            e.exit().into()
        }
    }
}
