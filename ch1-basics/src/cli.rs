//! The lesson's command line. The three parts run as one lesson of the runner ([Parts]), each
//! built only when some of its variants are selected, and only while it runs; `--sweep` runs
//! the sweeps instead, each its own report and plot.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, ValueEnum};
use common::cli::{finish, parse_count_with_max, parse_elements, CommonArgs};
use common::counters::Work;
use common::exit::Exit;
use common::gpu::Gpu;
use common::report::Startup;
use common::runner::{run_lesson, select, Parts, RunOptions, VariantSpec};
use common::sweep::{plot, SweepLesson};
use common::verify::Precision;

use crate::pipeline::{self, PipelineConfig, PipelineLesson};
use crate::sweep::allocations::{self, AllocationSweep};
use crate::sweep::copies::{self, CopySweep};
use crate::sweep::training::{self as training_sweep, TrainingSweep};
use crate::sweep::Kind;
use crate::training::{self, TrainConfig, TrainingLesson, Variant};
use crate::transpose::{self, Transpose, TransposeVariant, MAX_SIDE};

/// Largest hidden width accepted (a 256 x 65536 layer is 64 MiB of weights).
pub const MAX_HIDDEN: u64 = 1 << 16;
/// Largest sample count accepted (2^24 samples of 256 features is 16 GiB of host data).
pub const MAX_SAMPLES: u64 = 1 << 24;

/// The parts, each a group of the one lesson, in the order they run.
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

/// Every variant of every part, known without a GPU.
pub fn variants() -> Vec<VariantSpec> {
    let names = [
        (TRAINING, Variant::ALL.map(|v| v.name()).to_vec()),
        (TRANSPOSE, TransposeVariant::ALL.map(|v| v.name()).to_vec()),
        (PIPELINE, pipeline::VARIANTS.map(|(n, _)| n).to_vec()),
    ];
    names
        .into_iter()
        .flat_map(|(group, names)| {
            names.into_iter().map(move |name| {
                VariantSpec::new(name, "", Precision::Fp32, Work::default()).in_group(group)
            })
        })
        .collect()
}

/// The ids of the variants that run, in the order they run: those named in `only` (by the
/// runner's rule, so unknown names fail before the GPU is opened), else those of `--part`.
pub fn selection(part: Part, only: &[&str]) -> anyhow::Result<Vec<String>> {
    let specs = variants();
    let only: Vec<String> = only.iter().map(|s| s.to_string()).collect();
    let chosen = select(&specs, &only)?;
    let wanted = part.to_possible_value().map(|v| v.get_name().to_string());
    Ok(specs
        .iter()
        .enumerate()
        .filter(|(i, s)| {
            if only.is_empty() {
                part == Part::All || wanted.as_deref() == Some(s.group.as_str())
            } else {
                chosen.contains(i)
            }
        })
        .map(|(_, s)| s.id())
        .collect())
}

/// Build the selected parts, run them as one lesson and report. `only` names variants by id
/// ("training:pinned"); empty: `--part` decides.
pub fn run(args: &Args, only: &[&str], mut startup: Startup) -> anyhow::Result<ExitCode> {
    if let Some(kind) = args.sweep {
        return run_sweeps(args, only, kind, startup);
    }
    let mut chosen = selection(args.part, only)?;
    // The compare's `--variants` narrows the parts too: a part is built, and the pipeline
    // judged whole, by what really runs.
    if !args.common.variants.is_empty() {
        chosen.retain(|id| args.common.variants.contains(id));
    }
    let in_group = |id: &String, group: &str| id.split_once(':').is_some_and(|(g, _)| g == group);
    let picked = |group: &str| chosen.iter().filter(|id| in_group(id, group)).count();
    // Sizes checked before the GPU is opened.
    let training = (picked(TRAINING) > 0).then(|| args.train_config());
    let pipeline = (picked(PIPELINE) > 0).then(|| args.pipeline_config());
    let (training, pipeline) = (training.transpose()?, pipeline.transpose()?);

    let gpu = &Gpu::open(args.common.device)?;
    startup.mark("GPU opened (context, stream, NVML)");
    let mut lesson = Parts::new("ch1-basics");
    if let Some(cfg) = training {
        let build = move || TrainingLesson::new(gpu, cfg);
        lesson = lesson.part(TRAINING, training::lesson::specs(&cfg), build);
    }
    if picked(TRANSPOSE) > 0 {
        let build = || Transpose::new(gpu, args.side, args.seed);
        lesson = lesson.part(TRANSPOSE, transpose::specs(args.side), build);
    }
    if let Some(cfg) = pipeline {
        let whole = picked(PIPELINE) == pipeline::VARIANTS.len();
        let refresh = args.common.refresh_ceilings;
        let build = move || PipelineLesson::new(gpu, cfg, whole, refresh);
        lesson = lesson.part(PIPELINE, pipeline::specs(&cfg), build);
    }
    let options = RunOptions {
        only: chosen,
        ..args.common.options(&startup)
    };
    let report = run_lesson(gpu, &mut lesson, &options)?;
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

/// `--sweep`: each sweep's report printed, its JSON written, its plot drawn.
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
    // The training sweeps' sizes, checked without a GPU.
    let training = kinds
        .iter()
        .filter(|k| matches!(k, Kind::Batch | Kind::Graphs));
    for &k in training {
        training_sweep::plan(k, args.train_config()?, training_sweep::sizes(k))
            .map_err(|e| anyhow::anyhow!("--sweep {}: {e}", k.name()))?;
    }
    let gpu = &Gpu::open(args.common.device)?;
    startup.mark("GPU opened (context, stream, NVML)");
    let mut all_passed = true;
    for &k in &kinds {
        let (options, seed) = (&args.common.options(&startup), args.seed);
        let report = match k {
            Kind::Pinned => {
                let sweep = CopySweep::new(gpu, &copies::SIZES, args.iterations as u32, seed)?;
                run_lesson(gpu, &mut SweepLesson(sweep), options)?
            }
            Kind::Prealloc => {
                let (sizes, counts) = (&allocations::SIZES, &allocations::COUNTS);
                let sweep = AllocationSweep::new(gpu, sizes, counts, seed)?;
                run_lesson(gpu, &mut SweepLesson(sweep), options)?
            }
            _ => {
                let sizes = training_sweep::sizes(k);
                let sweep = TrainingSweep::new(gpu, k, args.train_config()?, sizes)?;
                run_lesson(gpu, &mut SweepLesson(sweep), options)?
            }
        };
        let json = args
            .common
            .json
            .as_deref()
            .map(|p| sweep_json_path(p, k, kinds.len() > 1));
        finish(&report, json.as_deref())?;
        let plots = plot::render_report(&report, &args.sweep_out).map_err(anyhow::Error::msg)?;
        if let Some((svg, png)) = plots {
            println!("plot: {} and {}", svg.display(), png.display());
        }
        println!();
        all_passed &= report.all_passed();
    }
    Ok(if all_passed {
        Exit::Done
    } else {
        Exit::Problem
    }
    .into())
}

/// The body of a binary: run the variants named by id (all of `--part` when empty).
pub fn main(only: &[&str]) -> ExitCode {
    common::cli::main_with(|startup| run(&Args::parse(), only, startup))
}
