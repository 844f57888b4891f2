//! The sizes an answer may take: multiples of a number (8 by default, what tensor cores and
//! most kernels like), or powers of two.

use serde::{Deserialize, Serialize};

/// The granularity of the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Granularity {
    Multiple(usize),
    Pow2,
}

impl Default for Granularity {
    /// Multiples of 8.
    fn default() -> Granularity {
        Granularity::Multiple(8)
    }
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

/// The smallest index at the granularity (1 x multiple, or 2^0).
pub fn first_index(granularity: Granularity) -> usize {
    match granularity {
        Granularity::Multiple(_) => 1,
        Granularity::Pow2 => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const M8: Granularity = Granularity::Multiple(8);

    #[test]
    fn sizes_at_each_granularity() {
        let snap_down = |g, b| size_at(g, index_below(g, b));
        assert_eq!(snap_down(M8, 1003), 1000);
        assert_eq!(snap_down(M8, 7), 0);
        assert_eq!(snap_down(Granularity::Pow2, 1000), 512);
        assert_eq!(snap_down(Granularity::Pow2, 1024), 1024);
        assert_eq!(
            size_at(Granularity::Pow2, index_below(Granularity::Pow2, 5) + 1),
            8
        );
    }
}
