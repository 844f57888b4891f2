//! # Sweeps: a pair measured across the size that decides it
//!
//! A sweep declares its axes as nvbench does, a named axis and its values ([Axis]), its points
//! the axes' product or a list ([Plan]), and says how to run each side of a point ([Sweep]).
//! [SweepLesson] makes it a lesson of the one runner: every point is a group of two variants
//! (the way things were, as the group's baseline, and the change), each checked before it is
//! timed.
//!
//! One rule reads the points: each speedup comes with its 95% interval (from each median's
//! standard error), and the change pays at a point when the interval's low end clears the
//! sweep's bar (1.0: faster at all; X: at least X times faster). A raw ratio over the bar is
//! not enough. [Crossover] says where the change pays along each line ("from 2 MiB on", "up to
//! 256"), [Summary] keeps the points in the report's first section, and [plot] draws them.

pub mod plot;

use plotting::format::human_bytes;
use serde::{Deserialize, Serialize};

use crate::bench::BenchConfig;
use crate::gpu::Gpu;
use crate::report::{Metric, Section, Status, VariantReport};
use crate::runner::{Lesson, Meter, Output, Reference, VariantSpec};
use crate::stats::{infinite_as_null, MedianOf, Ratio};
use crate::table::{cell, format_ms, three_figures, Table};
use crate::Result;

/// How an axis's values read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Unit {
    /// "32 KiB", "64 MiB".
    Bytes,
    /// The number as it is.
    Count,
}

impl Unit {
    pub fn label(self, v: u64) -> String {
        match self {
            Unit::Bytes => human_bytes(v),
            Unit::Count => v.to_string(),
        }
    }
}

/// A named axis and its values, each with the label it reads as.
#[derive(Debug, Clone, PartialEq)]
pub struct Axis {
    pub name: String,
    pub unit: Unit,
    pub values: Vec<u64>,
    pub labels: Vec<String>,
}

impl Axis {
    /// Sizes in bytes (sorted, each once).
    pub fn bytes(name: &str, values: &[u64]) -> Axis {
        Axis::of(name, Unit::Bytes, values)
    }

    /// Counts (sorted, each once).
    pub fn counts(name: &str, values: &[u64]) -> Axis {
        Axis::of(name, Unit::Count, values)
    }

    /// Values that are names ("eager", "overlapped"), in the order given; each value is its
    /// name's index.
    pub fn names(name: &str, names: &[&str]) -> Axis {
        Axis {
            name: name.into(),
            unit: Unit::Count,
            values: (0..names.len() as u64).collect(),
            labels: names.iter().map(|n| n.to_string()).collect(),
        }
    }

    fn of(name: &str, unit: Unit, values: &[u64]) -> Axis {
        let mut values = values.to_vec();
        values.sort_unstable();
        values.dedup();
        Axis {
            name: name.into(),
            unit,
            labels: values.iter().map(|&v| unit.label(v)).collect(),
            values,
        }
    }

    /// The same values read by `label` ("16 buffers per use").
    pub fn labelled(self, label: impl Fn(u64) -> String) -> Axis {
        Axis {
            labels: self.values.iter().map(|&v| label(v)).collect(),
            ..self
        }
    }

    /// The label of `v`: its own where it is one of the values, else as its unit reads.
    pub fn label(&self, v: u64) -> String {
        match self.values.iter().position(|&x| x == v) {
            Some(i) => self.labels[i].clone(),
            None => self.unit.label(v),
        }
    }
}

/// A sweep's points: a value on every axis each, in the order they run; one axis runs across
/// (the size that decides), the others name the lines.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub axes: Vec<Axis>,
    pub points: Vec<Vec<u64>>,
    pub across: usize,
    /// The baseline's name and the change's, as the variants of every point are named.
    pub sides: [String; 2],
    /// The change pays at a point when its speedup's 95% interval lies above this.
    pub bar: f64,
}

impl Plan {
    /// Every combination of the axes' values, the first axis outermost (nvbench's product);
    /// `across` names the axis across.
    pub fn product(axes: Vec<Axis>, across: &str, sides: [&str; 2], bar: f64) -> Plan {
        let mut points: Vec<Vec<u64>> = vec![Vec::new()];
        for axis in &axes {
            points = points
                .into_iter()
                .flat_map(|p| {
                    axis.values.iter().map(move |&v| {
                        let mut p = p.clone();
                        p.push(v);
                        p
                    })
                })
                .collect();
        }
        Plan::list(axes, points, across, sides, bar)
    }

    /// The points given, a value per axis each (nvbench's zipped axes, or any hand-made list).
    pub fn list(
        axes: Vec<Axis>,
        points: Vec<Vec<u64>>,
        across: &str,
        sides: [&str; 2],
        bar: f64,
    ) -> Plan {
        assert!(points.iter().all(|p| p.len() == axes.len()));
        let across = axes
            .iter()
            .position(|a| a.name == across)
            .expect("the axis across is one of the axes");
        Plan {
            axes,
            points,
            across,
            sides: sides.map(String::from),
            bar,
        }
    }

    /// Point `point`'s value on the axis named `axis`.
    pub fn value(&self, point: usize, axis: &str) -> u64 {
        let i = self.axes.iter().position(|a| a.name == axis);
        self.points[point][i.expect("an axis of the plan")]
    }

    /// Where point `point` sits across.
    pub fn x(&self, point: usize) -> u64 {
        self.points[point][self.across]
    }

    /// The line of point `point`: its labels on the other axes ("eager", "16 buffers per use").
    pub fn series(&self, point: usize) -> String {
        let labels: Vec<String> = (0..self.axes.len())
            .filter(|&a| a != self.across)
            .map(|a| self.axes[a].label(self.points[point][a]))
            .collect();
        labels.join(", ")
    }

    /// The values on the axis named `axis`, each once, in the order the points reach them.
    pub fn values_of(&self, axis: &str) -> Vec<u64> {
        let mut out: Vec<u64> = Vec::new();
        for p in 0..self.points.len() {
            let v = self.value(p, axis);
            if !out.contains(&v) {
                out.push(v);
            }
        }
        out
    }

    /// (point, the change's side) of variant `index`: two variants per point, baseline first.
    pub fn locate(index: usize) -> (usize, bool) {
        (index / 2, index % 2 == 1)
    }

    /// The plan in the report's parameters: each axis's values and the bar.
    pub fn parameters(&self) -> serde_json::Value {
        let axes: serde_json::Map<String, serde_json::Value> = self
            .axes
            .iter()
            .map(|a| (a.name.clone(), serde_json::json!(a.labels)))
            .collect();
        serde_json::json!({ "axes": axes, "points": self.points.len(), "bar": self.bar })
    }
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

    fn timed(&self) -> bool {
        self.passed && self.median_ms > 0.0 && self.median_ms.is_finite() && self.noise.is_finite()
    }
}

/// One point: where it sits (its line, its size), both sides, and figures of the sweep's own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Point {
    pub series: String,
    pub x: u64,
    /// The way things were (the group's baseline).
    pub baseline: Option<Side>,
    /// The change.
    pub changed: Option<Side>,
    /// Why the point was not measured, when it was skipped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    /// Figures of the sweep's own at this point (name, value), e.g. nodes per graph.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub figures: Vec<(String, f64)>,
}

impl Point {
    /// Baseline over change, with its uncertainty, when both sides verified and were timed.
    pub fn speedup(&self) -> Option<Ratio> {
        let (b, c) = (self.baseline.as_ref()?, self.changed.as_ref()?);
        (b.timed() && c.timed()).then(|| Ratio::of_medians(b.median(), c.median()))
    }

    /// The rule: the change pays here when its speedup's 95% interval lies above `bar`. None
    /// when there is no speedup to judge.
    pub fn pays(&self, bar: f64) -> Option<bool> {
        self.speedup().map(|r| r.interval95().0 > bar)
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

/// Where a change pays along one line of a sweep (or across all of them).
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
    /// The smallest size from which on it pays at no size measured; None when it pays at the
    /// largest.
    #[serde(default)]
    pub stops_from: Option<u64>,
}

/// Judge sizes (any order, each once) that pay or do not.
pub fn crossover(series: &str, mut judged: Vec<(u64, bool)>) -> Crossover {
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
        (Some(&(_, true)), Some(&(from, _))) => Some(from),
        _ => None,
    };
    let pays_up_to = match (judged.first(), paying.first()) {
        (Some(&(first, true)), Some(&(f, up))) if f == first => Some(up),
        _ => None,
    };
    let stops_from = match paying.last() {
        None => judged.first().map(|j| j.0),
        Some(&(_, last)) => judged.iter().map(|j| j.0).find(|&x| x > last),
    };
    Crossover {
        series: series.to_string(),
        pays_from,
        pays_up_to,
        paying,
        measured,
        stops_from,
    }
}

impl Crossover {
    /// In words, sizes written by `label`: "pays from 2 MiB on", "pays up to 256", "pays at
    /// every size measured (32 KiB..64 MiB)", "pays at no size measured", "pays at 4..16 and
    /// 256..512".
    pub fn sentence(&self, label: impl Fn(u64) -> String) -> String {
        let l = |x: u64| label(x);
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

/// The axis across, as a summary keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AcrossAxis {
    pub name: String,
    pub unit: Unit,
}

/// Everything a sweep found, as its first section keeps it in the JSON and its plot draws it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub axis: AcrossAxis,
    /// What the baseline and the change are ("pageable", "pinned").
    pub baseline: String,
    pub changed: String,
    pub points: Vec<Point>,
    /// Where the change pays along each line, in the order the lines first appear.
    pub crossovers: Vec<Crossover>,
    pub bar: f64,
}

impl Summary {
    pub fn new(axis: AcrossAxis, sides: [&str; 2], points: Vec<Point>, bar: f64) -> Summary {
        let mut series: Vec<String> = Vec::new();
        for p in &points {
            if !series.contains(&p.series) {
                series.push(p.series.clone());
            }
        }
        let judged = |s: &String| {
            points
                .iter()
                .filter(|p| p.series == *s)
                .filter_map(|p| p.pays(bar).map(|pays| (p.x, pays)))
                .collect()
        };
        let crossovers = series.iter().map(|s| crossover(s, judged(s))).collect();
        Summary {
            axis,
            baseline: sides[0].into(),
            changed: sides[1].into(),
            points,
            crossovers,
            bar,
        }
    }

    /// Where the change pays on any line: a size pays when some line pays there.
    pub fn across_lines(&self) -> Crossover {
        let mut judged: Vec<(u64, bool)> = Vec::new();
        for p in &self.points {
            let Some(pays) = p.pays(self.bar) else {
                continue;
            };
            match judged.iter_mut().find(|j| j.0 == p.x) {
                Some(j) => j.1 |= pays,
                None => judged.push((p.x, pays)),
            }
        }
        crossover("every line", judged)
    }

    /// A size as the axis across reads it.
    pub fn label(&self, x: u64) -> String {
        self.axis.unit.label(x)
    }

    /// The rule, said once per sweep.
    pub fn rule_line(&self) -> String {
        format!(
            "rule: the change pays at a size when the low end of its speedup's 95% interval (1.96 standard uncertainties of the ratio of medians) lies above {}x; it pays from a size on when it pays there and at every larger size measured",
            self.bar
        )
    }

    /// The section: a row per point (both sides' medians, the speedup and its interval, whether
    /// it pays, the sweep's own figures), the rule, where each line pays, and `notes`; the
    /// summary in its data.
    pub fn section(&self, title: &str, notes: Vec<String>) -> Section {
        let mut figure_names: Vec<String> = Vec::new();
        for (name, _) in self.points.iter().flat_map(|p| &p.figures) {
            if !figure_names.contains(name) {
                figure_names.push(name.clone());
            }
        }
        let mut table = Table::new()
            .left("line")
            .right(self.axis.name.as_str())
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
                self.label(p.x),
                median(&p.baseline),
                median(&p.changed),
                cell(r, |r| format!("{}x", three_figures(r.value))),
                cell(r, |r| {
                    let (lo, hi) = r.interval95();
                    format!("{}..{}", three_figures(lo), three_figures(hi))
                }),
                cell(p.pays(self.bar), |pays| {
                    if pays { "yes" } else { "no" }.to_string()
                }),
            ];
            for name in &figure_names {
                row.push(cell(p.figure(name), three_figures));
            }
            table.row(row);
        }
        let mut lines = vec![self.rule_line()];
        for c in &self.crossovers {
            let says = c.sentence(|x| self.label(x));
            lines.push(format!("{}: {} {says}", c.series, self.changed));
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

/// What a sweep is: its plan, and how to run and check each side of a point. [SweepLesson]
/// runs it through the one runner.
pub trait Sweep {
    /// The lesson name of its report ("ch1-basics-sweep-pinned"), and the stem of its files.
    fn name(&self) -> &str;
    fn plan(&self) -> &Plan;
    /// The runner's group of point `point` ("eager 32 KiB").
    fn group(&self, point: usize) -> String;
    /// Sizes, seeds and settings of its own, recorded beside the plan in the JSON.
    fn parameters(&self) -> serde_json::Value;
    /// What one side of a point is (its name and group are the plan's).
    fn spec(&self, point: usize, changed: bool) -> VariantSpec;
    fn reference(&self, _point: usize) -> Option<&Reference> {
        None
    }
    /// Whether the change's output is also checked against the baseline's.
    fn check_against_baseline(&self) -> bool {
        false
    }
    /// Why a point is not run (asked for each side before it runs).
    fn skip(&mut self, _point: usize) -> Option<String> {
        None
    }
    fn poison(&mut self, gpu: &Gpu, point: usize) -> Result<()>;
    fn run(&mut self, gpu: &Gpu, point: usize, changed: bool) -> Result<()>;
    fn output(&mut self, gpu: &Gpu, point: usize, changed: bool) -> Result<Output>;
    fn bench_config(&self, point: usize, changed: bool, cfg: BenchConfig) -> BenchConfig;
    /// Figures of its own for a side that verified and was timed.
    fn metrics(
        &mut self,
        _point: usize,
        _changed: bool,
        _timed: &VariantReport,
    ) -> Result<Vec<Metric>> {
        Ok(Vec::new())
    }
    /// Figures of its own at point `index`, from the point and its change's report.
    fn figures(
        &self,
        _index: usize,
        _point: &Point,
        _changed: Option<&VariantReport>,
    ) -> Vec<(String, f64)> {
        Vec::new()
    }
    /// The report's sections from the summary, the first keeping it (see [Summary::section]);
    /// `bench` is the run's measuring settings.
    fn sections(&mut self, summary: Summary, bench: BenchConfig) -> Vec<Section>;
}

/// The points of `sweep` from the runner's variant reports, and their summary.
pub fn summarize(sweep: &dyn Sweep, variants: &[VariantReport]) -> Summary {
    let plan = sweep.plan();
    let points = (0..plan.points.len())
        .map(|i| {
            let group = sweep.group(i);
            let report = |side: &str| variants.iter().find(|v| v.group == group && v.name == side);
            let (b, c) = (report(&plan.sides[0]), report(&plan.sides[1]));
            let skipped = [b, c]
                .into_iter()
                .flatten()
                .find(|v| v.status == Status::Skipped)
                .map(|v| v.note.clone().unwrap_or_default());
            let mut point = Point {
                series: plan.series(i),
                x: plan.x(i),
                baseline: b.and_then(Side::of),
                changed: c.and_then(Side::of),
                skipped,
                figures: Vec::new(),
            };
            point.figures = sweep.figures(i, &point, c);
            point
        })
        .collect();
    let axis = &plan.axes[plan.across];
    let across = AcrossAxis {
        name: axis.name.clone(),
        unit: axis.unit,
    };
    let sides = [plan.sides[0].as_str(), plan.sides[1].as_str()];
    Summary::new(across, sides, points, plan.bar)
}

/// A sweep as a lesson of the one runner: two variants per point, the baseline first.
pub struct SweepLesson<S: Sweep>(pub S);

impl<S: Sweep> Lesson for SweepLesson<S> {
    fn name(&self) -> &str {
        self.0.name()
    }

    fn parameters(&self) -> serde_json::Value {
        let mut p = self.0.plan().parameters();
        if let (Some(all), serde_json::Value::Object(own)) =
            (p.as_object_mut(), self.0.parameters())
        {
            all.extend(own);
        }
        p
    }

    fn variants(&self) -> Vec<VariantSpec> {
        let plan = self.0.plan();
        (0..plan.points.len())
            .flat_map(|point| {
                [false, true].map(|changed| VariantSpec {
                    name: plan.sides[changed as usize].clone(),
                    group: self.0.group(point),
                    ..self.0.spec(point, changed)
                })
            })
            .collect()
    }

    fn reference(&self, index: usize) -> Option<&Reference> {
        self.0.reference(Plan::locate(index).0)
    }

    fn check_against_baseline(&self, _index: usize) -> bool {
        self.0.check_against_baseline()
    }

    fn skip(&mut self, index: usize) -> Option<String> {
        self.0.skip(Plan::locate(index).0)
    }

    fn poison(&mut self, gpu: &Gpu, index: usize) -> Result<()> {
        self.0.poison(gpu, Plan::locate(index).0)
    }

    fn run(&mut self, gpu: &Gpu, index: usize) -> Result<()> {
        let (point, changed) = Plan::locate(index);
        self.0.run(gpu, point, changed)
    }

    fn output(&mut self, gpu: &Gpu, index: usize) -> Result<Output> {
        let (point, changed) = Plan::locate(index);
        self.0.output(gpu, point, changed)
    }

    fn bench_config(&self, index: usize, cfg: BenchConfig) -> BenchConfig {
        let (point, changed) = Plan::locate(index);
        self.0.bench_config(point, changed, cfg)
    }

    fn metrics(
        &mut self,
        _gpu: &Gpu,
        index: usize,
        timed: &VariantReport,
        _meter: &mut Meter,
    ) -> Result<Vec<Metric>> {
        let (point, changed) = Plan::locate(index);
        self.0.metrics(point, changed, timed)
    }

    fn sections(
        &mut self,
        _gpu: &Gpu,
        variants: &[VariantReport],
        meter: &mut Meter,
    ) -> Result<Vec<Section>> {
        let summary = summarize(&self.0, variants);
        Ok(self.0.sections(summary, meter.bench))
    }
}

#[cfg(test)]
mod tests;
