//! The one runner every measured figure of a lesson goes through, kept apart like nvbench's:
//!
//! - what is measured: a lesson implements [Lesson] (its variants, how to run one, its output,
//!   the reference that output must match, and any figures of its own);
//! - how it is measured: [RunOptions] (the stopping rule, hot or cold, which variants) and the
//!   lesson's [Lesson::bench_config] per variant (held behind the blocking kernel, or runs that
//!   synchronize with the host); the samples are taken by [Meter], the one place that records
//!   them;
//! - how it is printed: the [LessonReport] it returns ([crate::report]).
//!
//! Per variant: poison, run once, check the output (against the float64 reference, against
//! the baseline's output, or by the lesson's own check), then warm up and time; a variant that
//! fails is not timed and gets no speedup. Speedups are taken within a group, against the
//! group's first variant. Groups run one after another, each begun and ended by the lesson
//! ([Lesson::begin_group], [Lesson::end_group]): [Parts] runs lessons as the groups of one
//! that way. Each variant runs inside an NVTX range `lesson:variant` (`lesson:group:variant`
//! in a group; with `verify`, then `warmup` and `timed`); with a trace file in the options the
//! runner records a CUPTI trace of the timed regions.

use std::path::PathBuf;
use std::time::Instant;

use cudarc::driver::CudaSlice;

use crate::bench::{measure, BenchConfig, Measurement, Timer};
use crate::ceilings;
use crate::counters::{Traffic, Work};
use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::kernels;
use crate::nvtx;
use crate::report::{
    variant_id, LessonReport, Metric, ProcessClock, Provenance, Section, Startup, Status,
    VariantClock, VariantReport, SCHEMA_VERSION,
};
use crate::stats::Summary;
use crate::trace;
use crate::verify::{check_values, Precision, Verification};

/// What a variant is, before it runs.
#[derive(Debug, Clone)]
pub struct VariantSpec {
    pub name: String,
    /// The part or sweep point it belongs to; empty for a lesson of one group.
    pub group: String,
    pub description: String,
    pub precision: Precision,
    pub work: Work,
    /// Relative L2 tolerance; the precision's default unless the lesson says otherwise.
    pub tolerance: f64,
    pub traffic: Traffic,
}

impl VariantSpec {
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        precision: Precision,
        work: Work,
    ) -> Self {
        VariantSpec {
            name: name.into(),
            group: String::new(),
            description: description.into(),
            precision,
            work,
            tolerance: precision.tolerance(),
            traffic: Traffic::DeviceMemory,
        }
    }

    /// Its bytes are copies between host and device, not device-memory traffic.
    pub fn host_device(self) -> Self {
        VariantSpec {
            traffic: Traffic::HostDevice,
            ..self
        }
    }

    pub fn in_group(self, group: impl Into<String>) -> Self {
        VariantSpec {
            group: group.into(),
            ..self
        }
    }

    pub fn with_tolerance(self, tolerance: f64) -> Self {
        VariantSpec { tolerance, ..self }
    }

    /// "group:name", or the name alone outside a group.
    pub fn id(&self) -> String {
        variant_id(&self.group, &self.name)
    }
}

/// Values of one output part, as the run produced them.
#[derive(Debug, Clone, PartialEq)]
pub enum Values {
    F32(Vec<f32>),
    F64(Vec<f64>),
}

impl Values {
    fn check<R: Copy + Into<f64> + Sync>(
        &self,
        reference: &[R],
        tolerance: f64,
        against: &str,
    ) -> Verification {
        match self {
            Values::F32(v) => check_values(v, reference, tolerance, against),
            Values::F64(v) => check_values(v, reference, tolerance, against),
        }
    }

    /// Checked against another output's values, each read as float64 where it is compared
    /// (a baseline kept as it was produced: no float64 copy of it is made).
    fn check_against(&self, other: &Values, tolerance: f64, against: &str) -> Verification {
        match other {
            Values::F32(r) => self.check(r, tolerance, against),
            Values::F64(r) => self.check(r, tolerance, against),
        }
    }
}

impl From<Vec<f32>> for Values {
    fn from(v: Vec<f32>) -> Values {
        Values::F32(v)
    }
}

impl From<Vec<f64>> for Values {
    fn from(v: Vec<f64>) -> Values {
        Values::F64(v)
    }
}

/// One named part of a variant's output ("output", "weight change", "loss curve").
#[derive(Debug, Clone, PartialEq)]
pub struct Part {
    pub name: String,
    pub values: Values,
    /// This part's tolerance, where it differs from the variant's.
    pub tolerance: Option<f64>,
}

/// What a checked run left, for the runner to check: parts it compares with the reference
/// (and the baseline), and checks the lesson made itself (a closed form computed on the fly,
/// sampled elements of a huge output).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Output {
    pub parts: Vec<Part>,
    pub checks: Vec<Verification>,
}

impl Output {
    /// The whole output as one part named "output".
    pub fn values(values: impl Into<Values>) -> Output {
        Output::default().part("output", values, None)
    }

    /// Checks the lesson made itself.
    pub fn checked(checks: Vec<Verification>) -> Output {
        Output {
            parts: Vec::new(),
            checks,
        }
    }

    pub fn part(
        mut self,
        name: impl Into<String>,
        values: impl Into<Values>,
        tolerance: Option<f64>,
    ) -> Output {
        self.parts.push(Part {
            name: name.into(),
            values: values.into(),
            tolerance,
        });
        self
    }
}

/// Output parts by name, in float64.
type NamedValues = Vec<(String, Vec<f64>)>;

/// A baseline's output parts by name, as the run produced them.
type BaselineParts = Vec<(String, Values)>;

/// The float64 values every variant's output must match, part by part.
#[derive(Debug, Clone, PartialEq)]
pub struct Reference {
    /// What it is ("float64 CPU reference").
    pub label: String,
    pub parts: NamedValues,
}

impl Reference {
    /// One part named "output".
    pub fn single(label: impl Into<String>, values: Vec<f64>) -> Reference {
        Reference {
            label: label.into(),
            parts: vec![("output".into(), values)],
        }
    }

    fn part(&self, name: &str) -> Option<&[f64]> {
        self.parts
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_slice())
    }
}

/// How a run measures: plain values the command line (or a test) fills in.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Variants to run by id ("fused", "training:pinned") or unique name; empty: all.
    pub only: Vec<String>,
    /// The variants the command line asked for (`--variants`), named as in `only`: of those
    /// `only` selects, these alone run; empty: no narrowing.
    pub variants: Vec<String>,
    pub bench: BenchConfig,
    /// Re-measure the device ceilings instead of using the cached ones.
    pub refresh_ceilings: bool,
    /// Record a CUPTI trace of the timed regions into this file.
    pub trace: Option<PathBuf>,
    /// Test only: run this variant (by id) twice per timed run, a planted regression.
    pub plant_slowdown: Option<String>,
    /// The process's start-up clock, for the report's start-up phases.
    pub startup: Option<Startup>,
    /// Verify and time only: skip the lesson's own figures ([Lesson::metrics],
    /// [Lesson::sections]), as the compare does, which reads neither.
    pub skip_figures: bool,
}

impl RunOptions {
    /// Options that run only `variants`.
    pub fn only(self, variants: &[&str]) -> RunOptions {
        RunOptions {
            only: variants.iter().map(|s| s.to_string()).collect(),
            ..self
        }
    }

    /// The indexes of `specs` to run: those `only` selects ([select]), in its order, narrowed
    /// to those `variants` names when it names any (in the order it names them when `only`
    /// names none). A name that is no variant's, or a narrowing that leaves none, is an error.
    pub fn selected(&self, specs: &[VariantSpec]) -> Result<Vec<usize>> {
        if self.variants.is_empty() {
            return select(specs, &self.only);
        }
        let asked = select(specs, &self.variants)?;
        let chosen: Vec<usize> = if self.only.is_empty() {
            asked
        } else {
            let only = select(specs, &self.only)?;
            only.into_iter().filter(|i| asked.contains(i)).collect()
        };
        if chosen.is_empty() {
            return Err(Error::invalid(format!(
                "--variants {}: none of them is among the variants this binary runs",
                self.variants.join(",")
            )));
        }
        Ok(chosen)
    }
}

/// A measurement and its summary in milliseconds per run.
#[derive(Debug, Clone)]
pub struct Timed {
    pub measurement: Measurement,
    pub time_ms: Summary,
}

/// The runner's measuring machinery, lent to a lesson that times parts of its work (a step's
/// compute alone, each stage of a pipeline): the same timer, warmup and stopping rule as the
/// variants.
pub struct Meter<'a> {
    gpu: &'a Gpu,
    timer: &'a mut Timer,
    /// The run's measuring settings.
    pub bench: BenchConfig,
}

impl<'a> Meter<'a> {
    pub fn new(gpu: &'a Gpu, timer: &'a mut Timer, bench: BenchConfig) -> Meter<'a> {
        Meter { gpu, timer, bench }
    }

    /// Warm up and time `run` with `cfg`.
    pub fn measure(
        &mut self,
        cfg: &BenchConfig,
        run: &mut dyn FnMut() -> Result<()>,
    ) -> Result<Timed> {
        let measurement = measure(self.gpu, self.timer, cfg, run)?;
        let ms: Vec<f64> = measurement.samples_s.iter().map(|s| s * 1e3).collect();
        let time_ms = Summary::of(&ms).ok_or_else(|| Error::invalid("no valid samples"))?;
        Ok(Timed {
            measurement,
            time_ms,
        })
    }

    pub fn timer(&mut self) -> &mut Timer {
        self.timer
    }
}

/// What a lesson is: its variants and how to run and check each.
pub trait Lesson {
    /// The crate name, e.g. "ch1-intensity".
    fn name(&self) -> &str;
    /// Sizes, seeds and flags, recorded in the JSON.
    fn parameters(&self) -> serde_json::Value;
    /// Every variant; the first of each group is the group's baseline.
    fn variants(&self) -> Vec<VariantSpec>;
    /// The float64 values variant `index`'s output is checked against, when affordable.
    fn reference(&self, index: usize) -> Option<&Reference>;
    /// Whether variant `index`'s output parts are also checked against its group's baseline
    /// (when the baseline ran in the same run).
    fn check_against_baseline(&self, _index: usize) -> bool {
        false
    }
    /// Queue one run of variant `index` on `gpu.stream`.
    fn run(&mut self, gpu: &Gpu, index: usize) -> Result<()>;
    /// The device buffer variant `index` writes its whole output to, for lessons whose output
    /// is one f32 buffer: the default [Lesson::poison] and [Lesson::output] use it.
    fn output_buffer(&mut self, _index: usize) -> Option<&mut CudaSlice<f32>> {
        None
    }
    /// Fill variant `index`'s outputs with NaN so that unwritten elements cannot pass.
    fn poison(&mut self, gpu: &Gpu, index: usize) -> Result<()> {
        match self.output_buffer(index) {
            Some(buffer) => gpu.poison(buffer),
            None => Err(Error::invalid(
                "the lesson names no output buffer: it must poison its outputs itself",
            )),
        }
    }
    /// The output of the last run of variant `index`.
    fn output(&mut self, gpu: &Gpu, index: usize) -> Result<Output> {
        match self.output_buffer(index) {
            Some(buffer) => Ok(Output::values(gpu.download(buffer)?)),
            None => Err(Error::invalid(
                "the lesson names no output buffer: it must bring its output back itself",
            )),
        }
    }
    /// How variant `index` is measured, from the run's settings (e.g. `hold: false` for runs
    /// that synchronize with the host).
    fn bench_config(&self, _index: usize, cfg: BenchConfig) -> BenchConfig {
        cfg
    }
    /// Why variant `index` is not run at all (a sweep's time cap), asked before it runs.
    fn skip(&mut self, _index: usize) -> Option<String> {
        None
    }
    /// Figures of the lesson's own for a variant that verified and was timed.
    fn metrics(
        &mut self,
        _gpu: &Gpu,
        _index: usize,
        _timed: &VariantReport,
        _meter: &mut Meter,
    ) -> Result<Vec<Metric>> {
        Ok(Vec::new())
    }
    /// Before the first selected variant of `group` runs. A lesson whose groups are parts with
    /// state of their own ([Parts]) builds that part here.
    fn begin_group(&mut self, _gpu: &Gpu, _group: &str) -> Result<()> {
        Ok(())
    }
    /// After the last selected variant of `group` ran (`variants`: its reports, speedups
    /// given): the group's own figures when `figures` is set, taken while its state is alive,
    /// before the report's [Lesson::sections]. The lesson may drop the group's state after.
    fn end_group(
        &mut self,
        _gpu: &Gpu,
        _group: &str,
        _variants: &[VariantReport],
        _meter: &mut Meter,
        _figures: bool,
    ) -> Result<Vec<Section>> {
        Ok(Vec::new())
    }
    /// What the lesson derives from all its variants, after they ran.
    fn sections(
        &mut self,
        _gpu: &Gpu,
        _variants: &[VariantReport],
        _meter: &mut Meter,
    ) -> Result<Vec<Section>> {
        Ok(Vec::new())
    }
}

/// Which variants to run: all of them, or those named by id or by a name no other variant has
/// (unknown or ambiguous names are an error that lists the ids).
pub fn select(specs: &[VariantSpec], only: &[String]) -> Result<Vec<usize>> {
    if only.is_empty() {
        return Ok((0..specs.len()).collect());
    }
    let ids = || specs.iter().map(|s| s.id()).collect::<Vec<_>>().join(", ");
    only.iter()
        .map(|wanted| {
            if let Some(i) = specs.iter().position(|s| s.id() == *wanted) {
                return Ok(i);
            }
            let by_name: Vec<usize> = (0..specs.len())
                .filter(|&i| specs[i].name == *wanted)
                .collect();
            match by_name[..] {
                [i] => Ok(i),
                [] => Err(Error::invalid(format!(
                    "unknown variant '{wanted}': known variants are {}",
                    ids()
                ))),
                _ => Err(Error::invalid(format!(
                    "'{wanted}' names several variants: use one of {}",
                    ids()
                ))),
            }
        })
        .collect()
}

/// `selected` with each group's variants together, the groups in the order they are first named.
pub fn grouped(selected: &[usize], specs: &[VariantSpec]) -> Vec<usize> {
    let mut out: Vec<usize> = Vec::with_capacity(selected.len());
    for &i in selected {
        if !out.iter().any(|&j| specs[j].group == specs[i].group) {
            out.extend(
                selected
                    .iter()
                    .filter(|&&j| specs[j].group == specs[i].group),
            );
        }
    }
    out
}

/// The index of the baseline of variant `index`'s group: the group's first variant.
pub fn baseline_of(specs: &[VariantSpec], index: usize) -> usize {
    specs
        .iter()
        .position(|s| s.group == specs[index].group)
        .expect("a variant is in its own group")
}

/// Check a variant's output: each part against the reference's part of the same name and, when
/// given, the baseline's; then the lesson's own checks.
fn check_output(
    spec: &VariantSpec,
    output: &Output,
    reference: Option<&Reference>,
    baseline: Option<&BaselineParts>,
) -> Vec<Verification> {
    let mut checks = Vec::new();
    for part in &output.parts {
        let tolerance = part.tolerance.unwrap_or(spec.tolerance);
        if let Some(r) = reference.and_then(|r| r.part(&part.name).map(|v| (r, v))) {
            checks.push(
                part.values
                    .check(r.1, tolerance, &r.0.label)
                    .named(&part.name),
            );
        }
        if let Some((_, b)) = baseline
            .into_iter()
            .flatten()
            .find(|(name, _)| *name == part.name)
        {
            checks.push(
                part.values
                    .check_against(b, tolerance, "the baseline")
                    .named(&part.name),
            );
        }
    }
    checks.extend(output.checks.iter().cloned());
    checks
}

/// Verify and measure the selected variants and build the report.
pub fn run_lesson(
    gpu: &Gpu,
    lesson: &mut dyn Lesson,
    options: &RunOptions,
) -> Result<LessonReport> {
    let specs = lesson.variants();
    let selected = grouped(&options.selected(&specs)?, &specs);
    options.bench.stop.validate().map_err(Error::invalid)?;
    let mut startup = options.startup.clone();
    let mut clock = ProcessClock::default();
    let mut timer = Timer::new(gpu)?;
    let ceilings_start = Instant::now();
    let copy = ceilings::copy_bandwidth(gpu, &mut timer, options.refresh_ceilings)?;
    clock.ceilings_s = ceilings_start.elapsed().as_secs_f64();
    if let Some(s) = startup.as_mut() {
        s.mark("timer and ceilings ready");
    }
    let mut provenance = Provenance::now();
    // After the ceilings, so only the variants' timed regions are traced.
    let trace = trace::Session::start_if(options.trace.as_deref())?;
    let mut meter = Meter::new(gpu, &mut timer, options.bench);

    let mut variants: Vec<VariantReport> = Vec::new();
    let mut sections = Vec::new();
    let mut sections_s = 0.0;
    // Output parts of each group's baseline, for the variants checked against it.
    let mut baselines: Vec<(usize, BaselineParts)> = Vec::new();
    // Group by group, each group's variants together: a lesson of parts builds a part when its
    // group begins and takes its figures before dropping it when the group ends.
    for group in selected.chunk_by(|&a, &b| specs[a].group == specs[b].group) {
        let name = &specs[group[0]].group;
        lesson.begin_group(gpu, name)?;
        let first = variants.len();
        for &index in group {
            let spec = &specs[index];
            let id = spec.id();
            if let Some(why) = lesson.skip(index) {
                let mut report = VariantReport::checked(
                    &spec.name,
                    &spec.description,
                    spec.precision,
                    Vec::new(),
                    spec.work,
                );
                report.group = spec.group.clone();
                report.traffic = spec.traffic;
                report.status = Status::Skipped;
                report.note = Some(why);
                variants.push(report);
                continue;
            }
            let _variant_range = nvtx::range(&range_name(lesson.name(), &id));
            let verify_start = Instant::now();
            let mut variant_clock = VariantClock {
                id: id.clone(),
                ..VariantClock::default()
            };
            let verify_range = nvtx::range("verify");
            lesson.poison(gpu, index)?;
            lesson.run(gpu, index)?;
            gpu.sync()?;
            let output = lesson.output(gpu, index)?;
            drop(verify_range);
            let baseline = baseline_of(&specs, index);
            let against_baseline = if baseline == index || !lesson.check_against_baseline(index) {
                None
            } else {
                baselines
                    .iter()
                    .find(|(b, _)| *b == baseline)
                    .map(|(_, parts)| parts)
            };
            let checks = check_output(spec, &output, lesson.reference(index), against_baseline);
            let mut report = VariantReport::checked(
                &spec.name,
                &spec.description,
                spec.precision,
                checks,
                spec.work,
            );
            report.group = spec.group.clone();
            report.traffic = spec.traffic;
            if baseline == index && lesson.check_against_baseline(index) {
                let parts = output.parts.into_iter().map(|p| (p.name, p.values));
                baselines.push((index, parts.collect()));
            }
            variant_clock.verify_s = verify_start.elapsed().as_secs_f64();
            if report.status == Status::Failed {
                report.note = Some("not timed: a wrong answer has no speed".into());
                variants.push(report);
                clock.variants.push(variant_clock);
                continue;
            }
            if provenance.startup_to_first_sample_s.is_none() {
                if let Some(s) = startup.as_mut() {
                    s.mark("first variant verified");
                    provenance.startup_to_first_sample_s = Some(s.elapsed_s());
                    provenance.startup_phases = s.phases().to_vec();
                }
            }
            let repeats = if options.plant_slowdown.as_deref() == Some(id.as_str()) {
                2
            } else {
                1
            };
            let bench = BenchConfig {
                stop: options.bench.stop.for_traffic(spec.traffic),
                ..options.bench
            };
            let cfg = lesson.bench_config(index, bench);
            let measure_start = Instant::now();
            let timed = meter.measure(&cfg, &mut || {
                (0..repeats).try_for_each(|_| lesson.run(gpu, index))
            })?;
            variant_clock.sampling_s = timed.measurement.wall_s;
            variant_clock.warmup_s =
                measure_start.elapsed().as_secs_f64() - timed.measurement.wall_s;
            let throughput = spec.work.throughput(timed.time_ms.median / 1e3);
            report.fraction_of_copy_bandwidth = (spec.work.bytes() > 0
                && spec.traffic == Traffic::DeviceMemory)
                .then(|| throughput.gb_per_s / copy.value);
            report.throughput = Some(throughput);
            report.time_ms = Some(timed.time_ms);
            report.measurement = Some(timed.measurement);
            if !options.skip_figures {
                let metrics_start = Instant::now();
                report.metrics = lesson.metrics(gpu, index, &report, &mut meter)?;
                variant_clock.metrics_s = metrics_start.elapsed().as_secs_f64();
            }
            variants.push(report);
            clock.variants.push(variant_clock);
        }
        apply_speedups(&mut variants, &specs);
        // The group's end takes its figures, where asked, and drops a part's state: without
        // figures it is teardown, left to the rest of the set-up's time, not to the figures.
        let end_start = Instant::now();
        let figures = !options.skip_figures;
        let own = lesson.end_group(gpu, name, &variants[first..], &mut meter, figures)?;
        sections.extend(own);
        if figures {
            sections_s += end_start.elapsed().as_secs_f64();
        }
    }
    let sections_start = Instant::now();
    if !options.skip_figures {
        sections.extend(lesson.sections(gpu, &variants, &mut meter)?);
    }
    clock.sections_s = sections_s + sections_start.elapsed().as_secs_f64();
    if let Some(t) = trace {
        t.finish()?;
    }
    clock.kernels = kernels::clock();
    if let Some(s) = &startup {
        clock.finished_s = s.elapsed_s();
    }
    provenance.clock = Some(clock);

    Ok(LessonReport {
        schema_version: SCHEMA_VERSION,
        lesson: lesson.name().to_string(),
        device: gpu.info.clone(),
        provenance,
        parameters: lesson.parameters(),
        ceilings: vec![copy.as_ref_named("measured copy bandwidth")],
        variants,
        sections,
    })
}

/// How a part of a [Parts] lesson is built, once.
type Build<'a> = Box<dyn FnOnce() -> Result<Box<dyn Lesson + 'a>> + 'a>;

/// One part of a [Parts] lesson.
struct PartOf<'a> {
    group: String,
    specs: Vec<VariantSpec>,
    build: Option<Build<'a>>,
}

/// A lesson made of parts, each a lesson of its own and a group of this one (ch1-basics:
/// training, transpose, pipeline), run as one lesson into one report. A part is built when its
/// group begins and dropped once its figures are taken, so that no part's buffers sit beside
/// another's while it is measured (a memory-bound kernel's time can depend on where its
/// buffers land); a part none of whose variants is selected is never built. The report's
/// parameters hold each part's under its group.
pub struct Parts<'a> {
    name: String,
    parts: Vec<PartOf<'a>>,
    /// The part being run and its lesson.
    running: Option<(usize, Box<dyn Lesson + 'a>)>,
    parameters: serde_json::Map<String, serde_json::Value>,
}

impl<'a> Parts<'a> {
    pub fn new(name: impl Into<String>) -> Parts<'a> {
        Parts {
            name: name.into(),
            parts: Vec::new(),
            running: None,
            parameters: serde_json::Map::new(),
        }
    }

    /// Add a part: the group its variants form, the variants `build` makes a lesson of (known
    /// before it is built, in its order), and how to build it.
    pub fn part<L: Lesson + 'a>(
        mut self,
        group: impl Into<String>,
        specs: Vec<VariantSpec>,
        build: impl FnOnce() -> Result<L> + 'a,
    ) -> Parts<'a> {
        let group = group.into();
        self.parts.push(PartOf {
            specs: specs.into_iter().map(|s| s.in_group(&group)).collect(),
            group,
            build: Some(Box::new(move || {
                Ok(Box::new(build()?) as Box<dyn Lesson + 'a>)
            })),
        });
        self
    }

    /// The part of variant `index` and the variant's index within it.
    fn locate(&self, mut index: usize) -> (usize, usize) {
        for (p, part) in self.parts.iter().enumerate() {
            if index < part.specs.len() {
                return (p, index);
            }
            index -= part.specs.len();
        }
        panic!("variant {index} is past every part");
    }

    /// The running lesson, when variant `index` is one of its part's, and its index there.
    fn of(&self, index: usize) -> Option<(&dyn Lesson, usize)> {
        let (part, i) = self.locate(index);
        match &self.running {
            Some((p, lesson)) if *p == part => Some((lesson.as_ref(), i)),
            _ => None,
        }
    }

    fn of_mut(&mut self, index: usize) -> Result<(&mut (dyn Lesson + 'a), usize)> {
        let (part, i) = self.locate(index);
        match &mut self.running {
            Some((p, lesson)) if *p == part => Ok((lesson.as_mut(), i)),
            _ => Err(Error::invalid(format!(
                "part '{}' is not running",
                self.parts[part].group
            ))),
        }
    }
}

impl Lesson for Parts<'_> {
    fn name(&self) -> &str {
        &self.name
    }

    fn parameters(&self) -> serde_json::Value {
        serde_json::Value::Object(self.parameters.clone())
    }

    fn variants(&self) -> Vec<VariantSpec> {
        self.parts.iter().flat_map(|p| p.specs.clone()).collect()
    }

    fn reference(&self, index: usize) -> Option<&Reference> {
        self.of(index).and_then(|(lesson, i)| lesson.reference(i))
    }

    fn check_against_baseline(&self, index: usize) -> bool {
        self.of(index)
            .is_some_and(|(lesson, i)| lesson.check_against_baseline(i))
    }

    fn run(&mut self, gpu: &Gpu, index: usize) -> Result<()> {
        let (lesson, i) = self.of_mut(index)?;
        lesson.run(gpu, i)
    }

    fn poison(&mut self, gpu: &Gpu, index: usize) -> Result<()> {
        let (lesson, i) = self.of_mut(index)?;
        lesson.poison(gpu, i)
    }

    fn output(&mut self, gpu: &Gpu, index: usize) -> Result<Output> {
        let (lesson, i) = self.of_mut(index)?;
        lesson.output(gpu, i)
    }

    fn bench_config(&self, index: usize, cfg: BenchConfig) -> BenchConfig {
        match self.of(index) {
            Some((lesson, i)) => lesson.bench_config(i, cfg),
            None => cfg,
        }
    }

    fn skip(&mut self, index: usize) -> Option<String> {
        let (lesson, i) = self.of_mut(index).ok()?;
        lesson.skip(i)
    }

    fn metrics(
        &mut self,
        gpu: &Gpu,
        index: usize,
        timed: &VariantReport,
        meter: &mut Meter,
    ) -> Result<Vec<Metric>> {
        let (lesson, i) = self.of_mut(index)?;
        lesson.metrics(gpu, i, timed, meter)
    }

    fn begin_group(&mut self, _gpu: &Gpu, group: &str) -> Result<()> {
        // The last part goes before the next is built.
        self.running = None;
        let p = self.parts.iter().position(|p| p.group == group);
        let p = p.ok_or_else(|| Error::invalid(format!("no part '{group}'")))?;
        let build = self.parts[p].build.take();
        let lesson = build.ok_or_else(|| Error::invalid(format!("part '{group}' ran twice")))?()?;
        let declared = self.parts[p].specs.iter().map(|s| &s.name);
        if !lesson.variants().iter().map(|s| &s.name).eq(declared) {
            return Err(Error::invalid(format!(
                "part '{group}' has other variants than it was declared with"
            )));
        }
        self.running = Some((p, lesson));
        Ok(())
    }

    fn end_group(
        &mut self,
        gpu: &Gpu,
        group: &str,
        variants: &[VariantReport],
        meter: &mut Meter,
        figures: bool,
    ) -> Result<Vec<Section>> {
        let Some((_, mut lesson)) = self.running.take() else {
            return Ok(Vec::new());
        };
        self.parameters.insert(group.into(), lesson.parameters());
        if figures {
            lesson.sections(gpu, variants, meter)
        } else {
            Ok(Vec::new())
        }
    }
}

/// The NVTX range of one variant: "ch1-intensity:fused". Not "/": ncu's `--nvtx-include`
/// reads "a/b" as range b nested in range a.
pub fn range_name(lesson: &str, variant: &str) -> String {
    format!("{lesson}:{variant}")
}

/// Speedup = the group baseline's median / the variant's median, for verified variants when
/// the baseline ran and verified; everything else gets none.
pub fn apply_speedups(variants: &mut [VariantReport], specs: &[VariantSpec]) {
    let baseline_median = |group: &str| {
        let first = specs.iter().find(|s| s.group == group)?;
        variants
            .iter()
            .find(|v| v.group == group && v.name == first.name && v.status == Status::Ok)
            .and_then(|v| v.time_ms.as_ref().map(|s| s.median))
    };
    let medians: Vec<Option<f64>> = variants.iter().map(|v| baseline_median(&v.group)).collect();
    for (v, base) in variants.iter_mut().zip(medians) {
        v.speedup = match (base, v.status, &v.time_ms) {
            (Some(b), Status::Ok, Some(s)) if s.median > 0.0 => Some(b / s.median),
            _ => None,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::check;

    fn spec(name: &str) -> VariantSpec {
        VariantSpec::new(name, "", Precision::Fp32, Work::default())
    }

    fn variant(spec: &VariantSpec, status: Status, median: Option<f64>) -> VariantReport {
        let mut v = VariantReport::checked(
            &spec.name,
            "",
            Precision::Fp32,
            vec![check(&[1.0f32], &[1.0], 1e-5, "ref")],
            Work::default(),
        );
        v.group = spec.group.clone();
        v.status = status;
        v.time_ms = median.map(|m| Summary::of(&[m]).unwrap());
        v
    }

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn selection_by_id_or_unique_name_and_unknown_names() {
        let specs = [
            spec("baseline"),
            spec("fused"),
            spec("naive").in_group("transpose"),
            spec("tiled").in_group("transpose"),
            spec("baseline").in_group("training"),
        ];
        assert_eq!(select(&specs, &[]).unwrap(), vec![0, 1, 2, 3, 4]);
        assert_eq!(select(&specs, &names(&["fused"])).unwrap(), vec![1]);
        assert_eq!(
            select(&specs, &names(&["transpose:tiled"])).unwrap(),
            vec![3]
        );
        assert_eq!(select(&specs, &names(&["tiled"])).unwrap(), vec![3]);
        assert_eq!(
            select(&specs, &names(&["training:baseline"])).unwrap(),
            vec![4]
        );
        let err = select(&specs, &names(&["fast"])).unwrap_err().to_string();
        assert!(
            err.contains("unknown variant 'fast'") && err.contains("baseline, fused"),
            "{err}"
        );
        let err = select(&specs[..2], &names(&["fast"]))
            .unwrap_err()
            .to_string();
        assert!(err.ends_with("known variants are baseline, fused"), "{err}");
        let ambiguous = [spec("a").in_group("x"), spec("a").in_group("y")];
        let err = select(&ambiguous, &names(&["a"])).unwrap_err().to_string();
        assert!(
            err.contains("names several variants: use one of x:a, y:a"),
            "{err}"
        );
    }

    #[test]
    fn the_variants_asked_for_narrow_the_binarys_own() {
        let specs = [spec("baseline"), spec("fused"), spec("strided")];
        let options = |only: &[&str], variants: &[&str]| RunOptions {
            only: names(only),
            variants: names(variants),
            ..RunOptions::default()
        };
        // Nothing asked: the binary's own selection, all when it has none.
        assert_eq!(options(&[], &[]).selected(&specs).unwrap(), [0, 1, 2]);
        assert_eq!(options(&["fused"], &[]).selected(&specs).unwrap(), [1]);
        // Asked of a binary that runs every variant: in the order asked.
        let asked = options(&[], &["strided", "baseline"]);
        assert_eq!(asked.selected(&specs).unwrap(), [2, 0]);
        // Asked of a binary that runs some: its own order, those asked alone.
        let narrowed = options(&["strided", "fused", "baseline"], &["baseline", "fused"]);
        assert_eq!(narrowed.selected(&specs).unwrap(), [1, 0]);
        let err = options(&["fused"], &["baseline"])
            .selected(&specs)
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("--variants baseline: none of them is among the variants"),
            "{err}"
        );
        let err = options(&[], &["fast"]).selected(&specs).unwrap_err();
        assert!(err.to_string().contains("unknown variant 'fast'"), "{err}");
    }

    #[test]
    fn speedups_only_between_verified_variants_of_one_group() {
        let specs = [
            spec("baseline"),
            spec("fast"),
            spec("wrong"),
            spec("naive").in_group("t"),
            spec("tiled").in_group("t"),
        ];
        let mut v = vec![
            variant(&specs[0], Status::Ok, Some(4.0)),
            variant(&specs[1], Status::Ok, Some(1.0)),
            variant(&specs[2], Status::Failed, None),
            variant(&specs[3], Status::Ok, Some(10.0)),
            variant(&specs[4], Status::Ok, Some(2.0)),
        ];
        apply_speedups(&mut v, &specs);
        assert_eq!(v[0].speedup, Some(1.0));
        assert_eq!(v[1].speedup, Some(4.0));
        assert_eq!(v[2].speedup, None);
        assert_eq!(v[3].speedup, Some(1.0));
        assert_eq!(
            v[4].speedup,
            Some(5.0),
            "against its own group's first variant"
        );
    }

    #[test]
    fn a_failed_or_absent_baseline_gives_no_speedups() {
        let specs = [spec("baseline"), spec("fast")];
        let mut v = vec![
            variant(&specs[0], Status::Failed, None),
            variant(&specs[1], Status::Ok, Some(1.0)),
        ];
        apply_speedups(&mut v, &specs);
        assert!(v.iter().all(|x| x.speedup.is_none()));
        let mut alone = vec![variant(&specs[1], Status::Ok, Some(1.0))];
        apply_speedups(&mut alone, &specs);
        assert_eq!(alone[0].speedup, None, "the baseline did not run");
    }

    #[test]
    fn baselines_are_the_first_of_their_group() {
        let specs = [
            spec("a"),
            spec("b").in_group("g"),
            spec("c"),
            spec("d").in_group("g"),
        ];
        assert_eq!(baseline_of(&specs, 2), 0);
        assert_eq!(baseline_of(&specs, 3), 1);
        assert_eq!(baseline_of(&specs, 1), 1);
    }

    #[test]
    fn a_groups_variants_run_together_groups_in_the_order_first_named() {
        let specs = [
            spec("a").in_group("x"),
            spec("b").in_group("y"),
            spec("c").in_group("x"),
        ];
        assert_eq!(grouped(&[0, 1, 2], &specs), vec![0, 2, 1]);
        assert_eq!(grouped(&[1, 2, 0], &specs), vec![1, 2, 0]);
        assert_eq!(grouped(&[2], &specs), vec![2]);
        let one_group = [spec("a"), spec("b"), spec("c")];
        assert_eq!(grouped(&[2, 0, 1], &one_group), vec![2, 0, 1], "as named");
    }

    #[test]
    fn parts_are_groups_known_before_any_is_built() {
        let never = || -> Result<Parts<'static>> { panic!("built before its group began") };
        let mut parts = Parts::new("ch1-x")
            .part("training", vec![spec("baseline"), spec("fast")], never)
            .part("transpose", vec![spec("naive")], never);
        let ids: Vec<String> = parts.variants().iter().map(|s| s.id()).collect();
        assert_eq!(
            ids,
            ["training:baseline", "training:fast", "transpose:naive"]
        );
        assert_eq!(parts.locate(1), (0, 1));
        assert_eq!(parts.locate(2), (1, 0));
        assert!(parts.reference(2).is_none() && parts.skip(0).is_none());
        let err = parts.of_mut(2).err().unwrap().to_string();
        assert!(err.contains("part 'transpose' is not running"), "{err}");
        assert_eq!(parts.parameters(), serde_json::json!({}));
    }

    #[test]
    fn outputs_are_checked_part_by_part_against_reference_and_baseline() {
        let s = spec("fast").with_tolerance(1e-3);
        let reference = Reference {
            label: "float64 reference".into(),
            parts: vec![("w".into(), vec![1.0, 2.0]), ("loss".into(), vec![3.0])],
        };
        let baseline = vec![("w".to_string(), Values::F64(vec![1.0, 2.0]))];
        let out = Output::default().part("w", vec![1.0f32, 2.0], None).part(
            "loss",
            vec![3.1f64],
            Some(0.01),
        );
        let checks = check_output(&s, &out, Some(&reference), Some(&baseline));
        assert_eq!(checks.len(), 3);
        assert_eq!((checks[0].part.as_str(), checks[0].passed), ("w", true));
        assert_eq!(checks[1].against, "the baseline");
        // loss: 0.1/3 off against a 1% tolerance of its own.
        assert_eq!((checks[2].part.as_str(), checks[2].passed), ("loss", false));
        assert_eq!(checks[2].tolerance, 0.01);
        // A lesson's own check is kept as it is.
        let own = check(&[1.0f32], &[2.0], 1e-5, "closed form");
        let checks = check_output(&s, &Output::checked(vec![own.clone()]), None, None);
        assert_eq!(checks, vec![own]);
        // Nothing to check against: no checks, which the report counts as FAILED.
        let checks = check_output(&s, &Output::values(vec![1.0f32]), None, None);
        assert!(checks.is_empty());
        let v = VariantReport::checked("x", "", Precision::Fp32, checks, Work::default());
        assert_eq!(v.status, Status::Failed);
    }

    #[test]
    fn a_baseline_kept_in_f32_is_compared_exactly_as_in_float64() {
        let s = spec("overlapped");
        let produced = vec![1.5f32, -2.25, 3.0e-7];
        let as_f32 = vec![("out".to_string(), Values::F32(produced.clone()))];
        let as_f64 = vec![(
            "out".to_string(),
            Values::F64(produced.iter().map(|&x| x as f64).collect()),
        )];
        for got in [produced.clone(), vec![1.5f32, -2.25, 3.0001e-7]] {
            let out = Output::default().part("out", got, Some(0.0));
            let a = check_output(&s, &out, None, Some(&as_f32));
            let b = check_output(&s, &out, None, Some(&as_f64));
            assert_eq!(a, b);
        }
        let same = Output::default().part("out", produced.clone(), Some(0.0));
        assert!(check_output(&s, &same, None, Some(&as_f32))[0].passed);
        let off = Output::default().part("out", vec![1.5f32, -2.25, 3.0001e-7], Some(0.0));
        assert!(!check_output(&s, &off, None, Some(&as_f32))[0].passed);
        // A baseline of another length never matches.
        let short = vec![("out".to_string(), Values::F32(vec![1.5]))];
        assert!(!check_output(&s, &same, None, Some(&short))[0].passed);
    }
}
