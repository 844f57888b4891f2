//! The subcommands on the user's own training program: `tuner sweep -- COMMAND`, `tuner memory
//! -- COMMAND` and `tuner autobatch -- COMMAND`. Every trial is a fresh process of the command on
//! one GPU ([crate::external]); the answers come out in the shape of the tuner's own: the same
//! trial table, picks, diagnosis and plot for a sweep, the same tiers by the one rule
//! ([crate::recommend]) for memory and autobatch, the same write-back.
//!
//! What the tuner measures here is what the program reports through the protocol (samples and
//! time per step, the phases, its own peak memory and the memory free when it started) and what
//! NVML sees of its processes; a program that reports nothing is measured by its wall time and
//! NVML alone, and the tables say which figure came from where.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Serialize;

use common::report::Provenance;
use common::table::{cell, Table};
use common::{Error, Result};

use crate::analysis::{self, Best, Diagnosis, TrialKey, TrialStatus};
use crate::commands::{self, AutobatchOptions, SplitCheck, TeamEntryReport, CHECK_STEPS};
use crate::config::{Overrides, Settings, MAX_BATCH};
use crate::external::{
    self, find_batch, larger_batch_after_oom, run_queue, trial, Bounds, Device, Limits, Params,
    Program, Progress, ResultsFile, Status,
};
use crate::recommend::{self, BatchStatus, Line, PeakModel, Tiers};
use crate::search::{self, Accumulation, Found, Granularity};
use crate::writeback::TeamEntry;

/// Default time limit of one trial.
pub const DEFAULT_TIME_LIMIT_S: f64 = 600.0;

/// Optimizer steps of one of the finder's trials: one to build everything (the optimizer's
/// state appears at the first step), one more at the steady peak.
pub const FINDER_WARMUP: usize = 1;
pub const FINDER_STEPS: usize = 1;

/// Settings of the tuner's own MLP, which mean nothing to a program: given with a command they
/// are refused rather than silently ignored. `optimizer` is kept: it chooses the learning-rate
/// rule of the accumulation advice.
pub fn refuse_mlp_settings(o: &Overrides) -> std::result::Result<(), String> {
    let given: Vec<&str> = [
        ("--preset / model.preset", o.preset.is_some()),
        ("--input / model.input", o.input.is_some()),
        ("--hidden / model.hidden", o.hidden.is_some()),
        ("--depth / model.depth", o.depth.is_some()),
        ("--classes / model.classes", o.classes.is_some()),
        ("--data / data.file", o.data.is_some()),
        ("--labels / data.labels", o.labels.is_some()),
        ("--samples / data.samples", o.samples.is_some()),
        ("--seed / data.seed", o.seed.is_some()),
        ("--pin / data.pin", o.pin.is_some()),
        ("--cpu-cost-us / data.cpu_cost_us", o.cpu_cost_us.is_some()),
        ("--lr / training.lr", o.lr.is_some()),
        ("--momentum / training.momentum", o.momentum.is_some()),
        (
            "--weight-decay / training.weight_decay",
            o.weight_decay.is_some(),
        ),
        ("--device / training.device", o.device.is_some()),
    ]
    .into_iter()
    .filter_map(|(name, set)| set.then_some(name))
    .collect();
    if given.is_empty() {
        return Ok(());
    }
    Err(format!(
        "{}: the tuner's own MLP's settings, not a program's: remove them, or drop the command after -- to tune the MLP (a program's GPUs are --devices)",
        given.join(", ")
    ))
}

/// The settings a program's trials use.
#[derive(Debug, Clone, Serialize)]
pub struct ProgramSettings {
    pub batch_sizes: Vec<usize>,
    pub workers: Vec<usize>,
    pub amp: Vec<bool>,
    pub batch_size: Option<usize>,
    pub accumulation_steps: usize,
    pub steps: usize,
    pub warmup_steps: usize,
    pub time_limit_s: f64,
    /// SGD-like (linear learning-rate rule) unless the config or flags say AdamW.
    pub adam_like: bool,
}

impl ProgramSettings {
    pub fn from(s: &Settings, time_limit_s: f64) -> ProgramSettings {
        ProgramSettings {
            batch_sizes: s.batch_sizes.clone(),
            workers: s.workers.clone(),
            amp: s.amp.clone(),
            batch_size: s.batch_size,
            accumulation_steps: s.accumulation_steps,
            steps: s.steps,
            warmup_steps: s.warmup_steps,
            time_limit_s,
            adam_like: matches!(s.optimizer, mlp::Optimizer::AdamW { .. }),
        }
    }

    fn params(&self, batch_size: usize, workers: usize, amp: bool) -> Params {
        Params {
            batch_size,
            workers,
            amp,
            accumulation: self.accumulation_steps,
            steps: self.steps,
            warmup_steps: self.warmup_steps,
        }
    }

    /// What `autobatch` needs: one precision and one worker count.
    pub fn check_single(&self) -> Result<()> {
        self.one_workers()?;
        self.one_amp().map(|_| ())
    }

    pub fn one_workers(&self) -> Result<usize> {
        match self.workers.as_slice() {
            [w] => Ok(*w),
            _ => Err(Error::invalid("choose one worker count here: --workers N")),
        }
    }

    fn one_amp(&self) -> Result<bool> {
        match self.amp.as_slice() {
            [a] => Ok(*a),
            _ => Err(Error::invalid(
                "choose one precision here: --amp on or --amp off",
            )),
        }
    }
}

/// A GPU the trials ran on, as the report names it.
#[derive(Debug, Clone, Serialize)]
pub struct DeviceSummary {
    pub label: String,
    pub cuda_visible: String,
    pub name: Option<String>,
    pub total_bytes: Option<u64>,
}

impl DeviceSummary {
    fn of(d: &Device) -> DeviceSummary {
        DeviceSummary {
            label: d.label.clone(),
            cuda_visible: d.cuda_visible.clone(),
            name: d.probe.as_ref().and_then(|p| p.device_name()),
            total_bytes: d.probe.as_ref().and_then(|p| p.device_total()),
        }
    }
}

/// Where a run's trials keep their files: a folder given with `--trials-dir` (kept), or one in
/// the system's temporary folder, removed at the end when every trial ended as an answer (OK,
/// out of memory, skipped) and kept, and named, when one hung or failed.
pub struct Run {
    pub program: Program,
    pub devices: Vec<Device>,
    pub limits: Limits,
    pub progress: bool,
    pub folder: PathBuf,
    temporary: bool,
    pub results_path: PathBuf,
    started: Instant,
}

/// What the user gave for a run on a program.
pub struct RunOptions {
    pub program: Program,
    pub devices: Vec<Device>,
    pub time_limit_s: f64,
    pub trials_dir: Option<PathBuf>,
    /// The final JSON: the trials' JSON lines go beside it.
    pub json: Option<PathBuf>,
    pub progress: bool,
}

/// `run.json` -> `run.trials.jsonl`.
pub fn trials_file_beside(json: &Path) -> PathBuf {
    json.with_extension("trials.jsonl")
}

impl Run {
    pub fn new(o: RunOptions, what: &str) -> Result<Run> {
        if o.devices.is_empty() {
            return Err(Error::invalid("no GPU to run trials on"));
        }
        let (folder, temporary) = match o.trials_dir {
            Some(d) => (d, false),
            None => {
                let nanos = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.subsec_nanos())
                    .unwrap_or(0);
                let name = format!("tuner-{what}-{}-{nanos}", std::process::id());
                (std::env::temp_dir().join(name), true)
            }
        };
        std::fs::create_dir_all(&folder).map_err(|e| Error::File {
            path: folder.display().to_string(),
            message: format!("cannot create the trials' folder: {e}"),
        })?;
        let results_path = match &o.json {
            Some(j) => trials_file_beside(j),
            None => folder.join("trials.jsonl"),
        };
        Ok(Run {
            program: o.program,
            devices: o.devices,
            limits: Limits::new(Duration::from_secs_f64(o.time_limit_s)),
            progress: o.progress,
            folder,
            temporary,
            results_path,
            started: Instant::now(),
        })
    }

    fn trial_folder(&self, index: usize, p: &Params) -> PathBuf {
        self.folder.join(format!(
            "trial-{index:03}-b{}-w{}-amp-{}",
            p.batch_size,
            p.workers,
            if p.amp { "on" } else { "off" }
        ))
    }

    fn say(&self, line: &str) {
        if self.progress {
            eprintln!("{line}");
        }
    }

    fn announce(&self, what: &str, trials: Option<usize>) {
        let gpus: Vec<String> = self
            .devices
            .iter()
            .map(|d| format!("{} ({})", d.label, d.cuda_visible))
            .collect();
        self.say(&format!(
            "{what}: {}trials of `{}` on {}; results as they come: {}",
            trials.map(|n| format!("{n} ")).unwrap_or_default(),
            Program::display(&self.program.argv),
            gpus.join(", "),
            self.results_path.display()
        ));
    }

    /// Run `jobs` over the devices from one queue, skipping the batches above an
    /// out-of-memory of the same setting.
    fn queue(
        &self,
        jobs: &[Params],
        results: &mut ResultsFile,
    ) -> Result<Vec<external::TrialResult>> {
        run_queue(
            jobs,
            &self.devices,
            |i, p, d| {
                trial(
                    &self.program,
                    p,
                    i,
                    d,
                    &self.trial_folder(i, p),
                    &self.limits,
                )
            },
            larger_batch_after_oom,
            results,
            |pr: &Progress| self.say(&pr.line()),
        )
    }

    /// Remove the temporary folder when nothing in it is worth reading; say where it is
    /// otherwise. Returns that note and the trials' JSON lines where they are kept.
    pub fn finish(&self, trials: &[external::TrialResult]) -> (Option<String>, Option<PathBuf>) {
        let note = self.tidy(trials);
        let kept = self
            .results_path
            .exists()
            .then(|| self.results_path.clone());
        (note, kept)
    }

    fn tidy(&self, trials: &[external::TrialResult]) -> Option<String> {
        let clean = trials
            .iter()
            .all(|r| matches!(r.status, Status::Ok | Status::Oom | Status::Skipped));
        if self.temporary && clean {
            let _ = std::fs::remove_dir_all(&self.folder);
            None
        } else {
            Some(format!(
                "the trials' output (report, stdout, stderr of each) is in {}",
                self.folder.display()
            ))
        }
    }

    fn elapsed_s(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// The GPU's name: NVML's, else what the program reported.
    fn gpu_name(&self, device: &Device, trials: &[external::TrialResult]) -> String {
        DeviceSummary::of(device)
            .name
            .or_else(|| {
                trials
                    .iter()
                    .find_map(|r| r.measured.device.as_ref().and_then(|d| d.name.clone()))
            })
            .unwrap_or_else(|| "unknown GPU".into())
    }
}

/// The margin by the smallest GPU's memory class: NVML's figure, else what the programs
/// reported (the small class's 20% when neither says).
fn default_margin(devices: &[DeviceSummary], runs: &[external::TrialResult]) -> f64 {
    let total = devices
        .iter()
        .filter_map(|d| d.total_bytes)
        .chain(
            runs.iter()
                .filter_map(|r| r.measured.device.as_ref()?.total_bytes),
        )
        .min();
    recommend::margin_for(total.unwrap_or(0))
}

fn status_of(s: Status) -> TrialStatus {
    match s {
        Status::Ok => TrialStatus::Ok,
        Status::Oom => TrialStatus::Oom,
        Status::Hang => TrialStatus::Hang,
        Status::Failed => TrialStatus::Failed,
        Status::Skipped => TrialStatus::Skipped,
    }
}

/// A program's trial as a row of the sweep's table and analysis.
pub fn row(r: &external::TrialResult) -> analysis::TrialResult {
    let key = TrialKey {
        batch: r.params.batch_size,
        workers: r.params.workers,
        amp: r.params.amp,
        pin: None,
    };
    let status = status_of(r.status);
    let note = (status != TrialStatus::Ok).then(|| r.reason.clone());
    let mut t = analysis::TrialResult::empty(key, status, 0, note);
    t.device = (!r.device.is_empty()).then(|| r.device.clone());
    if status != TrialStatus::Ok {
        return t;
    }
    let m = &r.measured;
    t.samples_per_s = m.samples_per_s;
    t.data_ms = m.data_ms.clone();
    t.forward_ms = m.forward_ms.clone();
    t.backward_ms = m.backward_ms.clone();
    t.optimizer_ms = m.optimizer_ms.clone();
    t.total_ms = m.step_ms.clone();
    t.data_fraction = match (&m.data_ms, &m.step_ms) {
        (Some(d), Some(s)) if s.median > 0.0 => Some(d.median / s.median),
        _ => None,
    };
    let (peak, limit) = r.memory_terms();
    t.peak_bytes = peak;
    t.memory_limit_bytes = limit;
    t.framework_peak_bytes = m.framework_peak_bytes;
    t.program_difference = m.program_difference;
    t.clock_difference = m.clock_difference;
    t
}

/// How the tuner's samples/s (the program's reported step times) compare with another count of
/// the same trials.
#[derive(Debug, Clone, Serialize)]
pub struct Agreement {
    pub trials_compared: usize,
    /// The largest |ours / theirs - 1|, and the batch it was at.
    pub worst_difference: f64,
    pub worst_batch: usize,
}

/// The tuner's samples/s against the program's own count (its end line) and against the
/// tuner's own clock (the report's lines as they arrived): the first shows the report was read
/// whole, the second that the reported step times add up to the loop the program ran.
#[derive(Debug, Clone, Serialize)]
pub struct ThroughputCheck {
    pub program: Option<Agreement>,
    pub clock: Option<Agreement>,
}

pub fn throughput_check(rows: &[analysis::TrialResult]) -> ThroughputCheck {
    let agreement = |difference: fn(&analysis::TrialResult) -> Option<f64>| {
        let compared: Vec<(&analysis::TrialResult, f64)> = rows
            .iter()
            .filter(|r| r.status == TrialStatus::Ok)
            .filter_map(|r| Some((r, difference(r)?)))
            .collect();
        let &(worst, d) = compared
            .iter()
            .max_by(|a, b| a.1.abs().total_cmp(&b.1.abs()))?;
        Some(Agreement {
            trials_compared: compared.len(),
            worst_difference: d,
            worst_batch: worst.key.batch,
        })
    };
    ThroughputCheck {
        program: agreement(|r| r.program_difference),
        clock: agreement(|r| r.clock_difference),
    }
}

/// What a queue of a program's trials leaves: the part of the sweep's and memory's reports they
/// share.
#[derive(Debug, Serialize)]
pub struct Ran {
    pub command: Vec<String>,
    pub devices: Vec<DeviceSummary>,
    pub provenance: Provenance,
    pub settings: ProgramSettings,
    /// One row per trial, in the shape of the tuner's own sweep (`tuner plot` reads these).
    pub trials: Vec<analysis::TrialResult>,
    /// Each trial as it ran: command line, exit, report, memory reading, stderr's last lines.
    pub runs: Vec<external::TrialResult>,
    /// The rule's margin.
    pub margin: f64,
    /// The trials' JSON lines, where kept (beside the JSON, or in a kept trials' folder).
    pub trials_file: Option<PathBuf>,
    pub wall_s: f64,
    #[serde(skip)]
    pub kept: Option<String>,
}

impl Ran {
    /// `sweep: 12 trials in 80.1 s; each trial's result: ...` and where a kept folder is.
    fn footer(&self, what: &str) -> String {
        let mut o = format!(
            "\n{what}: {} trials in {:.1} s{}\n",
            self.runs.len(),
            self.wall_s,
            kept_at(&self.trials_file)
        );
        if let Some(k) = &self.kept {
            o.push_str(k);
            o.push('\n');
        }
        o
    }
}

impl Run {
    /// Run `jobs` from one queue over the GPUs (a setting that runs out of memory skips its
    /// larger batches), each result written as it ends.
    fn run_jobs(
        &self,
        what: &str,
        jobs: &[Params],
        settings: ProgramSettings,
        margin: Option<f64>,
    ) -> Result<Ran> {
        let mut results = ResultsFile::create(&self.results_path)?;
        self.announce(what, Some(jobs.len()));
        let runs = self.queue(jobs, &mut results)?;
        let devices: Vec<DeviceSummary> = self.devices.iter().map(DeviceSummary::of).collect();
        let margin = margin.unwrap_or_else(|| default_margin(&devices, &runs));
        let (kept, trials_file) = self.finish(&runs);
        Ok(Ran {
            command: self.program.argv.clone(),
            devices,
            provenance: Provenance::now(),
            settings,
            trials: runs.iter().map(row).collect(),
            runs,
            margin,
            trials_file,
            wall_s: self.elapsed_s(),
            kept,
        })
    }
}

#[derive(Debug, Serialize)]
pub struct ProgramSweepReport {
    pub schema: &'static str,
    #[serde(flatten)]
    pub ran: Ran,
    pub best: Best,
    pub diagnosis: Vec<Diagnosis>,
    pub throughput_check: ThroughputCheck,
}

/// `tuner sweep -- COMMAND`: every AMP setting x worker count x batch size, batches ascending,
/// over the GPUs from one queue; a setting that runs out of memory skips its larger batches.
pub fn sweep(
    run: &Run,
    settings: ProgramSettings,
    margin: Option<f64>,
    plot: Option<&Path>,
) -> Result<ProgramSweepReport> {
    let mut jobs = Vec::new();
    for &amp in &settings.amp {
        for &workers in &settings.workers {
            for &batch in &settings.batch_sizes {
                jobs.push(settings.params(batch, workers, amp));
            }
        }
    }
    let ran = run.run_jobs("sweep", &jobs, settings, margin)?;
    let best = analysis::best(&ran.trials, ran.margin);
    let diagnosis = analysis::diagnose(&ran.trials, &best);
    let report = ProgramSweepReport {
        schema: "tuner-sweep-program/1",
        throughput_check: throughput_check(&ran.trials),
        best,
        diagnosis,
        ran,
    };
    if let Some(stem) = plot {
        let title = format!(
            "tuner sweep of {} on {}",
            Program::display(&report.ran.command),
            run.gpu_name(&run.devices[0], &report.ran.runs)
        );
        crate::plot::render(&report.ran.trials, &title, stem).map_err(Error::invalid)?;
    }
    Ok(report)
}

/// `; each trial's result: PATH`, where the results were kept.
fn kept_at(path: &Option<PathBuf>) -> String {
    path.as_ref()
        .map(|p| format!("; each trial's result: {}", p.display()))
        .unwrap_or_default()
}

fn gb(b: u64) -> String {
    format!("{:.2} GB", b as f64 / 1e9)
}

pub fn render_sweep(r: &ProgramSweepReport) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "## tuner sweep: `{}` on {} GPU(s)\n",
        Program::display(&r.ran.command),
        r.ran.devices.len()
    );
    let _ = writeln!(
        o,
        "each trial a fresh process: {} measured steps after {} warmup, accumulation {}, time limit {:.0} s. Times: the program's own per step (the protocol), medians; memory: NVML's reading of its processes, else its own peak.\n",
        r.ran.settings.steps, r.ran.settings.warmup_steps, r.ran.settings.accumulation_steps, r.ran.settings.time_limit_s
    );
    o.push_str(&crate::sweep::trial_table(&r.ran.trials).markdown());
    o.push('\n');
    o.push_str(&crate::sweep::render_conclusions(&r.best, &r.diagnosis));
    let checks = [
        (
            &r.throughput_check.program,
            "the program's own count",
            "the program reported none (an end line with samples_per_s)",
        ),
        (
            &r.throughput_check.clock,
            "the tuner's clock over the report's lines",
            "no trial had a warmup step to start it from and lines that arrived over time",
        ),
    ];
    for (check, against, none) in checks {
        match check {
            Some(c) => {
                let _ = writeln!(
                    o,
                    "samples/s against {against}: within {:.2}% on {} trial(s) (largest at batch {})",
                    100.0 * c.worst_difference.abs(),
                    c.trials_compared,
                    c.worst_batch
                );
            }
            None => {
                let _ = writeln!(o, "samples/s against {against}: {none}");
            }
        }
    }
    for run in r
        .ran
        .runs
        .iter()
        .filter(|t| matches!(t.status, Status::Hang | Status::Failed))
    {
        let _ = writeln!(
            o,
            "trial {} ({}): {}; stderr ended with: {}",
            run.index,
            run.params.describe(),
            run.verdict(),
            run.stderr_tail.last().map_or("(nothing)", String::as_str)
        );
    }
    o.push_str(&r.ran.footer("sweep"));
    o
}

/// One precision of `tuner memory -- COMMAND`: the line through its peaks and its tiers.
#[derive(Debug, Clone, Serialize)]
pub struct PrecisionMemory {
    pub amp: bool,
    /// Trials that fit with a peak measured; the line is there only when their peaks are one.
    pub peaks: usize,
    pub line: Option<Line>,
    pub limit_bytes: Option<u64>,
    /// The largest listed batch that fit, and the smallest that did not (if any).
    pub largest_fitting: usize,
    pub first_failing: Option<usize>,
    pub tiers: Tiers,
}

#[derive(Debug, Serialize)]
pub struct ProgramMemoryReport {
    pub schema: &'static str,
    #[serde(flatten)]
    pub ran: Ran,
    pub precisions: Vec<PrecisionMemory>,
    pub granularity: Granularity,
    /// Only with both precisions measured at one batch.
    pub amp_advice: Option<String>,
    pub configured_batch: Option<usize>,
    pub batch_status: Option<BatchStatus>,
}

/// The (batch, peak) points and the smallest limit of a set of trials that fit.
fn memory_points(runs: &[&external::TrialResult]) -> (Vec<(usize, u64)>, Option<u64>) {
    let mut points = Vec::new();
    let mut limit: Option<u64> = None;
    for r in runs {
        let (peak, l) = r.memory_terms();
        if let Some(l) = l {
            limit = Some(limit.map_or(l, |old| old.min(l)));
        }
        if external::fits(r).unwrap_or(false) {
            if let Some(p) = peak {
                points.push((r.params.batch_size, p));
            }
        }
    }
    (points, limit)
}

/// What a program's trials say about its memory: the line through their peaks when the peaks
/// are one, the smallest limit, and how many trials fit with a peak measured.
struct MemoryFit {
    line: Option<Line>,
    limit: Option<u64>,
    peaks: usize,
}

fn memory_fit(runs: &[&external::TrialResult]) -> MemoryFit {
    let (points, limit) = memory_points(runs);
    MemoryFit {
        line: match limit {
            Some(l) => Line::holding(&points, l),
            // Nothing to hold it to, nothing to recommend by: shown as measured.
            None => Line::through(&points),
        },
        limit,
        peaks: points.len(),
    }
}

/// The rule's tiers from a program's trials: the memory line through their peaks against their
/// limit, else proportional.
fn program_tiers(
    maximum: usize,
    granularity: Granularity,
    margin: f64,
    line: Option<Line>,
    limit: Option<u64>,
) -> Tiers {
    match (line, limit) {
        (Some(line), Some(limit)) => {
            let peak = move |b: usize| line.peak(b);
            recommend::tiers(
                maximum,
                granularity,
                margin,
                PeakModel::Bytes { peak: &peak, limit },
            )
        }
        _ => recommend::tiers(maximum, granularity, margin, PeakModel::Proportional),
    }
}

/// `tuner memory -- COMMAND`: one trial per listed batch (and precision), in fresh processes over
/// the GPUs; each one's peak as the program and NVML saw it, whether it fit, and the tiers.
pub fn memory(
    run: &Run,
    settings: ProgramSettings,
    batches: &[usize],
    granularity: Granularity,
    margin: Option<f64>,
) -> Result<ProgramMemoryReport> {
    let workers = settings.one_workers()?;
    let mut jobs = Vec::new();
    for &amp in &settings.amp {
        let mut sorted = batches.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        for b in sorted {
            jobs.push(settings.params(b, workers, amp));
        }
    }
    let amps = settings.amp.clone();
    let configured = settings.batch_size;
    let ran = run.run_jobs("memory", &jobs, settings, margin)?;
    let mut precisions = Vec::new();
    for amp in amps {
        let of_amp: Vec<&external::TrialResult> =
            ran.runs.iter().filter(|r| r.params.amp == amp).collect();
        let MemoryFit { line, limit, peaks } = memory_fit(&of_amp);
        let fitting = |r: &&&external::TrialResult| external::fits(r).unwrap_or(false);
        let largest_fitting = of_amp
            .iter()
            .filter(fitting)
            .map(|r| r.params.batch_size)
            .max()
            .unwrap_or(0);
        let first_failing = of_amp
            .iter()
            .filter(|r| r.status == Status::Oom)
            .map(|r| r.params.batch_size)
            .min();
        precisions.push(PrecisionMemory {
            amp,
            peaks,
            tiers: program_tiers(largest_fitting, granularity, ran.margin, line, limit),
            line,
            limit_bytes: limit,
            largest_fitting,
            first_failing,
        });
    }
    let amp_advice = analysis::amp_memory(&ran.trials).map(|_| analysis::amp_advice(&ran.trials));
    let batch_status = match (configured, precisions.first()) {
        (Some(c), Some(p)) => Some(recommend::status(c, &p.tiers)),
        _ => None,
    };
    Ok(ProgramMemoryReport {
        schema: "tuner-memory-program/1",
        ran,
        precisions,
        granularity,
        amp_advice,
        configured_batch: configured,
        batch_status,
    })
}

/// One row per trial: whether it fit and its memory, from both sides.
fn memory_table(runs: &[external::TrialResult]) -> Table {
    let mut t = Table::new()
        .right("batch")
        .left("AMP")
        .left("fits")
        .right("peak (NVML)")
        .left("NVML reading")
        .right("peak (program)")
        .right("free at start (program)")
        .right("share of the limit")
        .right("wall s")
        .left("GPU");
    for r in runs {
        let (peak, limit) = r.memory_terms();
        let fits = match external::fits(r) {
            Ok(true) => "yes".to_string(),
            Ok(false) => format!("no: {}", r.verdict()),
            Err(_) => r.verdict(),
        };
        t.row(vec![
            r.params.batch_size.to_string(),
            crate::sweep::on_off(r.params.amp),
            fits,
            cell(r.memory.peak_bytes, gb),
            match r.memory.source {
                external::MemorySource::NvmlProcess => "its processes".into(),
                external::MemorySource::NvmlDeviceDelta => "the device's rise".into(),
                external::MemorySource::None => "-".into(),
            },
            cell(r.measured.framework_peak_bytes, gb),
            cell(r.measured.device.as_ref().and_then(|d| d.free_bytes), gb),
            cell(peak.zip(limit), |(p, l)| {
                format!("{:.1}%", 100.0 * p as f64 / l as f64)
            }),
            format!("{:.1}", r.wall_s),
            r.device.clone(),
        ]);
    }
    t
}

fn describe_line(line: &Option<Line>, limit: Option<u64>, peaks: usize) -> String {
    match (line, limit) {
        (Some(l), Some(limit)) => format!(
            "peak = {:.3} GB + {:.2} MB per sample, limit {} (predicts {} samples at the limit)",
            l.fixed_bytes / 1e9,
            l.bytes_per_sample / 1e6,
            gb(limit),
            l.batch_within(limit as f64)
        ),
        (Some(l), None) => format!(
            "peak = {:.3} GB + {:.2} MB per sample; no limit known (the program reported no free memory and NVML none)",
            l.fixed_bytes / 1e9,
            l.bytes_per_sample / 1e6
        ),
        (None, _) if peaks > 0 => format!(
            "the {peaks} peaks measured are not a line in the batch (one lies more than {:.0}% of the limit off the line through the two largest, as when an autotuner's workspace takes the room there is): tiers proportional to the batch",
            100.0 * recommend::LINE_TOLERANCE
        ),
        (None, _) => "no peak measured: tiers proportional to the batch".into(),
    }
}

pub fn render_memory(r: &ProgramMemoryReport) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "## tuner memory: `{}` on {} GPU(s)\n",
        Program::display(&r.ran.command),
        r.ran.devices.len()
    );
    for d in &r.ran.devices {
        let _ = writeln!(
            o,
            "- {} (CUDA_VISIBLE_DEVICES={}): {}, {}",
            d.label,
            d.cuda_visible,
            d.name.as_deref().unwrap_or("name not known (no NVML)"),
            d.total_bytes
                .map(gb)
                .unwrap_or_else(|| "memory not known".into())
        );
    }
    o.push('\n');
    o.push_str(&memory_table(&r.ran.runs).markdown());
    o.push('\n');
    for p in &r.precisions {
        let _ = writeln!(
            o,
            "{}: {}",
            if p.amp { "AMP" } else { "fp32" },
            describe_line(&p.line, p.limit_bytes, p.peaks)
        );
        let bound = match p.first_failing {
            Some(f) => format!("{f} ran out of memory"),
            None => {
                "no listed batch failed: the real maximum is larger (`tuner autobatch` finds it)"
                    .into()
            }
        };
        let _ = writeln!(
            o,
            "  largest listed batch that fits {} ({bound}); {}",
            p.largest_fitting,
            recommend::describe(&p.tiers, r.ran.margin)
        );
    }
    if let Some(a) = &r.amp_advice {
        let _ = writeln!(o, "{a}");
    }
    if let (Some(c), Some(s)) = (r.configured_batch, r.batch_status) {
        let _ = writeln!(o, "configured batch {c}: {s:?}");
    }
    o.push_str(&r.ran.footer("memory"));
    o
}

#[derive(Debug, Serialize)]
pub struct ProgramAutobatchReport {
    pub schema: &'static str,
    pub command: Vec<String>,
    pub device: DeviceSummary,
    pub gpu_name: String,
    pub provenance: Provenance,
    pub settings: ProgramSettings,
    pub amp: bool,
    pub workers: usize,
    pub start: usize,
    pub granularity: Granularity,
    pub found: Found,
    /// The search's trials as they ran.
    pub trials: Vec<external::TrialResult>,
    /// The memory line through the trials' peaks (when they are one), the limit it was held
    /// to, and how many peaks were measured.
    pub memory_line: Option<Line>,
    pub memory_peaks: usize,
    pub memory_limit_bytes: Option<u64>,
    pub margin: f64,
    pub tiers: Tiers,
    pub next_fails: bool,
    pub accumulation: Option<Accumulation>,
    pub check: SplitCheck,
    pub check_trial: external::TrialResult,
    /// The search alone (what compares with an in-process finder), the split's check, and the
    /// whole command.
    pub search_wall_s: f64,
    pub check_wall_s: f64,
    pub total_wall_s: f64,
    pub written_config: Option<PathBuf>,
    pub backup: Option<PathBuf>,
    pub team_entry: TeamEntryReport,
    pub team_file: Option<PathBuf>,
    pub trials_file: Option<PathBuf>,
    #[serde(skip)]
    pub kept: Option<String>,
}

/// `tuner autobatch -- COMMAND`: the largest batch that fits, at the granularity, on the first
/// GPU of `--devices`, each trial a fresh process stopped once it reported its steps; then the
/// split written back trains 100 optimizer steps in a fresh process.
pub fn autobatch(
    run: &Run,
    settings: ProgramSettings,
    o: &AutobatchOptions,
) -> Result<ProgramAutobatchReport> {
    commands::check_autobatch_options(o).map_err(Error::invalid)?;
    let amp = settings.one_amp()?;
    let workers = settings.one_workers()?;
    let device = &run.devices[0];
    if run.devices.len() > 1 {
        run.say(&format!(
            "autobatch searches on one GPU: {} (the answer is per GPU model)",
            device.label
        ));
    }
    let base = Params {
        batch_size: o.start,
        workers,
        amp,
        accumulation: 1,
        steps: FINDER_STEPS,
        warmup_steps: FINDER_WARMUP,
    };
    let mut results = ResultsFile::create(&run.results_path)?;
    run.announce("autobatch", None);
    let started = Instant::now();
    let mut shown = 0;
    let search = find_batch(
        &run.program,
        &base,
        device,
        &run.folder,
        &run.limits,
        Bounds {
            start: o.start,
            granularity: o.granularity,
            cap: MAX_BATCH as usize,
        },
        &mut results,
        |r| {
            shown += 1;
            let (peak, limit) = r.memory_terms();
            run.say(&format!(
                "trial {shown}: batch {} {} ({:.1} s){}",
                r.params.batch_size,
                r.verdict(),
                r.wall_s,
                match (peak, limit) {
                    (Some(p), Some(l)) => format!(", peak {} of {}", gb(p), gb(l)),
                    (Some(p), None) => format!(", peak {}", gb(p)),
                    _ => String::new(),
                }
            ));
        },
    )
    .map_err(|stopped| Error::invalid(stopped.to_string()))?;
    let found = search.found.map_err(Error::invalid)?;
    let search_wall_s = started.elapsed().as_secs_f64();
    let mut trials = search.trials;
    let step = o.granularity.multiple().unwrap_or(found.maximum);
    let next_fails = if found.next_failed {
        true
    } else {
        let p = Params {
            batch_size: found.maximum + step,
            ..base
        };
        let r = one_trial(run, device, &p, trials.len(), &mut results, true);
        let fails = matches!(external::fits(&r), Ok(false));
        trials.push(r);
        fails
    };
    let fitting: Vec<&external::TrialResult> = trials.iter().collect();
    let MemoryFit { line, limit, peaks } = memory_fit(&fitting);
    let margin = o
        .margin
        .unwrap_or_else(|| default_margin(&[DeviceSummary::of(device)], &trials));
    let tiers = program_tiers(found.maximum, o.granularity, margin, line, limit);
    let target = o
        .effective_batch
        .or(settings.batch_size.map(|b| b * settings.accumulation_steps));
    let accumulation =
        target.map(|t| search::accumulation(t, tiers.recommended.max(1), settings.adam_like));
    let (batch, accumulation_steps) =
        commands::split_to_write(&accumulation, tiers.recommended.max(1));
    let checked = Instant::now();
    let check_params = Params {
        batch_size: batch,
        workers,
        amp,
        accumulation: accumulation_steps,
        steps: CHECK_STEPS,
        warmup_steps: 0,
    };
    run.say(&format!(
        "checking the split: {} for {CHECK_STEPS} optimizer steps",
        check_params.describe()
    ));
    let check_trial = one_trial(run, device, &check_params, trials.len(), &mut results, true);
    let trained = matches!(external::fits(&check_trial), Ok(true)) && check_trial.reached_steps;
    run.say(&format!("check: {}", check_trial.verdict()));
    let check_wall_s = checked.elapsed().as_secs_f64();
    let gpu_name = run.gpu_name(device, &trials);
    let entry = TeamEntry {
        gpu: gpu_name.clone(),
        model: o
            .model_name
            .clone()
            .unwrap_or_else(|| Program::display(&run.program.argv)),
        batch_size: batch,
        accumulation_steps,
        precision: if amp { "bf16".into() } else { "fp32".into() },
    };
    let written =
        commands::write_answer(o, batch, accumulation_steps, &entry).map_err(Error::invalid)?;
    let mut all = trials.clone();
    all.push(check_trial.clone());
    let (kept, trials_file) = run.finish(&all);
    Ok(ProgramAutobatchReport {
        schema: "tuner-autobatch-program/1",
        command: run.program.argv.clone(),
        device: DeviceSummary::of(device),
        gpu_name,
        provenance: Provenance::now(),
        settings,
        amp,
        workers,
        start: o.start,
        granularity: o.granularity,
        found,
        trials,
        memory_line: line,
        memory_peaks: peaks,
        memory_limit_bytes: limit,
        margin,
        tiers,
        next_fails,
        accumulation,
        check: SplitCheck {
            batch_size: batch,
            accumulation_steps,
            steps: CHECK_STEPS,
            trained,
        },
        check_trial,
        search_wall_s,
        check_wall_s,
        total_wall_s: run.elapsed_s(),
        written_config: written.config,
        backup: written.backup,
        team_entry: TeamEntryReport::from(&entry),
        team_file: written.team,
        trials_file,
        kept,
    })
}

/// One trial outside the search (the size above the answer, the split's check), written to the
/// results as it ends.
fn one_trial(
    run: &Run,
    device: &Device,
    p: &Params,
    index: usize,
    results: &mut ResultsFile,
    stop_after_steps: bool,
) -> external::TrialResult {
    let limits = Limits {
        stop_after_steps,
        ..run.limits
    };
    let r = trial(
        &run.program,
        p,
        index,
        device,
        &run.trial_folder(index, p),
        &limits,
    );
    if let Err(e) = results.write(&r) {
        run.say(&format!("warning: {e}"));
    }
    r
}

/// The search's trials: one row each.
fn search_table(trials: &[external::TrialResult]) -> Table {
    let mut t = Table::new()
        .right("#")
        .right("batch")
        .left("result")
        .right("peak")
        .right("limit")
        .right("wall s");
    for r in trials {
        let (peak, limit) = r.memory_terms();
        t.row(vec![
            (r.index + 1).to_string(),
            r.params.batch_size.to_string(),
            r.verdict(),
            cell(peak, gb),
            cell(limit, gb),
            format!("{:.1}", r.wall_s),
        ]);
    }
    t
}

pub fn render_autobatch(r: &ProgramAutobatchReport) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "## tuner autobatch: `{}` on {} ({})\n",
        Program::display(&r.command),
        r.device.label,
        r.gpu_name
    );
    let _ = writeln!(
        o,
        "each trial a fresh process of {} warmup + {} step(s), workers {}, AMP {}, stopped once it reported them:\n",
        FINDER_WARMUP,
        FINDER_STEPS,
        r.workers,
        crate::sweep::on_off(r.amp)
    );
    o.push_str(&search_table(&r.trials).markdown());
    o.push('\n');
    let _ = writeln!(
        o,
        "search from {} ({:?}): {} trials, {:.1} s; memory line: {}",
        r.start,
        r.granularity,
        r.found.trials.len(),
        r.search_wall_s,
        describe_line(&r.memory_line, r.memory_limit_bytes, r.memory_peaks)
    );
    let _ = writeln!(
        o,
        "{} (next size fails: {})",
        recommend::describe(&r.tiers, r.margin),
        r.next_fails
    );
    commands::render_answer(
        &mut o,
        &r.check,
        &r.accumulation,
        (&r.written_config, &r.backup, &r.team_file),
        &r.team_entry,
    );
    let _ = writeln!(
        o,
        "\nwall time: search {:.1} s, the split's check {:.1} s, whole command {:.1} s{}",
        r.search_wall_s,
        r.check_wall_s,
        r.total_wall_s,
        kept_at(&r.trials_file)
    );
    if let Some(k) = &r.kept {
        let _ = writeln!(o, "{k}");
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::external::protocol::{DeviceRecord, Measured, ReportFile, StepRecord};

    fn run_result(batch: usize, status: Status, peak: Option<u64>) -> external::TrialResult {
        let p = Params {
            batch_size: batch,
            workers: 4,
            amp: false,
            accumulation: 1,
            steps: 2,
            warmup_steps: 0,
        };
        let mut r = external::TrialResult::skipped(0, p, "exit status 0".into());
        r.status = status;
        r.device = "GPU 0".into();
        if status == Status::Ok {
            let report = ReportFile {
                steps: (0..2)
                    .map(|_| StepRecord {
                        samples: batch as u64,
                        step_s: 0.1,
                        data_s: Some(0.04),
                        forward_s: Some(0.02),
                        backward_s: Some(0.03),
                        optimizer_s: Some(0.01),
                        peak_memory_bytes: peak,
                    })
                    .collect(),
                device: Some(DeviceRecord {
                    name: Some("Fake GPU".into()),
                    total_bytes: Some(80_000_000_000),
                    free_bytes: Some(79_000_000_000),
                }),
                ..ReportFile::default()
            };
            r.measured = Measured::from_report(&report, 0, None, &[]);
            r.reached_steps = true;
        }
        r
    }

    #[test]
    fn a_program_s_trial_becomes_a_sweep_row() {
        let r = run_result(64, Status::Ok, Some(10_000_000_000));
        let t = row(&r);
        assert_eq!((t.key.batch, t.key.workers, t.key.pin), (64, 4, None));
        assert_eq!(t.status, TrialStatus::Ok);
        assert!((t.samples_per_s.unwrap() - 640.0).abs() < 1e-9);
        assert!((t.data_fraction.unwrap() - 0.4).abs() < 1e-9);
        // The program's own peak against the memory it reported free.
        assert_eq!(t.peak_bytes, Some(10_000_000_000));
        assert_eq!(t.memory_limit_bytes, Some(79_000_000_000));
        assert_eq!(t.device.as_deref(), Some("GPU 0"));
        let oom = row(&run_result(128, Status::Oom, None));
        assert_eq!(oom.status, TrialStatus::Oom);
        assert!(oom.samples_per_s.is_none() && oom.peak_bytes.is_none());
        let text = crate::sweep::trial_table(&[t, oom]).markdown();
        assert!(text.lines().next().unwrap().contains("| GPU |"), "{text}");
        assert!(
            !text.contains("| pin |"),
            "a program chooses pinning: {text}"
        );
    }

    #[test]
    fn the_memory_tiers_of_a_program_follow_its_line() {
        // 1 GB + 40 MB per sample against 79 GB: 1949 samples fit; 5% kept free allows 1851.
        let runs: Vec<external::TrialResult> = [(8, 1_320_000_000u64), (1024, 41_960_000_000)]
            .iter()
            .map(|&(b, p)| run_result(b, Status::Ok, Some(p)))
            .collect();
        let refs: Vec<&external::TrialResult> = runs.iter().collect();
        let fit = memory_fit(&refs);
        assert_eq!((fit.limit, fit.peaks), (Some(79_000_000_000), 2));
        let t = program_tiers(1944, Granularity::Multiple(8), 0.05, fit.line, fit.limit);
        assert_eq!((t.recommended, t.safe), (1848, 1752));
        // Without a peak: proportional to the batch.
        let t = program_tiers(1944, Granularity::Multiple(8), 0.05, None, None);
        assert_eq!(t.recommended, 1840);
        // Peaks that climb to the limit long before the batch that runs out (an autotuner's
        // workspace): no line, so the tiers are proportional to the maximum, not taken from
        // the flat line through the two largest (which would recommend 8 here).
        let runs: Vec<external::TrialResult> = [
            (8, 2_400_000_000u64),
            (256, 51_000_000_000),
            (392, 75_000_000_000),
            (744, 78_900_000_000),
            (752, 79_000_000_000),
        ]
        .iter()
        .map(|&(b, p)| run_result(b, Status::Ok, Some(p)))
        .collect();
        let refs: Vec<&external::TrialResult> = runs.iter().collect();
        let fit = memory_fit(&refs);
        assert_eq!((fit.line, fit.peaks), (None, 5));
        let t = program_tiers(752, Granularity::Multiple(8), 0.05, fit.line, fit.limit);
        assert_eq!((t.recommended, t.safe), (712, 672));
        assert!(describe_line(&fit.line, fit.limit, fit.peaks).contains("not a line"));
    }

    /// The committed ResNet-18 searches on an H100 under a 16 GiB share: their steady peaks
    /// climb to the limit (cuDNN's workspace), so the tiers are proportional to the maximum.
    /// (The fp32 run's JSON holds the tiers of the rule before: recommended 280 and safe 8, from
    /// the flat line through its two largest peaks.)
    #[test]
    fn the_committed_resnet_searches_get_proportional_tiers() {
        for (precision, tiers) in [("fp32", (752, 712, 672)), ("bf16", (1336, 1264, 1200))] {
            let path = format!(
                "{}/../results/h100/tuner-resnet-autobatch-{precision}.json",
                env!("CARGO_MANIFEST_DIR")
            );
            let report: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
            let trials: Vec<external::TrialResult> =
                serde_json::from_value(report["trials"].clone()).unwrap();
            let refs: Vec<&external::TrialResult> = trials.iter().collect();
            let fit = memory_fit(&refs);
            assert_eq!(fit.line, None, "{precision}: {:?}", memory_points(&refs));
            let maximum = report["found"]["maximum"].as_u64().unwrap() as usize;
            let margin = report["margin"].as_f64().unwrap();
            let t = program_tiers(
                maximum,
                Granularity::Multiple(8),
                margin,
                fit.line,
                fit.limit,
            );
            assert_eq!((t.maximum, t.recommended, t.safe), tiers, "{precision}");
        }
    }

    #[test]
    fn mlp_settings_are_refused_with_a_command() {
        assert!(refuse_mlp_settings(&Overrides::default()).is_ok());
        let e = refuse_mlp_settings(&Overrides {
            preset: Some(crate::preset::Preset::Large),
            pin: Some(crate::config::Switch::On),
            ..Default::default()
        })
        .unwrap_err();
        assert!(e.contains("--preset") && e.contains("--pin"), "{e}");
        assert!(e.contains("drop the command after --"), "{e}");
        // The optimizer chooses the learning-rate rule: allowed.
        assert!(refuse_mlp_settings(&Overrides {
            optimizer: Some(crate::config::OptimizerKind::AdamW),
            ..Default::default()
        })
        .is_ok());
        assert_eq!(
            trials_file_beside(Path::new("out/resnet.json")),
            PathBuf::from("out/resnet.trials.jsonl")
        );
    }
}
