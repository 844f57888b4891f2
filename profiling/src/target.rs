//! The program being profiled and where its reports go:
//! `<out-dir>/<lesson>-<variant>-<UTC time>`, e.g. `results/profiles/ch1-intensity-all-20260121T214925Z`.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// Default folder for reports, relative to where the wrapper runs (the workspace root).
pub const DEFAULT_OUT_DIR: &str = "results/profiles";

/// The lesson and variant a report is named after.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Naming {
    pub lesson: String,
    pub variant: String,
}

/// Name a report after the program unless told: `ch1-intensity` runs every variant ("all"),
/// and a side's binary names its lesson and side (`ch1-gemm-baseline`, variant "all" of what it
/// runs).
pub fn naming(program: &Path, lesson: Option<&str>, variant: Option<&str>) -> Naming {
    let stem = program
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "program".into());
    Naming {
        lesson: sanitize(lesson.unwrap_or(&stem)),
        variant: sanitize(variant.unwrap_or("all")),
    }
}

/// Keep names file-system and shell friendly: letters, digits, '.', '_' and '-'.
pub fn sanitize(s: &str) -> String {
    let cleaned: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    if cleaned.is_empty() {
        "unnamed".into()
    } else {
        cleaned
    }
}

/// "20260121T214925Z" for a time.
pub fn compact_utc(t: SystemTime) -> String {
    common::files::rfc3339_utc(t).replace(['-', ':'], "")
}

/// The report path without extension (each tool adds its own).
pub fn report_base(out_dir: &Path, naming: &Naming, time: SystemTime) -> PathBuf {
    out_dir.join(format!(
        "{}-{}-{}",
        naming.lesson,
        naming.variant,
        compact_utc(time)
    ))
}

/// Files in the base's folder whose name starts with the base's name and ends with `ext`
/// (nsys numbers the reports of repeated capture ranges).
pub fn reports_with(base: &Path, ext: &str) -> Vec<PathBuf> {
    let (Some(dir), Some(stem)) = (base.parent(), base.file_name()) else {
        return Vec::new();
    };
    let stem = stem.to_string_lossy().into_owned();
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .map(|n| {
                    let n = n.to_string_lossy();
                    n.starts_with(&stem) && n.ends_with(ext)
                })
                .unwrap_or(false)
        })
        .collect();
    found.sort();
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn names_come_from_the_program_or_the_flags() {
        let n = naming(Path::new("target/release/ch1-intensity"), None, None);
        assert_eq!(
            (n.lesson.as_str(), n.variant.as_str()),
            ("ch1-intensity", "all")
        );
        let n = naming(Path::new("target/release/ch1-gemm-optimized"), None, None);
        assert_eq!(
            (n.lesson.as_str(), n.variant.as_str()),
            ("ch1-gemm-optimized", "all")
        );
        let n = naming(Path::new("ch1-gemm"), Some("gemm"), Some("strided"));
        assert_eq!((n.lesson.as_str(), n.variant.as_str()), ("gemm", "strided"));
        let n = naming(Path::new("x/ch1-intensity"), None, Some("fused kernel/2"));
        assert_eq!(n.variant, "fused_kernel_2");
    }

    #[test]
    fn report_paths_carry_lesson_variant_and_time() {
        let t = UNIX_EPOCH + Duration::from_secs(1_795_297_765);
        let n = Naming {
            lesson: "ch1-intensity".into(),
            variant: "fused".into(),
        };
        assert_eq!(
            report_base(Path::new("results/profiles"), &n, t),
            PathBuf::from("results/profiles/ch1-intensity-fused-20261121T214925Z")
        );
    }

    #[test]
    fn reports_are_found_by_prefix_and_extension() {
        let scratch = tempfile::tempdir().unwrap();
        let d = scratch.path();
        for f in [
            "a-all-1.nsys-rep",
            "a-all-1.2.nsys-rep",
            "a-all-1.ncu-rep",
            "b.nsys-rep",
        ] {
            std::fs::write(d.join(f), "").unwrap();
        }
        let got = reports_with(&d.join("a-all-1"), ".nsys-rep");
        let names: Vec<String> = got
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec!["a-all-1.2.nsys-rep", "a-all-1.nsys-rep"]);
    }
}
