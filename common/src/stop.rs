//! When to stop taking samples, like nvbench's "stdrel" criterion: at least `min_samples`
//! samples and `min_time` seconds of measured GPU time, then stop as soon as the relative
//! standard deviation is at or under `max_noise` or, where a bound on it is given, the median
//! is known well enough (its relative standard error, 1.2533 x noise / sqrt(n), at or under
//! `max_median_error`); never go past `max_samples` samples or `max_time` seconds of wall time,
//! and say which rule ended the run.
//!
//! The second test is for runs whose noise is their nature (a host-paced loop at 10% noise never
//! comes under 1%): more samples do not make them quieter, only their median surer, so they stop
//! once the median is as sure as the comparison that reads it needs.

use serde::{Deserialize, Serialize};

use crate::counters::Traffic;
use crate::stats::{median_rel_error, rel_stddev};

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StopRule {
    pub min_samples: usize,
    pub max_samples: usize,
    /// Seconds of summed sample time before the noise test may stop the run.
    pub min_time_s: f64,
    /// Seconds of summed sample time that a variant whose timed work crosses the host link
    /// needs at least (the larger of this and `min_time_s` holds for it): a host shares its
    /// link with its neighbours, and a stretch of slow copies can fill a short run.
    #[serde(default)]
    pub host_link_min_time_s: f64,
    /// Seconds of wall time after which the run stops whatever the noise.
    pub max_time_s: f64,
    /// Relative standard deviation (a fraction, 0.01 = 1%) that counts as converged.
    pub max_noise: f64,
    /// Relative standard error of the median (a fraction) that also counts as converged; none:
    /// only the noise test stops the run.
    #[serde(default)]
    pub max_median_error: Option<f64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// Enough samples and time, and the noise is under the threshold.
    Converged,
    /// Hit the sample cap.
    MaxSamples,
    /// Hit the wall-time cap before the noise came down: the result is noisier than asked.
    MaxTime,
    /// Noisier than the bound, but the median known within its bound (`max_median_error`).
    MedianKnown,
}

impl StopReason {
    pub fn describe(self) -> &'static str {
        match self {
            StopReason::Converged => "noise under threshold",
            StopReason::MaxSamples => "sample cap reached",
            StopReason::MaxTime => "time cap reached before noise came under threshold",
            StopReason::MedianKnown => "median known within its bound",
        }
    }
}

impl Default for StopRule {
    fn default() -> Self {
        StopRule {
            min_samples: 20,
            max_samples: 100_000,
            min_time_s: 0.25,
            host_link_min_time_s: 0.0,
            max_time_s: 5.0,
            max_noise: 0.01,
            max_median_error: None,
        }
    }
}

impl StopRule {
    /// A first look: fewer samples, a looser bound.
    pub fn quick() -> Self {
        StopRule {
            min_samples: 10,
            max_samples: 10_000,
            min_time_s: 0.05,
            host_link_min_time_s: 0.0,
            max_time_s: 1.0,
            max_noise: 0.03,
            max_median_error: None,
        }
    }

    /// A sweep's points: a few samples place a point on a curve of ratios, and a short cap
    /// keeps a grid of many points quick.
    pub fn sweep() -> Self {
        StopRule {
            min_samples: 5,
            max_samples: 1000,
            min_time_s: 0.02,
            host_link_min_time_s: 0.0,
            max_time_s: 0.5,
            max_noise: 0.03,
            max_median_error: None,
        }
    }

    /// The rule for a variant whose timed work is `traffic`.
    pub fn for_traffic(self, traffic: Traffic) -> StopRule {
        match traffic {
            Traffic::HostDevice => StopRule {
                min_time_s: self.min_time_s.max(self.host_link_min_time_s),
                ..self
            },
            Traffic::DeviceMemory => self,
        }
    }

    /// Check the rule's own consistency; the message names the offending setting.
    pub fn validate(&self) -> Result<(), String> {
        if self.min_samples == 0 {
            return Err("min samples must be at least 1".into());
        }
        if self.max_samples < self.min_samples {
            return Err(format!(
                "max samples ({}) is below min samples ({})",
                self.max_samples, self.min_samples
            ));
        }
        if !(self.min_time_s >= 0.0 && self.min_time_s.is_finite()) {
            return Err(format!(
                "min time must be a non-negative number of seconds, got {}",
                self.min_time_s
            ));
        }
        if !(self.host_link_min_time_s >= 0.0 && self.host_link_min_time_s.is_finite()) {
            return Err(format!(
                "min time over the host link must be a non-negative number of seconds, got {}",
                self.host_link_min_time_s
            ));
        }
        if !(self.max_time_s > 0.0 && self.max_time_s.is_finite()) {
            return Err(format!(
                "max time must be a positive number of seconds, got {}",
                self.max_time_s
            ));
        }
        if !(self.max_noise > 0.0 && self.max_noise.is_finite()) {
            return Err(format!(
                "max noise must be a positive fraction, got {}",
                self.max_noise
            ));
        }
        if let Some(e) = self
            .max_median_error
            .filter(|e| !(*e > 0.0 && e.is_finite()))
        {
            return Err(format!(
                "max median error must be a positive fraction, got {e}"
            ));
        }
        Ok(())
    }

    /// `samples` are sample times in seconds; `wall_s` is the wall time spent so far.
    /// Returns None to go on, or the reason to stop.
    pub fn check(&self, samples: &[f64], wall_s: f64) -> Option<StopReason> {
        let n = samples.len();
        if n >= self.max_samples {
            return Some(StopReason::MaxSamples);
        }
        let measured: f64 = samples.iter().sum();
        if n >= self.min_samples && measured >= self.min_time_s {
            let noise = rel_stddev(samples);
            if noise <= self.max_noise {
                return Some(StopReason::Converged);
            }
            if self
                .max_median_error
                .is_some_and(|bound| median_rel_error(noise, n) <= bound)
            {
                return Some(StopReason::MedianKnown);
            }
        }
        // The time cap still honours the minimum sample count, so every result has a spread.
        if wall_s >= self.max_time_s && n >= self.min_samples.min(self.max_samples) {
            return Some(StopReason::MaxTime);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule() -> StopRule {
        StopRule {
            min_samples: 5,
            max_samples: 50,
            min_time_s: 0.01,
            host_link_min_time_s: 0.0,
            max_time_s: 1.0,
            max_noise: 0.02,
            max_median_error: None,
        }
    }

    #[test]
    fn noisy_samples_stop_once_the_median_is_known() {
        // 10% noise never comes under 2%; its median's standard error falls as 1/sqrt(n).
        let noisy = |n: usize| -> Vec<f64> {
            (0..n)
                .map(|i| if i % 2 == 0 { 0.0027 } else { 0.0033 })
                .collect()
        };
        let bounded = StopRule {
            max_median_error: Some(0.045),
            ..rule()
        };
        assert_eq!(rule().check(&noisy(10), 0.1), None);
        // 1.2533 x noise / sqrt(n), the noise about 0.105: over 0.045 at 8 samples, under at 10.
        assert_eq!(bounded.check(&noisy(8), 0.1), None);
        assert_eq!(
            bounded.check(&noisy(10), 0.1),
            Some(StopReason::MedianKnown)
        );
        // The minimums still hold.
        let late = StopRule {
            min_samples: 30,
            max_samples: 100,
            ..bounded
        };
        assert_eq!(late.check(&noisy(20), 0.1), None);
        // A quiet run still stops on its noise.
        assert_eq!(bounded.check(&[0.003; 5], 0.1), Some(StopReason::Converged));
        let bad = StopRule {
            max_median_error: Some(0.0),
            ..rule()
        };
        assert!(bad.validate().unwrap_err().contains("max median error"));
    }

    #[test]
    fn quiet_samples_stop_once_minimums_are_met() {
        let quiet = vec![0.003; 4];
        assert_eq!(rule().check(&quiet, 0.1), None, "below min samples");
        let quiet = vec![0.003; 5];
        assert_eq!(rule().check(&quiet, 0.1), Some(StopReason::Converged));
    }

    #[test]
    fn min_time_holds_even_when_quiet() {
        let tiny = vec![0.000_1; 20]; // 2 ms of samples < 10 ms
        assert_eq!(rule().check(&tiny, 0.1), None);
    }

    #[test]
    fn noisy_samples_run_to_the_time_cap() {
        let noisy: Vec<f64> = (0..10)
            .map(|i| if i % 2 == 0 { 0.002 } else { 0.004 })
            .collect();
        assert_eq!(rule().check(&noisy, 0.5), None);
        assert_eq!(rule().check(&noisy, 1.0), Some(StopReason::MaxTime));
    }

    #[test]
    fn time_cap_waits_for_min_samples() {
        let few = vec![0.5, 0.6];
        assert_eq!(rule().check(&few, 2.0), None);
    }

    #[test]
    fn sample_cap_wins() {
        let noisy: Vec<f64> = (0..50)
            .map(|i| if i % 2 == 0 { 0.002 } else { 0.004 })
            .collect();
        assert_eq!(rule().check(&noisy, 0.1), Some(StopReason::MaxSamples));
    }

    #[test]
    fn noise_exactly_at_threshold_counts_as_converged() {
        // Two values a and b: rel stddev = |a-b| / sqrt(2) / mean.
        let m = 1.0;
        let d = 0.02 * m * 2f64.sqrt() / 2.0;
        let samples = [m - d, m + d, m - d, m + d, m];
        let r = StopRule {
            max_noise: rel_stddev(&samples),
            ..rule()
        };
        assert_eq!(r.check(&samples, 0.0), Some(StopReason::Converged));
    }

    #[test]
    fn a_variant_over_the_host_link_keeps_its_longer_minimum() {
        let r = StopRule {
            min_time_s: 0.1,
            host_link_min_time_s: 0.5,
            ..rule()
        };
        assert_eq!(r.for_traffic(Traffic::DeviceMemory).min_time_s, 0.1);
        assert_eq!(r.for_traffic(Traffic::HostDevice).min_time_s, 0.5);
        // Never below the rule's own minimum.
        let longer = StopRule {
            min_time_s: 1.0,
            ..r
        };
        assert_eq!(longer.for_traffic(Traffic::HostDevice).min_time_s, 1.0);
        // 20 samples of 10 ms, quiet: enough for device memory, not over the host link.
        let quiet = [0.01; 20];
        assert_eq!(
            r.for_traffic(Traffic::DeviceMemory).check(&quiet, 0.2),
            Some(StopReason::Converged)
        );
        assert_eq!(r.for_traffic(Traffic::HostDevice).check(&quiet, 0.2), None);
        let bad = StopRule {
            host_link_min_time_s: -1.0,
            ..rule()
        };
        assert!(bad.validate().unwrap_err().contains("host link"));
    }

    #[test]
    fn validation_names_the_setting() {
        assert!(rule().validate().is_ok());
        assert!(StopRule::sweep().validate().is_ok());
        assert!(StopRule::quick().validate().is_ok());
        let bad = StopRule {
            min_samples: 0,
            ..rule()
        };
        assert!(bad.validate().unwrap_err().contains("min samples"));
        let bad = StopRule {
            max_noise: 0.0,
            ..rule()
        };
        assert!(bad.validate().unwrap_err().contains("max noise"));
        let bad = StopRule {
            max_time_s: f64::NAN,
            ..rule()
        };
        assert!(bad.validate().unwrap_err().contains("max time"));
        let bad = StopRule {
            max_samples: 2,
            ..rule()
        };
        assert!(bad.validate().unwrap_err().contains("max samples"));
    }
}
