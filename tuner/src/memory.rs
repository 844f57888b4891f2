//! `tuner memory -- COMMAND`: one trial per batch size (and per precision with `--amp off,on`),
//! each run for all its steps, and what each one's peak was as the program and NVML saw it,
//! whether it fit, the line through the peaks and the tiers by the one rule. It is also the
//! fresh-process check of an answer: `--batch-sizes B,B+8`.
//!
//! Where the memory goes, per batch that fit: the parameters, gradients and optimizer state the
//! program counted (its model line), the rest of the framework's peak (activations and
//! workspace), what NVML saw beyond that peak (the CUDA context and what libraries allocate
//! outside the framework) and the bytes each sample adds (the slope of the peak line).

use std::fmt::Write as _;

use serde::Serialize;

use common::table::{cell, Columns, Table};

use crate::analysis::amp_advice;
use crate::gpu::cpu_list;
use crate::granularity::Granularity;
use crate::nvml::MemorySource;
use crate::program::Precision;
use crate::protocol::ModelRecord;
use crate::recommend::{self, BatchStatus, MemoryFit, Tiers};
use crate::run::{gb, Ran};
use crate::trial::TrialResult;

pub const SCHEMA: &str = "tuner-memory/2";

/// One precision: the line through its peaks and its tiers.
#[derive(Debug, Clone, Serialize)]
pub struct PrecisionMemory {
    /// As asked (`on`: what each GPU resolved it to is in the trials).
    pub amp: Precision,
    pub fit: MemoryFit,
    /// The largest listed batch that fit, and the smallest that did not (if any).
    pub largest_fitting: usize,
    pub first_failing: Option<usize>,
    pub tiers: Tiers,
    /// Where the memory goes, per batch that fit, ascending.
    pub parts: Vec<MemoryParts>,
}

/// Where one trial's memory went: the program's model line set against its peaks.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MemoryParts {
    pub batch_size: usize,
    /// The framework's peak (the program's `peak_memory_bytes`: PyTorch's reserved memory).
    pub peak_bytes: Option<u64>,
    /// The program's model line; None where it sent none.
    pub model: Option<ModelRecord>,
    /// The framework's peak less parameters, gradients and optimizer state: activations,
    /// workspaces and the allocator's cache. None without the three, or where they exceed it.
    pub activations_bytes: Option<u64>,
    /// NVML's reading of the trial less the framework's peak: the CUDA context, its loaded
    /// kernels and what libraries allocated outside the framework's allocator.
    pub cuda_context_bytes: Option<u64>,
    /// The slope of the peak line from the previous batch that fit to this one (the peaks the
    /// tiers use); None for the first.
    pub bytes_per_sample: Option<f64>,
}

impl MemoryParts {
    /// The parts of each trial that fit, by ascending batch.
    pub fn of(trials: &[&TrialResult]) -> Vec<MemoryParts> {
        let mut fitting = trials.to_vec();
        fitting.retain(|r| r.fits() == Some(true));
        fitting.sort_by_key(|r| r.params.batch_size);
        let mut previous: Option<(usize, u64)> = None;
        fitting
            .into_iter()
            .map(|r| {
                let batch = r.params.batch_size;
                let peak = r.measured.framework_peak_bytes;
                let model = r.measured.model;
                let line_peak = r.memory_terms().0;
                let bytes_per_sample = previous.zip(line_peak).and_then(|((b0, p0), p1)| {
                    (batch > b0).then(|| (p1 as f64 - p0 as f64) / (batch - b0) as f64)
                });
                previous = line_peak.map(|p| (batch, p)).or(previous);
                MemoryParts {
                    batch_size: batch,
                    peak_bytes: peak,
                    model,
                    activations_bytes: peak
                        .zip(model.and_then(|m| m.total_bytes()))
                        .and_then(|(p, fixed)| p.checked_sub(fixed)),
                    cuda_context_bytes: match r.memory.source {
                        MemorySource::None => None,
                        _ => (r.memory.peak_bytes.zip(peak)).and_then(|(n, p)| n.checked_sub(p)),
                    },
                    bytes_per_sample,
                }
            })
            .collect()
    }
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

/// What the trials of the sweep's plan say, where the settings have one worker count (as the
/// command checks): the plan is then every precision x batch size.
pub fn report(ran: Ran, granularity: Granularity) -> MemoryReport {
    let precisions: Vec<PrecisionMemory> = (ran.settings.amp.iter())
        .map(|&amp| {
            let of_amp: Vec<&TrialResult> = (ran.trials.iter())
                .filter(|r| r.params.as_asked().amp == amp)
                .collect();
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
                parts: MemoryParts::of(&of_amp),
            }
        })
        .collect();
    let configured = ran.settings.batch_size;
    let batch_status =
        (configured.zip(precisions.first())).map(|(c, p)| recommend::status(c, &p.tiers));
    MemoryReport {
        schema: SCHEMA,
        amp_advice: amp_advice(&ran.trials),
        ran,
        precisions,
        granularity,
        configured_batch: configured,
        batch_status,
    }
}

fn memory_table(trials: &[TrialResult]) -> Table {
    Columns::<TrialResult>::new()
        .right("batch", |r| r.params.batch_size.to_string())
        .left("AMP", |r| r.params.amp_text())
        .left("fits", |r| match r.fits() {
            Some(true) => "yes".to_string(),
            Some(false) => format!("no: {}", r.verdict()),
            None => r.verdict(),
        })
        .right("peak (NVML)", |r| cell(r.memory.peak_bytes, gb))
        .left("NVML reading", |r| match r.memory.source {
            MemorySource::NvmlProcess => "its processes".into(),
            MemorySource::NvmlDeviceDelta => "the device's rise".into(),
            MemorySource::None => "-".into(),
        })
        .right("peak (program)", |r| {
            cell(r.measured.framework_peak_bytes, gb)
        })
        .right("free at start (program)", |r| {
            cell(r.measured.device.as_ref().and_then(|d| d.free_bytes), gb)
        })
        .right("share of the limit", |r| {
            cell(r.limit_share(), |s| format!("{:.1}%", 100.0 * s))
        })
        .right("wall s", |r| format!("{:.1}", r.wall_s))
        .left("GPU", |r| r.device.clone())
        .left_if_any("CPU cores", |r| cell(r.cpus.as_deref(), cpu_list))
        .table(trials)
}

const NOT_REPORTED: &str = "not reported";

/// Bytes in GB to the megabyte: parameters of a small model and the peak of a large batch in
/// one column.
fn gb3(b: u64) -> String {
    plotting::format::gigabytes(b as f64, 3)
}

fn parts_table(precisions: &[PrecisionMemory]) -> Table {
    // A figure of the model line: not reported without one.
    let model = |f: fn(&ModelRecord) -> Option<u64>| {
        move |(_, part): &(Precision, &MemoryParts)| {
            (part.model.as_ref().and_then(f)).map_or_else(|| NOT_REPORTED.into(), gb3)
        }
    };
    Columns::<(Precision, &MemoryParts)>::new()
        .right("batch", |(_, part)| part.batch_size.to_string())
        .left("AMP", |(amp, _)| amp.as_str().into())
        .right("parameters", model(|m| m.parameter_bytes))
        .right("gradients", model(|m| m.gradient_bytes))
        .right("optimizer state", model(|m| m.optimizer_state_bytes))
        .right("activations + workspace", |(_, part)| {
            match (part.model, part.activations_bytes) {
                (None, _) => NOT_REPORTED.into(),
                (Some(_), a) => cell(a, gb3),
            }
        })
        .right("peak (program)", |(_, part)| cell(part.peak_bytes, gb3))
        .right("context + libraries", |(_, part)| {
            cell(part.cuda_context_bytes, gb3)
        })
        .right("per sample", |(_, part)| {
            cell(part.bytes_per_sample, |b| format!("{:.2} MB", b / 1e6))
        })
        .table(
            precisions
                .iter()
                .flat_map(|p| p.parts.iter().map(|part| (p.amp, part))),
        )
}

/// The line's fixed part beside what the model line says is fixed, for one precision.
fn fixed_part(p: &PrecisionMemory) -> Option<String> {
    let line = p.fit.line?;
    let model = p.parts.iter().find_map(|part| part.model?.total_bytes())?;
    Some(format!(
        "  bytes per sample {:.2} MB (the slope of the peak line); its fixed part {} against {} of parameters, gradients and optimizer state",
        line.bytes_per_sample / 1e6,
        gb3(line.fixed_bytes.max(0.0) as u64),
        gb3(model)
    ))
}

pub fn render(r: &MemoryReport) -> String {
    let mut o = r.ran.header("memory");
    for d in &r.ran.devices {
        let name = d.name.as_deref().unwrap_or("name not known (no NVML)");
        let memory = d.total_bytes.map_or_else(|| "memory not known".into(), gb);
        let (label, visible) = (&d.label, &d.cuda_visible);
        let _ = writeln!(
            o,
            "- {label} (CUDA_VISIBLE_DEVICES={visible}): {name}, {memory}"
        );
    }
    o.push('\n');
    o.push_str(&memory_table(&r.ran.trials).markdown());
    o.push('\n');
    if r.precisions.iter().any(|p| !p.parts.is_empty()) {
        o.push_str("Where the memory goes (the batches that fit):\n\n");
        o.push_str(&parts_table(&r.precisions).markdown());
        o.push_str(
            "\nParameters, gradients and optimizer state as the program counted them (its model line); \
             activations + workspace the rest of the program's peak; context + libraries what NVML saw \
             beyond that peak; per sample the peak's growth per sample since the batch before.\n\n",
        );
    }
    for p in &r.precisions {
        let _ = writeln!(o, "{}: {}", p.amp.label(), p.fit.describe());
        let of_amp = || (r.ran.trials.iter()).filter(|t| t.params.as_asked().amp == p.amp);
        let silent: Vec<String> = (of_amp().filter(|t| t.fits().is_none()))
            .map(|t| format!("{} {}", t.params.batch_size, t.status.name()))
            .collect();
        let bound = match (p.first_failing, silent.is_empty()) {
            (Some(f), _) => {
                let failed = of_amp().find(|t| t.params.batch_size == f && t.fits() == Some(false));
                format!("{f} {}", failed.map_or("ran out of memory", |t| t.misfit()))
            }
            (None, true) => {
                "no listed batch failed: the real maximum is larger (`tuner autobatch` finds it)"
                    .into()
            }
            (None, false) => format!(
                "none ran out of memory; no answer from {} (above)",
                silent.join(", ")
            ),
        };
        let _ = writeln!(
            o,
            "  largest listed batch that fits {} ({bound}); {}",
            p.largest_fitting,
            recommend::describe(&p.tiers, r.ran.margin)
        );
        o.extend(fixed_part(p).map(|fixed| fixed + "\n"));
    }
    o.extend(r.amp_advice.as_ref().map(|a| format!("{a}\n")));
    if let (Some(c), Some(s)) = (r.configured_batch, r.batch_status) {
        let _ = writeln!(o, "configured batch {c}: {s:?}");
    }
    o.push_str(&r.ran.footer("memory"));
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::Status;
    use crate::protocol::DeviceRecord;

    const MB: u64 = 1_000_000;
    /// ResNet-18's 11,689,512 fp32 parameters.
    const RESNET18: u64 = 46_758_048;

    /// A trial that fit: the framework's peak is the model's three parts plus 20 MB per sample,
    /// NVML saw 500 MB more, and the program reported its free memory (so the tiers use its
    /// peaks).
    fn fit(batch: usize, model: Option<ModelRecord>) -> TrialResult {
        let mut t = TrialResult {
            status: Status::Ok,
            params: crate::program::Params {
                batch_size: batch,
                ..Default::default()
            },
            ..TrialResult::default()
        };
        let peak = 3 * RESNET18 + 20 * MB * batch as u64;
        t.measured.framework_peak_bytes = Some(peak);
        t.measured.device = Some(DeviceRecord {
            free_bytes: Some(80_000 * MB),
            ..DeviceRecord::default()
        });
        t.measured.model = model;
        t.memory.source = MemorySource::NvmlProcess;
        t.memory.peak_bytes = Some(peak + 500 * MB);
        t
    }

    fn resnet() -> Option<ModelRecord> {
        Some(ModelRecord {
            parameter_bytes: Some(RESNET18),
            gradient_bytes: Some(RESNET18),
            optimizer_state_bytes: Some(RESNET18),
            rank: None,
        })
    }

    #[test]
    fn the_parts_and_the_rest_add_up_to_the_peak() {
        let oom = TrialResult {
            status: Status::Oom,
            ..fit(1024, resnet())
        };
        let trials = [
            fit(256, resnet()),
            fit(64, resnet()),
            oom,
            fit(512, resnet()),
        ];
        let parts = MemoryParts::of(&trials.iter().collect::<Vec<_>>());
        let batches: Vec<usize> = parts.iter().map(|p| p.batch_size).collect();
        assert_eq!(batches, [64, 256, 512], "the batches that fit, ascending");
        for p in &parts {
            let m = p.model.unwrap();
            assert_eq!(
                m.total_bytes().unwrap() + p.activations_bytes.unwrap(),
                p.peak_bytes.unwrap()
            );
            assert_eq!(p.activations_bytes, Some(20 * MB * p.batch_size as u64));
            assert_eq!(p.cuda_context_bytes, Some(500 * MB));
        }
        assert_eq!(parts[0].bytes_per_sample, None, "nothing before the first");
        assert_eq!(parts[1].bytes_per_sample, Some(20e6));
        assert_eq!(parts[2].bytes_per_sample, Some(20e6));
    }

    #[test]
    fn a_figure_that_cannot_be_had_is_none_not_a_wrapped_number() {
        // Parts above the peak (a peak taken before the optimizer made its state), NVML below
        // the framework's peak (a sample that missed the top), NVML not read, no peak at all.
        let mut above = fit(8, resnet());
        above.measured.framework_peak_bytes = Some(RESNET18);
        above.memory.peak_bytes = Some(RESNET18 - 1);
        let mut unread = fit(16, resnet());
        unread.memory.source = MemorySource::None;
        let mut no_peak = fit(32, resnet());
        no_peak.measured.framework_peak_bytes = None;
        let trials = [above, unread, no_peak];
        let parts = MemoryParts::of(&trials.iter().collect::<Vec<_>>());
        assert_eq!(parts[0].activations_bytes, None);
        assert_eq!(parts[0].cuda_context_bytes, None);
        assert_eq!(parts[1].cuda_context_bytes, None);
        assert!(parts[1].activations_bytes.is_some());
        assert_eq!(
            (parts[2].activations_bytes, parts[2].cuda_context_bytes),
            (None, None)
        );
        // The peak line's slope uses the peaks the tiers use: NVML's here, without the program's.
        assert!(parts[2].bytes_per_sample.is_some());
    }

    fn precision(parts: Vec<MemoryParts>, fit: MemoryFit) -> PrecisionMemory {
        PrecisionMemory {
            amp: Precision::Off,
            fit,
            largest_fitting: 0,
            first_failing: None,
            tiers: Tiers {
                maximum: 0,
                recommended: 0,
                safe: 0,
                note: None,
            },
            parts,
        }
    }

    #[test]
    fn the_table_says_not_reported_where_the_model_line_is_missing() {
        let half = ModelRecord {
            optimizer_state_bytes: None,
            ..resnet().unwrap()
        };
        let trials = [fit(64, resnet()), fit(128, None), fit(256, Some(half))];
        let trials: Vec<&TrialResult> = trials.iter().collect();
        let p = precision(MemoryParts::of(&trials), MemoryFit::of(&trials));
        let table = parts_table(std::slice::from_ref(&p)).markdown();
        let rows: Vec<&str> = table.lines().skip(2).collect();
        assert_eq!(rows.len(), 3, "{table}");
        assert!(rows[0].contains(" 0.047 GB |"), "{table}");
        assert!(rows[0].contains(" 1.280 GB |"), "activations: {table}");
        assert!(!rows[0].contains(NOT_REPORTED), "{table}");
        assert_eq!(rows[1].matches(NOT_REPORTED).count(), 4, "{table}");
        assert!(rows[1].contains(" 0.500 GB |"), "NVML still: {table}");
        assert!(rows[1].contains(" 20.00 MB |"), "the slope still: {table}");
        assert_eq!(rows[2].matches(NOT_REPORTED).count(), 1, "{table}");
        // The line's fixed part set beside the model's.
        let fixed = fixed_part(&p).unwrap();
        assert!(
            fixed.contains("bytes per sample 20.00 MB")
                && fixed.contains("fixed part 0.140 GB against 0.140 GB"),
            "{fixed}"
        );
        let none = precision(MemoryParts::of(&trials[1..2]), MemoryFit::of(&trials[1..2]));
        assert_eq!(
            fixed_part(&none),
            None,
            "no model line, nothing to set beside"
        );
    }
}
