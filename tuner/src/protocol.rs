//! The report file a program writes (one JSON object per line, see the module page of
//! [super]) and what the tuner makes of it. Reading never fails: a line that is not a valid
//! report (a killed program's half-written last line, stray text) is counted, the first few
//! are kept with the reason, and the rest of the file is used.

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use common::stats::Summary;

use crate::named::Named;

/// A program's own figures by name (`"metrics": {"loss": 2.31}` on a step or end line). None is
/// a value that was not a number (a loss that diverged: JSON has no NaN, so it comes as null).
pub type Metrics = Named<Option<f64>>;

/// Most metrics one line may carry, and the longest name: a table shows a column for each.
const MAX_METRICS: usize = 16;
const MAX_METRIC_NAME: usize = 64;

/// One optimizer step as the program reported it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    pub samples: u64,
    /// Seconds: `step_s`, or `end_s - start_s`.
    pub step_s: f64,
    pub data_s: Option<f64>,
    pub forward_s: Option<f64>,
    pub backward_s: Option<f64>,
    pub optimizer_s: Option<f64>,
    /// Peak device memory the framework saw (bytes).
    pub peak_memory_bytes: Option<u64>,
    /// The share of the step the GPU was working (0..1), as the program measured it.
    #[serde(default)]
    pub gpu_busy: Option<f64>,
    #[serde(default, skip_serializing_if = "Named::is_empty")]
    pub metrics: Metrics,
}

/// The program's closing line, `"kind": "end"`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EndRecord {
    /// The program's own count of samples per second.
    pub samples_per_s: Option<f64>,
    pub peak_memory_bytes: Option<u64>,
    /// The share of the measured steps the GPU was working (0..1).
    #[serde(default)]
    pub gpu_busy: Option<f64>,
    /// Figures of the whole run (a final evaluation's loss): they stand over the steps' last.
    #[serde(default, skip_serializing_if = "Named::is_empty")]
    pub metrics: Metrics,
}

/// The program's `"kind": "device"` line: the GPU as the framework sees it, written once the
/// framework holds the GPU (its context exists) and before the model is built.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DeviceRecord {
    pub name: Option<String>,
    pub total_bytes: Option<u64>,
    /// Free device memory at that moment: what the training can have.
    pub free_bytes: Option<u64>,
    /// The framework and its version, as the program names it ("torch 2.11.0+cu130, CUDA 13.0").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub framework: Option<String>,
}

/// The program's `"kind": "model"` line: where the model's memory goes, in bytes, counted by the
/// program from its model and optimizer once they exist (after the first optimizer step).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelRecord {
    pub parameter_bytes: Option<u64>,
    /// The gradients of the parameters that take one.
    pub gradient_bytes: Option<u64>,
    /// The optimizer's state (momentum, Adam's moments) on the device.
    pub optimizer_state_bytes: Option<u64>,
}

impl ModelRecord {
    /// Parameters, gradients and optimizer state together, where all three were reported.
    pub fn total_bytes(&self) -> Option<u64> {
        Some(
            self.parameter_bytes?
                .saturating_add(self.gradient_bytes?)
                .saturating_add(self.optimizer_state_bytes?),
        )
    }
}

/// A line that was not used, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BadLine {
    /// 1-based.
    pub line: usize,
    pub reason: String,
}

/// Everything read from a report file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReportFile {
    pub steps: Vec<StepRecord>,
    pub end: Option<EndRecord>,
    pub device: Option<DeviceRecord>,
    /// The last model line.
    #[serde(default)]
    pub model: Option<ModelRecord>,
    #[serde(flatten)]
    pub health: ReportHealth,
}

/// How the report file read, without what it reported.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReportHealth {
    /// Non-empty lines in the file.
    pub lines: usize,
    /// Lines that were not valid reports.
    pub bad_lines: usize,
    /// The first few of them.
    pub first_bad: Vec<BadLine>,
    /// The last line had no newline and was not valid: a write cut short by a kill.
    pub truncated_last_line: bool,
    /// Lines of a kind this version does not know (ignored, not bad).
    pub unknown_kinds: usize,
}

const KEEP_BAD: usize = 5;

impl ReportFile {
    /// Read `path`; a missing file is a program that reported nothing.
    pub fn read(path: &Path) -> ReportFile {
        match std::fs::read(path) {
            Ok(bytes) => ReportFile::parse(&String::from_utf8_lossy(&bytes)),
            Err(_) => ReportFile::default(),
        }
    }

    pub fn parse(text: &str) -> ReportFile {
        let mut r = ReportFile::default();
        let h = &mut r.health;
        let mut last_bad = false;
        let lines = text.split('\n').enumerate();
        for (i, line) in lines.filter(|(_, l)| !l.trim().is_empty()) {
            h.lines += 1;
            last_bad = false;
            match parse_line(line) {
                Ok(Line::Step(s)) => r.steps.push(s),
                Ok(Line::End(e)) => r.end = Some(e),
                Ok(Line::Device(d)) => r.device = Some(d),
                Ok(Line::Model(m)) => r.model = Some(m),
                Ok(Line::Unknown) => h.unknown_kinds += 1,
                Err(reason) => {
                    h.bad_lines += 1;
                    last_bad = true;
                    if h.first_bad.len() < KEEP_BAD {
                        h.first_bad.push(BadLine {
                            line: i + 1,
                            reason,
                        });
                    }
                }
            }
        }
        h.truncated_last_line = last_bad && !text.ends_with('\n');
        r
    }
}

enum Line {
    Step(StepRecord),
    End(EndRecord),
    Device(DeviceRecord),
    Model(ModelRecord),
    Unknown,
}

fn parse_line(line: &str) -> Result<Line, String> {
    let value: Value = serde_json::from_str(line.trim()).map_err(|e| {
        let shown: String = line.trim().chars().take(60).collect();
        format!("not JSON ({e}): {shown}")
    })?;
    let Value::Object(o) = value else {
        return Err("not a JSON object".into());
    };
    let kind = match o.get("kind") {
        None => "step",
        Some(Value::String(k)) => k.as_str(),
        Some(_) => return Err("'kind' must be a string".into()),
    };
    match kind {
        "step" => step(line, &o).map(Line::Step),
        "end" => Ok(Line::End(EndRecord {
            samples_per_s: seconds_like(&o, "samples_per_s")?,
            peak_memory_bytes: whole(&o, "peak_memory_bytes")?,
            gpu_busy: share(&o, "gpu_busy")?,
            metrics: metrics(line, &o)?,
        })),
        "device" => Ok(Line::Device(DeviceRecord {
            name: text(&o, "name")?,
            total_bytes: whole(&o, "total_bytes")?,
            free_bytes: whole(&o, "free_bytes")?,
            framework: text(&o, "framework")?,
        })),
        "model" => Ok(Line::Model(ModelRecord {
            parameter_bytes: whole(&o, "parameter_bytes")?,
            gradient_bytes: whole(&o, "gradient_bytes")?,
            optimizer_state_bytes: whole(&o, "optimizer_state_bytes")?,
        })),
        _ => Ok(Line::Unknown),
    }
}

fn step(line: &str, o: &Map<String, Value>) -> Result<StepRecord, String> {
    let samples = whole(o, "samples")?.ok_or("a step needs 'samples'")?;
    let step_s = match (
        seconds_like(o, "step_s")?,
        seconds_like(o, "start_s")?,
        seconds_like(o, "end_s")?,
    ) {
        (Some(s), _, _) => s,
        (None, Some(a), Some(b)) if b >= a => b - a,
        (None, Some(_), Some(_)) => return Err("'end_s' is before 'start_s'".into()),
        _ => return Err("a step needs 'step_s' or 'start_s' and 'end_s'".into()),
    };
    if step_s <= 0.0 {
        return Err(format!("a step of {step_s} s"));
    }
    Ok(StepRecord {
        samples,
        step_s,
        data_s: seconds_like(o, "data_s")?,
        forward_s: seconds_like(o, "forward_s")?,
        backward_s: seconds_like(o, "backward_s")?,
        optimizer_s: seconds_like(o, "optimizer_s")?,
        peak_memory_bytes: whole(o, "peak_memory_bytes")?,
        gpu_busy: share(o, "gpu_busy")?,
        metrics: metrics(line, o)?,
    })
}

/// `"metrics": {"loss": 2.31, "accuracy": 0.5}`: numbers by name, null for one that is not a
/// number, in the order the line gives them (read from the line again: a parsed object keeps
/// its keys sorted).
fn metrics(line: &str, o: &Map<String, Value>) -> Result<Metrics, String> {
    match o.get("metrics") {
        None | Some(Value::Null) => return Ok(Metrics::default()),
        Some(Value::Object(_)) => {}
        Some(v) => {
            return Err(format!(
                "'metrics' must be an object of numbers by name, found {v}"
            ))
        }
    }
    #[derive(Deserialize)]
    struct InOrder {
        metrics: Named<Value>,
    }
    let m = serde_json::from_str::<InOrder>(line.trim())
        .map_err(|e| format!("'metrics': {e}"))?
        .metrics;
    if m.0.len() > MAX_METRICS {
        return Err(format!(
            "{} metrics on one line: at most {MAX_METRICS}",
            m.0.len()
        ));
    }
    let mut out = Metrics::default();
    for (name, v) in m.iter() {
        if name.trim().is_empty() || name.chars().count() > MAX_METRIC_NAME {
            return Err(format!(
                "metric name '{name}': give 1 to {MAX_METRIC_NAME} characters"
            ));
        }
        let value = match v {
            Value::Null => None,
            v => match v.as_f64() {
                Some(x) => Some(x),
                None => {
                    return Err(format!(
                        "metric '{name}' must be a number or null, found {v}"
                    ))
                }
            },
        };
        out.set(name, value);
    }
    Ok(out)
}

/// A step line's record, or None for any other line (used while the program runs; the whole
/// file is read again at the end).
pub fn step_of(line: &str) -> Option<StepRecord> {
    match parse_line(line) {
        Ok(Line::Step(s)) => Some(s),
        _ => None,
    }
}

fn share(o: &Map<String, Value>, key: &str) -> Result<Option<f64>, String> {
    match seconds_like(o, key)? {
        Some(x) if x > 1.0 => Err(format!("'{key}' must be a share in 0..1, found {x}")),
        v => Ok(v),
    }
}

/// A non-negative finite number, or absent (null counts as absent).
fn seconds_like(o: &Map<String, Value>, key: &str) -> Result<Option<f64>, String> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_f64() {
            Some(x) if x.is_finite() && x >= 0.0 => Ok(Some(x)),
            _ => Err(format!("'{key}' must be a non-negative number, found {v}")),
        },
    }
}

/// A string, kept to its first 200 characters, or absent.
fn text(o: &Map<String, Value>, key: &str) -> Result<Option<String>, String> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.chars().take(200).collect())),
        Some(_) => Err(format!("'{key}' must be a string")),
    }
}

/// A non-negative whole number (256 or 256.0), or absent.
fn whole(o: &Map<String, Value>, key: &str) -> Result<Option<u64>, String> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match (v.as_u64(), v.as_f64()) {
            (Some(n), _) => Ok(Some(n)),
            (None, Some(x)) if x >= 0.0 && x.fract() == 0.0 && x < 9.0e15 => Ok(Some(x as u64)),
            _ => Err(format!(
                "'{key}' must be a whole number of 0 or more, found {v}"
            )),
        },
    }
}

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
    /// The program's own samples/s (its end line).
    pub program_samples_per_s: Option<f64>,
    /// ours / the program's - 1 (0.01 = we count 1% more).
    pub program_difference: Option<f64>,
    /// The tuner's own clock: the samples of the measured steps after the first over the time
    /// from the first measured step's line to the last step line seen while the program ran,
    /// each as the tuner first saw it in the report. Needs two measured lines that arrived
    /// over time.
    #[serde(default)]
    pub clock_samples_per_s: Option<f64>,
    /// The program's step times against the tuner's clock over the same steps, - 1: a program
    /// whose steps do not add up to its loop (a step time that leaves out the data wait, say)
    /// shows here.
    #[serde(default)]
    pub clock_difference: Option<f64>,
    /// The GPU as the program reported it.
    #[serde(default)]
    pub device: Option<DeviceRecord>,
    /// The share of the measured steps the GPU was working, as the program measured it: the
    /// median of its steps' figures, else its end line's.
    #[serde(default)]
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
            if v.len() == measured.len() {
                Summary::of(&v)
            } else {
                None
            }
        };
        let (source, samples_per_s) = if !measured.is_empty() {
            let samples: u64 = measured.iter().map(|s| s.samples).sum();
            let seconds: f64 = measured.iter().map(|s| s.step_s).sum();
            (ThroughputSource::Protocol, Some(samples as f64 / seconds))
        } else if report.steps.is_empty() {
            match wall {
                Some((samples, secs)) if samples > 0 && secs > 0.0 => {
                    (ThroughputSource::WallClock, Some(samples as f64 / secs))
                }
                _ => (ThroughputSource::None, None),
            }
        } else {
            // It reported, but only warmup steps: no honest figure.
            (ThroughputSource::None, None)
        };
        let framework_peak_bytes = report
            .steps
            .iter()
            .filter_map(|s| s.peak_memory_bytes)
            .chain(report.end.as_ref().and_then(|e| e.peak_memory_bytes))
            .max();
        let program_samples_per_s = report.end.as_ref().and_then(|e| e.samples_per_s);
        let clock = clock_rates(&report.steps, warmup, arrivals)
            .filter(|_| source == ThroughputSource::Protocol);
        let against = |theirs: Option<f64>| match (samples_per_s, theirs) {
            (Some(ours), Some(theirs)) if theirs > 0.0 && source == ThroughputSource::Protocol => {
                Some(ours / theirs - 1.0)
            }
            _ => None,
        };
        let mut metrics = Metrics::default();
        let lines = report.steps.iter().map(|s| &s.metrics);
        for line in lines.chain(report.end.as_ref().map(|e| &e.metrics)) {
            for (name, value) in line.iter() {
                metrics.set(name, *value);
            }
        }
        let program_difference = against(program_samples_per_s);
        let clock_samples_per_s = clock.map(|(tuner, _)| tuner);
        let clock_difference = clock.map(|(tuner, program)| program / tuner - 1.0);
        Measured {
            source,
            samples_per_s,
            reported_steps: report.steps.len(),
            warmup_steps: warmup.min(report.steps.len()),
            step_ms: ms(&|s| Some(s.step_s)),
            data_ms: ms(&|s| s.data_s),
            forward_ms: ms(&|s| s.forward_s),
            backward_ms: ms(&|s| s.backward_s),
            optimizer_ms: ms(&|s| s.optimizer_s),
            framework_peak_bytes,
            program_samples_per_s,
            program_difference,
            clock_samples_per_s,
            clock_difference,
            device: report.device.clone(),
            gpu_busy: ms(&|s| s.gpu_busy.map(|b| b / 1e3))
                .map(|m| m.median)
                .or(report.end.as_ref().and_then(|e| e.gpu_busy)),
            model: report.model,
            metrics,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_in_every_accepted_shape() {
        let r = ReportFile::parse(concat!(
            "{\"samples\": 256, \"step_s\": 0.5}\n",
            "{\"kind\": \"step\", \"samples\": 256.0, \"start_s\": 10.0, \"end_s\": 10.25, \"data_s\": 0.01, \"peak_memory_bytes\": 1000}\n",
            "\n",
            "{\"samples\": 128, \"step_s\": 0.125, \"forward_s\": null, \"extra\": [1, 2]}\n",
            "{\"kind\": \"end\", \"samples_per_s\": 700.5, \"peak_memory_bytes\": 2000}\n",
        ));
        assert_eq!(r.steps.len(), 3);
        assert_eq!(r.health.lines, 4);
        assert_eq!(r.health.bad_lines, 0);
        assert_eq!(r.steps[1].samples, 256);
        assert_eq!(r.steps[1].step_s, 0.25);
        assert_eq!(r.steps[1].data_s, Some(0.01));
        assert_eq!(r.steps[2].forward_s, None);
        assert_eq!(r.end.as_ref().unwrap().samples_per_s, Some(700.5));
        assert!(!r.health.truncated_last_line);
    }

    #[test]
    fn the_device_line_names_the_gpu_and_its_free_memory() {
        let r = ReportFile::parse(concat!(
            "{\"kind\": \"device\", \"name\": \"NVIDIA H100 80GB HBM3\", \"total_bytes\": 85021163520, \"free_bytes\": 84500000000, \"framework\": \"torch 2.11.0+cu130, CUDA 13.0\"}\n",
            "{\"samples\": 8, \"step_s\": 0.1}\n",
            "{\"kind\": \"device\", \"name\": 7}\n",
            "{\"kind\": \"device\", \"framework\": 2}\n",
        ));
        let d = r.device.as_ref().unwrap();
        assert_eq!(d.name.as_deref(), Some("NVIDIA H100 80GB HBM3"));
        assert_eq!(
            d.framework.as_deref(),
            Some("torch 2.11.0+cu130, CUDA 13.0")
        );
        assert_eq!(
            (d.total_bytes, d.free_bytes),
            (Some(85_021_163_520), Some(84_500_000_000))
        );
        assert_eq!((r.steps.len(), r.health.bad_lines), (1, 2));
        assert!(r.health.first_bad[0].reason.contains("'name'"));
        assert!((r.health.first_bad.iter()).any(|b| b.reason.contains("'framework'")));
        let m = Measured::from_report(&r, 0, None, &[]);
        assert_eq!(m.device.unwrap().free_bytes, Some(84_500_000_000));
    }

    #[test]
    fn the_model_line_gives_the_parts_of_the_memory_and_the_last_one_counts() {
        let r = ReportFile::parse(concat!(
            "{\"kind\": \"model\", \"parameter_bytes\": 1, \"gradient_bytes\": 1, \"optimizer_state_bytes\": 0}\n",
            "{\"samples\": 8, \"step_s\": 0.1}\n",
            "{\"kind\": \"model\", \"parameter_bytes\": 46758048, \"gradient_bytes\": 46758048.0, \"optimizer_state_bytes\": 46758048}\n",
            "{\"kind\": \"model\", \"parameter_bytes\": -1}\n",
            "{\"kind\": \"model\", \"gradient_bytes\": \"many\"}\n",
        ));
        assert_eq!((r.steps.len(), r.health.bad_lines), (1, 2));
        assert!(r.health.first_bad[0].reason.contains("'parameter_bytes'"));
        assert!(r.health.first_bad[1].reason.contains("'gradient_bytes'"));
        let m = Measured::from_report(&r, 0, None, &[]).model.unwrap();
        assert_eq!(m.parameter_bytes, Some(46_758_048));
        assert_eq!(m.total_bytes(), Some(3 * 46_758_048));
        // A part left out: no total, and the line is still read.
        let r = ReportFile::parse("{\"kind\": \"model\", \"parameter_bytes\": 4}\n");
        let m = r.model.unwrap();
        assert_eq!((m.parameter_bytes, m.total_bytes()), (Some(4), None));
        assert_eq!(r.health.unknown_kinds, 0);
        // No model line: none in the trial, none in its JSON.
        let m = Measured::from_report(&ReportFile::default(), 0, None, &[]);
        assert!(m.model.is_none());
        assert!(!serde_json::to_string(&m).unwrap().contains("model"));
    }

    #[test]
    fn garbage_and_a_truncated_last_line_are_counted_not_fatal() {
        let r = ReportFile::parse(concat!(
            "{\"samples\": 8, \"step_s\": 0.1}\n",
            "Epoch 1: loss 2.3\n",
            "[1, 2]\n",
            "{\"samples\": -8, \"step_s\": 0.1}\n",
            "{\"samples\": 8}\n",
            "{\"samples\": 8, \"step_s\": \"fast\"}\n",
            "{\"samples\": 8, \"start_s\": 5, \"end_s\": 4}\n",
            "{\"kind\": \"epoch\", \"n\": 1}\n",
            "{\"samples\": 8, \"step_s\": 0.1}\n",
            "{\"samples\": 8, \"ste",
        ));
        assert_eq!(r.steps.len(), 2);
        assert_eq!(r.health.unknown_kinds, 1);
        assert_eq!(r.health.bad_lines, 7);
        assert!(r.health.truncated_last_line);
        assert_eq!(r.health.first_bad.len(), 5);
        assert_eq!(r.health.first_bad[0].line, 2);
        assert!(r.health.first_bad[0].reason.contains("not JSON"));
        assert!(r.health.first_bad[1].reason.contains("not a JSON object"));
        assert!(r.health.first_bad[2].reason.contains("'samples'"));
        assert!(r.health.first_bad[3].reason.contains("step_s"));
        assert!(r.health.first_bad[4].reason.contains("'step_s'"));
        // A bad line in the middle of a file that ends cleanly is not a truncation.
        let r = ReportFile::parse("{\"samples\": 8, \"ste\n{\"samples\": 8, \"step_s\": 1}\n");
        assert!(!r.health.truncated_last_line && r.health.bad_lines == 1 && r.steps.len() == 1);
        // Not UTF-8, empty, missing: never a panic.
        let r = ReportFile::parse(&String::from_utf8_lossy(&[0xff, 0xfe, b'\n']));
        assert_eq!(r.health.bad_lines, 1);
        assert_eq!(ReportFile::parse(""), ReportFile::default());
        assert_eq!(
            ReportFile::read(Path::new("/nonexistent/report.jsonl")),
            ReportFile::default()
        );
    }

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
