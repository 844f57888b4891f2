//! What the tuner makes of a trial's report: its throughput, the time split, the checks
//! against the program's own count and the tuner's clock. The protocol itself (the records, how
//! a file is read) is [common::protocol], shared with the programs that write it.

use serde::{Deserialize, Serialize};

use common::named::Named;
use common::stats::Summary;

pub use common::protocol::{
    step_of, DeviceRecord, EndRecord, Metrics, ModelRecord, ReportFile, ReportHealth, StepRecord,
};

/// Where a trial's samples/s came from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ThroughputSource {
    /// The reported steps after warmup: their samples over their summed step times.
    Protocol,
    /// Nothing reported: samples of every step the program was told to run over the wall
    /// time of the whole process, start-up included (so an underestimate).
    WallClock,
    /// Nothing to go on (no steps after warmup, or a trial that did not finish).
    #[default]
    None,
}

/// Samples per second on the tuner's clock, and on the program's over the same steps: the
/// measured steps after the first, up to the last one whose line was seen while the program
/// ran, over the time from the first measured step's line to that one's. The clock starts at a
/// line of a measured step, not at the last warmup step's: what a program does between its
/// warmup and its first measured step (emptying its allocator's cache, resetting its peak) is
/// in no step, and under several trials at once it can take a good part of a short trial. None
/// without two measured lines seen, or time between them.
fn clock_rates(steps: &[StepRecord], warmup: usize, arrivals: &[f64]) -> Option<(f64, f64)> {
    let last = arrivals.len().min(steps.len()).checked_sub(1)?;
    if last <= warmup {
        return None;
    }
    let seconds = arrivals[last] - arrivals[warmup];
    let counted = &steps[warmup + 1..=last];
    let samples = counted.iter().map(|s| s.samples).sum::<u64>() as f64;
    let theirs: f64 = counted.iter().map(|s| s.step_s).sum();
    (seconds > 0.0 && theirs > 0.0).then(|| (samples / seconds, samples / theirs))
}

/// The allocated peak of the last step that gave one: the steady step's (the first step's may
/// hold an autotuner's trial workspaces).
pub fn last_allocated(report: &ReportFile) -> Option<u64> {
    report
        .steps
        .iter()
        .rev()
        .find_map(|s| s.peak_allocated_bytes)
}

/// A trial's throughput and time split.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Measured {
    pub source: ThroughputSource,
    pub samples_per_s: Option<f64>,
    /// Steps reported in all, and how many of them were dropped as warmup.
    pub reported_steps: usize,
    pub warmup_steps: usize,
    /// Per-step times of the measured steps (milliseconds).
    pub step_ms: Option<Summary>,
    pub data_ms: Option<Summary>,
    pub forward_ms: Option<Summary>,
    pub backward_ms: Option<Summary>,
    pub optimizer_ms: Option<Summary>,
    /// Highest peak the framework reported (any line, warmup included).
    pub framework_peak_bytes: Option<u64>,
    /// The last step's allocated peak (`peak_allocated_bytes`), where the program gives it: what
    /// the steady step's tensors held, the allocator's cache left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocated_peak_bytes: Option<u64>,
    /// The program's own samples/s (its end line).
    pub program_samples_per_s: Option<f64>,
    /// ours / the program's - 1 (0.01 = we count 1% more).
    pub program_difference: Option<f64>,
    /// The tuner's own clock: the samples of the measured steps after the first over the time
    /// from the first measured step's line to the last step line seen while the program ran,
    /// each as the tuner first saw it in the report. Needs two measured lines that arrived
    /// over time.
    pub clock_samples_per_s: Option<f64>,
    /// The program's step times against the tuner's clock over the same steps, - 1: a program
    /// whose steps do not add up to its loop (a step time that leaves out the data wait, say)
    /// shows here.
    pub clock_difference: Option<f64>,
    /// The GPU as the program reported it.
    pub device: Option<DeviceRecord>,
    /// The share of the measured steps the GPU was working, as the program measured it: the
    /// median of its steps' figures, else its end line's.
    pub gpu_busy: Option<f64>,
    /// Where the model's memory goes, as the program counted it (its last model line).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelRecord>,
    /// The program's own figures: the last value of each over its lines, warmup included, the
    /// end line's where it gave one.
    #[serde(default, skip_serializing_if = "Named::is_empty")]
    pub metrics: Metrics,
}

impl Measured {
    /// Summarize `report`, dropping the first `warmup` steps. Without any reported step,
    /// `wall` (samples the program was told to run, seconds the process took) gives the
    /// wall-clock estimate. `arrivals` are the seconds (from any origin) at which the tuner first
    /// saw each step line while the program ran, in order: the tuner's own clock.
    pub fn from_report(
        report: &ReportFile,
        warmup: usize,
        wall: Option<(u64, f64)>,
        arrivals: &[f64],
    ) -> Measured {
        let measured = report.steps.get(warmup..).unwrap_or(&[]);
        let ms = |f: &dyn Fn(&StepRecord) -> Option<f64>| -> Option<Summary> {
            let v: Vec<f64> = measured.iter().filter_map(f).map(|s| s * 1e3).collect();
            // A phase some steps lack is not summarized from the others: it would mislead.
            (v.len() == measured.len())
                .then(|| Summary::of(&v))
                .flatten()
        };
        let (source, samples_per_s) = match wall {
            _ if !measured.is_empty() => {
                let samples: u64 = measured.iter().map(|s| s.samples).sum();
                let seconds: f64 = measured.iter().map(|s| s.step_s).sum();
                (ThroughputSource::Protocol, Some(samples as f64 / seconds))
            }
            Some((samples, secs)) if report.steps.is_empty() && samples > 0 && secs > 0.0 => {
                (ThroughputSource::WallClock, Some(samples as f64 / secs))
            }
            // Nothing to go on; or it reported, but only warmup steps: no honest figure.
            _ => (ThroughputSource::None, None),
        };
        let from_steps = source == ThroughputSource::Protocol;
        let (steps, end) = (&report.steps, report.end.as_ref());
        let program_samples_per_s = end.and_then(|e| e.samples_per_s);
        let clock = clock_rates(steps, warmup, arrivals).filter(|_| from_steps);
        let mut metrics = Metrics::default();
        let lines = (steps.iter().map(|s| &s.metrics)).chain(end.map(|e| &e.metrics));
        for (name, value) in lines.flat_map(Metrics::iter) {
            metrics.set(name, *value);
        }
        let program_difference = (samples_per_s.zip(program_samples_per_s))
            .filter(|&(_, theirs)| theirs > 0.0 && from_steps)
            .map(|(ours, theirs)| ours / theirs - 1.0);
        Measured {
            source,
            samples_per_s,
            reported_steps: steps.len(),
            warmup_steps: warmup.min(steps.len()),
            step_ms: ms(&|s| Some(s.step_s)),
            data_ms: ms(&|s| s.data_s),
            forward_ms: ms(&|s| s.forward_s),
            backward_ms: ms(&|s| s.backward_s),
            optimizer_ms: ms(&|s| s.optimizer_s),
            framework_peak_bytes: (steps.iter().filter_map(|s| s.peak_memory_bytes))
                .chain(end.and_then(|e| e.peak_memory_bytes))
                .max(),
            allocated_peak_bytes: last_allocated(report),
            program_samples_per_s,
            program_difference,
            clock_samples_per_s: clock.map(|(tuner, _)| tuner),
            clock_difference: clock.map(|(tuner, program)| program / tuner - 1.0),
            device: report.device.clone(),
            gpu_busy: ms(&|s| s.gpu_busy.map(|b| b / 1e3))
                .map(|m| m.median)
                .or(end.and_then(|e| e.gpu_busy)),
            model: report.model,
            metrics,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn steps(times: &[f64], samples: u64) -> ReportFile {
        ReportFile {
            steps: times
                .iter()
                .map(|&t| StepRecord {
                    samples,
                    step_s: t,
                    data_s: Some(t / 10.0),
                    forward_s: Some(t / 2.0),
                    peak_memory_bytes: Some((t * 1e6) as u64),
                    ..StepRecord::default()
                })
                .collect(),
            ..ReportFile::default()
        }
    }

    #[test]
    fn throughput_comes_from_the_steps_after_warmup() {
        // Two slow warmup steps, then four of 0.1 s with 100 samples each: 1000 samples/s.
        let mut r = steps(&[5.0, 1.0, 0.1, 0.1, 0.1, 0.1], 100);
        r.end = Some(EndRecord {
            samples_per_s: Some(990.0),
            ..EndRecord::default()
        });
        let m = Measured::from_report(&r, 2, Some((600, 100.0)), &[]);
        assert_eq!(m.source, ThroughputSource::Protocol);
        assert!((m.samples_per_s.unwrap() - 1000.0).abs() < 1e-9);
        assert_eq!((m.reported_steps, m.warmup_steps), (6, 2));
        let step = m.step_ms.unwrap();
        assert_eq!(step.samples, 4);
        assert!((step.median - 100.0).abs() < 1e-9);
        assert!((m.data_ms.unwrap().median - 10.0).abs() < 1e-9);
        assert!((m.forward_ms.unwrap().median - 50.0).abs() < 1e-9);
        assert!(m.backward_ms.is_none(), "not reported");
        assert_eq!(
            m.framework_peak_bytes,
            Some(5_000_000),
            "warmup peaks count"
        );
        assert_eq!(m.allocated_peak_bytes, None, "not reported");
        // The allocated peak is the last step's that gave one: the first step's (an autotuner
        // timing its algorithms) does not stand for the steady steps.
        r.steps[0].peak_allocated_bytes = Some(9_000_000);
        r.steps[4].peak_allocated_bytes = Some(2_000_000);
        let m = Measured::from_report(&r, 2, None, &[]);
        assert_eq!(m.allocated_peak_bytes, Some(2_000_000));
        assert_eq!(m.program_samples_per_s, Some(990.0));
        assert!((m.program_difference.unwrap() - (1000.0 / 990.0 - 1.0)).abs() < 1e-12);
    }

    #[test]
    fn the_tuner_s_clock_runs_from_the_first_measured_line_to_the_last_line_seen() {
        // Two warmup steps, four of 0.1 s reported, 100 samples each.
        let r = steps(&[5.0, 1.0, 0.1, 0.1, 0.1, 0.1], 100);
        // The lines arrived 0.2 s apart: the program's step times leave out half of its loop.
        let arrivals = [5.0, 6.0, 6.2, 6.4, 6.6, 6.8];
        let m = Measured::from_report(&r, 2, None, &arrivals);
        assert!((m.clock_samples_per_s.unwrap() - 300.0 / 0.6).abs() < 1e-9);
        assert!((m.clock_difference.unwrap() - 1.0).abs() < 1e-9);
        // The program paused 0.3 s between its warmup and its first measured step (emptying
        // its cache, say), in no step: its steps still add up to its loop, and the check holds.
        // Counted from the last warmup line, that pause made a 0.7 s clock of 0.4 s of steps.
        let paused = [5.0, 6.0, 6.4, 6.5, 6.6, 6.7];
        let m = Measured::from_report(&r, 2, None, &paused);
        assert!(m.clock_difference.unwrap().abs() < 1e-9, "{m:?}");
        assert!((m.clock_samples_per_s.unwrap() - 1000.0).abs() < 1e-6);
        // The last two lines came only after the program ended: the clock stops at the last
        // line seen while it ran.
        let m = Measured::from_report(&r, 2, None, &paused[..4]);
        assert!((m.clock_samples_per_s.unwrap() - 100.0 / 0.1).abs() < 1e-6);
        // Without warmup the clock starts at the first line.
        let m = Measured::from_report(&r, 0, None, &[0.0, 5.0, 6.0, 6.1, 6.2, 6.3]);
        assert!((m.clock_samples_per_s.unwrap() - 500.0 / 6.3).abs() < 1e-9);
        // One measured line seen, none, or every line at once: no clock.
        for seen in [3, 0] {
            let m = Measured::from_report(&r, 2, None, &arrivals[..seen]);
            assert_eq!(m.clock_samples_per_s, None, "{seen} seen");
            assert_eq!(m.clock_difference, None);
        }
        let m = Measured::from_report(&r, 2, None, &[7.0; 6]);
        assert_eq!(m.clock_samples_per_s, None);
    }

    #[test]
    fn without_reports_the_wall_clock_is_used_and_said() {
        let m = Measured::from_report(&ReportFile::default(), 2, Some((6400, 8.0)), &[]);
        assert_eq!(m.source, ThroughputSource::WallClock);
        assert_eq!(m.samples_per_s, Some(800.0));
        assert!(m.step_ms.is_none() && m.program_difference.is_none());
        let m = Measured::from_report(&ReportFile::default(), 2, None, &[]);
        assert_eq!((m.source, m.samples_per_s), (ThroughputSource::None, None));
        // Reported, but only warmup: no figure rather than a wrong one.
        let m = Measured::from_report(&steps(&[1.0, 1.0], 10), 5, Some((100, 1.0)), &[]);
        assert_eq!((m.source, m.samples_per_s), (ThroughputSource::None, None));
        assert_eq!(m.warmup_steps, 2);
    }

    #[test]
    fn metrics_keep_their_last_value_and_the_end_line_s_over_the_steps() {
        let r = ReportFile::parse(concat!(
            "{\"samples\": 8, \"step_s\": 0.1, \"metrics\": {\"loss\": 2.5, \"acc\": 0.1}}\n",
            "{\"samples\": 8, \"step_s\": 0.1, \"metrics\": {\"loss\": 2.0, \"grad_norm\": null}}\n",
            "{\"samples\": 8, \"step_s\": 0.1}\n",
            "{\"kind\": \"end\", \"metrics\": {\"acc\": 0.75}}\n",
        ));
        assert_eq!((r.steps.len(), r.health.bad_lines), (3, 0));
        let m = Measured::from_report(&r, 1, None, &[]).metrics;
        assert_eq!(m.get("loss"), Some(&Some(2.0)), "the last step's");
        assert_eq!(m.get("acc"), Some(&Some(0.75)), "the end line's");
        assert_eq!(m.get("grad_norm"), Some(&None), "not a number");
        assert_eq!(m.get("lr"), None);
        let order: Vec<&str> = m.names().collect();
        assert_eq!(
            order,
            ["loss", "acc", "grad_norm"],
            "as the program first gave them"
        );
        // Carried through JSON, null and all.
        let text = serde_json::to_string(&m).unwrap();
        assert_eq!(serde_json::from_str::<Metrics>(&text).unwrap(), m);
        // A later number replaces a null, a null a number: the last word counts.
        let r = ReportFile::parse(concat!(
            "{\"samples\": 8, \"step_s\": 0.1, \"metrics\": {\"loss\": null}}\n",
            "{\"samples\": 8, \"step_s\": 0.1, \"metrics\": {\"loss\": 1.5}}\n",
        ));
        let m = Measured::from_report(&r, 0, None, &[]).metrics;
        assert_eq!(m.get("loss"), Some(&Some(1.5)));
        // What is not a metric makes the line bad, said why.
        let long = "x".repeat(65);
        for (line, says) in [
            (
                "{\"samples\": 8, \"step_s\": 0.1, \"metrics\": [1]}",
                "'metrics' must be an object",
            ),
            (
                "{\"samples\": 8, \"step_s\": 0.1, \"metrics\": {\"loss\": \"low\"}}",
                "metric 'loss' must be a number",
            ),
            ("{\"kind\": \"end\", \"metrics\": {\"\": 1}}", "metric name"),
            (
                &format!("{{\"kind\": \"end\", \"metrics\": {{\"{long}\": 1}}}}"),
                "metric name",
            ),
        ] {
            let r = ReportFile::parse(line);
            assert_eq!(r.health.bad_lines, 1, "{line}");
            assert!(
                r.health.first_bad[0].reason.contains(says),
                "{line}: {:?}",
                r.health.first_bad
            );
        }
        let many: Vec<String> = (0..17).map(|i| format!("\"m{i}\": 1")).collect();
        let r = ReportFile::parse(&format!(
            "{{\"kind\": \"end\", \"metrics\": {{{}}}}}",
            many.join(",")
        ));
        assert!(r.health.first_bad[0].reason.contains("at most 16"));
    }

    #[test]
    fn a_phase_some_steps_lack_is_not_summarized() {
        let mut r = steps(&[0.1, 0.1, 0.1], 10);
        r.steps[1].data_s = None;
        let m = Measured::from_report(&r, 0, None, &[]);
        assert!(m.data_ms.is_none());
        assert!(m.forward_ms.is_some());
    }
}
