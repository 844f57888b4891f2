//! The chapter's report page: one self-contained HTML file (inline SVG and CSS, nothing fetched)
//! drawn from results folders with no GPU: the pairs table, the speedups as bars with their
//! uncertainty, the roofline with each pair placed (baseline -> optimized), the tuner's sweep
//! plot, and the gate's verdicts, GPUs side by side. A folder whose files are missing or of an
//! older schema gets a note on the page, never a failure.
//!
//! A small script at the end of the page counts what the browser drew (bars, pair points,
//! images, errors) and writes the counts into the page, so a headless browser's DOM dump can
//! check the charts rendered.

mod charts;
mod html;

use std::path::{Path, PathBuf};

use ch1_roofline::report::RooflineReport;
use common::report::{LessonReport, Status, VariantReport};

use crate::outcome::{CompareReport, PairRow, RunStatus};

/// The files of a results folder the page reads.
pub const COMPARE_FILE: &str = "compare.json";
pub const ROOFLINE_FILE: &str = "ch1-roofline.json";
pub const SWEEP_PLOT: &str = "tuner-sweep";

/// One GPU's results, as far as they could be read; what could not be is in `notes`.
pub struct Folder {
    pub path: PathBuf,
    pub compare: Option<CompareReport>,
    pub roofline: Option<RooflineReport>,
    /// The tuner's sweep plot: its file name and a data URI.
    pub sweep_plot: Option<(String, String)>,
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
            p if p.exists() => LessonReport::read_json(&p)
                .map_err(|e| e.to_string())
                .and_then(|r| {
                    RooflineReport::from_report(&r).map_err(|e| format!("{}: {e}", p.display()))
                })
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
                let bytes = std::fs::read(&p).ok()?;
                Some((
                    p.file_name()?.to_string_lossy().to_string(),
                    html::data_uri(mime, &bytes),
                ))
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
            .or_else(|| self.roofline.as_ref().map(|r| r.device.name.clone()))
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

/// Every folder under `root` (sorted): the default for the page.
pub fn default_folders(root: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let entries = std::fs::read_dir(root).map_err(|e| {
        anyhow::anyhow!(
            "{}: {e}: run from the repository's root or give --results DIR",
            root.display()
        )
    })?;
    let mut dirs: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    if dirs.is_empty() {
        anyhow::bail!("{}: no results folders: give --results DIR", root.display());
    }
    Ok(dirs)
}

/// What the page holds, for its self-check and the caller's summary line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    pub bars: usize,
    pub points: usize,
    pub images: usize,
}

/// The page for `folders` (each must exist) and what it draws.
pub fn render(folders: &[PathBuf]) -> anyhow::Result<(String, Counts)> {
    if folders.is_empty() {
        anyhow::bail!("no results folder given: --results DIR");
    }
    let mut loaded = Vec::new();
    for f in folders {
        if !f.is_dir() {
            anyhow::bail!("{}: not a results folder (no such directory)", f.display());
        }
        loaded.push(Folder::load(f));
    }
    Ok(html::page(&loaded))
}

/// Write the page to `file`; returns a line saying what it holds.
pub fn write(file: &Path, folders: &[PathBuf]) -> anyhow::Result<String> {
    let (page, counts) = render(folders)?;
    common::files::write_atomically(file, page.as_bytes())
        .map_err(|e| anyhow::anyhow!("{}: could not write the page: {e}", file.display()))?;
    Ok(format!(
        "wrote {} ({} GPU{}: {} bars, {} roofline points, {} sweep plot{})",
        file.display(),
        folders.len(),
        if folders.len() == 1 { "" } else { "s" },
        counts.bars,
        counts.points,
        counts.images,
        if counts.images == 1 { "" } else { "s" }
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use common::counters::Work;
    use common::stats::Summary;
    use common::verify::{check, Precision};

    fn variant(work: Work, copy: Option<f64>) -> VariantReport {
        let mut v = VariantReport::checked(
            "v",
            "",
            Precision::Fp32,
            vec![check(&[1.0f32], &[1.0], 1e-5, "ref")],
            work,
        );
        v.time_ms = Summary::of(&[1.0, 1.0]);
        v.fraction_of_copy_bandwidth = copy;
        v
    }

    #[test]
    fn variants_are_placed_by_dram_intensity_or_say_why_not() {
        let w = Work {
            bytes_read: 3_000_000,
            bytes_written: 1_000_000,
            flops: 8_000_000,
        };
        // 8 MFLOP over 4 MB in 1 ms: 2 FLOP/B, 8 GFLOP/s.
        let p = place(&variant(w, Some(0.1))).unwrap();
        assert_eq!(p.intensity, 2.0);
        assert!((p.gflops - 8.0).abs() < 1e-9);
        let no_flops = Work { flops: 0, ..w };
        assert_eq!(
            place(&variant(no_flops, Some(0.93))),
            Err(Unplaced::NoFlops(Some(0.93)))
        );
        assert_eq!(place(&variant(w, None)), Err(Unplaced::HostDevice));
        let mut failed = variant(w, Some(0.1));
        failed.status = Status::Failed;
        assert_eq!(place(&failed), Err(Unplaced::NotTimed));
        // A pair: both sides placed, or one reason in words.
        let pair = place_pair(&variant(w, Some(0.1)), &variant(w, Some(0.2))).unwrap();
        assert_eq!(pair.baseline, pair.optimized, "same work and time");
        assert!(place_pair(
            &variant(no_flops, Some(0.15)),
            &variant(no_flops, Some(0.93))
        )
        .unwrap_err()
        .contains("15% -> 93% of the copy bandwidth"));
        assert!(place_pair(&variant(w, Some(0.1)), &variant(w, None))
            .unwrap_err()
            .contains("PCIe"));
    }

    #[test]
    fn a_missing_folder_is_an_error_and_an_empty_one_a_page_of_notes() {
        let d = std::env::temp_dir().join(format!("page-test-{}", std::process::id()));
        let empty = d.join("h999");
        std::fs::create_dir_all(&empty).unwrap();
        let err = render(&[d.join("nothing-here")]).unwrap_err().to_string();
        assert!(err.contains("not a results folder"), "{err}");
        let (page, counts) = render(std::slice::from_ref(&empty)).unwrap();
        assert_eq!(
            counts,
            Counts {
                bars: 0,
                points: 0,
                images: 0
            }
        );
        assert!(page.contains("compare.json: missing"), "{page}");
        assert!(page.contains("ch1-roofline.json: missing"));
        assert!(default_folders(&d).unwrap().contains(&empty));
        assert!(default_folders(&d.join("none")).is_err());
    }
}
