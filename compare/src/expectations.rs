//! The accepted figures per GPU (`results/<gpu>/expectations.json`): one timing per variant,
//! written by `--update-expectations` from a real run and read back by every compare.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::rule::Timing;

pub const EXPECTATIONS_SCHEMA_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Expectations {
    pub schema_version: u32,
    /// The GPU model the figures were measured on (device name).
    pub gpu: String,
    pub driver_version: String,
    pub git_commit: String,
    pub updated: String,
    /// "lesson/variant" -> timing.
    pub variants: BTreeMap<String, Timing>,
}

#[derive(Debug, thiserror::Error)]
pub enum ExpectationsError {
    #[error(
        "{0}: no expectations for this GPU yet: run with --update-expectations to record them"
    )]
    Missing(String),
    /// Unreadable, not JSON, another schema version or not an expectations file.
    #[error("{0}")]
    Read(String),
    #[error("{path}: {message}")]
    Schema { path: String, message: String },
    #[error("{path}: could not write: {message}")]
    Write { path: String, message: String },
}

/// Where a GPU's expectations live, under `root` (the repository's results folder).
pub fn path_for(root: &Path, model_slug: &str) -> PathBuf {
    root.join(model_slug).join("expectations.json")
}

impl Expectations {
    pub fn read(path: &Path) -> Result<Expectations, ExpectationsError> {
        let p = path.display().to_string();
        if !path.exists() {
            return Err(ExpectationsError::Missing(p));
        }
        let e: Expectations = common::files::read_versioned(
            path,
            EXPECTATIONS_SCHEMA_VERSION,
            "an expectations file",
            "re-record with --update-expectations",
        )
        .map_err(|e| ExpectationsError::Read(e.to_string()))?;
        if let Some((name, _)) = e
            .variants
            .iter()
            .find(|(_, t)| !(t.median_s > 0.0 && t.median_s.is_finite()))
        {
            return Err(ExpectationsError::Schema {
                path: p,
                message: format!("{name}: the median must be a positive number of seconds"),
            });
        }
        Ok(e)
    }

    pub fn write(&self, path: &Path) -> Result<(), ExpectationsError> {
        let json = serde_json::to_vec_pretty(self).expect("expectations serialize");
        common::files::write_atomically(path, &json).map_err(|e| ExpectationsError::Write {
            path: path.display().to_string(),
            message: e.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Expectations {
        let mut variants = BTreeMap::new();
        variants.insert(
            "ch1-intensity/fused".to_string(),
            Timing {
                median_s: 1.8e-4,
                noise: 0.003,
                samples: 500,
            },
        );
        Expectations {
            schema_version: EXPECTATIONS_SCHEMA_VERSION,
            gpu: "NVIDIA H200".into(),
            driver_version: "580.159.04".into(),
            git_commit: "abc".into(),
            updated: "2026-11-21T00:00:00Z".into(),
            variants,
        }
    }

    fn dir() -> PathBuf {
        let d = std::env::temp_dir().join(format!("expectations-test-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn round_trip() {
        let path = path_for(&dir(), "h200");
        sample().write(&path).unwrap();
        assert_eq!(Expectations::read(&path).unwrap(), sample());
        assert!(path.ends_with("h200/expectations.json"));
    }

    #[test]
    fn errors_say_what_to_do() {
        let d = dir();
        let missing = d.join("none.json");
        assert!(Expectations::read(&missing)
            .unwrap_err()
            .to_string()
            .contains("--update-expectations"));
        let bad = d.join("bad.json");
        std::fs::write(&bad, "[1, 2").unwrap();
        assert!(Expectations::read(&bad)
            .unwrap_err()
            .to_string()
            .contains("not valid JSON"));
        std::fs::write(&bad, r#"{"schema_version": 99}"#).unwrap();
        assert!(Expectations::read(&bad)
            .unwrap_err()
            .to_string()
            .contains("re-record"));
        std::fs::write(&bad, r#"{"gpu": "x"}"#).unwrap();
        assert!(Expectations::read(&bad)
            .unwrap_err()
            .to_string()
            .contains("no schema_version"));
        std::fs::write(&bad, r#"{"schema_version": 1, "gpu": 3}"#).unwrap();
        assert!(Expectations::read(&bad)
            .unwrap_err()
            .to_string()
            .contains("not an expectations file"));
        let mut neg = sample();
        neg.variants
            .get_mut("ch1-intensity/fused")
            .unwrap()
            .median_s = -1.0;
        neg.write(&bad).unwrap();
        assert!(Expectations::read(&bad)
            .unwrap_err()
            .to_string()
            .contains("positive"));
    }
}
