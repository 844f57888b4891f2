//! The roofline picture of a run: the measured roofs and every operation in colour, labelled by
//! family, drawn by the one roofline drawing of `plotting` to SVG and PNG.

use std::path::{Path, PathBuf};

use plotting::roofline::{Operation, Operations, Roofline};

use crate::report::RooflineReport;

pub const WIDTH: u32 = 1400;
pub const HEIGHT: u32 = 900;

/// The run as the drawing takes it.
pub fn picture(report: &RooflineReport) -> Roofline<'_> {
    Roofline {
        title: format!(
            "Roofline of the {} (measured ceilings, driver {})",
            report.device.name, report.device.driver_version
        ),
        roofs: &report.roofs,
        operations: report
            .points
            .iter()
            .map(|p| Operation {
                family: p.family.clone(),
                label: p.label.clone(),
                intensity: p.intensity,
                gflops: p.gflops,
            })
            .collect(),
        style: Operations::ByFamily,
        moves: Vec::new(),
    }
}

/// Write `roofline.svg` and `roofline.png` into `dir`; returns their paths.
pub fn render(report: &RooflineReport, dir: &Path) -> Result<(PathBuf, PathBuf), String> {
    let (svg, png) = (dir.join("roofline.svg"), dir.join("roofline.png"));
    plotting::render(&picture(report), (WIDTH, HEIGHT), &svg, &png)?;
    Ok((svg, png))
}
