//! `cargo run --release -p ch1-roofline`: measure the ceilings, run the operations through the
//! runner, place them, draw. `--from-json FILE` re-draws a saved run with no GPU.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use clap::Parser;

use common::bench::Timer;
use common::ceilings;
use common::cli::CommonArgs;
use common::gpu::{DeviceInfo, Gpu};
use common::report::{LessonReport, Startup, Status};
use common::runner::run_lesson;

use crate::lesson::Roofline;
use crate::plot;
use crate::report::{Point, RooflineReport, Roofs};

#[derive(Parser, Debug, Clone)]
#[command(
    version = common::cli::VERSION,
    about = "The roofline: measured ceilings, operations placed against them, and the plot"
)]
pub struct Args {
    /// Folder for roofline.svg and roofline.png.
    #[arg(long, default_value = "roofline-out", value_name = "DIR")]
    pub out: PathBuf,
    /// Re-draw a saved roofline JSON (no GPU needed).
    #[arg(long, value_name = "FILE")]
    pub from_json: Option<PathBuf>,
    /// ch1-intensity results to place (default: results/<gpu>/ch1-intensity.json, else run
    /// the ch1-intensity binary beside this one).
    #[arg(long, value_name = "FILE")]
    pub intensity_json: Option<PathBuf>,
    #[command(flatten)]
    pub common: CommonArgs,
}

/// Elements the ch1-intensity run measures when no result file is there.
pub const INTENSITY_ELEMENTS: &str = "64M";

pub fn main() -> ExitCode {
    common::cli::main_with(|startup| run(&Args::parse(), startup))
}

pub fn run(args: &Args, mut startup: Startup) -> anyhow::Result<ExitCode> {
    if let Some(path) = &args.from_json {
        let report = LessonReport::read_json(path)?;
        let view = RooflineReport::from_report(&report)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        return finish(&report, &view, args);
    }
    let gpu = Gpu::open(args.common.device)?;
    startup.mark("GPU opened (context, stream, NVML)");
    let ceilings = {
        let mut timer = Timer::new(&gpu)?;
        ceilings::measure_all(&gpu, &mut timer, args.common.refresh_ceilings)?
    };
    startup.mark("ceilings ready");
    let mut notes = Vec::new();
    let other_points = match crate::roofs_from(&ceilings) {
        Some(roofs) => intensity_report(args, &gpu.info, &mut notes)
            .map(|(report, source)| intensity_points(&report, &roofs, &source))
            .unwrap_or_default(),
        None => Vec::new(),
    };
    let mut lesson = Roofline::new(&gpu, ceilings, other_points, notes)?;
    startup.mark("kernels compiled");
    let report = run_lesson(&gpu, &mut lesson, &args.common.options(&startup))?;
    let view = RooflineReport::from_report(&report).map_err(anyhow::Error::msg)?;
    if let Some(path) = &args.common.json {
        report.write_json(path)?;
        println!("wrote {}", path.display());
    }
    finish(&report, &view, args)
}

/// Print the report, draw the plot, and fail on points above their roof or unverified.
fn finish(report: &LessonReport, view: &RooflineReport, args: &Args) -> anyhow::Result<ExitCode> {
    print!("{}", report.markdown());
    let (svg, png) = plot::render(view, &args.out).map_err(anyhow::Error::msg)?;
    println!("plot: {} and {}", svg.display(), png.display());
    let code = common::cli::exit_for_problems(&view.problems());
    Ok(if report.all_passed() {
        code
    } else {
        ExitCode::from(1)
    })
}

/// The ch1-intensity result for this GPU and where it came from: the given file, the committed
/// one, or a fresh run; None (with a note saying why) when there is none to place.
fn intensity_report(
    args: &Args,
    device: &DeviceInfo,
    notes: &mut Vec<String>,
) -> Option<(LessonReport, String)> {
    let committed = PathBuf::from("results")
        .join(device.model_slug())
        .join("ch1-intensity.json");
    let found = match &args.intensity_json {
        Some(p) => read_intensity(p, device),
        None if committed.exists() => read_intensity(&committed, device).or_else(|why| {
            notes.push(format!("{} not used: {why}", committed.display()));
            run_intensity(args.common.device)
        }),
        None => run_intensity(args.common.device),
    };
    found
        .map_err(|why| notes.push(format!("ch1-intensity variants left out: {why}")))
        .ok()
}

fn read_intensity(path: &Path, device: &DeviceInfo) -> Result<(LessonReport, String), String> {
    let report = LessonReport::read_json(path).map_err(|e| e.to_string())?;
    if report.device.name != device.name {
        return Err(format!(
            "{} was measured on {}, not on this {}",
            path.display(),
            report.device.name,
            device.name
        ));
    }
    Ok((report, common::files::recorded_path(path)))
}

fn run_intensity(device: usize) -> Result<(LessonReport, String), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let bin = exe.with_file_name("ch1-intensity");
    if !bin.exists() {
        return Err(format!("no results file and no {} to run", bin.display()));
    }
    // Removed with everything in it when this returns, whatever happened.
    let scratch = tempfile::tempdir().map_err(|e| format!("a scratch folder: {e}"))?;
    let out = scratch.path().join("ch1-intensity.json");
    let status = Command::new(&bin)
        .args(["--elements", INTENSITY_ELEMENTS])
        .args(["--device", &device.to_string(), "--json"])
        .arg(&out)
        .stdout(Stdio::null())
        .status()
        .map_err(|e| format!("running {}: {e}", bin.display()))?;
    if !status.success() {
        return Err(format!("{} exited with {status}", bin.display()));
    }
    let report = LessonReport::read_json(&out).map_err(|e| e.to_string())?;
    Ok((
        report,
        format!("measured now by ch1-intensity --elements {INTENSITY_ELEMENTS}"),
    ))
}

/// Each verified, timed ch1-intensity variant as a point against the roof of its precision,
/// in a family that says whether it was timed hot or cold.
pub fn intensity_points(report: &LessonReport, roofs: &Roofs, source: &str) -> Vec<Point> {
    report
        .variants
        .iter()
        .filter(|v| v.status == Status::Ok)
        .filter_map(|v| {
            let cold = v.measurement.as_ref()?.cold;
            let family = format!(
                "ch1-intensity variants ({})",
                if cold { "cold" } else { "hot" }
            );
            Point::of_variant(v, &family, &format!("intensity {}", v.name), roofs, source)
        })
        .collect()
}
