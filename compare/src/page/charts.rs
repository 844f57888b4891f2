//! The page's charts as inline SVG: the speedup bars with their uncertainty, and a roofline
//! per GPU with each pair drawn from its baseline to its optimized side. Elements the
//! page's self-check counts carry a class: `bar`, `pair-point`.

use ch1_roofline::report::RooflineReport;
use plotting::format::{decade_ticks, decades, nice_above, nice_below, short_number, ticks_125};
use plotting::COLORS;

use super::html::escape;
use super::Placed;

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
pub fn speedup_bars(pairs: &[String], gpus: &[String], bars: &[Bar]) -> (String, usize) {
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
    let mut s = format!(
        r#"<svg class="chart speedups" viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" height="{height}" role="img" aria-label="speedup of each pair, per GPU">"#
    );
    // Legend: one swatch per GPU.
    let mut x = LABELS;
    for (i, g) in gpus.iter().enumerate() {
        s.push_str(&format!(
            r#"<rect x="{x}" y="8" width="12" height="12" fill="{}"/><text x="{}" y="18" class="legend">{}</text>"#,
            color(i),
            x + 16.0,
            escape(g)
        ));
        x += 24.0 + 7.5 * g.len() as f64;
    }
    let bottom = TOP + body;
    for t in ticks_125(axis.lo, axis.hi) {
        let tx = axis.at(t);
        s.push_str(&format!(
            r#"<line x1="{tx:.1}" y1="{}" x2="{tx:.1}" y2="{bottom}" class="grid{}"/><text x="{tx:.1}" y="{}" class="tick" text-anchor="middle">{}x</text>"#,
            TOP - 6.0,
            if t == 1.0 { " one" } else { "" },
            bottom + 16.0,
            short_number(t)
        ));
    }
    let mut y = TOP;
    let mut count = 0;
    for (pair, group) in &rows {
        let h = group.len() as f64 * ROW;
        s.push_str(&format!(
            r#"<text x="{}" y="{:.1}" class="label" text-anchor="end">{}</text>"#,
            LABELS - 8.0,
            y + h / 2.0 + 4.0,
            escape(pair)
        ));
        for b in group {
            let (x1, x2) = (axis.at(1.0), axis.at(b.speedup));
            let (left, width) = (x1.min(x2), (x2 - x1).abs().max(2.0));
            let cy = y + ROW / 2.0;
            let (wl, wr) = (
                axis.at((b.speedup - z * b.uncertainty).max(axis.lo)),
                axis.at(b.speedup + z * b.uncertainty),
            );
            s.push_str(&format!(
                r#"<rect class="bar" x="{left:.1}" y="{:.1}" width="{width:.1}" height="{:.1}" fill="{}"><title>{} on the {}: {:.3}x ± {:.3} (standard uncertainty)</title></rect>"#,
                y + 2.0,
                ROW - 4.0,
                color(b.gpu),
                escape(pair),
                escape(&gpus[b.gpu]),
                b.speedup,
                b.uncertainty
            ));
            s.push_str(&format!(
                r#"<path class="whisker" d="M{wl:.1},{cy:.1}H{wr:.1}M{wl:.1},{:.1}V{:.1}M{wr:.1},{:.1}V{:.1}"/>"#,
                cy - 4.0,
                cy + 4.0,
                cy - 4.0,
                cy + 4.0
            ));
            s.push_str(&format!(
                r#"<text x="{:.1}" y="{:.1}" class="value">{:.2}x</text>"#,
                wr.max(x1.max(x2)) + 6.0,
                cy + 4.0,
                b.speedup
            ));
            y += ROW;
            count += 1;
        }
        y += GAP;
    }
    s.push_str("</svg>");
    (s, count)
}

/// A line from `from` to `to` ending in an arrowhead that stops short of the dot at `to`.
fn arrow(from: (f64, f64), to: (f64, f64), color: &str) -> String {
    let (dx, dy) = (to.0 - from.0, to.1 - from.1);
    let len = (dx * dx + dy * dy).sqrt();
    let mut s = format!(
        r#"<line class="pair-arrow" x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{color}"/>"#,
        from.0, from.1, to.0, to.1
    );
    if len > 16.0 {
        let (ux, uy) = (dx / len, dy / len);
        let tip = (to.0 - 6.0 * ux, to.1 - 6.0 * uy);
        let base = (tip.0 - 9.0 * ux, tip.1 - 9.0 * uy);
        s.push_str(&format!(
            r#"<path class="arrowhead" d="M{:.1},{:.1}L{:.1},{:.1}L{:.1},{:.1}z" fill="{color}"/>"#,
            tip.0,
            tip.1,
            base.0 - 4.0 * uy,
            base.1 + 4.0 * ux,
            base.0 + 4.0 * uy,
            base.1 - 4.0 * ux
        ));
    }
    s
}

/// The roofline of one GPU: the memory slope and compute roofs from its measured ceilings,
/// the roofline lesson's own operations in grey for scale, and each placed pair as an arrow
/// from its baseline (ring) to its optimized side (dot), numbered. `id` keeps the chart's clip
/// path apart from other charts on the page. Returns the SVG and the number of pair points.
pub fn roofline(r: &RooflineReport, pairs: &[(usize, &Placed)], id: usize) -> (String, usize) {
    const W: f64 = 620.0;
    const H: f64 = 440.0;
    let (left, right, top, bottom) = (70.0, W - 20.0, 20.0, H - 50.0);
    let bw = r.roofs.memory_gbps;
    let mut xs: Vec<f64> = r
        .roofs
        .compute
        .iter()
        .map(|c| c.ridge_flop_per_byte)
        .collect();
    let mut ys: Vec<f64> = r.roofs.compute.iter().map(|c| c.gflops).collect();
    for p in &r.points {
        xs.push(p.intensity);
        ys.push(p.gflops);
    }
    for (_, p) in pairs {
        for q in [p.baseline, p.optimized] {
            xs.push(q.intensity);
            ys.push(q.gflops);
        }
    }
    let range = |v: &[f64]| decades(v.iter().copied(), 2.0).unwrap_or((0.01, 1e4));
    let ((x0, x1), (y0, y1)) = (range(&xs), range(&ys));
    let ax = LogAxis {
        lo: x0,
        hi: x1,
        from: left,
        to: right,
    };
    let ay = LogAxis {
        lo: y0,
        hi: y1,
        from: bottom,
        to: top,
    };
    let mut s = format!(
        r#"<svg class="chart roofline" viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" aria-label="roofline of the {}"><defs><clipPath id="plot-{id}"><rect x="{left}" y="{top}" width="{}" height="{}"/></clipPath></defs>"#,
        escape(&r.device.name),
        right - left,
        bottom - top
    );
    for t in decade_ticks(x0, x1) {
        let x = ax.at(t);
        s.push_str(&format!(
            r#"<line x1="{x:.1}" y1="{top}" x2="{x:.1}" y2="{bottom}" class="grid"/><text x="{x:.1}" y="{}" class="tick" text-anchor="middle">{}</text>"#,
            bottom + 16.0,
            short_number(t)
        ));
    }
    for t in decade_ticks(y0, y1) {
        let y = ay.at(t);
        s.push_str(&format!(
            r#"<line x1="{left}" y1="{y:.1}" x2="{right}" y2="{y:.1}" class="grid"/><text x="{}" y="{:.1}" class="tick" text-anchor="end">{}</text>"#,
            left - 6.0,
            y + 4.0,
            short_number(t)
        ));
    }
    s.push_str(&format!(
        r#"<text x="{:.1}" y="{}" class="axis" text-anchor="middle">arithmetic intensity (FLOP / byte of DRAM traffic)</text><text transform="translate(16,{:.1}) rotate(-90)" class="axis" text-anchor="middle">GFLOP/s</text>"#,
        (left + right) / 2.0,
        H - 12.0,
        (top + bottom) / 2.0
    ));
    // Roofs, clipped to the plot.
    let top_roof = r.roofs.compute.iter().map(|c| c.gflops).fold(0.0, f64::max);
    let slope_end = if top_roof > 0.0 { top_roof / bw } else { x1 };
    s.push_str(&format!(r#"<g clip-path="url(#plot-{id})">"#));
    s.push_str(&format!(
        r#"<line class="roof" x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}"><title>{}: {:.0} GB/s</title></line>"#,
        ax.at(x0),
        ay.at(bw * x0),
        ax.at(slope_end),
        ay.at(bw * slope_end),
        escape(&r.roofs.memory_name),
        bw
    ));
    for c in &r.roofs.compute {
        let y = ay.at(c.gflops);
        s.push_str(&format!(
            r#"<line class="roof compute" x1="{:.1}" y1="{y:.1}" x2="{right}" y2="{y:.1}"><title>{}: {:.1} TFLOP/s, ridge {:.1} FLOP/B</title></line><text x="{}" y="{:.1}" class="roof-label" text-anchor="end">{}: {:.1} TFLOP/s</text>"#,
            ax.at(c.ridge_flop_per_byte),
            escape(&c.name),
            c.gflops / 1e3,
            c.ridge_flop_per_byte,
            right - 4.0,
            y - 4.0,
            escape(&c.name),
            c.gflops / 1e3
        ));
    }
    for p in &r.points {
        s.push_str(&format!(
            r#"<circle class="op" cx="{:.1}" cy="{:.1}" r="2.5"><title>{} ({}): {:.3} FLOP/B, {:.0} GFLOP/s</title></circle>"#,
            ax.at(p.intensity),
            ay.at(p.gflops),
            escape(&p.label),
            escape(&p.family),
            p.intensity,
            p.gflops
        ));
    }
    // Numbers of pairs whose optimized sides land within a few pixels share one label.
    let mut labels: Vec<((f64, f64), Vec<usize>)> = Vec::new();
    for (number, p) in pairs {
        let at = (ax.at(p.optimized.intensity), ay.at(p.optimized.gflops));
        match labels
            .iter_mut()
            .find(|(q, _)| (q.0 - at.0).powi(2) + (q.1 - at.1).powi(2) < 144.0)
        {
            Some((_, numbers)) => numbers.push(*number),
            None => labels.push((at, vec![*number])),
        }
    }
    let mut points = 0;
    for (number, p) in pairs {
        let c = color(*number);
        let (bx, by) = (ax.at(p.baseline.intensity), ay.at(p.baseline.gflops));
        let (ox, oy) = (ax.at(p.optimized.intensity), ay.at(p.optimized.gflops));
        let tip = |side: &str, q: &super::Point| {
            format!(
                "<title>{} {side}: {:.3} FLOP/B, {:.0} GFLOP/s</title>",
                number + 1,
                q.intensity,
                q.gflops
            )
        };
        s.push_str(&arrow((bx, by), (ox, oy), &c));
        s.push_str(&format!(
            r#"<circle class="pair-point baseline" cx="{bx:.1}" cy="{by:.1}" r="5" stroke="{c}">{}</circle><circle class="pair-point optimized" cx="{ox:.1}" cy="{oy:.1}" r="5" fill="{c}">{}</circle>"#,
            tip("baseline", &p.baseline),
            tip("optimized", &p.optimized),
        ));
        points += 2;
    }
    for ((x, y), numbers) in &labels {
        let text: Vec<String> = numbers.iter().map(|n| (n + 1).to_string()).collect();
        s.push_str(&format!(
            r#"<text x="{:.1}" y="{:.1}" class="pair-number" fill="{}">{}</text>"#,
            x + 7.0,
            y - 6.0,
            color(numbers[0]),
            text.join(", ")
        ));
    }
    s.push_str("</g>");
    s.push_str(&format!(
        r#"<rect x="{left}" y="{top}" width="{}" height="{}" class="frame"/></svg>"#,
        right - left,
        bottom - top
    ));
    (s, points)
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
        assert_eq!(n, 3);
        assert_eq!(svg.matches(r#"class="bar""#).count(), 3);
        assert!(svg.contains("GPU &lt;one&gt;"), "names are escaped");
        // 0.8 - 1.96 x 0.05 = 0.70: the axis starts at 0.5x; 40 + 3.9 (x 1.25) ends at 100x.
        assert!(svg.contains(">0.5x<") && svg.contains(">100x<"), "{svg}");
        assert!(!svg.contains(">0.2x<"), "{svg}");
        assert!(!svg.contains("c/z"), "a pair without bars has no row");
    }
}
