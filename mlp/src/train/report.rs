//! The report the tuner reads: one JSON object per line, appended to the file named by
//! `PERF_LESSONS_REPORT` (nothing is written when it is unset). A `device` line once the CUDA
//! context exists, one line per optimizer step (warmup included), an `end` line. Each line is
//! one write of the whole line to a file opened for appending, so a reader never sees half a
//! line from a program that is still running, and a killed program loses at most the line it
//! was writing.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;

use common::error::Error;
use common::Result;

/// The variable naming the report file.
pub const REPORT_ENV: &str = "PERF_LESSONS_REPORT";

/// The GPU as the program holds it, before the model is built.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeviceLine {
    pub name: String,
    pub total_bytes: u64,
    pub free_bytes: u64,
}

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

/// One optimizer step.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepLine {
    /// Samples the step consumed: batch x accumulation.
    pub samples: u64,
    pub step_s: f64,
    #[serde(flatten)]
    pub phases: StepPhases,
    /// The most device memory the program has held so far.
    pub peak_memory_bytes: u64,
    /// Device memory the program holds at the end of the step.
    pub memory_in_use_bytes: u64,
    /// Share of the step the GPU was working (absent when it could not be measured).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_busy: Option<f64>,
}

impl StepLine {
    pub fn new(
        samples: usize,
        phases: StepPhases,
        (peak, in_use): (u64, u64),
        compute_s: Option<f64>,
    ) -> StepLine {
        let step_s = phases.step_s();
        StepLine {
            samples: samples as u64,
            step_s,
            phases,
            peak_memory_bytes: peak,
            memory_in_use_bytes: in_use,
            gpu_busy: compute_s.and_then(|c| busy_share(c, step_s)),
        }
    }
}

/// The closing line.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EndLine {
    pub samples_per_s: Option<f64>,
    pub peak_memory_bytes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_busy: Option<f64>,
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
    pub fn add(&mut self, line: &StepLine) {
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

/// Where the lines go: a file opened for appending, or nowhere.
pub struct Report {
    file: Option<(File, PathBuf)>,
}

impl Report {
    /// The file `PERF_LESSONS_REPORT` names; nowhere when it is unset or empty.
    pub fn from_env() -> Result<Report> {
        Report::open(std::env::var_os(REPORT_ENV).as_deref().map(Path::new))
    }

    /// Append to `path` (created if missing); nowhere for None or an empty path.
    pub fn open(path: Option<&Path>) -> Result<Report> {
        let Some(path) = path.filter(|p| !p.as_os_str().is_empty()) else {
            return Ok(Report { file: None });
        };
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| Error::File {
                path: path.display().to_string(),
                message: format!("cannot open the report file ({REPORT_ENV}): {e}"),
            })?;
        Ok(Report {
            file: Some((file, path.to_path_buf())),
        })
    }

    pub fn is_enabled(&self) -> bool {
        self.file.is_some()
    }

    pub fn device(&mut self, line: &DeviceLine) -> Result<()> {
        self.write(&Tagged {
            kind: "device",
            line,
        })
    }

    pub fn step(&mut self, line: &StepLine) -> Result<()> {
        self.write(line)
    }

    pub fn end(&mut self, line: &EndLine) -> Result<()> {
        self.write(&Tagged { kind: "end", line })
    }

    fn write(&mut self, value: &impl Serialize) -> Result<()> {
        let Some((file, path)) = self.file.as_mut() else {
            return Ok(());
        };
        let mut line = serde_json::to_vec(value).map_err(|e| Error::invalid(e.to_string()))?;
        line.push(b'\n');
        // One write of the whole line; a File has no buffer of its own, so it is in the file
        // when this returns.
        file.write_all(&line).map_err(|e| Error::File {
            path: path.display().to_string(),
            message: format!("cannot write the report: {e}"),
        })
    }
}

/// A line with its `kind` first.
#[derive(Serialize)]
struct Tagged<'a, T: Serialize> {
    kind: &'static str,
    #[serde(flatten)]
    line: &'a T,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

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
        let line = StepLine::new(256, phases(), (10, 5), Some(0.004));
        assert_eq!(line.gpu_busy, Some(0.5));
        assert_eq!(StepLine::new(256, phases(), (10, 5), None).gpu_busy, None);
    }

    #[test]
    fn totals_count_samples_over_the_summed_step_times() {
        let mut t = Totals::default();
        assert_eq!(t.samples_per_s(), None);
        for _ in 0..4 {
            t.add(&StepLine::new(256, phases(), (1, 1), None));
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
        r.device(&DeviceLine {
            name: "NVIDIA H100 80GB HBM3".into(),
            total_bytes: 85_017_755_648,
            free_bytes: 84_340_310_016,
        })
        .unwrap();
        // Read back while the writer is still open: nothing waits in a buffer.
        let device = &lines(&path)[0];
        assert_eq!(device["kind"], "device");
        assert_eq!(device["name"], "NVIDIA H100 80GB HBM3");
        assert_eq!(device["total_bytes"], 85_017_755_648u64);
        assert_eq!(device["free_bytes"], 84_340_310_016u64);

        r.step(&StepLine::new(512, phases(), (3_000, 2_000), Some(0.004)))
            .unwrap();
        r.step(&StepLine::new(512, phases(), (3_000, 2_000), None))
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

        r.end(&EndLine {
            samples_per_s: Some(64_000.0),
            peak_memory_bytes: 3_000,
            gpu_busy: Some(0.5),
        })
        .unwrap();
        let end = &lines(&path)[3];
        assert_eq!(end["kind"], "end");
        assert_eq!(end["samples_per_s"], 64_000.0);
        assert_eq!(end["peak_memory_bytes"], 3_000);
        assert_eq!(end["gpu_busy"], 0.5);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.ends_with('\n') && text.lines().count() == 4);
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn an_existing_file_is_appended_to() {
        let path = scratch("append");
        std::fs::write(&path, "{\"kind\": \"note\"}\n").unwrap();
        let mut r = Report::open(Some(&path)).unwrap();
        r.step(&StepLine::new(8, phases(), (1, 1), None)).unwrap();
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
            r.step(&StepLine::new(8, phases(), (1, 1), None)).unwrap();
            r.end(&EndLine {
                samples_per_s: None,
                peak_memory_bytes: 0,
                gpu_busy: None,
            })
            .unwrap();
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
