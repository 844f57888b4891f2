//! The sweep's tables, kept apart from the GPU: points of (size, count) with the loop's and the
//! strided call's timings (built from the runner's variant reports), the speedup, where
//! batching stops mattering, and the grids as report sections.

use serde::{Deserialize, Serialize};

use common::report::Section;
use common::table::{three_figures, Table, EMPTY};

/// Batching "stops mattering" where the strided call is less than this much faster.
pub const MATTERS_ABOVE: f64 = 1.1;

/// One side of a point: how long one run (all `count` products) took, and whether it verified.
/// The samples and checks themselves are in the side's variant report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Timing {
    /// Median milliseconds per run of all the point's products (infinite, null in JSON, when
    /// the side failed and was not timed).
    #[serde(with = "common::stats::infinite_as_null")]
    pub median_ms: f64,
    #[serde(with = "common::stats::infinite_as_null")]
    pub rel_stddev: f64,
    /// Whether the launches were held behind the blocking kernel (see `can_hold`).
    pub held: bool,
    /// Worst relative L2 error of the products checked against the float64 reference.
    #[serde(with = "common::stats::infinite_as_null")]
    pub rel_l2_error: f64,
    pub passed: bool,
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

/// One size-by-count table whose cells `cell` fills; "-" where a point is missing or skipped,
/// "FAILED" where a side did not verify.
fn grid(points: &[Point], cell: impl Fn(&Point) -> Option<String>) -> Table {
    let (sizes, counts) = sorted_axes(points);
    let mut table = Table::new().left("size \\ count");
    for c in &counts {
        table = table.right(c.to_string());
    }
    for s in &sizes {
        let mut row = vec![s.to_string()];
        for c in &counts {
            row.push(
                match points.iter().find(|p| p.size == *s && p.count == *c) {
                    Some(p) if p.failed() => "FAILED".to_string(),
                    Some(p) => cell(p).unwrap_or_else(|| EMPTY.into()),
                    None => EMPTY.into(),
                },
            );
        }
        table.row(row);
    }
    table
}

/// Titles of the sweep's sections, in the order they are printed.
pub const SPEEDUP_TITLE: &str = "speedup of one strided-batched call over one call per product";
pub const LOOP_TITLE: &str = "one call per product: time per product (us)";
pub const STRIDED_TITLE: &str = "one strided-batched call: time per product (us)";

/// The three grids (speedup, loop and strided time per product) as sections; the speedup's
/// carries the summary per size, the crossover and the skipped points, and keeps the points and
/// the crossover in its data.
pub fn sections(points: &[Point], crossover: &Crossover) -> Vec<Section> {
    let mut speedup = Section::new(SPEEDUP_TITLE);
    speedup.table = Some(grid(points, |p| {
        p.speedup().map(|s| format!("{}x", three_figures(s)))
    }));
    for s in &crossover.per_size {
        speedup.lines.push(format!(
            "size {}: strided is {}x..{}x faster (best at {} products)",
            s.size,
            three_figures(s.min_speedup),
            three_figures(s.max_speedup),
            s.best_count
        ));
    }
    speedup.lines.push(match crossover.size {
        Some(size) => format!(
            "batching stops mattering from size {size}: under {}x at every count from there on",
            crossover.threshold
        ),
        None => format!(
            "batching still gains at least {}x somewhere at the largest size measured",
            crossover.threshold
        ),
    });
    let skipped: Vec<String> = points
        .iter()
        .filter_map(|p| {
            p.skipped
                .as_ref()
                .map(|why| format!("{}x{}: {why}", p.size, p.count))
        })
        .collect();
    if !skipped.is_empty() {
        speedup.lines.push(format!(
            "skipped {} point(s): {}",
            skipped.len(),
            skipped.join("; ")
        ));
    }
    speedup.data = serde_json::json!({ "crossover": crossover, "points": points });

    let mut one_by_one = Section::new(LOOP_TITLE);
    one_by_one.table = Some(grid(points, |p| {
        let t = p.one_by_one.as_ref()?;
        Some(format!(
            "{}{}",
            three_figures(t.per_product_us(p.count)),
            if t.held { "" } else { "*" }
        ))
    }));
    if points
        .iter()
        .any(|p| p.one_by_one.as_ref().is_some_and(|t| !t.held))
    {
        one_by_one.lines.push("* launched without the blocking kernel (too many calls to queue): includes the host's launch cost".into());
    }

    let mut strided = Section::new(STRIDED_TITLE);
    strided.table = Some(grid(points, |p| {
        let t = p.strided.as_ref()?;
        Some(three_figures(t.per_product_us(p.count)))
    }));
    vec![speedup, one_by_one, strided]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing(ms: f64) -> Timing {
        Timing {
            median_ms: ms,
            rel_stddev: 0.01,
            held: true,
            rel_l2_error: 1e-7,
            passed: true,
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
        let c = crossover(&points, 1.1);
        let sections = sections(&points, &c);
        let md: String = sections.iter().map(Section::markdown).collect();
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
        // The crossover and the points are kept in the JSON too.
        let data = &sections[0].data;
        assert_eq!(
            serde_json::from_value::<Crossover>(data["crossover"].clone()).unwrap(),
            c
        );
        assert_eq!(
            serde_json::from_value::<Vec<Point>>(data["points"].clone()).unwrap(),
            points
        );
    }
}
