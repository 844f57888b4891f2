//! Roofline arithmetic: what performance an operation of a given arithmetic intensity can
//! reach under a bandwidth slope and a compute ceiling, where the two meet, and which one
//! binds.

use serde::{Deserialize, Serialize};

/// GFLOP/s attainable at `intensity` FLOP/byte: min(peak, bandwidth x intensity).
/// (GB/s x FLOP/B = GFLOP/s.)
pub fn attainable(intensity: f64, peak_gflops: f64, bandwidth_gbps: f64) -> f64 {
    (bandwidth_gbps * intensity).min(peak_gflops)
}

/// Intensity (FLOP/byte) where the bandwidth slope meets the compute ceiling.
pub fn ridge(peak_gflops: f64, bandwidth_gbps: f64) -> f64 {
    peak_gflops / bandwidth_gbps
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Bound {
    Memory,
    Compute,
}

/// Left of the ridge, bytes bind; at or right of it, arithmetic does.
pub fn bound(intensity: f64, peak_gflops: f64, bandwidth_gbps: f64) -> Bound {
    if intensity < ridge(peak_gflops, bandwidth_gbps) {
        Bound::Memory
    } else {
        Bound::Compute
    }
}

/// How far over the roof a point may sit before it counts as a counting error: 3%, or three
/// times the point's own relative noise when that is larger.
pub fn roof_tolerance(rel_noise: f64) -> f64 {
    (3.0 * rel_noise).max(0.03)
}

/// True when `achieved` is above `attainable` by more than the tolerance.
pub fn above_roof(achieved: f64, attainable: f64, rel_noise: f64) -> bool {
    achieved > attainable * (1.0 + roof_tolerance(rel_noise))
}

#[cfg(test)]
mod tests {
    use super::*;

    const BW: f64 = 4000.0; // GB/s
    const PEAK: f64 = 60_000.0; // GFLOP/s

    #[test]
    fn ridge_is_where_the_lines_meet() {
        let r = ridge(PEAK, BW);
        assert_eq!(r, 15.0);
        assert_eq!(attainable(r, PEAK, BW), PEAK);
        assert_eq!(BW * r, PEAK);
    }

    #[test]
    fn attainable_follows_the_slope_then_the_ceiling() {
        assert_eq!(attainable(0.125, PEAK, BW), 500.0);
        assert_eq!(attainable(1.0, PEAK, BW), 4000.0);
        assert_eq!(attainable(1000.0, PEAK, BW), PEAK);
    }

    #[test]
    fn bound_classification_at_and_around_the_ridge() {
        assert_eq!(bound(0.083, PEAK, BW), Bound::Memory);
        assert_eq!(bound(14.99, PEAK, BW), Bound::Memory);
        assert_eq!(bound(15.0, PEAK, BW), Bound::Compute);
        assert_eq!(bound(1365.0, PEAK, BW), Bound::Compute);
    }

    #[test]
    fn points_over_the_roof_beyond_noise_are_errors() {
        assert!(!above_roof(1020.0, 1000.0, 0.001), "2% over is within 3%");
        assert!(above_roof(1040.0, 1000.0, 0.001), "4% over is not");
        assert!(
            !above_roof(1040.0, 1000.0, 0.02),
            "but is within 3x a 2% noise"
        );
        assert_eq!(roof_tolerance(0.0), 0.03);
    }
}
