//! The one rule for "recommended", shared by `sweep`, `memory` and `autobatch`, on the tuner's
//! own MLP and on the user's program alike:
//!
//! **A batch is recommended when its peak memory leaves the margin free**: peak <= (1 - margin)
//! x limit, where the limit is the memory the training can have (free after the tuner's set-up
//! for its own MLP; the GPU's memory less what other processes held before the trial for a
//! program) and the margin is 20% on GPUs under 16 GiB, 10% under 48 GiB, 5% above (or
//! `--margin`). **Recommended** is the largest batch at the answer's granularity (a multiple, or
//! a power of two) that does so and was not seen to fail; **safe** is the same with twice the
//! margin, and at least one size below recommended (the two coincide only when recommended is
//! already the smallest size, and the report says so). In a sweep, which measured throughput,
//! the recommended configuration is the fastest trial within the margin, preferring the
//! smallest batch within 5% of it.
//!
//! Where the peak of a batch that was not run is needed, it comes from what was measured: the
//! tuner's own estimate for its MLP (exact to the byte against the memory pool), a straight line
//! through the two largest measured peaks for a program ([Line]), used only when every measured
//! peak lies on it ([Line::holding]). Without any memory figure, or with peaks that are not a
//! line (cuDNN's autotuner, say, whose workspace takes the room there is, so that peaks climb to
//! the limit well before the batch that runs out), the peak is taken as proportional to the
//! batch, with the largest batch that fits at the limit.

use serde::{Deserialize, Serialize};

use crate::search::Granularity;

/// Safety margin by the GPU's memory size class: small cards often also drive a display and
/// lose more to other processes and fragmentation; on large ones a few percent is plenty.
pub fn margin_for(total_bytes: u64) -> f64 {
    const GIB: u64 = 1 << 30;
    if total_bytes < 16 * GIB {
        0.20
    } else if total_bytes < 48 * GIB {
        0.10
    } else {
        0.05
    }
}

/// The safe tier's margin: twice the recommended one, at most 90%.
pub fn safe_margin(margin: f64) -> f64 {
    (2.0 * margin).min(0.9)
}

/// Whether a peak leaves `margin` of `limit` free.
pub fn leaves_margin(peak: u64, limit: u64, margin: f64) -> bool {
    peak as f64 <= (1.0 - margin) * limit as f64
}

/// How far a measured peak may lie from the line, as a share of the memory limit, for the peaks
/// to count as a line: an allocator's rounding is far less, a workspace that fills the room
/// there is far more.
pub const LINE_TOLERANCE: f64 = 0.05;

/// Peak memory as a straight line in the batch: `fixed + per_sample x batch` (bytes).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Line {
    pub fixed_bytes: f64,
    pub bytes_per_sample: f64,
}

impl Line {
    /// The line through the measured (batch, peak) points with the two largest batches; through
    /// one point (or when the largest two do not grow), proportional to the batch through the
    /// largest. None without a usable point.
    pub fn through(points: &[(usize, u64)]) -> Option<Line> {
        let mut sorted: Vec<(usize, u64)> = points
            .iter()
            .copied()
            .filter(|&(b, p)| b > 0 && p > 0)
            .collect();
        sorted.sort_unstable();
        sorted.dedup_by_key(|p| p.0);
        let &(b1, p1) = sorted.last()?;
        if let Some(&(b0, p0)) = sorted.iter().rev().nth(1) {
            let slope = (p1 as f64 - p0 as f64) / (b1 - b0) as f64;
            if slope > 0.0 {
                return Some(Line {
                    fixed_bytes: p1 as f64 - slope * b1 as f64,
                    bytes_per_sample: slope,
                });
            }
        }
        Some(Line {
            fixed_bytes: 0.0,
            bytes_per_sample: p1 as f64 / b1 as f64,
        })
    }

    /// The line through `points` ([Line::through]) when every point lies within
    /// [LINE_TOLERANCE] x `limit` of it; None when the peaks are not a line in the batch.
    pub fn holding(points: &[(usize, u64)], limit: u64) -> Option<Line> {
        let line = Line::through(points)?;
        let tolerance = LINE_TOLERANCE * limit as f64;
        points
            .iter()
            .all(|&(b, p)| (p as f64 - line.peak(b)).abs() <= tolerance)
            .then_some(line)
    }

    pub fn peak(&self, batch: usize) -> f64 {
        self.fixed_bytes + self.bytes_per_sample * batch as f64
    }

    /// The largest batch (not snapped) whose peak stays within `bytes`; 0 when none does.
    pub fn batch_within(&self, bytes: f64) -> usize {
        let b = ((bytes - self.fixed_bytes) / self.bytes_per_sample).floor();
        if b.is_finite() && b > 0.0 {
            b.min(usize::MAX as f64 / 2.0) as usize
        } else {
            0
        }
    }
}

/// How the peak of a batch that was not run is known.
pub enum PeakModel<'a> {
    /// Measured peaks through a function of the batch (the MLP's estimate, a [Line]), against
    /// the memory limit.
    Bytes {
        peak: &'a dyn Fn(usize) -> f64,
        limit: u64,
    },
    /// Nothing measured: peaks proportional to the batch, the maximum at the limit.
    Proportional,
}

/// Maximum, recommended and safe batch sizes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tiers {
    pub maximum: usize,
    pub recommended: usize,
    pub safe: usize,
    /// Why recommended and safe coincide, or why safe was stepped down.
    pub note: Option<String>,
}

/// The sizes at a granularity, by index: `k x multiple`, or `2^k`.
pub fn size_at(granularity: Granularity, k: usize) -> usize {
    match granularity {
        Granularity::Multiple(m) => k.saturating_mul(m.max(1)),
        Granularity::Pow2 => 1usize.checked_shl(k as u32).unwrap_or(usize::MAX),
    }
}

/// The index of the largest size at or below `batch` (0 for a multiple means none).
pub fn index_below(granularity: Granularity, batch: usize) -> usize {
    match granularity {
        Granularity::Multiple(m) => batch / m.max(1),
        Granularity::Pow2 => (usize::BITS - 1 - batch.max(1).leading_zeros()) as usize,
    }
}

/// The largest size at the granularity at or below `batch` (0 when below every size).
pub fn snap_down(granularity: Granularity, batch: usize) -> usize {
    if batch == 0 {
        return 0;
    }
    size_at(granularity, index_below(granularity, batch))
}

/// The smallest index at the granularity (1 x multiple, or 2^0).
fn first_index(granularity: Granularity) -> usize {
    match granularity {
        Granularity::Multiple(_) => 1,
        Granularity::Pow2 => 0,
    }
}

/// The largest size at or below `maximum` whose peak leaves `margin` free (0 when none does).
fn largest_within(
    maximum: usize,
    granularity: Granularity,
    margin: f64,
    model: &PeakModel,
) -> usize {
    let within = |b: usize| match model {
        PeakModel::Bytes { peak, limit } => peak(b) <= (1.0 - margin) * *limit as f64,
        PeakModel::Proportional => b as f64 <= (1.0 - margin) * maximum as f64,
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

/// The rule's tiers under a `maximum` that was seen to fit.
pub fn tiers(maximum: usize, granularity: Granularity, margin: f64, model: PeakModel) -> Tiers {
    let recommended = largest_within(maximum, granularity, margin, &model);
    let mut safe = largest_within(maximum, granularity, safe_margin(margin), &model);
    let smallest = size_at(granularity, first_index(granularity));
    let mut note = None;
    if safe == 0 && recommended > 0 {
        // No size leaves twice the margin free: the smallest is as safe as it gets.
        safe = smallest;
    }
    if recommended == 0 {
        note = Some(format!(
            "no batch at this granularity leaves {:.0}% of the memory free",
            100.0 * margin
        ));
    } else if safe >= recommended {
        if recommended > smallest {
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
    }
    Tiers {
        maximum,
        recommended,
        safe,
        note,
    }
}

/// `maximum 1960, recommended 1856, safe 1760 (...)`: the tiers and the rule in one line.
pub fn describe(t: &Tiers, margin: f64) -> String {
    let mut s = format!(
        "maximum {}, recommended {}, safe {} (recommended leaves {:.0}% of the memory free, safe {:.0}%)",
        t.maximum,
        t.recommended,
        t.safe,
        100.0 * margin,
        100.0 * safe_margin(margin)
    );
    if let Some(note) = &t.note {
        s.push_str("; ");
        s.push_str(note);
    }
    s
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
    if configured > t.maximum {
        BatchStatus::TooBig
    } else if configured > t.recommended {
        BatchStatus::Tight
    } else if configured * 4 < t.recommended {
        BatchStatus::Wasteful
    } else {
        BatchStatus::FitsWell
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const M8: Granularity = Granularity::Multiple(8);

    #[test]
    fn margins_by_memory_class() {
        assert_eq!(margin_for(8 << 30), 0.20);
        assert_eq!(margin_for(24 << 30), 0.10);
        assert_eq!(margin_for(141 << 30), 0.05);
        assert!(leaves_margin(95, 100, 0.05));
        assert!(!leaves_margin(96, 100, 0.05));
    }

    #[test]
    fn sizes_at_each_granularity() {
        assert_eq!(snap_down(M8, 1003), 1000);
        assert_eq!(snap_down(M8, 7), 0);
        assert_eq!(snap_down(Granularity::Pow2, 1000), 512);
        assert_eq!(snap_down(Granularity::Pow2, 1024), 1024);
        assert_eq!(snap_down(Granularity::Pow2, 0), 0);
        assert_eq!(
            size_at(Granularity::Pow2, index_below(Granularity::Pow2, 5) + 1),
            8
        );
    }

    #[test]
    fn recommended_leaves_the_margin_of_the_memory_free() {
        // 1 GB fixed, 10 MB per sample, 80 GB limit: at most 7500 samples in 76 GB (5%), 7100
        // in 72 GB (10%).
        let line = Line {
            fixed_bytes: 1e9,
            bytes_per_sample: 1e7,
        };
        let peak = |b: usize| line.peak(b);
        let model = || PeakModel::Bytes {
            peak: &peak,
            limit: 80_000_000_000,
        };
        let t = tiers(7900, M8, 0.05, model());
        assert_eq!((t.maximum, t.recommended, t.safe), (7900, 7496, 7096));
        assert!(t.note.is_none());
        // Never above what was seen to fit.
        let t = tiers(4000, M8, 0.05, model());
        assert_eq!((t.recommended, t.safe), (4000, 3992));
        assert!(t.note.unwrap().contains("one size below"));
        // Nothing known: proportional, the maximum at the limit.
        let t = tiers(10_000, M8, 0.1, PeakModel::Proportional);
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
        let t = tiers(8192, Granularity::Pow2, 0.05, PeakModel::Proportional);
        assert_eq!((t.recommended, t.safe), (4096, 2048));
        assert!(t
            .note
            .as_deref()
            .unwrap()
            .contains("twice the margin (10%)"));
        for margin in [0.01, 0.05, 0.1, 0.2, 0.25, 0.4] {
            for max in [2usize, 3, 100, 4096, 5000, 1 << 20] {
                let t = tiers(max, Granularity::Pow2, margin, PeakModel::Proportional);
                assert!(t.recommended <= max && t.safe <= t.recommended);
                if t.recommended > 1 {
                    assert!(t.safe < t.recommended, "{max} {margin}: {t:?}");
                }
            }
        }
        // The smallest size: they coincide, and the note says why.
        let t = tiers(8, M8, 0.05, PeakModel::Proportional);
        assert_eq!((t.recommended, t.safe), (0, 0));
        assert!(t.note.unwrap().contains("no batch"));
        let t = tiers(2, Granularity::Pow2, 0.3, PeakModel::Proportional);
        assert_eq!((t.recommended, t.safe), (1, 1));
        assert!(t.note.unwrap().contains("smallest size"));
    }

    #[test]
    fn a_line_through_the_two_largest_points() {
        let l = Line::through(&[
            (8, 1_080_000_000),
            (100, 2_000_000_000),
            (50, 1_500_000_000),
        ])
        .unwrap();
        assert!((l.bytes_per_sample - 1e7).abs() < 1e-6);
        assert!((l.fixed_bytes - 1e9).abs() < 1.0);
        assert_eq!(l.batch_within(11e9), 1000);
        let p = Line::through(&[(10, 1000)]).unwrap();
        assert_eq!((p.fixed_bytes, p.bytes_per_sample), (0.0, 100.0));
        // Memory that does not grow gives the proportional line through the largest point.
        let flat = Line::through(&[(10, 1000), (20, 1000)]).unwrap();
        assert_eq!(flat.bytes_per_sample, 50.0);
        assert!(Line::through(&[]).is_none());
        assert_eq!(l.batch_within(0.5e9), 0);
    }

    #[test]
    fn batch_status() {
        let t = tiers(10_000, M8, 0.1, PeakModel::Proportional);
        assert_eq!(status(12_000, &t), BatchStatus::TooBig);
        assert_eq!(status(9_500, &t), BatchStatus::Tight);
        assert_eq!(status(4_096, &t), BatchStatus::FitsWell);
        assert_eq!(status(64, &t), BatchStatus::Wasteful);
    }
}
