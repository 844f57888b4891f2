//! The kernel summary of a timed region, like Nsight Systems' "CUDA GPU Kernel Summary": per
//! kernel name its calls, total, mean, median, min and max time and share of kernel time; the
//! copies and sets; and how busy the GPU was over the region.
//!
//! The harness's own kernels (the blocking kernel that holds the stream while a sample is
//! queued, the L2 flush of cold runs) are left out of the table and of the busy time, and
//! counted: the GPU spinning in `hold_stream` is waiting, not working.

use serde::{Deserialize, Serialize};

use super::activity::{Activity, ActivityKind};
use crate::table::{format_ms, percent, Table};

/// One timed region: what `measure` timed for one variant.
#[derive(Debug, Clone, PartialEq)]
pub struct Region {
    pub label: String,
    pub start_ns: u64,
    pub end_ns: u64,
    /// Runs of the variant in the region (samples x runs per sample).
    pub runs: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KernelStats {
    pub name: String,
    pub calls: u64,
    pub total_s: f64,
    pub mean_s: f64,
    pub median_s: f64,
    pub min_s: f64,
    pub max_s: f64,
    /// This kernel's total over all the lesson's kernels' total time in the region (0..1).
    pub fraction_of_kernel_time: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TransferStats {
    /// "memcpy HtoD", "memset", ...
    pub name: String,
    pub calls: u64,
    pub bytes: u64,
    pub total_s: f64,
}

/// What the built-in trace saw in one timed region; kept in the variant's measurement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceSummary {
    /// The region's label: the innermost NVTX range open when it was measured.
    pub region: String,
    /// Host time from the first sample's queuing to the last sample's read-back.
    pub region_s: f64,
    pub runs: u64,
    /// Kernels by total time, largest first.
    pub kernels: Vec<KernelStats>,
    pub transfers: Vec<TransferStats>,
    /// Time at least one lesson kernel, copy or set ran (overlaps counted once).
    pub gpu_busy_s: f64,
    /// `gpu_busy_s` over `region_s`.
    pub gpu_busy_fraction: f64,
    /// The lesson's kernels' summed time over the runs: compare with the event-timed median.
    pub kernel_time_per_run_s: f64,
    /// Harness kernels in the region, left out of the table and the busy time.
    pub harness_kernels: u64,
    /// Records CUPTI dropped for want of buffer space (should be 0).
    pub dropped_records: u64,
    /// Where the numbers come from (CUPTI version and record layout).
    pub source: String,
}

/// Summarize the activities of one region (those overlapping it), leaving out kernels named
/// in `harness`.
pub fn summarize(
    region: &Region,
    activities: &[Activity],
    harness: &[&str],
    dropped_records: u64,
    source: &str,
) -> TraceSummary {
    let inside: Vec<&Activity> = activities
        .iter()
        .filter(|a| a.start_ns < region.end_ns && a.end_ns > region.start_ns)
        .collect();
    let is_harness = |a: &Activity| a.kind == ActivityKind::Kernel && harness.contains(&&*a.name);
    let harness_kernels = inside.iter().filter(|a| is_harness(a)).count() as u64;
    let work: Vec<&Activity> = inside.into_iter().filter(|a| !is_harness(a)).collect();

    let mut kernels: Vec<KernelStats> = Vec::new();
    let mut by_name: std::collections::BTreeMap<&str, Vec<f64>> = Default::default();
    for a in work.iter().filter(|a| a.kind == ActivityKind::Kernel) {
        by_name
            .entry(a.name.as_str())
            .or_default()
            .push(a.duration_ns() as f64 * 1e-9);
    }
    let kernel_total: f64 = by_name.values().flatten().sum();
    for (name, mut times) in by_name {
        times.sort_by(f64::total_cmp);
        let total: f64 = times.iter().sum();
        let n = times.len();
        let median = if n % 2 == 1 {
            times[n / 2]
        } else {
            (times[n / 2 - 1] + times[n / 2]) / 2.0
        };
        kernels.push(KernelStats {
            name: name.to_string(),
            calls: n as u64,
            total_s: total,
            mean_s: total / n as f64,
            median_s: median,
            min_s: times[0],
            max_s: times[n - 1],
            fraction_of_kernel_time: if kernel_total > 0.0 {
                total / kernel_total
            } else {
                0.0
            },
        });
    }
    kernels.sort_by(|a, b| b.total_s.total_cmp(&a.total_s));

    let mut transfers: Vec<TransferStats> = Vec::new();
    for a in work.iter().filter(|a| a.kind != ActivityKind::Kernel) {
        let t = match transfers.iter_mut().find(|t| t.name == a.name) {
            Some(t) => t,
            None => {
                transfers.push(TransferStats {
                    name: a.name.clone(),
                    calls: 0,
                    bytes: 0,
                    total_s: 0.0,
                });
                transfers.last_mut().expect("pushed")
            }
        };
        t.calls += 1;
        t.bytes += a.bytes;
        t.total_s += a.duration_ns() as f64 * 1e-9;
    }

    let region_ns = region.end_ns.saturating_sub(region.start_ns);
    let busy_ns = busy_time_ns(
        work.iter()
            .map(|a| (a.start_ns.max(region.start_ns), a.end_ns.min(region.end_ns))),
    );
    TraceSummary {
        region: region.label.clone(),
        region_s: region_ns as f64 * 1e-9,
        runs: region.runs,
        kernels,
        transfers,
        gpu_busy_s: busy_ns as f64 * 1e-9,
        gpu_busy_fraction: if region_ns > 0 {
            busy_ns as f64 / region_ns as f64
        } else {
            0.0
        },
        kernel_time_per_run_s: if region.runs > 0 {
            kernel_total / region.runs as f64
        } else {
            0.0
        },
        harness_kernels,
        dropped_records,
        source: source.to_string(),
    }
}

/// Length of the union of intervals (start, end): overlapping work counts once.
pub fn busy_time_ns(intervals: impl Iterator<Item = (u64, u64)>) -> u64 {
    let mut v: Vec<(u64, u64)> = intervals.filter(|(s, e)| e > s).collect();
    v.sort_unstable();
    let mut busy = 0;
    let mut current: Option<(u64, u64)> = None;
    for (s, e) in v {
        current = match current {
            Some((cs, ce)) if s <= ce => Some((cs, ce.max(e))),
            Some((cs, ce)) => {
                busy += ce - cs;
                Some((s, e))
            }
            None => Some((s, e)),
        };
    }
    if let Some((cs, ce)) = current {
        busy += ce - cs;
    }
    busy
}

/// Long (mangled C++) names cut to `max` characters for the table; the JSON keeps them whole.
pub fn short_name(name: &str, max: usize) -> String {
    if name.chars().count() <= max {
        name.to_string()
    } else {
        let cut: String = name.chars().take(max.saturating_sub(3)).collect();
        format!("{cut}...")
    }
}

impl TraceSummary {
    /// The table printed after a run.
    pub fn markdown(&self) -> String {
        let mut out = format!(
            "trace of {} ({}): timed region {}, {} runs; GPU busy {:.1}% of it; lesson kernels {} per run\n\n",
            self.region,
            self.source,
            format_ms(self.region_s * 1e3),
            self.runs,
            self.gpu_busy_fraction * 100.0,
            format_ms(self.kernel_time_per_run_s * 1e3),
        );
        let mut table = Table::new()
            .left("kernel")
            .right("calls")
            .right("total")
            .right("mean")
            .right("median")
            .right("min")
            .right("max")
            .right("% kernel time");
        let ms = |s: f64| format_ms(s * 1e3);
        for k in &self.kernels {
            table.row(vec![
                short_name(&k.name, 60),
                k.calls.to_string(),
                ms(k.total_s),
                ms(k.mean_s),
                ms(k.median_s),
                ms(k.min_s),
                ms(k.max_s),
                percent(k.fraction_of_kernel_time),
            ]);
        }
        if self.kernels.is_empty() {
            table.row(vec!["(no lesson kernels in the region)".into()]);
        }
        out.push_str(&table.markdown());
        for t in &self.transfers {
            out.push_str(&format!(
                "{}: {} calls, {}, {} in all\n",
                t.name,
                t.calls,
                plotting::format::human_bytes(t.bytes),
                ms(t.total_s)
            ));
        }
        out.push_str(&format!(
            "{} harness kernels (hold_stream, L2 flush) left out of the table and the busy time\n",
            self.harness_kernels
        ));
        if self.dropped_records > 0 {
            out.push_str(&format!(
                "warning: CUPTI dropped {} records (buffers full): the table undercounts\n",
                self.dropped_records
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn act(kind: ActivityKind, name: &str, start: u64, end: u64, bytes: u64) -> Activity {
        Activity {
            kind,
            name: name.into(),
            device: 0,
            context: 1,
            stream: 13,
            start_ns: start,
            end_ns: end,
            bytes,
            correlation: 0,
            grid: [1, 1, 1],
            block: [1, 1, 1],
        }
    }

    #[test]
    fn union_counts_overlaps_once() {
        assert_eq!(busy_time_ns([(0, 10), (5, 15), (20, 30)].into_iter()), 25);
        assert_eq!(busy_time_ns([(0, 10), (2, 3)].into_iter()), 10);
        assert_eq!(busy_time_ns([(5, 5), (7, 3)].into_iter()), 0);
        assert_eq!(busy_time_ns(std::iter::empty()), 0);
    }

    #[test]
    fn summary_of_constructed_records() {
        use ActivityKind::*;
        let region = Region {
            label: "lesson:baseline".into(),
            start_ns: 1_000,
            end_ns: 11_000,
            runs: 2,
        };
        let acts = vec![
            act(Kernel, "before_region", 0, 900, 0),
            act(Kernel, "hold_stream", 1_000, 2_000, 0),
            act(Kernel, "scale", 2_000, 3_000, 0),
            act(Kernel, "add", 3_000, 6_000, 0),
            act(Kernel, "scale", 6_000, 7_400, 0),
            act(Kernel, "add", 7_400, 9_000, 0),
            act(Memcpy, "memcpy DtoH", 9_500, 9_600, 4),
            act(Memset, "memset", 9_600, 9_700, 1024),
            act(Kernel, "after_region", 12_000, 13_000, 0),
        ];
        let s = summarize(&region, &acts, &["hold_stream"], 0, "test");
        assert_eq!(s.harness_kernels, 1);
        let names: Vec<&str> = s.kernels.iter().map(|k| k.name.as_str()).collect();
        assert_eq!(names, vec!["add", "scale"], "by total time, largest first");
        let add = &s.kernels[0];
        assert_eq!(add.calls, 2);
        assert!((add.total_s - 4.6e-6).abs() < 1e-15);
        assert!((add.mean_s - 2.3e-6).abs() < 1e-15);
        assert!((add.median_s - 2.3e-6).abs() < 1e-15);
        assert!((add.min_s - 1.6e-6).abs() < 1e-15 && (add.max_s - 3.0e-6).abs() < 1e-15);
        assert!((add.fraction_of_kernel_time - 4.6 / 7.0).abs() < 1e-12);
        // Busy: kernels 2000..9000 (7000 ns) + copy 100 + set 100, over 10000 ns.
        assert!((s.gpu_busy_fraction - 0.72).abs() < 1e-12);
        assert!((s.kernel_time_per_run_s - 3.5e-6).abs() < 1e-15);
        assert_eq!(s.transfers.len(), 2);
        assert_eq!((s.transfers[0].calls, s.transfers[0].bytes), (1, 4));
        let table = crate::table::unpadded(&s.markdown());
        assert!(table.contains("| add | 2 |"), "{table}");
        assert!(table.contains("GPU busy 72.0%"), "{table}");
        assert!(table.contains("1 harness kernels"), "{table}");
    }

    #[test]
    fn an_empty_region_has_no_division_by_zero() {
        let region = Region {
            label: "x".into(),
            start_ns: 5,
            end_ns: 5,
            runs: 0,
        };
        let s = summarize(&region, &[], &[], 3, "test");
        assert_eq!(s.gpu_busy_fraction, 0.0);
        assert_eq!(s.kernel_time_per_run_s, 0.0);
        assert!(s.markdown().contains("dropped 3 records"));
    }

    #[test]
    fn long_names_are_cut_for_the_table() {
        assert_eq!(short_name("abc", 5), "abc");
        assert_eq!(short_name("abcdefgh", 6), "abc...");
    }
}
