//! How a run is printed and stored: one report type for every lesson binary ([LessonReport]:
//! device, provenance, parameters, ceilings, one [VariantReport] per variant, and the lesson's
//! own [Section]s), one schema version, one markdown printer, one JSON writer.

use std::path::Path;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::bench::Measurement;
use crate::ceilings::CeilingRef;
use crate::counters::{Throughput, Traffic, Work};
use crate::error::Result;
use crate::files::{read_versioned, recorded_command_line, rfc3339_utc, write_json_file};
use crate::gpu::DeviceInfo;
use crate::kernels::KernelClock;
use crate::stats::Summary;
use crate::table::{cell, format_ms, percent, three_figures, Table, EMPTY};
use crate::verify::{Precision, Verification};

/// Bumped whenever a field changes meaning or is removed.
pub const SCHEMA_VERSION: u32 = 2;

/// A process's start-up clock: made first thing in `main` and handed to whatever reports how
/// long start-up took (no global state). Phases are marked as they end.
#[derive(Debug, Clone)]
pub struct Startup {
    start: Instant,
    phases: Vec<(String, f64)>,
}

impl Startup {
    pub fn now() -> Startup {
        Startup {
            start: Instant::now(),
            phases: Vec::new(),
        }
    }

    /// Note that a start-up phase ended now.
    pub fn mark(&mut self, phase: &str) {
        let t = self.elapsed_s();
        self.phases.push((phase.to_string(), t));
    }

    pub fn elapsed_s(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    /// The phases marked so far, seconds since the start, in order.
    pub fn phases(&self) -> &[(String, f64)] {
        &self.phases
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    pub git_commit: String,
    /// UTC, RFC 3339.
    pub time: String,
    pub command_line: Vec<String>,
    pub host: String,
    /// Seconds from process start to the first timed sample (compile cache, context, inputs).
    pub startup_to_first_sample_s: Option<f64>,
    /// When each startup phase ended, seconds since process start.
    #[serde(default)]
    pub startup_phases: Vec<(String, f64)>,
    /// Where the process's time went, phase by phase (absent in reports written before it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock: Option<ProcessClock>,
}

/// Where one lesson process spent its time, for a table of phases (the compare's): the kernels
/// compiled or loaded, the ceilings, each variant's check, warmup, samples and figures, and
/// when the report was complete. What none of these covers is the GPU context, the lesson's
/// inputs and references, and the process's own start and exit.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProcessClock {
    pub kernels: KernelClock,
    /// Ceilings read from the cache or measured, seconds.
    pub ceilings_s: f64,
    pub variants: Vec<VariantClock>,
    /// The lesson's figures from all its variants (sections), seconds; 0 when it took none.
    pub sections_s: f64,
    /// Seconds from process start to the complete report.
    pub finished_s: f64,
}

/// One variant's time, seconds: its checked run, warmup, timed samples (wall time) and the
/// lesson's figures of it (metrics).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct VariantClock {
    pub id: String,
    pub verify_s: f64,
    pub warmup_s: f64,
    pub sampling_s: f64,
    pub metrics_s: f64,
}

impl Provenance {
    pub fn now() -> Provenance {
        Provenance {
            git_commit: env!("PERF_LESSONS_GIT_COMMIT").to_string(),
            time: rfc3339_utc(std::time::SystemTime::now()),
            command_line: recorded_command_line(std::env::args()),
            host: std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|s| s.trim().to_string())
                .unwrap_or_default(),
            startup_to_first_sample_s: None,
            startup_phases: Vec::new(),
            clock: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Status {
    /// Checked and, unless its output failed, timed.
    Ok,
    /// Its output did not match: not timed, no speedup, the run exits non-zero.
    Failed,
    /// Not run, for the reason in the note (a sweep's time cap, memory).
    Skipped,
}

/// A figure a lesson adds to a variant beyond time and rates: goodput, samples/s, the time of a
/// part measured alone. Printed as a column named `name (unit)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Metric {
    pub name: String,
    pub value: f64,
    pub unit: String,
}

impl Metric {
    pub fn new(name: impl Into<String>, value: f64, unit: impl Into<String>) -> Metric {
        Metric {
            name: name.into(),
            value,
            unit: unit.into(),
        }
    }

    fn column(&self) -> String {
        if self.unit.is_empty() {
            self.name.clone()
        } else {
            format!("{} ({})", self.name, self.unit)
        }
    }
}

/// One variant's measured and checked result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VariantReport {
    pub name: String,
    /// The part or sweep point the variant belongs to ("training", "64^3 x 16"); speedups are
    /// taken against the first variant of the same group.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub group: String,
    pub description: String,
    pub precision: Precision,
    pub status: Status,
    /// Every check of the output; the variant is OK only when all passed.
    pub checks: Vec<Verification>,
    pub work: Work,
    /// Where the work's bytes move: through device memory, or over the host link (absent in
    /// older files: device memory).
    #[serde(default)]
    pub traffic: Traffic,
    /// Milliseconds per run.
    pub time_ms: Option<Summary>,
    /// Rates at the median time.
    pub throughput: Option<Throughput>,
    /// Achieved bandwidth over the measured copy bandwidth (0..1).
    pub fraction_of_copy_bandwidth: Option<f64>,
    /// Baseline median over this median; only when both verified.
    pub speedup: Option<f64>,
    /// The lesson's own figures for this variant.
    #[serde(default)]
    pub metrics: Vec<Metric>,
    pub measurement: Option<Measurement>,
    /// Why no measurement was taken, when none was.
    pub note: Option<String>,
}

impl VariantReport {
    /// A variant whose output was checked and that has not been timed yet: OK exactly when every
    /// check passed (and there was at least one).
    pub fn checked(
        name: impl Into<String>,
        description: impl Into<String>,
        precision: Precision,
        checks: Vec<Verification>,
        work: Work,
    ) -> VariantReport {
        let passed = !checks.is_empty() && checks.iter().all(|c| c.passed);
        VariantReport {
            name: name.into(),
            group: String::new(),
            description: description.into(),
            precision,
            status: if passed { Status::Ok } else { Status::Failed },
            checks,
            work,
            traffic: Traffic::DeviceMemory,
            time_ms: None,
            throughput: None,
            fraction_of_copy_bandwidth: None,
            speedup: None,
            metrics: Vec::new(),
            measurement: None,
            note: None,
        }
    }

    /// "training:pinned" for a grouped variant, the name alone otherwise.
    pub fn id(&self) -> String {
        variant_id(&self.group, &self.name)
    }

    pub fn metric(&self, name: &str) -> Option<f64> {
        self.metrics
            .iter()
            .find(|m| m.name == name)
            .map(|m| m.value)
    }

    /// The largest relative error of its checks (infinite when one has non-finite values).
    pub fn worst_error(&self) -> f64 {
        self.checks
            .iter()
            .map(|c| c.rel_l2_error)
            .fold(0.0, f64::max)
    }
}

/// "group:name", or the name alone outside a group.
pub fn variant_id(group: &str, name: &str) -> String {
    if group.is_empty() {
        name.to_string()
    } else {
        format!("{group}:{name}")
    }
}

/// What a lesson derives from its variants beyond the table (a sweep's grid, the overlap a
/// pipeline achieved, a training run's loss curves): printed after the table, stored in JSON.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Section {
    pub title: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table: Option<Table>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lines: Vec<String>,
    /// Figures kept in the JSON only (curves, per-point raw data).
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub data: serde_json::Value,
}

impl Section {
    pub fn new(title: impl Into<String>) -> Section {
        Section {
            title: title.into(),
            ..Section::default()
        }
    }

    pub fn markdown(&self) -> String {
        let mut out = format!("### {}\n\n", self.title);
        if let Some(t) = &self.table {
            out.push_str(&t.markdown());
            out.push('\n');
        }
        for line in &self.lines {
            out.push_str(line);
            out.push('\n');
        }
        out
    }
}

/// What every lesson binary prints and writes with `--json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LessonReport {
    pub schema_version: u32,
    pub lesson: String,
    pub device: DeviceInfo,
    pub provenance: Provenance,
    /// The lesson's parameters (sizes, seeds, flags).
    pub parameters: serde_json::Value,
    pub ceilings: Vec<CeilingRef>,
    pub variants: Vec<VariantReport>,
    #[serde(default)]
    pub sections: Vec<Section>,
}

/// Columns of the variant table shown only when some variant has a value there.
const OPTIONAL_COLUMNS: [&str; 6] = ["group", "GB/s", "GFLOP/s", "FLOP/B", "% copy BW", "speedup"];

impl LessonReport {
    pub fn all_passed(&self) -> bool {
        self.variants.iter().all(|v| v.status != Status::Failed)
    }

    /// The variant with this id ("fused", "training:pinned").
    pub fn variant(&self, id: &str) -> Option<&VariantReport> {
        self.variants.iter().find(|v| v.id() == id)
    }

    /// The variant table: one row per variant; a column per kind of check and per metric.
    pub fn table(&self) -> Table {
        let mut checks: Vec<String> = Vec::new();
        let mut metrics: Vec<String> = Vec::new();
        for v in &self.variants {
            for c in &v.checks {
                let label = c.label();
                if !checks.contains(&label) {
                    checks.push(label);
                }
            }
            for m in &v.metrics {
                if !metrics.contains(&m.column()) {
                    metrics.push(m.column());
                }
            }
        }
        let mut table = Table::new()
            .left("group")
            .left("variant")
            .left("status")
            .right("median")
            .right("p10..p90")
            .right("noise")
            .right("GB/s")
            .right("GFLOP/s")
            .right("FLOP/B")
            .right("% copy BW")
            .right("speedup");
        for c in checks.iter().chain(&metrics) {
            table = table.right(c);
        }
        for v in &self.variants {
            let t = v.time_ms.as_ref();
            let mut row = vec![
                if v.group.is_empty() {
                    EMPTY.into()
                } else {
                    v.group.clone()
                },
                v.name.clone(),
                match v.status {
                    Status::Ok => "ok",
                    Status::Failed => "FAILED",
                    Status::Skipped => "skipped",
                }
                .into(),
                cell(t, |s| format_ms(s.median)),
                cell(t, |s| format!("{}..{}", format_ms(s.p10), format_ms(s.p90))),
                cell(t, |s| percent(s.rel_stddev)),
                cell(v.throughput.filter(|x| x.gb_per_s > 0.0), |x| {
                    format!("{:.0}", x.gb_per_s)
                }),
                cell(v.throughput.filter(|x| x.gflop_per_s > 0.0), |x| {
                    format!("{:.1}", x.gflop_per_s)
                }),
                cell(
                    (v.work.bytes() > 0 && v.work.flops > 0).then(|| v.work.intensity()),
                    |i| format!("{i:.3}"),
                ),
                cell(v.fraction_of_copy_bandwidth, percent),
                cell(v.speedup, |s| format!("{s:.2}x")),
            ];
            for label in &checks {
                row.push(cell(v.checks.iter().find(|c| &c.label() == label), |c| {
                    format!("{:.1e}", c.rel_l2_error)
                }));
            }
            for name in &metrics {
                row.push(cell(v.metrics.iter().find(|m| &m.column() == name), |m| {
                    three_figures(m.value)
                }));
            }
            table.row(row);
        }
        table.drop_empty(&OPTIONAL_COLUMNS);
        table
    }

    /// The markdown printed after a run: the variant table, the ceilings and timing mode, any
    /// warning, the lesson's sections, the trace summaries.
    pub fn markdown(&self) -> String {
        let d = &self.device;
        let mut out = format!(
            "## {} on {} (sm_{}{}, {} SMs, driver {}, CUDA {})\n\n",
            self.lesson,
            d.name,
            d.compute_capability.0,
            d.compute_capability.1,
            d.sm_count,
            d.driver_version,
            d.cuda_driver_version
        );
        out.push_str(&self.table().markdown());
        out.push('\n');
        for c in &self.ceilings {
            out.push_str(&format!(
                "{}: {:.0} {} ({})\n",
                c.name, c.value, c.unit, c.method
            ));
        }
        // One line per timing mode, with each variant's runs per sample.
        let mut modes: Vec<(String, Vec<String>)> = Vec::new();
        for v in &self.variants {
            if let Some(m) = &v.measurement {
                let entry = format!("{} {}", v.id(), m.batch);
                match modes.iter_mut().find(|(label, _)| *label == m.mode_label()) {
                    Some((_, ids)) => ids.push(entry),
                    None => modes.push((m.mode_label(), vec![entry])),
                }
            }
        }
        for (label, ids) in &modes {
            out.push_str(&format!(
                "timing: CUDA events, {label}; runs per sample: {}\n",
                ids.join(", ")
            ));
        }
        for v in &self.variants {
            let id = v.id();
            if let Some(m) = &v.measurement {
                if m.clock_dropped {
                    out.push_str(&format!(
                        "warning: {id}: SM clock dropped during the run ({:?} -> {:?} MHz)\n",
                        m.before.sm_clock_mhz, m.after.sm_clock_mhz
                    ));
                }
                if m.stop_reason == crate::stop::StopReason::MaxTime {
                    out.push_str(&format!("note: {id}: {}\n", m.stop_reason.describe()));
                }
            }
            match v.status {
                Status::Failed => {
                    for c in v.checks.iter().filter(|c| !c.passed) {
                        out.push_str(&format!(
                            "FAILED: {id}: {}: relative L2 error {:.3e} against {} (tolerance {:.0e}), {} non-finite of {} elements{}\n",
                            c.part,
                            c.rel_l2_error,
                            c.against,
                            c.tolerance,
                            c.non_finite,
                            c.elements,
                            v.note.as_deref().map(|n| format!("; {n}")).unwrap_or_default()
                        ));
                    }
                    if v.checks.is_empty() {
                        out.push_str(&format!(
                            "FAILED: {id}: nothing to check it against{}\n",
                            v.note
                                .as_deref()
                                .map(|n| format!("; {n}"))
                                .unwrap_or_default()
                        ));
                    }
                }
                Status::Skipped => out.push_str(&format!(
                    "skipped: {id}: {}\n",
                    v.note.as_deref().unwrap_or("(no reason given)")
                )),
                Status::Ok => {}
            }
        }
        for s in &self.sections {
            out.push('\n');
            out.push_str(&s.markdown());
        }
        for v in &self.variants {
            if let Some(t) = v.measurement.as_ref().and_then(|m| m.trace.as_ref()) {
                out.push('\n');
                out.push_str(&t.markdown());
            }
        }
        out
    }

    /// Write the JSON document atomically (temp file + rename).
    pub fn write_json(&self, path: &Path) -> Result<()> {
        write_json_file(path, self, "the report")
    }

    /// Read a report back, checking it is one and of this schema version.
    pub fn read_json(path: &Path) -> Result<LessonReport> {
        read_versioned(
            path,
            SCHEMA_VERSION,
            "a perf-lessons result",
            "re-run the lesson to regenerate it",
        )
    }
}
