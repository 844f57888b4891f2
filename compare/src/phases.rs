//! Where a compare's time goes: per child process (its start and exit, the GPU context, the
//! kernels compiled or loaded, the lesson's inputs and references, the ceilings, and each of
//! its variants' check, warmup, samples and figures) and for the ceilings the compare measures
//! itself. Read from each child's report clock ([common::report::ProcessClock]) and the
//! compare's own stopwatch; printed by `--phases`, kept in the JSON.

use serde::{Deserialize, Serialize};

use common::report::{LessonReport, VariantClock};
use common::table::{cell, Table};

/// One child process's time, seconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChildTime {
    pub lesson: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Its variants, as the compare names them.
    pub variants: Vec<String>,
    /// From its start to its exit, as the compare saw it.
    pub wall_s: f64,
    /// Where that went; none when the child left no report to say.
    pub phases: Option<Phases>,
    /// Its variants' own clocks (check, warmup, samples, figures).
    #[serde(default)]
    pub clocks: Vec<VariantClock>,
}

/// A child's wall time split; the parts add up to it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Phases {
    /// Before `main` and after the report: loading the binary, writing the JSON, tearing the
    /// context down, exiting.
    pub process_s: f64,
    /// Up to the GPU opened: the driver, the context, the stream, NVML.
    pub context_s: f64,
    /// NVRTC compiles and cached module loads.
    pub compile_s: f64,
    /// The rest of the set-up and its teardown: inputs, float64 references, buffers, cuBLAS
    /// handles, the timer, and a lesson part's state dropped when its group ends.
    pub build_s: f64,
    /// Ceilings read from the cache or measured.
    pub ceilings_s: f64,
    /// Each variant's poisoned, checked run.
    pub verify_s: f64,
    pub warmup_s: f64,
    /// The timed samples (wall time).
    pub sampling_s: f64,
    /// The lesson's own figures (metrics, sections), when it computed them.
    pub figures_s: f64,
}

impl Phases {
    /// From a child's wall time and its report's clock; None for a report without one.
    pub fn of(wall_s: f64, report: &LessonReport) -> Option<Phases> {
        let clock = report.provenance.clock.as_ref()?;
        let sum = |f: fn(&VariantClock) -> f64| clock.variants.iter().map(f).sum::<f64>();
        let context_s = report
            .provenance
            .startup_phases
            .iter()
            .find(|(name, _)| name.starts_with("GPU"))
            .map_or(0.0, |(_, t)| *t);
        let mut p = Phases {
            process_s: (wall_s - clock.finished_s).max(0.0),
            context_s,
            compile_s: clock.kernels.compile_s + clock.kernels.load_s,
            build_s: 0.0,
            ceilings_s: clock.ceilings_s,
            verify_s: sum(|v| v.verify_s),
            warmup_s: sum(|v| v.warmup_s),
            sampling_s: sum(|v| v.sampling_s),
            figures_s: sum(|v| v.metrics_s) + clock.sections_s,
        };
        let accounted = p.context_s
            + p.compile_s
            + p.ceilings_s
            + p.verify_s
            + p.warmup_s
            + p.sampling_s
            + p.figures_s;
        p.build_s = (clock.finished_s - accounted).max(0.0);
        Some(p)
    }

    fn cells(&self) -> [f64; 9] {
        [
            self.process_s,
            self.context_s,
            self.compile_s,
            self.build_s,
            self.ceilings_s,
            self.verify_s,
            self.warmup_s,
            self.sampling_s,
            self.figures_s,
        ]
    }

    fn add(&mut self, other: &Phases) {
        self.process_s += other.process_s;
        self.context_s += other.context_s;
        self.compile_s += other.compile_s;
        self.build_s += other.build_s;
        self.ceilings_s += other.ceilings_s;
        self.verify_s += other.verify_s;
        self.warmup_s += other.warmup_s;
        self.sampling_s += other.sampling_s;
        self.figures_s += other.figures_s;
    }
}

impl ChildTime {
    pub fn new(
        lesson: &str,
        args: &[&str],
        variants: &[&str],
        wall_s: f64,
        report: Option<&LessonReport>,
    ) -> ChildTime {
        ChildTime {
            lesson: lesson.to_string(),
            args: args.iter().map(|a| a.to_string()).collect(),
            variants: variants.iter().map(|v| v.to_string()).collect(),
            wall_s,
            phases: report.and_then(|r| Phases::of(wall_s, r)),
            clocks: report
                .and_then(|r| r.provenance.clock.as_ref())
                .map(|c| c.variants.clone())
                .unwrap_or_default(),
        }
    }
}

/// The compare's own measuring of ceilings (the SGEMM ceiling of the GEMM pairs), seconds, and
/// whether it measured or read them from the cache.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CeilingsTime {
    pub seconds: f64,
    /// What it did: "measured SGEMM fp32", "cached".
    pub what: String,
}

const COLUMNS: [&str; 9] = [
    "process", "context", "compile", "build", "ceilings", "verify", "warmup", "sampling", "figures",
];

/// The tables: one row per child process and the compare's ceilings, a total row; then one row
/// per variant. `wall_s` is the whole compare's.
pub fn markdown(children: &[ChildTime], ceilings: Option<&CeilingsTime>, wall_s: f64) -> String {
    let s = |v: f64| format!("{v:.2}");
    let mut table = Table::new().left("process").right("wall");
    for c in COLUMNS {
        table = table.right(c);
    }
    let mut total = Phases::default();
    let mut children_s = 0.0;
    for c in children {
        let at = if c.args.is_empty() {
            String::new()
        } else {
            format!(" at {}", c.args.join(" "))
        };
        let mut row = vec![
            format!("{} ({}){at}", c.lesson, c.variants.join(", ")),
            s(c.wall_s),
        ];
        match &c.phases {
            Some(p) => {
                total.add(p);
                row.extend(p.cells().map(s));
            }
            None => row.extend(COLUMNS.map(|_| cell(None::<f64>, s))),
        }
        children_s += c.wall_s;
        table.row(row);
    }
    let own_ceilings = ceilings.map_or(0.0, |c| c.seconds);
    if let Some(c) = ceilings {
        let mut row = vec![format!("compare: ceilings ({})", c.what), s(c.seconds)];
        row.extend(COLUMNS.map(|name| {
            if name == "ceilings" {
                s(c.seconds)
            } else {
                String::new()
            }
        }));
        table.row(row);
        total.ceilings_s += c.seconds;
    }
    let mut row = vec!["total".to_string(), s(children_s + own_ceilings)];
    row.extend(total.cells().map(s));
    table.row(row);
    let mut out = format!(
        "### where the time went (seconds)\n\n{}\ncompare: {:.1} s in all, {:.1} s in {} child processes, {:.1} s of its own ceilings, {:.1} s of its own (start, expectations, tables)\n",
        table.markdown(),
        wall_s,
        children_s,
        children.len(),
        own_ceilings,
        (wall_s - children_s - own_ceilings).max(0.0),
    );
    let mut variants = Table::new()
        .left("variant")
        .right("verify")
        .right("warmup")
        .right("sampling")
        .right("figures");
    for c in children {
        for v in &c.clocks {
            variants.row(vec![
                format!("{}/{}", c.lesson, v.id),
                s(v.verify_s),
                s(v.warmup_s),
                s(v.sampling_s),
                s(v.metrics_s),
            ]);
        }
    }
    out.push_str(&format!("\n{}", variants.markdown()));
    out
}

/// One line on what the compare had the kernel read ahead for its children.
pub fn read_ahead_line(r: &common::libraries::ReadAhead) -> String {
    if r.files.is_empty() {
        return "read ahead: no CUDA library found where the loader looks\n".to_string();
    }
    format!(
        "read ahead: {} CUDA library files, {} ({}), read in {:.2} s beside the first child\n",
        r.files.len(),
        plotting::format::human_bytes(r.bytes),
        r.files.join(", "),
        r.seconds
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use common::kernels::KernelClock;
    use common::report::ProcessClock;

    fn report_with(clock: Option<ProcessClock>) -> LessonReport {
        let mut provenance = common::report::Provenance::now();
        provenance.startup_phases = vec![
            ("GPU opened (context, stream, NVML)".into(), 0.30),
            ("lesson ready".into(), 0.90),
        ];
        provenance.clock = clock;
        LessonReport {
            schema_version: common::report::SCHEMA_VERSION,
            lesson: "ch1-x".into(),
            device: common::testing::h200_info(),
            provenance,
            parameters: serde_json::Value::Null,
            ceilings: Vec::new(),
            variants: Vec::new(),
            sections: Vec::new(),
        }
    }

    fn clock() -> ProcessClock {
        let v = |id: &str, sampling_s| VariantClock {
            id: id.into(),
            verify_s: 0.1,
            warmup_s: 0.05,
            sampling_s,
            metrics_s: 0.0,
        };
        ProcessClock {
            kernels: KernelClock {
                compiled: 1,
                compile_s: 0.2,
                cached: 2,
                load_s: 0.01,
            },
            ceilings_s: 0.04,
            variants: vec![v("baseline", 0.3), v("fused", 1.0)],
            sections_s: 0.0,
            finished_s: 2.5,
        }
    }

    #[test]
    fn the_phases_add_up_to_the_wall_time() {
        let p = Phases::of(2.8, &report_with(Some(clock()))).unwrap();
        assert!((p.process_s - 0.3).abs() < 1e-9, "{p:?}");
        assert_eq!(p.context_s, 0.30);
        assert!((p.compile_s - 0.21).abs() < 1e-9);
        assert!((p.sampling_s - 1.3).abs() < 1e-9);
        assert!((p.verify_s - 0.2).abs() < 1e-9);
        let sum: f64 = p.cells().iter().sum();
        assert!((sum - 2.8).abs() < 1e-9, "{p:?}");
        // The set-up not otherwise accounted: 2.5 - 0.3 - 0.21 - 0.04 - 0.2 - 0.1 - 1.3.
        assert!((p.build_s - 0.35).abs() < 1e-9, "{p:?}");
        assert!(Phases::of(2.8, &report_with(None)).is_none());
    }

    #[test]
    fn the_table_has_a_row_per_child_the_ceilings_and_a_total() {
        let r = report_with(Some(clock()));
        let children = vec![
            ChildTime::new("ch1-x", &[], &["baseline", "fused"], 2.8, Some(&r)),
            ChildTime::new("ch1-y", &["--n", "4"], &["a"], 1.0, None),
        ];
        let ceilings = CeilingsTime {
            seconds: 5.0,
            what: "measured SGEMM fp32".into(),
        };
        let md = common::table::unpadded(&markdown(&children, Some(&ceilings), 9.5));
        assert!(
            md.contains("| ch1-x (baseline, fused) | 2.80 | 0.30 |"),
            "{md}"
        );
        assert!(md.contains("| ch1-y (a) at --n 4 | 1.00 |"), "{md}");
        assert!(
            md.contains("| compare: ceilings (measured SGEMM fp32) | 5.00 |"),
            "{md}"
        );
        assert!(md.contains("| total | 8.80 |"), "{md}");
        assert!(
            md.contains("compare: 9.5 s in all, 3.8 s in 2 child processes, 5.0 s of its own ceilings, 0.7 s of its own"),
            "{md}"
        );
        assert!(
            md.contains("| ch1-x/fused | 0.10 | 0.05 | 1.00 | 0.00 |"),
            "{md}"
        );
    }

    #[test]
    fn the_read_ahead_line_names_the_files_and_their_bytes() {
        let r = common::libraries::ReadAhead {
            files: vec!["libnvrtc.so.13.0.88".into(), "libcublasLt.so.13.0.2".into()],
            bytes: 3 << 29,
            seconds: 0.25,
        };
        let line = read_ahead_line(&r);
        assert!(line.starts_with("read ahead: 2 CUDA library files, 1.5 GiB (libnvrtc.so.13.0.88, libcublasLt.so.13.0.2), read in 0.25 s"), "{line}");
        let none = read_ahead_line(&common::libraries::ReadAhead::default());
        assert!(none.contains("no CUDA library found"), "{none}");
    }
}
