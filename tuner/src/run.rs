//! What the trials of one command share: the program and how its trials start, the GPUs, the
//! folder their files go to, the results file each result is appended to as it ends, the
//! progress shown on a terminal, and the parts of a report every command prints.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::{Deserialize, Serialize};

use common::report::Provenance;
use common::{Error, Result};

use crate::classify::Status;
use crate::config::Settings;
use crate::gpu::{allowed_cpus, cpu_list, share_cpus, Device};
use crate::launch::{ForkServer, Launcher, PythonProgram};
use crate::program::{Capability, Params, Precision, Program};
use crate::queue::{larger_batch_after_oom, run_queue, ResultsFile};
use crate::recommend;
use crate::trial::{Limits, Runner, Stop, TrialResult};

/// What the user gave for a run.
pub struct RunOptions {
    pub program: Program,
    pub devices: Vec<Device>,
    pub time_limit_s: f64,
    pub trials_dir: Option<PathBuf>,
    /// The final JSON (`-`: stdout); the trials' JSON lines go beside a file.
    pub json: Option<PathBuf>,
    pub progress: bool,
    /// Fork Python trials from a parent that imported the program's modules.
    pub fork: bool,
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
        let driver = d.probe.as_ref().and_then(|p| p.driver());
        DeviceSummary {
            label: d.label.clone(),
            cuda_visible: d.cuda_visible.clone(),
            name: d.name(),
            total_bytes: d.probe.as_ref().and_then(|p| p.device_total()),
            compute_capability: d.capability,
            amp_on: Precision::why_on(d.capability),
            cpus: d.cpus.clone(),
            driver_version: driver.as_ref().map(|(d, _)| d.clone()),
            cuda_driver_version: driver.map(|(_, c)| c),
        }
    }

    /// `GPU 1: --amp on is bf16 (compute capability 9.0, bf16 from 8.0); CPU cores 8-15`,
    /// for what a report must say about the device: where `on` was asked, and its cores.
    pub fn note(&self, amp_on_asked: bool) -> Option<String> {
        let mut parts = Vec::new();
        if amp_on_asked {
            parts.push(format!("--amp on is {}", self.amp_on));
        }
        if let Some(c) = &self.cpus {
            parts.push(format!("CPU cores {}", cpu_list(c)));
        }
        (!parts.is_empty()).then(|| format!("{}: {}", self.label, parts.join("; ")))
    }
}

/// Progress on stderr while trials run: a bar with the trials done, each running trial's
/// elapsed time and an estimate of the time left, and a line per finished trial. Nothing is
/// drawn when stderr is not a terminal or `--quiet` is given.
pub struct Progress {
    bar: ProgressBar,
    running: Mutex<Vec<(String, Instant)>>,
}

impl Progress {
    fn new(enabled: bool) -> Progress {
        let target = if enabled {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        };
        let bar = ProgressBar::with_draw_target(None, target);
        bar.set_style(
            ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {pos}/{len} trials, about {eta} left: {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        Progress {
            bar,
            running: Mutex::default(),
        }
    }

    /// A line above the bar.
    pub fn line(&self, text: &str) {
        self.bar.println(text);
    }

    /// Run `f` as the running trial `what`.
    fn showing<T>(&self, what: String, f: impl FnOnce() -> T) -> T {
        let lock = || self.running.lock().unwrap_or_else(|p| p.into_inner());
        lock().push((what.clone(), Instant::now()));
        let out = f();
        let mut r = lock();
        if let Some(i) = r.iter().position(|(w, _)| *w == what) {
            r.remove(i);
        }
        drop(r);
        self.bar.inc(1);
        out
    }

    /// Run `f`, redrawing the running trials every quarter second meanwhile.
    fn ticking<T>(&self, f: impl FnOnce() -> T) -> T {
        let done = AtomicBool::new(false);
        std::thread::scope(|scope| {
            scope.spawn(|| {
                while !done.load(Ordering::Relaxed) {
                    let message: Vec<String> = self
                        .running
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .iter()
                        .map(|(w, t)| format!("{w} ({:.0} s)", t.elapsed().as_secs_f64()))
                        .collect();
                    self.bar.set_message(message.join("; "));
                    self.bar.tick();
                    std::thread::sleep(Duration::from_millis(250));
                }
            });
            let out = f();
            done.store(true, Ordering::Relaxed);
            out
        })
    }
}

/// One command's trials.
pub struct Run {
    pub program: Program,
    pub devices: Vec<Device>,
    pub launcher: Launcher,
    /// How trials start, in words; why they are spawned rather than forked, where a fork
    /// server was tried and could not start.
    launch: String,
    pub limits: Limits,
    pub progress: Progress,
    pub folder: PathBuf,
    temporary: bool,
    pub results_path: PathBuf,
    /// Variables every trial gets besides its values' (a profiler's, say).
    pub env: Vec<(String, std::ffi::OsString)>,
    started: Instant,
}

impl Run {
    pub fn new(o: RunOptions, what: &str) -> Result<Run> {
        let started = Instant::now();
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
                    Duration::from_secs_f64(o.time_limit_s),
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
            limits: Limits::new(Duration::from_secs_f64(o.time_limit_s)),
            progress,
            folder,
            temporary,
            results_path,
            env: Vec::new(),
            started,
        })
    }

    /// How trials start, in words.
    pub fn launch(&self) -> String {
        self.launch.clone()
    }

    /// Trial `index` with `p` on `device`, its files in a folder of its own.
    pub(crate) fn trial(
        &self,
        p: &Params,
        index: usize,
        device: &Device,
        stop: Stop,
    ) -> TrialResult {
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
            let value: String = value
                .chars()
                .take(40)
                .map(|c| {
                    if c.is_ascii_alphanumeric() || ".-".contains(c) {
                        c
                    } else {
                        '_'
                    }
                })
                .collect();
            folder.push_str(&format!("-{name}-{value}"));
        }
        runner.trial(p, index, device, &self.folder.join(folder))
    }

    pub fn announce(&self, what: &str, trials: Option<usize>) {
        let gpus: Vec<String> = self
            .devices
            .iter()
            .map(|d| format!("{} ({})", d.label, d.cuda_visible))
            .collect();
        if let Some(n) = trials {
            self.progress.bar.set_length(n as u64);
        }
        self.progress.line(&format!(
            "{what}: trials of `{}` on {}; {}; results as they come: {}",
            Program::display(&self.program.argv),
            gpus.join(", "),
            self.launch(),
            self.results_path.display()
        ));
    }

    /// One trial on `device`, written to `results` and shown as it ends.
    pub fn one(
        &self,
        device: &Device,
        p: &Params,
        index: usize,
        stop: Stop,
        results: &mut ResultsFile,
    ) -> TrialResult {
        let what = format!("trial {index}: {}", p.describe());
        let r = self.progress.ticking(|| {
            (self.progress).showing(what.clone(), || self.trial(p, index, device, stop))
        });
        if let Err(e) = results.write(&r) {
            self.progress.line(&format!("warning: {e}"));
        }
        let (peak, limit) = r.memory_terms();
        self.progress.line(&format!(
            "{what}: {} ({:.1} s){}",
            r.verdict(),
            r.wall_s,
            match (peak, limit) {
                (Some(p), Some(l)) => format!(", peak {} of {}", gb(p), gb(l)),
                (Some(p), None) => format!(", peak {}", gb(p)),
                _ => String::new(),
            }
        ));
        r
    }

    /// Remove the temporary folder when nothing in it is worth reading; say where it is
    /// otherwise. Returns that note and the trials' JSON lines where they are kept.
    pub fn finish(&self, trials: &[TrialResult]) -> (Option<String>, Option<PathBuf>) {
        self.progress.bar.finish_and_clear();
        let clean = trials
            .iter()
            .all(|r| matches!(r.status, Status::Ok | Status::Oom | Status::Skipped));
        let note = if self.temporary && clean {
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

    /// The GPU's name: NVML's, else what the program reported.
    pub fn gpu_name(&self, device: &Device, trials: &[TrialResult]) -> String {
        gpu_name(device.name().as_deref(), trials)
    }

    /// The GPUs a queue of `jobs` trials runs on: no more than there are trials; where that is
    /// several, each with its share of the tuner's CPU cores, so that trials side by side do
    /// not fight over cores for their data loaders.
    pub(crate) fn devices_in_use(&self, jobs: usize) -> Vec<Device> {
        let mut devices: Vec<Device> = self.devices.iter().take(jobs.max(1)).cloned().collect();
        if devices.len() > 1 {
            match allowed_cpus() {
                Some(cores) => share_cpus(&mut devices, &cores),
                None => self
                    .progress
                    .line("the tuner's CPU affinity could not be read: trials are not pinned"),
            }
        }
        devices
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
        let mut results = ResultsFile::create(&self.results_path)?;
        self.announce(what, Some(jobs.len()));
        let devices = self.devices_in_use(jobs.len());
        let trials = self.progress.ticking(|| {
            run_queue(
                jobs,
                &devices,
                |i, p, d| {
                    (self.progress).showing(format!("{} {}", d.label, p.describe()), || {
                        self.trial(p, i, d, Stop::AtExit)
                    })
                },
                larger_batch_after_oom,
                &mut results,
                |pr| self.progress.line(&pr.line()),
            )
        })?;
        let devices: Vec<DeviceSummary> = devices.iter().map(DeviceSummary::of).collect();
        let margin = margin.unwrap_or_else(|| default_margin(&devices, &trials));
        let (kept, trials_file) = self.finish(&trials);
        Ok(Ran {
            command: self.program.argv.clone(),
            devices,
            launch: self.launch(),
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

/// A GPU's name: NVML's (`name`, where it was read), else what a trial's program reported.
pub fn gpu_name(name: Option<&str>, trials: &[TrialResult]) -> String {
    (name.map(String::from))
        .or_else(|| {
            trials
                .iter()
                .find_map(|r| r.measured.device.as_ref().and_then(|d| d.name.clone()))
        })
        .unwrap_or_else(|| "unknown GPU".into())
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
    recommend::margin_for(total.unwrap_or(0))
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
        let mut o = format!(
            "## tuner {what}: `{command}` on {} GPU(s)\n\n",
            self.devices.len()
        );
        let on = self.settings.amp.contains(&Precision::On);
        let notes: Vec<String> = self.devices.iter().filter_map(|d| d.note(on)).collect();
        if !notes.is_empty() {
            for n in notes {
                o.push_str(&format!("- {n}\n"));
            }
            o.push('\n');
        }
        o
    }

    /// `sweep: 12 trials in 80.1 s; each trial's result: ...`, where a kept folder is, and the
    /// trials whose report had lines that were not valid (the first one quoted).
    pub fn footer(&self, what: &str) -> String {
        let mut o = String::new();
        for t in self.trials.iter().filter(|t| t.report.bad_lines > 0) {
            let first = t.report.first_bad.first();
            o.push_str(&format!(
                "trial {} ({}): {} report line(s) not valid{}\n",
                t.index,
                t.params.describe(),
                t.report.bad_lines,
                first.map_or(String::new(), |b| format!(
                    "; the first, line {}: {}",
                    b.line, b.reason
                ))
            ));
        }
        for t in self.trials.iter().filter(|t| {
            matches!(
                t.status,
                Status::Hang | Status::Failed | Status::Incomplete | Status::Unfinished
            )
        }) {
            o.push_str(&format!(
                "trial {} ({}): {}; stderr ended with: {}\n",
                t.index,
                t.params.describe(),
                t.verdict(),
                t.stderr_tail.last().map_or("(nothing)", String::as_str)
            ));
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
        o
    }
}

/// `; each trial's result: PATH`, where the results were kept.
pub fn kept_at(path: &Option<PathBuf>) -> String {
    path.as_ref()
        .map(|p| format!("; each trial's result: {}", p.display()))
        .unwrap_or_default()
}

pub fn gb(b: u64) -> String {
    format!("{:.2} GB", b as f64 / 1e9)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nvml::MemoryProbe;

    #[derive(Debug)]
    struct Driver;

    impl MemoryProbe for Driver {
        fn processes(&self) -> Option<Vec<(u32, Option<u64>)>> {
            None
        }
        fn device_used(&self) -> Option<u64> {
            None
        }
        fn device_name(&self) -> Option<String> {
            Some("NVIDIA H100 80GB HBM3".into())
        }
        fn driver(&self) -> Option<(String, String)> {
            Some(("580.159.04".into(), "13.0".into()))
        }
    }

    #[test]
    fn a_device_s_summary_names_its_driver_where_nvml_reads_it() {
        let mut device = Device::stand_in("GPU 0", "0");
        let json = serde_json::to_value(DeviceSummary::of(&device)).unwrap();
        assert!(json.get("driver_version").is_none(), "{json}");
        device.probe = Some(Arc::new(Driver));
        let json = serde_json::to_value(DeviceSummary::of(&device)).unwrap();
        assert_eq!(json["name"], "NVIDIA H100 80GB HBM3");
        assert_eq!(json["driver_version"], "580.159.04");
        assert_eq!(json["cuda_driver_version"], "13.0");
    }
}
