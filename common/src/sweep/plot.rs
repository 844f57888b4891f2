//! A sweep's picture: the speedup at each size with its 95% interval (left; a filled point where
//! the change pays, a hollow one where it does not; 1.0 and the bar drawn across), and both
//! sides' time per run (right; the baseline dashed, the change solid), one colour per line of the
//! sweep. Sizes are powers of two, drawn evenly spaced. PNG and SVG through the `plotting` crate.

use std::path::{Path, PathBuf};

use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotting::format::log_range;
use plotting::{draw_legend, titled_panels, Figure, COLORS, FONT, GRID_BOLD, GRID_LIGHT};

use super::{Point, Summary, Unit};
use crate::report::LessonReport;

pub const WIDTH: u32 = 1600;
pub const HEIGHT: u32 = 720;

/// The plot of a sweep's report (its first section's summary), `<dir>/<lesson>.svg` and `.png`,
/// titled by the lesson and the GPU; None when the report keeps no summary.
pub fn render_report(
    report: &LessonReport,
    dir: &Path,
) -> Result<Option<(PathBuf, PathBuf)>, String> {
    let Some(summary) = report.sections.first().and_then(Summary::from_section) else {
        return Ok(None);
    };
    let title = format!("{} on {}", report.lesson, report.device.name);
    render(&summary, &title, &dir.join(&report.lesson)).map(Some)
}

/// Write `<stem>.svg` and `<stem>.png`; returns their paths.
pub fn render(summary: &Summary, title: &str, stem: &Path) -> Result<(PathBuf, PathBuf), String> {
    let with = |ext: &str| PathBuf::from(format!("{}.{ext}", stem.display()));
    let (svg, png) = (with("svg"), with("png"));
    let figure = SweepFigure { summary, title };
    plotting::render(&figure, (WIDTH, HEIGHT), &svg, &png)?;
    Ok((svg, png))
}

struct SweepFigure<'a> {
    summary: &'a Summary,
    title: &'a str,
}

/// Where a size sits across: its base-2 logarithm.
pub fn across(x: u64) -> f64 {
    (x.max(1) as f64).log2()
}

/// The range across, half a step past the smallest and largest size.
pub fn across_range(points: &[Point]) -> (f64, f64) {
    let xs = points.iter().map(|p| across(p.x));
    let lo = xs.clone().fold(f64::INFINITY, f64::min);
    let hi = xs.fold(f64::NEG_INFINITY, f64::max);
    if lo.is_finite() && hi.is_finite() {
        (lo - 0.5, hi + 0.5)
    } else {
        (0.0, 1.0)
    }
}

/// The tick label of a place across: the size when it is a whole power of two.
pub fn tick(unit: Unit, v: f64) -> String {
    if (v - v.round()).abs() < 1e-9 && v >= 0.0 {
        unit.label(2f64.powf(v.round()) as u64)
    } else {
        String::new()
    }
}

/// A panel: sizes across (base-2 logarithm, `x` the range), `y` up on a log scale, the grid
/// drawn and the ticks named.
fn panel<'a, DB: DrawingBackend>(
    area: &'a DrawingArea<DB, Shift>,
    (axis, unit): (&str, Unit),
    x: (f64, f64),
    y: (f64, f64),
    y_desc: &str,
    y_label: &dyn Fn(&f64) -> String,
) -> Result<ChartContext<'a, DB, Cartesian2d<RangedCoordf64, LogCoord<f64>>>, String>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let mut chart = ChartBuilder::on(area)
        .margin(20)
        .x_label_area_size(56)
        .y_label_area_size(80)
        .build_cartesian_2d(x.0..x.1, (y.0..y.1).log_scale())
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc(axis)
        .y_desc(y_desc)
        .axis_desc_style((FONT, 18))
        .label_style((FONT, 15))
        .x_labels((x.1 - x.0).round() as usize + 1)
        .x_label_formatter(&|v| tick(unit, *v))
        .y_label_formatter(y_label)
        .light_line_style(GRID_LIGHT)
        .bold_line_style(GRID_BOLD)
        .draw()
        .map_err(err)?;
    Ok(chart)
}

impl Figure for SweepFigure<'_> {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String>
    where
        DB::ErrorType: 'static,
    {
        let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
        let panels = titled_panels(root, self.title, 2)?;
        let s = self.summary;
        let axis = (s.axis.name.as_str(), s.axis.unit);
        let series: Vec<&str> = s.crossovers.iter().map(|c| c.series.as_str()).collect();
        let (x0, x1) = across_range(&s.points);

        // Left: the speedup and its interval.
        let ratios: Vec<(f64, f64, f64)> = s
            .points
            .iter()
            .filter_map(|p| p.speedup())
            .map(|r| (r.value, r.interval95().0, r.interval95().1))
            .collect();
        let spread = ratios.iter().flat_map(|r| [r.1, r.2]).chain([1.0, s.bar]);
        let (y0, y1) = log_range(spread, 1.25);
        let mut chart = panel(
            &panels[0],
            axis,
            (x0, x1),
            (y0, y1),
            &format!("speedup, {} over {}", s.changed, s.baseline),
            &|v| format!("{v:.2}x"),
        )?;
        chart
            .draw_series(LineSeries::new(
                [(x0, 1.0), (x1, 1.0)],
                BLACK.mix(0.6).stroke_width(1),
            ))
            .map_err(err)?;
        chart
            .draw_series(DashedLineSeries::new(
                [(x0, s.bar), (x1, s.bar)],
                8,
                6,
                BLACK.mix(0.5).stroke_width(1),
            ))
            .map_err(err)?
            .label(format!("pays: 95% interval above {}x", s.bar))
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], BLACK.mix(0.5)));
        for (i, name) in series.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            let line: Vec<(f64, f64, f64, f64, bool)> = s
                .points
                .iter()
                .filter(|p| p.series == *name)
                .filter_map(|p| {
                    let r = p.speedup()?;
                    let (lo, hi) = r.interval95();
                    Some((
                        across(p.x),
                        r.value,
                        lo.max(y0),
                        hi,
                        p.pays(s.bar) == Some(true),
                    ))
                })
                .collect();
            chart
                .draw_series(LineSeries::new(
                    line.iter().map(|p| (p.0, p.1)),
                    color.stroke_width(3),
                ))
                .map_err(err)?
                .label(*name)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(3))
                });
            chart
                .draw_series(
                    line.iter().map(|p| {
                        PathElement::new(vec![(p.0, p.2), (p.0, p.3)], color.stroke_width(2))
                    }),
                )
                .map_err(err)?;
            chart
                .draw_series(line.iter().map(|p| {
                    let style = if p.4 { color.filled() } else { WHITE.filled() };
                    Circle::new((p.0, p.1), 5, style)
                }))
                .map_err(err)?;
            chart
                .draw_series(
                    line.iter()
                        .map(|p| Circle::new((p.0, p.1), 5, color.stroke_width(2))),
                )
                .map_err(err)?;
        }
        draw_legend(&mut chart)?;

        // Right: each side's time per run.
        let times = s.points.iter().flat_map(|p| [&p.baseline, &p.changed]);
        let (t0, t1) = log_range(
            times.filter_map(|t| t.as_ref().filter(|t| t.passed).map(|t| t.median_ms)),
            1.5,
        );
        let mut chart = panel(
            &panels[1],
            axis,
            (x0, x1),
            (t0, t1),
            "median time per run (ms)",
            &|v| format!("{v:.3}"),
        )?;
        for (i, name) in series.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            let side = |changed: bool| -> Vec<(f64, f64)> {
                s.points
                    .iter()
                    .filter(|p| p.series == *name)
                    .filter_map(|p| {
                        let t = if changed { &p.changed } else { &p.baseline };
                        let t = t.as_ref().filter(|t| t.passed)?;
                        Some((across(p.x), t.median_ms))
                    })
                    .collect()
            };
            chart
                .draw_series(DashedLineSeries::new(
                    side(false),
                    10,
                    6,
                    color.stroke_width(2),
                ))
                .map_err(err)?
                .label(format!("{name}: {}", s.baseline))
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 24, y)], color.mix(0.6).stroke_width(2))
                });
            chart
                .draw_series(LineSeries::new(side(true), color.stroke_width(3)))
                .map_err(err)?
                .label(format!("{name}: {}", s.changed))
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(3))
                });
        }
        draw_legend(&mut chart)
    }
}
