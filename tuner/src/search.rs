//! The batch-size finder's logic, over any oracle "does batch B fit?" (real training steps on
//! the GPU, a fresh process of the user's program; a fake in the tests).
//!
//! Without memory figures it grows geometrically from the start until the first failure, then
//! binary-searches the sizes at the granularity between the last success and the first
//! failure. With a maximum M, a start S and a granularity G that needs at most
//! floor(log2(M/S)) + 2 trials to bracket M and ceil(log2(M/G)) to pin it, within the bound
//! ceil(log2(M/S)) + ceil(log2(M/G)) + 2.
//!
//! A trial that reports its peak memory and the memory it could have ([Probe]) lets the search
//! aim instead of doubling: the first peak, taken as proportional to the batch, gives a jump
//! that stays under the limit whenever memory has a fixed part (the model, the context); the
//! straight line through the two largest peaks ([Line]) then predicts the largest batch that
//! fits, and the search tries that size and the one above. Where the prediction is off, it
//! gallops from it in steps that double (1, 2, 4 sizes) until the answer is bracketed, then
//! bisects: a good prediction costs four or five trials in all, a poor one about twice a
//! bisection of the error. Memory that is not a line (cuDNN's autotuner takes workspace from
//! whatever room there is, so the peaks climb to the limit long before the batch that runs out)
//! shows itself when a jump lands more than 15% off the line that aimed it, the peaks flatten,
//! or a larger batch peaks lower than a smaller one;
//! from there the search doubles and bisects as it would without peaks. The answer is exact
//! either way: the largest size at the granularity that was seen to fit, with the next size
//! seen to fail.

use serde::Serialize;

use crate::granularity::{index_below, size_at, Granularity};
use crate::line::Line;

/// The search's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Found {
    /// Largest batch at the granularity that fits.
    pub maximum: usize,
    /// Every trial in order: (batch, fitted).
    pub trials: Vec<(usize, bool)>,
    /// Whether `maximum + granularity` (the next candidate) was tried and failed.
    pub next_failed: bool,
}

/// What one trial of the finder says: whether the batch fit, and where it knows them, its peak
/// memory and the memory it could have had (bytes, in the same terms: the framework's own peak
/// against the memory free when the program started, or the process's peak against the
/// device's memory less other processes').
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Probe {
    pub fits: bool,
    pub peak_bytes: Option<u64>,
    pub limit_bytes: Option<u64>,
}

impl From<bool> for Probe {
    fn from(fits: bool) -> Probe {
        Probe {
            fits,
            ..Probe::default()
        }
    }
}

/// The most trials doubling and bisecting need (the module's bound):
/// ceil(log2(max/start)) + ceil(log2(max/multiple)) + 2.
pub fn trial_bound(maximum: usize, start: usize, multiple: usize) -> usize {
    let clog2 = |x: usize, y: usize| (x as f64 / y as f64).log2().ceil().max(0.0) as usize;
    clog2(maximum, start) + clog2(maximum, multiple) + 2
}

/// How a size was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Move {
    Start,
    Double,
    /// Predicted by the memory line through this many points.
    Jump(usize),
    Up,
    Down,
    Bisect,
    Cap,
}

/// Jumps by the memory line before the first failure: the proportional one, the line's, one
/// refit.
const REACH_JUMPS: usize = 3;
/// Jumps inside the bracket, each after a new point.
const BRACKET_JUMPS: usize = 2;
/// A jump whose peak lands further than this share from the line that aimed it, or whose peak
/// rises at less than [FLATTER] times the line's slope, shows memory that is not a line (an
/// autotuner's workspace that takes the room there is): the search stops aiming.
const OFF_THE_LINE: f64 = 0.15;
const FLATTER: f64 = 0.5;

struct Search<F> {
    granularity: Granularity,
    probe: F,
    trials: Vec<(usize, bool)>,
    points: Vec<(usize, u64)>,
    limit: Option<u64>,
    /// Largest batch seen to fit; smallest seen to fail.
    lo: usize,
    hi: Option<usize>,
    last: (Move, bool),
    /// A jump landed off its line, or the peaks flattened: no more aiming.
    elastic: bool,
}

impl<F, E> Search<F>
where
    F: FnMut(usize) -> Result<Probe, E>,
{
    fn try_batch(&mut self, batch: usize, how: Move) -> Result<bool, E> {
        let p = (self.probe)(batch)?;
        self.trials.push((batch, p.fits));
        if let Some(l) = p.limit_bytes {
            self.limit = Some(self.limit.map_or(l, |old| old.min(l)));
        }
        if p.fits {
            self.lo = self.lo.max(batch);
            if let Some(peak) = p.peak_bytes {
                let before = Line::through(&self.points);
                // A larger batch that needed less than a smaller one: the peaks are the room
                // there was, not what the batch needs.
                if self.points.iter().any(|&(b, q)| b < batch && q > peak) {
                    self.elastic = true;
                }
                self.points.push((batch, peak));
                // Only a line through two points or more is a claim about this batch's peak: the
                // jump lands off it, or the peaks flatten as they do against a limit that the
                // workspace fills.
                if let (Move::Jump(n), Some(line), Some(after)) =
                    (how, before, Line::through(&self.points))
                {
                    let aimed = line.peak(batch);
                    let off = (peak as f64 - aimed).abs() > OFF_THE_LINE * aimed;
                    let flat = after.bytes_per_sample < FLATTER * line.bytes_per_sample;
                    if n >= 2 && (off || flat) {
                        self.elastic = true;
                    }
                }
            }
        } else {
            self.hi = Some(self.hi.map_or(batch, |h| h.min(batch)));
        }
        self.last = (how, p.fits);
        Ok(p.fits)
    }

    /// The index of the largest size the memory line says fits.
    fn predicted(&self) -> Option<usize> {
        if self.elastic {
            return None;
        }
        let line = Line::through(&self.points)?;
        let b = line.batch_within(self.limit? as f64);
        (b > 0).then(|| index_below(self.granularity, b))
    }

    fn lo_index(&self) -> usize {
        index_below(self.granularity, self.lo)
    }

    /// The smallest index whose size is at least `hi` (it fails).
    fn bad_index(&self, hi: usize) -> usize {
        let k = index_below(self.granularity, hi);
        if size_at(self.granularity, k) >= hi {
            k
        } else {
            k + 1
        }
    }

    fn found(self) -> Result<Found, String> {
        let k = self.lo_index();
        let maximum = if self.lo == 0 {
            0
        } else {
            size_at(self.granularity, k)
        };
        if maximum == 0 {
            let m = match self.granularity {
                Granularity::Multiple(m) => m,
                Granularity::Pow2 => 1,
            };
            return Err(format!(
                "no multiple of {m} fits (batch {} fits, {} does not): use a smaller --multiple-of",
                self.lo,
                self.hi.map_or("a larger one".into(), |h| h.to_string())
            ));
        }
        let next = size_at(self.granularity, k + 1);
        Ok(Found {
            maximum,
            next_failed: self.trials.contains(&(next, false)),
            trials: self.trials,
        })
    }
}

/// Find the largest fitting batch. `cap` bounds the growth (a batch no GPU could hold).
pub fn find<E>(
    start: usize,
    granularity: Granularity,
    cap: usize,
    probe: impl FnMut(usize) -> Result<Probe, E>,
) -> Result<Result<Found, String>, E> {
    if start == 0 {
        return Ok(Err("the start batch must be at least 1".into()));
    }
    let mut s = Search {
        granularity,
        probe,
        trials: Vec::new(),
        points: Vec::new(),
        limit: None,
        lo: 0,
        hi: None,
        last: (Move::Start, true),
        elastic: false,
    };
    if !s.try_batch(start, Move::Start)? {
        return Ok(Err(format!(
            "batch {start} already runs out of memory: give a smaller --start"
        )));
    }
    let (mut reach_jumps, mut bracket_jumps) = (0, 0);
    // Gallop steps: the size next to the prediction first (it is right when the memory line
    // is), then about 1% of the size, doubling, so a prediction off by some percent costs the
    // same trials at any scale.
    let (mut up, mut down) = (0usize, 0usize);
    let mut jumped = false;
    // Grow until the first failure.
    while s.hi.is_none() {
        let k_lo = s.lo_index();
        let (mut how, mut next) = match s.predicted() {
            Some(p) if reach_jumps < REACH_JUMPS && size_at(granularity, p) > s.lo => {
                (Move::Jump(s.points.len()), size_at(granularity, p))
            }
            // Just under a line that held: the answer is near, gallop up from it.
            _ if jumped && !s.elastic => {
                up = next_step(up, k_lo);
                (Move::Up, size_at(granularity, k_lo + up))
            }
            _ => (Move::Double, s.lo.saturating_mul(2)),
        };
        if next > cap {
            // Nothing failed below the cap: the largest size under it is the last candidate.
            next = size_at(granularity, index_below(granularity, cap));
            how = Move::Cap;
            if next <= s.lo {
                return Ok(s.found());
            }
        }
        if let Move::Jump(_) = how {
            reach_jumps += 1;
            jumped = true;
        }
        if s.try_batch(next, how)? && how == Move::Cap {
            return Ok(s.found());
        }
    }
    // Pin it between the last success and the first failure.
    loop {
        let hi = s.hi.expect("a failure brackets the search");
        let (k_lo, k_bad) = (s.lo_index(), s.bad_index(hi));
        if k_bad <= k_lo + 1 {
            return Ok(s.found());
        }
        let bisect = k_lo + (k_bad - k_lo) / 2;
        // A failed prediction of the line (not the first, proportional, guess): the answer is
        // most likely just below it.
        let (last, fitted) = s.last;
        let overshot = !fitted
            && !s.elastic
            && (matches!(last, Move::Jump(n) if n >= 2) || last == Move::Down);
        let (how, k) = if overshot && k_bad > k_lo + next_step(down, k_bad) {
            down = next_step(down, k_bad);
            (Move::Down, k_bad - down)
        } else {
            match s.predicted() {
                Some(p) if fitted && bracket_jumps < BRACKET_JUMPS && p > k_lo && p < k_bad => {
                    bracket_jumps += 1;
                    (Move::Jump(s.points.len()), p)
                }
                _ => (Move::Bisect, bisect),
            }
        };
        s.try_batch(size_at(granularity, k), how)?;
    }
}

/// The gallop step after `step` (0 before the first) from size index `k`: 1, then about 1% of
/// `k` (at least 2), then doubling.
fn next_step(step: usize, k: usize) -> usize {
    match step {
        0 => 1,
        1 => (k / 100).max(2),
        s => s.saturating_mul(2),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const M8: Granularity = Granularity::Multiple(8);

    /// The search's answer, the cap far away.
    fn answer(
        start: usize,
        g: Granularity,
        probe: impl FnMut(usize) -> Result<Probe, ()>,
    ) -> Found {
        find(start, g, 1 << 26, probe).unwrap().unwrap()
    }

    fn oracle(limit: usize) -> impl FnMut(usize) -> Result<Probe, ()> {
        move |b| Ok((b <= limit).into())
    }

    /// A program that reports `peak` for a batch that `fits`, against a limit of `limit` bytes.
    fn reporting(
        limit: u64,
        fits: impl Fn(usize) -> bool + Copy,
        peak: impl Fn(usize) -> f64 + Copy,
    ) -> impl Fn(usize) -> Result<Probe, ()> + Copy {
        move |b| {
            let fits = fits(b);
            Ok(Probe {
                fits,
                peak_bytes: fits.then_some(peak(b) as u64),
                limit_bytes: Some(limit),
            })
        }
    }

    /// A program whose peak is `fixed + per_sample x batch` bytes, reported as `reported` times
    /// that against a limit of `limit` bytes, which runs out of memory past `real` times the
    /// limit: the largest batch that fits, and the program.
    fn linear(
        (fixed, per_sample): (f64, f64),
        limit: u64,
        real: f64,
        reported: f64,
    ) -> (usize, impl Fn(usize) -> Result<Probe, ()> + Copy) {
        let real_limit = limit as f64 * real;
        let need = move |b: usize| fixed + per_sample * b as f64;
        let largest = ((real_limit - fixed) / per_sample).floor() as usize;
        let program = reporting(
            limit,
            move |b| need(b) <= real_limit,
            move |b| need(b) * reported,
        );
        (largest, program)
    }

    #[test]
    fn finds_the_limit_at_every_granularity_within_the_bound() {
        for limit in [1usize, 7, 8, 9, 100, 1000, 4096, 5000, 123_457, 1 << 20] {
            for start in [1usize, 8, 64] {
                for m in [1usize, 8, 64] {
                    let r = find(start, Granularity::Multiple(m), 1 << 26, oracle(limit)).unwrap();
                    let expected = limit / m * m;
                    match r {
                        Ok(f) => {
                            assert!(start <= limit);
                            assert_eq!(f.maximum, expected, "limit {limit} start {start} m {m}");
                            assert!(f.maximum <= limit && f.maximum + m > limit);
                            let bound = trial_bound(limit, start, m);
                            assert!(
                                f.trials.len() <= bound,
                                "limit {limit} start {start} m {m}: {} > {bound}",
                                f.trials.len()
                            );
                            assert!(f.trials.iter().all(|&(b, ok)| ok == (b <= limit)));
                            if f.next_failed {
                                assert!(f.trials.contains(&(f.maximum + m, false)));
                            }
                        }
                        Err(e) => assert!(start > limit || expected == 0, "{e}"),
                    }
                }
            }
        }
    }

    #[test]
    fn powers_of_two() {
        let f = answer(1, Granularity::Pow2, oracle(5000));
        assert_eq!(f.maximum, 4096);
        assert_eq!(f.trials.len(), 14, "1, 2, ..., 8192");
        assert!(f.next_failed);
    }

    #[test]
    fn a_start_above_every_fitting_size_is_an_error() {
        let e = find(4096, M8, 1 << 26, oracle(1000)).unwrap().unwrap_err();
        assert!(e.contains("smaller --start"), "{e}");
        assert!(find(0, Granularity::Pow2, 1 << 26, oracle(10))
            .unwrap()
            .is_err());
    }

    #[test]
    fn the_cap_ends_the_growth() {
        let f = find(1, M8, 1000, oracle(usize::MAX)).unwrap().unwrap();
        assert_eq!(f.maximum, 1000);
        assert!(!f.next_failed);
    }

    #[test]
    fn oracle_errors_propagate() {
        let r = find(1, Granularity::Pow2, 1 << 20, |b| {
            if b > 4 {
                Err("gpu gone")
            } else {
                Ok(true.into())
            }
        });
        assert_eq!(r.unwrap_err(), "gpu gone");
    }

    #[test]
    fn reported_peaks_cut_the_trials_and_keep_the_answer_exact() {
        // ResNet-like: 0.6 GB fixed, 40 MB per sample, 79 GB free: the limit is 1960 samples.
        let (largest, program) = linear((0.6e9, 40e6), 79_000_000_000, 1.0, 1.0);
        let exact = largest / 8 * 8;
        let guided = answer(8, M8, program);
        let plain = answer(8, M8, oracle(largest));
        assert_eq!((guided.maximum, plain.maximum), (exact, exact));
        assert!(guided.next_failed && plain.next_failed);
        // Start, the proportional jump, the line's prediction and the size above it.
        assert_eq!(guided.trials.len(), 4, "{:?}", guided.trials);
        assert_eq!(plain.trials.len(), 16, "{:?}", plain.trials);
        // Powers of two: start, jump, prediction, the next power fails.
        let f = answer(8, Granularity::Pow2, program);
        assert_eq!(f.maximum, 1024);
        assert!(f.next_failed && f.trials.len() <= 4, "{:?}", f.trials);
    }

    #[test]
    fn a_prediction_that_is_off_still_ends_exact() {
        // The program's reported peak and its limit disagree with where it really fails (the
        // allocator's slack, a workspace): 3% less room than reported or 4% more, peaks
        // reported 5% high or 10% low.
        for (real, reported) in [(0.97, 1.0), (1.04, 1.0), (1.0, 1.05), (1.0, 0.9)] {
            for (fixed, per_sample, start) in [(0.6e9, 40e6, 8), (2e9, 3e6, 8), (0.3e9, 1e8, 4)] {
                let (largest, program) =
                    linear((fixed, per_sample), 79_000_000_000, real, reported);
                let exact = largest / 8 * 8;
                let f = answer(start, M8, program);
                assert_eq!(
                    f.maximum, exact,
                    "{real} {reported} {fixed}: {:?}",
                    f.trials
                );
                assert!(f.next_failed, "{:?}", f.trials);
                assert!(f.trials.iter().all(|&(b, ok)| ok == (b <= largest)));
                let plain = answer(start, M8, oracle(largest));
                // Off by 3-10%, the prediction still saves at least four trials of the 15-24 that
                // doubling and bisecting take here.
                assert!(
                    f.trials.len() + 4 <= plain.trials.len(),
                    "{real} {reported} {fixed}: {} trials against {}: {:?}",
                    f.trials.len(),
                    plain.trials.len(),
                    f.trials
                );
                assert!(f.trials.len() <= trial_bound(exact, start, 8));
            }
        }
    }

    #[test]
    fn elastic_memory_falls_back_to_doubling_and_bisecting() {
        // cuDNN's autotuner under a 16 GiB cap, as ResNet-18 measured on an H100: the steady
        // step holds what the batch needs plus the workspace of the algorithms chosen, and the
        // workspace grows with the batch until it takes most of the room left. The peaks climb
        // to near the cap long before the batch that runs out, so the line aims low, again and
        // again; once a jump lands well off its own line the search stops aiming.
        let cap = 17_179_869_184f64;
        let need = |b: usize| 0.2e9 + 17e6 * b as f64;
        let largest = ((cap - 0.2e9) / 17e6) as usize;
        let workspace = move |b: usize| (20e6 * b as f64).min(0.9 * (cap - need(b)));
        let elastic = reporting(
            cap as u64,
            move |b| need(b) <= cap,
            move |b| need(b) + workspace(b),
        );
        let f = answer(8, M8, elastic);
        assert_eq!(f.maximum, largest / 8 * 8, "{:?}", f.trials);
        assert!(f.next_failed, "{:?}", f.trials);
        let plain = answer(8, M8, oracle(largest));
        assert!(
            f.trials.len() <= plain.trials.len(),
            "{} trials against doubling and bisecting's {}: {:?}",
            f.trials.len(),
            plain.trials.len(),
            f.trials
        );
    }

    #[test]
    fn memory_that_is_not_a_line_is_still_searched_exactly() {
        // Peaks that grow faster than the line through two points: the proportional jump
        // overshoots, and the search falls back to bisecting.
        let limit = 50_000_000_000u64;
        let peak = |b: usize| 1e9 + 2e4 * (b as f64).powf(1.5);
        let largest = (1..1 << 20)
            .take_while(|&b| peak(b) <= limit as f64)
            .last()
            .unwrap();
        let f = answer(
            8,
            M8,
            reporting(limit, move |b| peak(b) <= limit as f64, peak),
        );
        assert_eq!(f.maximum, largest / 8 * 8, "{:?}", f.trials);
        assert!(f.next_failed);
        assert!(
            f.trials.len() <= trial_bound(largest, 8, 8) + 2,
            "{:?}",
            f.trials
        );
    }

    #[test]
    fn a_larger_batch_that_peaks_lower_stops_the_aiming() {
        // A workspace that takes the room there is: 2 GB fixed, 10 MB per sample up to 1600, then
        // flat at the 18 GB limit whatever the batch, and out of memory above 2000.
        let peak = |b: usize| {
            if b <= 1600 {
                2e9 + 1e7 * b as f64
            } else {
                18e9 - (b % 7) as f64 * 1e8
            }
        };
        let program = reporting(18_000_000_000, |b| b <= 2000, peak);
        let found = find(8, M8, 1 << 20, program).unwrap().unwrap();
        assert_eq!(found.maximum, 2000);
        assert!(found.next_failed);
        assert!(found.trials.len() <= 14, "{:?}", found.trials);
    }
}
