//! The page's charts: the speedup bars with their uncertainty as inline SVG, and a roofline per
//! GPU, drawn by the one roofline drawing of `plotting`, with each pair an arrow from its
//! baseline to its optimized side. Elements the page's self-check counts carry a class: `bar`,
//! and `roofline-chart` with its number of pair points.

use maud::{html, Markup, PreEscaped};
use plotting::format::{nice_above, nice_below, short_number, ticks_125};
use plotting::roofline::{svg_string, Move, Operations, Roofline};
use plotting::COLORS;

use super::folder::{MeasuredRoofline, Placed};

/// One bar: a pair's speedup on one GPU (index into the page's GPUs) and its standard
/// uncertainty.
pub struct Bar {
    pub pair: String,
    pub gpu: usize,
    pub speedup: f64,
    pub uncertainty: f64,
}

/// Colour of GPU or pair number `i`, as CSS.
pub fn color(i: usize) -> String {
    let c = COLORS[i % COLORS.len()];
    format!("rgb({},{},{})", c.0, c.1, c.2)
}

/// A log axis mapping values in [lo, hi] to pixels [from, to].
struct LogAxis {
    lo: f64,
    hi: f64,
    from: f64,
    to: f64,
}

impl LogAxis {
    fn at(&self, v: f64) -> f64 {
        let f = (v.max(self.lo * 1e-3).ln() - self.lo.ln()) / (self.hi.ln() - self.lo.ln());
        self.from + f * (self.to - self.from)
    }
}

/// Horizontal bars on a log axis from 1x, grouped by pair, one per GPU, each with whiskers
/// at 95% (1.96 standard uncertainties). Returns the SVG and the number of bars.
pub fn speedup_bars(pairs: &[String], gpus: &[String], bars: &[Bar]) -> (Markup, usize) {
    const LABELS: f64 = 270.0;
    const WIDTH: f64 = 900.0;
    const ROW: f64 = 18.0;
    const GAP: f64 = 12.0;
    const TOP: f64 = 40.0;
    let z = 1.96;
    let lo_value = bars
        .iter()
        .map(|b| (b.speedup - z * b.uncertainty).min(b.speedup))
        .fold(1.0f64, f64::min)
        .max(1e-3);
    let hi_value = bars
        .iter()
        .map(|b| b.speedup + z * b.uncertainty)
        .fold(2.0f64, f64::max);
    let lo = if lo_value >= 1.0 {
        1.0
    } else {
        nice_below(lo_value)
    };
    let axis = LogAxis {
        lo,
        hi: nice_above(hi_value * 1.25),
        from: LABELS,
        to: WIDTH - 20.0,
    };
    let rows: Vec<(&String, Vec<&Bar>)> = pairs
        .iter()
        .map(|p| (p, bars.iter().filter(|b| &b.pair == p).collect::<Vec<_>>()))
        .filter(|(_, b)| !b.is_empty())
        .collect();
    let body: f64 = rows.iter().map(|(_, b)| b.len() as f64 * ROW + GAP).sum();
    let height = TOP + body + 30.0;
    let bottom = TOP + body;
    // Legend swatches, one per GPU, each as wide as its name.
    let mut legend = Vec::new();
    let mut x = LABELS;
    for g in gpus {
        legend.push(x);
        x += 24.0 + 7.5 * g.len() as f64;
    }
    // Each row's top edge, pairs apart by a gap.
    let mut row_tops = Vec::new();
    let mut y = TOP;
    for (_, group) in &rows {
        row_tops.push(y);
        y += group.len() as f64 * ROW + GAP;
    }
    let px = |v: f64| format!("{v:.1}");
    let one = axis.at(1.0);
    let svg = html! {
        svg class="chart speedups" viewBox={ "0 0 " (WIDTH) " " (height) } width=(WIDTH) height=(height)
            role="img" aria-label="speedup of each pair, per GPU" {
            @for (i, (g, x)) in gpus.iter().zip(&legend).enumerate() {
                rect x=(x) y="8" width="12" height="12" fill=(color(i)) {}
                text x=(x + 16.0) y="18" class="legend" { (g) }
            }
            @for t in ticks_125(axis.lo, axis.hi) {
                line x1=(px(axis.at(t))) y1=(TOP - 6.0) x2=(px(axis.at(t))) y2=(bottom)
                    class={ "grid" @if t == 1.0 { " one" } } {}
                text x=(px(axis.at(t))) y=(bottom + 16.0) class="tick" text-anchor="middle" {
                    (short_number(t)) "x"
                }
            }
            @for ((pair, group), top) in rows.iter().zip(&row_tops) {
                text x=(LABELS - 8.0) y=(px(top + group.len() as f64 * ROW / 2.0 + 4.0))
                    class="label" text-anchor="end" { (pair) }
                @for (k, b) in group.iter().enumerate() {
                    @let y = top + k as f64 * ROW;
                    @let cy = y + ROW / 2.0;
                    @let end = axis.at(b.speedup);
                    @let (wl, wr) = (
                        axis.at((b.speedup - z * b.uncertainty).max(axis.lo)),
                        axis.at(b.speedup + z * b.uncertainty),
                    );
                    rect class="bar" x=(px(one.min(end))) y=(px(y + 2.0))
                        width=(px((end - one).abs().max(2.0))) height=(px(ROW - 4.0)) fill=(color(b.gpu)) {
                        title {
                            (pair) " on the " (gpus[b.gpu]) ": "
                            (format!("{:.3}x ± {:.3}", b.speedup, b.uncertainty))
                            " (standard uncertainty)"
                        }
                    }
                    path class="whisker" d=(format!(
                        "M{wl:.1},{cy:.1}H{wr:.1}M{wl:.1},{:.1}V{:.1}M{wr:.1},{:.1}V{:.1}",
                        cy - 4.0, cy + 4.0, cy - 4.0, cy + 4.0
                    )) {}
                    text x=(px(wr.max(one.max(end)) + 6.0)) y=(px(cy + 4.0)) class="value" {
                        (format!("{:.2}x", b.speedup))
                    }
                }
            }
        }
    };
    (svg, rows.iter().map(|(_, g)| g.len()).sum())
}

/// The size the page's rooflines are drawn at; the page scales them to its columns.
pub const ROOFLINE_SIZE: (u32, u32) = (1000, 680);

/// The roofline of one GPU: the memory slope and compute roofs from its measured ceilings,
/// the roofline lesson's own operations in grey for scale, and each placed pair as an arrow
/// from its baseline (ring) to its optimized side (dot), numbered. Returns the chart and the
/// number of pair points on it.
pub fn roofline(
    r: &MeasuredRoofline,
    pairs: &[(usize, &Placed)],
) -> Result<(Markup, usize), String> {
    let picture = Roofline {
        title: String::new(),
        roofs: &r.roofs,
        operations: r.operations.clone(),
        style: Operations::Grey,
        moves: pairs
            .iter()
            .map(|(number, p)| Move {
                number: *number,
                baseline: (p.baseline.intensity, p.baseline.gflops),
                optimized: (p.optimized.intensity, p.optimized.gflops),
            })
            .collect(),
    };
    // Inline in HTML an SVG needs no namespace; without it the page names no address at all.
    let svg = svg_string(&picture, ROOFLINE_SIZE)?.replacen(
        r#" xmlns="http://www.w3.org/2000/svg""#,
        "",
        1,
    );
    let points = 2 * pairs.len();
    let chart = html! {
        div class="roofline-chart" data-points=(points) role="img" aria-label={ "roofline of the " (r.gpu) } {
            (PreEscaped(svg))
        }
    };
    Ok((chart, points))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_start_at_one_and_count() {
        let bars = [
            Bar {
                pair: "a/x".into(),
                gpu: 0,
                speedup: 3.0,
                uncertainty: 0.01,
            },
            Bar {
                pair: "a/x".into(),
                gpu: 1,
                speedup: 0.8,
                uncertainty: 0.05,
            },
            Bar {
                pair: "b/y".into(),
                gpu: 0,
                speedup: 40.0,
                uncertainty: 2.0,
            },
        ];
        let gpus = ["GPU <one>".to_string(), "two".to_string()];
        let (svg, n) = speedup_bars(&["a/x".into(), "b/y".into(), "c/z".into()], &gpus, &bars);
        let svg = svg.into_string();
        assert_eq!(n, 3);
        assert_eq!(svg.matches(r#"class="bar""#).count(), 3);
        assert!(svg.contains("GPU &lt;one&gt;"), "names are escaped");
        // 0.8 - 1.96 x 0.05 = 0.70: the axis starts at 0.5x; 40 + 3.9 (x 1.25) ends at 100x.
        assert!(svg.contains(">0.5x<") && svg.contains(">100x<"), "{svg}");
        assert!(!svg.contains(">0.2x<"), "{svg}");
        assert!(!svg.contains("c/z"), "a pair without bars has no row");
    }
}
