//! The roofline picture: log-log axes, the memory slope and each compute ceiling with its ridge
//! point marked, operations as points, and pairs as arrows from a baseline (ring) to its
//! optimized side (dot). The roofline lesson draws its operations in colour, labelled by family;
//! the chapter page draws them in grey for scale and its pairs over them.

use crate::format::short_number;
use plotters::coord::Shift;
use plotters::prelude::*;
use serde::{Deserialize, Serialize};

use crate::{register_font, Figure, COLORS, FONT, GRID_BOLD, GRID_LIGHT};

/// A compute ceiling as drawn: its key (operations name the roof they are held to), label and
/// ridge point against the memory roof.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ComputeRoof {
    pub key: String,
    pub name: String,
    pub gflops: f64,
    pub ridge_flop_per_byte: f64,
}

/// The roofs of one GPU: the memory slope and the compute ceilings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Roofs {
    /// The memory slope: the best measured DRAM bandwidth.
    pub memory_name: String,
    pub memory_gbps: f64,
    pub compute: Vec<ComputeRoof>,
}

impl Roofs {
    pub fn compute_roof(&self, key: &str) -> Option<&ComputeRoof> {
        self.compute.iter().find(|r| r.key == key)
    }
}

/// An operation on the picture; a placed point of the roofline lesson reads as one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Operation {
    /// "vector add", "SGEMM fp32", ...: one colour and legend entry per family.
    pub family: String,
    /// Short label drawn beside the point: "add 64M", "sgemm 4096".
    pub label: String,
    /// FLOP per byte of DRAM traffic.
    pub intensity: f64,
    pub gflops: f64,
}

/// A pair on the picture: `number` picks its colour and is drawn beside its optimized side
/// (as `number + 1`); each side is (FLOP/byte, GFLOP/s).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Move {
    pub number: usize,
    pub baseline: (f64, f64),
    pub optimized: (f64, f64),
}

/// How the operations are drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operations {
    /// One colour, marker and legend entry per family, each point labelled.
    ByFamily,
    /// Small grey dots, for scale under the pairs.
    Grey,
}

/// One roofline picture.
#[derive(Debug, Clone)]
pub struct Roofline<'a> {
    /// Drawn across the top; empty for none.
    pub title: String,
    pub roofs: &'a Roofs,
    pub operations: Vec<Operation>,
    pub style: Operations,
    pub moves: Vec<Move>,
}

/// A picture as one SVG document, for pages that hold their pictures inline.
pub fn svg_string(figure: &impl Figure, size: (u32, u32)) -> Result<String, String> {
    register_font();
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, size).into_drawing_area();
        figure.draw(&root)?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(out)
}

impl Roofline<'_> {
    /// Axis ranges covering every point, move and ridge, padded, in whole decades.
    pub fn axis_ranges(&self) -> ((f64, f64), (f64, f64)) {
        let mut points: Vec<(f64, f64)> = self
            .operations
            .iter()
            .map(|o| (o.intensity, o.gflops))
            .collect();
        for m in &self.moves {
            points.extend([m.baseline, m.optimized]);
        }
        for r in &self.roofs.compute {
            points.push((r.ridge_flop_per_byte, r.gflops));
        }
        let usable = |v: f64| v > 0.0 && v.is_finite();
        let xs: Vec<f64> = points.iter().map(|p| p.0).filter(|v| usable(*v)).collect();
        let ys: Vec<f64> = points.iter().map(|p| p.1).filter(|v| usable(*v)).collect();
        if xs.is_empty() || ys.is_empty() {
            return ((0.01, 1e4), (1.0, 1e6));
        }
        let decade_below = |v: f64| 10f64.powf(v.log10().floor());
        let decade_above = |v: f64| 10f64.powf(v.log10().ceil());
        let min = |v: &[f64]| v.iter().cloned().fold(f64::INFINITY, f64::min);
        let max = |v: &[f64]| v.iter().cloned().fold(0.0, f64::max);
        (
            (decade_below(min(&xs) / 2.0), decade_above(max(&xs) * 2.0)),
            (decade_below(min(&ys) / 2.0), decade_above(max(&ys) * 2.0)),
        )
    }
}

/// A labelled rectangle in pixels, for keeping labels off each other and off the points.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rect {
    pub x0: i32,
    pub y0: i32,
    pub x1: i32,
    pub y1: i32,
}

impl Rect {
    pub fn overlaps(&self, o: &Rect) -> bool {
        self.x0 < o.x1 && o.x0 < self.x1 && self.y0 < o.y1 && o.y0 < self.y1
    }

    fn around((x, y): (i32, i32), half: i32) -> Rect {
        Rect {
            x0: x - half,
            y0: y - half,
            x1: x + half,
            y1: y + half,
        }
    }
}

/// Group points closer than `radius` pixels, so stacked points share one label.
pub fn cluster(pixels: &[(i32, i32)], radius: i32) -> Vec<Vec<usize>> {
    let mut clusters: Vec<(Vec<usize>, (i32, i32))> = Vec::new();
    for (i, &(x, y)) in pixels.iter().enumerate() {
        match clusters
            .iter_mut()
            .find(|(_, (cx, cy))| (cx - x).pow(2) + (cy - y).pow(2) <= radius * radius)
        {
            Some((members, _)) => members.push(i),
            None => clusters.push((vec![i], (x, y))),
        }
    }
    clusters.into_iter().map(|(m, _)| m).collect()
}

/// "add 16M" + "add 64M" + "mul 16M" -> "add 16M, 64M; mul 16M".
pub fn merge_labels(labels: &[&str]) -> String {
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    for l in labels {
        let (head, tail) = match l.split_once(' ') {
            Some((h, t)) => (h.to_string(), t.to_string()),
            None => (l.to_string(), String::new()),
        };
        match groups.iter_mut().find(|(h, _)| *h == head) {
            Some((_, tails)) => tails.push(tail),
            None => groups.push((head, vec![tail])),
        }
    }
    groups
        .into_iter()
        .map(|(h, t)| {
            let t: Vec<String> = t.into_iter().filter(|s| !s.is_empty()).collect();
            if t.is_empty() {
                h
            } else {
                format!("{h} {}", t.join(", "))
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Place a label box of `size` next to `anchor`, trying positions around it in order, avoiding
/// `taken` boxes and staying inside `area`.
pub fn place_label(anchor: (i32, i32), size: (i32, i32), taken: &[Rect], area: Rect) -> Rect {
    let (w, h) = size;
    let (x, y) = anchor;
    let offsets = [
        (8, -h / 2),
        (8, -h - 4),
        (8, 4),
        (-w - 8, -h / 2),
        (-w / 2, -h - 8),
        (-w / 2, 8),
        (8, -2 * h - 6),
        (8, h + 6),
        (-w - 8, -h - 4),
        (-w - 8, 4),
    ];
    let fits = |r: &Rect| r.x0 >= area.x0 && r.x1 <= area.x1 && r.y0 >= area.y0 && r.y1 <= area.y1;
    let candidates: Vec<Rect> = offsets
        .iter()
        .map(|&(dx, dy)| Rect {
            x0: x + dx,
            y0: y + dy,
            x1: x + dx + w,
            y1: y + dy + h,
        })
        .collect();
    // Keep a few pixels between labels, so neighbours never read as one.
    const PAD: i32 = 3;
    let overlap = |r: &Rect| -> i64 {
        let r = Rect {
            x0: r.x0 - PAD,
            y0: r.y0 - PAD,
            x1: r.x1 + PAD,
            y1: r.y1 + PAD,
        };
        taken
            .iter()
            .map(|t| {
                let w = (r.x1.min(t.x1) - r.x0.max(t.x0)).max(0) as i64;
                let h = (r.y1.min(t.y1) - r.y0.max(t.y0)).max(0) as i64;
                w * h
            })
            .sum()
    };
    // The first free spot; failing that, the spot that covers the least.
    candidates
        .iter()
        .find(|r| fits(r) && overlap(r) == 0)
        .or_else(|| {
            candidates
                .iter()
                .filter(|r| fits(r))
                .min_by_key(|r| overlap(r))
        })
        .copied()
        .unwrap_or(candidates[0])
}

/// Marker shapes cycle with the family, so families that land on the same spot (vector add and
/// multiply do) stay visible: a dot inside a ring, a triangle, a cross.
#[derive(Debug, Clone, Copy)]
enum Marker {
    Dot,
    Ring,
    Triangle,
    Cross,
}

impl Marker {
    fn for_family(index: usize) -> Marker {
        [Marker::Dot, Marker::Ring, Marker::Triangle, Marker::Cross][index % 4]
    }

    fn element<C, DB: DrawingBackend>(self, at: C, color: RGBColor) -> DynElement<'static, DB, C>
    where
        C: Clone + 'static,
    {
        match self {
            Marker::Dot => Circle::new(at, 5, color.filled()).into_dyn(),
            Marker::Ring => Circle::new(at, 9, color.stroke_width(2)).into_dyn(),
            Marker::Triangle => TriangleMarker::new(at, 7, color.filled()).into_dyn(),
            Marker::Cross => Cross::new(at, 8, color.stroke_width(3)).into_dyn(),
        }
    }
}

impl Figure for Roofline<'_> {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String>
    where
        DB::ErrorType: 'static,
    {
        draw(root, self)
    }
}

fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, r: &Roofline) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(err)?;
    let ((x0, x1), (y0, y1)) = r.axis_ranges();
    let mut builder = ChartBuilder::on(root);
    if !r.title.is_empty() {
        builder.caption(&r.title, (FONT, 26));
    }
    let mut chart = builder
        .margin(24)
        .x_label_area_size(64)
        .y_label_area_size(96)
        .build_cartesian_2d((x0..x1).log_scale(), (y0..y1).log_scale())
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("arithmetic intensity (FLOP / byte of DRAM traffic)")
        .y_desc("performance (GFLOP/s)")
        .axis_desc_style((FONT, 19))
        .label_style((FONT, 16))
        .x_label_formatter(&|v| short_number(*v))
        .y_label_formatter(&|v| short_number(*v))
        .light_line_style(GRID_LIGHT)
        .bold_line_style(GRID_BOLD)
        .draw()
        .map_err(err)?;

    // Roofs: the slope up to the highest ceiling, each ceiling from its ridge rightwards.
    let bw = r.roofs.memory_gbps;
    let top = r.roofs.compute.iter().map(|c| c.gflops).fold(0.0, f64::max);
    let roof_style = ShapeStyle {
        color: BLACK.to_rgba(),
        filled: false,
        stroke_width: 3,
    };
    // Clip the slope to the axes ourselves: plotters clamps out-of-range points onto the border,
    // which would bend the line.
    let slope_end = if top > 0.0 { top / bw } else { x1 };
    let slope_from = x0.max(y0 / bw);
    let slope_to = slope_end.min(x1).min(y1 / bw);
    chart
        .draw_series(LineSeries::new(
            vec![(slope_from, bw * slope_from), (slope_to, bw * slope_to)],
            roof_style,
        ))
        .map_err(err)?;
    let label_font: TextStyle = (FONT, 16).into_font().into();
    let mut taken: Vec<Rect> = Vec::new();
    let text = |s: &str| {
        root.estimate_text_size(s, &label_font)
            .map(|(w, h)| (w as i32, h as i32))
            .unwrap_or((8 * s.len() as i32, 16))
    };
    // The lines are obstacles for every label: the slope sampled every few pixels, the
    // ceilings as thin boxes.
    let (sx0, sy0) = chart.backend_coord(&(slope_from, bw * slope_from));
    let (sx1, sy1) = chart.backend_coord(&(slope_to, bw * slope_to));
    let steps = ((sx1 - sx0).abs().max((sy1 - sy0).abs()) / 6).max(1);
    for k in 0..=steps {
        let x = sx0 + (sx1 - sx0) * k / steps;
        let y = sy0 + (sy1 - sy0) * k / steps;
        taken.push(Rect::around((x, y), 4));
    }
    for c in &r.roofs.compute {
        let (rx, ry) = chart.backend_coord(&(c.ridge_flop_per_byte, c.gflops));
        let (ex, _) = chart.backend_coord(&(x1, c.gflops));
        taken.push(Rect {
            x0: rx - 6,
            y0: ry - 4,
            x1: ex,
            y1: ry + 4,
        });
    }
    for c in r.roofs.compute.iter() {
        let style = ShapeStyle {
            color: RGBColor(60, 60, 60).to_rgba(),
            filled: false,
            stroke_width: 2,
        };
        let xr = c.ridge_flop_per_byte;
        chart
            .draw_series(LineSeries::new(vec![(xr, c.gflops), (x1, c.gflops)], style))
            .map_err(err)?;
        chart
            .draw_series(std::iter::once(Circle::new(
                (xr, c.gflops),
                6,
                BLACK.filled(),
            )))
            .map_err(err)?;
        let name = format!(
            "{}: {:.1} TFLOP/s, ridge {:.1} FLOP/B",
            c.name,
            c.gflops / 1e3,
            xr
        );
        let (px, py) = chart.backend_coord(&(x1, c.gflops));
        let (w, h) = text(&name);
        let rect = Rect {
            x0: px - w - 6,
            y0: py - h - 6,
            x1: px - 6,
            y1: py - 6,
        };
        root.draw(&Text::new(name, (rect.x0, rect.y0), label_font.clone()))
            .map_err(err)?;
        taken.push(rect);
    }
    {
        // The slope's own label: above-left of a point a little before its middle, as close to
        // the line as the obstacles allow.
        let slope_label = format!("{}: {:.0} GB/s", r.roofs.memory_name, bw);
        let xa = 10f64.powf(slope_from.log10() + 0.45 * (slope_to.log10() - slope_from.log10()));
        let (px, py) = chart.backend_coord(&(xa, bw * xa));
        let (w, h) = text(&slope_label);
        let rect = (0..12)
            .map(|k| {
                let lift = 10 + 12 * k;
                Rect {
                    x0: px - w - lift,
                    y0: py - h - lift,
                    x1: px - lift,
                    y1: py - lift,
                }
            })
            .find(|r| !taken.iter().any(|t| t.overlaps(r)))
            .unwrap_or(Rect {
                x0: px - w - 40,
                y0: py - h - 40,
                x1: px - 40,
                y1: py - 40,
            });
        root.draw(&Text::new(
            slope_label,
            (rect.x0, rect.y0),
            label_font.clone(),
        ))
        .map_err(err)?;
        taken.push(rect);
    }
    let (ax, ay) = chart.plotting_area().get_pixel_range();
    let area = Rect {
        x0: ax.start,
        y0: ay.start,
        x1: ax.end,
        y1: ay.end,
    };

    let ops = &r.operations;
    let pixels: Vec<(i32, i32)> = ops
        .iter()
        .map(|o| chart.backend_coord(&(o.intensity, o.gflops)))
        .collect();
    match r.style {
        Operations::Grey => {
            let grey = RGBColor(187, 187, 187);
            chart
                .draw_series(
                    ops.iter()
                        .map(|o| Circle::new((o.intensity, o.gflops), 3, grey.filled())),
                )
                .map_err(err)?;
        }
        Operations::ByFamily => {
            // One colour and legend entry per family.
            let mut families: Vec<&str> = Vec::new();
            for o in ops {
                if !families.contains(&o.family.as_str()) {
                    families.push(&o.family);
                }
            }
            for (fi, family) in families.iter().enumerate() {
                let color = COLORS[fi % COLORS.len()];
                let marker = Marker::for_family(fi);
                chart
                    .draw_series(
                        ops.iter()
                            .filter(|o| o.family == *family)
                            .map(|o| marker.element((o.intensity, o.gflops), color)),
                    )
                    .map_err(err)?
                    .label(*family)
                    .legend(move |(x, y)| marker.element((x + 10, y), color));
            }
            taken.extend(pixels.iter().map(|&p| Rect::around(p, 7)));
            for members in cluster(&pixels, 11) {
                let labels: Vec<&str> = members.iter().map(|&i| ops[i].label.as_str()).collect();
                let label = merge_labels(&labels);
                let rect = place_label(pixels[members[0]], text(&label), &taken, area);
                root.draw(&Text::new(label, (rect.x0, rect.y0), label_font.clone()))
                    .map_err(err)?;
                taken.push(rect);
            }
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperLeft)
                .label_font((FONT, 16))
                .background_style(WHITE.mix(0.9))
                .border_style(RGBColor(160, 160, 160))
                .draw()
                .map_err(err)?;
        }
    }

    // Pairs: an arrow from the baseline's ring to the optimized side's dot, numbered; numbers
    // of pairs that land on the same spot share one label.
    let ends: Vec<((i32, i32), (i32, i32))> = r
        .moves
        .iter()
        .map(|m| {
            (
                chart.backend_coord(&m.baseline),
                chart.backend_coord(&m.optimized),
            )
        })
        .collect();
    for (m, &(from, to)) in r.moves.iter().zip(&ends) {
        let color = COLORS[m.number % COLORS.len()];
        root.draw(&PathElement::new(vec![from, to], color.stroke_width(3)))
            .map_err(err)?;
        if let Some(head) = arrowhead(from, to) {
            root.draw(&Polygon::new(head, color.filled()))
                .map_err(err)?;
        }
        root.draw(&Circle::new(from, 7, WHITE.filled()))
            .map_err(err)?;
        root.draw(&Circle::new(from, 7, color.stroke_width(3)))
            .map_err(err)?;
        root.draw(&Circle::new(to, 7, color.filled()))
            .map_err(err)?;
    }
    let optimized: Vec<(i32, i32)> = ends.iter().map(|e| e.1).collect();
    taken.extend(optimized.iter().map(|&p| Rect::around(p, 8)));
    let number_font: TextStyle = (FONT, 18).into_font().into();
    for members in cluster(&optimized, 12) {
        let numbers: Vec<String> = members
            .iter()
            .map(|&i| (r.moves[i].number + 1).to_string())
            .collect();
        let label = numbers.join(", ");
        let rect = place_label(optimized[members[0]], text(&label), &taken, area);
        let color = COLORS[r.moves[members[0]].number % COLORS.len()];
        root.draw(&Text::new(
            label,
            (rect.x0, rect.y0),
            number_font.clone().color(&color),
        ))
        .map_err(err)?;
        taken.push(rect);
    }
    Ok(())
}

/// The head of an arrow from `from` to `to`, stopping short of the dot at `to`; None when the
/// two are too close for one.
fn arrowhead(from: (i32, i32), to: (i32, i32)) -> Option<Vec<(i32, i32)>> {
    let (dx, dy) = ((to.0 - from.0) as f64, (to.1 - from.1) as f64);
    let len = (dx * dx + dy * dy).sqrt();
    if len < 24.0 {
        return None;
    }
    let (ux, uy) = (dx / len, dy / len);
    let tip = (to.0 as f64 - 8.0 * ux, to.1 as f64 - 8.0 * uy);
    let base = (tip.0 - 12.0 * ux, tip.1 - 12.0 * uy);
    let px = |x: f64, y: f64| (x.round() as i32, y.round() as i32);
    Some(vec![
        px(tip.0, tip.1),
        px(base.0 - 5.0 * uy, base.1 + 5.0 * ux),
        px(base.0 + 5.0 * uy, base.1 - 5.0 * ux),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roofs() -> Roofs {
        let roof = |key: &str, gflops: f64| ComputeRoof {
            key: key.into(),
            name: format!("{key} roof"),
            gflops,
            ridge_flop_per_byte: gflops / 3000.0,
        };
        Roofs {
            memory_name: "DRAM copy bandwidth".into(),
            memory_gbps: 3000.0,
            compute: vec![roof("fp32", 60_000.0), roof("bf16", 600_000.0)],
        }
    }

    fn operation(family: &str, label: &str, intensity: f64, gflops: f64) -> Operation {
        Operation {
            family: family.into(),
            label: label.into(),
            intensity,
            gflops,
        }
    }

    #[test]
    fn nearby_points_share_a_cluster() {
        let c = cluster(&[(0, 0), (5, 5), (100, 100), (103, 98)], 11);
        assert_eq!(c, vec![vec![0, 1], vec![2, 3]]);
    }

    #[test]
    fn labels_merge_by_family() {
        assert_eq!(
            merge_labels(&["add 16M", "add 64M", "mul 16M"]),
            "add 16M, 64M; mul 16M"
        );
        assert_eq!(merge_labels(&["fused"]), "fused");
    }

    #[test]
    fn labels_avoid_taken_space() {
        let area = Rect {
            x0: 0,
            y0: 0,
            x1: 1000,
            y1: 1000,
        };
        let first = place_label((500, 500), (80, 16), &[], area);
        assert_eq!(
            first,
            Rect {
                x0: 508,
                y0: 492,
                x1: 588,
                y1: 508
            }
        );
        let second = place_label((500, 500), (80, 16), &[first], area);
        assert!(!second.overlaps(&first));
        // Near the right edge it goes left.
        let edge = place_label((990, 500), (80, 16), &[], area);
        assert!(edge.x1 <= 1000);
    }

    #[test]
    fn axes_cover_points_moves_and_ridges_in_decades() {
        let roofs = roofs();
        let r = Roofline {
            title: String::new(),
            roofs: &roofs,
            operations: vec![operation("add", "add 1M", 0.083, 250.0)],
            style: Operations::Grey,
            moves: vec![Move {
                number: 0,
                baseline: (0.5, 40.0),
                optimized: (3000.0, 50_000.0),
            }],
        };
        // x: 0.083 / 2 -> 0.01; 3000 x 2 -> 10k. y: 40 / 2 -> 10; the bf16 roof x 2 -> 10M.
        assert_eq!(r.axis_ranges(), ((0.01, 1e4), (10.0, 1e7)));
        let empty = Roofline {
            operations: Vec::new(),
            moves: Vec::new(),
            roofs: &Roofs {
                compute: Vec::new(),
                ..roofs.clone()
            },
            ..r
        };
        assert_eq!(empty.axis_ranges(), ((0.01, 1e4), (1.0, 1e6)));
    }

    #[test]
    fn the_picture_has_its_axes_roofs_points_and_pairs() {
        let roofs = roofs();
        let ops = vec![
            operation("vector add", "add 16M", 0.083, 240.0),
            operation("vector add", "add 64M", 0.083, 250.0),
            operation("SGEMM fp32", "sgemm 4096", 680.0, 51_000.0),
        ];
        let lesson = Roofline {
            title: "Roofline of the test GPU".into(),
            roofs: &roofs,
            operations: ops.clone(),
            style: Operations::ByFamily,
            moves: Vec::new(),
        };
        let svg = svg_string(&lesson, (1400, 900)).unwrap();
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        for text in [
            "Roofline of the test GPU",
            "arithmetic intensity (FLOP / byte of DRAM traffic)",
            "performance (GFLOP/s)",
            "DRAM copy bandwidth: 3000 GB/s",
            "fp32 roof: 60.0 TFLOP/s, ridge 20.0 FLOP/B",
            "bf16 roof: 600.0 TFLOP/s",
            "add 16M, 64M",
            "sgemm 4096",
            "vector add",
            "1k\n",
        ] {
            assert!(svg.contains(text), "no {text:?} in the picture");
        }
        let page = Roofline {
            title: String::new(),
            style: Operations::Grey,
            moves: vec![
                Move {
                    number: 0,
                    baseline: (0.1, 100.0),
                    optimized: (10.0, 20_000.0),
                },
                Move {
                    number: 1,
                    baseline: (0.2, 300.0),
                    optimized: (10.0, 20_000.0),
                },
            ],
            ..lesson
        };
        let svg = svg_string(&page, (1000, 680)).unwrap();
        // Two pairs landing on one spot share the label "1, 2"; grey operations carry none.
        assert!(svg.contains("\n1, 2\n"), "{svg}");
        assert!(!svg.contains("sgemm 4096"));
        assert!(!svg.contains("Roofline of"));
        assert_eq!(svg.matches("<polygon").count(), 2, "two arrowheads");
    }

    #[test]
    fn arrowheads_point_at_the_optimized_side() {
        let head = arrowhead((0, 0), (100, 0)).unwrap();
        assert_eq!(head[0], (92, 0));
        assert!(head[1..].iter().all(|p| p.0 == 80));
        assert!(arrowhead((0, 0), (10, 10)).is_none());
    }
}
