//! The runner every lesson uses: for each variant, poison the output, run once, verify against
//! the reference, then measure; compute speedups only between verified variants; place each on
//! the measured copy bandwidth; print the table and write the JSON.
//!
//! A lesson implements [Lesson]: it owns its buffers and knows how to launch each variant.
//! Nothing here knows a lesson by name.
//!
//! Each variant runs inside an NVTX range `lesson:variant` (with `verify`, then the `warmup`
//! and `timed` ranges of [measure]); with `--trace FILE` the runner records a CUPTI trace of
//! the timed regions (see [crate::trace]).

use std::process::ExitCode;

use crate::bench::{measure, BenchConfig, Timer};
use crate::ceilings;
use crate::cli::{mark, marks, process_start, CommonArgs};
use crate::counters::Work;
use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::nvtx;
use crate::report::{LessonReport, Provenance, RunReport, Status, VariantReport, SCHEMA_VERSION};
use crate::stats::Summary;
use crate::trace;
use crate::verify::{check, Precision};

/// What a variant is, before it runs.
#[derive(Debug, Clone)]
pub struct VariantSpec {
    pub name: &'static str,
    pub description: &'static str,
    pub precision: Precision,
    pub work: Work,
    /// Relative L2 tolerance; the precision's default unless the lesson says otherwise.
    pub tolerance: f64,
}

impl VariantSpec {
    pub fn new(
        name: &'static str,
        description: &'static str,
        precision: Precision,
        work: Work,
    ) -> Self {
        VariantSpec {
            name,
            description,
            precision,
            work,
            tolerance: precision.tolerance(),
        }
    }
}

pub trait Lesson {
    /// The crate name, e.g. "ch1-intensity".
    fn name(&self) -> &'static str;
    /// Sizes, seeds and flags, recorded in the JSON.
    fn parameters(&self) -> serde_json::Value;
    fn variants(&self) -> Vec<VariantSpec>;
    /// The variant speedups are measured against.
    fn baseline(&self) -> &'static str {
        "baseline"
    }
    /// The float64 values every variant's output must match.
    fn reference(&self) -> &[f64];
    fn reference_label(&self) -> &'static str {
        "float64 CPU reference"
    }
    /// Fill the output with NaN so unwritten elements cannot pass.
    fn poison(&mut self, gpu: &Gpu) -> Result<()>;
    /// Queue one run of variant `index` on `gpu.stream`.
    fn run(&mut self, gpu: &Gpu, index: usize) -> Result<()>;
    /// The output of the last run.
    fn output(&mut self, gpu: &Gpu) -> Result<Vec<f32>>;
    /// Adjust the measurement for this lesson (e.g. turn `hold` off for host-synchronizing runs).
    fn bench_config(&self, cfg: BenchConfig) -> BenchConfig {
        cfg
    }
}

/// Which variants to run: all of them, or the named ones (unknown names are an error that
/// lists the known ones).
pub fn select(specs: &[VariantSpec], only: &[&str]) -> Result<Vec<usize>> {
    if only.is_empty() {
        return Ok((0..specs.len()).collect());
    }
    only.iter()
        .map(|name| {
            specs.iter().position(|s| s.name == *name).ok_or_else(|| {
                let known: Vec<&str> = specs.iter().map(|s| s.name).collect();
                Error::invalid(format!(
                    "unknown variant '{name}': known variants are {}",
                    known.join(", ")
                ))
            })
        })
        .collect()
}

/// Verify and measure the selected variants and build the report.
pub fn run_lesson(
    gpu: &Gpu,
    lesson: &mut dyn Lesson,
    only: &[&str],
    args: &CommonArgs,
) -> Result<LessonReport> {
    let specs = lesson.variants();
    let selected = select(&specs, only)?;
    let cfg = lesson.bench_config(args.bench_config());
    cfg.stop.validate().map_err(Error::invalid)?;
    let mut timer = Timer::new(gpu)?;
    let copy = ceilings::copy_bandwidth(gpu, &mut timer, args.refresh_ceilings)?;
    mark("timer and ceilings ready");
    let mut provenance = Provenance::now();
    // After the ceilings, so only the variants' timed regions are traced.
    let trace = trace::Session::start_if(args)?;

    let mut variants = Vec::new();
    for &index in &selected {
        let spec = &specs[index];
        let _variant_range = nvtx::range(&range_name(lesson.name(), spec.name));
        let verify_range = nvtx::range("verify");
        lesson.poison(gpu)?;
        lesson.run(gpu, index)?;
        gpu.sync()?;
        let got = lesson.output(gpu)?;
        drop(verify_range);
        let verification = check(
            &got,
            lesson.reference(),
            spec.tolerance,
            lesson.reference_label(),
        );
        let mut report = VariantReport::checked(
            spec.name,
            spec.description,
            spec.precision,
            verification,
            spec.work,
        );
        if report.status == Status::Failed {
            report.note = Some("not timed: a wrong answer has no speed".into());
            variants.push(report);
            continue;
        }
        if provenance.startup_to_first_sample_s.is_none() {
            mark("first variant verified");
            provenance.startup_to_first_sample_s = Some(process_start().elapsed().as_secs_f64());
            provenance.startup_phases = marks();
        }
        let repeats = if args.plant_slowdown.as_deref() == Some(spec.name) {
            2
        } else {
            1
        };
        let m = measure(gpu, &mut timer, &cfg, &mut || {
            (0..repeats).try_for_each(|_| lesson.run(gpu, index))
        })?;
        let ms: Vec<f64> = m.samples_s.iter().map(|s| s * 1e3).collect();
        let summary = Summary::of(&ms).ok_or_else(|| Error::invalid("no valid samples"))?;
        let throughput = spec.work.throughput(summary.median / 1e3);
        report.fraction_of_copy_bandwidth =
            (spec.work.bytes() > 0).then(|| throughput.gb_per_s / copy.value);
        report.throughput = Some(throughput);
        report.time_ms = Some(summary);
        report.measurement = Some(m);
        variants.push(report);
    }
    apply_speedups(&mut variants, lesson.baseline());
    if let Some(t) = trace {
        t.finish()?;
    }

    Ok(LessonReport {
        schema_version: SCHEMA_VERSION,
        lesson: lesson.name().to_string(),
        device: gpu.info.clone(),
        provenance,
        parameters: lesson.parameters(),
        ceilings: vec![copy.as_ref_named("measured copy bandwidth")],
        variants,
    })
}

/// The NVTX range of one variant: "ch1-intensity:fused". Not "/": ncu's `--nvtx-include`
/// reads "a/b" as range b nested in range a.
pub fn range_name(lesson: &str, variant: &str) -> String {
    format!("{lesson}:{variant}")
}

/// Speedup = baseline median / variant median, for verified variants when the baseline ran
/// and verified; everything else gets none.
pub fn apply_speedups(variants: &mut [VariantReport], baseline: &str) {
    let base = variants
        .iter()
        .find(|v| v.name == baseline && v.status == Status::Ok)
        .and_then(|v| v.time_ms.as_ref().map(|s| s.median));
    for v in variants.iter_mut() {
        v.speedup = match (base, v.status, &v.time_ms) {
            (Some(b), Status::Ok, Some(s)) if s.median > 0.0 => Some(b / s.median),
            _ => None,
        };
    }
}

/// Print the table, write the JSON if asked, and exit non-zero if any variant failed.
pub fn finish(report: &impl RunReport, args: &CommonArgs) -> Result<ExitCode> {
    print!("{}", report.markdown());
    if let Some(path) = &args.json {
        report.write_json(path)?;
        println!("wrote {}", path.display());
    }
    Ok(if report.all_passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::Verification;

    fn spec(name: &'static str) -> VariantSpec {
        VariantSpec::new(name, "", Precision::Fp32, Work::default())
    }

    fn variant(name: &str, status: Status, median: Option<f64>) -> VariantReport {
        VariantReport {
            name: name.into(),
            description: String::new(),
            precision: Precision::Fp32,
            status,
            verification: Verification {
                rel_l2_error: 0.0,
                tolerance: 1e-5,
                non_finite: 0,
                elements: 1,
                passed: status == Status::Ok,
                against: "ref".into(),
            },
            work: Work::default(),
            time_ms: median.map(|m| Summary::of(&[m]).unwrap()),
            throughput: None,
            fraction_of_copy_bandwidth: None,
            speedup: None,
            measurement: None,
            note: None,
        }
    }

    #[test]
    fn selection_by_name_and_unknown_names() {
        let specs = [spec("baseline"), spec("fused")];
        assert_eq!(select(&specs, &[]).unwrap(), vec![0, 1]);
        assert_eq!(select(&specs, &["fused"]).unwrap(), vec![1]);
        let err = select(&specs, &["fast"]).unwrap_err().to_string();
        assert!(
            err.contains("unknown variant 'fast'") && err.contains("baseline, fused"),
            "{err}"
        );
    }

    #[test]
    fn speedups_only_between_verified_variants() {
        let mut v = vec![
            variant("baseline", Status::Ok, Some(4.0)),
            variant("fast", Status::Ok, Some(1.0)),
            variant("wrong", Status::Failed, None),
        ];
        apply_speedups(&mut v, "baseline");
        assert_eq!(v[0].speedup, Some(1.0));
        assert_eq!(v[1].speedup, Some(4.0));
        assert_eq!(v[2].speedup, None);
    }

    #[test]
    fn a_failed_baseline_gives_no_speedups() {
        let mut v = vec![
            variant("baseline", Status::Failed, None),
            variant("fast", Status::Ok, Some(1.0)),
        ];
        apply_speedups(&mut v, "baseline");
        assert!(v.iter().all(|x| x.speedup.is_none()));
    }
}
