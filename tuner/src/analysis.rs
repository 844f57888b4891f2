//! What a sweep concludes from its trials, as plain functions over their results (so the rules
//! are tested on constructed ones): the best configurations, the recommendation (by the one rule
//! of [crate::recommend]), and the diagnosis in words, which states only what was measured.

use serde::{Deserialize, Serialize};

use common::stats::Summary;

use crate::classify::Status;
use crate::program::{Axes, Precision};
use crate::protocol::ThroughputSource;
use crate::trial::TrialResult;
use common::named::Named;

/// One point of the sweep. Ordered for a deterministic tie-break: smaller batch, fewer workers,
/// fp32 before bf16 before fp16, then the user's axes' values as text.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct TrialKey {
    pub batch: usize,
    pub workers: usize,
    /// The precision the trial ran in (`on` resolved).
    pub amp: Precision,
    #[serde(skip_serializing_if = "Named::is_empty")]
    pub axes: Axes,
}

impl TrialKey {
    /// The configuration without the batch: one line of the plot.
    pub fn line_label(&self) -> String {
        let axes: String = (self.axes.iter())
            .map(|(name, value)| format!(", {name} {value}"))
            .collect();
        format!("workers {}, {}{axes}", self.workers, self.amp.label())
    }
}

/// Whether the lowest or the highest value of a metric is best.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Goal {
    Min,
    Max,
}

/// `--pick loss:min`: the recommendation by a metric the program reports, not by throughput.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PickRule {
    pub metric: String,
    pub goal: Goal,
}

impl PickRule {
    pub fn parse(s: &str) -> Result<PickRule, String> {
        let form = || format!("'{s}' is not METRIC:min or METRIC:max (e.g. --pick loss:min)");
        let (metric, goal) = s.rsplit_once(':').ok_or_else(form)?;
        let goal = match goal.trim() {
            "min" => Goal::Min,
            "max" => Goal::Max,
            _ => return Err(form()),
        };
        let metric = Some(metric.trim()).filter(|m| !m.is_empty());
        Ok(PickRule {
            metric: metric.ok_or_else(form)?.to_string(),
            goal,
        })
    }

    /// `lowest loss`, `highest accuracy`.
    pub fn describe(&self) -> String {
        let which = match self.goal {
            Goal::Min => "lowest",
            Goal::Max => "highest",
        };
        format!("{which} {}", self.metric)
    }

    /// The message for a metric no trial reported, naming those that were.
    pub fn unreported(&self, trials: &[TrialResult]) -> Option<String> {
        let seen = names_in(trials, |t| t.measured.metrics.names().collect());
        if seen.contains(&self.metric.as_str()) {
            return None;
        }
        let reported = if seen.is_empty() {
            "no trial reported any metric (a \"metrics\" object on its step or end lines)".into()
        } else {
            format!("the trials reported {}", seen.join(", "))
        };
        Some(format!(
            "--pick {}: no trial reported a metric '{}'; {reported}",
            self.metric, self.metric
        ))
    }
}

/// Names in the order the trials first have them.
pub fn names_in<'a>(
    trials: &'a [TrialResult],
    of: impl Fn(&'a TrialResult) -> Vec<&'a str>,
) -> Vec<&'a str> {
    let mut seen = std::collections::HashSet::new();
    let mut out: Vec<&str> = trials.iter().flat_map(of).collect();
    out.retain(|name| seen.insert(*name));
    out
}

/// A metric's value as tables show it: four significant figures, `NaN` for one that was not a
/// number.
pub fn metric_text(v: Option<f64>) -> String {
    match v {
        None => "NaN".into(),
        Some(0.0) => "0".into(),
        Some(v) if (1e-3..1e5).contains(&v.abs()) => {
            let decimals = (3 - v.abs().log10().floor() as i32).max(0) as usize;
            format!("{v:.decimals$}")
        }
        Some(v) => format!("{v:.3e}"),
    }
}

impl TrialResult {
    /// The trial's point of the sweep.
    pub fn key(&self) -> TrialKey {
        TrialKey {
            batch: self.params.batch_size,
            workers: self.params.workers,
            amp: self.params.amp,
            axes: self.params.axes.clone(),
        }
    }

    /// Why a trial that ended OK cannot be picked by `rule`, or None when it can: it did not
    /// report the metric, reported one that was not a number, or its peak is inside the margin.
    pub fn not_picked_by(&self, rule: &PickRule, margin: f64) -> Option<String> {
        let m = &rule.metric;
        match self.measured.metrics.get(m) {
            None => Some(format!("reported no {m}")),
            Some(v) if !v.is_some_and(f64::is_finite) => Some(format!("{m} not a number")),
            Some(_) if !within_margin(self, margin) => Some(format!(
                "peak inside the {:.0}% memory margin",
                100.0 * margin
            )),
            Some(_) => None,
        }
    }

    /// Its peak memory, for a trial that ended OK (in the terms of [TrialResult::memory_terms]).
    pub fn ok_peak(&self) -> Option<u64> {
        self.memory_terms().0.filter(|_| self.status == Status::Ok)
    }

    /// Its peak over its memory limit, where both are known (in the terms of
    /// [TrialResult::memory_terms]).
    pub fn limit_share(&self) -> Option<f64> {
        let (peak, limit) = self.memory_terms();
        Some(peak? as f64 / limit? as f64)
    }

    /// How busy the GPU was: the program's own figure, else NVML's utilization.
    pub fn busy(&self) -> Option<(f64, &'static str)> {
        let program = (self.measured.gpu_busy).map(|b| (b, "as the program measured it"));
        let nvml = self.nvml_util_pct.map(|u| (u / 100.0, "NVML utilization"));
        program.or(nvml).filter(|_| self.status == Status::Ok)
    }

    /// The data phase over the step, both `at` one figure of their summaries: the median, or
    /// the p90 for the slow steps (over the bar while the median is not, the loader stalls now
    /// and then: a worker's slow batch, a page cache miss, that the median hides).
    pub fn data_fraction(&self, at: fn(&Summary) -> f64) -> Option<f64> {
        match (&self.measured.data_ms, &self.measured.step_ms) {
            (Some(d), Some(s)) if self.status == Status::Ok && at(s) > 0.0 => Some(at(d) / at(s)),
            _ => None,
        }
    }

    /// Samples/s and peak memory of a trial that can make a pick: it ended OK and its samples/s
    /// came from step lines (not from the process's wall time, which counts its start-up).
    fn pickable(&self) -> Option<(f64, u64)> {
        let t = (self.measured.samples_per_s).filter(|t| t.is_finite() && *t > 0.0)?;
        let from_steps = self.measured.source == ThroughputSource::Protocol;
        from_steps.then_some((t, self.ok_peak()?))
    }
}

/// A chosen trial and the figure it was chosen by.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Pick {
    pub key: TrialKey,
    pub samples_per_s: f64,
    pub peak_bytes: u64,
    /// The value of the metric it was picked by (`--pick`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metric: Option<f64>,
    pub why: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Best {
    pub highest_throughput: Option<Pick>,
    /// Samples/s per GB of peak memory.
    pub best_efficiency: Option<Pick>,
    /// The one rule ([crate::recommend]): the fastest trial whose peak leaves the margin of its
    /// memory limit free, the smallest batch within 5% of it.
    pub recommended: Option<Pick>,
    /// The margin the recommendation kept free.
    pub margin: f64,
    /// The metric the recommendation was picked by (`--pick`); by throughput without it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub picked_by: Option<PickRule>,
}

impl Pick {
    /// Trial `t`, chosen at `samples_per_s` (by `metric`, where one chose it) for `why`.
    fn of(t: &TrialResult, samples_per_s: f64, metric: Option<f64>, why: String) -> Pick {
        Pick {
            key: t.key(),
            samples_per_s,
            peak_bytes: t.memory_terms().0.unwrap_or(0),
            metric,
            why,
        }
    }
}

/// Throughput within this fraction of the best counts as as good.
pub const WITHIN: f64 = 0.05;

/// The trial of the highest `score` (by samples/s and peak memory), equal ones going to the
/// smaller key, chosen for its score in `unit`.
fn pick_max(trials: &[TrialResult], score: impl Fn(f64, u64) -> f64, unit: &str) -> Option<Pick> {
    trials
        .iter()
        .filter_map(|t| t.pickable().map(|(tp, mem)| (t, tp, score(tp, mem))))
        .max_by(|a, b| a.2.total_cmp(&b.2).then(b.0.key().cmp(&a.0.key())))
        .map(|(t, samples_per_s, s)| Pick::of(t, samples_per_s, None, format!("{s:.0} {unit}")))
}

/// Whether a trial's peak leaves the margin free; a trial whose limit is not known counts (and
/// the pick says so).
fn within_margin(t: &TrialResult, margin: f64) -> bool {
    match t.memory_terms() {
        (Some(peak), Some(limit)) => crate::margin::leaves_margin(peak, limit, margin),
        _ => true,
    }
}

pub fn best(trials: &[TrialResult], margin: f64) -> Best {
    let highest_throughput = pick_max(trials, |t, _| t, "samples/s");
    let best_efficiency = pick_max(
        trials,
        |t, m| t / (m.max(1) as f64 / 1e9),
        "samples/s per GB of peak memory",
    );
    let fitting: Vec<(&TrialResult, f64)> = trials
        .iter()
        .filter(|t| within_margin(t, margin))
        .filter_map(|t| Some((t, t.pickable()?.0)))
        .collect();
    let top = fitting.iter().map(|f| f.1).fold(0.0f64, f64::max);
    let recommended = fitting
        .into_iter()
        .filter(|&(_, tp)| tp >= (1.0 - WITHIN) * top)
        .min_by(|(a, ta), (b, tb)| {
            (a.params.batch_size.cmp(&b.params.batch_size))
                .then(tb.total_cmp(ta))
                .then(a.key().cmp(&b.key()))
        })
        .map(|(t, tp)| {
            let why = format!(
                "{tp:.0} samples/s ({:.0}% of the fastest within the margin; {}), smallest batch within {:.0}%",
                100.0 * tp / top,
                memory_note(t, margin),
                100.0 * WITHIN
            );
            Pick::of(t, tp, None, why)
        });
    Best {
        highest_throughput,
        best_efficiency,
        recommended,
        margin,
        picked_by: None,
    }
}

/// The trial's peak against its limit and the margin kept, or that the limit is not known.
fn memory_note(t: &TrialResult, margin: f64) -> String {
    match t.memory_terms() {
        (Some(p), Some(l)) => format!(
            "peak {} of {}, {:.0}% kept free",
            plotting::format::gigabytes(p as f64, 2),
            plotting::format::gigabytes(l as f64, 2),
            100.0 * margin
        ),
        _ => "memory limit not known: the margin could not be checked".into(),
    }
}

/// [best], with the recommendation by `rule`'s metric where one is given: the best value among
/// the trials that ended OK, reported it as a number and leave the margin free (the same memory
/// rule as by throughput); equal values go to the higher throughput, then the smaller batch.
pub fn best_by(trials: &[TrialResult], margin: f64, rule: Option<&PickRule>) -> Best {
    let mut b = best(trials, margin);
    let Some(rule) = rule else { return b };
    let candidates: Vec<(&TrialResult, f64)> = trials
        .iter()
        .filter(|t| t.status == Status::Ok && t.not_picked_by(rule, margin).is_none())
        .filter_map(|t| Some((t, (*t.measured.metrics.get(&rule.metric)?)?)))
        .collect();
    let throughput = |t: &TrialResult| t.measured.samples_per_s.unwrap_or(0.0);
    let count = candidates.len();
    b.recommended = candidates
        .into_iter()
        .min_by(|(a, va), (b, vb)| {
            // The best value first.
            (match rule.goal {
                Goal::Min => va.total_cmp(vb),
                Goal::Max => vb.total_cmp(va),
            })
                .then(throughput(b).total_cmp(&throughput(a)))
                .then(a.key().cmp(&b.key()))
        })
        .map(|(t, v)| {
            let why = format!(
                "{} {}, the {} of the {count} trial(s) that ended OK, reported it and leave the margin free ({}); {:.0} samples/s",
                rule.metric,
                metric_text(Some(v)),
                rule.describe(),
                memory_note(t, margin),
                throughput(t),
            );
            Pick::of(t, throughput(t), Some(v), why)
        });
    b.picked_by = Some(rule.clone());
    b
}

/// What the measurements say about mixed precision against out-of-memory: its measured peak
/// against fp32's at the largest batch at which fp32 and a mixed precision (bf16 before fp16) of
/// one setting ran and reported a peak. None where no batch has both.
pub fn amp_advice(trials: &[TrialResult]) -> Option<String> {
    let peaks = || trials.iter().filter_map(|t| Some((t.key(), t.ok_peak()?)));
    let (batch, fp32, amp, precision) = peaks()
        .filter(|(k, _)| k.amp == Precision::Off)
        .filter_map(|(k, fp32)| {
            [Precision::Bf16, Precision::Fp16]
                .into_iter()
                .find_map(|p| {
                    let mut amp = k.clone();
                    amp.amp = p;
                    Some((k.batch, fp32, peaks().find(|a| a.0 == amp)?.1, p))
                })
        })
        .max_by_key(|m| m.0)?;
    let name = precision.label();
    // Negative when mixed precision needs less.
    let change = amp as f64 / fp32 as f64 - 1.0;
    let [amp, fp32] = [amp, fp32].map(|b| plotting::format::gigabytes(b as f64, 2));
    let at = format!("at batch {batch} ({amp} against {fp32} in fp32)");
    Some(if change < -0.01 {
        let less = -100.0 * change;
        format!("{name} measured {less:.0}% less memory {at}: it lets a larger batch fit")
    } else {
        let more = 100.0 * change;
        format!("{name} does not help here: it measured {more:+.0}% memory {at}")
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Finding {
    DataBound,
    UnderFilled,
    MemoryBound,
    AllOutOfMemory,
    Healthy,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Diagnosis {
    pub finding: Finding,
    pub message: String,
}

/// Data phase share over which a configuration is data-bound.
pub const DATA_BOUND: f64 = 0.30;
/// Busy share (the program's, else NVML's utilization) under which the GPU is under-filled.
pub const UNDER_FILLED: f64 = 0.70;

/// The diagnosis of the configuration a user would run: the recommended one (else the fastest).
pub fn diagnose(trials: &[TrialResult], best: &Best) -> Vec<Diagnosis> {
    let of = |finding, message| Diagnosis { finding, message };
    let mut out = Vec::new();
    let mut ran = trials
        .iter()
        .filter(|t| t.status != Status::Skipped)
        .peekable();
    if ran.peek().is_some() && ran.all(|t| t.status == Status::Oom) {
        let message = "every trial ran out of device memory: use smaller batches (with gradient accumulation to keep the effective batch) or a smaller model";
        return vec![of(Finding::AllOutOfMemory, message.into())];
    }
    let chosen = (best.recommended.as_ref()).or(best.highest_throughput.as_ref());
    let Some((pick, t)) = chosen.and_then(|p| Some((p, trials.iter().find(|t| t.key() == p.key)?)))
    else {
        return out;
    };
    let at = format!("at batch {} ({})", pick.key.batch, pick.key.line_label());
    if let Some(which) = data_bound(t) {
        out.push(of(Finding::DataBound, format!(
            "data-bound {at}: {which} (over {:.0}%); add loader workers (and pinned memory, if the loader does not use it)",
            100.0 * DATA_BOUND,
        )));
    }
    if let Some((b, how)) = t.busy().filter(|&(b, _)| b < UNDER_FILLED) {
        out.push(of(Finding::UnderFilled, format!(
            "under-filled GPU {at}: busy {:.0}% of the step ({how}; under {:.0}%); a larger batch gives it more work per launch",
            100.0 * b,
            100.0 * UNDER_FILLED
        )));
    }
    let near = trials
        .iter()
        // The same setting: all but the batch.
        .filter(|x| {
            let mut setting = x.key();
            setting.batch = pick.key.batch;
            setting == pick.key
        })
        .find(|x| {
            x.status == Status::Oom || x.pickable().is_some() && !within_margin(x, best.margin)
        });
    if let Some(x) = near {
        let amp = amp_advice(trials).unwrap_or_else(|| {
            "mixed precision's memory was not measured against fp32 at one batch (sweep with --amp off,on to see whether it helps)".into()
        });
        out.push(of(Finding::MemoryBound, format!(
            "memory-bound: batch {} {} (the rule keeps {:.0}% of the memory free); use a smaller batch with gradient accumulation. {amp}",
            x.params.batch_size,
            if x.status == Status::Oom { "ran out of memory" } else { "comes within the margin" },
            100.0 * best.margin,
        )));
    }
    if out.is_empty() {
        out.push(of(Finding::Healthy, format!("{at}: {}", healthy(t))));
    }
    out
}

/// Whether the loader holds the trial back, and how, in words: at the median step (the data
/// phase over the bar of the median step), or only at the slow steps (the p90 data phase over
/// the bar of the p90 step while the median is not: occasional stalls).
pub fn data_bound(t: &TrialResult) -> Option<String> {
    let over = |d: Option<f64>| d.filter(|&d| d > DATA_BOUND);
    if let Some(d) = over(t.data_fraction(|s| s.median)) {
        return Some(format!(
            "the data phase is {:.0}% of the median step",
            100.0 * d
        ));
    }
    let slow = over(t.data_fraction(|s| s.p90))?;
    Some(format!(
        "the loader stalls at the slow steps: the p90 data phase is {:.0}% of the p90 step, though {:.0}% of the median",
        100.0 * slow,
        100.0 * t.data_fraction(|s| s.median).unwrap_or(0.0)
    ))
}

/// What was measured of a trial with no finding, each figure named; what was not measured is
/// said to be so, never assumed.
fn healthy(t: &TrialResult) -> String {
    let busy = t.busy().map_or_else(
        || "how busy the GPU is was not measured (no NVML reading, no gpu_busy reported)".into(),
        |(b, how)| format!("the GPU is busy {:.0}% of the step ({how})", 100.0 * b),
    );
    let data = (t.data_fraction(|s| s.median)).map_or_else(
        || "the data phase was not reported".into(),
        |d| format!("data takes {:.0}% of the step", 100.0 * d),
    );
    let memory = t.limit_share().map_or_else(
        || "the memory limit is not known".into(),
        |s| format!("the peak is {:.0}% of the memory limit", 100.0 * s),
    );
    format!("{busy}, {data}, {memory}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use common::stats::Summary;

    const GB: u64 = 1_000_000_000;
    /// 20% of 100 GB kept free: the recommendation stays under 80 GB.
    const MARGIN: f64 = 0.2;

    fn trial(batch: usize, status: Status) -> TrialResult {
        let params = crate::program::Params {
            batch_size: batch,
            workers: 4,
            ..Default::default()
        };
        TrialResult {
            status,
            params,
            ..TrialResult::default()
        }
    }

    /// A data phase of `fraction` of the step.
    fn data(t: &mut TrialResult, fraction: f64) {
        t.measured.step_ms = Summary::of(&[1.0]);
        t.measured.data_ms = Summary::of(&[fraction]);
    }

    /// Measured from its step lines, peaking at `mem_gb` of a 100 GB limit.
    fn ok(batch: usize, tp: f64, mem_gb: f64) -> TrialResult {
        let mut t = trial(batch, Status::Ok);
        t.measured.source = ThroughputSource::Protocol;
        t.measured.samples_per_s = Some(tp);
        t.memory.peak_bytes = Some((mem_gb * GB as f64) as u64);
        (t.memory.device_total_bytes, t.memory.device_before_bytes) = (Some(100 * GB), Some(0));
        t.measured.gpu_busy = Some(0.95);
        data(&mut t, 0.05);
        t
    }

    fn oom(batch: usize) -> TrialResult {
        trial(batch, Status::Oom)
    }

    /// The diagnosis of the trials with their own picks.
    fn diagnosed(trials: &[TrialResult]) -> Vec<Diagnosis> {
        diagnose(trials, &best(trials, MARGIN))
    }

    #[test]
    fn picks_throughput_efficiency_and_recommendation() {
        let trials = vec![
            ok(64, 1000.0, 1.0),
            ok(128, 1980.0, 2.0),
            ok(256, 2000.0, 5.0),
            ok(512, 2100.0, 90.0),
        ];
        let b = best(&trials, MARGIN);
        assert_eq!(b.highest_throughput.unwrap().key.batch, 512);
        assert_eq!(
            b.best_efficiency.unwrap().key.batch,
            64,
            "1000/GB beats 990/GB"
        );
        // 512 uses 90 of 100 GB, inside the 20% margin: out. Best under the limit is 2000 (256); 128 is within 5%.
        assert_eq!(b.recommended.unwrap().key.batch, 128);
    }

    #[test]
    fn ties_go_to_the_smaller_batch_then_fewer_workers() {
        let mut a = ok(256, 2000.0, 1.0);
        a.params.workers = 8;
        let c = ok(256, 2000.0, 1.0);
        let d = ok(512, 2000.0, 1.0);
        let b = best(&[a, d, c], MARGIN);
        let top = b.highest_throughput.unwrap();
        assert_eq!((top.key.batch, top.key.workers), (256, 4));
        assert_eq!(b.recommended.unwrap().key.workers, 4);
    }

    #[test]
    fn all_oom_gives_no_pick_and_says_so() {
        let trials = vec![oom(1), trial(2, Status::Skipped)];
        let b = best(&trials, MARGIN);
        assert!(
            b.highest_throughput.is_none()
                && b.recommended.is_none()
                && b.best_efficiency.is_none()
        );
        let d = diagnose(&trials, &b);
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].finding, Finding::AllOutOfMemory);
    }

    #[test]
    fn a_single_config_is_every_pick() {
        let trials = vec![ok(32, 500.0, 1.0)];
        let b = best(&trials, MARGIN);
        let key = trials[0].key();
        let key = Some(&key);
        assert_eq!(b.highest_throughput.as_ref().map(|p| &p.key), key);
        assert_eq!(b.best_efficiency.as_ref().map(|p| &p.key), key);
        assert_eq!(b.recommended.as_ref().map(|p| &p.key), key);
        let d = diagnose(&trials, &b);
        assert_eq!(d[0].finding, Finding::Healthy);
    }

    #[test]
    fn nothing_under_the_memory_share_means_no_recommendation() {
        let trials = vec![ok(32, 500.0, 85.0)];
        let b = best(&trials, MARGIN);
        assert!(b.recommended.is_none());
        assert!(b.highest_throughput.is_some());
        let d = diagnose(&trials, &b);
        assert!(d.iter().any(|d| d.finding == Finding::MemoryBound), "{d:?}");
    }

    #[test]
    fn diagnosis_thresholds() {
        let mut t = ok(64, 1000.0, 1.0);
        data(&mut t, 0.31);
        t.measured.gpu_busy = Some(0.69);
        let d = diagnosed(&[t, oom(128)]);
        let findings: Vec<Finding> = d.iter().map(|d| d.finding).collect();
        use Finding::*;
        assert_eq!(findings, [DataBound, UnderFilled, MemoryBound]);
        assert!(d[0].message.contains("pinned"));
        assert!(d[1].message.contains("as the program measured it"));
        assert!(d[2].message.contains("batch 128 ran out of memory"));
        // Exactly at the thresholds: not flagged.
        let mut t = ok(64, 1000.0, 1.0);
        data(&mut t, 0.30);
        t.measured.gpu_busy = Some(0.70);
        assert_eq!(diagnosed(&[t])[0].finding, Finding::Healthy);
    }

    fn amp(batch: usize, mem_gb: f64) -> TrialResult {
        let mut t = ok(batch, 900.0, mem_gb);
        t.params.amp = Precision::Bf16;
        t
    }

    /// Steps of `step_ms` with data phases `data_ms`.
    fn phases(t: &mut TrialResult, step_ms: &[f64], data_ms: &[f64]) {
        t.measured.step_ms = Summary::of(step_ms);
        t.measured.data_ms = Summary::of(data_ms);
    }

    #[test]
    fn the_loader_rule_looks_at_the_slow_steps_too() {
        // Nine steps of 10 ms that wait 1 ms for data, and one stall of 100 ms waiting 91:
        // the median is fine, the p90 (interpolated) waits about half its step.
        let mut stalls = ok(64, 1000.0, 1.0);
        let mut steps = vec![10.0; 9];
        let mut waits = vec![1.0; 9];
        steps.push(100.0);
        waits.push(91.0);
        phases(&mut stalls, &steps, &waits);
        assert_eq!(stalls.data_fraction(|s| s.median), Some(0.1));
        let slow = stalls.data_fraction(|s| s.p90).unwrap();
        assert!(slow > DATA_BOUND, "{slow}");
        let d = diagnosed(&[stalls.clone()]);
        assert_eq!(d[0].finding, Finding::DataBound, "{d:?}");
        assert!(
            d[0].message.contains("stalls at the slow steps")
                && d[0]
                    .message
                    .contains("of the p90 step, though 10% of the median"),
            "{}",
            d[0].message
        );
        // Slow at the median: said so, not as stalls.
        let mut slow_loader = ok(64, 1000.0, 1.0);
        phases(&mut slow_loader, &[10.0; 10], &[4.0; 10]);
        let d = diagnosed(&[slow_loader]);
        assert!(
            d[0].message
                .contains("the data phase is 40% of the median step"),
            "{}",
            d[0].message
        );
        // Every step the same and the loader fast: nothing to say.
        let mut steady = ok(64, 1000.0, 1.0);
        phases(&mut steady, &[10.0; 10], &[3.0; 10]);
        assert_eq!(diagnosed(&[steady])[0].finding, Finding::Healthy);
        // Slow steps that are slow on the GPU, not for data: not data-bound.
        let mut gpu_slow = ok(64, 1000.0, 1.0);
        let mut steps = vec![10.0; 9];
        steps.push(100.0);
        phases(&mut gpu_slow, &steps, &[1.0; 10]);
        assert_eq!(diagnosed(&[gpu_slow])[0].finding, Finding::Healthy);
        // A trial that did not end OK says nothing about its loader.
        stalls.status = Status::Failed;
        assert_eq!(data_bound(&stalls), None);
    }

    #[test]
    fn amp_is_advised_against_out_of_memory_only_when_it_measured_less() {
        // The tuner's own AMP keeps fp32 activations and adds bf16 copies: more memory.
        let more = vec![ok(256, 1000.0, 3.3), amp(256, 4.4), oom(512)];
        let d = diagnosed(&more);
        let bound = &d
            .iter()
            .find(|d| d.finding == Finding::MemoryBound)
            .unwrap()
            .message;
        let says = "bf16 does not help here: it measured +33% memory at batch 256";
        assert!(bound.contains(says), "{bound}");
        assert!(!bound.contains("lets a larger batch fit"));
        // A program whose bf16 autocast saves activations.
        let less = vec![ok(256, 1000.0, 40.0), amp(256, 24.0), oom(512)];
        let advice = amp_advice(&less).unwrap();
        let says = "at batch 256 (24.00 GB against 40.00 GB in fp32)";
        assert!(advice.contains(says), "{advice}");
        let d = diagnosed(&less);
        let says = "bf16 measured 40% less memory at batch 256";
        assert!(d.iter().any(|d| d.message.contains(says)), "{d:?}");
        // fp16 where there was no bf16 (`on` on a GPU before compute capability 8.0).
        let mut fp16 = amp(256, 30.0);
        fp16.params.amp = Precision::Fp16;
        let advice = amp_advice(&[ok(256, 1000.0, 40.0), fp16]).unwrap();
        assert!(
            advice.starts_with("fp16 measured 25% less memory"),
            "{advice}"
        );
        // Not measured at one batch: no advice either way.
        let none = vec![ok(256, 1000.0, 40.0), amp(128, 24.0), oom(512)];
        assert!(amp_advice(&none).is_none());
        let d = diagnosed(&none);
        let says = "was not measured";
        assert!(d.iter().any(|d| d.message.contains(says)), "{d:?}");
        // Every trial out of memory: AMP is not offered as a remedy.
        let d = diagnosed(&[oom(8)]);
        assert!(!d[0].message.contains("precision"), "{}", d[0].message);
    }

    #[test]
    fn a_row_s_limit_is_its_own_and_unknown_limits_are_said() {
        let mut t = ok(64, 500.0, 70.0);
        assert_eq!(t.key().line_label(), "workers 4, fp32");
        // 70 GB of an 80 GB limit: outside a 20% margin, though under 80% of 100 GB.
        t.memory.device_total_bytes = Some(80 * GB);
        assert!(best(std::slice::from_ref(&t), MARGIN).recommended.is_none());
        // An unknown limit cannot be held against it, and the pick says so.
        t.memory.device_total_bytes = None;
        let r = best(std::slice::from_ref(&t), MARGIN).recommended.unwrap();
        assert!(r.why.contains("memory limit not known"), "{}", r.why);
    }

    #[test]
    fn only_what_was_measured_is_stated() {
        // Nothing about the GPU's busy share measured: the healthy line says so.
        let mut t = ok(64, 500.0, 10.0);
        t.measured.gpu_busy = None;
        let d = diagnosed(std::slice::from_ref(&t));
        let m = &d[0].message;
        assert_eq!(d[0].finding, Finding::Healthy);
        assert!(
            m.contains("was not measured") && !m.contains("is busy"),
            "{m}"
        );
        // NVML's utilization stands in, named.
        t.nvml_util_pct = Some(55.0);
        let d = diagnosed(std::slice::from_ref(&t));
        assert_eq!(d[0].finding, Finding::UnderFilled);
        assert!(d[0].message.contains("NVML utilization"), "{d:?}");
        t.nvml_util_pct = Some(97.0);
        let m = &diagnosed(std::slice::from_ref(&t))[0].message;
        assert!(m.contains("busy 97% of the step (NVML utilization)"), "{m}");
    }

    /// An OK trial at `lr` that reported `loss` (None: not a number).
    fn with_loss(batch: usize, lr: &str, loss: Option<f64>, mem_gb: f64) -> TrialResult {
        let mut t = ok(batch, 1000.0 * batch as f64, mem_gb);
        t.params.axes.set("lr", lr.into());
        t.measured.metrics.set("loss", loss);
        t.measured
            .metrics
            .set("accuracy", loss.map(|l| 1.0 / (1.0 + l)));
        t
    }

    #[test]
    fn a_metric_picks_among_the_ok_trials_that_reported_it_within_the_margin() {
        let rule = PickRule::parse("loss:min").unwrap();
        let mut unreported = with_loss(64, "0.1", None, 1.0);
        unreported.measured.metrics = Default::default();
        let trials = vec![
            with_loss(64, "0.01", Some(0.9), 1.0),
            with_loss(128, "0.01", Some(0.7), 90.0), // inside the 20% margin
            with_loss(64, "1", None, 1.0),           // diverged
            unreported,
            with_loss(32, "0.03", Some(0.8), 1.0),
            {
                let mut t = with_loss(16, "0.001", Some(0.1), 1.0);
                t.status = Status::Oom;
                t
            },
        ];
        let b = best_by(&trials, MARGIN, Some(&rule));
        let r = b.recommended.as_ref().unwrap();
        assert_eq!((r.key.batch, r.metric), (32, Some(0.8)));
        assert_eq!(r.key.line_label(), "workers 4, fp32, lr 0.03");
        assert!(
            r.why.contains("the lowest loss of the 2 trial(s)"),
            "{}",
            r.why
        );
        assert!(r.why.contains("20% kept free"), "{}", r.why);
        assert_eq!(b.picked_by.as_ref(), Some(&rule));
        // Throughput's own picks are as they were.
        assert_eq!(b.highest_throughput.as_ref().unwrap().key.batch, 128);
        let why: Vec<Option<String>> = trials
            .iter()
            .map(|t| t.not_picked_by(&rule, MARGIN))
            .collect();
        assert_eq!(why[0], None);
        assert_eq!(why[1].as_deref(), Some("peak inside the 20% memory margin"));
        assert_eq!(why[2].as_deref(), Some("loss not a number"));
        assert_eq!(why[3].as_deref(), Some("reported no loss"));
        // The highest accuracy is the same trial; without a rule, throughput decides.
        let acc = PickRule::parse("accuracy:max").unwrap();
        let a = best_by(&trials, MARGIN, Some(&acc)).recommended.unwrap();
        assert_eq!(a.key.batch, 32);
        assert!(a.why.contains("the highest accuracy"), "{}", a.why);
        assert_eq!(best_by(&trials, MARGIN, None), best(&trials, MARGIN));
        // Equal values: the higher throughput (here the larger batch), then the key.
        let tie = vec![
            with_loss(32, "0.1", Some(0.5), 1.0),
            with_loss(64, "0.1", Some(0.5), 1.0),
        ];
        let t = best_by(&tie, MARGIN, Some(&rule)).recommended.unwrap();
        assert_eq!(t.key.batch, 64);
        // Nobody reported it: no pick, and the message names what was reported.
        let nobody = PickRule::parse("val_loss:min").unwrap();
        assert!(best_by(&trials, MARGIN, Some(&nobody))
            .recommended
            .is_none());
        let e = nobody.unreported(&trials).unwrap();
        assert!(
            e.ends_with(
                "no trial reported a metric 'val_loss'; the trials reported loss, accuracy"
            ),
            "{e}"
        );
        assert_eq!(rule.unreported(&trials), None);
        let e = rule.unreported(&[ok(8, 1.0, 1.0)]).unwrap();
        assert!(e.contains("no trial reported any metric"), "{e}");
    }

    #[test]
    fn pick_rules_and_metric_values_read_and_print() {
        let r = PickRule::parse("val/loss:max").unwrap();
        assert_eq!((r.metric.as_str(), r.goal), ("val/loss", Goal::Max));
        for bad in ["loss", "loss:", ":min", "loss:minimum", ""] {
            assert!(
                PickRule::parse(bad).unwrap_err().contains("METRIC:min"),
                "{bad}"
            );
        }
        let shown: Vec<String> = [
            Some(2.3125),
            Some(0.5),
            Some(1234.5),
            Some(1e-5),
            Some(0.0),
            None,
        ]
        .into_iter()
        .map(metric_text)
        .collect();
        assert_eq!(shown, ["2.312", "0.5000", "1234", "1.000e-5", "0", "NaN"]);
    }

    #[test]
    fn a_wall_clock_figure_never_makes_a_pick() {
        let mut t = ok(64, 5000.0, 1.0);
        t.measured.source = ThroughputSource::WallClock;
        let trials = vec![t, ok(32, 500.0, 1.0)];
        let b = best(&trials, MARGIN);
        assert_eq!(b.highest_throughput.unwrap().key.batch, 32);
        assert_eq!(b.recommended.unwrap().key.batch, 32);
    }
}
