//! The chapter's report page: one self-contained HTML file (inline SVG and CSS, nothing fetched)
//! drawn from results folders with no GPU: the pairs table, the lessons run on several GPUs of
//! one host beside their runs on one (folders named `<gpu>x<N>`), the speedups as bars with
//! their uncertainty, the roofline with each pair placed (baseline -> optimized), the tuner's
//! sweep plot, and the gate's verdicts, GPUs side by side. What a folder does not have is left
//! out; a file of an older schema gets a note on the page, never a failure.
//!
//! A small script at the end of the page counts what the browser drew (bars, pair points,
//! images, errors) and writes the counts into the page, so a headless browser's DOM dump can
//! check the charts rendered.

mod charts;
mod folder;
mod html;

use std::path::{Path, PathBuf};

pub use folder::{gpus_of_host, several_gpus, LessonColumn};
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
    if let Some(f) = folders.iter().find(|f| !f.is_dir()) {
        anyhow::bail!("{}: not a results folder (no such directory)", f.display());
    }
    let (several, single): (Vec<PathBuf>, Vec<PathBuf>) = folders
        .iter()
        .cloned()
        .partition(|f| gpus_of_host(f).is_some());
    let loaded: Vec<Folder> = single.iter().map(|f| Folder::load(f)).collect();
    Ok(html::page(&loaded, &several_gpus(&single, &several)))
}

/// Write the page to `file`; returns a line saying what it holds.
pub fn write(file: &Path, folders: &[PathBuf]) -> anyhow::Result<String> {
    let (page, counts) = render(folders)?;
    common::files::write_atomically(file, page.as_bytes())
        .map_err(|e| anyhow::anyhow!("{}: could not write the page: {e}", file.display()))?;
    let one = folders.iter().filter(|f| gpus_of_host(f).is_none()).count();
    let several = match folders.len() - one {
        0 => String::new(),
        1 => ", 1 folder of several GPUs".into(),
        n => format!(", {n} folders of several GPUs"),
    };
    Ok(format!(
        "wrote {} ({one} GPU{}{several}: {} bars, {} roofline points, {} sweep plot{})",
        file.display(),
        if one == 1 { "" } else { "s" },
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
    use common::report::{LessonReport, Status, VariantReport};
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
    fn a_missing_folder_is_an_error_and_an_empty_one_a_page_without_to_dos() {
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
        // What the folder lacks is left out: no notes, no empty roofline or sweep sections.
        for absent in ["id=\"notes\"", "id=\"roofline\"", "id=\"sweep\"", "run "] {
            assert!(!page.contains(absent), "{absent}: {page}");
        }
        assert!(page.contains("id=\"pairs\""), "{page}");
        assert!(default_folders(&d).unwrap().contains(&empty));
        assert!(default_folders(&d.join("none")).is_err());
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_folder_named_for_several_gpus_is_told_apart_by_its_count() {
        let n = |name: &str| gpus_of_host(Path::new("results").join(name).as_path());
        assert_eq!(n("h100x2"), Some(2));
        assert_eq!(n("h200x4"), Some(4));
        assert_eq!(n("rtx-4090x8"), Some(8));
        for one in [
            "h100", "h200", "x2", "h100x1", "h100x", "h100x2b", "titan-x",
        ] {
            assert_eq!(n(one), None, "{one}");
        }
    }

    /// A made-up report of `lesson` on `gpu`: `variants` (name, median ms, speedup).
    fn lesson_report(gpu: &str, lesson: &str, variants: &[(&str, f64, f64)]) -> LessonReport {
        let mut device = common::testing::h200_info();
        device.name = gpu.into();
        LessonReport {
            schema_version: common::report::SCHEMA_VERSION,
            lesson: lesson.into(),
            device,
            provenance: common::report::Provenance::now(),
            parameters: serde_json::json!({}),
            ceilings: Vec::new(),
            variants: variants
                .iter()
                .map(|&(name, median, speedup)| {
                    let mut v = variant(Work::default(), None);
                    v.name = name.into();
                    v.time_ms = Summary::of(&[median, median]);
                    v.speedup = Some(speedup);
                    v
                })
                .collect(),
            sections: Vec::new(),
        }
    }

    #[test]
    fn several_gpus_of_a_host_are_shown_beside_one() {
        let d = std::env::temp_dir().join(format!("page-several-{}", std::process::id()));
        let (one, two) = (d.join("h100"), d.join("h100x2"));
        std::fs::create_dir_all(&one).unwrap();
        std::fs::create_dir_all(&two).unwrap();
        let h100 = "NVIDIA H100 80GB HBM3";
        let lesson = "ch1-data-parallel";
        lesson_report(
            h100,
            lesson,
            &[("baseline", 20.0, 1.0), ("optimized", 10.0, 2.0)],
        )
        .write_json(&one.join("ch1-data-parallel.json"))
        .unwrap();
        lesson_report(
            h100,
            lesson,
            &[("baseline", 11.0, 1.0), ("optimized", 5.25, 2.1)],
        )
        .write_json(&two.join("ch1-data-parallel.json"))
        .unwrap();
        // Files of the folder that are no lesson report are not shown.
        std::fs::write(two.join("topology.json"), "{\"GPU0\": \"NV18\"}").unwrap();
        let found = several_gpus(std::slice::from_ref(&one), std::slice::from_ref(&two));
        assert_eq!(found.len(), 1);
        let (stem, columns) = &found[0];
        assert_eq!(stem, "ch1-data-parallel");
        let labels: Vec<&str> = columns.iter().map(|c| c.label.as_str()).collect();
        assert_eq!(labels, [h100.to_string(), format!("{h100} × 2")]);

        let (page, counts) = render(&[one.clone(), two.clone()]).unwrap();
        assert_eq!(counts.bars, 0);
        assert!(page.contains("id=\"several-gpus\""), "{page}");
        assert!(page.contains("NVIDIA H100 80GB HBM3 × 2"), "{page}");
        // The one-GPU folder's pairs table has a column; the several-GPU one is not a GPU of it.
        let pairs =
            &page[page.find("id=\"pairs\"").unwrap()..page.find("id=\"several-gpus\"").unwrap()];
        assert!(!pairs.contains("h100x2"), "{pairs}");
        let several = &page[page.find("id=\"several-gpus\"").unwrap()..];
        for cell in ["5.250 ms", "2.10x", "10.000 ms", "2.00x"] {
            assert!(several.contains(cell), "{cell}: {several}");
        }
        let line = write(&d.join("page.html"), &[one, two]).unwrap();
        assert!(line.contains("(1 GPU, 1 folder of several GPUs:"), "{line}");
        let _ = std::fs::remove_dir_all(&d);
    }
}
