//! The one rule for "recommended", shared by `sweep`, `memory` and `autobatch`:
//!
//! **A batch is recommended when its peak memory leaves the margin free**: peak <= (1 - margin)
//! x limit, where the limit is the memory the training can have (what the program reported free
//! when it started, else the GPU's memory less what other processes held before the trial) and
//! the margin is 20% on GPUs under 16 GiB, 10% under 48 GiB, 5% above (or `--margin`).
//! **Recommended** is the largest batch at the answer's granularity (a multiple, or a power of
//! two) that does so and was not seen to fail; **safe** is the same with twice the margin, and
//! at least one size below recommended (the two coincide only when recommended is already the
//! smallest size, and the report says so). In a sweep, which measured throughput, the
//! recommended configuration is the fastest trial within the margin, preferring the smallest
//! batch within 5% of it.
//!
//! The peak of a batch that was not run comes from a straight line through the two largest
//! measured peaks ([Line]), used only when every measured peak lies on it ([Line::holding]).
//! Without any memory figure, or with peaks that are not a line (cuDNN's autotuner, say, whose
//! workspace takes the room there is, so that peaks climb to the limit well before the batch
//! that runs out), the peak is taken as proportional to the batch, with the largest batch that
//! fits at the limit.

use serde::{Deserialize, Serialize};

use crate::granularity::{first_index, index_below, size_at, Granularity};
use crate::line::{Line, LINE_TOLERANCE};
use crate::trial::TrialResult;

pub use crate::margin::{leaves_margin, margin_for, safe_margin};

/// Maximum, recommended and safe batch sizes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tiers {
    pub maximum: usize,
    pub recommended: usize,
    pub safe: usize,
    /// Why recommended and safe coincide, or why safe was stepped down.
    pub note: Option<String>,
}

/// The largest size at or below `maximum` whose peak leaves `margin` free (0 when none does).
fn largest_within(maximum: usize, granularity: Granularity, margin: f64, fit: &MemoryFit) -> usize {
    let within = |b: usize| match (fit.line, fit.limit_bytes) {
        (Some(line), Some(limit)) => line.peak(b) <= (1.0 - margin) * limit as f64,
        // Nothing measured: peaks proportional to the batch, the maximum at the limit.
        _ => b as f64 <= (1.0 - margin) * maximum as f64,
    };
    let first = first_index(granularity);
    let mut hi = index_below(granularity, maximum);
    if maximum == 0 || hi < first || !within(size_at(granularity, first)) {
        return 0;
    }
    // The peak grows with the batch: binary search the sizes.
    let mut lo = first;
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if within(size_at(granularity, mid)) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    size_at(granularity, lo)
}

/// `maximum 1960, recommended 1856, safe 1760 (...)`: the tiers and the rule in one line.
pub fn describe(t: &Tiers, margin: f64) -> String {
    let note: String = t.note.iter().map(|note| format!("; {note}")).collect();
    format!(
        "maximum {}, recommended {}, safe {} (recommended leaves {:.0}% of the memory free, safe {:.0}%){note}",
        t.maximum,
        t.recommended,
        t.safe,
        100.0 * margin,
        100.0 * safe_margin(margin)
    )
}

/// How a configured batch sits against the tiers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BatchStatus {
    /// Fits with the recommended margin and uses a fair share of memory.
    FitsWell,
    /// Uses under a quarter of what the recommended batch would: memory left idle.
    Wasteful,
    /// Past the maximum that fits.
    TooBig,
    /// Fits, but without the recommended margin.
    Tight,
}

pub fn status(configured: usize, t: &Tiers) -> BatchStatus {
    match configured {
        c if c > t.maximum => BatchStatus::TooBig,
        c if c > t.recommended => BatchStatus::Tight,
        c if c * 4 < t.recommended => BatchStatus::Wasteful,
        _ => BatchStatus::FitsWell,
    }
}

/// What a set of trials says about memory: the line through their peaks when the peaks are
/// one, the smallest limit, and how many trials fit with a peak measured.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct MemoryFit {
    pub line: Option<Line>,
    pub limit_bytes: Option<u64>,
    pub peaks: usize,
}

impl MemoryFit {
    pub fn of(trials: &[&TrialResult]) -> MemoryFit {
        let limit = trials.iter().filter_map(|r| r.memory_terms().1).min();
        let points: Vec<(usize, u64)> = (trials.iter())
            .filter(|r| r.fits() == Some(true))
            .filter_map(|r| Some((r.params.batch_size, r.memory_terms().0?)))
            .collect();
        MemoryFit {
            // Without a limit, nothing to hold it to, nothing to recommend by: shown as measured.
            line: limit.map_or_else(|| Line::through(&points), |l| Line::holding(&points, l)),
            limit_bytes: limit,
            peaks: points.len(),
        }
    }

    /// The rule's tiers under a `maximum` that was seen to fit: by the memory line against the
    /// limit, else proportional to the batch.
    pub fn tiers(&self, maximum: usize, granularity: Granularity, margin: f64) -> Tiers {
        let recommended = largest_within(maximum, granularity, margin, self);
        let mut safe = largest_within(maximum, granularity, safe_margin(margin), self);
        let smallest = size_at(granularity, first_index(granularity));
        let mut note = None;
        if recommended == 0 {
            note = Some(format!(
                "no batch at this granularity leaves {:.0}% of the memory free",
                100.0 * margin
            ));
        } else if safe.max(smallest) < recommended {
            // Where no size leaves twice the margin free, the smallest is as safe as it gets.
            safe = safe.max(smallest);
        } else if recommended > smallest {
            safe = size_at(granularity, index_below(granularity, recommended) - 1);
            note = Some(format!(
                "safe is one size below recommended: twice the margin ({:.0}%) gives the same size at this granularity",
                100.0 * safe_margin(margin)
            ));
        } else {
            safe = recommended;
            note = Some(format!(
                "recommended and safe coincide: {recommended} is the smallest size at this granularity"
            ));
        }
        Tiers {
            maximum,
            recommended,
            safe,
            note,
        }
    }

    /// The line in words.
    pub fn describe(&self) -> String {
        let gb = |b: f64| plotting::format::gigabytes(b, 2);
        match (self.line, self.limit_bytes) {
            (Some(l), Some(limit)) => format!(
                "peak = {} + {:.2} MB per sample, limit {} (predicts {} samples at the limit)",
                gb(l.fixed_bytes),
                l.bytes_per_sample / 1e6,
                gb(limit as f64),
                l.batch_within(limit as f64)
            ),
            (Some(l), None) => format!(
                "peak = {} + {:.2} MB per sample; no limit known (the program reported no free memory and NVML none)",
                gb(l.fixed_bytes),
                l.bytes_per_sample / 1e6
            ),
            (None, _) if self.peaks > 0 => format!(
                "the {} peaks measured are not a line in the batch (one lies more than {:.0}% of the limit off the line through the two largest, as when an autotuner's workspace takes the room there is): tiers proportional to the batch",
                self.peaks,
                100.0 * LINE_TOLERANCE
            ),
            (None, _) => "no peak measured: tiers proportional to the batch".into(),
        }
    }
}

/// Gradient accumulation for a target effective batch.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Accumulation {
    pub target: usize,
    /// Per-step batch and accumulation steps: what is written into the config.
    pub batch: usize,
    pub steps: usize,
    pub effective: usize,
    /// The learning-rate factor the effective batch's change asks for (1 when kept).
    pub lr_scale: f64,
    pub advice: String,
}

/// The learning-rate factor for an effective batch going from `old` to `new`, and the rule
/// that gives it: the square root of the ratio for Adam-type optimizers, the ratio for SGD.
fn lr_rule(new: usize, old: usize, adam_like: bool) -> (f64, &'static str) {
    let ratio = new as f64 / old as f64;
    match adam_like {
        true => (
            ratio.sqrt(),
            "square-root rule for Adam-type optimizers: lr x sqrt(new / old)",
        ),
        false => (ratio, "linear rule for SGD: lr x (new / old)"),
    }
}

/// How to reach a `target` effective batch with per-step batches of at most `limit` (the
/// recommended batch). The fewest accumulation steps whose per-step batch divides the target
/// exactly (looking up to twice the fewest steps possible) keep the effective batch and the
/// learning rate; failing that, the fewest steps with the per-step batch rounded up grow the
/// effective batch a little, and the learning-rate rule says by how much. A target that fits
/// in one step stays as it is: a larger per-step batch would be a larger effective batch, a
/// training change rather than a memory one, so the advice only says what it would take.
pub fn accumulation(target: usize, limit: usize, adam_like: bool) -> Accumulation {
    let target = target.max(1);
    let limit = limit.max(1);
    let fewest = target.div_ceil(limit);
    let exact = (fewest..=2 * fewest).find(|s| target % s == 0);
    let steps = exact.unwrap_or(fewest);
    let batch = target.div_ceil(steps);
    let effective = steps * batch;
    let (scale, rule) = lr_rule(effective, target, adam_like);
    let mut advice = if effective == target {
        format!(
            "{steps} step(s) of {batch} keep the effective batch at {target}: keep the learning rate"
        )
    } else {
        format!(
            "{steps} step(s) of {batch} give an effective batch of {effective}, not {target}: scale the learning rate by {scale:.4} ({rule})"
        )
    };
    if steps == 1 && limit > target {
        advice.push_str(&format!(
            "; batches up to {limit} fit: running {limit} per step makes the effective batch {:.1}x larger, then scale the learning rate by {:.3} ({})",
            limit as f64 / target as f64,
            lr_rule(limit, target, adam_like).0,
            rule
        ));
    }
    Accumulation {
        target,
        batch,
        steps,
        effective,
        lr_scale: scale,
        advice,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const M8: Granularity = Granularity::Multiple(8);
    /// No memory figure: peaks proportional to the batch.
    const PROPORTIONAL: MemoryFit = MemoryFit {
        line: None,
        limit_bytes: None,
        peaks: 0,
    };

    #[test]
    fn margins_by_memory_class() {
        assert_eq!(margin_for(8 << 30), 0.20);
        assert_eq!(margin_for(24 << 30), 0.10);
        assert_eq!(margin_for(141 << 30), 0.05);
        assert!(leaves_margin(95, 100, 0.05));
        assert!(!leaves_margin(96, 100, 0.05));
    }

    #[test]
    fn recommended_leaves_the_margin_of_the_memory_free() {
        // 1 GB fixed, 10 MB per sample, 80 GB limit: at most 7500 samples in 76 GB (5%), 7100
        // in 72 GB (10%).
        let line = Line {
            fixed_bytes: 1e9,
            bytes_per_sample: 1e7,
        };
        let fit = MemoryFit {
            line: Some(line),
            limit_bytes: Some(80_000_000_000),
            peaks: 2,
        };
        let t = fit.tiers(7900, M8, 0.05);
        assert_eq!((t.maximum, t.recommended, t.safe), (7900, 7496, 7096));
        assert!(t.note.is_none());
        // Never above what was seen to fit.
        let t = fit.tiers(4000, M8, 0.05);
        assert_eq!((t.recommended, t.safe), (4000, 3992));
        assert!(t.note.unwrap().contains("one size below"));
        // Nothing known: proportional, the maximum at the limit.
        let t = PROPORTIONAL.tiers(10_000, M8, 0.1);
        assert_eq!((t.recommended, t.safe), (9000, 8000));
    }

    #[test]
    fn peaks_that_climb_to_the_limit_are_not_a_line() {
        // ResNet-18 fp32 on an H100 under a 16 GiB share, the steady step's reserved peaks: the
        // line through the two largest would say 15.8 GB at batch 8.
        let limit = 17_179_869_184;
        let measured = [
            (8, 530_000_000),
            (256, 11_120_000_000),
            (392, 16_310_000_000),
            (608, 16_970_000_000),
            (744, 17_160_000_000),
            (752, 17_180_000_000),
        ];
        assert!(Line::through(&measured).unwrap().peak(8) > 15e9);
        assert_eq!(Line::holding(&measured, limit), None);
        // A line with an allocator's rounding on it still is one.
        let line = |b: usize| 500_000_000 + 20_000_000 * b as u64;
        let rounded: Vec<(usize, u64)> = [8, 64, 256, 512]
            .iter()
            .map(|&b| (b, line(b) / (2 << 20) * (2 << 20) + (2 << 20)))
            .collect();
        let l = Line::holding(&rounded, limit).unwrap();
        assert!((l.bytes_per_sample - 20e6).abs() < 0.1e6, "{l:?}");
    }

    #[test]
    fn powers_of_two_step_safe_down_instead_of_coinciding() {
        // 5% and 10% of 8192 both round down to 4096 as powers of two.
        let t = PROPORTIONAL.tiers(8192, Granularity::Pow2, 0.05);
        assert_eq!((t.recommended, t.safe), (4096, 2048));
        assert!(t
            .note
            .as_deref()
            .unwrap()
            .contains("twice the margin (10%)"));
        for margin in [0.01, 0.05, 0.1, 0.2, 0.25, 0.4] {
            for max in [2usize, 3, 100, 4096, 5000, 1 << 20] {
                let t = PROPORTIONAL.tiers(max, Granularity::Pow2, margin);
                assert!(t.recommended <= max && t.safe <= t.recommended);
                if t.recommended > 1 {
                    assert!(t.safe < t.recommended, "{max} {margin}: {t:?}");
                }
            }
        }
        // The smallest size: they coincide, and the note says why.
        let t = PROPORTIONAL.tiers(8, M8, 0.05);
        assert_eq!((t.recommended, t.safe), (0, 0));
        assert!(t.note.unwrap().contains("no batch"));
        let t = PROPORTIONAL.tiers(2, Granularity::Pow2, 0.3);
        assert_eq!((t.recommended, t.safe), (1, 1));
        assert!(t.note.unwrap().contains("smallest size"));
    }

    #[test]
    fn batch_status() {
        let t = PROPORTIONAL.tiers(10_000, M8, 0.1);
        assert_eq!(status(12_000, &t), BatchStatus::TooBig);
        assert_eq!(status(9_500, &t), BatchStatus::Tight);
        assert_eq!(status(4_096, &t), BatchStatus::FitsWell);
        assert_eq!(status(64, &t), BatchStatus::Wasteful);
    }

    #[test]
    fn accumulation_advice() {
        let a = accumulation(1024, 256, false);
        assert_eq!(
            (a.steps, a.batch, a.effective, a.lr_scale),
            (4, 256, 1024, 1.0)
        );
        assert!(a.advice.contains("keep the learning rate"));
        // 3 steps cannot split 1000 evenly; 4 steps of 250 can and keep it.
        let a = accumulation(1000, 384, false);
        assert_eq!((a.steps, a.batch, a.effective), (4, 250, 1000));
        // 1031 is prime: 3 steps of 344 = 1032, and the learning rate follows.
        let a = accumulation(1031, 384, false);
        assert_eq!((a.steps, a.batch, a.effective), (3, 344, 1032));
        assert!((a.lr_scale - 1032.0 / 1031.0).abs() < 1e-12);
        assert!(a.advice.contains("1.0010") && a.advice.contains("linear"));
        let a = accumulation(1031, 384, true);
        assert!((a.lr_scale - (1032.0f64 / 1031.0).sqrt()).abs() < 1e-12);
        assert!(a.advice.contains("square-root"));
        // A target that fits in one step is kept; the advice says what the limit would mean.
        let a = accumulation(100, 4096, false);
        assert_eq!(
            (a.steps, a.batch, a.effective, a.lr_scale),
            (1, 100, 100, 1.0)
        );
        assert!(a.advice.contains("41.0x larger"), "{}", a.advice);
        assert!(a.advice.contains("by 40.960"), "{}", a.advice);
        let a = accumulation(100, 4096, true);
        assert!(a.advice.contains("by 6.400"), "{}", a.advice);
        // Never above the limit.
        for (t, l) in [(7usize, 3usize), (1 << 20, 61_640_992), (99_991, 1000)] {
            let a = accumulation(t, l, false);
            assert!(a.batch <= l && a.effective >= t && a.steps * a.batch == a.effective);
        }
    }
}
