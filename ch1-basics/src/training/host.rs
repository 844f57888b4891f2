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

#[cfg(test)]
mod tests {
    use super::*;
    use common::bench::Measurement;
    use common::counters::Work;
    use common::report::Metric;
    use common::stats::Summary;
    use common::verify::{check, Precision};

    #[test]
    fn samples_span_a_quarter_second_unless_the_time_cap_is_short() {
        assert_eq!(sample_time(&StopRule::default()), 0.25);
        // The compare's 2 s cap, whatever its least number of samples: 0.1 s; the quick
        // rule's 1 s: 0.05 s.
        let compare = StopRule {
            max_time_s: 2.0,
            min_samples: 10,
            ..StopRule::default()
        };
        assert!((sample_time(&compare) - 0.1).abs() < 1e-12);
        assert!((sample_time(&StopRule::quick()) - 0.05).abs() < 1e-12);
        let long = StopRule {
            max_time_s: 60.0,
            ..StopRule::default()
        };
        assert_eq!(sample_time(&long), HOST_BOUND_SAMPLE_S);
    }

    fn variant(name: &str, step_ms: f64, compute_ms: f64, cpu: Option<usize>) -> VariantReport {
        let mut v = VariantReport::checked(
            name,
            "",
            Precision::Fp32,
            vec![check(&[1.0f32], &[1.0], 1e-5, "ref")],
            Work::default(),
        );
        v.time_ms = Summary::of(&[64.0 * step_ms, 64.0 * step_ms * 1.1]);
        v.metrics = vec![
            Metric::new(STEP_MS, step_ms, "ms"),
            Metric::new(COMPUTE_MS, compute_ms, "ms"),
        ];
        v.measurement = Some(Measurement {
            batch: 3,
            held: false,
            cpu,
            ..common::testing::measurement(&[1.0])
        });
        v
    }

    #[test]
    fn the_section_names_host_bound_steps_and_where_the_thread_ran() {
        // A compute-bound step timed apart from its compute can read under zero.
        let (host, share) = host_part(0.0468, 0.0470);
        assert!(host < 0.0 && share < 0.0);
        let variants = vec![
            variant("baseline", 1.8, 0.25, Some(5)),
            variant("optimized", 0.047, 0.046, Some(5)),
            VariantReport::checked("failed", "", Precision::Fp32, vec![], Work::default()),
        ];
        let s = section(&variants);
        let md = common::table::unpadded(&s.markdown());
        assert_eq!(s.table.as_ref().unwrap().rows.len(), 2, "{md}");
        assert!(
            md.contains("| baseline | 1.800 ms | 250.00 us | 1.550 ms | 86.1% |"),
            "{md}"
        );
        assert!(md.contains("| 3 | host |"), "{md}");
        assert!(
            md.contains("| optimized |") && md.contains("| device |"),
            "{md}"
        );
        assert!(md.contains("measuring thread kept on CPU 5"), "{md}");
        assert_eq!(s.data[0]["host_share"], host_part(1.8, 0.25).1);
        let unpinned = section(&[variant("baseline", 1.8, 0.25, None)]).markdown();
        assert!(unpinned.contains("not pinned"), "{unpinned}");
    }
}
