//! `tuner memory -- COMMAND`: one trial per batch size (and per precision with `--amp both`),
//! each run for all its steps, and what each one's peak was as the program and NVML saw it, whether it fit, the line through the peaks and the tiers by the one rule. It is also
//! the fresh-process check of an answer: `--batch-sizes B,B+8`.

use std::fmt::Write as _;

use serde::Serialize;

use common::table::{cell, Table};
use common::Result;

use crate::analysis::amp_advice;
use crate::config::Settings;
use crate::granularity::Granularity;
use crate::nvml::MemorySource;
use crate::program::on_off;
use crate::recommend::{self, BatchStatus, MemoryFit, Tiers};
use crate::run::{gb, Ran, Run};
use crate::trial::TrialResult;

pub const SCHEMA: &str = "tuner-memory/2";

/// One precision: the line through its peaks and its tiers.
#[derive(Debug, Clone, Serialize)]
pub struct PrecisionMemory {
    pub amp: bool,
    pub fit: MemoryFit,
    /// The largest listed batch that fit, and the smallest that did not (if any).
    pub largest_fitting: usize,
    pub first_failing: Option<usize>,
    pub tiers: Tiers,
}

#[derive(Debug, Serialize)]
pub struct MemoryReport {
    pub schema: &'static str,
    #[serde(flatten)]
    pub ran: Ran,
    pub precisions: Vec<PrecisionMemory>,
    pub granularity: Granularity,
    /// Only with both precisions measured at one batch.
    pub amp_advice: Option<String>,
    pub configured_batch: Option<usize>,
    pub batch_status: Option<BatchStatus>,
}

/// The one worker count the trials run with.
pub fn workers(settings: &Settings) -> Result<usize> {
    match settings.workers.as_slice() {
        [w] => Ok(*w),
        _ => Err(common::Error::invalid(
            "choose one worker count here: --workers N",
        )),
    }
}

pub fn memory(
    run: &Run,
    settings: Settings,
    granularity: Granularity,
    margin: Option<f64>,
) -> Result<MemoryReport> {
    // One worker count: the sweep's plan is every precision x batch size.
    workers(&settings)?;
    let jobs = crate::sweep::plan(&settings);
    let amps = settings.amp.clone();
    let configured = settings.batch_size;
    let ran = run.ran("memory", &jobs, settings, margin)?;
    let precisions: Vec<PrecisionMemory> = amps
        .into_iter()
        .map(|amp| {
            let of_amp: Vec<&TrialResult> =
                ran.trials.iter().filter(|r| r.params.amp == amp).collect();
            let fit = MemoryFit::of(&of_amp);
            let batches = |fits: bool| {
                of_amp
                    .iter()
                    .filter(move |r| r.fits() == Some(fits))
                    .map(|r| r.params.batch_size)
            };
            let largest_fitting = batches(true).max().unwrap_or(0);
            PrecisionMemory {
                amp,
                tiers: fit.tiers(largest_fitting, granularity, ran.margin),
                fit,
                largest_fitting,
                first_failing: batches(false).min(),
            }
        })
        .collect();
    let amp_advice = amp_advice(&ran.trials);
    let batch_status =
        (configured.zip(precisions.first())).map(|(c, p)| recommend::status(c, &p.tiers));
    Ok(MemoryReport {
        schema: SCHEMA,
        ran,
        precisions,
        granularity,
        amp_advice,
        configured_batch: configured,
        batch_status,
    })
}

fn memory_table(trials: &[TrialResult]) -> Table {
    let mut t = Table::new()
        .right("batch")
        .left("AMP")
        .left("fits")
        .right("peak (NVML)")
        .left("NVML reading")
        .right("peak (program)")
        .right("free at start (program)")
        .right("share of the limit")
        .right("wall s")
        .left("GPU");
    for r in trials {
        let (peak, limit) = r.memory_terms();
        let fits = match r.fits() {
            Some(true) => "yes".to_string(),
            Some(false) => format!("no: {}", r.verdict()),
            None => r.verdict(),
        };
        t.row(vec![
            r.params.batch_size.to_string(),
            on_off(r.params.amp).into(),
            fits,
            cell(r.memory.peak_bytes, gb),
            match r.memory.source {
                MemorySource::NvmlProcess => "its processes".into(),
                MemorySource::NvmlDeviceDelta => "the device's rise".into(),
                MemorySource::None => "-".into(),
            },
            cell(r.measured.framework_peak_bytes, gb),
            cell(r.measured.device.as_ref().and_then(|d| d.free_bytes), gb),
            cell(peak.zip(limit), |(p, l)| {
                format!("{:.1}%", 100.0 * p as f64 / l as f64)
            }),
            format!("{:.1}", r.wall_s),
            r.device.clone(),
        ]);
    }
    t
}

pub fn render(r: &MemoryReport) -> String {
    let mut o = r.ran.header("memory");
    for d in &r.ran.devices {
        let _ = writeln!(
            o,
            "- {} (CUDA_VISIBLE_DEVICES={}): {}, {}",
            d.label,
            d.cuda_visible,
            d.name.as_deref().unwrap_or("name not known (no NVML)"),
            d.total_bytes
                .map(gb)
                .unwrap_or_else(|| "memory not known".into())
        );
    }
    o.push('\n');
    o.push_str(&memory_table(&r.ran.trials).markdown());
    o.push('\n');
    for p in &r.precisions {
        let _ = writeln!(
            o,
            "{}: {}",
            if p.amp { "AMP" } else { "fp32" },
            p.fit.describe()
        );
        let bound = match p.first_failing {
            Some(f) => format!("{f} ran out of memory"),
            None => {
                "no listed batch failed: the real maximum is larger (`tuner autobatch` finds it)"
                    .into()
            }
        };
        let _ = writeln!(
            o,
            "  largest listed batch that fits {} ({bound}); {}",
            p.largest_fitting,
            recommend::describe(&p.tiers, r.ran.margin)
        );
    }
    if let Some(a) = &r.amp_advice {
        let _ = writeln!(o, "{a}");
    }
    if let (Some(c), Some(s)) = (r.configured_batch, r.batch_status) {
        let _ = writeln!(o, "configured batch {c}: {s:?}");
    }
    o.push_str(&r.ran.footer("memory"));
    o
}
