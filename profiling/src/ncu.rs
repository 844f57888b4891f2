//! The Nsight Compute command and its headline.
//!
//! `ncu --clock-control none`: ncu locks clocks to base by default, which would make its
//! durations disagree with the lessons' timings at boost clock; the lessons leave clocks alone
//! and so does this. By default a small set of sections (speed of light, launch statistics,
//! occupancy); `--set full` on request. A kernel filter by name, a launch count (1 by default:
//! each profiled launch is replayed many times), and NVTX filters (`--nvtx --nvtx-include
//! "ch1-intensity:fused/"`: kernels launched inside the push/pop range of that variant).
//!
//! After the run, `ncu --import REPORT --csv --page details` gives the metrics by section; the
//! headline is the duration, DRAM throughput and compute (SM) throughput, both in percent of
//! peak, from the speed-of-light section.

use std::path::Path;

use common::table::Table;

use crate::command::ToolCommand;
use crate::error::{Error, Result};

pub const DEFAULT_SECTIONS: [&str; 3] = ["SpeedOfLight", "LaunchStats", "Occupancy"];

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NcuOptions {
    /// Kernel name filter as ncu takes it (`regex:` prefix for a regular expression).
    pub kernel: Option<String>,
    pub launch_skip: u64,
    pub launch_count: u64,
    /// `--set full` instead of the sections.
    pub full: bool,
    /// Sections; empty means [DEFAULT_SECTIONS] (unless `full`).
    pub sections: Vec<String>,
    /// Extra metrics (comma-separated).
    pub metrics: Option<String>,
    pub nvtx_include: Vec<String>,
    pub nvtx_exclude: Vec<String>,
    /// `all` (ncu's default: flush caches before each replay) or `none`.
    pub cache_control: Option<String>,
}

impl Default for NcuOptions {
    fn default() -> Self {
        NcuOptions {
            kernel: None,
            launch_skip: 0,
            launch_count: 1,
            full: false,
            sections: Vec::new(),
            metrics: None,
            nvtx_include: Vec::new(),
            nvtx_exclude: Vec::new(),
            cache_control: None,
        }
    }
}

impl NcuOptions {
    pub fn validate(&self) -> Result<()> {
        if self.launch_count == 0 {
            return Err(Error::BadArgument(
                "--launch-count 0 profiles nothing: give at least 1".into(),
            ));
        }
        if self.full && !self.sections.is_empty() {
            return Err(Error::BadArgument(
                "--full already collects every section: drop --section".into(),
            ));
        }
        if let Some(c) = &self.cache_control {
            if c != "all" && c != "none" {
                return Err(Error::BadArgument(format!(
                    "--cache-control {c}: use all (flush before each replay) or none"
                )));
            }
        }
        if let Some(k) = &self.kernel {
            if k.trim().is_empty() {
                return Err(Error::BadArgument("--kernel needs a name".into()));
            }
        }
        for f in self.nvtx_include.iter().chain(&self.nvtx_exclude) {
            if f.trim().is_empty() {
                return Err(Error::BadArgument(
                    "an NVTX filter needs a range, e.g. ch1-intensity:fused/".into(),
                ));
            }
        }
        Ok(())
    }
}

/// `ncu --clock-control none ... --export <base> --force-overwrite <program> <args>`.
pub fn command(
    ncu: &Path,
    opts: &NcuOptions,
    base: &Path,
    program: &Path,
    args: &[String],
) -> ToolCommand {
    let mut c = ToolCommand::new(ncu);
    c.arg("--clock-control").arg("none");
    if let Some(cache) = &opts.cache_control {
        c.arg("--cache-control").arg(cache.clone());
    }
    if opts.full {
        c.arg("--set").arg("full");
    } else {
        let sections: Vec<String> = if opts.sections.is_empty() {
            DEFAULT_SECTIONS.iter().map(|s| s.to_string()).collect()
        } else {
            opts.sections.clone()
        };
        for s in sections {
            c.arg("--section").arg(s);
        }
    }
    if let Some(m) = &opts.metrics {
        c.arg("--metrics").arg(m.clone());
    }
    if let Some(k) = &opts.kernel {
        c.arg("--kernel-name").arg(k.clone());
    }
    if opts.launch_skip > 0 {
        c.arg("--launch-skip").arg(opts.launch_skip.to_string());
    }
    c.arg("--launch-count").arg(opts.launch_count.to_string());
    if !opts.nvtx_include.is_empty() || !opts.nvtx_exclude.is_empty() {
        c.arg("--nvtx");
    }
    for f in &opts.nvtx_include {
        c.arg("--nvtx-include").arg(f.clone());
    }
    for f in &opts.nvtx_exclude {
        c.arg("--nvtx-exclude").arg(f.clone());
    }
    c.arg("--export")
        .arg(base.display().to_string())
        .arg("--force-overwrite");
    c.arg(program.display().to_string());
    for a in args {
        c.arg(a.clone());
    }
    c
}

/// `ncu --import REPORT --csv --page details`.
pub fn import_command(ncu: &Path, report: &Path) -> ToolCommand {
    let mut c = ToolCommand::new(ncu);
    c.arg("--import")
        .arg(report.display().to_string())
        .arg("--csv")
        .arg("--page")
        .arg("details");
    c
}

/// One profiled launch's headline metrics (value and unit as ncu printed them).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Headline {
    pub id: String,
    pub kernel: String,
    pub duration: Option<(String, String)>,
    pub dram_throughput: Option<(String, String)>,
    pub sm_throughput: Option<(String, String)>,
    pub memory_throughput: Option<(String, String)>,
}

/// The headline of every launch in `ncu --csv --page details` output. ncu may print its own
/// lines (`==PROF==`, `==WARNING==`) before the table; the table starts at its header.
pub fn parse_details_csv(text: &str) -> Result<Vec<Headline>> {
    let start = std::iter::once(0)
        .chain(text.match_indices('\n').map(|(i, _)| i + 1))
        .find(|&at| text[at..].starts_with("\"ID\""))
        .ok_or_else(|| {
            Error::Io("ncu's CSV has no header line (\"ID\",...): was anything profiled?".into())
        })?;
    let mut reader = csv::ReaderBuilder::new()
        .flexible(true)
        .from_reader(&text.as_bytes()[start..]);
    let header = reader
        .headers()
        .map_err(|e| Error::Io(format!("ncu's CSV header does not read: {e}")))?
        .clone();
    let col = |name: &str| {
        header
            .iter()
            .position(|h| h == name)
            .ok_or_else(|| Error::Io(format!("ncu's CSV has no \"{name}\" column")))
    };
    let (id, kernel, metric, unit, value) = (
        col("ID")?,
        col("Kernel Name")?,
        col("Metric Name")?,
        col("Metric Unit")?,
        col("Metric Value")?,
    );
    let mut out: Vec<Headline> = Vec::new();
    for record in reader.records() {
        let record = record.map_err(|e| Error::Io(format!("ncu's CSV does not read: {e}")))?;
        // ncu's own messages between or after the rows are not rows of the table.
        if record.len() < header.len() {
            continue;
        }
        let get = |i: usize| record.get(i).unwrap_or_default().to_string();
        if out.last().map(|h| h.id != get(id)).unwrap_or(true) {
            out.push(Headline {
                id: get(id),
                kernel: get(kernel),
                ..Headline::default()
            });
        }
        let h = out.last_mut().expect("pushed");
        let v = Some((get(value), get(unit)));
        match get(metric).as_str() {
            "Duration" => h.duration = v,
            "DRAM Throughput" => h.dram_throughput = v,
            "Compute (SM) Throughput" => h.sm_throughput = v,
            "Memory Throughput" if get(unit) == "%" => h.memory_throughput = v,
            _ => {}
        }
    }
    Ok(out)
}

/// The headline as a markdown table.
pub fn headline_table(rows: &[Headline]) -> String {
    let show = |m: &Option<(String, String)>| match m {
        Some((v, u)) if u == "%" => format!("{v}%"),
        Some((v, u)) => format!("{v} {u}"),
        None => common::table::EMPTY.into(),
    };
    let mut table = Table::new()
        .right("launch")
        .left("kernel")
        .right("duration")
        .right("DRAM throughput (% of peak)")
        .right("SM throughput (% of peak)")
        .right("memory throughput (% of peak)");
    for h in rows {
        table.row(vec![
            h.id.clone(),
            common::trace::short_name(&h.kernel, 60),
            show(&h.duration),
            show(&h.dram_throughput),
            show(&h.sm_throughput),
            show(&h.memory_throughput),
        ]);
    }
    table.markdown()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target() -> (&'static Path, Vec<String>) {
        (
            Path::new("target/release/ch1-intensity"),
            vec!["--elements".into(), "64M".into()],
        )
    }

    #[test]
    fn default_command_keeps_clocks_and_profiles_one_launch() {
        let (p, a) = target();
        let c = command(
            Path::new("ncu"),
            &NcuOptions {
                kernel: Some("fused_vec4".into()),
                ..NcuOptions::default()
            },
            Path::new("results/profiles/ch1-intensity-all-T"),
            p,
            &a,
        );
        assert_eq!(
            c.display(),
            "ncu --clock-control none --section SpeedOfLight --section LaunchStats \
             --section Occupancy --kernel-name fused_vec4 --launch-count 1 \
             --export results/profiles/ch1-intensity-all-T --force-overwrite \
             target/release/ch1-intensity --elements 64M"
        );
    }

    #[test]
    fn full_set_nvtx_filters_and_quoting() {
        let (p, a) = target();
        let opts = NcuOptions {
            kernel: Some("regex:fused.*".into()),
            launch_skip: 3,
            launch_count: 2,
            full: true,
            nvtx_include: vec!["ch1-intensity:fused/".into()],
            nvtx_exclude: vec!["warmup range/".into()],
            cache_control: Some("none".into()),
            metrics: Some("gpu__time_duration.sum".into()),
            ..NcuOptions::default()
        };
        opts.validate().unwrap();
        let s = command(Path::new("/opt/ncu"), &opts, Path::new("out/x"), p, &a).display();
        assert!(
            s.starts_with("/opt/ncu --clock-control none --cache-control none --set full"),
            "{s}"
        );
        assert!(!s.contains("--section"), "{s}");
        assert!(s.contains("--metrics gpu__time_duration.sum"), "{s}");
        assert!(
            s.contains("--kernel-name 'regex:fused.*' --launch-skip 3 --launch-count 2"),
            "{s}"
        );
        assert!(
            s.contains("--nvtx --nvtx-include ch1-intensity:fused/ --nvtx-exclude 'warmup range/'"),
            "{s}"
        );
    }

    #[test]
    fn bad_options_are_refused() {
        let bad = |o: NcuOptions| o.validate().unwrap_err().to_string();
        assert!(bad(NcuOptions {
            launch_count: 0,
            ..NcuOptions::default()
        })
        .contains("at least 1"));
        assert!(bad(NcuOptions {
            full: true,
            sections: vec!["Occupancy".into()],
            ..NcuOptions::default()
        })
        .contains("drop --section"));
        assert!(bad(NcuOptions {
            cache_control: Some("some".into()),
            ..NcuOptions::default()
        })
        .contains("all"));
        assert!(bad(NcuOptions {
            kernel: Some(" ".into()),
            ..NcuOptions::default()
        })
        .contains("name"));
        assert!(bad(NcuOptions {
            nvtx_include: vec!["".into()],
            ..NcuOptions::default()
        })
        .contains("NVTX"));
    }

    const DETAILS: &str = r#"==PROF== Connected
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","123","ch1-intensity","127.0.0.1","fused_vec4","1","13","(256, 1, 1)","(65536, 1, 1)","0","9.0","GPU Speed Of Light Throughput","DRAM Frequency","Ghz","3.20"
"0","123","ch1-intensity","127.0.0.1","fused_vec4","1","13","(256, 1, 1)","(65536, 1, 1)","0","9.0","GPU Speed Of Light Throughput","Memory Throughput","%","91.52"
"0","123","ch1-intensity","127.0.0.1","fused_vec4","1","13","(256, 1, 1)","(65536, 1, 1)","0","9.0","GPU Speed Of Light Throughput","DRAM Throughput","%","91.52"
"0","123","ch1-intensity","127.0.0.1","fused_vec4","1","13","(256, 1, 1)","(65536, 1, 1)","0","9.0","GPU Speed Of Light Throughput","Duration","us","187.36"
"0","123","ch1-intensity","127.0.0.1","fused_vec4","1","13","(256, 1, 1)","(65536, 1, 1)","0","9.0","GPU Speed Of Light Throughput","Compute (SM) Throughput","%","41.07"
"0","123","ch1-intensity","127.0.0.1","fused_vec4","1","13","(256, 1, 1)","(65536, 1, 1)","0","9.0","Launch Statistics","Block Size","","256"
"1","123","ch1-intensity","127.0.0.1","add_residual","1","13","(256, 1, 1)","(262144, 1, 1)","0","9.0","GPU Speed Of Light Throughput","Duration","msecond","1,234.50"
"#;

    #[test]
    fn headline_from_details_csv() {
        let rows = parse_details_csv(DETAILS).unwrap();
        assert_eq!(rows.len(), 2);
        let h = &rows[0];
        assert_eq!(h.kernel, "fused_vec4");
        assert_eq!(h.duration, Some(("187.36".into(), "us".into())));
        assert_eq!(h.dram_throughput, Some(("91.52".into(), "%".into())));
        assert_eq!(h.sm_throughput, Some(("41.07".into(), "%".into())));
        assert_eq!(h.memory_throughput, Some(("91.52".into(), "%".into())));
        assert_eq!(
            rows[1].duration,
            Some(("1,234.50".into(), "msecond".into()))
        );
        assert_eq!(rows[1].dram_throughput, None);
        let table = common::table::unpadded(&headline_table(&rows));
        assert!(
            table.contains("| 0 | fused_vec4 | 187.36 us | 91.52% | 41.07% | 91.52% |"),
            "{table}"
        );
        assert!(
            table.contains("| 1 | add_residual | 1,234.50 msecond | - | - | - |"),
            "{table}"
        );
    }

    #[test]
    fn quoted_commas_quotes_and_line_breaks_stay_in_their_field() {
        let text = "==PROF== Connected\r\n\
            \"ID\",\"Kernel Name\",\"Metric Name\",\"Metric Unit\",\"Metric Value\"\r\n\
            \"7\",\"void gemm<float, 128>(const float *, \"\"x\"\")\",\"Duration\",\"us\",\"1,024.5\"\r\n\
            \"8\",\"two\nlines\",\"DRAM Throughput\",\"%\",\"12.5\"\r\n\
            ==PROF== Disconnected\r\n";
        let rows = parse_details_csv(text).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(
            rows[0].kernel,
            "void gemm<float, 128>(const float *, \"x\")"
        );
        assert_eq!(rows[0].duration, Some(("1,024.5".into(), "us".into())));
        assert_eq!(rows[1].kernel, "two\nlines");
        assert_eq!(rows[1].dram_throughput, Some(("12.5".into(), "%".into())));
    }

    #[test]
    fn csv_without_a_header_says_so() {
        let e = parse_details_csv("==WARNING== No kernels were profiled.\n").unwrap_err();
        assert!(e.to_string().contains("no header"), "{e}");
    }
}
