//! The margin of a GPU's memory an answer leaves free: by the card's memory class, twice that
//! for the safe tier, and whether a peak leaves it.

/// Safety margin by the GPU's memory size class: small cards often also drive a display and
/// lose more to other processes and fragmentation; on large ones a few percent is plenty.
pub fn margin_for(total_bytes: u64) -> f64 {
    // Whole GiB.
    match total_bytes >> 30 {
        0..16 => 0.20,
        16..48 => 0.10,
        _ => 0.05,
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
