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
    /// Read what the page needs from `path`. A file that is not there is left out of the page
    /// (its pairs "not run", no roofline, no sweep plot); one that is there and cannot be read
    /// becomes a note saying why.
    pub fn load(path: &Path) -> Folder {
        let mut notes = Vec::new();
        let file = |name: &str| Some(path.join(name)).filter(|p| p.exists());
        let compare = file(COMPARE_FILE)
            .and_then(|p| CompareReport::read(&p).map_err(|e| notes.push(e)).ok());
        let roofline = file(ROOFLINE_FILE).and_then(|p| {
            MeasuredRoofline::read(&p)
                .map_err(|e| notes.push(format!("{e} (the roofline is not drawn)")))
                .ok()
        });
        let sweep_plot = [("svg", "image/svg+xml"), ("png", "image/png")]
            .iter()
            .find_map(|(ext, mime)| {
                let p = path.join(format!("{SWEEP_PLOT}.{ext}"));
                Some(Image {
                    name: p.file_name()?.to_string_lossy().to_string(),
                    mime,
                    bytes: std::fs::read(&p).ok()?,
                })
            });
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

/// How many GPUs of one host a results folder holds, from its name: "h100x2" holds 2, "h100"
/// (one GPU's results) none.
pub fn gpus_of_host(path: &Path) -> Option<usize> {
    let name = path.file_name()?.to_str()?;
    let (slug, count) = name.rsplit_once('x')?;
    let digits = !count.is_empty() && count.bytes().all(|b| b.is_ascii_digit());
    let n: usize = count.parse().ok()?;
    (digits && !slug.is_empty() && n >= 2).then_some(n)
}

/// One lesson's report in one results folder: a column of the several-GPU tables.
pub struct LessonColumn {
    /// "NVIDIA H100 80GB HBM3 × 2" (one GPU: the name alone).
    pub label: String,
    /// The file, as the folder was given.
    pub file: PathBuf,
    pub report: LessonReport,
}

/// The lessons run on several GPUs of one host, each beside its runs on fewer: per lesson
/// file found in a several-GPU folder ("ch1-data-parallel"), that file's report in every
/// folder that has it, one-GPU folders first.
pub fn several_gpus(single: &[PathBuf], several: &[PathBuf]) -> Vec<(String, Vec<LessonColumn>)> {
    let mut stems: Vec<String> = Vec::new();
    for dir in several {
        let mut found: Vec<String> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .filter(|p| LessonReport::read_json(p).is_ok())
            .filter_map(|p| Some(p.file_stem()?.to_str()?.to_string()))
            .collect();
        found.sort();
        for stem in found {
            if !stems.contains(&stem) {
                stems.push(stem);
            }
        }
    }
    stems
        .into_iter()
        .map(|stem| {
            let columns = single
                .iter()
                .chain(several)
                .filter_map(|dir| {
                    let file = dir.join(format!("{stem}.json"));
                    let report = LessonReport::read_json(&file).ok()?;
                    let label = match gpus_of_host(dir) {
                        Some(n) => format!("{} × {n}", report.device.name),
                        None => report.device.name.clone(),
                    };
                    Some(LessonColumn {
                        label,
                        file,
                        report,
                    })
                })
                .collect();
            (stem, columns)
        })
        .collect()
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
