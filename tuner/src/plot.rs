//! The sweep's picture: samples/s (left, log-log) and peak memory (right, MB from zero) against
//! batch size, one line per configuration (workers, precision, pinning). PNG and SVG with plotters and the
//! bundled DejaVu Sans (ch1-roofline's approach), so it draws the same with no system fonts.

use std::path::{Path, PathBuf};
use std::sync::Once;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::FontStyle;

use crate::analysis::{TrialResult, TrialStatus};

const FONT: &str = "sans-serif";
static FONT_BYTES: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");
static REGISTER: Once = Once::new();
pub const WIDTH: u32 = 1600;
pub const HEIGHT: u32 = 720;

const COLORS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(23, 190, 207),
];

fn register_font() {
    REGISTER.call_once(|| {
        if plotters::style::register_font(FONT, FontStyle::Normal, FONT_BYTES).is_err() {
            unreachable!("the bundled DejaVuSans.ttf is valid TrueType");
        }
    });
}

/// One line: its label and (batch, samples/s, GB) points of the trials that ran.
pub type Line = (String, Vec<(f64, f64, f64)>);

/// The lines of the plot, in the order configurations first appear.
pub fn lines(trials: &[TrialResult]) -> Vec<Line> {
    let mut out: Vec<Line> = Vec::new();
    for t in trials {
        let label = t.key.line_label();
        let idx = match out.iter().position(|(l, _)| *l == label) {
            Some(i) => i,
            None => {
                out.push((label, Vec::new()));
                out.len() - 1
            }
        };
        if let (TrialStatus::Ok, Some(tp), Some(m)) = (t.status, t.samples_per_s, t.peak_bytes) {
            out[idx].1.push((t.key.batch as f64, tp, m as f64 / 1e9));
        }
    }
    out
}

/// Whole powers of ten around the values (log axis range).
pub fn decades(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, 0.0f64);
    for v in values.filter(|v| *v > 0.0 && v.is_finite()) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if hi == 0.0 {
        return (1.0, 10.0);
    }
    let lo = 10f64.powf(lo.log10().floor());
    let mut hi = 10f64.powf(hi.log10().ceil());
    if hi <= lo {
        hi = lo * 10.0;
    }
    (lo, hi)
}

/// "1", "512", "8k", "1.5M": short tick labels.
pub fn short(v: f64) -> String {
    let t = |x: f64| {
        let s = format!("{x:.1}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    };
    if v == 0.0 {
        "0".to_string()
    } else if v >= 1e6 {
        format!("{}M", t(v / 1e6))
    } else if v >= 1e3 {
        format!("{}k", t(v / 1e3))
    } else if v >= 1.0 {
        t(v)
    } else {
        format!("{v:.3}").trim_end_matches('0').to_string()
    }
}

/// Write `<stem>.svg` and `<stem>.png`.
pub fn render(
    trials: &[TrialResult],
    title: &str,
    stem: &Path,
) -> Result<(PathBuf, PathBuf), String> {
    register_font();
    if let Some(dir) = stem.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("{}: cannot create: {e}", dir.display()))?;
    }
    let svg = stem.with_extension("svg");
    let png = stem.with_extension("png");
    let lines = lines(trials);
    {
        let root = SVGBackend::new(&svg, (WIDTH, HEIGHT)).into_drawing_area();
        draw(&root, &lines, title)?;
        root.present()
            .map_err(|e| format!("{}: {e}", svg.display()))?;
    }
    {
        let root = BitMapBackend::new(&png, (WIDTH, HEIGHT)).into_drawing_area();
        draw(&root, &lines, title)?;
        root.present()
            .map_err(|e| format!("{}: {e}", png.display()))?;
    }
    Ok((svg, png))
}

fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    lines: &[Line],
    title: &str,
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(err)?;
    let root = root.titled(title, (FONT, 24)).map_err(err)?;
    let panels = root.split_evenly((1, 2));
    let all = || lines.iter().flat_map(|(_, p)| p.iter());
    let batches: Vec<f64> = all().map(|p| p.0).collect();
    let bmax = batches.iter().cloned().fold(1.0, f64::max);
    let bmin = batches.iter().cloned().fold(bmax, f64::min);
    let x_range = (bmin * 0.7, bmax * 1.5);
    let legend = |name: &str| name.to_string();
    // Left: throughput, log-log (it spans decades).
    {
        let (y0, y1) = decades(all().map(|p| p.1));
        let mut chart = ChartBuilder::on(&panels[0])
            .margin(20)
            .x_label_area_size(56)
            .y_label_area_size(80)
            .build_cartesian_2d((x_range.0..x_range.1).log_scale(), (y0..y1).log_scale())
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("batch size")
            .y_desc("samples / s (median step)")
            .axis_desc_style((FONT, 18))
            .label_style((FONT, 15))
            .x_label_formatter(&|v| short(*v))
            .y_label_formatter(&|v| short(*v))
            .light_line_style(RGBColor(235, 235, 235))
            .bold_line_style(RGBColor(200, 200, 200))
            .draw()
            .map_err(err)?;
        for (i, (label, points)) in lines.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            let pts: Vec<(f64, f64)> = points.iter().map(|p| (p.0, p.1)).collect();
            chart
                .draw_series(LineSeries::new(pts.clone(), color.stroke_width(3)))
                .map_err(err)?
                .label(legend(label))
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(3))
                });
            chart
                .draw_series(pts.iter().map(|&p| Circle::new(p, 4, color.filled())))
                .map_err(err)?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .label_font((FONT, 15))
            .background_style(WHITE.mix(0.85))
            .border_style(RGBColor(180, 180, 180))
            .draw()
            .map_err(err)?;
    }
    // Right: memory, linear from zero (it grows linearly with the batch), in MB.
    {
        let top = all().map(|p| p.2 * 1e3).fold(0.0, f64::max).max(1.0) * 1.15;
        let mut chart = ChartBuilder::on(&panels[1])
            .margin(20)
            .x_label_area_size(56)
            .y_label_area_size(80)
            .build_cartesian_2d((x_range.0..x_range.1).log_scale(), 0.0..top)
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("batch size")
            .y_desc("peak device memory (MB, pool high watermark)")
            .axis_desc_style((FONT, 18))
            .label_style((FONT, 15))
            .x_label_formatter(&|v| short(*v))
            .y_label_formatter(&|v| short(*v))
            .light_line_style(RGBColor(235, 235, 235))
            .bold_line_style(RGBColor(200, 200, 200))
            .draw()
            .map_err(err)?;
        for (i, (label, points)) in lines.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            let pts: Vec<(f64, f64)> = points.iter().map(|p| (p.0, p.2 * 1e3)).collect();
            chart
                .draw_series(LineSeries::new(pts.clone(), color.stroke_width(3)))
                .map_err(err)?
                .label(legend(label))
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(3))
                });
            chart
                .draw_series(pts.iter().map(|&p| Circle::new(p, 4, color.filled())))
                .map_err(err)?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .label_font((FONT, 15))
            .background_style(WHITE.mix(0.85))
            .border_style(RGBColor(180, 180, 180))
            .draw()
            .map_err(err)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::TrialKey;

    fn trial(batch: usize, amp: bool, status: TrialStatus) -> TrialResult {
        let key = TrialKey {
            batch,
            workers: 4,
            amp,
            pin: true,
        };
        let mut t = TrialResult::empty(key, status, 0, None);
        if status == TrialStatus::Ok {
            t.samples_per_s = Some(1000.0 * batch as f64);
            t.peak_bytes = Some(50_000_000 * batch as u64);
        }
        t
    }

    #[test]
    fn one_line_per_configuration_and_only_ok_points() {
        let trials = vec![
            trial(1, false, TrialStatus::Ok),
            trial(2, false, TrialStatus::Oom),
            trial(1, true, TrialStatus::Ok),
            trial(2, true, TrialStatus::Ok),
        ];
        let l = lines(&trials);
        assert_eq!(l.len(), 2);
        assert_eq!(l[0].1.len(), 1);
        assert_eq!(l[1].1.len(), 2);
        assert!(l[1].0.contains("AMP"));
    }

    #[test]
    fn ranges_and_labels() {
        assert_eq!(decades([3.0, 4500.0].into_iter()), (1.0, 10000.0));
        assert_eq!(decades(std::iter::empty()), (1.0, 10.0));
        assert_eq!(short(8192.0), "8.2k");
        assert_eq!(short(1e6), "1M");
        assert_eq!(short(16.0), "16");
        assert_eq!(short(0.0), "0");
    }

    #[test]
    fn renders_png_and_svg() {
        let dir = std::env::temp_dir().join(format!("tuner-plot-{}", std::process::id()));
        let trials = vec![
            trial(1, false, TrialStatus::Ok),
            trial(4, false, TrialStatus::Ok),
        ];
        let (svg, png) = render(&trials, "test", &dir.join("sweep")).unwrap();
        let _ = std::fs::copy(&png, "/tmp/tuner-plot-test.png");
        let png_bytes = std::fs::read(&png).unwrap();
        assert_eq!(&png_bytes[1..4], b"PNG");
        let _ = std::fs::copy(&png, "/tmp/tuner-plot-test.png");
        assert!(std::fs::read_to_string(&svg).unwrap().contains("<svg"));
        let _ = std::fs::remove_dir_all(dir);
    }
}
