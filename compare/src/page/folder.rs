//! What the page reads from one GPU's results folder, and where each pair sits on its roofline.

use std::path::{Path, PathBuf};

use common::report::{LessonReport, Status, VariantReport};
use plotting::roofline::{Operation, Roofs};
use serde::de::DeserializeOwned;

use crate::outcome::{CompareReport, PairRow, RunStatus};

/// The files of a results folder the page reads.
pub const COMPARE_FILE: &str = "compare.json";
pub const ROOFLINE_FILE: &str = "ch1-roofline.json";
pub const SWEEP_PLOT: &str = "tuner-sweep";

/// One GPU's results, as far as they could be read; what could not be is in `notes`.
pub struct Folder {
    pub path: PathBuf,
    pub compare: Option<CompareReport>,
    pub roofline: Option<MeasuredRoofline>,
    pub sweep_plot: Option<Image>,
    pub notes: Vec<String>,
}

impl Folder {
    /// Read what the page needs from `path`; every file that is missing or unreadable becomes
    /// a note saying what to do.
    pub fn load(path: &Path) -> Folder {
        let mut notes = Vec::new();
        let file = |name: &str| path.join(name);
        let compare = match file(COMPARE_FILE) {
            p if p.exists() => CompareReport::read(&p).map_err(|e| notes.push(e)).ok(),
            p => {
                notes.push(format!(
                    "{}: missing, so no pairs, bars or verdicts for this GPU: run scripts/gpu-results on it",
                    p.display()
                ));
                None
            }
        };
        let roofline = match file(ROOFLINE_FILE) {
            p if p.exists() => MeasuredRoofline::read(&p)
                .map_err(|e| notes.push(format!("{e} (the roofline is not drawn)")))
                .ok(),
            p => {
                notes.push(format!(
                    "{}: missing, so no roofline for this GPU: run ch1-roofline --json on it",
                    p.display()
                ));
                None
            }
        };
        let sweep_plot = [("svg", "image/svg+xml"), ("png", "image/png")]
            .iter()
            .find_map(|(ext, mime)| {
                let p = file(&format!("{SWEEP_PLOT}.{ext}"));
                Some(Image {
                    name: p.file_name()?.to_string_lossy().to_string(),
                    mime,
                    bytes: std::fs::read(&p).ok()?,
                })
            });
        if sweep_plot.is_none() {
            notes.push(format!(
                "{}: no {SWEEP_PLOT}.svg or .png: run `tuner sweep --plot {SWEEP_PLOT}` on this GPU",
                path.display()
            ));
        }
        Folder {
            path: path.to_path_buf(),
            compare,
            roofline,
            sweep_plot,
            notes,
        }
    }

    /// The GPU's name, from whichever file has it, else the folder's name.
    pub fn gpu(&self) -> String {
        self.compare
            .as_ref()
            .and_then(|c| c.device.as_ref().map(|d| d.name.clone()))
            .or_else(|| self.roofline.as_ref().map(|r| r.gpu.clone()))
            .unwrap_or_else(|| {
                self.path
                    .file_name()
                    .map(|n| n.to_string_lossy().to_string())
                    .unwrap_or_else(|| self.path.display().to_string())
            })
    }

    pub fn pair(&self, id: &str) -> Option<&PairRow> {
        self.compare.as_ref()?.pairs.iter().find(|p| p.id == id)
    }

    /// A variant's report in this folder's compare.
    fn variant(&self, lesson: &str, variant: &str) -> Option<&VariantReport> {
        self.compare
            .as_ref()?
            .variants
            .iter()
            .find(|v| v.lesson == lesson && v.variant == variant && v.status == RunStatus::Ok)?
            .report
            .as_ref()
    }

    /// Each pair of the compare, placed on the roofline or with the reason it is not.
    pub fn placements(&self) -> Vec<(String, Result<Placed, String>)> {
        let Some(c) = &self.compare else {
            return Vec::new();
        };
        c.pairs
            .iter()
            .map(|p| {
                let lesson = p.id.split('/').next().unwrap_or_default();
                let placed = match (
                    self.variant(lesson, &p.baseline),
                    self.variant(lesson, &p.optimized),
                ) {
                    (Some(b), Some(o)) => place_pair(b, o),
                    _ => Err("not verified and timed on this GPU".to_string()),
                };
                (p.id.clone(), placed)
            })
            .collect()
    }
}

/// A variant on the roofline: FLOP per byte of DRAM traffic, and GFLOP/s.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    pub intensity: f64,
    pub gflops: f64,
}

/// A pair on the roofline.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Placed {
    pub baseline: Point,
    pub optimized: Point,
}

/// Why a variant has no place on the roofline.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Unplaced {
    NotTimed,
    /// No floating-point work: the share of the copy bandwidth says how it does instead.
    NoFlops(Option<f64>),
    NoBytes,
    /// Its bytes are host-device copies, not DRAM traffic.
    HostDevice,
}

/// Where a variant sits on the roofline, or why it has no place there.
pub fn place(v: &VariantReport) -> Result<Point, Unplaced> {
    let time = v
        .time_ms
        .as_ref()
        .filter(|_| v.status == Status::Ok)
        .ok_or(Unplaced::NotTimed)?;
    if v.work.flops == 0 {
        return Err(Unplaced::NoFlops(v.fraction_of_copy_bandwidth));
    }
    if v.work.bytes() == 0 {
        return Err(Unplaced::NoBytes);
    }
    if v.fraction_of_copy_bandwidth.is_none() {
        return Err(Unplaced::HostDevice);
    }
    let t = v.work.throughput(time.median / 1e3);
    Ok(Point {
        intensity: t.intensity,
        gflops: t.gflop_per_s,
    })
}

/// A pair on the roofline, or why not, in words.
pub fn place_pair(baseline: &VariantReport, optimized: &VariantReport) -> Result<Placed, String> {
    match (place(baseline), place(optimized)) {
        (Ok(baseline), Ok(optimized)) => Ok(Placed {
            baseline,
            optimized,
        }),
        (Err(Unplaced::NoFlops(b)), Err(Unplaced::NoFlops(o))) => Err(match (b, o) {
            (Some(b), Some(o)) => format!(
                "moves no FLOPs: judged by bandwidth ({:.0}% -> {:.0}% of the copy bandwidth)",
                100.0 * b,
                100.0 * o
            ),
            _ => "moves no FLOPs".to_string(),
        }),
        (Err(why), _) | (_, Err(why)) => Err(match why {
            Unplaced::NotTimed => "not verified and timed on this GPU",
            Unplaced::NoFlops(_) => "one side moves no FLOPs",
            Unplaced::NoBytes => "counts no bytes",
            Unplaced::HostDevice => "its bytes cross PCIe, not DRAM: no arithmetic intensity",
        }
        .to_string()),
    }
}

/// An image file, embedded in the page as it is.
pub struct Image {
    pub name: String,
    pub mime: &'static str,
    pub bytes: Vec<u8>,
}

/// The roofline lesson's result as the page draws it: the GPU's measured roofs and the lesson's
/// own operations, read from the figures its report keeps as data.
#[derive(Debug, Clone, PartialEq)]
pub struct MeasuredRoofline {
    pub gpu: String,
    pub roofs: Roofs,
    pub operations: Vec<Operation>,
}

/// The roofline lesson's report: its name and the sections holding its roofs and operations.
const ROOFLINE_LESSON: &str = "ch1-roofline";
const ROOFS_SECTION: &str = "Roofs";
const OPERATIONS_SECTION: &str = "Operations";

impl MeasuredRoofline {
    /// Read a roofline result; the error says why `path` is not one.
    pub fn read(path: &Path) -> Result<MeasuredRoofline, String> {
        let report = LessonReport::read_json(path).map_err(|e| e.to_string())?;
        let not_one = |why: String| format!("{}: not a roofline result: {why}", path.display());
        if report.lesson != ROOFLINE_LESSON {
            return Err(not_one(format!("it is a {} report", report.lesson)));
        }
        fn data<T: DeserializeOwned>(report: &LessonReport, title: &str) -> Result<T, String> {
            let s = report
                .sections
                .iter()
                .find(|s| s.title == title)
                .ok_or_else(|| format!("no '{title}' section"))?;
            serde_json::from_value(s.data.clone())
                .map_err(|e| format!("the '{title}' section: {e}"))
        }
        #[derive(serde::Deserialize)]
        struct Operations {
            points: Vec<Operation>,
        }
        let operations: Operations = data(&report, OPERATIONS_SECTION).map_err(not_one)?;
        Ok(MeasuredRoofline {
            gpu: report.device.name.clone(),
            roofs: data(&report, ROOFS_SECTION).map_err(not_one)?,
            operations: operations.points,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_committed_roofline_is_read_and_another_report_refused() {
        let results = Path::new(env!("CARGO_MANIFEST_DIR")).join("../results/h100");
        let r = MeasuredRoofline::read(&results.join(ROOFLINE_FILE)).unwrap();
        assert!(r.gpu.contains("H100"), "{}", r.gpu);
        assert!(r.roofs.memory_gbps > 0.0 && r.roofs.compute_roof("fp32").is_some());
        assert!(r
            .operations
            .iter()
            .all(|o| o.intensity > 0.0 && o.gflops > 0.0));
        assert!(!r.operations.is_empty());
        let other = results.join("ch1-gemm.json");
        let err = MeasuredRoofline::read(&other).unwrap_err();
        assert!(
            err.contains("not a roofline result: it is a ch1-gemm report"),
            "{err}"
        );
    }
}
