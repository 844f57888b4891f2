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

use crate::expectations::{Expectations, Expected};
use crate::host::{Host, Pacing};
use crate::lessons::{CeilingKind, Pair};
use crate::phases::{CeilingsTime, ChildTime};
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
    /// The lesson flags it ran with, when a pair asks for some (none: the lesson's defaults).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
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
    /// Wall time of the child process it ran in (shared by the variants that ran together).
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

/// "lesson/variant", and the lesson flags after it when the run had some.
pub fn run_id(lesson: &str, variant: &str, args: &[String]) -> String {
    let id = format!("{lesson}/{variant}");
    if args.is_empty() {
        id
    } else {
        format!("{id} {}", args.join(" "))
    }
}

impl VariantRun {
    /// "lesson/variant", and the lesson flags after it when it ran with some: a run at other
    /// sizes is another measurement, with an expectation of its own.
    pub fn id(&self) -> String {
        run_id(&self.lesson, &self.variant, &self.args)
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
    /// The ids of its two variant runs, baseline first (see [VariantRun::id]).
    pub fn run_ids(&self) -> [String; 2] {
        let lesson = self.id.split_once('/').map_or(self.id.as_str(), |(l, _)| l);
        [&self.baseline, &self.optimized].map(|v| run_id(lesson, v, &self.args))
    }

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
                Precision::Tf32 => ("TF32 GEMM".to_string(), c.gemm_tf32.as_ref()?),
                _ => c.sgemm()?,
            };
            Some((name, v.throughput?.gflop_per_s / ceiling.value))
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
    /// Where the time went, child process by child process (absent in older files).
    #[serde(default)]
    pub children: Vec<ChildTime>,
    /// The ceilings the compare measured or read itself.
    #[serde(default)]
    pub ceilings_time: Option<CeilingsTime>,
    /// The CUDA libraries the compare had the kernel read for its children (absent in older
    /// files).
    #[serde(default)]
    pub read_ahead: Option<common::libraries::ReadAhead>,
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

    /// Its phases table and, when it read the libraries ahead, that line (`--phases`).
    pub fn phases_markdown(&self) -> String {
        let mut out =
            crate::phases::markdown(&self.children, self.ceilings_time.as_ref(), self.wall_s);
        if let Some(r) = &self.read_ahead {
            out.push_str(&crate::phases::read_ahead_line(r));
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
            paced_by: None,
            bar: None,
            note: None,
        }
        .with_args(args)
    }

    #[test]
    fn a_pair_at_other_flags_takes_the_runs_made_at_its_flags() {
        let pinned = select(&["ch1-basics/pinned"])[0];
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
