//! Results: the versioned JSON document every run can write, the markdown table printed on
//! stdout, and the helpers to write files atomically and read them back with clear errors.

use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::bench::Measurement;
use crate::counters::{Throughput, Work};
use crate::error::{Error, Result};
use crate::gpu::DeviceInfo;
use crate::stats::Summary;
use crate::verify::{Precision, Verification};

/// Bumped whenever a field changes meaning or is removed.
pub const SCHEMA_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    pub git_commit: String,
    /// UTC, RFC 3339.
    pub time: String,
    pub command_line: Vec<String>,
    pub host: String,
    /// Seconds from process start to the first timed sample (compile cache, context, inputs).
    pub startup_to_first_sample_s: Option<f64>,
    /// When each startup phase ended, seconds since process start.
    #[serde(default)]
    pub startup_phases: Vec<(String, f64)>,
}

impl Provenance {
    pub fn now() -> Provenance {
        Provenance {
            git_commit: env!("PERF_LESSONS_GIT_COMMIT").to_string(),
            time: rfc3339_utc(std::time::SystemTime::now()),
            command_line: std::env::args().collect(),
            host: std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|s| s.trim().to_string())
                .unwrap_or_default(),
            startup_to_first_sample_s: None,
            startup_phases: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Status {
    Ok,
    Failed,
}

/// One variant's measured and checked result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VariantReport {
    pub name: String,
    pub description: String,
    pub precision: Precision,
    pub status: Status,
    pub verification: Verification,
    pub work: Work,
    /// Milliseconds per run.
    pub time_ms: Option<Summary>,
    /// Rates at the median time.
    pub throughput: Option<Throughput>,
    /// Achieved bandwidth over the measured copy bandwidth (0..1).
    pub fraction_of_copy_bandwidth: Option<f64>,
    /// Baseline median over this median; only when both verified.
    pub speedup: Option<f64>,
    pub measurement: Option<Measurement>,
    /// Why no measurement was taken, when none was.
    pub note: Option<String>,
}

impl VariantReport {
    /// A variant whose output was checked and that has not been timed yet: OK exactly when the
    /// verification passed.
    pub fn checked(
        name: impl Into<String>,
        description: impl Into<String>,
        precision: Precision,
        verification: Verification,
        work: Work,
    ) -> VariantReport {
        VariantReport {
            name: name.into(),
            description: description.into(),
            precision,
            status: if verification.passed {
                Status::Ok
            } else {
                Status::Failed
            },
            verification,
            work,
            time_ms: None,
            throughput: None,
            fraction_of_copy_bandwidth: None,
            speedup: None,
            measurement: None,
            note: None,
        }
    }
}

/// A reference figure the percentages are taken against.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CeilingRef {
    pub name: String,
    pub value: f64,
    pub unit: String,
    pub method: String,
    /// Every method tried and its figure; the ceiling is the best.
    #[serde(default)]
    pub candidates: Vec<(String, f64)>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LessonReport {
    pub schema_version: u32,
    pub lesson: String,
    pub device: DeviceInfo,
    pub provenance: Provenance,
    /// The lesson's parameters (sizes, seeds, flags).
    pub parameters: serde_json::Value,
    pub ceilings: Vec<CeilingRef>,
    pub variants: Vec<VariantReport>,
}

/// What a run prints, writes with `--json` and exits by: a lesson's table and ch1-gemm's sweep
/// alike ([crate::lesson::finish]).
pub trait RunReport: Serialize {
    fn markdown(&self) -> String;
    fn all_passed(&self) -> bool;
    fn write_json(&self, path: &Path) -> Result<()>;
}

impl RunReport for LessonReport {
    fn markdown(&self) -> String {
        LessonReport::markdown(self)
    }
    fn all_passed(&self) -> bool {
        LessonReport::all_passed(self)
    }
    fn write_json(&self, path: &Path) -> Result<()> {
        LessonReport::write_json(self, path)
    }
}

impl LessonReport {
    pub fn all_passed(&self) -> bool {
        self.variants.iter().all(|v| v.status == Status::Ok)
    }

    pub fn variant(&self, name: &str) -> Option<&VariantReport> {
        self.variants.iter().find(|v| v.name == name)
    }

    /// The markdown table printed after a run.
    pub fn markdown(&self) -> String {
        let mut out = String::new();
        let d = &self.device;
        out.push_str(&format!(
            "## {} on {} (sm_{}{}, {} SMs, driver {}, CUDA {})\n\n",
            self.lesson,
            d.name,
            d.compute_capability.0,
            d.compute_capability.1,
            d.sm_count,
            d.driver_version,
            d.cuda_driver_version
        ));
        out.push_str("| variant | status | median | p10..p90 | noise | GB/s | GFLOP/s | FLOP/B | % copy BW | speedup | rel. error |\n");
        out.push_str("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
        for v in &self.variants {
            let status = match v.status {
                Status::Ok => "ok",
                Status::Failed => "FAILED",
            };
            let (median, spread, noise) = match &v.time_ms {
                Some(s) => (
                    format_ms(s.median),
                    format!("{}..{}", format_ms(s.p10), format_ms(s.p90)),
                    format!("{:.1}%", s.rel_stddev * 100.0),
                ),
                None => ("-".into(), "-".into(), "-".into()),
            };
            let (gbs, gflops) = match &v.throughput {
                Some(t) => (
                    format!("{:.0}", t.gb_per_s),
                    format!("{:.1}", t.gflop_per_s),
                ),
                None => ("-".into(), "-".into()),
            };
            let pct = v
                .fraction_of_copy_bandwidth
                .map(|f| format!("{:.1}%", f * 100.0))
                .unwrap_or_else(|| "-".into());
            let speedup = v
                .speedup
                .map(|s| format!("{s:.2}x"))
                .unwrap_or_else(|| "-".into());
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {} | {:.3} | {} | {} | {:.1e} |\n",
                v.name,
                status,
                median,
                spread,
                noise,
                gbs,
                gflops,
                v.work.intensity(),
                pct,
                speedup,
                v.verification.rel_l2_error
            ));
        }
        out.push('\n');
        for c in &self.ceilings {
            out.push_str(&format!(
                "{}: {:.0} {} ({})\n",
                c.name, c.value, c.unit, c.method
            ));
        }
        let measured: Vec<(&str, &crate::bench::Measurement)> = self
            .variants
            .iter()
            .filter_map(|v| v.measurement.as_ref().map(|m| (v.name.as_str(), m)))
            .collect();
        if let Some((_, m)) = measured.first() {
            let batches: Vec<String> = measured
                .iter()
                .map(|(n, m)| format!("{n} {}", m.batch))
                .collect();
            out.push_str(&format!(
                "timing: CUDA events, {}; runs per sample: {}\n",
                m.mode_label(),
                batches.join(", ")
            ));
        }
        for v in &self.variants {
            if let Some(m) = &v.measurement {
                if m.clock_dropped {
                    out.push_str(&format!(
                        "warning: {}: SM clock dropped during the run ({:?} -> {:?} MHz)\n",
                        v.name, m.before.sm_clock_mhz, m.after.sm_clock_mhz
                    ));
                }
                if m.stop_reason == crate::stop::StopReason::MaxTime {
                    out.push_str(&format!("note: {}: {}\n", v.name, m.stop_reason.describe()));
                }
            }
            if v.status == Status::Failed {
                out.push_str(&format!(
                    "FAILED: {}: relative L2 error {:.3e} against {} (tolerance {:.0e}), {} non-finite of {} elements{}\n",
                    v.name,
                    v.verification.rel_l2_error,
                    v.verification.against,
                    v.verification.tolerance,
                    v.verification.non_finite,
                    v.verification.elements,
                    v.note.as_deref().map(|n| format!("; {n}")).unwrap_or_default()
                ));
            }
        }
        for v in &self.variants {
            if let Some(t) = v.measurement.as_ref().and_then(|m| m.trace.as_ref()) {
                out.push('\n');
                out.push_str(&t.markdown());
            }
        }
        out
    }

    /// Write the JSON document atomically (temp file + rename).
    pub fn write_json(&self, path: &Path) -> Result<()> {
        write_json_file(path, self, "the report")
    }

    /// Read a report back, checking it is one and of this schema version.
    pub fn read_json(path: &Path) -> Result<LessonReport> {
        read_versioned(
            path,
            SCHEMA_VERSION,
            "a perf-lessons result",
            "re-run the lesson to regenerate it",
        )
    }
}

/// Read a versioned JSON document: the file, valid JSON, the expected `schema_version`, then
/// the type. Each failure is one line naming the file and, for an old version, what to do.
pub fn read_versioned<T: serde::de::DeserializeOwned>(
    path: &Path,
    version: u32,
    what: &str,
    advice: &str,
) -> Result<T> {
    let file_err = |message: String| Error::File {
        path: path.display().to_string(),
        message,
    };
    let text = std::fs::read_to_string(path).map_err(|e| file_err(format!("cannot read: {e}")))?;
    let value: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| file_err(format!("not valid JSON: {e}")))?;
    match value.get("schema_version").and_then(|v| v.as_u64()) {
        Some(v) if v == version as u64 => {}
        Some(v) => {
            return Err(file_err(format!(
                "schema version {v}, this build reads version {version}: {advice}"
            )))
        }
        None => return Err(file_err(format!("not {what} (no schema_version)"))),
    }
    serde_json::from_value(value).map_err(|e| file_err(format!("not {what}: {e}")))
}

/// Milliseconds with a unit that keeps three significant figures.
pub fn format_ms(ms: f64) -> String {
    if ms >= 1000.0 {
        format!("{:.3} s", ms / 1000.0)
    } else if ms >= 1.0 {
        format!("{ms:.3} ms")
    } else {
        format!("{:.2} us", ms * 1000.0)
    }
}

/// Write to `path.tmp-<pid>` then rename, so readers never see half a file.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        if !dir.as_os_str().is_empty() {
            std::fs::create_dir_all(dir)?;
        }
    }
    let file_name = path.file_name().ok_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, "path has no file name")
    })?;
    let tmp = path.with_file_name(format!(
        ".{}.tmp-{}",
        file_name.to_string_lossy(),
        std::process::id()
    ));
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// Write `value` as pretty JSON with [write_atomically]; errors name the file and `what` it
/// held ("the report").
pub fn write_json_file<T: Serialize + ?Sized>(path: &Path, value: &T, what: &str) -> Result<()> {
    let file_err = |message: String| Error::File {
        path: path.display().to_string(),
        message,
    };
    let json = serde_json::to_vec_pretty(value)
        .map_err(|e| file_err(format!("could not serialize {what}: {e}")))?;
    write_atomically(path, &json).map_err(|e| file_err(format!("could not write {what}: {e}")))
}

/// UTC time as RFC 3339 ("2026-11-21T21:49:25Z"), without a date crate.
pub fn rfc3339_utc(t: std::time::SystemTime) -> String {
    let secs = t
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to (year, month, day), Howard Hinnant's algorithm.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn rfc3339_of_known_instants() {
        assert_eq!(rfc3339_utc(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        // 2026-11-21T21:49:25Z
        assert_eq!(
            rfc3339_utc(UNIX_EPOCH + Duration::from_secs(1_795_297_765)),
            "2026-11-21T21:49:25Z"
        );
        // A leap day.
        assert_eq!(
            rfc3339_utc(UNIX_EPOCH + Duration::from_secs(951_782_400)),
            "2000-02-29T00:00:00Z"
        );
    }

    #[test]
    fn ms_formatting() {
        assert_eq!(format_ms(0.0123), "12.30 us");
        assert_eq!(format_ms(1.5), "1.500 ms");
        assert_eq!(format_ms(2500.0), "2.500 s");
    }

    #[test]
    fn atomic_write_replaces_and_leaves_no_temp() {
        let dir = std::env::temp_dir().join(format!("perf-lessons-test-{}", std::process::id()));
        let path = dir.join("sub").join("x.json");
        write_atomically(&path, b"one").unwrap();
        write_atomically(&path, b"two").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        let leftovers: Vec<_> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().contains(".tmp-"))
            .collect();
        assert!(leftovers.is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
