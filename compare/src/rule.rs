//! The comparison rule, after nvbench's compare: a difference counts only when it is larger than
//! twice either run's measured noise (two standard deviations) and a relative threshold. One
//! sigma was not enough on the H200: a host-bound training variant (4.4% noise) moved 7.2%
//! between two processes with nothing changed, and was flagged SLOWER. When either run is too noisy to tell,
//! the answer is UNSURE rather than a guess.

use serde::{Deserialize, Serialize};

use common::stats::{MedianOf, Ratio};

/// A timing to compare: median and relative noise (sample standard deviation over mean).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Timing {
    pub median_s: f64,
    pub noise: f64,
    pub samples: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Verdict {
    Same,
    Faster,
    Slower,
    Unsure,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Rule {
    /// Smallest relative change that counts (0.05 = 5%).
    pub threshold: f64,
    /// Above this relative noise in either run, no verdict is given.
    pub max_noise: f64,
}

impl Default for Rule {
    fn default() -> Self {
        Rule {
            threshold: 0.05,
            max_noise: 0.2,
        }
    }
}

impl Rule {
    /// The verdict on `current` against `expected`, and the relative difference.
    pub fn judge(&self, expected: &Timing, current: &Timing) -> (Verdict, f64) {
        if !(expected.median_s > 0.0 && current.median_s > 0.0) {
            return (Verdict::Unsure, f64::NAN);
        }
        let diff = current.median_s / expected.median_s - 1.0;
        let noisy = |t: &Timing| !t.noise.is_finite() || t.noise > self.max_noise;
        if noisy(expected) || noisy(current) {
            return (Verdict::Unsure, diff);
        }
        let bar = self
            .threshold
            .max(2.0 * expected.noise)
            .max(2.0 * current.noise);
        // Inclusive, with room for rounding in the ratio (1.05 / 1.0 - 1 is not exactly 0.05).
        let verdict = if diff.abs() <= bar + 1e-12 {
            Verdict::Same
        } else if diff < 0.0 {
            Verdict::Faster
        } else {
            Verdict::Slower
        };
        (verdict, diff)
    }
}

impl From<&Timing> for MedianOf {
    fn from(t: &Timing) -> MedianOf {
        MedianOf {
            median: t.median_s,
            noise: t.noise,
            samples: t.samples,
        }
    }
}

/// Speedup of `optimized` over `baseline` (ratio of medians) and its standard uncertainty,
/// from each median's standard error (1.25 sigma / sqrt(n) for a median of normal samples).
pub fn speedup(baseline: &Timing, optimized: &Timing) -> (f64, f64) {
    let r = Ratio::of_medians(baseline.into(), optimized.into());
    (r.value, r.uncertainty)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(median_s: f64, noise: f64) -> Timing {
        Timing {
            median_s,
            noise,
            samples: 100,
        }
    }

    #[test]
    fn small_differences_are_the_same() {
        let r = Rule::default();
        assert_eq!(r.judge(&t(1.0, 0.01), &t(1.03, 0.01)).0, Verdict::Same);
        assert_eq!(r.judge(&t(1.0, 0.01), &t(0.97, 0.01)).0, Verdict::Same);
    }

    #[test]
    fn differences_beyond_threshold_and_noise_count() {
        let r = Rule::default();
        assert_eq!(r.judge(&t(1.0, 0.01), &t(1.2, 0.01)).0, Verdict::Slower);
        assert_eq!(r.judge(&t(1.0, 0.01), &t(0.8, 0.01)).0, Verdict::Faster);
    }

    #[test]
    fn noise_raises_the_bar() {
        let r = Rule::default();
        // 15% slower, but one run's noise is 10%: within two sigma, not a regression.
        assert_eq!(r.judge(&t(1.0, 0.10), &t(1.15, 0.01)).0, Verdict::Same);
        assert_eq!(r.judge(&t(1.0, 0.01), &t(1.15, 0.10)).0, Verdict::Same);
        // 25% slower beats both the threshold and two sigma of 10% noise.
        assert_eq!(r.judge(&t(1.0, 0.10), &t(1.25, 0.01)).0, Verdict::Slower);
        // The H200 case: 4.4% noise, 7.2% slower: the same.
        assert_eq!(
            r.judge(&t(13.892, 0.017), &t(14.887, 0.044)).0,
            Verdict::Same
        );
    }

    #[test]
    fn too_noisy_is_unsure() {
        let r = Rule::default();
        assert_eq!(r.judge(&t(1.0, 0.25), &t(2.0, 0.01)).0, Verdict::Unsure);
        assert_eq!(
            r.judge(&t(1.0, 0.01), &t(2.0, f64::INFINITY)).0,
            Verdict::Unsure
        );
        assert_eq!(r.judge(&t(0.0, 0.01), &t(2.0, 0.01)).0, Verdict::Unsure);
    }

    #[test]
    fn edge_exactly_at_the_bar_is_the_same() {
        let r = Rule {
            threshold: 0.05,
            max_noise: 0.2,
        };
        let (v, d) = r.judge(&t(1.0, 0.0), &t(1.05, 0.0));
        assert!((d - 0.05).abs() < 1e-12);
        assert_eq!(v, Verdict::Same, "the bar is inclusive");
        assert_eq!(r.judge(&t(1.0, 0.0), &t(1.0501, 0.0)).0, Verdict::Slower);
    }

    #[test]
    fn speedup_and_its_uncertainty() {
        let (s, u) = speedup(&t(4.0, 0.0), &t(1.0, 0.0));
        assert_eq!((s, u), (4.0, 0.0));
        let (s, u) = speedup(&t(4.0, 0.1), &t(1.0, 0.1));
        // each median's standard error: 1.2533 * 0.1 / 10 = 1.25%; combined 1.77% of 4.
        assert_eq!(s, 4.0);
        assert!((u - 4.0 * (2.0f64).sqrt() * 0.012533).abs() < 1e-6, "{u}");
    }
}
