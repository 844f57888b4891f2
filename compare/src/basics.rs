//! The child side for ch1-basics, whose three parts report in their own shapes: each is run for
//! one variant and handed back as a common LessonReport, so the compare treats it like any
//! other lesson. Variants are named "part:variant" ("training:pinned", "transpose:naive",
//! "pipeline:overlapped").

use std::process::ExitCode;

use clap::Parser;

use ch1_basics::cli::Args;
use ch1_basics::pipeline_lesson::{run_pipeline, PipelineReport, Which};
use ch1_basics::train_lesson::run_training;
use ch1_basics::training::Variant;
use ch1_basics::transpose::{Transpose, TransposeVariant};
use common::counters::Work;
use common::gpu::Gpu;
use common::lesson::{finish, run_lesson};
use common::report::{LessonReport, Status, VariantReport, SCHEMA_VERSION};
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
            let which = match variant {
                "serial" => Which::Serial,
                "overlapped" => Which::Overlapped,
                other => anyhow::bail!("unknown pipeline variant '{other}'"),
            };
            let r = run_pipeline(
                &gpu,
                args.pipeline_elements as usize,
                args.chunk as usize,
                args.buffers as usize,
                args.iterations as u32,
                args.seed,
                which,
                &args.common,
            )?;
            pipeline_as_lesson_report(&r)
        }
        other => anyhow::bail!("unknown ch1-basics part '{other}'"),
    };
    let mut report = report;
    for v in &mut report.variants {
        v.name = format!("{part}:{}", v.name);
    }
    Ok(finish(&report, &args.common)?)
}

/// The pipeline's modes as variants of a LessonReport (bytes: the array in and out once).
pub fn pipeline_as_lesson_report(r: &PipelineReport) -> LessonReport {
    let variants = r
        .modes
        .iter()
        .map(|m| {
            let work = Work {
                bytes_read: r.bytes as u64,
                bytes_written: r.bytes as u64,
                flops: 0,
            };
            VariantReport {
                name: m.mode.to_string(),
                description: format!(
                    "{} chunks of {} elements, {} buffers",
                    r.chunks, r.chunk_elements, r.buffers
                ),
                precision: Precision::Fp32,
                status: if m.passed { Status::Ok } else { Status::Failed },
                verification: Verification {
                    rel_l2_error: m.rel_l2_error,
                    tolerance: r.tolerance,
                    non_finite: m.non_finite,
                    elements: r.elements,
                    passed: m.passed,
                    against: "the closed form of the elementwise function".into(),
                },
                work,
                throughput: Some(work.throughput(m.time_ms.median / 1e3)),
                time_ms: Some(m.time_ms.clone()),
                fraction_of_copy_bandwidth: None,
                speedup: None,
                measurement: None,
                note: None,
            }
        })
        .collect();
    LessonReport {
        schema_version: SCHEMA_VERSION,
        lesson: "ch1-basics".into(),
        device: r.device.clone(),
        provenance: r.provenance.clone(),
        parameters: serde_json::json!({ "part": "pipeline", "elements": r.elements, "chunk": r.chunk_elements, "buffers": r.buffers }),
        ceilings: Vec::new(),
        variants,
    }
}
