//! The accepted figures per GPU model (`results/<gpu>/expectations.json`), keyed by what paces
//! each variant: a device-paced variant has one timing for every machine with this GPU model;
//! a host-paced one has the runs recorded on each machine, and is judged only on a machine
//! that has some. Written by `--update-expectations` from real runs, read by every compare.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::host::{Host, Pacing};
use crate::rule::{Timing, MAX_RUNS};

pub const EXPECTATIONS_SCHEMA_VERSION: u32 = 2;

/// Machines kept per file; the one updated longest ago goes first.
pub const MAX_HOSTS: usize = 8;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Expectations {
    pub schema_version: u32,
    /// The GPU model the figures were measured on (device name).
    pub gpu: String,
    pub driver_version: String,
    pub git_commit: String,
    pub updated: String,
    /// Device-paced variants: "lesson/variant" -> timing, for any machine with this GPU model.
    pub device: BTreeMap<String, Timing>,
    /// Host-paced variants: the runs recorded on each machine.
    #[serde(default)]
    pub hosts: Vec<HostRuns>,
}

/// The runs of host-paced variants recorded on one machine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostRuns {
    pub host: Host,
    pub updated: String,
    /// "lesson/variant" -> its runs, oldest first, at most [MAX_RUNS].
    pub variants: BTreeMap<String, Vec<Timing>>,
}

/// What there is to judge one variant against.
#[derive(Debug, Clone, PartialEq)]
pub enum Expected<'a> {
    /// A device-paced variant's timing for this GPU model.
    Device(Timing),
    /// A host-paced variant's runs on this machine.
    Runs(&'a [Timing]),
    /// Nothing: why, in words.
    Nothing(String),
}

/// The first version: one timing per variant and GPU model, whatever paced it.
#[derive(Deserialize)]
struct ExpectationsV1 {
    gpu: String,
    driver_version: String,
    git_commit: String,
    updated: String,
    variants: BTreeMap<String, Timing>,
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
    /// Empty expectations for a GPU model.
    pub fn new(gpu: &str, driver_version: &str) -> Expectations {
        Expectations {
            schema_version: EXPECTATIONS_SCHEMA_VERSION,
            gpu: gpu.to_string(),
            driver_version: driver_version.to_string(),
            git_commit: String::new(),
            updated: String::new(),
            device: BTreeMap::new(),
            hosts: Vec::new(),
        }
    }

    /// Read a file of this version, or of the first (its timings become device-paced ones: a
    /// host-paced variant finds no runs there and is recorded afresh).
    pub fn read(path: &Path) -> Result<Expectations, ExpectationsError> {
        let p = path.display().to_string();
        if !path.exists() {
            return Err(ExpectationsError::Missing(p));
        }
        let value = crate::read_any_version(
            path,
            &[1, EXPECTATIONS_SCHEMA_VERSION],
            "an expectations file",
            "re-record with --update-expectations",
        )
        .map_err(|e| ExpectationsError::Read(e.to_string()))?;
        let not_one = |e: serde_json::Error| {
            ExpectationsError::Read(format!("{p}: not an expectations file: {e}"))
        };
        let e = if value["schema_version"] == 1 {
            let v1: ExpectationsV1 = serde_json::from_value(value).map_err(not_one)?;
            Expectations {
                git_commit: v1.git_commit,
                updated: v1.updated,
                device: v1.variants,
                ..Expectations::new(&v1.gpu, &v1.driver_version)
            }
        } else {
            serde_json::from_value(value).map_err(not_one)?
        };
        let timings = e.device.iter().chain(
            e.hosts
                .iter()
                .flat_map(|h| h.variants.iter())
                .flat_map(|(name, runs)| runs.iter().map(move |t| (name, t))),
        );
        for (name, t) in timings {
            if !(t.median_s > 0.0 && t.median_s.is_finite()) {
                return Err(ExpectationsError::Schema {
                    path: p,
                    message: format!("{name}: the median must be a positive number of seconds"),
                });
            }
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

    /// What variant `id`, paced by `pacing`, is judged against on `host`.
    pub fn expected(&self, id: &str, pacing: Pacing, host: &Host) -> Expected<'_> {
        match pacing {
            Pacing::Device => match self.device.get(id) {
                Some(t) => Expected::Device(*t),
                None => Expected::Nothing(format!("not recorded for the {}", self.gpu)),
            },
            Pacing::Host => match self
                .hosts
                .iter()
                .find(|h| &h.host == host)
                .and_then(|h| h.variants.get(id))
            {
                Some(runs) => Expected::Runs(runs),
                None => Expected::Nothing(format!(
                    "host-paced, and no run of it was recorded on this machine, {} ({} other machine{} recorded)",
                    host.label(),
                    self.hosts.len(),
                    if self.hosts.len() == 1 { "" } else { "s" }
                )),
            },
        }
    }

    /// Record one run of variant `id`: a device-paced timing replaces the model's; a
    /// host-paced one joins this machine's runs (the oldest beyond [MAX_RUNS] dropped). Either
    /// way the variant is dropped from the other kind, so a lesson that changes how it times a
    /// variant starts afresh.
    pub fn record(&mut self, id: &str, pacing: Pacing, timing: Timing, host: &Host, now: &str) {
        match pacing {
            Pacing::Device => {
                self.device.insert(id.to_string(), timing);
                for h in &mut self.hosts {
                    h.variants.remove(id);
                }
            }
            Pacing::Host => {
                self.device.remove(id);
                let i = match self.hosts.iter().position(|h| &h.host == host) {
                    Some(i) => i,
                    None => {
                        self.hosts.push(HostRuns {
                            host: host.clone(),
                            updated: String::new(),
                            variants: BTreeMap::new(),
                        });
                        self.hosts.len() - 1
                    }
                };
                let h = &mut self.hosts[i];
                h.updated = now.to_string();
                let runs = h.variants.entry(id.to_string()).or_default();
                runs.push(timing);
                if runs.len() > MAX_RUNS {
                    runs.drain(..runs.len() - MAX_RUNS);
                }
            }
        }
        self.hosts.retain(|h| !h.variants.is_empty());
        // RFC 3339 UTC times sort as text.
        self.hosts.sort_by(|a, b| b.updated.cmp(&a.updated));
        self.hosts.truncate(MAX_HOSTS);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing(median_s: f64) -> Timing {
        Timing {
            median_s,
            noise: 0.003,
            samples: 500,
        }
    }

    fn host(name: &str) -> Host {
        Host {
            name: name.into(),
            cpu_model: "AMD EPYC 9454".into(),
            cpus: 16,
            gpu_uuid: format!("GPU-{name}"),
        }
    }

    fn sample() -> Expectations {
        let mut e = Expectations::new("NVIDIA H200", "580.159.04");
        e.git_commit = "abc".into();
        e.updated = "2026-11-21T00:00:00Z".into();
        e.record(
            "ch1-intensity/fused",
            Pacing::Device,
            timing(1.8e-4),
            &host("a"),
            "2026-11-01T00:00:00Z",
        );
        e.record(
            "ch1-basics/training:baseline",
            Pacing::Host,
            timing(0.09),
            &host("a"),
            "2026-11-01T00:00:00Z",
        );
        e
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
    fn the_first_version_reads_as_device_paced_timings() {
        let path = dir().join("v1.json");
        std::fs::write(
            &path,
            r#"{"schema_version": 1, "gpu": "NVIDIA H100 80GB HBM3", "driver_version": "580",
                "git_commit": "06cdfd8", "updated": "2026-11-23T18:51:22Z",
                "variants": {"ch1-gemm/strided": {"median_s": 1.15e-5, "noise": 0.003, "samples": 900},
                             "ch1-basics/training:baseline": {"median_s": 0.109, "noise": 0.02, "samples": 20}}}"#,
        )
        .unwrap();
        let e = Expectations::read(&path).unwrap();
        assert_eq!(e.schema_version, EXPECTATIONS_SCHEMA_VERSION);
        assert_eq!(e.device.len(), 2);
        let h = host("a");
        assert!(matches!(
            e.expected("ch1-gemm/strided", Pacing::Device, &h),
            Expected::Device(t) if t.median_s == 1.15e-5
        ));
        assert!(matches!(
            e.expected("ch1-basics/training:baseline", Pacing::Host, &h),
            Expected::Nothing(why) if why.contains("no run of it was recorded on this machine")
        ));
    }

    #[test]
    fn host_paced_runs_belong_to_their_machine() {
        let mut e = sample();
        let (a, b) = (host("a"), host("b"));
        let id = "ch1-basics/training:baseline";
        assert!(matches!(e.expected(id, Pacing::Host, &a), Expected::Runs(r) if r.len() == 1));
        assert!(matches!(
            e.expected(id, Pacing::Host, &b),
            Expected::Nothing(_)
        ));
        // The same name and CPU with another GPU is another machine.
        let a_other_gpu = Host {
            gpu_uuid: "GPU-else".into(),
            ..a.clone()
        };
        assert!(matches!(
            e.expected(id, Pacing::Host, &a_other_gpu),
            Expected::Nothing(_)
        ));
        for k in 0..12 {
            e.record(id, Pacing::Host, timing(0.1 + k as f64 * 1e-3), &a, "t2");
        }
        let Expected::Runs(runs) = e.expected(id, Pacing::Host, &a) else {
            panic!("runs recorded")
        };
        assert_eq!(runs.len(), MAX_RUNS);
        assert_eq!(
            runs.last().unwrap().median_s,
            0.1 + 11.0 * 1e-3,
            "newest last"
        );
        // A variant that becomes device-paced leaves the machines' runs.
        e.record(id, Pacing::Device, timing(0.08), &a, "t3");
        assert!(e.hosts.is_empty());
        assert!(matches!(
            e.expected(id, Pacing::Device, &b),
            Expected::Device(_)
        ));
    }

    #[test]
    fn machines_beyond_the_limit_drop_the_oldest() {
        let mut e = sample();
        for k in 0..MAX_HOSTS + 2 {
            e.record(
                "ch1-graph-shapes/bucketed",
                Pacing::Host,
                timing(1e-3),
                &host(&format!("m{k}")),
                &format!("2026-11-{:02}T00:00:00Z", 10 + k),
            );
        }
        assert_eq!(e.hosts.len(), MAX_HOSTS);
        assert!(e
            .hosts
            .iter()
            .all(|h| h.host.name != "a" && h.host.name != "m0"));
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
        std::fs::write(&bad, r#"{"schema_version": 2, "gpu": 3}"#).unwrap();
        assert!(Expectations::read(&bad)
            .unwrap_err()
            .to_string()
            .contains("not an expectations file"));
        let mut neg = sample();
        neg.device.get_mut("ch1-intensity/fused").unwrap().median_s = -1.0;
        neg.write(&bad).unwrap();
        assert!(Expectations::read(&bad)
            .unwrap_err()
            .to_string()
            .contains("positive"));
        let mut neg = sample();
        neg.hosts[0]
            .variants
            .get_mut("ch1-basics/training:baseline")
            .unwrap()[0]
            .median_s = 0.0;
        neg.write(&bad).unwrap();
        assert!(Expectations::read(&bad)
            .unwrap_err()
            .to_string()
            .contains("positive"));
    }
}
