//! What a compare run found: per variant (status, timing, verdict against the expectation) and
//! per pair (speedup with its uncertainty and 95% interval, whether the effect stands clear of
//! the noise, verification, share of the relevant ceiling), the table printed at the end, and
//! the exit rule.

use serde::{Deserialize, Serialize};

use common::ceilings::DeviceCeilings;
use common::gpu::DeviceInfo;
use common::report::{Provenance, Status, VariantReport};
use common::stats::Ratio;
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
    /// The lesson flags it ran with, when a pair asks for some (none: the lesson's defaults).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
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
    /// "lesson/variant", and the lesson flags after it when it ran with some: a run at other
    /// sizes is another measurement, with an expectation of its own.
    pub fn id(&self) -> String {
        let id = format!("{}/{}", self.lesson, self.variant);
        if self.args.is_empty() {
            id
        } else {
            format!("{id} {}", self.args.join(" "))
        }
    }

    /// The same run, made with the lesson flags `args`.
    pub fn with_args(self, args: &[&str]) -> VariantRun {
        VariantRun {
            args: args.iter().map(|a| a.to_string()).collect(),
            ..self
        }
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
            args: Vec::new(),
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

/// What a pair's speedup says, given its uncertainty.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Effect {
    /// The 95% interval lies above 1.0 and the speedup exceeds the threshold.
    Faster,
    /// The 95% interval includes 1.0, or the change is under the threshold either way.
    NoEffect,
    /// The 95% interval lies below 1.0 and the slowdown exceeds the threshold.
    Slower,
}

/// A pair's verdict: the effect, its 95% interval, and in words why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairVerdict {
    pub effect: Effect,
    /// The speedup's 95% interval (1.96 standard uncertainties either way).
    pub interval95: (f64, f64),
    pub reason: String,
}

impl PairVerdict {
    /// The verdict on `speedup` (baseline median over optimized median, with its uncertainty)
    /// under the rule's `threshold` (0.05: a change under 5% does not count). A pair run at
    /// other than its lesson's sizes names why in `size_note`, said with a missing effect.
    pub fn judge(speedup: Ratio, threshold: f64, size_note: &str) -> PairVerdict {
        let (lo, hi) = speedup.interval95();
        let s = speedup.value;
        let interval = format!("95% interval {lo:.2}x..{hi:.2}x");
        let (effect, mut reason) = if lo > 1.0 && s > 1.0 + threshold {
            (Effect::Faster, format!("{interval}, clear of 1.0"))
        } else if hi < 1.0 && s < 1.0 / (1.0 + threshold) {
            (Effect::Slower, format!("{interval}, below 1.0"))
        } else if lo <= 1.0 && hi >= 1.0 {
            (Effect::NoEffect, format!("{interval} includes 1.0"))
        } else {
            (
                Effect::NoEffect,
                format!(
                    "{interval}: a change under the {:.0}% that counts",
                    100.0 * threshold
                ),
            )
        };
        if effect == Effect::NoEffect && !size_note.is_empty() {
            reason.push_str(&format!("; run at this size because: {size_note}"));
        }
        PairVerdict {
            effect,
            interval95: (lo, hi),
            reason,
        }
    }

    /// The verdict column: "faster", "no effect at this size" or "SLOWER", with the interval.
    pub fn cell(&self) -> String {
        let (lo, hi) = self.interval95;
        let what = match self.effect {
            Effect::Faster => "faster",
            Effect::NoEffect => "no effect at this size",
            Effect::Slower => "SLOWER",
        };
        format!("{what} ({lo:.2}x..{hi:.2}x)")
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
    /// Whether the speedup stands clear of the noise, when both sides verified.
    #[serde(default)]
    pub verdict: Option<PairVerdict>,
    /// The lesson flags both sides ran with (none: the lesson's defaults).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    pub verified: bool,
    /// Achieved rate of the optimized variant over the relevant measured ceiling, and its name.
    pub of_ceiling: Option<(String, f64)>,
}

impl PairRow {
    /// The row of `pair` from the runs made; `threshold` is the rule's smallest change that
    /// counts (0.05 = 5%).
    pub fn build(
        pair: &Pair,
        runs: &[VariantRun],
        ceilings: Option<&DeviceCeilings>,
        threshold: f64,
    ) -> PairRow {
        let args: Vec<String> = pair.args.iter().map(|a| a.to_string()).collect();
        let find = |v: &str| {
            runs.iter()
                .find(|r| r.lesson == pair.lesson && r.variant == v && r.args == args)
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
        let verdict = s.zip(u).map(|(value, uncertainty)| {
            PairVerdict::judge(Ratio { value, uncertainty }, threshold, pair.size_note)
        });
        PairRow {
            id: pair.id(),
            baseline: pair.baseline.into(),
            optimized: pair.optimized.into(),
            baseline_s: bt.map(|t| t.median_s),
            optimized_s: ot.map(|t| t.median_s),
            speedup: s,
            speedup_uncertainty: u,
            verdict,
            args,
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
            .left("effect (95% interval)")
            .left("verified")
            .right("of ceiling");
        for p in &self.pairs {
            let at = if p.args.is_empty() {
                String::new()
            } else {
                format!(" at {}", p.args.join(" "))
            };
            pairs.row(vec![
                format!("{} ({} -> {}){at}", p.id, p.baseline, p.optimized),
                ms(p.baseline_s),
                ms(p.optimized_s),
                cell(p.speedup.zip(p.speedup_uncertainty), |(s, u)| {
                    format!("{s:.2}x ± {u:.2}")
                }),
                cell(p.verdict.as_ref(), PairVerdict::cell),
                if p.verified { "yes" } else { "NO" }.into(),
                cell(p.of_ceiling.as_ref(), |(n, f)| {
                    format!("{:.0}% {n}", 100.0 * f)
                }),
            ]);
        }
        out.push_str(&pairs.markdown());
        out.push_str(&format!(
            "\neffect: faster when the speedup's 95% interval (1.96 standard uncertainties of the ratio of medians) lies above 1.0 and the speedup exceeds {:.0}%, SLOWER when it lies as clearly below; no effect at this size otherwise.\n",
            100.0 * self.rule.threshold
        ));
        for p in &self.pairs {
            if let Some(v) = p.verdict.as_ref().filter(|v| v.effect != Effect::Faster) {
                out.push_str(&format!("{}: {}\n", p.id, v.reason));
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lessons::{select, PINNED_ARGS};
    use crate::rule::Timing;

    fn ratio(value: f64, uncertainty: f64) -> Ratio {
        Ratio { value, uncertainty }
    }

    #[test]
    fn an_effect_counts_when_its_interval_is_clear_of_one_and_over_the_threshold() {
        let v = PairVerdict::judge(ratio(1.8, 0.05), 0.05, "");
        assert_eq!(v.effect, Effect::Faster);
        assert!((v.interval95.0 - (1.8 - 1.959964 * 0.05)).abs() < 1e-9);
        assert_eq!(v.cell(), "faster (1.70x..1.90x)");
        assert!(v.reason.ends_with("clear of 1.0"), "{}", v.reason);
        // The H100's pinned pair at the chapter's size: 1.10x +- 0.06 reaches down to 0.98x.
        let v = PairVerdict::judge(ratio(1.10, 0.06), 0.05, "");
        assert_eq!(v.effect, Effect::NoEffect);
        assert_eq!(v.cell(), "no effect at this size (0.98x..1.22x)");
        assert!(v.reason.ends_with("includes 1.0"), "{}", v.reason);
        // Clear of 1.0 but under the threshold: no effect that counts.
        let v = PairVerdict::judge(ratio(1.03, 0.005), 0.05, "");
        assert_eq!(v.effect, Effect::NoEffect);
        assert!(
            v.reason.contains("under the 5% that counts"),
            "{}",
            v.reason
        );
        // Just over the threshold with a tight interval: faster.
        assert_eq!(
            PairVerdict::judge(ratio(1.06, 0.005), 0.05, "").effect,
            Effect::Faster
        );
        // Clearly slower.
        let v = PairVerdict::judge(ratio(0.5, 0.01), 0.05, "");
        assert_eq!(v.effect, Effect::Slower);
        assert!(v.cell().starts_with("SLOWER"));
        // Below 1.0 but within the threshold: no effect.
        assert_eq!(
            PairVerdict::judge(ratio(0.97, 0.001), 0.05, "").effect,
            Effect::NoEffect
        );
    }

    #[test]
    fn a_missing_effect_says_why_the_pair_runs_at_its_size() {
        let v = PairVerdict::judge(ratio(1.0, 0.02), 0.05, "4 MiB copies per pass");
        assert!(
            v.reason
                .ends_with("run at this size because: 4 MiB copies per pass"),
            "{}",
            v.reason
        );
        let v = PairVerdict::judge(ratio(2.0, 0.02), 0.05, "4 MiB copies per pass");
        assert!(!v.reason.contains("because"), "{}", v.reason);
    }

    fn run(variant: &str, median_s: f64, args: &[&str]) -> VariantRun {
        VariantRun {
            lesson: "ch1-basics".into(),
            variant: variant.into(),
            args: Vec::new(),
            status: RunStatus::Ok,
            timing: Some(Timing {
                median_s,
                noise: 0.02,
                samples: 40,
            }),
            report: None,
            expected: None,
            verdict: None,
            change: None,
            wall_s: 1.0,
        }
        .with_args(args)
    }

    #[test]
    fn a_pair_at_other_flags_takes_the_runs_made_at_its_flags() {
        let pinned = select(Some("ch1-basics/pinned"))[0];
        let runs = vec![
            run("training:baseline", 0.100, &[]),
            run("training:pinned", 0.095, &[]),
            run("training:baseline", 0.012, PINNED_ARGS),
            run("training:pinned", 0.006, PINNED_ARGS),
        ];
        assert_eq!(
            runs[2].id(),
            "ch1-basics/training:baseline --batch 4096 --microbatch 4096"
        );
        assert_eq!(runs[0].id(), "ch1-basics/training:baseline");
        let row = PairRow::build(&pinned, &runs, None, 0.05);
        assert_eq!(
            (row.baseline_s, row.optimized_s),
            (Some(0.012), Some(0.006))
        );
        assert_eq!(row.args, PINNED_ARGS);
        let verdict = row.verdict.as_ref().unwrap();
        assert_eq!(verdict.effect, Effect::Faster);
        // Without the runs at its flags the pair has no speedup and no verdict.
        let row = PairRow::build(&pinned, &runs[..2], None, 0.05);
        assert!(!row.verified && row.speedup.is_none() && row.verdict.is_none());
        // A row read back from a compare written before verdicts existed.
        let mut json = serde_json::to_value(&row).unwrap();
        json.as_object_mut().unwrap().remove("verdict");
        let old: PairRow = serde_json::from_value(json).unwrap();
        assert_eq!(old.verdict, None);
    }
}
