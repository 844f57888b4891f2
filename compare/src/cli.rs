//! `cargo run --release -p compare`: every pair of every lesson in child processes (each
//! lesson's own binary, one process per lesson and set of flags), one table, and a verdict
//! against the expected figures of this GPU (and, for host-paced variants, of this machine).
//! `--html FILE` writes the chapter's report page from results folders instead, with no GPU.

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;

use common::ceilings;
use common::cli::CommonArgs;
use common::gpu::DeviceList;
use common::report::Provenance;

use crate::child::{self, Outcome};
use crate::expectations::{self, Expectations};
use crate::fleet;
use crate::host::{Host, Pacing};
use crate::lessons::{self, Child};
use crate::outcome::{CompareReport, PairRow, RunStatus, VariantRun, COMPARE_SCHEMA_VERSION};
use crate::page;
use crate::phases::{CeilingsTime, ChildTime};
use crate::rule::Rule;

/// The stopping rule of the compare's variants unless flags say otherwise (`--quick` takes the
/// quick rule instead): at least [MIN_SAMPLES] samples and [MIN_TIME_S] of them
/// ([HOST_LINK_MIN_TIME_S] for a variant whose timed work crosses the host link), then stop
/// once the noise is at or under the harness's 1% or the median is known within
/// [MAX_MEDIAN_ERROR]; never past [MAX_TIME_S]. Why these: docs/compare.md, "Where the time
/// goes".
pub const MAX_TIME_S: f64 = 2.0;
/// A tenth of a second of samples: a variant on the device's own memory is quiet long before
/// (hundreds of samples, under 1% noise), and the gate's bar does not move with more.
pub const MIN_TIME_S: f64 = 0.1;
/// Half a second of samples over the host link: on some hosts such a variant leaves its floor for
/// stretches of a few tenths of a second, which ten short samples cannot outvote.
pub const HOST_LINK_MIN_TIME_S: f64 = 0.5;
pub const MIN_SAMPLES: usize = 10;
/// The median's relative standard error that is enough (a fraction).
pub const MAX_MEDIAN_ERROR: f64 = 0.04;

#[derive(Parser, Debug, Clone)]
#[command(
    version = common::cli::VERSION,
    about = "Run every lesson's baseline/optimized pairs and compare them with the expected figures"
)]
pub struct Args {
    /// List the pairs and exit.
    #[arg(long)]
    pub list: bool,
    /// Only pairs whose "lesson/pair" contains this text (repeat the flag: pairs that match
    /// any of them).
    #[arg(long, value_name = "PATTERN")]
    pub filter: Vec<String>,
    /// Expectations file (default: results/<gpu>/expectations.json).
    #[arg(long, value_name = "FILE")]
    pub expectations: Option<PathBuf>,
    /// Judge this run, then record it as expected: a device-paced variant's timing replaces
    /// the GPU model's; a host-paced one's joins the runs of this machine (it is judged once
    /// three are recorded). A SLOWER verdict is then accepted, not a failure.
    #[arg(long)]
    pub update_expectations: bool,
    /// Write the chapter's report page (one self-contained HTML file) from results folders,
    /// and run nothing.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// A results folder for the page (repeat for GPUs side by side; default: every folder
    /// under results/).
    #[arg(long, value_name = "DIR", requires = "html")]
    pub results: Vec<PathBuf>,
    /// Print the results folder name of the GPU at --device ("h100") and exit.
    #[arg(long)]
    pub gpu_slug: bool,
    /// Run the chapter on these GPUs (`all`, or a list such as `0,1`), one compare process
    /// per GPU, all at once, then the pairs whose copies cross the host link one GPU at a
    /// time: each GPU's table, then the fleet check across GPUs of one model.
    #[arg(long, value_name = "all|LIST", value_parser = str::parse::<DeviceList>, conflicts_with_all = ["update_expectations", "html", "list", "gpu_slug"])]
    pub devices: Option<DeviceList>,
    /// With --devices: flag a GPU whose device-paced median is more than this many percent off
    /// the median of its model's GPUs (default: --threshold, the smallest change that counts).
    #[arg(long, value_name = "PERCENT", value_parser = common::cli::parse_percent, requires = "devices")]
    pub fleet_bar: Option<f64>,
    /// Test only: with --devices and --plant-slowdown, plant the slowdown on this GPU alone.
    #[arg(long, hide = true, value_name = "GPU", requires_all = ["devices", "plant_slowdown"])]
    pub plant_on: Option<usize>,
    /// Run each variant in a process of its own (the default runs the variants of one lesson
    /// at one set of flags in one process, and a process that fails without a report is run
    /// again one variant at a time).
    #[arg(long)]
    pub isolate: bool,
    /// Print where the time went: per child process (start and exit, GPU context, kernels,
    /// inputs and references, ceilings, checks, warmup, samples) and per variant.
    #[arg(long)]
    pub phases: bool,
    /// Seconds before a variant's process is killed (a process of several variants gets this
    /// for each).
    #[arg(long, default_value_t = 120.0, value_name = "SECONDS", value_parser = common::cli::parse_seconds)]
    pub timeout: f64,
    /// Smallest change that counts, in percent.
    #[arg(long, default_value = "5", value_name = "PERCENT", value_parser = common::cli::parse_percent)]
    pub threshold: f64,
    /// Test only: run the lesson binaries in this folder (fakes that need no GPU, so none is
    /// looked for) instead of those beside this binary.
    #[arg(long, hide = true, value_name = "DIR")]
    pub lessons_dir: Option<PathBuf>,
    /// The flags every lesson takes, passed on to each variant's process (`--json` writes the
    /// whole compare; `--trace FILE` gives each variant its own FILE-<lesson>-<variant>.json;
    /// the hidden `--plant-slowdown` takes "lesson/variant").
    #[command(flatten)]
    pub common: CommonArgs,
}

/// The flags a child process of `lesson`'s `variants` gets: the GPU, the measuring flags
/// given to the compare with the compare's own rule where none is given ([MAX_TIME_S] and the
/// rest; `--quick` keeps the quick rule), and `--measure-only` (the compare reads no lesson's
/// own figures).
pub fn child_flags(common: &CommonArgs, lesson: &str, variants: &[&str]) -> Vec<String> {
    let mut flags = vec!["--device".to_string(), common.device.to_string()];
    let mut push = |flag: &str, value: Option<String>| {
        if let Some(v) = value {
            flags.push(flag.to_string());
            flags.push(v);
        }
    };
    let ours = |given: Option<f64>, default: f64| match (given, common.quick) {
        (Some(v), _) => Some(v),
        (None, false) => Some(default),
        (None, true) => None,
    };
    push(
        "--min-time",
        ours(common.min_time, MIN_TIME_S).map(|v| v.to_string()),
    );
    push(
        "--min-time-host-link",
        ours(common.min_time_host_link, HOST_LINK_MIN_TIME_S).map(|v| v.to_string()),
    );
    push(
        "--max-time",
        ours(common.max_time, MAX_TIME_S).map(|v| v.to_string()),
    );
    push(
        "--max-noise",
        common.max_noise.map(|v| format!("{}", v * 100.0)),
    );
    push(
        "--min-samples",
        ours(common.min_samples.map(|n| n as f64), MIN_SAMPLES as f64).map(|v| v.to_string()),
    );
    push(
        "--max-median-error",
        ours(common.max_median_error, MAX_MEDIAN_ERROR).map(|v| format!("{}", v * 100.0)),
    );
    push(
        "--trace",
        common.trace.as_ref().map(|t| {
            let stem = t.with_extension("");
            format!("{}-{lesson}-{}.json", stem.display(), variants.join("+"))
        }),
    );
    let planted = variants
        .iter()
        .find(|v| common.plant_slowdown.as_deref() == Some(&format!("{lesson}/{v}")));
    push("--plant-slowdown", planted.map(|v| v.to_string()));
    for (on, flag) in [
        (common.quick, "--quick"),
        (common.cold, "--cold"),
        (common.refresh_ceilings, "--refresh-ceilings"),
        (true, "--measure-only"),
    ] {
        if on {
            flags.push(flag.to_string());
        }
    }
    flags
}

/// The command line of `child`'s lesson binary: the variants it runs (`--variants`), the
/// measuring flags ([child_flags]) and the pair's own flags.
pub fn child_argv(common: &CommonArgs, child: &Child) -> Vec<String> {
    let mut argv = vec!["--variants".to_string(), child.variants.join(",")];
    argv.extend(child_flags(common, child.lesson, &child.variants));
    argv.extend(child.args.iter().map(|a| a.to_string()));
    argv
}

pub fn main() -> ExitCode {
    common::cli::main_with(|_| run(&Args::parse()))
}

pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    if let Some(file) = &args.html {
        let folders = if args.results.is_empty() {
            page::default_folders(&PathBuf::from("results"))?
        } else {
            args.results.clone()
        };
        let written = page::write(file, &folders)?;
        println!("{written}");
        return Ok(ExitCode::SUCCESS);
    }
    if args.gpu_slug {
        common::gpu::probe_driver()?;
        let gpu = common::gpu::Gpu::open(args.common.device)?;
        println!("{}", gpu.info.model_slug());
        return Ok(ExitCode::SUCCESS);
    }
    let pairs = lessons::select(&args.filter);
    if args.list {
        for p in lessons::PAIRS {
            println!("{}  ({} -> {})", p.id(), p.baseline, p.optimized);
            if !p.args.is_empty() {
                println!("    at {}: {}", p.args.join(" "), p.size_note);
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    if pairs.is_empty() {
        return Err(common::exit::usage(format!(
            "no pair matches '{}': `--list` shows them",
            args.filter.join("' or '")
        )));
    }
    if !args.common.variants.is_empty() {
        return Err(common::exit::usage(
            "--variants picks a lesson binary's variants: compare picks pairs with --filter",
        ));
    }
    // One clear line and exit 2 without a GPU, before starting any child (tests that run fake
    // children instead need no GPU, and name their GPUs).
    let count = match &args.lessons_dir {
        None => common::gpu::probe_driver()?,
        Some(_) => usize::MAX,
    };
    let variants = lessons::variants_of(&pairs);
    let mut needed: Vec<&str> = variants.iter().map(|v| v.lesson).collect();
    needed.sort_unstable();
    needed.dedup();
    let dir = match &args.lessons_dir {
        Some(dir) => dir.clone(),
        None => lessons::binaries_dir()?,
    };
    let programs: HashMap<&str, PathBuf> = needed
        .iter()
        .copied()
        .zip(lessons::binaries(&dir, &needed)?)
        .collect();
    let scratch = child::scratch_dir()?;
    if let Some(devices) = &args.devices {
        if *devices == DeviceList::All && args.lessons_dir.is_some() {
            return Err(common::exit::usage(
                "--devices: name the GPUs (0,1,...) when the lessons are not the built ones",
            ));
        }
        if let Some(requested) = devices.missing(count) {
            return Err(common::Error::BadDevice { requested, count }.into());
        }
        let ordinals = devices.resolve(count).map_err(anyhow::Error::msg)?;
        if let Some(g) = args.plant_on.filter(|g| !ordinals.contains(g)) {
            return Err(common::exit::usage(format!(
                "--plant-on {g}: GPU {g} is not one of --devices"
            )));
        }
        let argv: Vec<String> = std::env::args().skip(1).collect();
        let code = fleet::run(
            &fleet::Plan {
                program: std::env::current_exe()?,
                argv,
                ordinals,
                bar: args.fleet_bar.unwrap_or(args.threshold),
                plant_on: args.plant_on,
                phases: args.phases,
            },
            args.common.json.as_deref(),
            &scratch,
        );
        let _ = std::fs::remove_dir_all(&scratch);
        return code;
    }
    // A trace file is named for one variant, so each runs in a process of its own.
    let isolate = args.isolate || args.common.trace.is_some();
    let started = Instant::now();
    let progress = std::io::stderr().is_terminal();
    let mut runs: Vec<VariantRun> = Vec::new();
    let mut children: Vec<ChildTime> = Vec::new();
    let mut device = None;
    let mut queue: std::collections::VecDeque<Child> =
        lessons::children_of(&variants, isolate).into();
    // On a machine that never ran the chapter, the children's first loads of the CUDA libraries
    // wait for the disk; the kernel reads them meanwhile, at idle priority.
    let libraries = lessons::libraries_in_order(queue.iter().map(|c| c.lesson));
    let read_ahead = common::libraries::read_ahead(move || {
        common::libraries::SearchPath::of_this_process().files(&libraries)
    });
    let mut done = 0;
    while let Some(child) = queue.pop_front() {
        if progress {
            eprint!(
                "\r[{}/{}] {}/{} ({:.0} s)   ",
                done + 1,
                variants.len(),
                child.lesson,
                child.variants.join(","),
                started.elapsed().as_secs_f64()
            );
            let _ = std::io::stderr().flush();
        }
        let (lesson, names) = (child.lesson, &child.variants);
        let t0 = Instant::now();
        let outcome = child::run(
            &programs[lesson],
            &child_argv(&args.common, &child),
            Duration::from_secs_f64(args.timeout * names.len() as f64),
            &scratch,
            &format!("{}-{lesson}", children.len()),
        );
        let wall = t0.elapsed().as_secs_f64();
        let report = match outcome {
            Outcome::Report(r) => Some(r),
            Outcome::NoGpu(line) => {
                return Err(common::exit::no_gpu(
                    line.strip_prefix("error: ").unwrap_or(&line),
                ))
            }
            // Which of several variants went wrong is found by running each on its own.
            Outcome::Failed(why) if names.len() > 1 => {
                eprintln!(
                    "note: {lesson} ({}) in one process: {why}; each runs in a process of its own",
                    names.join(", ")
                );
                children.push(ChildTime::new(lesson, child.args, names, wall, None));
                for run in child.runs().into_iter().rev() {
                    queue.push_front(Child {
                        lesson: run.lesson,
                        args: run.args,
                        variants: vec![run.variant],
                    });
                }
                continue;
            }
            Outcome::Failed(why) => {
                let run = VariantRun::from_report(lesson, names[0], None, Some(why), wall);
                runs.push(run.with_args(child.args));
                children.push(ChildTime::new(lesson, child.args, names, wall, None));
                done += 1;
                continue;
            }
        };
        let report = report.expect("a report: the other outcomes went on above");
        device.get_or_insert_with(|| report.device.clone());
        for &variant in names {
            let run = VariantRun::from_report(lesson, variant, report.variant(variant), None, wall);
            runs.push(run.with_args(child.args));
        }
        children.push(ChildTime::new(
            lesson,
            child.args,
            names,
            wall,
            Some(&report),
        ));
        done += names.len();
    }
    if progress {
        eprintln!("\r{:60}", "");
    }
    let _ = std::fs::remove_dir_all(&scratch);
    // The pairs' order, whatever order the processes ran them in.
    runs.sort_by_key(|r| {
        variants
            .iter()
            .position(|k| k.lesson == r.lesson && k.variant == r.variant && r.args == k.args)
    });

    let slug = device
        .as_ref()
        .map(|d: &common::gpu::DeviceInfo| d.model_slug())
        .unwrap_or_else(|| "unknown-gpu".into());
    let exp_path = args
        .expectations
        .clone()
        .unwrap_or_else(|| expectations::path_for(&PathBuf::from("results"), &slug));
    let rule = Rule {
        threshold: args.threshold,
        ..Rule::default()
    };
    let expected = Expectations::read(&exp_path).map_err(|err| {
        eprintln!("note: {err}");
        format!(
            "no expectations for this GPU model ({})",
            exp_path.display()
        )
    });
    if let (Ok(e), Some(d)) = (&expected, &device) {
        if e.gpu != d.name {
            eprintln!(
                "note: {} holds figures for {}, not this {}: comparing anyway",
                exp_path.display(),
                e.gpu,
                d.name
            );
        }
    }
    let host = device.as_ref().map(|d| Host::this(&d.uuid));
    if let Some(h) = &host {
        for r in &mut runs {
            r.judge(expected.as_ref().map_err(String::as_str), h, &rule);
        }
    }
    let ceilings_start = Instant::now();
    let (cached, ceilings_what) = match device.as_ref() {
        Some(d) => ceilings_for(&pairs, d, &args.common),
        None => (None, "none: no variant ran"),
    };
    let ceilings_time = CeilingsTime {
        seconds: ceilings_start.elapsed().as_secs_f64(),
        what: ceilings_what.to_string(),
    };
    let pair_rows = pairs
        .iter()
        .map(|p| PairRow::build(p, &runs, cached.as_ref(), rule.threshold))
        .collect();
    let report = CompareReport {
        schema_version: COMPARE_SCHEMA_VERSION,
        device: device.clone(),
        host,
        provenance: Provenance::now(),
        rule,
        expectations: expected
            .as_ref()
            .ok()
            .map(|_| common::files::recorded_path(&exp_path)),
        variants: runs,
        pairs: pair_rows,
        wall_s: started.elapsed().as_secs_f64(),
        children,
        ceilings_time: Some(ceilings_time),
        read_ahead: read_ahead.join().ok(),
    };
    print!("{}", report.markdown());
    if args.phases {
        print!("\n{}", report.phases_markdown());
    }
    if let Some(path) = &args.common.json {
        common::files::write_json_file(path, &report, "the comparison")?;
        println!("wrote {}", path.display());
    }
    let mut problems = report.failures();
    if args.update_expectations {
        update_expectations(&report, expected.ok(), &exp_path)?;
        for slower in report.regressions() {
            println!("accepted: {slower}");
        }
    } else {
        problems.extend(report.regressions());
    }
    Ok(common::cli::exit_for_problems(&problems))
}

/// The ceilings the pairs are placed against, and what getting them took: the cached ones,
/// with an SGEMM figure measured here when a GEMM pair runs and none was ever measured on this
/// machine (a note, and no "of ceiling" for those pairs, when it cannot be). Only SGEMM, at one
/// size ([ceilings::with_sgemm]): the GEMM pairs run in fp32, and no verdict reads the share.
fn ceilings_for(
    pairs: &[lessons::Pair],
    device: &common::gpu::DeviceInfo,
    common: &CommonArgs,
) -> (Option<ceilings::DeviceCeilings>, &'static str) {
    let cached = ceilings::load_cached(device);
    let needs_sgemm = pairs
        .iter()
        .any(|p| p.ceiling == lessons::CeilingKind::Sgemm);
    let have_sgemm = cached.as_ref().is_some_and(|c| c.sgemm().is_some());
    if !needs_sgemm || (have_sgemm && !common.refresh_ceilings) {
        return (cached, "cached");
    }
    let measured = common::gpu::Gpu::open(common.device).and_then(|gpu| {
        let mut timer = common::bench::Timer::new(&gpu)?;
        ceilings::with_sgemm(&gpu, &mut timer, common.refresh_ceilings)
    });
    match measured {
        Ok(c) => (Some(c), "measured SGEMM fp32 at one size"),
        Err(e) => {
            eprintln!("note: no GEMM ceilings to place the GEMM pairs against: {e}");
            (cached, "SGEMM could not be measured")
        }
    }
}

/// Record every verified variant's timing as expected (see [Expectations::record]), keeping
/// the others.
fn update_expectations(
    report: &CompareReport,
    existing: Option<Expectations>,
    path: &std::path::Path,
) -> anyhow::Result<()> {
    let (Some(device), Some(host)) = (&report.device, &report.host) else {
        anyhow::bail!("no variant ran: nothing to record");
    };
    let mut e = existing.unwrap_or_else(|| Expectations::new(&device.name, &device.driver_version));
    e.gpu = device.name.clone();
    e.driver_version = device.driver_version.clone();
    e.git_commit = report.provenance.git_commit.clone();
    e.updated = report.provenance.time.clone();
    for v in &report.variants {
        if let (RunStatus::Ok, Some(t)) = (&v.status, v.timing) {
            let pacing = v.paced_by.unwrap_or(Pacing::Device);
            e.record(&v.id(), pacing, t, host, &report.provenance.time);
        }
    }
    e.write(path)?;
    println!("updated {}", path.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> CommonArgs {
        let argv = std::iter::once("compare").chain(extra.iter().copied());
        Args::try_parse_from(argv).unwrap().common
    }

    #[test]
    fn children_get_the_measuring_flags_and_the_compares_own_rule() {
        assert_eq!(
            child_flags(&args(&[]), "ch1-gemm", &["strided"]),
            [
                "--device",
                "0",
                "--min-time",
                "0.1",
                "--min-time-host-link",
                "0.5",
                "--max-time",
                "2",
                "--min-samples",
                "10",
                "--max-median-error",
                "4",
                "--measure-only"
            ]
        );
        assert_eq!(
            child_flags(
                &args(&["--quick", "--device", "1"]),
                "ch1-gemm",
                &["strided"]
            ),
            ["--device", "1", "--quick", "--measure-only"]
        );
        let f = child_flags(
            &args(&[
                "--cold",
                "--max-noise",
                "0.5",
                "--min-samples",
                "30",
                "--max-time",
                "9",
                "--min-time",
                "1",
                "--max-median-error",
                "1",
            ]),
            "ch1-intensity",
            &["fused"],
        );
        assert_eq!(
            f,
            [
                "--device",
                "0",
                "--min-time",
                "1",
                "--min-time-host-link",
                "0.5",
                "--max-time",
                "9",
                "--max-noise",
                "0.5",
                "--min-samples",
                "30",
                "--max-median-error",
                "1",
                "--cold",
                "--measure-only"
            ]
        );
    }

    #[test]
    fn traces_and_planted_slowdowns_go_to_their_variant() {
        let a = args(&[
            "--trace",
            "out/t.json",
            "--plant-slowdown",
            "ch1-intensity/fused",
        ]);
        let fused = child_flags(&a, "ch1-intensity", &["fused"]);
        assert!(fused
            .windows(2)
            .any(|w| w == ["--trace", "out/t-ch1-intensity-fused.json"]));
        assert!(fused.windows(2).any(|w| w == ["--plant-slowdown", "fused"]));
        let baseline = child_flags(&a, "ch1-intensity", &["baseline"]);
        assert!(!baseline.contains(&"--plant-slowdown".to_string()));
        // In a process of several variants, the planted one is named.
        let both = child_flags(&a, "ch1-intensity", &["baseline", "fused"]);
        assert!(both.windows(2).any(|w| w == ["--plant-slowdown", "fused"]));
    }
}
