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
mod folder;
mod html;

use std::path::{Path, PathBuf};

pub use folder::{place, place_pair, Folder, MeasuredRoofline, Placed, Point, Unplaced};
pub use folder::{COMPARE_FILE, ROOFLINE_FILE, SWEEP_PLOT};
pub use html::Counts;

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
    use common::report::{Status, VariantReport};
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
