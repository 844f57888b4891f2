//! `cargo run --release -p ch1-roofline`: measure the ceilings, place the operations, draw.
//! `--from-json FILE` re-draws a saved run with no GPU.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use anyhow::Context;
use clap::Parser;

use common::bench::{BenchConfig, Timer};
use common::ceilings;
use common::cli::CommonArgs;
use common::gpu::{DeviceInfo, Gpu};
use common::report::{LessonReport, Provenance, Status};
use common::stats::Summary;

use crate::report::{Point, RooflineReport, Roofs, ROOFLINE_SCHEMA_VERSION};
use crate::{ops, plot, roofs_from};

#[derive(Parser, Debug, Clone)]
#[command(about = "The roofline: measured ceilings, operations placed against them, and the plot")]
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

pub fn main() -> ExitCode {
    common::cli::main_with(|| run(&Args::parse()))
}

pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    if let Some(path) = &args.from_json {
        let report = RooflineReport::read_json(path)?;
        return finish(&report, args);
    }
    let gpu = Gpu::open(args.common.device)?;
    let mut timer = Timer::new(&gpu)?;
    let ceilings = ceilings::measure_all(&gpu, &mut timer, args.common.refresh_ceilings)?;
    let roofs = roofs_from(&ceilings).context("no memory ceiling was measured")?;
    let cfg = BenchConfig {
        cold: true,
        ..args.common.bench_config()
    };
    let mut notes = Vec::new();
    // --trace covers the operations' timed regions (not the ceilings').
    let trace = common::trace::Session::start_if(&args.common)?;
    let mut points = ops::measure_points(&gpu, &mut timer, &cfg, &roofs, &mut notes)?;
    if let Some(t) = trace {
        t.finish()?;
    }
    match intensity_report(args, &gpu.info) {
        Ok((report, source)) => points.extend(intensity_points(&report, &roofs, &source)),
        Err(why) => notes.push(format!("ch1-intensity variants left out: {why}")),
    }
    let report = RooflineReport {
        schema_version: ROOFLINE_SCHEMA_VERSION,
        device: gpu.info.clone(),
        provenance: Provenance::now(),
        ceilings,
        roofs,
        points,
        notes,
    };
    if let Some(path) = &args.common.json {
        report.write_json(path)?;
        println!("wrote {}", path.display());
    }
    finish(&report, args)
}

/// Print the tables, draw the plot, and fail on points above their roof or unverified.
fn finish(report: &RooflineReport, args: &Args) -> anyhow::Result<ExitCode> {
    print!("{}", report.markdown());
    let (svg, png) = plot::render(report, &args.out).map_err(anyhow::Error::msg)?;
    println!("plot: {} and {}", svg.display(), png.display());
    let problems = report.problems();
    for p in &problems {
        eprintln!("error: {p}");
    }
    Ok(if problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The ch1-intensity result for this GPU: the given file, the committed one, or a fresh run.
fn intensity_report(args: &Args, device: &DeviceInfo) -> Result<(LessonReport, String), String> {
    let committed = PathBuf::from("results")
        .join(device.model_slug())
        .join("ch1-intensity.json");
    let path = match &args.intensity_json {
        Some(p) => p.clone(),
        None if committed.exists() => committed,
        None => return run_intensity(args.common.device),
    };
    read_intensity(&path, device)
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
    Ok((report, path.display().to_string()))
}

fn run_intensity(device: usize) -> Result<(LessonReport, String), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let bin = exe.with_file_name("ch1-intensity");
    if !bin.exists() {
        return Err(format!("no results file and no {} to run", bin.display()));
    }
    let out = std::env::temp_dir().join(format!(
        "ch1-intensity-for-roofline-{}.json",
        std::process::id()
    ));
    let status = Command::new(&bin)
        .args(["--n", "64M", "--device", &device.to_string(), "--json"])
        .arg(&out)
        .stdout(Stdio::null())
        .status()
        .map_err(|e| format!("running {}: {e}", bin.display()))?;
    if !status.success() {
        return Err(format!("{} exited with {status}", bin.display()));
    }
    let report = LessonReport::read_json(&out).map_err(|e| e.to_string())?;
    let _ = std::fs::remove_file(&out);
    Ok((report, "measured now by ch1-intensity --n 64M (hot)".into()))
}

/// Each verified, timed ch1-intensity variant as a point against the FP32 roof.
pub fn intensity_points(report: &LessonReport, roofs: &Roofs, source: &str) -> Vec<Point> {
    let Some(fp32) = roofs.compute_roof("fp32") else {
        return Vec::new();
    };
    report
        .variants
        .iter()
        .filter(|v| v.status == Status::Ok)
        .filter_map(|v| {
            let m = v.measurement.as_ref()?;
            let t = Summary::of(&m.samples_s)?;
            Some(Point::place(
                "ch1-intensity variants (hot)",
                &format!("intensity {}", v.name),
                v.precision,
                fp32,
                roofs.memory_gbps,
                v.work,
                t,
                Some(v.verification.clone()),
                source,
            ))
        })
        .collect()
}
