//! The report the tuner reads, in the protocol's own records ([common::protocol]): a `device`
//! line once the CUDA context exists, one line per optimizer step (warmup included), an `end`
//! line, appended to the file named by `PERF_LESSONS_REPORT` (nothing is written when it is
//! unset). Here: the step's phases and the totals of the measured steps.

use serde::Serialize;

pub use common::protocol::{DeviceRecord, EndRecord, Report, StepRecord, REPORT_ENV};

/// Where one optimizer step's time went, on the training stream's clock: the GPU waiting for
/// the step's batches (the host preparing them and the copies), the forward and backward passes
/// of every micro-batch, and the optimizer. They add up to the step.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct StepPhases {
    pub data_s: f64,
    pub forward_s: f64,
    pub backward_s: f64,
    pub optimizer_s: f64,
}

impl StepPhases {
    /// Phases 0..3 of each micro-batch (data, forward, backward), then the optimizer, as
    /// milliseconds in recording order.
    pub fn from_phase_ms(ms: &[f64], accumulation: usize) -> StepPhases {
        assert_eq!(
            ms.len(),
            3 * accumulation + 1,
            "phases of another step shape"
        );
        let of = |phase: usize| -> f64 {
            ms.iter()
                .skip(phase)
                .step_by(3)
                .take(accumulation)
                .sum::<f64>()
                / 1e3
        };
        StepPhases {
            data_s: of(0),
            forward_s: of(1),
            backward_s: of(2),
            optimizer_s: ms[3 * accumulation] / 1e3,
        }
    }

    pub fn step_s(&self) -> f64 {
        self.data_s + self.forward_s + self.backward_s + self.optimizer_s
    }
}

/// One optimizer step's line: `samples` consumed (batch x accumulation), its phases (the step
/// is their sum), the memory the program has held at most so far and holds now, and the share
/// of the step the GPU was working where `compute_s` of work was measured.
pub fn step_line(
    samples: usize,
    phases: StepPhases,
    (peak, in_use): (u64, u64),
    compute_s: Option<f64>,
) -> StepRecord {
    let step_s = phases.step_s();
    StepRecord {
        samples: samples as u64,
        step_s,
        data_s: Some(phases.data_s),
        forward_s: Some(phases.forward_s),
        backward_s: Some(phases.backward_s),
        optimizer_s: Some(phases.optimizer_s),
        peak_memory_bytes: Some(peak),
        memory_in_use_bytes: Some(in_use),
        gpu_busy: compute_s.and_then(|c| busy_share(c, step_s)),
        ..StepRecord::default()
    }
}

/// `compute_s` of GPU work in a step of `step_s`: the share the GPU was busy, at most 1 (the
/// work measured on its own can take a little longer than inside the loop). None when either
/// is not a positive time.
pub fn busy_share(compute_s: f64, step_s: f64) -> Option<f64> {
    (compute_s > 0.0 && step_s > 0.0 && compute_s.is_finite() && step_s.is_finite())
        .then(|| (compute_s / step_s).min(1.0))
}

/// The measured steps (those after the warmup) summed up for the end line.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Totals {
    pub steps: usize,
    pub samples: u64,
    pub seconds: f64,
}

impl Totals {
    pub fn add(&mut self, line: &StepRecord) {
        self.steps += 1;
        self.samples += line.samples;
        self.seconds += line.step_s;
    }

    /// Samples per second over the measured steps, as the tuner computes it from the lines.
    pub fn samples_per_s(&self) -> Option<f64> {
        (self.seconds > 0.0).then(|| self.samples as f64 / self.seconds)
    }

    /// The share of the measured time the GPU was working, each step's work taking `compute_s`.
    pub fn gpu_busy(&self, compute_s: Option<f64>) -> Option<f64> {
        busy_share(compute_s? * self.steps as f64, self.seconds)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;
    use std::path::{Path, PathBuf};

    fn scratch(name: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!("mlp-train-{}-{name}.jsonl", std::process::id()));
        let _ = std::fs::remove_file(&p);
        p
    }

    fn lines(path: &Path) -> Vec<Value> {
        std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    fn phases() -> StepPhases {
        StepPhases {
            data_s: 0.001,
            forward_s: 0.002,
            backward_s: 0.004,
            optimizer_s: 0.001,
        }
    }

    #[test]
    fn phases_of_micro_batches_add_up_to_the_step() {
        // Two micro-batches: data, forward, backward each, then the optimizer.
        let p = StepPhases::from_phase_ms(&[1.0, 2.0, 4.0, 0.5, 2.0, 4.0, 1.5], 2);
        assert_eq!(p.data_s, 1.5e-3);
        assert_eq!(p.forward_s, 4e-3);
        assert_eq!(p.backward_s, 8e-3);
        assert_eq!(p.optimizer_s, 1.5e-3);
        assert!((p.step_s() - 15e-3).abs() < 1e-15);
        let one = StepPhases::from_phase_ms(&[1.0, 2.0, 3.0, 4.0], 1);
        assert_eq!((one.data_s, one.optimizer_s), (1e-3, 4e-3));
    }

    #[test]
    fn the_busy_share_is_the_work_over_the_step_and_at_most_one() {
        assert_eq!(busy_share(0.002, 0.008), Some(0.25));
        assert_eq!(busy_share(0.009, 0.008), Some(1.0));
        assert_eq!(busy_share(0.0, 0.008), None);
        assert_eq!(busy_share(0.002, 0.0), None);
        assert_eq!(busy_share(f64::NAN, 0.008), None);
        let line = step_line(256, phases(), (10, 5), Some(0.004));
        assert_eq!(line.gpu_busy, Some(0.5));
        assert_eq!(step_line(256, phases(), (10, 5), None).gpu_busy, None);
    }

    #[test]
    fn totals_count_samples_over_the_summed_step_times() {
        let mut t = Totals::default();
        assert_eq!(t.samples_per_s(), None);
        for _ in 0..4 {
            t.add(&step_line(256, phases(), (1, 1), None));
        }
        assert_eq!(t.steps, 4);
        assert!((t.samples_per_s().unwrap() - 1024.0 / 0.032).abs() < 1e-6);
        assert!((t.gpu_busy(Some(0.002)).unwrap() - 0.25).abs() < 1e-12);
        assert_eq!(t.gpu_busy(None), None);
    }

    #[test]
    fn every_line_has_its_fields_and_is_in_the_file_once_written() {
        let path = scratch("fields");
        let mut r = Report::open(Some(&path)).unwrap();
        assert!(r.is_enabled());
        r.device(&DeviceRecord {
            name: Some("NVIDIA H100 80GB HBM3".into()),
            total_bytes: Some(85_017_755_648),
            free_bytes: Some(84_340_310_016),
            ..DeviceRecord::default()
        })
        .unwrap();
        // Read back while the writer is still open: nothing waits in a buffer.
        let device = &lines(&path)[0];
        assert_eq!(device["kind"], "device");
        assert_eq!(device["name"], "NVIDIA H100 80GB HBM3");
        assert_eq!(device["total_bytes"], 85_017_755_648u64);
        assert_eq!(device["free_bytes"], 84_340_310_016u64);

        r.step(&step_line(512, phases(), (3_000, 2_000), Some(0.004)))
            .unwrap();
        r.step(&step_line(512, phases(), (3_000, 2_000), None))
            .unwrap();
        let all = lines(&path);
        assert_eq!(all.len(), 3);
        let step = &all[1];
        assert!(step.get("kind").is_none(), "a step line has no kind");
        assert_eq!(step["samples"], 512);
        let sum: f64 = ["data_s", "forward_s", "backward_s", "optimizer_s"]
            .iter()
            .map(|k| step[k].as_f64().unwrap())
            .sum();
        assert!((step["step_s"].as_f64().unwrap() - sum).abs() < 1e-15);
        assert_eq!(step["peak_memory_bytes"], 3_000);
        assert_eq!(step["memory_in_use_bytes"], 2_000);
        assert_eq!(step["gpu_busy"], 0.5);
        assert!(all[2].get("gpu_busy").is_none(), "absent, not null");

        r.end(&EndRecord {
            samples_per_s: Some(64_000.0),
            peak_memory_bytes: Some(3_000),
            gpu_busy: Some(0.5),
            ..EndRecord::default()
        })
        .unwrap();
        let end = &lines(&path)[3];
        assert_eq!(end["kind"], "end");
        assert_eq!(end["samples_per_s"], 64_000.0);
        assert_eq!(end["peak_memory_bytes"], 3_000);
        assert_eq!(end["gpu_busy"], 0.5);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.ends_with('\n') && text.lines().count() == 4);
        // Every line is the protocol's, field for field, as the tuner reads it.
        for line in text.lines() {
            common::protocol::check_line(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        }
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn an_existing_file_is_appended_to() {
        let path = scratch("append");
        std::fs::write(&path, "{\"kind\": \"note\"}\n").unwrap();
        let mut r = Report::open(Some(&path)).unwrap();
        r.step(&step_line(8, phases(), (1, 1), None)).unwrap();
        let all = lines(&path);
        assert_eq!((all.len(), all[0]["kind"].as_str()), (2, Some("note")));
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn without_a_file_nothing_is_written() {
        for mut r in [
            Report::open(None).unwrap(),
            Report::open(Some(Path::new(""))).unwrap(),
        ] {
            assert!(!r.is_enabled());
            r.step(&step_line(8, phases(), (1, 1), None)).unwrap();
            r.end(&EndRecord::default()).unwrap();
        }
    }

    #[test]
    fn a_report_file_that_cannot_be_opened_says_which() {
        let err = Report::open(Some(Path::new("/nonexistent-dir/report.jsonl")))
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("/nonexistent-dir/report.jsonl") && err.contains(REPORT_ENV));
    }
}
