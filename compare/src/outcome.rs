//! What a compare run found: per variant (status, timing, verdict against the expectation) and
//! per pair (speedup with its uncertainty, verification, share of the relevant ceiling), the
//! table printed at the end, and the exit rule.

use serde::{Deserialize, Serialize};

use common::ceilings::DeviceCeilings;
use common::gpu::DeviceInfo;
use common::report::{Provenance, Status, VariantReport};
use common::table::{cell, format_ms, percent, Table};
use common::verify::Precision;

use crate::expectations::{Expectations, Expected};
use crate::host::{Host, Pacing};
use crate::lessons::{CeilingKind, Pair};
use crate::rule::{speedup, Rule, RunSpread, Timing, Verdict, MIN_RUNS};

/// 2: each variant says what paces it and why it has no verdict; the machine is recorded;
/// NO_EXPECTATION is a verdict. Version 1 files (without those) still read.
pub const COMPARE_SCHEMA_VERSION: u32 = 2;

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
    /// What it was judged against: a device-paced variant's timing for this GPU model, or,
    /// for a host-paced one, the center of the runs recorded on this machine (noise: their
    /// run-to-run spread; samples: how many runs).
    pub expected: Option<Timing>,
    pub verdict: Option<Verdict>,
    /// current / expected - 1.
    pub change: Option<f64>,
    pub wall_s: f64,
    /// What set its time, from its report (None when it was not timed).
    #[serde(default)]
    pub paced_by: Option<Pacing>,
    /// The relative change that would have counted.
    #[serde(default)]
    pub bar: Option<f64>,
    /// Why the verdict is NO_EXPECTATION or UNSURE, when the numbers do not say.
    #[serde(default)]
    pub note: Option<String>,
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
            paced_by: report.and_then(Pacing::of),
            report: report.cloned(),
            expected: None,
            verdict: None,
            change: None,
            wall_s,
            bar: None,
            note: None,
        }
    }

    /// Judge a verified, timed run against `expectations` (or the reason there are none) on
    /// `host`: device-paced variants by the GPU model's timing, host-paced ones by the runs
    /// recorded on this machine.
    pub fn judge(&mut self, expectations: Result<&Expectations, &str>, host: &Host, rule: &Rule) {
        let (RunStatus::Ok, Some(current)) = (&self.status, self.timing) else {
            return;
        };
        let pacing = self.paced_by.unwrap_or(Pacing::Device);
        let expected = match expectations {
            Ok(e) => e.expected(&self.id(), pacing, host),
            Err(why) => Expected::Nothing(why.to_string()),
        };
        match expected {
            Expected::Device(t) => {
                let (v, change) = rule.judge(&t, &current);
                self.expected = Some(t);
                self.verdict = Some(v);
                self.change = Some(change);
                self.bar = Some(rule.bar(&t, &current));
            }
            Expected::Runs(runs) => {
                let (v, change, bar) = rule.judge_runs(runs, &current);
                self.verdict = Some(v);
                self.bar = bar;
                match RunSpread::of(runs) {
                    Some(s) => {
                        self.expected = Some(Timing {
                            median_s: s.center_s,
                            noise: s.spread,
                            samples: s.runs,
                        });
                        self.change = Some(change);
                    }
                    None => {
                        self.note = Some(format!(
                            "host-paced: {} of {MIN_RUNS} runs recorded on this machine, so its run-to-run noise is not known yet (each --update-expectations adds one)",
                            runs.len()
                        ))
                    }
                }
            }
            Expected::Nothing(why) => {
                self.verdict = Some(Verdict::NoExpectation);
                self.note = Some(why);
            }
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
    /// The machine, for host-paced variants (absent in version 1).
    #[serde(default)]
    pub host: Option<Host>,
    pub provenance: Provenance,
    pub rule: Rule,
    pub expectations: Option<String>,
    pub variants: Vec<VariantRun>,
    pub pairs: Vec<PairRow>,
    pub wall_s: f64,
}

impl CompareReport {
    /// A compare's JSON, of this version or the first; the error says what to do.
    pub fn read(path: &std::path::Path) -> Result<CompareReport, String> {
        const ADVICE: &str = "regenerate it with scripts/gpu-results on that GPU";
        let value = crate::read_any_version(
            path,
            &[1, COMPARE_SCHEMA_VERSION],
            "a compare result",
            ADVICE,
        )
        .map_err(|e| e.to_string())?;
        serde_json::from_value(value).map_err(|e| {
            format!(
                "{}: written by an older build, in a shape this one cannot read ({e}): {ADVICE}",
                path.display()
            )
        })
    }

    /// Reasons for a non-zero exit: failures of any kind and significant regressions.
    pub fn problems(&self) -> Vec<String> {
        let mut out = self.failures();
        out.extend(self.regressions());
        out
    }

    /// Variants that failed verification or gave no result.
    pub fn failures(&self) -> Vec<String> {
        self.variants
            .iter()
            .filter_map(|v| match &v.status {
                RunStatus::Ok => None,
                RunStatus::Failed => Some(format!("{}: FAILED verification", v.id())),
                RunStatus::Error(e) => Some(format!("{}: {e}", v.id())),
            })
            .collect()
    }

    /// Variants judged SLOWER.
    pub fn regressions(&self) -> Vec<String> {
        self.variants
            .iter()
            .filter(|v| v.verdict == Some(Verdict::Slower))
            .map(|v| {
                format!(
                    "{}: SLOWER than expected by {:.1}% (beyond noise and threshold)",
                    v.id(),
                    100.0 * v.change.unwrap_or(0.0)
                )
            })
            .collect()
    }

    /// "gate: 11 judged (10 SAME, 1 UNSURE); 6 NO EXPECTATION": every verdict counted.
    pub fn verdict_counts(&self) -> String {
        let count = |v: Verdict| {
            self.variants
                .iter()
                .filter(|r| r.verdict == Some(v))
                .count()
        };
        let judged = [
            Verdict::Same,
            Verdict::Faster,
            Verdict::Slower,
            Verdict::Unsure,
        ]
        .map(|v| (v, count(v)));
        let n: usize = judged.iter().map(|(_, c)| c).sum();
        let parts: Vec<String> = judged
            .iter()
            .filter(|(_, c)| *c > 0)
            .map(|(v, c)| format!("{c} {}", v.label()))
            .collect();
        let mut out = format!("gate: {n} judged");
        if !parts.is_empty() {
            out.push_str(&format!(" ({})", parts.join(", ")));
        }
        out.push_str(&format!(
            "; {} NO EXPECTATION",
            count(Verdict::NoExpectation)
        ));
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
            .left("paced by")
            .right("median")
            .right("noise")
            .right("expected")
            .right("change")
            .right("counts beyond")
            .left("verdict");
        for v in &self.variants {
            variants.row(vec![
                v.id(),
                match &v.status {
                    RunStatus::Ok => "ok".to_string(),
                    RunStatus::Failed => "FAILED".to_string(),
                    RunStatus::Error(e) => format!("ERROR: {e}"),
                },
                cell(v.paced_by, |p| p.label().to_string()),
                ms(v.timing.map(|t| t.median_s)),
                cell(v.timing, |t| percent(t.noise)),
                ms(v.expected.map(|t| t.median_s)),
                cell(v.change.filter(|c| c.is_finite()), |c| {
                    format!("{:+.1}%", 100.0 * c)
                }),
                cell(v.bar, |b| format!("±{:.1}%", 100.0 * b)),
                cell(v.verdict, |v| v.label().to_string()),
            ]);
        }
        out.push('\n');
        out.push_str(&variants.markdown());
        out.push('\n');
        for v in &self.variants {
            if let (Some(verdict), Some(note)) = (v.verdict, &v.note) {
                out.push_str(&format!("{} {}: {note}\n", verdict.label(), v.id()));
            }
        }
        out.push_str(&format!(
            "rule: a device-paced variant's change counts beyond twice each run's noise and {:.0}%; a host-paced one's beyond its runs' spread on this machine (at least {MIN_RUNS} runs), twice its noise and {:.0}%; UNSURE above {:.0}% noise. Total {:.1} s.\n",
            100.0 * self.rule.threshold,
            100.0 * self.rule.threshold,
            100.0 * self.rule.max_noise,
            self.wall_s
        ));
        if let Some(h) = &self.host {
            out.push_str(&format!("machine: {}\n", h.label()));
        }
        if let Some(e) = &self.expectations {
            out.push_str(&format!("expectations: {e}\n"));
        }
        out.push_str(&self.verdict_counts());
        out.push('\n');
        out
    }
}
