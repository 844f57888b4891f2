//! The roofline picture: log-log axes, the memory slope and each compute ceiling, ridge points
//! marked, every operation a labelled point. Rendered to SVG and PNG with plotters and a
//! bundled font, so it draws the same on a machine with no fonts installed.

use std::path::{Path, PathBuf};

use plotters::coord::Shift;
use plotters::prelude::*;
use plotting::format::{decades, short_number};
use plotting::{Figure, COLORS, FONT};

use crate::report::RooflineReport;

pub const WIDTH: u32 = 1400;
pub const HEIGHT: u32 = 900;

/// Write `roofline.svg` and `roofline.png` into `dir`; returns their paths.
pub fn render(report: &RooflineReport, dir: &Path) -> Result<(PathBuf, PathBuf), String> {
    let (svg, png) = (dir.join("roofline.svg"), dir.join("roofline.png"));
    plotting::render(report, (WIDTH, HEIGHT), &svg, &png)?;
    Ok((svg, png))
}

impl Figure for RooflineReport {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String>
    where
        DB::ErrorType: 'static,
    {
        draw(root, self)
    }
}

/// Axis range covering every point and roof, padded, in whole decades.
pub fn axis_ranges(report: &RooflineReport) -> ((f64, f64), (f64, f64)) {
    let mut xs: Vec<f64> = report
        .points
        .iter()
        .map(|p| p.intensity)
        .filter(|v| *v > 0.0)
        .collect();
    let mut ys: Vec<f64> = report
        .points
        .iter()
        .map(|p| p.gflops)
        .filter(|v| *v > 0.0)
        .collect();
    for r in &report.roofs.compute {
        xs.push(r.ridge_flop_per_byte);
        ys.push(r.gflops);
    }
    match (decades(xs.into_iter(), 2.0), decades(ys.into_iter(), 2.0)) {
        (Some(x), Some(y)) => (x, y),
        _ => ((0.01, 1e4), (1.0, 1e6)),
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

fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, r: &RooflineReport) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(err)?;
    let ((x0, x1), (y0, y1)) = axis_ranges(r);
    let title = format!(
        "Roofline of the {} (measured ceilings, driver {})",
        r.device.name, r.device.driver_version
    );
    let mut chart = ChartBuilder::on(root)
        .caption(title, (FONT, 26))
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
        .light_line_style(RGBColor(235, 235, 235))
        .bold_line_style(RGBColor(200, 200, 200))
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
        taken.push(Rect {
            x0: x - 4,
            y0: y - 4,
            x1: x + 4,
            y1: y + 4,
        });
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

    // Points, one colour and legend entry per family.
    let mut families: Vec<&str> = Vec::new();
    for p in &r.points {
        if !families.contains(&p.family.as_str()) {
            families.push(&p.family);
        }
    }
    for (fi, family) in families.iter().enumerate() {
        let color = COLORS[fi % COLORS.len()];
        let marker = Marker::for_family(fi);
        let pts: Vec<(f64, f64)> = r
            .points
            .iter()
            .filter(|p| p.family == *family)
            .map(|p| (p.intensity, p.gflops))
            .collect();
        chart
            .draw_series(pts.iter().map(|&xy| marker.element(xy, color)))
            .map_err(err)?
            .label(*family)
            .legend(move |(x, y)| marker.element((x + 10, y), color));
    }
    let pixels: Vec<(i32, i32)> = r
        .points
        .iter()
        .map(|p| chart.backend_coord(&(p.intensity, p.gflops)))
        .collect();
    for &(x, y) in &pixels {
        taken.push(Rect {
            x0: x - 7,
            y0: y - 7,
            x1: x + 7,
            y1: y + 7,
        });
    }
    let (ax, ay) = chart.plotting_area().get_pixel_range();
    let area = Rect {
        x0: ax.start,
        y0: ay.start,
        x1: ax.end,
        y1: ay.end,
    };
    for members in cluster(&pixels, 11) {
        let labels: Vec<&str> = members
            .iter()
            .map(|&i| r.points[i].label.as_str())
            .collect();
        let label = merge_labels(&labels);
        let (w, h) = text(&label);
        let anchor = pixels[members[0]];
        let rect = place_label(anchor, (w, h), &taken, area);
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
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
