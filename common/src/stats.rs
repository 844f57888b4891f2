//! Summary statistics of a set of timing samples. Percentiles interpolate linearly between
//! order statistics (the "type 7" rule of R and NumPy), so p50 is the usual median.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub samples: usize,
    pub min: f64,
    pub max: f64,
    pub mean: f64,
    pub median: f64,
    /// Sample standard deviation (n - 1).
    pub stddev: f64,
    /// stddev / mean (null in JSON when the mean is zero).
    #[serde(with = "infinite_as_null")]
    pub rel_stddev: f64,
    pub p10: f64,
    pub p90: f64,
    pub q1: f64,
    pub q3: f64,
    pub iqr: f64,
}

/// JSON has no infinity: write a non-finite value as null and read null back as +infinity.
pub mod infinite_as_null {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
        if v.is_finite() {
            s.serialize_f64(*v)
        } else {
            s.serialize_none()
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::INFINITY))
    }
}

/// The q-quantile (0..=1) of already sorted values.
pub fn quantile_sorted(sorted: &[f64], q: f64) -> f64 {
    assert!(!sorted.is_empty(), "quantile of no samples");
    let q = q.clamp(0.0, 1.0);
    let pos = q * (sorted.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    let frac = pos - lo as f64;
    sorted[lo] + (sorted[hi] - sorted[lo]) * frac
}

pub fn mean(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len() as f64
}

/// Sample standard deviation; 0 for fewer than two values.
pub fn stddev(values: &[f64]) -> f64 {
    if values.len() < 2 {
        return 0.0;
    }
    let m = mean(values);
    let ss: f64 = values.iter().map(|v| (v - m) * (v - m)).sum();
    (ss / (values.len() - 1) as f64).sqrt()
}

/// Relative standard deviation; infinite when the mean is zero (noise cannot be judged).
pub fn rel_stddev(values: &[f64]) -> f64 {
    let m = mean(values);
    if m == 0.0 {
        return f64::INFINITY;
    }
    stddev(values) / m.abs()
}

impl Summary {
    /// None for an empty set or one with a non-finite value.
    pub fn of(values: &[f64]) -> Option<Summary> {
        if values.is_empty() || values.iter().any(|v| !v.is_finite()) {
            return None;
        }
        let mut sorted = values.to_vec();
        sorted.sort_by(|a, b| a.partial_cmp(b).expect("finite"));
        let q1 = quantile_sorted(&sorted, 0.25);
        let q3 = quantile_sorted(&sorted, 0.75);
        Some(Summary {
            samples: sorted.len(),
            min: sorted[0],
            max: sorted[sorted.len() - 1],
            mean: mean(&sorted),
            median: quantile_sorted(&sorted, 0.5),
            stddev: stddev(&sorted),
            rel_stddev: rel_stddev(&sorted),
            p10: quantile_sorted(&sorted, 0.10),
            p90: quantile_sorted(&sorted, 0.90),
            q1,
            q3,
            iqr: q3 - q1,
        })
    }
}

/// The two-sided 95% point of the normal distribution: an interval of 1.96 standard
/// uncertainties either side holds the true value 95% of the time.
pub const Z95: f64 = 1.959_964;

/// Relative standard error of the median of `samples` samples whose relative standard deviation
/// is `noise`: 1.2533 sigma / sqrt(n), the median's error for normally distributed samples.
pub fn median_rel_error(noise: f64, samples: usize) -> f64 {
    1.2533 * noise / (samples.max(1) as f64).sqrt()
}

/// A median as a ratio needs it: its value, its relative noise and how many samples it is of.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MedianOf {
    pub median: f64,
    pub noise: f64,
    pub samples: usize,
}

impl From<&Summary> for MedianOf {
    fn from(s: &Summary) -> MedianOf {
        MedianOf {
            median: s.median,
            noise: s.rel_stddev,
            samples: s.samples,
        }
    }
}

/// A ratio of two medians (a speedup: the baseline's time over the optimized one's) and its
/// standard uncertainty, from each median's standard error added in quadrature.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Ratio {
    pub value: f64,
    pub uncertainty: f64,
}

impl Ratio {
    pub fn of_medians(numerator: MedianOf, denominator: MedianOf) -> Ratio {
        let value = numerator.median / denominator.median;
        let rel = median_rel_error(numerator.noise, numerator.samples)
            .hypot(median_rel_error(denominator.noise, denominator.samples));
        Ratio {
            value,
            uncertainty: value * rel,
        }
    }

    /// The 95% interval: the value 1.96 standard uncertainties either way.
    pub fn interval95(&self) -> (f64, f64) {
        (
            self.value - Z95 * self.uncertainty,
            self.value + Z95 * self.uncertainty,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12 * b.abs().max(1.0)
    }

    #[test]
    fn summary_of_one_to_ten() {
        let v: Vec<f64> = (1..=10).rev().map(f64::from).collect();
        let s = Summary::of(&v).unwrap();
        assert_eq!(s.samples, 10);
        assert_eq!((s.min, s.max), (1.0, 10.0));
        assert!(close(s.mean, 5.5));
        assert!(close(s.median, 5.5));
        // numpy.percentile(range(1, 11), [10, 25, 75, 90]) = 1.9, 3.25, 7.75, 9.1
        assert!(close(s.p10, 1.9));
        assert!(close(s.q1, 3.25));
        assert!(close(s.q3, 7.75));
        assert!(close(s.p90, 9.1));
        assert!(close(s.iqr, 4.5));
        // sample stddev of 1..10 = sqrt(82.5 / 9)
        assert!(close(s.stddev, (82.5f64 / 9.0).sqrt()));
        assert!(close(s.rel_stddev, s.stddev / 5.5));
    }

    #[test]
    fn odd_count_median_is_the_middle_value() {
        let s = Summary::of(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!(s.median, 2.0);
    }

    #[test]
    fn one_sample_has_no_spread() {
        let s = Summary::of(&[4.0]).unwrap();
        assert_eq!(
            (s.median, s.stddev, s.iqr, s.p10, s.p90),
            (4.0, 0.0, 0.0, 4.0, 4.0)
        );
    }

    #[test]
    fn empty_or_nan_gives_none() {
        assert!(Summary::of(&[]).is_none());
        assert!(Summary::of(&[1.0, f64::NAN]).is_none());
        assert!(Summary::of(&[1.0, f64::INFINITY]).is_none());
    }

    #[test]
    fn zero_mean_noise_is_infinite() {
        assert!(rel_stddev(&[0.0, 0.0]).is_infinite());
    }

    #[test]
    fn a_ratio_of_medians_carries_both_errors() {
        let m = |median, noise| MedianOf {
            median,
            noise,
            samples: 100,
        };
        let r = Ratio::of_medians(m(4.0, 0.0), m(1.0, 0.0));
        assert_eq!((r.value, r.uncertainty), (4.0, 0.0));
        assert_eq!(r.interval95(), (4.0, 4.0));
        // Each median's standard error: 1.2533 * 0.1 / 10 = 1.25%; together 1.77% of 4.
        let r = Ratio::of_medians(m(4.0, 0.1), m(1.0, 0.1));
        assert_eq!(r.value, 4.0);
        let u = 4.0 * 2f64.sqrt() * 0.012533;
        assert!((r.uncertainty - u).abs() < 1e-9, "{r:?}");
        let (lo, hi) = r.interval95();
        assert!(
            (lo - (4.0 - 1.959964 * u)).abs() < 1e-9 && (hi - (4.0 + 1.959964 * u)).abs() < 1e-9
        );
        assert_eq!(
            median_rel_error(0.1, 0),
            1.2533 * 0.1,
            "no samples counts as one"
        );
        let s = Summary::of(&[1.0, 2.0, 3.0]).unwrap();
        assert_eq!(
            MedianOf::from(&s),
            MedianOf {
                median: 2.0,
                noise: s.rel_stddev,
                samples: 3
            }
        );
    }
}
