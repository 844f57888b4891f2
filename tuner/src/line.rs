//! Peak memory as a straight line in the batch, through measured peaks: how the batch finder
//! aims and how the tiers know the peak of a batch that was not run. Peaks that are not a line
//! (an autotuner's workspace that takes the room there is) are told apart by [Line::holding].

use serde::{Deserialize, Serialize};

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
        Line::fit(points, false)
    }

    /// [Line::through], or with `span` through the largest point and the largest at most half
    /// its batch where there is one: for peaks that are a line over the whole range (the
    /// tensors' own, without an allocator's cache), whose two largest points may lie too close
    /// together for their slope to be more than their noise.
    pub fn fit(points: &[(usize, u64)], span: bool) -> Option<Line> {
        let mut sorted: Vec<(usize, u64)> = points
            .iter()
            .copied()
            .filter(|&(b, p)| b > 0 && p > 0)
            .collect();
        sorted.sort_unstable();
        sorted.dedup_by_key(|p| p.0);
        let (b1, p1) = sorted.pop()?;
        let half = (sorted.iter().rev()).find(|&&(b0, _)| span && 2 * b0 <= b1);
        let slope =
            (half.or(sorted.last())).map(|&(b0, p0)| (p1 as f64 - p0 as f64) / (b1 - b0) as f64);
        Some(match slope.filter(|&s| s > 0.0) {
            Some(slope) => Line {
                fixed_bytes: p1 as f64 - slope * b1 as f64,
                bytes_per_sample: slope,
            },
            None => Line {
                fixed_bytes: 0.0,
                bytes_per_sample: p1 as f64 / b1 as f64,
            },
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

#[cfg(test)]
mod tests {
    use super::*;

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
        // Spanning (`span`): the largest and the largest at most half of it, not the size beside it.
        let noisy = [(8, 0.31e9), (968, 12.45e9), (976, 12.55e9)].map(|(b, p)| (b, p as u64));
        let near = Line::through(&noisy).unwrap().bytes_per_sample;
        let wide = Line::fit(&noisy, true).unwrap().bytes_per_sample;
        assert!((near - 12.5e6).abs() < 1.0 && (wide - (12.55e9 - 0.31e9) / 968.0).abs() < 1.0);
        assert_eq!(Line::fit(&noisy[1..], true), Line::through(&noisy[1..]));
        assert_eq!(l.batch_within(0.5e9), 0);
    }
}
