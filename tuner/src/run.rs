//! Where trials run on this host: the program and how its trials start, the GPUs, the folder
//! their files go to, the results file each result is appended to as it ends, the progress
//! shown on a terminal, and the parts of a report every command prints.
//!
//! Trials over several GPUs come from one queue, one worker per device, one trial per device at
//! a time (two trials on one GPU would measure each other), as the grid search of a multi-GPU
//! team does. On one device this is the plain sequential run. Each result is appended to a
//! JSON-lines file the moment it is known, so an interrupted run keeps every finished trial.

use std::collections::VecDeque;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};
use serde::{Deserialize, Serialize};

use common::par::lock;
use common::report::Provenance;
use common::{Error, Result};
use profiling::target::sanitize;

use crate::classify::Status;
use crate::config::Settings;
use crate::gpu::{cpu_list, share_cpus, Device};
use crate::launch::{ForkServer, Launcher, PythonProgram};
use crate::margin::margin_for;
use crate::program::{Capability, Params, Precision, Program};
use crate::trial::{larger_batch_after_oom, Limits, Runner, Stop, TrialResult};

/// What the user gave for a run.
pub struct RunOptions {
    pub program: Program,
    pub devices: Vec<Device>,
    /// The time limit and the silence between steps that makes a trial hung (the floor of the
    /// rule).
    pub limits: Limits,
    pub trials_dir: Option<PathBuf>,
    /// The final JSON (`-`: stdout); the trials' JSON lines go beside a file.
    pub json: Option<PathBuf>,
    pub progress: bool,
    /// Fork Python trials from a parent that imported the program's modules.
    pub fork: bool,
    /// Processes (GPUs) per trial.
    pub ranks: usize,
}

impl Limits {
    /// The time and stall limits a run's settings give.
    pub fn of(s: &Settings) -> Limits {
        Limits {
            stall_limit: Duration::from_secs_f64(s.stall_limit_s),
            ..Limits::new(Duration::from_secs_f64(s.time_limit_s))
        }
    }
}

/// A GPU the trials ran on, as the report names it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceSummary {
    pub label: String,
    pub cuda_visible: String,
    pub name: Option<String>,
    pub total_bytes: Option<u64>,
    /// Its compute capability, where NVML read it.
    pub compute_capability: Option<Capability>,
    /// What `--amp on` is on it, and why.
    pub amp_on: String,
    /// The CPU cores its trials were pinned to, where trials ran on several GPUs at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<Vec<usize>>,
    /// The driver's version and the CUDA version it supports, where NVML read them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda_driver_version: Option<String>,
}

impl DeviceSummary {
    pub fn of(d: &Device) -> DeviceSummary {
        let (driver_version, cuda_driver_version) = d.driver.clone().unzip();
        DeviceSummary {
            label: d.label.clone(),
            cuda_visible: d.cuda_visible.clone(),
            name: d.name.clone(),
            total_bytes: d.probe.as_ref().and_then(|p| Some(p.memory()?.1)),
            compute_capability: d.capability,
            amp_on: Precision::why_on(d.capability),
            cpus: d.cpus.clone(),
            driver_version,
            cuda_driver_version,
        }
    }

    /// `GPU 1: --amp on is bf16 (compute capability 9.0, bf16 from 8.0); CPU cores 8-15`,
    /// for what a report must say about the device: where `on` was asked, and its cores.
    pub fn note(&self, amp_on_asked: bool) -> Option<String> {
        let amp = amp_on_asked.then(|| format!("--amp on is {}", self.amp_on));
        let cores = (self.cpus.as_ref()).map(|c| format!("CPU cores {}", cpu_list(c)));
        let parts: Vec<String> = amp.into_iter().chain(cores).collect();
        (!parts.is_empty()).then(|| format!("{}: {}", self.label, parts.join("; ")))
    }
}

/// Progress on stderr while trials run: a bar with the trials done, each running trial's
/// elapsed time and an estimate of the time left (redrawn every quarter second once the trials
/// begin), and a line per finished trial. Nothing is drawn when stderr is not a terminal or
/// `--quiet` is given.
pub struct Progress {
    bar: ProgressBar,
    running: Arc<Mutex<Vec<(String, Instant)>>>,
}

impl Progress {
    fn new(enabled: bool) -> Progress {
        let bar =
            bar("{spinner} [{elapsed_precise}] {pos}/{len} trials, about {eta} left: {running}");
        if !enabled {
            bar.set_draw_target(ProgressDrawTarget::hidden());
        }
        let running: Arc<Mutex<Vec<(String, Instant)>>> = Arc::default();
        let shown = running.clone();
        let trials = move |_: &ProgressState, out: &mut dyn std::fmt::Write| {
            let each: Vec<String> = lock(&shown)
                .iter()
                .map(|(w, t)| format!("{w} ({:.0} s)", t.elapsed().as_secs_f64()))
                .collect();
            let _ = out.write_str(&each.join("; "));
        };
        bar.set_style(bar.style().with_key("running", trials));
        Progress { bar, running }
    }

    /// A line above the bar.
    pub fn line(&self, text: &str) {
        self.bar.println(text);
    }

    /// Run `f` as the running trial `what`.
    fn showing<T>(&self, what: String, f: impl FnOnce() -> T) -> T {
        lock(&self.running).push((what.clone(), Instant::now()));
        let out = f();
        lock(&self.running).retain(|(w, _)| *w != what);
        self.bar.inc(1);
        out
    }
}

/// A bar on stderr drawn in `template` (nothing is drawn where stderr is not a terminal).
pub fn bar(template: &str) -> ProgressBar {
    let style = ProgressStyle::with_template(template);
    ProgressBar::new_spinner()
        .with_style(style.unwrap_or_else(|_| ProgressStyle::default_spinner()))
}

/// One command's trials.
pub struct Run {
    pub program: Program,
    pub devices: Vec<Device>,
    pub launcher: Launcher,
    /// How trials start, in words; why they are spawned rather than forked, where a fork
    /// server was tried and could not start.
    pub launch: String,
    pub limits: Limits,
    pub progress: Progress,
    pub folder: PathBuf,
    temporary: bool,
    pub results_path: PathBuf,
    /// Variables every trial gets besides its values' (a profiler's, say).
    pub env: Vec<(String, std::ffi::OsString)>,
    /// Processes (GPUs) per trial.
    pub ranks: usize,
    started: Instant,
}

impl Run {
    pub fn new(o: RunOptions, what: &str) -> Result<Run> {
        let started = Instant::now();
        if o.devices.is_empty() {
            return Err(Error::invalid("no GPU to run trials on"));
        }
        if o.devices.len() < o.ranks.max(1) {
            return Err(Error::invalid(format!(
                "each trial has {} ranks, one per GPU, and there are {} GPU(s) to run on",
                o.ranks,
                o.devices.len()
            )));
        }
        let (folder, temporary) = match &o.trials_dir {
            Some(d) => std::fs::create_dir_all(d).map(|_| (d.clone(), false)),
            // Removed by [Run::finish] where nothing in it is worth reading.
            None => (tempfile::Builder::new().prefix(&format!("tuner-{what}-")))
                .tempdir()
                .map(|made| (made.keep(), true)),
        }
        .map_err(|e| Error::File {
            path: (o.trials_dir.clone().unwrap_or_else(std::env::temp_dir))
                .display()
                .to_string(),
            message: format!("cannot create the trials' folder: {e}"),
        })?;
        let results_path = match o.json.as_deref().filter(|j| *j != Path::new("-")) {
            // `run.json` -> `run.trials.jsonl`.
            Some(j) => j.with_extension("trials.jsonl"),
            None => folder.join("trials.jsonl"),
        };
        let progress = Progress::new(o.progress);
        let (launcher, fork_note) = match (o.fork, PythonProgram::of(&o.program.argv)) {
            (true, Some(python)) => {
                progress.line(&format!(
                    "{what}: importing the modules of {} once, to fork each trial from",
                    python.target.join(" ")
                ));
                match ForkServer::start(
                    python,
                    &folder.join("fork-server.log"),
                    o.limits.time_limit,
                ) {
                    Ok(server) => (Launcher::Fork(Arc::new(server)), None),
                    Err(why) => (
                        Launcher::Spawn,
                        Some(format!("trials spawned, not forked: {why}")),
                    ),
                }
            }
            _ => (Launcher::Spawn, None),
        };
        Ok(Run {
            program: o.program,
            devices: o.devices,
            launch: fork_note.unwrap_or_else(|| launcher.describe()),
            launcher,
            limits: o.limits,
            progress,
            folder,
            temporary,
            results_path,
            env: Vec::new(),
            ranks: o.ranks.max(1),
            started,
        })
    }

    /// Trial `index` with `p` on `group`, its files in a folder of its own.
    fn trial(&self, p: &Params, index: usize, group: &[Device], stop: Stop) -> TrialResult {
        let runner = Runner {
            program: &self.program,
            launcher: &self.launcher,
            limits: Limits {
                stop,
                ..self.limits
            },
            env: &self.env,
        };
        let mut folder = format!(
            "trial-{index:03}-b{}-w{}-amp-{}",
            p.batch_size,
            p.workers,
            p.amp.as_str()
        );
        for (name, value) in p.axes.iter() {
            // A value is the user's text (a path, say): only what is safe in a file name.
            let value = sanitize(&value.chars().take(40).collect::<String>());
            folder.push_str(&format!("-{name}-{value}"));
        }
        runner.trial(p, index, group, &self.folder.join(folder))
    }

    /// Start the command `what`'s trials (`trials` of them, where known): a fresh results file
    /// for them, and a line that says what runs where and where the results go.
    pub fn begin(&self, what: &str, trials: Option<usize>) -> Result<ResultsFile> {
        let results = ResultsFile::create(&self.results_path)?;
        let gpus: Vec<String> = self
            .devices
            .iter()
            .map(|d| format!("{} ({})", d.label, d.cuda_visible))
            .collect();
        if let Some(n) = trials {
            self.progress.bar.set_length(n as u64);
        }
        self.progress
            .bar
            .enable_steady_tick(Duration::from_millis(250));
        self.progress.line(&format!(
            "{what}: trials of `{}` on {}; {}; results as they come: {}",
            Program::display(&self.program.argv),
            gpus.join(", "),
            self.launch,
            self.results_path.display()
        ));
        Ok(results)
    }

    /// One trial on `group`, written to `results` and shown as it ends.
    pub fn one(
        &self,
        group: &[Device],
        p: &Params,
        index: usize,
        stop: Stop,
        results: &mut ResultsFile,
    ) -> TrialResult {
        let what = format!("trial {index}: {}", p.describe());
        let r = (self.progress).showing(what.clone(), || self.trial(p, index, group, stop));
        if let Err(e) = results.write(&r) {
            self.progress.line(&format!("warning: {e}"));
        }
        let peak = match r.memory_terms() {
            (Some(p), Some(l)) => format!(", peak {} of {}", gb(p), gb(l)),
            (Some(p), None) => format!(", peak {}", gb(p)),
            _ => String::new(),
        };
        let verdict = r.verdict();
        self.progress
            .line(&format!("{what}: {verdict} ({:.1} s){peak}", r.wall_s));
        r
    }

    /// Remove the temporary folder when nothing in it is worth reading; say where it is
    /// otherwise. Returns that note and the trials' JSON lines where they are kept.
    pub fn finish<'a>(
        &self,
        trials: impl IntoIterator<Item = &'a TrialResult>,
    ) -> (Option<String>, Option<PathBuf>) {
        self.progress.bar.finish_and_clear();
        let note = if self.temporary && !trials.into_iter().any(TrialResult::troubled) {
            let _ = std::fs::remove_dir_all(&self.folder);
            None
        } else {
            Some(format!(
                "the trials' output (report, stdout, stderr of each) is in {}",
                self.folder.display()
            ))
        };
        let kept = self
            .results_path
            .exists()
            .then(|| self.results_path.clone());
        (note, kept)
    }

    pub fn elapsed_s(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// The groups of GPUs a queue of `jobs` trials runs on, `ranks` GPUs each (one trial per
    /// group at a time): no more than there are trials; where that is several GPUs, each with
    /// its share of the tuner's CPU cores, so that processes side by side do not fight over
    /// cores for their data loaders.
    pub fn groups(&self, jobs: usize) -> Vec<Vec<Device>> {
        let n = self.ranks * (self.devices.len() / self.ranks).clamp(1, jobs.max(1));
        let mut devices: Vec<Device> = self.devices.iter().take(n).cloned().collect();
        if devices.len() > 1 {
            match common::affinity::thread_cpus() {
                Some(cores) => share_cpus(&mut devices, &cores),
                None => self
                    .progress
                    .line("the tuner's CPU affinity could not be read: trials are not pinned"),
            }
        }
        devices.chunks(self.ranks).map(<[Device]>::to_vec).collect()
    }

    /// Run `jobs` at once, as far as there are groups of GPUs for them (one per group), each
    /// stopped as `stop` says and written to `results` as it ends; their numbers from `first`.
    /// What a search that asks about several sizes at a time runs them with.
    pub fn several(
        &self,
        jobs: &[Params],
        first: usize,
        stop: Stop,
        results: &mut ResultsFile,
    ) -> Result<Vec<TrialResult>> {
        let groups = self.groups(jobs.len());
        self.queue(jobs, &groups, first, stop, |_, _| None, results)
    }

    /// Run `jobs` from one queue over `groups` (one trial per group at a time), their numbers
    /// from `first`, each stopped as `stop` says unless `skip` finds it pointless (as
    /// [run_queue] asks), and written to `results` as it ends.
    fn queue(
        &self,
        jobs: &[Params],
        groups: &[Vec<Device>],
        first: usize,
        stop: Stop,
        skip: impl Fn(&Params, &[TrialResult]) -> Option<String> + Sync,
        results: &mut ResultsFile,
    ) -> Result<Vec<TrialResult>> {
        run_queue(
            jobs,
            groups,
            |i, p, g| {
                let what = format!("{} {}", g[0].label, p.describe());
                (self.progress).showing(what, || self.trial(p, first + i, g, stop))
            },
            skip,
            results,
            |pr| self.progress.line(&pr.line()),
        )
    }

    /// Run `jobs` from one queue over the GPUs (a setting that runs out of memory skips its
    /// larger batches), each result written as it ends, and gather what every report of a
    /// queue holds.
    pub fn ran(
        &self,
        what: &str,
        jobs: &[Params],
        settings: Settings,
        margin: Option<f64>,
    ) -> Result<Ran> {
        let mut results = self.begin(what, Some(jobs.len()))?;
        let groups = self.groups(jobs.len());
        let skip = larger_batch_after_oom;
        let trials = self.queue(jobs, &groups, 0, Stop::AtExit, skip, &mut results)?;
        let devices: Vec<DeviceSummary> = groups.iter().flatten().map(DeviceSummary::of).collect();
        let margin = margin.unwrap_or_else(|| default_margin(&devices, &trials));
        let (kept, trials_file) = self.finish(&trials);
        Ok(Ran {
            command: self.program.argv.clone(),
            devices,
            launch: self.launch.clone(),
            provenance: Provenance::now(),
            settings,
            trials,
            margin,
            trials_file,
            wall_s: self.elapsed_s(),
            kept,
        })
    }
}

/// The margin by the smallest GPU's memory class: NVML's figure, else what the programs
/// reported (the small class's 20% when neither says).
pub fn default_margin(devices: &[DeviceSummary], runs: &[TrialResult]) -> f64 {
    let total = devices
        .iter()
        .filter_map(|d| d.total_bytes)
        .chain(
            runs.iter()
                .filter_map(|r| r.measured.device.as_ref()?.total_bytes),
        )
        .min();
    margin_for(total.unwrap_or(0))
}

/// What a queue of trials leaves: the part of the sweep's and memory's reports they share.
#[derive(Debug, Serialize)]
pub struct Ran {
    pub command: Vec<String>,
    pub devices: Vec<DeviceSummary>,
    /// How the trials started (spawned, or forked from a parent that imported the modules).
    pub launch: String,
    pub provenance: Provenance,
    pub settings: Settings,
    /// Each trial as it ran: command line, exit, report, memory, stderr's last lines.
    pub trials: Vec<TrialResult>,
    /// The rule's margin.
    pub margin: f64,
    /// The trials' JSON lines, where kept (beside the JSON, or in a kept trials' folder).
    #[serde(serialize_with = "common::files::serialize_recorded")]
    pub trials_file: Option<PathBuf>,
    pub wall_s: f64,
    #[serde(skip)]
    pub kept: Option<String>,
}

impl Ran {
    /// `## tuner sweep: `COMMAND` on 2 GPU(s)`, a line per GPU where `--amp on` was asked or
    /// its trials were pinned to cores, and a blank line.
    pub fn header(&self, what: &str) -> String {
        let command = Program::display(&self.command);
        let o = format!(
            "## tuner {what}: `{command}` on {} GPU(s)\n\n",
            self.devices.len()
        );
        let on = self.settings.amp.contains(&Precision::On);
        let notes: String = (self.devices.iter().filter_map(|d| d.note(on)))
            .map(|n| format!("- {n}\n"))
            .collect();
        o + &notes + if notes.is_empty() { "" } else { "\n" }
    }

    /// `sweep: 12 trials in 80.1 s; each trial's result: ...`, where a kept folder is, and the
    /// trials whose report had lines that were not valid (the first one quoted).
    pub fn footer(&self, what: &str) -> String {
        let mut o = String::new();
        let mut say = |t: &TrialResult, said: String| {
            o.push_str(&format!(
                "trial {} ({}): {said}\n",
                t.index,
                t.params.describe()
            ))
        };
        for t in self.trials.iter().filter(|t| t.report.bad_lines > 0) {
            let first = t.report.first_bad.first();
            let first = first.map_or(String::new(), |b| {
                format!("; the first, line {}: {}", b.line, b.reason)
            });
            say(
                t,
                format!("{} report line(s) not valid{first}", t.report.bad_lines),
            );
        }
        for t in self.trials.iter().filter(|t| t.troubled()) {
            let last = t.stderr_tail.last().map_or("(nothing)", String::as_str);
            say(t, format!("{}; stderr ended with: {last}", t.verdict()));
        }
        o.push_str(&format!(
            "\n{what}: {} trials in {:.1} s ({}){}\n",
            self.trials.len(),
            self.wall_s,
            self.launch,
            kept_at(&self.trials_file)
        ));
        if let Some(k) = &self.kept {
            o.push_str(k);
            o.push('\n');
        }
        o.extend(shared(&self.trials).map(|s| s + "\n"));
        o
    }
}

/// Memory other processes held on a GPU before a trial started there, from which on it counts
/// (an idle GPU holds none by NVML's count).
const SHARED_BYTES: u64 = 1 << 30;

/// The GPUs other processes held memory on before the trials' own started (the most seen before
/// any trial on each), where any did: what fit there fits beside them, not on the whole GPU. A
/// team's shared GPU gives a smaller answer than an idle one of the model.
pub fn shared<'a>(trials: impl IntoIterator<Item = &'a TrialResult>) -> Option<String> {
    let mut held: Vec<(&str, u64)> = Vec::new();
    for t in trials {
        let Some(before) = t.memory.device_before_bytes.filter(|&b| b >= SHARED_BYTES) else {
            continue;
        };
        match held.iter_mut().find(|(gpu, _)| *gpu == t.device) {
            Some((_, most)) => *most = (*most).max(before),
            None => held.push((&t.device, before)),
        }
    }
    let each: Vec<String> = (held.iter())
        .map(|(gpu, b)| format!("{gpu} ({})", gb(*b)))
        .collect();
    (!each.is_empty()).then(|| {
        format!(
            "other processes held memory on {} before a trial started there: what fit, fit beside them, not on the whole GPU",
            each.join(", ")
        )
    })
}

/// `; each trial's result: PATH`, where the results were kept.
pub fn kept_at(path: &Option<PathBuf>) -> String {
    path.as_ref()
        .map(|p| format!("; each trial's result: {}", p.display()))
        .unwrap_or_default()
}

pub fn gb(b: u64) -> String {
    plotting::format::gigabytes(b as f64, 2)
}

/// The report: its JSON to the file (`-`: stdout, and the text to stderr), the text to stdout.
pub fn emit<T: Serialize>(json: &Option<PathBuf>, value: &T, text: &str) -> Result<()> {
    match json {
        Some(p) if p == Path::new("-") => {
            eprint!("{text}");
            let s =
                serde_json::to_string_pretty(value).map_err(|e| Error::invalid(e.to_string()))?;
            println!("{s}");
        }
        Some(p) => {
            print!("{text}");
            common::files::write_json_file(p, value, "the result")?;
        }
        None => print!("{text}"),
    }
    Ok(())
}

/// The results file: one [TrialResult] as JSON per line, flushed line by line.
pub struct ResultsFile {
    path: PathBuf,
    file: File,
}

impl ResultsFile {
    /// Start a new results file (an old one at `path` is replaced).
    pub fn create(path: &Path) -> Result<ResultsFile> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| file_error(path, e))?;
        }
        let file = File::create(path).map_err(|e| file_error(path, e))?;
        Ok(ResultsFile {
            path: path.to_path_buf(),
            file,
        })
    }

    /// Append one result and flush it to the file.
    pub fn write(&mut self, r: &TrialResult) -> Result<()> {
        // The line and its newline in one write.
        let line = serde_json::to_string(r).map_err(|e| Error::File {
            path: self.path.display().to_string(),
            message: format!("could not serialize trial {}: {e}", r.index),
        })? + "\n";
        self.file
            .write_all(line.as_bytes())
            .and_then(|_| self.file.flush())
            .map_err(|e| file_error(&self.path, e))
    }
}

fn file_error(path: &Path, e: std::io::Error) -> Error {
    Error::File {
        path: path.display().to_string(),
        message: format!("cannot write the trial results: {e}"),
    }
}

/// Where the queue stands, after a trial finished.
#[derive(Debug)]
pub struct Standing<'a> {
    pub done: usize,
    pub running: usize,
    pub left: usize,
    pub total: usize,
    pub last: &'a TrialResult,
}

impl Standing<'_> {
    /// `[ 3/12] GPU 1 batch 256, workers 4, amp off: OK 1234.5 samples/s (12.3 s); 2 running, 7 left`
    pub fn line(&self) -> String {
        let width = self.total.to_string().len();
        let r = self.last;
        let place = (!r.device.is_empty()).then(|| format!("{} ", r.device));
        let time = (r.status != Status::Skipped).then(|| format!(" ({:.1} s)", r.wall_s));
        let (place, time) = (place.unwrap_or_default(), time.unwrap_or_default());
        format!(
            "[{:>width$}/{}] {place}{}: {}{time}; {} running, {} left",
            self.done,
            self.total,
            r.params.describe(),
            r.verdict(),
            self.running,
            self.left,
        )
    }
}

struct State<'r, P> {
    pending: VecDeque<(usize, Params)>,
    running: usize,
    total: usize,
    done: Vec<TrialResult>,
    results: &'r mut ResultsFile,
    progress: P,
    error: Option<Error>,
}

impl<P: FnMut(&Standing)> State<'_, P> {
    fn record(&mut self, r: TrialResult) {
        if let Err(e) = self.results.write(&r) {
            // Without a place to keep results, running more trials would only lose them.
            self.pending.clear();
            self.error.get_or_insert(e);
        }
        self.done.push(r);
        let last = self.done.last().expect("just pushed");
        (self.progress)(&Standing {
            done: self.done.len(),
            running: self.running,
            left: self.pending.len(),
            total: self.total,
            last,
        });
    }
}

/// Run `jobs` (trial numbers are their positions) over `devices` (a GPU, or a group of GPUs
/// that runs a trial together), one at a time per device.
/// `run` runs one trial (normally [Runner::trial] with the trial's own folder); `skip`
/// is asked, just before a job starts, whether the results so far make it pointless. Every
/// result is written to `results` as it comes and reported to `progress`. Returns the results
/// in trial order; the error of a results file that could not be written stops the queue.
pub fn run_queue<D, R, S, P>(
    jobs: &[Params],
    devices: &[D],
    run: R,
    skip: S,
    results: &mut ResultsFile,
    progress: P,
) -> Result<Vec<TrialResult>>
where
    D: Sync,
    R: Fn(usize, &Params, &D) -> TrialResult + Sync,
    S: Fn(&Params, &[TrialResult]) -> Option<String> + Sync,
    P: FnMut(&Standing) + Send,
{
    if devices.is_empty() {
        return Err(Error::invalid("no device to run trials on"));
    }
    let state = Mutex::new(State {
        pending: jobs.iter().cloned().enumerate().collect(),
        running: 0,
        total: jobs.len(),
        done: Vec::with_capacity(jobs.len()),
        results,
        progress,
        error: None,
    });
    std::thread::scope(|scope| {
        for device in devices {
            let (state, run, skip) = (&state, &run, &skip);
            scope.spawn(move || loop {
                let (index, params) = {
                    let mut st = lock(state);
                    loop {
                        let Some((i, p)) = st.pending.pop_front() else {
                            return;
                        };
                        match skip(&p, &st.done) {
                            Some(why) => st.record(TrialResult::skipped(i, p, why)),
                            None => {
                                st.running += 1;
                                break (i, p);
                            }
                        }
                    }
                };
                let r = run(index, &params, device);
                let mut st = lock(state);
                st.running -= 1;
                st.record(r);
            });
        }
    });
    let st = state.into_inner().unwrap_or_else(|p| p.into_inner());
    if let Some(e) = st.error {
        return Err(e);
    }
    let mut done = st.done;
    done.sort_by_key(|r| r.index);
    Ok(done)
}

#[cfg(test)]
mod queue_tests {
    use super::*;

    fn params(batch: usize, workers: usize) -> Params {
        Params {
            batch_size: batch,
            workers,
            accumulation: 1,
            steps: 1,
            ..Params::default()
        }
    }

    fn result(index: usize, p: Params, status: Status, device: &Device) -> TrialResult {
        TrialResult {
            status,
            device: device.label.clone(),
            reason: "exit status 0".into(),
            ..TrialResult::skipped(index, p, String::new())
        }
    }

    fn temp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("tuner-queue-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn one_device_runs_in_order_and_skips_after_oom() {
        let dir = temp("order");
        let mut file = ResultsFile::create(&dir.join("results.jsonl")).unwrap();
        let jobs: Vec<Params> = [8, 16, 32, 64]
            .iter()
            .flat_map(|&b| [params(b, 0), params(b, 4)])
            .collect();
        let devices = [Device::stand_in("GPU 0", "0")];
        let order = Mutex::new(Vec::new());
        let mut lines = Vec::new();
        let done = run_queue(
            &jobs,
            &devices,
            |i, p, d| {
                order.lock().unwrap().push(i);
                // With 4 workers batch 16 runs out of memory; with 0, batch 64.
                let limit = if p.workers == 4 { 8 } else { 32 };
                let s = if p.batch_size > limit {
                    Status::Oom
                } else {
                    Status::Ok
                };
                result(i, p.clone(), s, d)
            },
            larger_batch_after_oom,
            &mut file,
            |pr: &Standing| lines.push(pr.line()),
        )
        .unwrap();
        assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3, 4, 6]);
        let statuses: Vec<Status> = done.iter().map(|r| r.status).collect();
        use Status::*;
        assert_eq!(statuses, [Ok, Ok, Ok, Oom, Ok, Skipped, Oom, Skipped]);
        assert!(
            done[5].reason.contains("batch 16 of the same setting"),
            "{}",
            done[5].reason
        );
        assert_eq!(lines.len(), 8);
        assert!(
            lines[0].starts_with("[1/8] GPU 0 batch 8, workers 0, amp off: OK"),
            "{}",
            lines[0]
        );
        assert!(lines[7].ends_with("0 running, 0 left"), "{}", lines[7]);
        let text = std::fs::read_to_string(dir.join("results.jsonl")).unwrap();
        let back: Vec<TrialResult> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(back.len(), 8);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn an_out_of_memory_skips_larger_batches_of_its_own_axis_values_only() {
        let at = |batch: usize, model: &str| {
            let mut p = params(batch, 0);
            p.axes.set("model", model.into());
            p
        };
        let big_oom = TrialResult {
            status: Status::Oom,
            ..TrialResult::skipped(0, at(16, "big"), String::new())
        };
        let done = [big_oom];
        let skip = larger_batch_after_oom(&at(32, "big"), &done).unwrap();
        assert!(skip.contains("batch 16"), "{skip}");
        assert_eq!(larger_batch_after_oom(&at(32, "small"), &done), None);
        assert_eq!(larger_batch_after_oom(&at(8, "big"), &done), None);
    }

    #[test]
    fn no_devices_is_an_error_and_no_jobs_is_nothing() {
        let dir = temp("empty");
        let mut file = ResultsFile::create(&dir.join("r.jsonl")).unwrap();
        let run = |i: usize, p: &Params, d: &Device| result(i, p.clone(), Status::Ok, d);
        let none = |_: &Params, _: &[TrialResult]| None;
        let quiet = |_: &Standing| {};
        assert!(run_queue(&[params(1, 0)], &[], run, none, &mut file, quiet).is_err());
        let d = [Device::stand_in("GPU 0", "0")];
        let ran = run_queue(&[], &d, run, none, &mut file, quiet).unwrap();
        assert!(ran.is_empty());
        let _ = std::fs::remove_dir_all(dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpus_other_processes_held_memory_on_are_named_with_the_most_they_held() {
        let trial = |gpu: &str, before: Option<u64>| {
            let mut t = TrialResult::skipped(0, Params::default(), String::new());
            (t.device, t.memory.device_before_bytes) = (gpu.into(), before);
            t
        };
        let idle = [trial("GPU 0", Some(0)), trial("GPU 1", None)];
        assert_eq!(shared(&idle), None);
        let busy = [
            trial("GPU 0", Some(300_000_000)),
            trial("GPU 1", Some(40_000_000_000)),
            trial("GPU 1", Some(42_000_000_000)),
            trial("GPU 2", Some(2_000_000_000)),
        ];
        assert_eq!(
            shared(&busy).unwrap(),
            "other processes held memory on GPU 1 (42.00 GB), GPU 2 (2.00 GB) before a trial started there: what fit, fit beside them, not on the whole GPU"
        );
    }

    #[test]
    fn a_device_s_summary_names_its_driver_where_nvml_reads_it() {
        let mut device = Device::stand_in("GPU 0", "0");
        let json = serde_json::to_value(DeviceSummary::of(&device)).unwrap();
        assert!(json.get("driver_version").is_none(), "{json}");
        device.name = Some("NVIDIA H100 80GB HBM3".into());
        device.driver = Some(("580.159.04".into(), "13.0".into()));
        let json = serde_json::to_value(DeviceSummary::of(&device)).unwrap();
        assert_eq!(json["name"], "NVIDIA H100 80GB HBM3");
        assert_eq!(json["driver_version"], "580.159.04");
        assert_eq!(json["cuda_driver_version"], "13.0");
    }
}
