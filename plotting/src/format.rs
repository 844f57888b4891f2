//! Numbers as plots, tables and messages print them: short tick labels, bytes in binary units
//! and in decimal gigabytes,
//! and the ranges and ticks of log axes. One of each, so every picture and page reads alike.

/// "0.01", "1", "1k", "250k", "1.5M": short labels for a log axis's ticks (three decimals at
/// most, trailing zeros dropped).
pub fn short_number(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        format!("{}M", trimmed(v / 1e6, 3))
    } else if a >= 1e3 {
        format!("{}k", trimmed(v / 1e3, 3))
    } else {
        trimmed(v, 3)
    }
}

/// `v` with at most `decimals` decimals, trailing zeros (and a bare point) dropped.
fn trimmed(v: f64, decimals: usize) -> String {
    let s = format!("{v:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// Bytes in binary units, two decimals at most: "512 B", "32 KiB", "1.5 KiB", "12.03 GiB".
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{} {}", trimmed(value, 2), UNITS[unit])
    }
}

/// Bytes in decimal gigabytes (10^9 bytes, as GPU memory is sold and reported), `decimals`
/// decimals: "12.03 GB". The tuner says memory this way on every line and page.
pub fn gigabytes(bytes: f64, decimals: usize) -> String {
    format!("{} GB", gigabytes_number(bytes, decimals))
}

/// [gigabytes] without the unit, for a column whose header names it: "12.030".
pub fn gigabytes_number(bytes: f64, decimals: usize) -> String {
    format!("{:.decimals$}", bytes / 1e9)
}

/// The smallest and largest positive, finite value; None when there is none.
fn positive_extent(values: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    values
        .filter(|v| *v > 0.0 && v.is_finite())
        .fold(None, |extent, v| match extent {
            None => Some((v, v)),
            Some((lo, hi)) => Some((f64::min(lo, v), f64::max(hi, v))),
        })
}

/// A log axis in whole decades holding every positive, finite value, each end `pad` times
/// further out first (1.0: none); at least one decade wide. None when there is no such value.
pub fn decades(values: impl Iterator<Item = f64>, pad: f64) -> Option<(f64, f64)> {
    let (lo, hi) = positive_extent(values)?;
    let lo = 10f64.powf((lo / pad).log10().floor());
    let hi = 10f64.powf((hi * pad).log10().ceil());
    Some((lo, if hi > lo { hi } else { lo * 10.0 }))
}

/// A log axis holding every positive, finite value, `pad` times further out either way;
/// (0.5, 2) around 1 when there is none.
pub fn log_range(values: impl Iterator<Item = f64>, pad: f64) -> (f64, f64) {
    positive_extent(values).map_or((0.5, 2.0), |(lo, hi)| (lo / pad, hi * pad))
}

/// The largest of 1, 2, 5 x 10^k at or below `v`.
pub fn nice_below(v: f64) -> f64 {
    let decade = 10f64.powf(v.log10().floor());
    [5.0, 2.0, 1.0]
        .iter()
        .map(|m| decade * m)
        .find(|x| *x <= v * (1.0 + 1e-9))
        .unwrap_or(decade)
}

/// The smallest of 1, 2, 5 x 10^k at or above `v`.
pub fn nice_above(v: f64) -> f64 {
    let decade = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| decade * m)
        .find(|x| *x >= v * (1.0 - 1e-9))
        .unwrap_or(decade * 10.0)
}

/// Ticks of a log axis: 1, 2, 5, 10, 20, ... from `lo` to `hi`.
pub fn ticks_125(lo: f64, hi: f64) -> Vec<f64> {
    let mut out = Vec::new();
    let mut decade = 10f64.powf(lo.log10().floor());
    while decade <= hi {
        for m in [1.0, 2.0, 5.0] {
            let v = decade * m;
            if v >= lo * (1.0 - 1e-9) && v <= hi * (1.0 + 1e-9) {
                out.push(v);
            }
        }
        decade *= 10.0;
    }
    out
}

/// Ticks of a log axis at every decade from `lo` to `hi`.
pub fn decade_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let mut out = Vec::new();
    let mut d = lo;
    while d <= hi * (1.0 + 1e-9) {
        out.push(d);
        d *= 10.0;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_numbers() {
        assert_eq!(short_number(0.01), "0.01");
        assert_eq!(short_number(0.0), "0");
        assert_eq!(short_number(1.0), "1");
        assert_eq!(short_number(16.0), "16");
        assert_eq!(short_number(100.0), "100");
        assert_eq!(short_number(1000.0), "1k");
        assert_eq!(short_number(1500.0), "1.5k");
        assert_eq!(short_number(8192.0), "8.192k");
        assert_eq!(short_number(250_000.0), "250k");
        assert_eq!(short_number(1e6), "1M");
        assert_eq!(short_number(-2e6), "-2M");
    }

    #[test]
    fn bytes_in_binary_units() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(32 << 10), "32 KiB");
        assert_eq!(human_bytes(64 << 20), "64 MiB");
        assert_eq!(human_bytes(3 << 30), "3 GiB");
        assert_eq!(human_bytes(12_918_456_320), "12.03 GiB");
        assert_eq!(human_bytes(1 << 50), "1024 TiB");
    }

    #[test]
    fn bytes_in_decimal_gigabytes() {
        assert_eq!(gigabytes(12_918_456_320.0, 2), "12.92 GB");
        assert_eq!(gigabytes(47_000_000.0, 3), "0.047 GB");
        assert_eq!(gigabytes_number(1.28e9, 3), "1.280");
        assert_eq!(gigabytes(0.0, 1), "0.0 GB");
    }

    #[test]
    fn log_axes_hold_every_value() {
        assert_eq!(decades([0.3, 45.0].into_iter(), 1.0), Some((0.1, 100.0)));
        assert_eq!(decades([0.3, 45.0].into_iter(), 2.0), Some((0.1, 100.0)));
        assert_eq!(decades([0.04, 60.0].into_iter(), 2.0), Some((0.01, 1000.0)));
        assert_eq!(decades([10.0].into_iter(), 1.0), Some((10.0, 100.0)));
        assert_eq!(
            decades([3.0, 4500.0].into_iter(), 1.0),
            Some((1.0, 10000.0))
        );
        assert_eq!(decades(std::iter::empty(), 1.0), None);
        assert_eq!(decades([0.0, f64::NAN].into_iter(), 2.0), None);
        assert_eq!(log_range([2.0, 8.0].into_iter(), 2.0), (1.0, 16.0));
        assert_eq!(log_range([f64::INFINITY, 0.0].into_iter(), 2.0), (0.5, 2.0));
        assert_eq!(decade_ticks(0.1, 100.0).len(), 4);
    }

    #[test]
    fn ticks_and_nice_bounds() {
        assert_eq!(ticks_125(1.0, 60.0), vec![1.0, 2.0, 5.0, 10.0, 20.0, 50.0]);
        assert_eq!(nice_above(37.0), 50.0);
        assert_eq!(nice_above(2.0), 2.0);
        assert_eq!(nice_above(6.0), 10.0);
        assert_eq!(nice_below(0.98), 0.5);
        assert_eq!(nice_below(0.3), 0.2);
        assert_eq!(nice_below(0.1), 0.1);
    }
}
