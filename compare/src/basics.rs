//! The child side for ch1-basics, whose three parts report in their own shapes: each is run for
//! one variant and handed back as a common LessonReport, so the compare treats it like any
//! other lesson (the pipeline pair without the lesson's copy-rate sweep). Variants are named "part:variant" ("training:pinned", "transpose:naive",
//! "pipeline:overlapped").

use std::process::ExitCode;

use clap::Parser;

use ch1_basics::cli::Args;
use ch1_basics::pipeline::{time_mode, Mode, Pipeline};
use ch1_basics::pipeline_lesson::{check_mode, TOLERANCE};
use ch1_basics::train_lesson::run_training;
use ch1_basics::training::Variant;
use ch1_basics::transpose::{Transpose, TransposeVariant};
use common::bench::Timer;
use common::counters::Work;
use common::gpu::Gpu;
use common::lesson::{finish, run_lesson};
use common::report::{LessonReport, Provenance, VariantReport, SCHEMA_VERSION};
use common::verify::{Precision, Verification};

pub fn run(argv: &[String], only: &[&str]) -> anyhow::Result<ExitCode> {
    let args =
        Args::try_parse_from(argv).map_err(|e| anyhow::anyhow!("{}", e.to_string().trim()))?;
    let [name] = only else {
        anyhow::bail!("ch1-basics runs one variant at a time here")
    };
    let (part, variant) = name
        .split_once(':')
        .ok_or_else(|| anyhow::anyhow!("'{name}' is not part:variant"))?;
    let gpu = Gpu::open(args.common.device)?;
    let report = match part {
        "training" => {
            let v = *Variant::ALL
                .iter()
                .find(|v| v.name() == variant)
                .ok_or_else(|| anyhow::anyhow!("unknown training variant '{variant}'"))?;
            run_training(&gpu, args.train_config()?, &[v], &args.common)?.report
        }
        "transpose" => {
            let v = *TransposeVariant::ALL
                .iter()
                .find(|v| v.name() == variant)
                .ok_or_else(|| anyhow::anyhow!("unknown transpose variant '{variant}'"))?;
            let mut lesson = Transpose::new(&gpu, args.n, args.seed, &[v])?;
            run_lesson(&gpu, &mut lesson, &[], &args.common)?
        }
        "pipeline" => {
            let mode = match variant {
                "serial" => Mode::Serial,
                "overlapped" => Mode::Overlapped,
                other => anyhow::bail!("unknown pipeline variant '{other}'"),
            };
            pipeline_mode(&gpu, &args, variant, mode)?
        }
        other => anyhow::bail!("unknown ch1-basics part '{other}'"),
    };
    let mut report = report;
    for v in &mut report.variants {
        v.name = format!("{part}:{}", v.name);
    }
    Ok(finish(&report, &args.common)?)
}

/// One pipeline mode, checked and timed, without the lesson's copy-rate sweep and stage timings
/// (the lesson's own binaries report those): the compare needs the pair, in seconds, not minutes.
fn pipeline_mode(gpu: &Gpu, args: &Args, name: &str, mode: Mode) -> anyhow::Result<LessonReport> {
    let (n, chunk, buffers) = (
        args.pipeline_elements as usize,
        args.chunk as usize,
        args.buffers as usize,
    );
    common::gpu::check_host_fits("the pipeline's pinned input and output", 8 * n as u64)?;
    let mut timer = Timer::new(gpu)?;
    let mut p = Pipeline::new(gpu, n, chunk, buffers, args.iterations as u32, args.seed)?;
    let (rel_l2_error, non_finite, passed) = check_mode(gpu, &mut p, mode)?;
    let time_ms = if passed {
        Some(time_mode(
            gpu,
            &mut timer,
            &args.common.bench_config(),
            &mut p,
            mode,
        )?)
    } else {
        None
    };
    let work = Work {
        bytes_read: 4 * n as u64,
        bytes_written: 4 * n as u64,
        flops: 0,
    };
    Ok(LessonReport {
        schema_version: SCHEMA_VERSION,
        lesson: "ch1-basics".into(),
        device: gpu.info.clone(),
        provenance: Provenance::now(),
        parameters: serde_json::json!({ "part": "pipeline", "elements": n, "chunk": chunk, "buffers": buffers }),
        ceilings: Vec::new(),
        variants: vec![VariantReport {
            throughput: time_ms.as_ref().map(|t| work.throughput(t.median / 1e3)),
            time_ms,
            ..VariantReport::checked(
                name,
                format!("{n} elements through the GPU in chunks of {chunk}, {buffers} buffers"),
                Precision::Fp32,
                Verification {
                    rel_l2_error,
                    tolerance: TOLERANCE,
                    non_finite,
                    elements: n,
                    passed,
                    against: "the closed form of the elementwise function".into(),
                },
                work,
            )
        }],
    })
}
