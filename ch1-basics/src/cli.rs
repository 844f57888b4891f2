//! The lesson's command line: the shared flags, the sizes of each part, and which part to run.
//! The three parts run as one lesson (one report, one JSON shape); a part is built only when
//! some of its variants are selected, and only while it runs. `--sweep` runs the sweeps of the
//! training changes instead, each its own report and plot.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, ValueEnum};
use common::cli::{finish, parse_count_with_max, parse_elements, CommonArgs};
use common::counters::Work;
use common::gpu::Gpu;
use common::report::{LessonReport, Startup};
use common::runner::{run_lesson, run_parts, select, Lesson, LessonPart, VariantSpec};
use common::sweep::{plot, SweepLesson};
use common::verify::Precision;

use crate::pipeline::{PipelineConfig, PipelineLesson};
use crate::sweep::training::{TrainingSweep, Which, MICROBATCHES, STEPS_PER_GRAPH};
use crate::sweep::{allocations, copies, Kind};
use crate::training::{TrainConfig, TrainingLesson, Variant};
use crate::transpose::{Transpose, TransposeVariant, MAX_SIDE};

/// Largest hidden width accepted (a 256 x 65536 layer is 64 MiB of weights).
pub const MAX_HIDDEN: u64 = 1 << 16;
/// Largest sample count accepted (2^24 samples of 256 features is 16 GiB of host data).
pub const MAX_SAMPLES: u64 = 1 << 24;

/// The parts, in the order they run; each is a group of the one lesson.
pub const TRAINING: &str = "training";
pub const TRANSPOSE: &str = "transpose";
pub const PIPELINE: &str = "pipeline";

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Part {
    All,
    Training,
    Transpose,
    Pipeline,
}

#[derive(Parser, Debug, Clone)]
#[command(
    version = common::cli::VERSION,
    about = "Performance basics: the training-loop pairs, coalescing (transpose) and double buffering"
)]
pub struct Args {
    /// Which part of the lesson to run.
    #[arg(long, value_enum, default_value = "all")]
    pub part: Part,
    /// Hidden units of the MLP (256 -> hidden -> 10).
    #[arg(long, default_value = "256", value_parser = |s: &str| parse_count_with_max(s, MAX_HIDDEN))]
    pub hidden: u64,
    /// Samples trained on; a multiple of --batch.
    #[arg(long, default_value = "16384", value_parser = |s: &str| parse_count_with_max(s, MAX_SAMPLES))]
    pub samples: u64,
    /// Samples per optimizer step (the effective batch).
    #[arg(long, default_value = "256", value_parser = |s: &str| parse_count_with_max(s, 1 << 16))]
    pub batch: u64,
    /// Microbatch of the gradient-accumulating variants; divides --batch.
    #[arg(long, default_value = "32", value_parser = |s: &str| parse_count_with_max(s, 1 << 16))]
    pub microbatch: u64,
    /// SGD learning rate [default: 0.05 * min(1, 256 / hidden): wider layers need smaller steps,
    /// and 0.05 diverges at hidden 4096].
    #[arg(long)]
    pub lr: Option<f32>,
    /// Side of the square fp32 matrix the transpose pair works on.
    #[arg(long, default_value = "8192", value_parser = |s: &str| parse_count_with_max(s, MAX_SIDE))]
    pub side: u64,
    /// fp32 elements the double-buffering pair pushes through the GPU (256M = 1 GiB).
    #[arg(long, default_value = "256M", value_parser = parse_elements)]
    pub pipeline_elements: u64,
    /// Elements per chunk of the double-buffering pair.
    #[arg(long, default_value = "8M", value_parser = parse_elements)]
    pub chunk: u64,
    /// Device buffers in flight in the overlapped pipeline (2 = double, 3 = triple buffering).
    #[arg(long, default_value = "3", value_parser = |s: &str| parse_count_with_max(s, 8))]
    pub buffers: u64,
    /// FMAs per element in the pipeline's compute stage.
    #[arg(long, default_value = "1536", value_parser = |s: &str| parse_count_with_max(s, 1 << 20))]
    pub iterations: u64,
    /// Seed of the data, the initial weights and the inputs.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Instead of the pairs, sweep a training change over the size that decides it (pinned: copy
    /// size; prealloc: buffer size and count; batch: microbatch at an effective batch of 4096;
    /// graphs: steps per graph; all: each in turn), each point checked and timed by its own
    /// short stopping rule, and say where the change starts to pay.
    #[arg(long, value_enum, value_name = "WHICH", conflicts_with = "part")]
    pub sweep: Option<Kind>,
    /// Folder for each sweep's plot, ch1-basics-sweep-<which>.svg and .png.
    #[arg(
        long,
        value_name = "DIR",
        default_value = "sweep-out",
        requires = "sweep"
    )]
    pub sweep_out: PathBuf,
    #[command(flatten)]
    pub common: CommonArgs,
}

impl Args {
    pub fn train_config(&self) -> anyhow::Result<TrainConfig> {
        let hidden = self.hidden as usize;
        let cfg = TrainConfig {
            hidden,
            samples: self.samples as usize,
            step_batch: self.batch as usize,
            microbatch: self.microbatch as usize,
            lr: self.lr.unwrap_or(TrainConfig::default_lr(hidden)),
            seed: self.seed,
        };
        cfg.validate().map_err(anyhow::Error::msg)?;
        Ok(cfg)
    }

    pub fn pipeline_config(&self) -> anyhow::Result<PipelineConfig> {
        let cfg = PipelineConfig {
            elements: self.pipeline_elements as usize,
            chunk: self.chunk as usize,
            buffers: self.buffers as usize,
            iterations: self.iterations as u32,
            seed: self.seed,
        };
        cfg.validate().map_err(anyhow::Error::msg)?;
        Ok(cfg)
    }
}

/// Every variant's id by part, known without a GPU: what `--part` and the binaries select from.
pub fn variant_ids() -> Vec<(&'static str, Vec<&'static str>)> {
    vec![
        (TRAINING, Variant::ALL.iter().map(|v| v.name()).collect()),
        (
            TRANSPOSE,
            TransposeVariant::ALL.iter().map(|v| v.name()).collect(),
        ),
        (
            PIPELINE,
            crate::pipeline::VARIANTS.iter().map(|(n, _)| *n).collect(),
        ),
    ]
}

/// Which variants of each part run: those named in `only` (by id, or by a name only one
/// variant has; the runner's own rule, so unknown names fail here, before the GPU is opened),
/// or, when `only` is empty, every variant of the parts `--part` names.
pub fn selection(
    part: Part,
    only: &[&str],
) -> anyhow::Result<Vec<(&'static str, Vec<&'static str>)>> {
    let all = variant_ids();
    if only.is_empty() {
        let wanted = match part {
            Part::All => None,
            Part::Training => Some(TRAINING),
            Part::Transpose => Some(TRANSPOSE),
            Part::Pipeline => Some(PIPELINE),
        };
        return Ok(all
            .into_iter()
            .filter(|(group, _)| wanted.is_none_or(|w| w == *group))
            .collect());
    }
    let specs: Vec<VariantSpec> = all
        .iter()
        .flat_map(|(group, names)| {
            names.iter().map(|name| {
                VariantSpec::new(*name, "", Precision::Fp32, Work::default()).in_group(*group)
            })
        })
        .collect();
    let only: Vec<String> = only.iter().map(|s| s.to_string()).collect();
    let chosen = select(&specs, &only)?;
    Ok(all
        .into_iter()
        .map(|(group, names)| {
            let picked = names
                .into_iter()
                .filter(|name| {
                    chosen
                        .iter()
                        .any(|&i| specs[i].group == group && specs[i].name == *name)
                })
                .collect();
            (group, picked)
        })
        .filter(|(_, picked): &(_, Vec<&str>)| !picked.is_empty())
        .collect())
}

/// Build the selected parts, run them as one lesson and report; exit 1 if anything failed
/// verification. `only` names variants by id ("training:pinned"); empty: `--part` decides.
/// With `--sweep`, run the sweeps instead.
pub fn run(args: &Args, only: &[&str], mut startup: Startup) -> anyhow::Result<ExitCode> {
    if let Some(kind) = args.sweep {
        return run_sweeps(args, only, kind, startup);
    }
    let chosen = selection(args.part, only)?;
    let picked = |group: &str| chosen.iter().find(|(g, _)| *g == group).map(|(_, v)| v);
    // Sizes are checked before the GPU is opened: one clear line, no device needed.
    let training = picked(TRAINING).map(|_| args.train_config()).transpose()?;
    let pipeline = picked(PIPELINE)
        .map(|names| {
            let whole = names.len() == crate::pipeline::VARIANTS.len();
            args.pipeline_config().map(|cfg| (cfg, whole))
        })
        .transpose()?;

    let gpu = Gpu::open(args.common.device)?;
    startup.mark("GPU opened (context, stream, NVML)");
    // Each part is built when its turn comes and dropped after it ran (see `run_parts`).
    let mut parts: Vec<LessonPart> = Vec::new();
    if let Some(cfg) = training {
        parts.push(LessonPart::new(TRAINING, move |gpu| {
            Ok(Box::new(TrainingLesson::new(gpu, cfg)?) as Box<dyn Lesson>)
        }));
    }
    if picked(TRANSPOSE).is_some() {
        parts.push(LessonPart::new(TRANSPOSE, |gpu| {
            Ok(Box::new(Transpose::new(gpu, args.side, args.seed)?) as Box<dyn Lesson>)
        }));
    }
    if let Some((cfg, whole)) = pipeline {
        let refresh = args.common.refresh_ceilings;
        parts.push(LessonPart::new(PIPELINE, move |gpu| {
            let part = PipelineLesson::new(gpu, cfg, whole)?.refreshing_ceilings(refresh);
            Ok(Box::new(part) as Box<dyn Lesson>)
        }));
    }
    let mut options = args.common.options(&startup);
    options.only = chosen
        .iter()
        .flat_map(|(group, names)| names.iter().map(move |n| format!("{group}:{n}")))
        .collect();
    let report = run_parts(&gpu, "ch1-basics", parts, &options)?;
    Ok(finish(&report, args.common.json.as_deref())?)
}

/// Where a sweep's JSON goes: the file given, or for several sweeps one file each beside it,
/// named by the sweep ("out.json" -> "out-pinned.json").
pub fn sweep_json_path(path: &Path, kind: Kind, several: bool) -> PathBuf {
    if !several {
        return path.to_path_buf();
    }
    let stem = path.file_stem().unwrap_or_default().to_string_lossy();
    let name = match path.extension() {
        Some(ext) => format!("{stem}-{}.{}", kind.name(), ext.to_string_lossy()),
        None => format!("{stem}-{}", kind.name()),
    };
    path.with_file_name(name)
}

fn which_name(which: Which) -> &'static str {
    match which {
        Which::Batch => Kind::Batch.name(),
        Which::Graphs => Kind::Graphs.name(),
    }
}

/// The training a sweep of `which` runs and its sizes, checked without a GPU.
fn training_sweep_plan(args: &Args, which: Which) -> anyhow::Result<(TrainConfig, Vec<usize>)> {
    let xs: &[usize] = match which {
        Which::Batch => &MICROBATCHES,
        Which::Graphs => &STEPS_PER_GRAPH,
    };
    let base = args.train_config()?;
    let cfg = which.config(base, xs);
    let plan = which
        .plan(&cfg, xs)
        .map_err(|e| anyhow::anyhow!("--sweep {}: {e}", which_name(which)))?;
    Ok((base, plan))
}

/// Run one sweep on `gpu` into its report.
fn run_sweep(
    gpu: &Gpu,
    args: &Args,
    kind: Kind,
    startup: &Startup,
) -> anyhow::Result<LessonReport> {
    let options = args.common.options(startup);
    let report = match kind {
        Kind::Pinned => {
            let sweep =
                copies::CopySweep::new(gpu, &copies::SIZES, args.iterations as u32, args.seed)?;
            run_lesson(gpu, &mut SweepLesson(sweep), &options)?
        }
        Kind::Prealloc => {
            let (sizes, counts) = (&allocations::SIZES, &allocations::COUNTS);
            let sweep = allocations::AllocationSweep::new(gpu, sizes, counts, args.seed)?;
            run_lesson(gpu, &mut SweepLesson(sweep), &options)?
        }
        Kind::Batch | Kind::Graphs => {
            let which = if kind == Kind::Batch {
                Which::Batch
            } else {
                Which::Graphs
            };
            let (base, xs) = training_sweep_plan(args, which)?;
            let sweep = TrainingSweep::new(gpu, which, base, &xs)?;
            run_lesson(gpu, &mut SweepLesson(sweep), &options)?
        }
        Kind::All => anyhow::bail!("--sweep all runs each sweep in turn"),
    };
    Ok(report)
}

/// `--sweep`: each sweep in turn, its report printed, its JSON written, its plot drawn; exit 1
/// if any point failed its check.
fn run_sweeps(
    args: &Args,
    only: &[&str],
    kind: Kind,
    mut startup: Startup,
) -> anyhow::Result<ExitCode> {
    if !only.is_empty() {
        anyhow::bail!(
            "--sweep times both sides of every point: run it as `ch1-basics --sweep {}`",
            kind.name()
        );
    }
    let kinds = kind.each();
    // Sizes first: one clear line, no device needed.
    for k in &kinds {
        match k {
            Kind::Batch => drop(training_sweep_plan(args, Which::Batch)?),
            Kind::Graphs => drop(training_sweep_plan(args, Which::Graphs)?),
            _ => {}
        }
    }
    let gpu = Gpu::open(args.common.device)?;
    startup.mark("GPU opened (context, stream, NVML)");
    let mut all_passed = true;
    for &k in &kinds {
        let report = run_sweep(&gpu, args, k, &startup)?;
        print!("{}", report.markdown());
        if let Some(path) = &args.common.json {
            let path = sweep_json_path(path, k, kinds.len() > 1);
            report.write_json(&path)?;
            println!("wrote {}", path.display());
        }
        if let Some((svg, png)) =
            plot::render_report(&report, &args.sweep_out).map_err(anyhow::Error::msg)?
        {
            println!("plot: {} and {}", svg.display(), png.display());
        }
        println!();
        all_passed &= report.all_passed();
    }
    Ok(if all_passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The body of a binary: run the variants named by id (all of `--part` when empty).
pub fn main(only: &[&str]) -> ExitCode {
    common::cli::main_with(|startup| run(&Args::parse(), only, startup))
}

/// The body of a binary that runs one variant whatever `--part` says ("training:pinned").
pub fn main_variant(id: &str) -> ExitCode {
    main(&[id])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(part: Part, only: &[&str]) -> Vec<(&'static str, Vec<&'static str>)> {
        selection(part, only).unwrap()
    }

    #[test]
    fn part_picks_whole_parts_when_no_variant_is_named() {
        let all = parts(Part::All, &[]);
        assert_eq!(
            all.iter().map(|(g, _)| *g).collect::<Vec<_>>(),
            [TRAINING, TRANSPOSE, PIPELINE]
        );
        assert_eq!(all[0].1.len(), 6);
        assert_eq!(all[1].1.len(), 7);
        assert_eq!(all[2].1, ["serial", "overlapped"]);
        let t = parts(Part::Transpose, &[]);
        assert_eq!(t.len(), 1);
        assert_eq!(t[0].0, TRANSPOSE);
    }

    #[test]
    fn named_variants_build_only_their_parts_whatever_part_says() {
        let p = parts(Part::Training, &["pipeline:overlapped"]);
        assert_eq!(p, vec![(PIPELINE, vec!["overlapped"])]);
        let p = parts(Part::All, &["tiled32", "training:pinned"]);
        assert_eq!(
            p,
            vec![(TRAINING, vec!["pinned"]), (TRANSPOSE, vec!["tiled32"])]
        );
    }

    #[test]
    fn unknown_variants_are_refused_with_the_known_ids() {
        let err = selection(Part::All, &["pipeline:fast"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown variant 'pipeline:fast'"), "{err}");
        assert!(err.contains("pipeline:overlapped"), "{err}");
    }

    #[test]
    fn the_default_training_is_the_chapters() {
        let args = Args::parse_from(["ch1-basics"]);
        assert_eq!(args.train_config().unwrap(), TrainConfig::chapter());
    }

    #[test]
    fn several_sweeps_write_a_file_each_beside_the_one_named() {
        let p = Path::new("results/h100/ch1-basics-sweep.json");
        assert_eq!(sweep_json_path(p, Kind::Pinned, false), p);
        assert_eq!(
            sweep_json_path(p, Kind::Graphs, true),
            Path::new("results/h100/ch1-basics-sweep-graphs.json")
        );
        assert_eq!(
            sweep_json_path(Path::new("out"), Kind::Batch, true),
            Path::new("out-batch")
        );
    }

    #[test]
    fn sweeps_parse_and_check_their_sizes_before_the_gpu() {
        let args = Args::parse_from(["ch1-basics", "--sweep", "all", "--sweep-out", "plots"]);
        assert_eq!(args.sweep, Some(Kind::All));
        assert_eq!(args.sweep_out, Path::new("plots"));
        let (base, xs) = training_sweep_plan(&args, Which::Batch).unwrap();
        assert_eq!(base, args.train_config().unwrap());
        assert_eq!(xs, MICROBATCHES.to_vec());
        let (_, xs) = training_sweep_plan(&args, Which::Graphs).unwrap();
        assert_eq!(xs, STEPS_PER_GRAPH.to_vec());
        // 2048 samples make no step of 4096.
        let few = Args::parse_from(["ch1-basics", "--sweep", "batch", "--samples", "2048"]);
        let err = training_sweep_plan(&few, Which::Batch)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("--sweep batch:") && err.contains("does not divide"),
            "{err}"
        );
        assert!(
            Args::try_parse_from(["ch1-basics", "--sweep", "all", "--part", "training"]).is_err()
        );
        assert!(Args::try_parse_from(["ch1-basics", "--sweep-out", "x"]).is_err());
        assert!(Args::try_parse_from(["ch1-basics", "--sweep", "fast"]).is_err());
    }

    #[test]
    fn every_id_is_unique() {
        let mut ids: Vec<String> = variant_ids()
            .into_iter()
            .flat_map(|(g, names)| names.into_iter().map(move |n| format!("{g}:{n}")))
            .collect();
        let count = ids.len();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), count);
    }
}
