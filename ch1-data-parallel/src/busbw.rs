//! All-reduce bandwidth as nccl-tests reports it. `algbw` is the message size over the time;
//! `busbw = algbw * 2(n-1)/n` is what each link carries in a ring all-reduce, so it can be held
//! against the interconnect's bandwidth whatever the number of ranks. One rank moves nothing
//! between GPUs: its bus bandwidth is undefined, not zero.

/// The ring all-reduce's bus factor 2(n-1)/n; none for one rank (or none).
pub fn bus_factor(ranks: usize) -> Option<f64> {
    (ranks >= 2).then(|| 2.0 * (ranks - 1) as f64 / ranks as f64)
}

/// Bytes per second of the message: `bytes / seconds`.
pub fn algbw(bytes: u64, seconds: f64) -> f64 {
    bytes as f64 / seconds
}

/// The bus bandwidth of an all-reduce of `bytes` over `ranks` that took `seconds`.
pub fn busbw(bytes: u64, seconds: f64, ranks: usize) -> Option<f64> {
    bus_factor(ranks).map(|f| algbw(bytes, seconds) * f)
}

/// Message sizes from `min` to `max` bytes, each `factor` times the last (powers of two or four).
pub fn sizes(min: u64, max: u64, factor: u64) -> Vec<u64> {
    assert!(factor >= 2 && min >= 1);
    std::iter::successors(Some(min), |&s| s.checked_mul(factor))
        .take_while(|&s| s <= max)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nccl_tests_convention() {
        assert_eq!(bus_factor(1), None, "one rank: undefined, not 0");
        assert_eq!(bus_factor(0), None);
        assert_eq!(bus_factor(2), Some(1.0));
        assert_eq!(bus_factor(4), Some(1.5));
        assert_eq!(bus_factor(8), Some(1.75));
        // 1 GiB in 10 ms over 8 ranks: algbw 107.4 GB/s, busbw 1.75 times that.
        let a = algbw(1 << 30, 0.01);
        assert!((a - 107.374_182_4e9).abs() < 1.0);
        assert!((busbw(1 << 30, 0.01, 8).unwrap() / a - 1.75).abs() < 1e-12);
        assert_eq!(busbw(1 << 20, 1e-3, 1), None);
    }

    #[test]
    fn sizes_from_one_mib_to_one_gib() {
        let by4 = sizes(1 << 20, 1 << 30, 4);
        assert_eq!(by4.first(), Some(&(1 << 20)));
        assert_eq!(by4.last(), Some(&(1 << 30)));
        assert_eq!(by4.len(), 6);
        assert_eq!(sizes(1 << 20, 1 << 30, 2).len(), 11);
        assert_eq!(sizes(8, 7, 2), Vec::<u64>::new());
    }
}
