//! Where each step's time goes, so that the noise of the host-bound variants has a name: a
//! step mostly of host time carries the host's scheduling, and its noise, into every step.
//! Host share = 1 - compute / step, the two timed apart (the step as the median of whole runs,
//! the compute as the median replay of its graph), so a compute-bound step can read a little
//! under zero.

use serde::Serialize;

use common::report::{Section, VariantReport};
use common::stop::StopRule;
use common::table::{cell, format_ms, percent, Table};

/// Longest a sample of whole training runs is made to last (seconds).
pub const HOST_BOUND_SAMPLE_S: f64 = 0.25;

/// A step whose host share is at least this is called host-bound.
pub const HOST_BOUND_SHARE: f64 = 0.5;

/// The metrics the training lesson gives each variant.
pub const STEP_MS: &str = "step";
pub const COMPUTE_MS: &str = "compute/step";
pub const HOST_MS: &str = "host/step";
pub const HOST_SHARE: &str = "host share";

/// Samples that fit in a rule's time cap at the least (the default rule's least number).
pub const SAMPLES_IN_CAP: usize = 20;

/// The shortest time a sample of whole runs should span under `stop`: long enough to average
/// a scheduling hiccup over several runs rather than land on one, short enough that
/// [SAMPLES_IN_CAP] samples fit in its time cap, whatever its least number of samples.
pub fn sample_time(stop: &StopRule) -> f64 {
    (stop.max_time_s / SAMPLES_IN_CAP as f64).min(HOST_BOUND_SAMPLE_S)
}

/// (ms, share) of the host in a step whose compute alone takes `compute_ms`.
pub fn host_part(step_ms: f64, compute_ms: f64) -> (f64, f64) {
    let host = step_ms - compute_ms;
    (host, host / step_ms)
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepSplit {
    pub variant: String,
    pub step_ms: f64,
    pub compute_ms: f64,
    pub host_ms: f64,
    pub host_share: f64,
    /// Relative standard deviation of its samples.
    pub noise: f64,
    pub runs_per_sample: usize,
    /// The CPU core the measuring thread was kept on, when it was.
    pub cpu: Option<usize>,
}

impl StepSplit {
    pub fn of(v: &VariantReport) -> Option<StepSplit> {
        let (step_ms, compute_ms) = (v.metric(STEP_MS)?, v.metric(COMPUTE_MS)?);
        let (host_ms, host_share) = host_part(step_ms, compute_ms);
        let m = v.measurement.as_ref()?;
        Some(StepSplit {
            variant: v.name.clone(),
            step_ms,
            compute_ms,
            host_ms,
            host_share,
            noise: v.time_ms.as_ref()?.rel_stddev,
            runs_per_sample: m.batch,
            cpu: m.cpu,
        })
    }

    pub fn host_bound(&self) -> bool {
        self.host_share >= HOST_BOUND_SHARE
    }
}

pub fn section(variants: &[VariantReport]) -> Section {
    let splits: Vec<StepSplit> = variants.iter().filter_map(StepSplit::of).collect();
    let mut table = Table::new()
        .left("variant")
        .right("step")
        .right("device compute")
        .right("host (GPU waits)")
        .right("host share")
        .right("run noise")
        .right("runs/sample")
        .left("bound by");
    for s in &splits {
        table.row(vec![
            s.variant.clone(),
            format_ms(s.step_ms),
            format_ms(s.compute_ms),
            format_ms(s.host_ms),
            percent(s.host_share),
            percent(s.noise),
            s.runs_per_sample.to_string(),
            if s.host_bound() { "host" } else { "device" }.into(),
        ]);
    }
    let mut lines = vec![
        "host share = 1 - compute / step: the part of each step in which the GPU does not run the step's GEMMs and kernels but waits for the host (allocations, pageable copies, launches, synchronizations); compute is the step's kernels alone replayed as a graph, so a compute-bound step can read slightly under 0%".to_string(),
        format!(
            "a variant is host-bound when the host share is {} or more: the host's scheduling is in every one of its steps, and its run noise (relative standard deviation of samples of whole runs) is the host's",
            percent(HOST_BOUND_SHARE)
        ),
    ];
    let mut cpus: Vec<Option<usize>> = splits.iter().map(|s| s.cpu).collect();
    cpus.sort_unstable();
    cpus.dedup();
    let cpu_list = || {
        cpus.iter()
            .map(|c| cell(*c, |c| c.to_string()))
            .collect::<Vec<_>>()
    };
    lines.extend(match cpus[..] {
        [] => None,
        [Some(cpu)] => Some(format!("measuring thread kept on CPU {cpu}")),
        [None] => Some("measuring thread not pinned: the OS did not allow it".into()),
        _ => Some(format!(
            "measuring thread on CPUs {}",
            cpu_list().join(", ")
        )),
    });
    Section {
        table: Some(table),
        lines,
        data: serde_json::to_value(&splits).unwrap_or_default(),
        ..Section::new("training: where each step's time goes")
    }
}
