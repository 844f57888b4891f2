//! What a sweep concludes from its trials, as plain functions over measured results (so the
//! rules are tested on constructed results): the best configurations, the recommendation, and
//! the diagnosis in words.

use serde::{Deserialize, Serialize};

use common::stats::Summary;

/// One point of the sweep.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrialKey {
    pub batch: usize,
    pub workers: usize,
    pub amp: bool,
    pub pin: bool,
}

impl TrialKey {
    /// The configuration without the batch: one line of the plot.
    pub fn line_label(&self) -> String {
        format!(
            "workers {}, {}, {}",
            self.workers,
            if self.amp { "AMP bf16" } else { "fp32" },
            if self.pin { "pinned" } else { "pageable" }
        )
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum TrialStatus {
    Ok,
    /// Out of device memory (driver or cuBLAS allocation failure), recovered.
    Oom,
    /// Not run: a smaller batch of the same configuration ran out of memory.
    Skipped,
}

/// A trial's measurements (times in milliseconds per step).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrialResult {
    pub key: TrialKey,
    pub status: TrialStatus,
    pub data_ms: Option<Summary>,
    pub forward_ms: Option<Summary>,
    pub backward_ms: Option<Summary>,
    pub optimizer_ms: Option<Summary>,
    pub total_ms: Option<Summary>,
    /// Batch over the median step time.
    pub samples_per_s: Option<f64>,
    /// Device time of forward + backward + optimizer queued back-to-back (no host gaps), over
    /// the median step time of the training loop: the share of the step the GPU was working.
    pub busy_fraction: Option<f64>,
    /// That back-to-back device time of one step (ms).
    pub compute_only_ms: Option<f64>,
    /// Median of (forward + backward + optimizer) event time over the step time; includes any
    /// gaps where the GPU waited for the host inside those phases.
    pub compute_phase_fraction: Option<f64>,
    /// Median data phase over the median step.
    pub data_fraction: Option<f64>,
    /// Mean NVML utilization sampled during the trial (percent), where NVML is present.
    pub nvml_util_pct: Option<f64>,
    /// High watermark of the memory pool during the trial (bytes).
    pub peak_bytes: Option<u64>,
    /// What the buffers were computed to need before allocating (bytes).
    pub estimated_bytes: u64,
    pub first_loss: Option<f64>,
    pub last_loss: Option<f64>,
    pub note: Option<String>,
}

impl TrialResult {
    pub fn empty(
        key: TrialKey,
        status: TrialStatus,
        estimated_bytes: u64,
        note: Option<String>,
    ) -> TrialResult {
        TrialResult {
            key,
            status,
            data_ms: None,
            forward_ms: None,
            backward_ms: None,
            optimizer_ms: None,
            total_ms: None,
            samples_per_s: None,
            busy_fraction: None,
            compute_only_ms: None,
            compute_phase_fraction: None,
            data_fraction: None,
            nvml_util_pct: None,
            peak_bytes: None,
            estimated_bytes,
            first_loss: None,
            last_loss: None,
            note,
        }
    }

    fn ok(&self) -> Option<(f64, u64)> {
        match (self.status, self.samples_per_s, self.peak_bytes) {
            (TrialStatus::Ok, Some(t), Some(m)) if t.is_finite() && t > 0.0 => Some((t, m)),
            _ => None,
        }
    }
}

/// A chosen trial and the figure it was chosen by.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pick {
    pub key: TrialKey,
    pub samples_per_s: f64,
    pub peak_bytes: u64,
    pub why: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Best {
    pub highest_throughput: Option<Pick>,
    /// Samples/s per GB of peak memory.
    pub best_efficiency: Option<Pick>,
    /// Highest throughput using at most 80% of device memory; a smaller batch within 5% of it
    /// is preferred.
    pub recommended: Option<Pick>,
}

/// Memory share the recommendation stays under.
pub const MEMORY_SHARE: f64 = 0.8;
/// Throughput within this fraction of the best counts as as good.
pub const WITHIN: f64 = 0.05;

/// Deterministic tie-break: smaller batch, fewer workers, fp32 before AMP, pinned before not.
fn order_key(k: &TrialKey) -> (usize, usize, bool, bool) {
    (k.batch, k.workers, k.amp, !k.pin)
}

fn pick_max(
    trials: &[TrialResult],
    score: impl Fn(f64, u64) -> f64,
    why: impl Fn(f64) -> String,
) -> Option<Pick> {
    let mut best: Option<(&TrialResult, f64)> = None;
    for t in trials {
        let Some((tp, mem)) = t.ok() else { continue };
        let s = score(tp, mem);
        let better = match best {
            None => true,
            Some((b, bs)) => s > bs || (s == bs && order_key(&t.key) < order_key(&b.key)),
        };
        if better {
            best = Some((t, s));
        }
    }
    best.map(|(t, s)| Pick {
        key: t.key,
        samples_per_s: t.samples_per_s.unwrap_or(0.0),
        peak_bytes: t.peak_bytes.unwrap_or(0),
        why: why(s),
    })
}

pub fn best(trials: &[TrialResult], device_bytes: u64) -> Best {
    let highest_throughput = pick_max(trials, |t, _| t, |s| format!("{s:.0} samples/s"));
    let best_efficiency = pick_max(
        trials,
        |t, m| t / (m.max(1) as f64 / 1e9),
        |s| format!("{s:.0} samples/s per GB of peak memory"),
    );
    let limit = MEMORY_SHARE * device_bytes as f64;
    let fitting: Vec<&TrialResult> = trials
        .iter()
        .filter(|t| t.ok().is_some_and(|(_, m)| m as f64 <= limit))
        .collect();
    let top = fitting
        .iter()
        .filter_map(|t| t.samples_per_s)
        .fold(0.0f64, f64::max);
    let recommended = fitting
        .iter()
        .filter(|t| t.samples_per_s.unwrap_or(0.0) >= (1.0 - WITHIN) * top)
        .min_by(|a, b| {
            a.key
                .batch
                .cmp(&b.key.batch)
                .then(b.samples_per_s.unwrap_or(0.0).total_cmp(&a.samples_per_s.unwrap_or(0.0)))
                .then(order_key(&a.key).cmp(&order_key(&b.key)))
        })
        .map(|t| {
            let tp = t.samples_per_s.unwrap_or(0.0);
            Pick {
                key: t.key,
                samples_per_s: tp,
                peak_bytes: t.peak_bytes.unwrap_or(0),
                why: format!(
                    "{tp:.0} samples/s ({:.0}% of the best under {:.0}% of memory), smallest batch within {:.0}%",
                    100.0 * tp / top,
                    100.0 * MEMORY_SHARE,
                    100.0 * WITHIN
                ),
            }
        });
    Best {
        highest_throughput,
        best_efficiency,
        recommended,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Finding {
    DataBound,
    UnderFilled,
    MemoryBound,
    AllOutOfMemory,
    Healthy,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Diagnosis {
    pub finding: Finding,
    pub message: String,
}

/// Data phase share over which a configuration is data-bound.
pub const DATA_BOUND: f64 = 0.30;
/// Busy fraction under which the GPU is under-filled.
pub const UNDER_FILLED: f64 = 0.70;

/// The diagnosis of the configuration a user would run: the recommended one (else the fastest).
pub fn diagnose(trials: &[TrialResult], device_bytes: u64, best: &Best) -> Vec<Diagnosis> {
    let mut out = Vec::new();
    let ran: Vec<&TrialResult> = trials
        .iter()
        .filter(|t| t.status != TrialStatus::Skipped)
        .collect();
    if !ran.is_empty() && ran.iter().all(|t| t.status == TrialStatus::Oom) {
        out.push(Diagnosis {
            finding: Finding::AllOutOfMemory,
            message: "every trial ran out of device memory: use AMP, a smaller model or smaller batches (with gradient accumulation to keep the effective batch)".into(),
        });
        return out;
    }
    let chosen = best
        .recommended
        .as_ref()
        .or(best.highest_throughput.as_ref());
    let Some(pick) = chosen else {
        return out;
    };
    let Some(t) = trials.iter().find(|t| t.key == pick.key) else {
        return out;
    };
    let at = format!("at batch {} ({})", t.key.batch, t.key.line_label());
    if let Some(d) = t.data_fraction.filter(|&d| d > DATA_BOUND) {
        out.push(Diagnosis {
            finding: Finding::DataBound,
            message: format!(
                "data-bound {at}: the data phase is {:.0}% of the step (over {:.0}%); add loader workers{}",
                100.0 * d,
                100.0 * DATA_BOUND,
                if t.key.pin { "" } else { " and use pinned memory" }
            ),
        });
    }
    if let Some(b) = t.busy_fraction.filter(|&b| b < UNDER_FILLED) {
        out.push(Diagnosis {
            finding: Finding::UnderFilled,
            message: format!(
                "under-filled GPU {at}: busy {:.0}% of the step (under {:.0}%); a larger batch gives it more work per launch",
                100.0 * b,
                100.0 * UNDER_FILLED
            ),
        });
    }
    let limit = MEMORY_SHARE * device_bytes as f64;
    let near = trials
        .iter()
        .filter(|x| {
            x.key.workers == t.key.workers && x.key.amp == t.key.amp && x.key.pin == t.key.pin
        })
        .find(|x| x.status == TrialStatus::Oom || x.peak_bytes.is_some_and(|m| m as f64 > limit));
    if let Some(x) = near {
        out.push(Diagnosis {
            finding: Finding::MemoryBound,
            message: format!(
                "memory-bound: batch {} {} ({:.0}% of memory is the limit kept); {}use a smaller batch with gradient accumulation",
                x.key.batch,
                if x.status == TrialStatus::Oom { "ran out of memory" } else { "comes near the limit" },
                100.0 * MEMORY_SHARE,
                if t.key.amp { "" } else { "AMP halves the activations' copies for the GEMMs; or " }
            ),
        });
    }
    if out.is_empty() {
        out.push(Diagnosis {
            finding: Finding::Healthy,
            message: format!("{at}: the GPU is busy, data keeps up and memory has room"),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const GB: u64 = 1_000_000_000;

    fn key(batch: usize) -> TrialKey {
        TrialKey {
            batch,
            workers: 4,
            amp: false,
            pin: true,
        }
    }

    fn ok(batch: usize, tp: f64, mem_gb: f64) -> TrialResult {
        let mut t = TrialResult::empty(key(batch), TrialStatus::Ok, 0, None);
        t.samples_per_s = Some(tp);
        t.peak_bytes = Some((mem_gb * GB as f64) as u64);
        t.busy_fraction = Some(0.95);
        t.data_fraction = Some(0.05);
        t
    }

    fn oom(batch: usize) -> TrialResult {
        TrialResult::empty(key(batch), TrialStatus::Oom, 0, None)
    }

    #[test]
    fn picks_throughput_efficiency_and_recommendation() {
        let trials = vec![
            ok(64, 1000.0, 1.0),
            ok(128, 1980.0, 2.0),
            ok(256, 2000.0, 5.0),
            ok(512, 2100.0, 90.0),
        ];
        let b = best(&trials, 100 * GB);
        assert_eq!(b.highest_throughput.unwrap().key.batch, 512);
        assert_eq!(
            b.best_efficiency.unwrap().key.batch,
            64,
            "1000/GB beats 990/GB"
        );
        // 512 uses 90% > 80%: out. Best under the limit is 2000 (256); 128 is within 5%.
        assert_eq!(b.recommended.unwrap().key.batch, 128);
    }

    #[test]
    fn ties_go_to_the_smaller_batch_then_fewer_workers() {
        let mut a = ok(256, 2000.0, 1.0);
        a.key.workers = 8;
        let c = ok(256, 2000.0, 1.0);
        let d = ok(512, 2000.0, 1.0);
        let b = best(&[a, d, c], 100 * GB);
        let top = b.highest_throughput.unwrap();
        assert_eq!((top.key.batch, top.key.workers), (256, 4));
        assert_eq!(b.recommended.unwrap().key.workers, 4);
    }

    #[test]
    fn all_oom_gives_no_pick_and_says_so() {
        let trials = vec![
            oom(1),
            TrialResult::empty(key(2), TrialStatus::Skipped, 0, None),
        ];
        let b = best(&trials, 100 * GB);
        assert!(
            b.highest_throughput.is_none()
                && b.recommended.is_none()
                && b.best_efficiency.is_none()
        );
        let d = diagnose(&trials, 100 * GB, &b);
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].finding, Finding::AllOutOfMemory);
    }

    #[test]
    fn a_single_config_is_every_pick() {
        let trials = vec![ok(32, 500.0, 1.0)];
        let b = best(&trials, 100 * GB);
        assert_eq!(b.highest_throughput.as_ref().unwrap().key, key(32));
        assert_eq!(b.best_efficiency.as_ref().unwrap().key, key(32));
        assert_eq!(b.recommended.as_ref().unwrap().key, key(32));
        let d = diagnose(&trials, 100 * GB, &b);
        assert_eq!(d[0].finding, Finding::Healthy);
    }

    #[test]
    fn nothing_under_the_memory_share_means_no_recommendation() {
        let trials = vec![ok(32, 500.0, 85.0)];
        let b = best(&trials, 100 * GB);
        assert!(b.recommended.is_none());
        assert!(b.highest_throughput.is_some());
        let d = diagnose(&trials, 100 * GB, &b);
        assert!(d.iter().any(|d| d.finding == Finding::MemoryBound), "{d:?}");
    }

    #[test]
    fn diagnosis_thresholds() {
        let mut t = ok(64, 1000.0, 1.0);
        t.data_fraction = Some(0.31);
        t.busy_fraction = Some(0.69);
        t.key.pin = false;
        let trials = vec![t, oom(128)];
        let mut trials = trials;
        trials[1].key.pin = false;
        let b = best(&trials, 100 * GB);
        let d = diagnose(&trials, 100 * GB, &b);
        let findings: Vec<Finding> = d.iter().map(|d| d.finding).collect();
        assert_eq!(
            findings,
            vec![
                Finding::DataBound,
                Finding::UnderFilled,
                Finding::MemoryBound
            ]
        );
        assert!(d[0].message.contains("pinned"));
        assert!(d[2].message.contains("batch 128 ran out of memory"));
        // Exactly at the thresholds: not flagged.
        let mut t = ok(64, 1000.0, 1.0);
        t.data_fraction = Some(0.30);
        t.busy_fraction = Some(0.70);
        let b = best(std::slice::from_ref(&t), 100 * GB);
        assert_eq!(diagnose(&[t], 100 * GB, &b)[0].finding, Finding::Healthy);
    }
}
