//! The sweep's picture: samples/s (left, log-log) and peak memory (right, MB from zero: the
//! program's own peak where it reports one, else NVML's reading of its processes) against batch
//! size, one line per configuration (workers, precision, the grid's axes). PNG and SVG with
//! plotters and the bundled DejaVu Sans of the `plotting` crate, so it draws the same with no
//! system fonts.

use std::path::{Path, PathBuf};

use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotting::format::{decades, short_number};
use plotting::{Figure, COLORS, FONT, GRID_BOLD, GRID_LIGHT};

use crate::program::Program;
use crate::trial::{gpu_name, TrialResult};

/// One line: its label and (batch, samples/s, GB) points of the trials that ran.
pub type Line = (String, Vec<(f64, f64, f64)>);

/// The lines of the plot, in the order configurations first appear.
pub fn lines(trials: &[TrialResult]) -> Vec<Line> {
    let mut out: Vec<Line> = Vec::new();
    for t in trials {
        let label = t.key().line_label();
        let i = (out.iter().position(|(l, _)| *l == label)).unwrap_or_else(|| {
            out.push((label, Vec::new()));
            out.len() - 1
        });
        // A trial that ended OK, with its samples/s and peak.
        if let (Some(tp), Some(m)) = (t.measured.samples_per_s, t.ok_peak()) {
            let point = (t.params.batch_size as f64, tp, m as f64 / 1e9);
            out[i].1.push(point);
        }
    }
    out
}

/// The plot's title: the program by its leading words (up to its first flag; an interpreter's
/// own flags skipped and `-m MODULE` kept for Python) and the GPU the trials ran on. The whole
/// command line is in the JSON; on the picture it would run off both edges.
pub fn title(command: &[String], gpu: &str) -> String {
    let python = command.first().is_some_and(|p| {
        Path::new(p)
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("python"))
    });
    let mut program: Vec<String> = Vec::new();
    let mut args = command.iter();
    while let Some(a) = args.next() {
        match a.as_str() {
            "-m" if python => {
                program.push(a.clone());
                program.extend(args.next().cloned());
                break;
            }
            _ if python && program.len() == 1 && a.starts_with('-') => {}
            _ if a.starts_with('-') || program.len() == 3 => break,
            _ => program.push(a.clone()),
        }
    }
    format!("tuner sweep of {} on {gpu}", Program::display(&program))
}

/// Write `<stem>.svg` and `<stem>.png`: the plot of `command`'s trials on the GPU named `gpu` by
/// NVML (else by what the trials' program reported).
pub fn render(
    trials: &[TrialResult],
    command: &[String],
    gpu: Option<&str>,
    stem: &Path,
) -> Result<(PathBuf, PathBuf), String> {
    let (svg, png) = (stem.with_extension("svg"), stem.with_extension("png"));
    let gpu = gpu_name(gpu, trials);
    let figure = SweepFigure(lines(trials), title(command, &gpu));
    plotting::render(&figure, (1600, 720), &svg, &png)?;
    Ok((svg, png))
}

/// The lines of the plot and its title.
struct SweepFigure(Vec<Line>, String);

impl Figure for SweepFigure {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String>
    where
        DB::ErrorType: 'static,
    {
        let panels = plotting::titled_panels(root, &self.1, 2)?;
        let lines = &self.0;
        let all = || lines.iter().flat_map(|(_, p)| p.iter());
        let bmax = all().map(|p| p.0).fold(1.0, f64::max);
        let bmin = all().map(|p| p.0).fold(bmax, f64::min);
        let x_range = (bmin * 0.7, bmax * 1.5);
        // Left: throughput, log-log (it spans decades).
        let (y0, y1) = decades(all().map(|p| p.1), 1.0).unwrap_or((1.0, 10.0));
        panel(
            &panels[0],
            lines,
            x_range,
            (y0..y1).log_scale(),
            "samples / s (median step)",
            |p| p.1,
        )?;
        // Right: memory, linear from zero (it grows linearly with the batch), in MB.
        let top = all().map(|p| p.2 * 1e3).fold(0.0, f64::max).max(1.0) * 1.15;
        panel(
            &panels[1],
            lines,
            x_range,
            0.0..top,
            "peak memory (MB): the program's own, else NVML's",
            |p| p.2 * 1e3,
        )
    }
}

/// One panel: batch size (log) across, `value` of each point up, one line per configuration.
fn panel<DB: DrawingBackend, Y>(
    area: &DrawingArea<DB, Shift>,
    lines: &[Line],
    x_range: (f64, f64),
    y: Y,
    y_desc: &str,
    value: impl Fn(&(f64, f64, f64)) -> f64,
) -> Result<(), String>
where
    DB::ErrorType: 'static,
    Y: AsRangedCoord<Value = f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let mut chart = ChartBuilder::on(area)
        .margin(20)
        .x_label_area_size(56)
        .y_label_area_size(80)
        .build_cartesian_2d((x_range.0..x_range.1).log_scale(), y)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("batch size")
        .y_desc(y_desc)
        .axis_desc_style((FONT, 18))
        .label_style((FONT, 15))
        .x_label_formatter(&|v| short_number(*v))
        .y_label_formatter(&|v| short_number(*v))
        .light_line_style(GRID_LIGHT)
        .bold_line_style(GRID_BOLD)
        .draw()
        .map_err(err)?;
    for (i, (label, points)) in lines.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let pts: Vec<(f64, f64)> = points.iter().map(|p| (p.0, value(p))).collect();
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(3)))
            .map_err(err)?
            .label(label.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(3))
            });
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 4, color.filled())))
            .map_err(err)?;
    }
    plotting::draw_legend(&mut chart)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::Status;
    use crate::program::{Params, Precision};

    fn trial(batch: usize, amp: Precision, status: Status) -> TrialResult {
        let params = Params {
            batch_size: batch,
            workers: 4,
            amp,
            ..Params::default()
        };
        let mut t = TrialResult {
            status,
            params,
            ..TrialResult::default()
        };
        if status == Status::Ok {
            t.measured.samples_per_s = Some(1000.0 * batch as f64);
            t.memory.peak_bytes = Some(50_000_000 * batch as u64);
        }
        t
    }

    #[test]
    fn the_title_names_the_program_and_the_gpu_not_every_flag() {
        for (command, program) in [
            (
                "python3 examples/pytorch/train_resnet.py --batch-size {batch_size} --lr {lr}",
                "python3 examples/pytorch/train_resnet.py",
            ),
            (
                "python3 -u -m team.train --batch-size {batch_size}",
                "python3 -m team.train",
            ),
            (
                "/usr/bin/python3.12 -O train.py --lr 0.1",
                "/usr/bin/python3.12 train.py",
            ),
            ("mlp-train --preset medium", "mlp-train"),
            ("torchrun a b c d", "torchrun a b"),
        ] {
            let argv: Vec<String> = command.split(' ').map(String::from).collect();
            assert_eq!(
                title(&argv, "NVIDIA H100 80GB HBM3"),
                format!("tuner sweep of {program} on NVIDIA H100 80GB HBM3"),
                "{command}"
            );
        }
    }

    #[test]
    fn one_line_per_configuration_and_only_ok_points() {
        let trials = vec![
            trial(1, Precision::Off, Status::Ok),
            trial(2, Precision::Off, Status::Oom),
            trial(1, Precision::Bf16, Status::Ok),
            trial(2, Precision::Bf16, Status::Ok),
        ];
        let l = lines(&trials);
        assert_eq!(l.len(), 2);
        assert_eq!(l[0].1.len(), 1);
        assert_eq!(l[1].1.len(), 2);
        assert!(l[1].0.contains("bf16"), "{}", l[1].0);
    }

    #[test]
    fn renders_png_and_svg() {
        let dir = std::env::temp_dir().join(format!("tuner-plot-{}", std::process::id()));
        let trials = vec![
            trial(1, Precision::Off, Status::Ok),
            trial(4, Precision::Off, Status::Ok),
        ];
        let (svg, png) = render(
            &trials,
            &["train.py".into()],
            Some("test"),
            &dir.join("sweep"),
        )
        .unwrap();
        let png_bytes = std::fs::read(&png).unwrap();
        assert_eq!(&png_bytes[1..4], b"PNG");
        assert!(std::fs::read_to_string(&svg).unwrap().contains("<svg"));
        let _ = std::fs::remove_dir_all(dir);
    }
}
