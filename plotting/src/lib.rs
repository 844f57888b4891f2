//! What every plot of the project shares: a bundled font (DejaVu Sans, registered through
//! plotters' ab_glyph support, so pictures render the same on a machine with no fonts), one
//! palette, the grid and legend of line charts, and drawing a figure once as SVG and once as
//! PNG.

use std::path::Path;
use std::sync::Once;

use plotters::coord::{CoordTranslate, Shift};
use plotters::prelude::*;
use plotters::style::FontStyle;

pub mod format;
pub mod roofline;

/// The family every text style names; it resolves to the bundled font.
pub const FONT: &str = "sans-serif";
static FONT_BYTES: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");
static REGISTER: Once = Once::new();

/// Series colours, in order (matplotlib's tab10, first eight).
pub const COLORS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(23, 190, 207),
];

/// A figure on white: `title` across the top, and `panels` drawing areas side by side below it.
pub fn titled_panels<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    panels: usize,
) -> Result<Vec<DrawingArea<DB, Shift>>, String>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(err)?;
    let root = root.titled(title, (FONT, 24)).map_err(err)?;
    Ok(root.split_evenly((1, panels)))
}

/// Grid lines of line charts: the minor ones, and the major ones.
pub const GRID_LIGHT: RGBColor = RGBColor(235, 235, 235);
pub const GRID_BOLD: RGBColor = RGBColor(200, 200, 200);

/// The legend of a line chart: its series' labels upper left, over a light box.
pub fn draw_legend<'a, DB, CT>(chart: &mut ChartContext<'a, DB, CT>) -> Result<(), String>
where
    DB: DrawingBackend + 'a,
    DB::ErrorType: 'static,
    CT: CoordTranslate,
{
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font((FONT, 15))
        .background_style(WHITE.mix(0.85))
        .border_style(RGBColor(180, 180, 180))
        .draw()
        .map_err(|e| e.to_string())
}

/// Register the bundled font under [FONT]; every later call is free.
pub fn register_font() {
    REGISTER.call_once(|| {
        if plotters::style::register_font(FONT, FontStyle::Normal, FONT_BYTES).is_err() {
            unreachable!("the bundled DejaVuSans.ttf is valid TrueType");
        }
    });
}

/// A picture that can draw itself on any plotters backend.
pub trait Figure {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String>
    where
        DB::ErrorType: 'static;
}

/// Draw `figure` to `svg` and to `png`, `size` pixels, creating their folders.
pub fn render(
    figure: &impl Figure,
    size: (u32, u32),
    svg: &Path,
    png: &Path,
) -> Result<(), String> {
    register_font();
    for path in [svg, png] {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| format!("{}: cannot create: {e}", dir.display()))?;
        }
    }
    {
        let root = SVGBackend::new(svg, size).into_drawing_area();
        figure.draw(&root)?;
        root.present()
            .map_err(|e| format!("{}: {e}", svg.display()))?;
    }
    let root = BitMapBackend::new(png, size).into_drawing_area();
    figure.draw(&root)?;
    root.present()
        .map_err(|e| format!("{}: {e}", png.display()))
}
