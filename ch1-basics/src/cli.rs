//! The lesson's command line: the shared flags, the sizes of each part, and which part to run.

use std::process::ExitCode;

use clap::{Parser, ValueEnum};
use common::cli::{parse_count_with_max, parse_elements, CommonArgs};
use common::gpu::Gpu;
use common::lesson::run_lesson;
use common::report::write_json_file;

use crate::model::Dims;
use crate::pipeline_lesson::{run_pipeline, Which};
use crate::train_lesson::run_training;
use crate::training::{TrainConfig, Variant};
use crate::transpose::{Transpose, TransposeVariant, MAX_SIDE};

/// Largest hidden width accepted (a 256 x 65536 layer is 64 MiB of weights).
pub const MAX_HIDDEN: u64 = 1 << 16;
/// Largest sample count accepted (2^24 samples of 256 features is 16 GiB of host data).
pub const MAX_SAMPLES: u64 = 1 << 24;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Part {
    All,
    Training,
    Transpose,
    Pipeline,
}

#[derive(Parser, Debug, Clone)]
#[command(
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
    /// Side of the square matrix the transpose pair works on.
    #[arg(long, default_value = "8192", value_parser = |s: &str| parse_count_with_max(s, MAX_SIDE))]
    pub n: u64,
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
    /// Seed of the data and initial weights.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    #[command(flatten)]
    pub common: CommonArgs,
}

impl Args {
    pub fn train_config(&self) -> anyhow::Result<TrainConfig> {
        let lr = self
            .lr
            .unwrap_or(0.05 * (256.0 / self.hidden as f32).min(1.0));
        let cfg = TrainConfig {
            dims: Dims::mlp(self.hidden as usize),
            samples: self.samples as usize,
            step_batch: self.batch as usize,
            microbatch: self.microbatch as usize,
            lr,
            seed: self.seed,
        };
        if !(lr.is_finite() && lr > 0.0) {
            anyhow::bail!("--lr must be a positive number, got {lr}");
        }
        cfg.validate().map_err(anyhow::Error::msg)?;
        Ok(cfg)
    }
}

/// What to run: the training variants, the transpose variants, the pipeline modes.
pub struct Selection {
    pub training: Vec<Variant>,
    pub transpose: Vec<TransposeVariant>,
    pub pipeline: Option<Which>,
}

impl Selection {
    pub fn of_part(part: Part) -> Selection {
        let all = Selection {
            training: Variant::ALL.to_vec(),
            transpose: TransposeVariant::ALL.to_vec(),
            pipeline: Some(Which::Both),
        };
        let none = Selection {
            training: vec![],
            transpose: vec![],
            pipeline: None,
        };
        match part {
            Part::All => all,
            Part::Training => Selection {
                training: all.training,
                ..none
            },
            Part::Transpose => Selection {
                transpose: all.transpose,
                ..none
            },
            Part::Pipeline => Selection {
                pipeline: all.pipeline,
                ..none
            },
        }
    }
}

/// Run the selection and report; exit 1 if anything failed verification.
pub fn run(args: &Args, sel: &Selection) -> anyhow::Result<ExitCode> {
    let cfg = if sel.training.is_empty() {
        None
    } else {
        Some(args.train_config()?)
    };
    if sel.pipeline.is_some() && args.chunk > args.pipeline_elements {
        anyhow::bail!(
            "--chunk ({}) is larger than --pipeline-elements ({}): use a smaller chunk",
            args.chunk,
            args.pipeline_elements
        );
    }
    let gpu = Gpu::open(args.common.device)?;
    // One trace session for every part (run_lesson reuses an open one).
    let trace = common::trace::Session::start_if(&args.common)?;
    let mut passed = true;
    let mut json = serde_json::Map::new();
    if let Some(cfg) = cfg {
        let report = run_training(&gpu, cfg, &sel.training, &args.common)?;
        print!("{}", report.markdown());
        passed &= report.all_passed();
        json.insert("training".into(), serde_json::to_value(&report)?);
    }
    if !sel.transpose.is_empty() {
        let mut lesson = Transpose::new(&gpu, args.n, args.seed, &sel.transpose)?;
        let report = run_lesson(&gpu, &mut lesson, &[], &args.common)?;
        println!("\n### transpose {} x {}", args.n, args.n);
        print!("{}", report.markdown());
        passed &= report.all_passed();
        json.insert("transpose".into(), serde_json::to_value(&report)?);
    }
    if let Some(which) = sel.pipeline {
        let report = run_pipeline(
            &gpu,
            args.pipeline_elements as usize,
            args.chunk as usize,
            args.buffers as usize,
            args.iterations as u32,
            args.seed,
            which,
            &args.common,
        )?;
        println!();
        print!("{}", report.markdown());
        passed &= report.all_passed();
        json.insert("pipeline".into(), serde_json::to_value(&report)?);
    }
    if let Some(t) = trace {
        let path = t.finish()?;
        println!("trace: {}", path.display());
    }
    if let Some(path) = &args.common.json {
        // One part: its report as is; several: one object keyed by part.
        let value = if json.len() == 1 {
            json.into_iter().next().expect("one").1
        } else {
            serde_json::Value::Object(json)
        };
        write_json_file(path, &value, "the report")?;
        println!("wrote {}", path.display());
    }
    Ok(if passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The body of the main binary: `--part` chooses.
pub fn main_all() -> ExitCode {
    common::cli::main_with(|| {
        let args = Args::parse();
        run(&args, &Selection::of_part(args.part))
    })
}

/// The body of a binary that runs one piece of the lesson whatever `--part` says.
pub fn main_one(sel: impl FnOnce() -> Selection) -> ExitCode {
    common::cli::main_with(|| run(&Args::parse(), &sel()))
}

/// One training variant alone.
pub fn main_training(v: Variant) -> ExitCode {
    main_one(|| Selection {
        training: vec![v],
        transpose: vec![],
        pipeline: None,
    })
}

/// Transpose kernels alone (the baseline, or the tiled family).
pub fn main_transpose(variants: &[TransposeVariant]) -> ExitCode {
    main_one(|| Selection {
        training: vec![],
        transpose: variants.to_vec(),
        pipeline: None,
    })
}

/// One pipeline mode (with the stages alone for comparison).
pub fn main_pipeline(which: Which) -> ExitCode {
    main_one(|| Selection {
        training: vec![],
        transpose: vec![],
        pipeline: Some(which),
    })
}
