//! # Where each change starts to pay (`--sweep`)
//!
//! The training pairs are measured at the chapter's sizes, where some changes barely show: a
//! 32 KiB pageable copy costs about what a pinned one does, and a 32 KiB `cuMemAlloc` little
//! next to a pass's synchronized launches. Each sweep runs one change over the size that
//! decides it, every point a group of two variants of the one runner (the way things were, as
//! the group's baseline, and the change), each checked before it is timed:
//!
//! - **pinned** ([copies]): one host-to-device copy of 32 KiB to 64 MiB from pageable or
//!   page-locked memory, eager (the host waits for each copy) and overlapped (the copy queued on
//!   a second stream beside a compute kernel, as a loader feeds the next batch while this one
//!   trains);
//! - **prealloc** ([allocations]): buffers of 4 KiB to 64 MiB, 1 or 16 per use, each written and
//!   read once by a kernel, allocated and freed with `cuMemAlloc`/`cuMemFree` per use, or
//!   allocated once and reused;
//! - **batch** ([training]): the naive training loop at a fixed effective batch of 4096, the
//!   step accumulated over microbatches of 8 to 4096 samples, or one pass of the whole batch;
//! - **graphs** ([training]): the chapter's training step launched op by op, or replayed as one
//!   CUDA graph per 1 to 64 steps, the host waiting once per graph either way.
//!
//! Each point's speedup comes with its 95% interval (from each median's standard error). The
//! change pays at a point when it is at least [PAYS_ABOVE] faster there and the interval lies
//! above 1.0; the sweep says where it pays ("from 2 MiB on", "up to microbatch 256", "at every
//! size measured"), and draws the speedups and times as a plot ([plot]).

pub mod allocations;
pub mod copies;
pub mod plot;
pub mod training;

use clap::ValueEnum;
use serde::{Deserialize, Serialize};

use common::bench::BenchConfig;
use common::report::{Section, Status, VariantReport};
use common::stats::{infinite_as_null, MedianOf, Ratio};
use common::stop::StopRule;
use common::table::{cell, format_ms, three_figures, Table};

use crate::training::lesson::host_bound_bench;

/// A change pays at a point when it is at least this much faster there (with a 95% interval
/// above 1.0).
pub const PAYS_ABOVE: f64 = 1.1;

/// The sweeps `--sweep` runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Pinned,
    Prealloc,
    Batch,
    Graphs,
    /// Every sweep, one after the other.
    All,
}

impl Kind {
    /// The sweeps `self` stands for, in the order they run.
    pub fn each(self) -> Vec<Kind> {
        match self {
            Kind::All => vec![Kind::Pinned, Kind::Prealloc, Kind::Batch, Kind::Graphs],
            k => vec![k],
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::Pinned => "pinned",
            Kind::Prealloc => "prealloc",
            Kind::Batch => "batch",
            Kind::Graphs => "graphs",
            Kind::All => "all",
        }
    }

    /// The lesson name of its report ("ch1-basics-sweep-pinned"), and the stem of its files.
    pub fn lesson(self) -> String {
        format!("ch1-basics-sweep-{}", self.name())
    }

    /// How its sizes read: bytes, or a count of something.
    pub fn axis(self) -> Axis {
        match self {
            Kind::Pinned | Kind::Prealloc | Kind::All => Axis::Bytes,
            Kind::Batch => Axis::Count("samples per microbatch"),
            Kind::Graphs => Axis::Count("steps per graph"),
        }
    }
}

/// What a sweep's size counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Axis {
    Bytes,
    Count(&'static str),
}

impl Axis {
    /// "32 KiB", "64 MiB", "4 KiB"; a count as it is.
    pub fn label(self, x: u64) -> String {
        match self {
            Axis::Bytes => size_label(x),
            Axis::Count(_) => x.to_string(),
        }
    }

    /// What the size is, for the plot's axis and the table's column.
    pub fn title(self) -> &'static str {
        match self {
            Axis::Bytes => "bytes",
            Axis::Count(what) => what,
        }
    }
}

/// Bytes as a sweep's sizes are given: "32 KiB", "1 MiB", "1.5 KiB" (binary units).
pub fn size_label(bytes: u64) -> String {
    let units = [(1u64 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
    for (unit, name) in units {
        if bytes >= unit {
            let v = bytes as f64 / unit as f64;
            let text = format!("{v:.1}");
            return format!("{} {name}", text.trim_end_matches(".0"));
        }
    }
    format!("{bytes} B")
}

/// The measuring settings of a sweep's sides: a short stopping rule (a few samples place a
/// point on a curve of ratios), samples of whole runs made longer than usual as the host paces
/// every side, the run's cold flag carried through.
pub fn sweep_bench(cfg: BenchConfig) -> BenchConfig {
    host_bound_bench(BenchConfig {
        stop: StopRule::sweep(),
        cold: cfg.cold,
        ..BenchConfig::default()
    })
}

/// One point of a sweep before it runs: its group (the runner's), its line and its size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Planned {
    pub group: String,
    pub series: String,
    pub x: u64,
}

/// One side of a point as the runner measured it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Side {
    /// Median milliseconds per run (infinite, null in JSON, when it failed and was not timed).
    #[serde(with = "infinite_as_null")]
    pub median_ms: f64,
    /// Relative standard deviation of its samples.
    #[serde(with = "infinite_as_null")]
    pub noise: f64,
    pub samples: usize,
    pub passed: bool,
}

impl Side {
    /// From a variant report: None when it was skipped.
    pub fn of(v: &VariantReport) -> Option<Side> {
        if v.status == Status::Skipped {
            return None;
        }
        let t = v.time_ms.as_ref();
        Some(Side {
            median_ms: t.map_or(f64::INFINITY, |t| t.median),
            noise: t.map_or(f64::INFINITY, |t| t.rel_stddev),
            samples: t.map_or(0, |t| t.samples),
            passed: v.status == Status::Ok && t.is_some(),
        })
    }

    fn median(&self) -> MedianOf {
        MedianOf {
            median: self.median_ms,
            noise: self.noise,
            samples: self.samples,
        }
    }
}

/// One point: a size on one line, both sides, and figures of the sweep's own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Point {
    /// The line it is on ("eager", "16 buffers per use"; the sweep's name for a single line).
    pub series: String,
    /// The size that decides it: bytes copied or allocated, samples per microbatch, steps per
    /// graph.
    pub x: u64,
    /// The way things were (the group's baseline).
    pub baseline: Option<Side>,
    /// The change.
    pub changed: Option<Side>,
    /// Figures of the sweep's own at this point (name, value), e.g. nodes per graph.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub figures: Vec<(String, f64)>,
}

impl Point {
    /// Baseline over change, with its uncertainty, when both sides verified and were timed.
    pub fn speedup(&self) -> Option<Ratio> {
        let (b, c) = (self.baseline.as_ref()?, self.changed.as_ref()?);
        let timed = |s: &Side| s.passed && s.median_ms > 0.0 && s.median_ms.is_finite();
        (timed(b) && timed(c) && b.noise.is_finite() && c.noise.is_finite())
            .then(|| Ratio::of_medians(b.median(), c.median()))
    }

    /// Whether the change pays here: at least [PAYS_ABOVE] faster, the 95% interval above 1.0.
    /// None when there is no speedup to judge.
    pub fn pays(&self) -> Option<bool> {
        self.speedup()
            .map(|r| r.value >= PAYS_ABOVE && r.interval95().0 > 1.0)
    }

    pub fn failed(&self) -> bool {
        [&self.baseline, &self.changed]
            .iter()
            .any(|s| s.as_ref().is_some_and(|s| !s.passed))
    }

    pub fn figure(&self, name: &str) -> Option<f64> {
        self.figures
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| *v)
    }
}

/// The points of `plan` from the runner's variant reports: each group's `baseline` and
/// `changed` variants.
pub fn points(
    plan: &[Planned],
    variants: &[VariantReport],
    (baseline, changed): (&str, &str),
) -> Vec<Point> {
    plan.iter()
        .map(|p| {
            let side = |name: &str| {
                variants
                    .iter()
                    .find(|v| v.group == p.group && v.name == name)
                    .and_then(Side::of)
            };
            Point {
                series: p.series.clone(),
                x: p.x,
                baseline: side(baseline),
                changed: side(changed),
                figures: Vec::new(),
            }
        })
        .collect()
}

/// Where a change pays along one line of a sweep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Crossover {
    pub series: String,
    /// The smallest size from which on it pays at every larger size measured; None when it
    /// does not pay at the largest.
    pub pays_from: Option<u64>,
    /// The largest size up to which it pays at every smaller size measured; None when it does
    /// not pay at the smallest.
    pub pays_up_to: Option<u64>,
    /// Runs of neighbouring sizes where it pays: (first, last).
    pub paying: Vec<(u64, u64)>,
    /// Sizes with a speedup to judge, smallest and largest.
    pub measured: Option<(u64, u64)>,
}

/// Judge one line of points (any order; points without a speedup are left out).
pub fn crossover(points: &[Point], series: &str) -> Crossover {
    let mut judged: Vec<(u64, bool)> = points
        .iter()
        .filter(|p| p.series == series)
        .filter_map(|p| p.pays().map(|pays| (p.x, pays)))
        .collect();
    judged.sort_by_key(|j| j.0);
    let mut paying: Vec<(u64, u64)> = Vec::new();
    let mut previous_paid = false;
    for &(x, pays) in &judged {
        match (pays, previous_paid, paying.last_mut()) {
            (true, true, Some(run)) => run.1 = x,
            (true, _, _) => paying.push((x, x)),
            _ => {}
        }
        previous_paid = pays;
    }
    let measured = judged.first().zip(judged.last()).map(|(a, b)| (a.0, b.0));
    let pays_from = match (judged.last(), paying.last()) {
        (Some(&(last, true)), Some(&(from, _))) if last >= from => Some(from),
        _ => None,
    };
    let pays_up_to = match (judged.first(), paying.first()) {
        (Some(&(first, true)), Some(&(f, up))) if f == first => Some(up),
        _ => None,
    };
    Crossover {
        series: series.to_string(),
        pays_from,
        pays_up_to,
        paying,
        measured,
    }
}

impl Crossover {
    /// In words, sizes written by `axis`: "pays from 2 MiB on", "pays up to 256", "pays at
    /// every size measured (32 KiB..64 MiB)", "pays at no size measured", "pays at 4..16 and
    /// 256..512".
    pub fn sentence(&self, axis: Axis) -> String {
        let l = |x: u64| axis.label(x);
        let Some((first, last)) = self.measured else {
            return "nothing measured to judge".into();
        };
        match (&self.paying[..], self.pays_from, self.pays_up_to) {
            ([], _, _) => format!("pays at no size measured ({}..{})", l(first), l(last)),
            ([_], Some(_), Some(_)) => {
                format!("pays at every size measured ({}..{})", l(first), l(last))
            }
            ([_], Some(from), None) if from == last => {
                format!("pays only at the largest size measured, {}", l(last))
            }
            ([_], Some(from), None) => format!(
                "pays from {} on (up to {}, the largest measured)",
                l(from),
                l(last)
            ),
            ([_], None, Some(up)) => format!(
                "pays up to {}, not beyond (measured up to {})",
                l(up),
                l(last)
            ),
            (runs, _, _) => format!(
                "pays at {}",
                runs.iter()
                    .map(|&(a, b)| if a == b {
                        l(a)
                    } else {
                        format!("{}..{}", l(a), l(b))
                    })
                    .collect::<Vec<_>>()
                    .join(" and ")
            ),
        }
    }
}

/// Everything a sweep found, as its section keeps it in the JSON and its plot draws it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub kind: Kind,
    /// What the baseline and the change are ("pageable", "pinned").
    pub baseline: String,
    pub changed: String,
    pub points: Vec<Point>,
    pub crossovers: Vec<Crossover>,
    pub pays_above: f64,
}

/// The rule, said once for every sweep.
pub fn rule_line() -> String {
    format!(
        "rule: the change pays at a size when it is at least {PAYS_ABOVE}x faster there with a 95% interval (1.96 standard uncertainties of the ratio of medians) above 1.0; it pays from a size on when it pays there and at every larger size measured"
    )
}

impl Summary {
    /// The summary of `points` (their lines in the order they first appear).
    pub fn new(kind: Kind, (baseline, changed): (&str, &str), points: Vec<Point>) -> Summary {
        let mut series: Vec<String> = Vec::new();
        for p in &points {
            if !series.contains(&p.series) {
                series.push(p.series.clone());
            }
        }
        let crossovers = series.iter().map(|s| crossover(&points, s)).collect();
        Summary {
            kind,
            baseline: baseline.into(),
            changed: changed.into(),
            points,
            crossovers,
            pays_above: PAYS_ABOVE,
        }
    }

    /// The section: a row per point (both sides' medians, the speedup and its interval, whether
    /// it pays, the sweep's own figures), the rule, where each line pays, and `notes`.
    pub fn section(&self, title: &str, notes: Vec<String>) -> Section {
        let axis = self.kind.axis();
        let mut figure_names: Vec<String> = Vec::new();
        for (name, _) in self.points.iter().flat_map(|p| &p.figures) {
            if !figure_names.contains(name) {
                figure_names.push(name.clone());
            }
        }
        let mut table = Table::new()
            .left("line")
            .right(axis.title())
            .right(self.baseline.as_str())
            .right(self.changed.as_str())
            .right("speedup")
            .right("95% interval")
            .left("pays");
        for name in &figure_names {
            table = table.right(name.as_str());
        }
        for p in &self.points {
            let median = |s: &Option<Side>| match s {
                None => "skipped".to_string(),
                Some(s) if !s.passed => "FAILED".to_string(),
                Some(s) => format_ms(s.median_ms),
            };
            let r = p.speedup();
            let mut row = vec![
                p.series.clone(),
                axis.label(p.x),
                median(&p.baseline),
                median(&p.changed),
                cell(r, |r| format!("{}x", three_figures(r.value))),
                cell(r, |r| {
                    let (lo, hi) = r.interval95();
                    format!("{}..{}", three_figures(lo), three_figures(hi))
                }),
                cell(p.pays(), |pays| if pays { "yes" } else { "no" }.to_string()),
            ];
            for name in &figure_names {
                row.push(cell(p.figure(name), three_figures));
            }
            table.row(row);
        }
        let mut lines = vec![rule_line()];
        for c in &self.crossovers {
            lines.push(format!(
                "{}: {} {}",
                c.series,
                self.changed,
                c.sentence(axis)
            ));
        }
        lines.extend(notes);
        Section {
            table: Some(table),
            lines,
            data: serde_json::to_value(self).unwrap_or_default(),
            ..Section::new(title)
        }
    }

    /// The summary a sweep's report keeps in its first section.
    pub fn from_section(section: &Section) -> Option<Summary> {
        serde_json::from_value(section.data.clone()).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn side(ms: f64) -> Side {
        Side {
            median_ms: ms,
            noise: 0.01,
            samples: 20,
            passed: true,
        }
    }

    fn point(series: &str, x: u64, baseline_ms: f64, changed_ms: f64) -> Point {
        Point {
            series: series.into(),
            x,
            baseline: Some(side(baseline_ms)),
            changed: Some(side(changed_ms)),
            figures: Vec::new(),
        }
    }

    #[test]
    fn sizes_read_as_binary_units() {
        assert_eq!(size_label(32 << 10), "32 KiB");
        assert_eq!(size_label(64 << 20), "64 MiB");
        assert_eq!(size_label(1536), "1.5 KiB");
        assert_eq!(size_label(512), "512 B");
        assert_eq!(Axis::Count("steps per graph").label(16), "16");
        assert_eq!(Kind::Graphs.axis().title(), "steps per graph");
        assert_eq!(Kind::Pinned.lesson(), "ch1-basics-sweep-pinned");
        assert_eq!(Kind::All.each().len(), 4);
        assert_eq!(Kind::Batch.each(), vec![Kind::Batch]);
    }

    #[test]
    fn a_point_pays_when_clear_of_one_and_over_the_threshold() {
        assert_eq!(point("a", 1, 2.0, 1.0).pays(), Some(true));
        assert_eq!(point("a", 1, 1.05, 1.0).pays(), Some(false), "under 1.1x");
        // 1.2x, but with 30% noise on 5 samples the interval reaches below 1.0.
        let mut noisy = point("a", 1, 1.2, 1.0);
        noisy.baseline.as_mut().unwrap().noise = 0.3;
        noisy.baseline.as_mut().unwrap().samples = 5;
        let (lo, _) = noisy.speedup().unwrap().interval95();
        assert!(lo < 1.0, "{lo}");
        assert_eq!(noisy.pays(), Some(false));
        // A failed or skipped side: nothing to judge.
        let mut failed = point("a", 1, 2.0, 1.0);
        failed.changed.as_mut().unwrap().passed = false;
        assert!(failed.failed());
        assert_eq!(failed.pays(), None);
        let mut skipped = point("a", 1, 2.0, 1.0);
        skipped.baseline = None;
        assert_eq!(skipped.speedup(), None);
    }

    #[test]
    fn the_crossover_is_where_every_larger_size_pays() {
        // Pinned copies: no gain while small, a clear one from 1 MiB on.
        let pts = vec![
            point("eager", 32 << 10, 1.0, 1.0),
            point("eager", 256 << 10, 1.05, 1.0),
            point("eager", 1 << 20, 1.5, 1.0),
            point("eager", 64 << 20, 6.0, 1.0),
            point("other", 32 << 10, 9.0, 1.0),
        ];
        let c = crossover(&pts, "eager");
        assert_eq!(c.pays_from, Some(1 << 20));
        assert_eq!(c.pays_up_to, None);
        assert_eq!(c.paying, vec![(1 << 20, 64 << 20)]);
        assert_eq!(c.measured, Some((32 << 10, 64 << 20)));
        assert_eq!(
            c.sentence(Axis::Bytes),
            "pays from 1 MiB on (up to 64 MiB, the largest measured)"
        );
        // Out of order in, the same answer.
        let mut shuffled = pts.clone();
        shuffled.reverse();
        assert_eq!(crossover(&shuffled, "eager"), c);
    }

    #[test]
    fn a_gain_that_fades_pays_up_to_a_size_and_gaps_are_said() {
        // A larger batch: accumulating small microbatches costs a lot, large ones little.
        let batch = vec![
            point("b", 8, 40.0, 1.0),
            point("b", 64, 5.0, 1.0),
            point("b", 512, 1.3, 1.0),
            point("b", 4096, 1.0, 1.0),
        ];
        let c = crossover(&batch, "b");
        assert_eq!((c.pays_from, c.pays_up_to), (None, Some(512)));
        assert_eq!(
            c.sentence(Axis::Count("samples")),
            "pays up to 512, not beyond (measured up to 4096)"
        );
        let all = vec![point("a", 1, 2.0, 1.0), point("a", 2, 2.0, 1.0)];
        let c = crossover(&all, "a");
        assert_eq!((c.pays_from, c.pays_up_to), (Some(1), Some(2)));
        assert_eq!(
            c.sentence(Axis::Count("x")),
            "pays at every size measured (1..2)"
        );
        let none = vec![point("a", 1, 1.0, 1.0), point("a", 2, 1.0, 1.0)];
        let c = crossover(&none, "a");
        assert_eq!((c.pays_from, c.pays_up_to), (None, None));
        assert_eq!(
            c.sentence(Axis::Count("x")),
            "pays at no size measured (1..2)"
        );
        let gaps = vec![
            point("a", 1, 2.0, 1.0),
            point("a", 2, 1.0, 1.0),
            point("a", 4, 2.0, 1.0),
            point("a", 8, 2.0, 1.0),
            point("a", 16, 1.0, 1.0),
        ];
        let c = crossover(&gaps, "a");
        assert_eq!(c.paying, vec![(1, 1), (4, 8)]);
        assert_eq!((c.pays_from, c.pays_up_to), (None, Some(1)));
        assert_eq!(c.sentence(Axis::Count("x")), "pays at 1 and 4..8");
        assert_eq!(
            crossover(&[], "a").sentence(Axis::Bytes),
            "nothing measured to judge"
        );
        // The largest pays but a gap lies below: it pays from after the gap.
        let late = vec![
            point("a", 1, 2.0, 1.0),
            point("a", 2, 1.0, 1.0),
            point("a", 4, 2.0, 1.0),
        ];
        let c = crossover(&late, "a");
        assert_eq!((c.pays_from, c.pays_up_to), (Some(4), Some(1)));
    }

    #[test]
    fn the_section_lays_out_every_point_and_keeps_the_summary() {
        let mut pts = vec![
            point("eager", 32 << 10, 1.0, 1.0),
            point("eager", 1 << 20, 3.0, 1.0),
            point("overlapped", 32 << 10, 1.0, 1.0),
        ];
        pts[1].figures.push(("GB/s".into(), 52.3));
        let mut failed = point("overlapped", 1 << 20, 3.0, 1.0);
        failed.changed.as_mut().unwrap().passed = false;
        pts.push(failed);
        let summary = Summary::new(Kind::Pinned, ("pageable", "pinned"), pts);
        assert_eq!(summary.crossovers.len(), 2);
        let s = summary.section("pinned copies", vec!["a note".into()]);
        let md = s.markdown();
        assert!(
            md.contains(
                "| line | bytes | pageable | pinned | speedup | 95% interval | pays | GB/s |"
            ),
            "{md}"
        );
        assert!(
            md.contains(
                "| eager | 1 MiB | 3.000 ms | 1.000 ms | 3.00x | 2.98..3.02 | yes | 52.3 |"
            ),
            "{md}"
        );
        assert!(
            md.contains("| overlapped | 1 MiB | 3.000 ms | FAILED | - | - | - | - |"),
            "{md}"
        );
        assert!(
            md.contains("eager: pinned pays only at the largest size measured, 1 MiB"),
            "{md}"
        );
        assert!(
            md.contains("overlapped: pinned pays at no size measured (32 KiB..32 KiB)"),
            "{md}"
        );
        assert!(md.contains(&rule_line()) && md.contains("a note"), "{md}");
        assert_eq!(Summary::from_section(&s), Some(summary));
    }

    #[test]
    fn sides_come_from_the_variant_reports_of_each_group() {
        use common::counters::Work;
        use common::verify::{check, Precision};
        let report = |group: &str, name: &str, ms: Option<f64>, status: Status| {
            let mut v = VariantReport::checked(
                name,
                "",
                Precision::Fp32,
                vec![check(&[1.0f32], &[1.0], 0.0, "ref")],
                Work::default(),
            );
            v.group = group.into();
            v.status = status;
            v.time_ms = ms.and_then(|m| common::stats::Summary::of(&[m, m]));
            v
        };
        let plan = vec![
            Planned {
                group: "eager 32 KiB".into(),
                series: "eager".into(),
                x: 32 << 10,
            },
            Planned {
                group: "eager 64 KiB".into(),
                series: "eager".into(),
                x: 64 << 10,
            },
        ];
        let variants = vec![
            report("eager 32 KiB", "pageable", Some(2.0), Status::Ok),
            report("eager 32 KiB", "pinned", Some(1.0), Status::Ok),
            report("eager 64 KiB", "pageable", None, Status::Skipped),
            report("eager 64 KiB", "pinned", None, Status::Failed),
        ];
        let pts = points(&plan, &variants, ("pageable", "pinned"));
        assert_eq!(pts[0].speedup().unwrap().value, 2.0);
        assert_eq!(pts[1].baseline, None);
        assert!(!pts[1].changed.as_ref().unwrap().passed);
        assert_eq!(pts[1].changed.as_ref().unwrap().median_ms, f64::INFINITY);
        // The JSON of a failed side reads back (infinite medians are null there).
        let json = serde_json::to_string(&pts).unwrap();
        let back: Vec<Point> = serde_json::from_str(&json).unwrap();
        assert_eq!(back, pts);
    }
}
