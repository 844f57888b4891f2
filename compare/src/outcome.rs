//! What a compare run found: per variant (status, timing, verdict against the expectation) and
//! per pair (speedup with its uncertainty, verification, share of the relevant ceiling), the
//! table printed at the end, and the exit rule.

use serde::{Deserialize, Serialize};

use common::ceilings::DeviceCeilings;
use common::gpu::DeviceInfo;
use common::report::{Provenance, Status, VariantReport};
use common::table::{cell, format_ms, percent, Table};
use common::verify::Precision;

use crate::expectations::Expectations;
use crate::lessons::{CeilingKind, Pair};
use crate::rule::{speedup, Rule, Timing, Verdict};

pub const COMPARE_SCHEMA_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "detail")]
pub enum RunStatus {
    Ok,
    /// Ran, but its output did not match the reference.
    Failed,
    /// No usable result: crash, timeout, bad output, error.
    Error(String),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VariantRun {
    pub lesson: String,
    pub variant: String,
    pub status: RunStatus,
    pub timing: Option<Timing>,
    pub report: Option<VariantReport>,
    pub expected: Option<Timing>,
    pub verdict: Option<Verdict>,
    /// current / expected - 1.
    pub change: Option<f64>,
    pub wall_s: f64,
}

impl VariantRun {
    pub fn id(&self) -> String {
        format!("{}/{}", self.lesson, self.variant)
    }

    /// From a child's report of one variant.
    pub fn from_report(
        lesson: &str,
        variant: &str,
        report: Option<&VariantReport>,
        error: Option<String>,
        wall_s: f64,
    ) -> VariantRun {
        let (status, timing) = match (report, error) {
            (_, Some(e)) => (RunStatus::Error(e), None),
            (None, None) => (
                RunStatus::Error(format!("the report has no variant '{variant}'")),
                None,
            ),
            (Some(v), None) => {
                let timing = v.time_ms.as_ref().map(|s| Timing {
                    median_s: s.median / 1e3,
                    noise: s.rel_stddev,
                    samples: s.samples,
                });
                let status = match v.status {
                    Status::Ok => RunStatus::Ok,
                    Status::Failed => RunStatus::Failed,
                    Status::Skipped => RunStatus::Error(format!(
                        "skipped: {}",
                        v.note.as_deref().unwrap_or("no reason given")
                    )),
                };
                (status, timing)
            }
        };
        VariantRun {
            lesson: lesson.into(),
            variant: variant.into(),
            status,
            timing,
            report: report.cloned(),
            expected: None,
            verdict: None,
            change: None,
            wall_s,
        }
    }

    pub fn judge(&mut self, expectations: Option<&Expectations>, rule: &Rule) {
        let Some(expected) = expectations
            .and_then(|e| e.variants.get(&self.id()))
            .copied()
        else {
            return;
        };
        self.expected = Some(expected);
        if let (RunStatus::Ok, Some(t)) = (&self.status, &self.timing) {
            let (v, change) = rule.judge(&expected, t);
            self.verdict = Some(v);
            self.change = Some(change);
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairRow {
    pub id: String,
    pub baseline: String,
    pub optimized: String,
    pub baseline_s: Option<f64>,
    pub optimized_s: Option<f64>,
    pub speedup: Option<f64>,
    pub speedup_uncertainty: Option<f64>,
    pub verified: bool,
    /// Achieved rate of the optimized variant over the relevant measured ceiling, and its name.
    pub of_ceiling: Option<(String, f64)>,
}

impl PairRow {
    pub fn build(pair: &Pair, runs: &[VariantRun], ceilings: Option<&DeviceCeilings>) -> PairRow {
        let find = |v: &str| {
            runs.iter()
                .find(|r| r.lesson == pair.lesson && r.variant == v)
        };
        let (b, o) = (find(pair.baseline), find(pair.optimized));
        let ok = |r: Option<&VariantRun>| r.is_some_and(|r| r.status == RunStatus::Ok);
        let verified = ok(b) && ok(o);
        let (bt, ot) = (b.and_then(|r| r.timing), o.and_then(|r| r.timing));
        let (s, u) = match (verified, bt, ot) {
            (true, Some(bt), Some(ot)) => {
                let (s, u) = speedup(&bt, &ot);
                (Some(s), Some(u))
            }
            _ => (None, None),
        };
        PairRow {
            id: pair.id(),
            baseline: pair.baseline.into(),
            optimized: pair.optimized.into(),
            baseline_s: bt.map(|t| t.median_s),
            optimized_s: ot.map(|t| t.median_s),
            speedup: s,
            speedup_uncertainty: u,
            verified,
            of_ceiling: o
                .and_then(|r| r.report.as_ref())
                .and_then(|v| of_ceiling(pair.ceiling, v, ceilings)),
        }
    }
}

/// The optimized variant's rate over the ceiling that bounds it, where that was measured.
pub fn of_ceiling(
    kind: CeilingKind,
    v: &VariantReport,
    ceilings: Option<&DeviceCeilings>,
) -> Option<(String, f64)> {
    match kind {
        CeilingKind::None => None,
        CeilingKind::CopyBandwidth => v
            .fraction_of_copy_bandwidth
            .map(|f| ("copy bandwidth".to_string(), f)),
        CeilingKind::Sgemm => {
            let c = ceilings?;
            let (name, ceiling) = match v.precision {
                Precision::Tf32 => ("TF32 GEMM", c.gemm_tf32.as_ref()?),
                _ => ("SGEMM", c.sgemm_fp32.as_ref()?),
            };
            Some((name.to_string(), v.throughput?.gflop_per_s / ceiling.value))
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompareReport {
    pub schema_version: u32,
    pub device: Option<DeviceInfo>,
    pub provenance: Provenance,
    pub rule: Rule,
    pub expectations: Option<String>,
    pub variants: Vec<VariantRun>,
    pub pairs: Vec<PairRow>,
    pub wall_s: f64,
}

impl CompareReport {
    /// Reasons for a non-zero exit: failures of any kind and significant regressions.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        for v in &self.variants {
            match &v.status {
                RunStatus::Ok => {}
                RunStatus::Failed => out.push(format!("{}: FAILED verification", v.id())),
                RunStatus::Error(e) => out.push(format!("{}: {e}", v.id())),
            }
            if v.verdict == Some(Verdict::Slower) {
                out.push(format!(
                    "{}: SLOWER than expected by {:.1}% (beyond noise and threshold)",
                    v.id(),
                    100.0 * v.change.unwrap_or(0.0)
                ));
            }
        }
        out
    }

    pub fn markdown(&self) -> String {
        let mut out = String::new();
        if let Some(d) = &self.device {
            out.push_str(&format!(
                "## compare on {} (driver {}, CUDA {})\n\n",
                d.name, d.driver_version, d.cuda_driver_version
            ));
        }
        let ms = |s: Option<f64>| cell(s, |s| format_ms(s * 1e3));
        let mut pairs = Table::new()
            .left("pair")
            .right("baseline")
            .right("optimized")
            .right("speedup")
            .left("verified")
            .right("of ceiling");
        for p in &self.pairs {
            pairs.row(vec![
                format!("{} ({} -> {})", p.id, p.baseline, p.optimized),
                ms(p.baseline_s),
                ms(p.optimized_s),
                cell(p.speedup.zip(p.speedup_uncertainty), |(s, u)| {
                    format!("{s:.2}x ± {u:.2}")
                }),
                if p.verified { "yes" } else { "NO" }.into(),
                cell(p.of_ceiling.as_ref(), |(n, f)| {
                    format!("{:.0}% {n}", 100.0 * f)
                }),
            ]);
        }
        out.push_str(&pairs.markdown());
        let mut variants = Table::new()
            .left("variant")
            .left("status")
            .right("median")
            .right("noise")
            .right("expected")
            .right("change")
            .left("verdict");
        for v in &self.variants {
            variants.row(vec![
                v.id(),
                match &v.status {
                    RunStatus::Ok => "ok".to_string(),
                    RunStatus::Failed => "FAILED".to_string(),
                    RunStatus::Error(e) => format!("ERROR: {e}"),
                },
                ms(v.timing.map(|t| t.median_s)),
                cell(v.timing, |t| percent(t.noise)),
                ms(v.expected.map(|t| t.median_s)),
                cell(v.change, |c| format!("{:+.1}%", 100.0 * c)),
                cell(v.verdict, |v| format!("{v:?}").to_uppercase()),
            ]);
        }
        out.push('\n');
        out.push_str(&variants.markdown());
        out.push_str(&format!(
            "\nrule: a change counts when it exceeds twice each run's noise and {:.0}%; UNSURE above {:.0}% noise. Total {:.1} s.\n",
            100.0 * self.rule.threshold,
            100.0 * self.rule.max_noise,
            self.wall_s
        ));
        if let Some(e) = &self.expectations {
            out.push_str(&format!("expectations: {e}\n"));
        }
        out
    }
}
