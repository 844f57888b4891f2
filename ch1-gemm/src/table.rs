//! The sweep's table, kept apart from the GPU: points of (size, count) with the loop's and the
//! strided call's timings, the speedup, where batching stops mattering, and the markdown.

use serde::{Deserialize, Serialize};

/// Batching "stops mattering" where the strided call is less than this much faster.
pub const MATTERS_ABOVE: f64 = 1.1;

/// One side of a point: how long one run (all `count` products) took, and whether it verified.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Timing {
    /// Median milliseconds per run of all the point's products (infinite, null in JSON, when
    /// the side failed and was not timed).
    #[serde(with = "common::verify::infinite_as_null")]
    pub median_ms: f64,
    #[serde(with = "common::verify::infinite_as_null")]
    pub rel_stddev: f64,
    pub samples: usize,
    /// Whether the launches were held behind the blocking kernel (see `can_hold`).
    pub held: bool,
    /// Worst relative L2 error of the products checked against the float64 reference.
    #[serde(with = "common::verify::infinite_as_null")]
    pub rel_l2_error: f64,
    pub passed: bool,
    /// Every sample, milliseconds per run.
    pub samples_ms: Vec<f64>,
    /// Held samples whose blocking kernel gave up waiting (0 when all went as planned).
    pub hold_timeouts: usize,
}

impl Timing {
    /// Microseconds per product.
    pub fn per_product_us(&self, count: usize) -> f64 {
        self.median_ms * 1e3 / count as f64
    }
}

/// One cell of the sweep: `count` square products of `size`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Point {
    pub size: usize,
    pub count: usize,
    /// One cublasSgemm per product.
    pub one_by_one: Option<Timing>,
    /// One cublasSgemmStridedBatched call.
    pub strided: Option<Timing>,
    /// Why the point was not measured (time cap, memory).
    pub skipped: Option<String>,
}

impl Point {
    pub fn skipped(size: usize, count: usize, why: impl Into<String>) -> Point {
        Point {
            size,
            count,
            one_by_one: None,
            strided: None,
            skipped: Some(why.into()),
        }
    }

    /// Loop time over strided time, when both were measured and verified.
    pub fn speedup(&self) -> Option<f64> {
        match (&self.one_by_one, &self.strided) {
            (Some(l), Some(s)) if l.passed && s.passed && s.median_ms > 0.0 => {
                Some(l.median_ms / s.median_ms)
            }
            _ => None,
        }
    }

    pub fn failed(&self) -> bool {
        [&self.one_by_one, &self.strided]
            .iter()
            .any(|t| t.as_ref().is_some_and(|t| !t.passed))
    }
}

/// The speedups at one size, over the counts that were measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SizeSummary {
    pub size: usize,
    pub min_speedup: f64,
    pub max_speedup: f64,
    /// The count at which the speedup was largest.
    pub best_count: usize,
}

/// Where batching stops mattering: from `size` on, every measured count gains less than
/// `threshold` from one strided call. None when it matters at the largest size measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Crossover {
    pub threshold: f64,
    pub size: Option<usize>,
    pub per_size: Vec<SizeSummary>,
}

/// Summarize each size (ascending) and find the crossover.
pub fn crossover(points: &[Point], threshold: f64) -> Crossover {
    let mut sizes: Vec<usize> = points.iter().map(|p| p.size).collect();
    sizes.sort_unstable();
    sizes.dedup();
    let per_size: Vec<SizeSummary> = sizes
        .iter()
        .filter_map(|&size| {
            let measured: Vec<(usize, f64)> = points
                .iter()
                .filter(|p| p.size == size)
                .filter_map(|p| p.speedup().map(|s| (p.count, s)))
                .collect();
            let (best_count, max_speedup) = measured
                .iter()
                .copied()
                .max_by(|a, b| a.1.total_cmp(&b.1))?;
            let min_speedup = measured.iter().map(|m| m.1).fold(f64::INFINITY, f64::min);
            Some(SizeSummary {
                size,
                min_speedup,
                max_speedup,
                best_count,
            })
        })
        .collect();
    // The smallest size from which on no measured size gains `threshold` or more.
    let size = per_size
        .iter()
        .rposition(|s| s.max_speedup >= threshold)
        .map_or(0, |i| i + 1);
    Crossover {
        threshold,
        size: per_size.get(size).map(|s| s.size),
        per_size,
    }
}

fn sorted_axes(points: &[Point]) -> (Vec<usize>, Vec<usize>) {
    let axis = |f: fn(&Point) -> usize| {
        let mut v: Vec<usize> = points.iter().map(f).collect();
        v.sort_unstable();
        v.dedup();
        v
    };
    (axis(|p| p.size), axis(|p| p.count))
}

/// A value with three significant figures: 1234, 12.3, 0.123.
pub fn three_figures(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else if v >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// One size-by-count table whose cells `cell` fills; "-" where a point is missing or skipped,
/// "FAILED" where a side did not verify.
fn grid(points: &[Point], corner: &str, cell: impl Fn(&Point) -> Option<String>) -> String {
    let (sizes, counts) = sorted_axes(points);
    let mut out = format!("| {corner} |");
    for c in &counts {
        out.push_str(&format!(" {c} |"));
    }
    out.push_str("\n|---|");
    out.push_str(&"---:|".repeat(counts.len()));
    out.push('\n');
    for s in &sizes {
        out.push_str(&format!("| {s} |"));
        for c in &counts {
            let text = match points.iter().find(|p| p.size == *s && p.count == *c) {
                Some(p) if p.failed() => "FAILED".to_string(),
                Some(p) => cell(p).unwrap_or_else(|| "-".into()),
                None => "-".into(),
            };
            out.push_str(&format!(" {text} |"));
        }
        out.push('\n');
    }
    out
}

/// The three tables (speedup, loop and strided time per product), the crossover, the skips.
pub fn markdown(points: &[Point], crossover: &Crossover) -> String {
    let mut out = String::new();
    out.push_str("### speedup of one strided-batched call over one call per product\n\n");
    out.push_str(&grid(points, "size \\ count", |p| {
        p.speedup().map(|s| format!("{}x", three_figures(s)))
    }));
    out.push_str("\n### one call per product: time per product (us)\n\n");
    out.push_str(&grid(points, "size \\ count", |p| {
        let t = p.one_by_one.as_ref()?;
        Some(format!(
            "{}{}",
            three_figures(t.per_product_us(p.count)),
            if t.held { "" } else { "*" }
        ))
    }));
    out.push_str("\n### one strided-batched call: time per product (us)\n\n");
    out.push_str(&grid(points, "size \\ count", |p| {
        let t = p.strided.as_ref()?;
        Some(three_figures(t.per_product_us(p.count)))
    }));
    out.push('\n');
    if points
        .iter()
        .any(|p| p.one_by_one.as_ref().is_some_and(|t| !t.held))
    {
        out.push_str("* launched without the blocking kernel (too many calls to queue): includes the host's launch cost\n");
    }
    for s in &crossover.per_size {
        out.push_str(&format!(
            "size {}: strided is {}x..{}x faster (best at {} products)\n",
            s.size,
            three_figures(s.min_speedup),
            three_figures(s.max_speedup),
            s.best_count
        ));
    }
    match crossover.size {
        Some(size) => out.push_str(&format!(
            "batching stops mattering from size {size}: under {}x at every count from there on\n",
            crossover.threshold
        )),
        None => out.push_str(&format!(
            "batching still gains at least {}x somewhere at the largest size measured\n",
            crossover.threshold
        )),
    }
    let skipped: Vec<String> = points
        .iter()
        .filter_map(|p| {
            p.skipped
                .as_ref()
                .map(|why| format!("{}x{}: {why}", p.size, p.count))
        })
        .collect();
    if !skipped.is_empty() {
        out.push_str(&format!(
            "skipped {} point(s): {}\n",
            skipped.len(),
            skipped.join("; ")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing(ms: f64) -> Timing {
        Timing {
            median_ms: ms,
            rel_stddev: 0.01,
            samples: 10,
            held: true,
            rel_l2_error: 1e-7,
            passed: true,
            samples_ms: vec![ms; 10],
            hold_timeouts: 0,
        }
    }

    fn point(size: usize, count: usize, one_by_one_ms: f64, strided_ms: f64) -> Point {
        Point {
            size,
            count,
            one_by_one: Some(timing(one_by_one_ms)),
            strided: Some(timing(strided_ms)),
            skipped: None,
        }
    }

    #[test]
    fn speedup_needs_both_sides_verified() {
        assert_eq!(point(16, 8, 0.04, 0.004).speedup(), Some(10.0));
        let mut p = point(16, 8, 0.04, 0.004);
        p.strided.as_mut().unwrap().passed = false;
        assert_eq!(p.speedup(), None);
        assert!(p.failed());
        assert_eq!(Point::skipped(16, 8, "time cap").speedup(), None);
    }

    #[test]
    fn per_product_time() {
        assert!((timing(0.08).per_product_us(40) - 2.0).abs() < 1e-12);
    }

    #[test]
    fn crossover_is_where_every_larger_size_stops_gaining() {
        let points = vec![
            point(16, 8, 0.02, 0.002),
            point(16, 64, 0.16, 0.003),
            point(256, 8, 0.05, 0.02),
            point(256, 64, 0.4, 0.12),
            point(512, 8, 0.10, 0.095), // 1.05x
            point(512, 64, 0.8, 0.75),  // 1.07x
            point(1024, 8, 0.4, 0.39),
            point(1024, 64, 3.2, 3.1),
        ];
        let c = crossover(&points, 1.1);
        assert_eq!(c.size, Some(512));
        assert_eq!(c.per_size.len(), 4);
        let s16 = &c.per_size[0];
        assert_eq!((s16.size, s16.best_count), (16, 64));
        assert!((s16.max_speedup - 160.0 / 3.0).abs() < 1e-9);
        assert!((s16.min_speedup - 10.0).abs() < 1e-9);
    }

    #[test]
    fn a_gain_at_a_larger_size_moves_the_crossover_up() {
        // 512 stops gaining but 1024 gains again at one count: the crossover is past 1024.
        let points = vec![
            point(256, 8, 0.05, 0.02),
            point(512, 8, 0.10, 0.099),
            point(1024, 8, 0.4, 0.39),
            point(1024, 64, 3.2, 2.0),
        ];
        assert_eq!(crossover(&points, 1.1).size, None);
        // Nothing gains anywhere: batching never mattered, from the smallest size.
        let flat = vec![point(16, 8, 1.0, 1.0), point(32, 8, 1.0, 0.99)];
        assert_eq!(crossover(&flat, 1.1).size, Some(16));
        assert_eq!(crossover(&[], 1.1).size, None);
    }

    #[test]
    fn skipped_and_failed_points_are_left_out_of_the_summary() {
        let mut failed = point(16, 64, 0.16, 0.0001);
        failed.strided.as_mut().unwrap().passed = false;
        let points = vec![
            point(16, 8, 0.02, 0.002),
            failed,
            Point::skipped(16, 1024, "time cap"),
        ];
        let c = crossover(&points, 1.1);
        assert_eq!(c.per_size[0].max_speedup, 10.0);
        assert_eq!(c.per_size[0].best_count, 8);
    }

    #[test]
    fn markdown_lays_out_sizes_by_counts() {
        let mut unheld = point(32, 1024, 4.0, 0.5);
        unheld.one_by_one.as_mut().unwrap().held = false;
        let mut failed = point(32, 8, 0.04, 0.004);
        failed.one_by_one.as_mut().unwrap().passed = false;
        let points = vec![
            point(16, 8, 0.04, 0.004),
            Point::skipped(16, 1024, "time cap"),
            failed,
            unheld,
        ];
        let md = markdown(&points, &crossover(&points, 1.1));
        assert!(
            md.contains("| size \\ count | 8 | 1024 |\n|---|---:|---:|\n"),
            "{md}"
        );
        assert!(md.contains("| 16 | 10.0x | - |"), "{md}");
        assert!(md.contains("| 32 | FAILED | 8.00x |"), "{md}");
        // 4 ms over 1024 products = 3.91 us, not held.
        assert!(md.contains("| 32 | FAILED | 3.91* |"), "{md}");
        assert!(md.contains("| 16 | 5.00 | - |"), "{md}");
        assert!(
            md.contains("* launched without the blocking kernel"),
            "{md}"
        );
        assert!(md.contains("skipped 1 point(s): 16x1024: time cap"), "{md}");
        assert!(md.contains("batching still gains"), "{md}");
    }

    #[test]
    fn three_significant_figures() {
        assert_eq!(three_figures(1234.4), "1234");
        assert_eq!(three_figures(12.345), "12.3");
        assert_eq!(three_figures(1.2345), "1.23");
        assert_eq!(three_figures(0.12345), "0.123");
    }
}
