//! The roofline's result document: ceilings with how they were measured, the roofs drawn,
//! every operation as a point, and the checks. Written as versioned JSON; `--from-json` reads
//! it back to re-draw without a GPU.

use std::path::Path;

use serde::{Deserialize, Serialize};

use common::ceilings::DeviceCeilings;
use common::counters::Work;
use common::gpu::DeviceInfo;
use common::report::{write_atomically, Provenance};
use common::stats::Summary;
use common::verify::{Precision, Verification};

use crate::model::{self, Bound};

pub const ROOFLINE_SCHEMA_VERSION: u32 = 1;

/// A compute ceiling as drawn: its key (points name the roof they are held to), label and
/// ridge point against the memory roof.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ComputeRoof {
    pub key: String,
    pub name: String,
    pub gflops: f64,
    pub ridge_flop_per_byte: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Roofs {
    /// The memory slope: the best measured DRAM bandwidth.
    pub memory_name: String,
    pub memory_gbps: f64,
    pub compute: Vec<ComputeRoof>,
}

impl Roofs {
    pub fn compute_roof(&self, key: &str) -> Option<&ComputeRoof> {
        self.compute.iter().find(|r| r.key == key)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Point {
    /// "vector add", "SGEMM fp32", ...: one colour and legend entry per family.
    pub family: String,
    /// Short label drawn beside the point: "add 64M", "sgemm 4096".
    pub label: String,
    pub precision: Precision,
    /// Key of the compute roof this operation is held to.
    pub roof: String,
    pub work: Work,
    pub time_s: Summary,
    pub intensity: f64,
    pub gflops: f64,
    pub gbps: f64,
    pub attainable_gflops: f64,
    pub fraction_of_roof: f64,
    pub bound: Bound,
    pub above_roof: bool,
    pub verification: Option<Verification>,
    /// "measured (cold)" or the result file it was read from.
    pub source: String,
}

impl Point {
    /// Place a timed operation against its roof.
    #[allow(clippy::too_many_arguments)]
    pub fn place(
        family: &str,
        label: &str,
        precision: Precision,
        roof: &ComputeRoof,
        memory_gbps: f64,
        work: Work,
        time_s: Summary,
        verification: Option<Verification>,
        source: &str,
    ) -> Point {
        let t = work.throughput(time_s.median);
        let attainable = model::attainable(t.intensity, roof.gflops, memory_gbps);
        // A point that moves no FLOPs is judged by bandwidth alone.
        let (achieved, limit) = if work.flops == 0 {
            (t.gb_per_s, memory_gbps)
        } else {
            (t.gflop_per_s, attainable)
        };
        Point {
            family: family.to_string(),
            label: label.to_string(),
            precision,
            roof: roof.key.clone(),
            work,
            intensity: t.intensity,
            gflops: t.gflop_per_s,
            gbps: t.gb_per_s,
            attainable_gflops: attainable,
            fraction_of_roof: achieved / limit,
            bound: model::bound(t.intensity, roof.gflops, memory_gbps),
            above_roof: model::above_roof(achieved, limit, time_s.rel_stddev),
            time_s,
            verification,
            source: source.to_string(),
        }
    }

    pub fn verified(&self) -> bool {
        self.verification.as_ref().is_none_or(|v| v.passed)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RooflineReport {
    pub schema_version: u32,
    pub device: DeviceInfo,
    pub provenance: Provenance,
    pub ceilings: DeviceCeilings,
    pub roofs: Roofs,
    pub points: Vec<Point>,
    /// Notes on what was left out and why (e.g. no ch1-intensity results for this GPU).
    pub notes: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// Missing, unreadable, not JSON, another schema version or not a roofline result.
    #[error("{0}")]
    Read(String),
    #[error("{path}: could not write: {message}")]
    Write { path: String, message: String },
}

impl RooflineReport {
    /// Points over their roof (counting errors) or failing verification.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        for p in &self.points {
            if p.above_roof {
                out.push(format!(
                    "{}: {:.1}% of its roof, above it by more than the noise allows: a counting error",
                    p.label,
                    100.0 * p.fraction_of_roof
                ));
            }
            if !p.verified() {
                out.push(format!("{}: FAILED verification", p.label));
            }
        }
        out
    }

    pub fn read_json(path: &Path) -> Result<RooflineReport, ReportError> {
        common::report::read_versioned(
            path,
            ROOFLINE_SCHEMA_VERSION,
            "a roofline result",
            "re-run the roofline to regenerate it",
        )
        .map_err(|e| ReportError::Read(e.to_string()))
    }

    pub fn write_json(&self, path: &Path) -> Result<(), ReportError> {
        let json = serde_json::to_vec_pretty(self).expect("report serializes");
        write_atomically(path, &json).map_err(|e| ReportError::Write {
            path: path.display().to_string(),
            message: e.to_string(),
        })
    }

    /// The tables: ceilings, roofs with ridge points, and every point.
    pub fn markdown(&self) -> String {
        let d = &self.device;
        let mut out = format!(
            "## ch1-roofline on {} (sm_{}{}, {} SMs, driver {}, CUDA {})\n\n### Ceilings (measured)\n\n| ceiling | measured | datasheet-style | how |\n|---|---:|---:|---|\n",
            d.name, d.compute_capability.0, d.compute_capability.1, d.sm_count, d.driver_version, d.cuda_driver_version
        );
        for (name, c) in self.ceilings.named() {
            let theory = c
                .theoretical
                .as_ref()
                .map(|t| format!("{:.0} {} ({})", t.value, c.unit, t.basis))
                .unwrap_or_else(|| "-".into());
            out.push_str(&format!(
                "| {name} | {:.0} {} | {theory} | {} |\n",
                c.value, c.unit, c.method
            ));
        }
        out.push_str(&format!(
            "\nmemory roof: {} = {:.0} GB/s\n\n| compute roof | GFLOP/s | ridge point (FLOP/byte) |\n|---|---:|---:|\n",
            self.roofs.memory_name, self.roofs.memory_gbps
        ));
        for r in &self.roofs.compute {
            out.push_str(&format!(
                "| {} | {:.0} | {:.2} |\n",
                r.name, r.gflops, r.ridge_flop_per_byte
            ));
        }
        out.push_str("\n### Operations\n\n| op | precision | FLOP/byte | median | GFLOP/s | GB/s | bound | % of roof | verified | source |\n|---|---|---:|---:|---:|---:|---|---:|---|---|\n");
        for p in &self.points {
            let verified = match &p.verification {
                Some(v) if v.passed => format!("ok ({:.0e})", v.rel_l2_error),
                Some(_) => "FAILED".to_string(),
                None => "in source".to_string(),
            };
            out.push_str(&format!(
                "| {} | {} | {:.3} | {} | {:.1} | {:.0} | {:?} | {:.1}%{} | {} | {} |\n",
                p.label,
                p.precision.label(),
                p.intensity,
                common::report::format_ms(p.time_s.median * 1e3),
                p.gflops,
                p.gbps,
                p.bound,
                100.0 * p.fraction_of_roof,
                if p.above_roof { " ABOVE ROOF" } else { "" },
                verified,
                p.source
            ));
        }
        for n in &self.notes {
            out.push_str(&format!("\nnote: {n}"));
        }
        out.push('\n');
        out
    }
}
