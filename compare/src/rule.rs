//! The comparison rules.
//!
//! A device-paced variant, after nvbench's compare: a difference counts only when it is larger
//! than twice either run's measured noise (two standard deviations) and a relative threshold.
//! One sigma was not enough on the H200: a host-paced training variant (4.4% noise) moved 7.2%
//! between two processes with nothing changed, and was flagged SLOWER.
//!
//! A host-paced variant can move more between processes than within one: on one H100 the
//! pinned-copy training loop gave 2.15 to 3.07 ms in five processes of one build, one of them
//! with 2.9% noise of its own (results/h100/expectations.json). So it is judged against the
//! runs recorded on the same machine: the difference counts only beyond a 99.9% one-sided
//! prediction bound of those runs' spread (Student's t on the log of their medians), the
//! threshold and twice this run's noise. With fewer than [MIN_RUNS] recorded runs the spread is
//! unknown, and the answer is UNSURE.
//!
//! When either run is too noisy to tell, the answer is UNSURE rather than a guess.

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
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Verdict {
    Same,
    Faster,
    Slower,
    Unsure,
    /// Nothing recorded to judge against: for this GPU model (a device-paced variant) or on
    /// this machine (a host-paced one). Never a failure.
    NoExpectation,
}

impl Verdict {
    /// As printed: "SAME", "NO EXPECTATION".
    pub fn label(self) -> &'static str {
        match self {
            Verdict::Same => "SAME",
            Verdict::Faster => "FASTER",
            Verdict::Slower => "SLOWER",
            Verdict::Unsure => "UNSURE",
            Verdict::NoExpectation => "NO EXPECTATION",
        }
    }
}

/// Runs a host-paced variant needs on a machine before its run-to-run spread is judged.
pub const MIN_RUNS: usize = 3;
/// Runs kept per host-paced variant and machine, newest last.
pub const MAX_RUNS: usize = 10;
/// Student's t, one-sided 99.9%, for 2..=9 degrees of freedom (MIN_RUNS - 1 ..= MAX_RUNS - 1).
const T_999: [f64; 8] = [22.327, 10.215, 7.173, 5.893, 5.208, 4.785, 4.501, 4.297];

/// What the recorded runs of a host-paced variant say: the median of their medians, and how
/// far a new run may land from it by run-to-run noise alone.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RunSpread {
    pub runs: usize,
    /// Median of the runs' medians, seconds.
    pub center_s: f64,
    /// Standard deviation of the log of the runs' medians (relative run-to-run noise).
    pub spread: f64,
    /// Relative change the spread alone allows (the prediction bound).
    pub bound: f64,
}

impl RunSpread {
    /// None with fewer than [MIN_RUNS] usable runs.
    pub fn of(runs: &[Timing]) -> Option<RunSpread> {
        let mut medians: Vec<f64> = runs
            .iter()
            .map(|t| t.median_s)
            .filter(|m| *m > 0.0 && m.is_finite())
            .collect();
        let k = medians.len();
        if k < MIN_RUNS {
            return None;
        }
        medians.sort_by(f64::total_cmp);
        let center_s = if k % 2 == 1 {
            medians[k / 2]
        } else {
            0.5 * (medians[k / 2 - 1] + medians[k / 2])
        };
        let mean = medians.iter().map(|m| m.ln()).sum::<f64>() / k as f64;
        let var = medians.iter().map(|m| (m.ln() - mean).powi(2)).sum::<f64>() / (k - 1) as f64;
        let spread = var.sqrt();
        // Degrees of freedom k - 1, past the table's last row its last value (a little wide).
        let t = T_999[(k - 1).min(T_999.len() + 1) - 2];
        Some(RunSpread {
            runs: k,
            center_s,
            spread,
            bound: (t * spread * (1.0 + 1.0 / k as f64).sqrt()).exp() - 1.0,
        })
    }
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
    /// The verdict on a device-paced `current` against `expected`, and the relative
    /// difference.
    pub fn judge(&self, expected: &Timing, current: &Timing) -> (Verdict, f64) {
        let bar = self.bar(expected, current);
        self.decide(expected.median_s, &[expected, current], current, bar)
    }

    /// The verdict on a host-paced `current` against the runs recorded on this machine, the
    /// relative difference from their center, and the bar it was held to (None while fewer
    /// than [MIN_RUNS] runs are recorded: UNSURE).
    pub fn judge_runs(&self, runs: &[Timing], current: &Timing) -> (Verdict, f64, Option<f64>) {
        let Some(s) = RunSpread::of(runs) else {
            return (Verdict::Unsure, f64::NAN, None);
        };
        let bar = self.threshold.max(2.0 * current.noise).max(s.bound);
        let (verdict, diff) = self.decide(s.center_s, &[current], current, bar);
        (verdict, diff, Some(bar))
    }

    /// The change that counts for a device-paced pair of timings.
    pub fn bar(&self, expected: &Timing, current: &Timing) -> f64 {
        self.threshold
            .max(2.0 * expected.noise)
            .max(2.0 * current.noise)
    }

    fn decide(
        &self,
        expected_s: f64,
        checked: &[&Timing],
        current: &Timing,
        bar: f64,
    ) -> (Verdict, f64) {
        if !(expected_s > 0.0 && current.median_s > 0.0) {
            return (Verdict::Unsure, f64::NAN);
        }
        let diff = current.median_s / expected_s - 1.0;
        let noisy = |t: &&Timing| !t.noise.is_finite() || t.noise > self.max_noise;
        if checked.iter().any(noisy) {
            return (Verdict::Unsure, diff);
        }
        // Symmetric in the ratio: slower beyond 1 + bar, faster below 1 / (1 + bar). Inclusive,
        // with room for rounding (1.05 / 1.0 - 1 is not exactly 0.05).
        let verdict = if diff > bar + 1e-12 {
            Verdict::Slower
        } else if diff < 1.0 / (1.0 + bar) - 1.0 - 1e-12 {
            Verdict::Faster
        } else {
            Verdict::Same
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
        // Faster is the same ratio the other way: 1 / 1.05.
        assert_eq!(r.judge(&t(1.05, 0.0), &t(1.0, 0.0)).0, Verdict::Same);
        assert_eq!(r.judge(&t(1.0501, 0.0), &t(1.0, 0.0)).0, Verdict::Faster);
    }

    fn runs(medians: &[f64]) -> Vec<Timing> {
        medians.iter().map(|&m| t(m, 0.03)).collect()
    }

    #[test]
    fn host_paced_runs_need_three_recorded_runs() {
        let r = Rule::default();
        let (v, _, bar) = r.judge_runs(&runs(&[0.090, 0.095]), &t(0.300, 0.01));
        assert_eq!((v, bar), (Verdict::Unsure, None));
        assert!(RunSpread::of(&runs(&[0.090, 0.095])).is_none());
    }

    #[test]
    fn host_paced_runs_are_judged_by_their_own_spread() {
        let r = Rule::default();
        // The naive training loop's three processes on one H100 (Sgemm build): 87.7, 93.2,
        // 96.3 ms. Its slowest run in the GemmEx build (111.3 ms, +19%) is within that spread.
        let recorded = runs(&[0.08771, 0.09324, 0.09629]);
        let s = RunSpread::of(&recorded).unwrap();
        assert_eq!((s.runs, s.center_s), (3, 0.09324));
        // From three runs the spread itself is uncertain: t(2) = 22.3 makes the bound wide.
        assert!(s.bound > 2.0 && s.bound < 3.0, "{s:?}");
        let (v, diff, bar) = r.judge_runs(&recorded, &t(0.11132, 0.03));
        assert!((diff - 0.1939).abs() < 1e-3, "{diff}");
        assert_eq!(v, Verdict::Same, "bar {bar:?}");
        // Four times slower is beyond it.
        assert_eq!(r.judge_runs(&recorded, &t(0.40, 0.03)).0, Verdict::Slower);
        // A variant that repeats within 1% between processes is held to the threshold.
        let steady = runs(&[0.0300, 0.0301, 0.0300, 0.0302, 0.0300]);
        let (v, _, bar) = r.judge_runs(&steady, &t(0.0330, 0.01));
        assert_eq!((v, bar), (Verdict::Slower, Some(0.05)));
        assert_eq!(r.judge_runs(&steady, &t(0.0310, 0.01)).0, Verdict::Same);
        assert_eq!(r.judge_runs(&steady, &t(0.0250, 0.01)).0, Verdict::Faster);
        // Too noisy to tell.
        assert_eq!(r.judge_runs(&steady, &t(0.0330, 0.3)).0, Verdict::Unsure);
    }

    #[test]
    fn more_runs_narrow_the_bound() {
        let few = RunSpread::of(&runs(&[0.95, 1.0, 1.05])).unwrap();
        let many =
            RunSpread::of(&runs(&[0.95, 1.0, 1.05, 0.95, 1.0, 1.05, 0.95, 1.0, 1.05])).unwrap();
        assert!(many.bound < few.bound / 2.0, "{few:?} {many:?}");
        // Past the table (more than ten runs) the bound stays defined.
        let lots: Vec<f64> = (0..14).map(|i| 1.0 + 0.01 * (i % 3) as f64).collect();
        assert!(RunSpread::of(&runs(&lots)).unwrap().bound.is_finite());
    }

    #[test]
    fn verdicts_print_and_serialize_as_words() {
        assert_eq!(Verdict::NoExpectation.label(), "NO EXPECTATION");
        assert_eq!(
            serde_json::to_string(&Verdict::NoExpectation).unwrap(),
            "\"NO_EXPECTATION\""
        );
        assert_eq!(serde_json::to_string(&Verdict::Same).unwrap(), "\"SAME\"");
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
