//! The protocol a training program speaks to the tuner: one JSON object per line, appended to
//! the file `PERF_LESSONS_REPORT` names. A line with no `kind` (or `"kind": "step"`) is one
//! optimizer step; `device`, `model` and `end` lines say what the GPU holds, where the model's
//! memory goes and the program's own count. Defined once here, for the programs that write it
//! ([Report], as `mlp-train` does) and the tuner that reads it ([ReportFile]); the Python
//! reporter (`python/perf_lessons/report.py`) is checked against the same records.
//!
//! Reading never fails: a line that is not a valid report (a killed program's half-written last
//! line, stray text) is counted, the first few are kept with the reason, and the rest of the
//! file is used. Writing is one write of the whole line to a file opened for appending, so a
//! reader never sees half a line from a program that is still running.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::Error;
use crate::named::Named;
use crate::Result;

/// The variable naming the report file.
pub const REPORT_ENV: &str = "PERF_LESSONS_REPORT";

/// A program's own figures by name (`"metrics": {"loss": 2.31}` on a step or end line). None is
/// a value that was not a number (a loss that diverged: JSON has no NaN, so it comes as null).
pub type Metrics = Named<Option<f64>>;

/// Most metrics one line may carry, and the longest name: a table shows a column for each.
const MAX_METRICS: usize = 16;
const MAX_METRIC_NAME: usize = 64;

/// One optimizer step as the program reported it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct StepRecord {
    /// The step's number, from 1, where the program counts them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step: Option<u64>,
    /// The rank that wrote it, in a data-parallel group.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank: Option<u64>,
    pub samples: u64,
    /// Seconds: `step_s`, or `end_s - start_s`.
    pub step_s: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub forward_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backward_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub optimizer_s: Option<f64>,
    /// Peak device memory the framework saw (bytes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peak_memory_bytes: Option<u64>,
    /// The most the program's tensors held during this step (bytes): in PyTorch
    /// `max_memory_allocated()` since the step began. Unlike the reserved peak it leaves out the
    /// blocks the allocator keeps cached (an autotuner's workspaces among them), so it grows
    /// with the batch as the activations do.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peak_allocated_bytes: Option<u64>,
    /// Device memory the program holds at the end of the step (bytes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_in_use_bytes: Option<u64>,
    /// The share of the step the GPU was working (0..1), as the program measured it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_busy: Option<f64>,
    #[serde(default, skip_serializing_if = "Named::is_empty")]
    pub metrics: Metrics,
}

/// The program's closing line, `"kind": "end"`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct EndRecord {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank: Option<u64>,
    /// The program's own count of samples per second.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub samples_per_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peak_memory_bytes: Option<u64>,
    /// The share of the measured steps the GPU was working (0..1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_busy: Option<f64>,
    /// Figures of the whole run (a final evaluation's loss): they stand over the steps' last.
    #[serde(default, skip_serializing_if = "Named::is_empty")]
    pub metrics: Metrics,
}

/// The program's `"kind": "device"` line: the GPU as the framework sees it, written once the
/// framework holds the GPU (its context exists) and before the model is built.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DeviceRecord {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_bytes: Option<u64>,
    /// Free device memory at that moment: what the training can have.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub free_bytes: Option<u64>,
    /// The framework and its version, as the program names it ("torch 2.11.0+cu130, CUDA 13.0").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub framework: Option<String>,
}

/// The program's `"kind": "model"` line: where the model's memory goes, in bytes, counted by the
/// program from its model and optimizer once they exist (after the first optimizer step).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ModelRecord {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank: Option<u64>,
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
            rank: whole(&o, "rank")?,
            samples_per_s: seconds_like(&o, "samples_per_s")?,
            peak_memory_bytes: whole(&o, "peak_memory_bytes")?,
            gpu_busy: share(&o, "gpu_busy")?,
            metrics: metrics(line, &o)?,
        })),
        "device" => Ok(Line::Device(DeviceRecord {
            rank: whole(&o, "rank")?,
            name: text(&o, "name")?,
            total_bytes: whole(&o, "total_bytes")?,
            free_bytes: whole(&o, "free_bytes")?,
            framework: text(&o, "framework")?,
        })),
        "model" => Ok(Line::Model(ModelRecord {
            rank: whole(&o, "rank")?,
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
        step: whole(o, "step")?,
        rank: whole(o, "rank")?,
        samples,
        step_s,
        data_s: seconds_like(o, "data_s")?,
        forward_s: seconds_like(o, "forward_s")?,
        backward_s: seconds_like(o, "backward_s")?,
        optimizer_s: seconds_like(o, "optimizer_s")?,
        peak_memory_bytes: whole(o, "peak_memory_bytes")?,
        peak_allocated_bytes: whole(o, "peak_allocated_bytes")?,
        memory_in_use_bytes: whole(o, "memory_in_use_bytes")?,
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

/// Where a program's lines go: a file opened for appending, or nowhere.
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

    pub fn device(&mut self, line: &DeviceRecord) -> Result<()> {
        self.write(&Tagged {
            kind: "device",
            line,
        })
    }

    pub fn step(&mut self, line: &StepRecord) -> Result<()> {
        self.write(line)
    }

    pub fn model(&mut self, line: &ModelRecord) -> Result<()> {
        self.write(&Tagged {
            kind: "model",
            line,
        })
    }

    pub fn end(&mut self, line: &EndRecord) -> Result<()> {
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

/// Whether `line` is a valid line of the protocol written in its own terms: read as the tuner
/// reads it, the record written back says the same, field for field (a field of another name
/// or shape, or one the records do not have, is a difference). For checking a writer.
pub fn check_line(line: &str) -> std::result::Result<(), String> {
    let original: Value = serde_json::from_str(line).map_err(|e| format!("not JSON: {e}"))?;
    let again = match parse_line(line)? {
        Line::Step(s) => serde_json::to_value(&s),
        Line::End(e) => serde_json::to_value(Tagged {
            kind: "end",
            line: &e,
        }),
        Line::Device(d) => serde_json::to_value(Tagged {
            kind: "device",
            line: &d,
        }),
        Line::Model(m) => serde_json::to_value(Tagged {
            kind: "model",
            line: &m,
        }),
        Line::Unknown => return Err("a kind the protocol does not have".into()),
    }
    .map_err(|e| e.to_string())?;
    let mut original = original;
    if let Some(o) = original.as_object_mut() {
        // A step's kind is optional; integers and floats are one JSON number.
        if o.get("kind").and_then(Value::as_str) == Some("step") {
            o.remove("kind");
        }
    }
    let same = |a: &Value, b: &Value| a == b || (a.as_f64().is_some() && a.as_f64() == b.as_f64());
    let (Some(a), Some(b)) = (original.as_object(), again.as_object()) else {
        return Err("not a JSON object".into());
    };
    for key in a.keys().chain(b.keys()) {
        match (a.get(key), b.get(key)) {
            (Some(x), Some(y)) if same(x, y) => {}
            (Some(Value::Null), None) if key == "metrics" => {}
            (x, y) => {
                return Err(format!(
                    "'{key}': the line says {}, the protocol's record {}",
                    x.map_or("nothing".into(), Value::to_string),
                    y.map_or("nothing".into(), Value::to_string)
                ))
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_in_every_accepted_shape() {
        let r = ReportFile::parse(concat!(
            "{\"samples\": 256, \"step_s\": 0.5}\n",
            "{\"kind\": \"step\", \"samples\": 256.0, \"start_s\": 10.0, \"end_s\": 10.25, \"data_s\": 0.01, \"peak_memory_bytes\": 1000, \"peak_allocated_bytes\": 600}\n",
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
        assert_eq!(r.steps[1].peak_allocated_bytes, Some(600));
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
        assert_eq!(r.device.unwrap().free_bytes, Some(84_500_000_000));
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
        let m = r.model.unwrap();
        assert_eq!(m.parameter_bytes, Some(46_758_048));
        assert_eq!(m.total_bytes(), Some(3 * 46_758_048));
        // A part left out: no total, and the line is still read.
        let r = ReportFile::parse("{\"kind\": \"model\", \"parameter_bytes\": 4}\n");
        let m = r.model.unwrap();
        assert_eq!((m.parameter_bytes, m.total_bytes()), (Some(4), None));
        assert_eq!(r.health.unknown_kinds, 0);
        assert!(ReportFile::default().model.is_none());
    }

    #[test]
    fn a_line_is_checked_field_for_field_against_the_records() {
        for good in [
            "{\"step\":3,\"samples\":8,\"step_s\":0.5,\"data_s\":0.1,\"peak_memory_bytes\":10,\"peak_allocated_bytes\":6,\"metrics\":{\"loss\":2.5,\"acc\":null}}",
            "{\"kind\":\"step\",\"rank\":1,\"samples\":8,\"step_s\":1}",
            "{\"kind\":\"device\",\"name\":\"GPU\",\"total_bytes\":1000,\"free_bytes\":900}",
            "{\"kind\":\"model\",\"parameter_bytes\":4,\"gradient_bytes\":4,\"optimizer_state_bytes\":8}",
            "{\"kind\":\"end\",\"samples_per_s\":700.5,\"gpu_busy\":0.5}",
        ] {
            check_line(good).unwrap_or_else(|e| panic!("{e}: {good}"));
        }
        for (bad, says) in [
            ("{\"samples\":8,\"step_s\":0.5,\"fwd_s\":0.1}", "'fwd_s'"),
            (
                "{\"samples\":8,\"start_s\":1,\"end_s\":2}",
                "_s': the line says",
            ),
            ("{\"kind\":\"epoch\"}", "kind"),
            ("{\"samples\":8}", "step_s"),
        ] {
            let e = check_line(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
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
}
