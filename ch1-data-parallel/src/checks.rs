//! How the pair is checked: the tolerances and where they come from. The reference is the
//! ranks' arithmetic on one GPU ([crate::train]); the first step's all-reduced gradient is
//! checked tightly, the end of a run within its own spread.

use serde::Serialize;

/// The first step's all-reduced gradient against the reference's. Only the order in which
/// the n shares of each element are added can differ, which moves an element by at most n - 1
/// roundings (2^-24 each) of the sum of the shares' magnitudes: under 1e-6 of the gradient for
/// up to 8 ranks unless the shares cancel a hundredfold. A rank's gradient missing or counted
/// twice moves it by about 1/n.
pub const FIRST_GRADIENT_TOLERANCE: f64 = 1e-5;
/// The end of a run is judged within this many times the reference's own spread (its shares
/// added in another order), and never tighter than the floors below.
pub const SPREAD_FACTOR: f64 = 4.0;
/// The fp32 floor of the weight change's tolerance (relative L2).
pub const WEIGHT_CHANGE_FLOOR: f64 = 5e-4;
/// The fp32 floor of the loss curve's tolerance (per-step mean losses, ~2.3 falling).
pub const LOSS_CURVE_FLOOR: f64 = 2e-5;
/// Ranks end with the same weights: they apply the same reduced gradient to the same weights.
pub const RANKS_AGREE_TOLERANCE: f64 = 1e-6;

/// How far one run's end is from another's (relative L2).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Distance {
    pub weight_change: f64,
    pub loss_curve: f64,
}

/// The tolerances of the end of a run: the floors, or `SPREAD_FACTOR` times the reference's
/// own spread where that is larger.
pub fn end_tolerances(spread: Option<Distance>) -> Distance {
    let s = spread.unwrap_or(Distance {
        weight_change: 0.0,
        loss_curve: 0.0,
    });
    Distance {
        weight_change: WEIGHT_CHANGE_FLOOR.max(SPREAD_FACTOR * s.weight_change),
        loss_curve: LOSS_CURVE_FLOOR.max(SPREAD_FACTOR * s.loss_curve),
    }
}

/// Rank order rotated by one (`[1, 2, ..., n-1, 0]`): the order a ring all-reduce adds
/// another chunk's shares in.
pub fn rotated(n: usize) -> Vec<usize> {
    (1..n).chain(std::iter::once(0)).collect()
}
