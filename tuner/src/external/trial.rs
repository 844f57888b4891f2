//! One trial: the user's command with one set of values, on one GPU, in a fresh process, with
//! a time limit; what it reported, how it ended, and the memory it used.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::classify::{classify, OomMessage, Status};
use super::command::{Params, Program, REPORT_ENV, TRIAL_ENV};
use super::device::Device;
use super::memory::{MemoryReading, Sampler};
use super::process::{read_tail, run_in_group, tail_lines, Exit};
use super::protocol::{BadLine, Measured, ReportFile};

/// How long a trial may run, and how it is watched.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// Past this the trial's process group is killed and the trial is a HANG.
    pub time_limit: Duration,
    /// NVML memory sampling period.
    pub memory_period: Duration,
    /// Lines of stderr kept in a result that is not OK.
    pub tail_lines: usize,
    /// Stop the program as soon as it has reported every step it was told to run (warmup
    /// included), without waiting for it to wind down (or to go on training, for a program
    /// that ignores `{steps}`): what the batch finder needs, and all it needs.
    pub stop_after_steps: bool,
}

impl Limits {
    pub fn new(time_limit: Duration) -> Limits {
        Limits {
            time_limit,
            memory_period: Duration::from_millis(100),
            tail_lines: 20,
            stop_after_steps: false,
        }
    }
}

/// How the report file read, without its steps (those are summarized in `measured`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReportHealth {
    pub lines: usize,
    pub bad_lines: usize,
    pub first_bad: Vec<BadLine>,
    pub truncated_last_line: bool,
    pub unknown_kinds: usize,
}

/// One trial's result: one line of the results file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrialResult {
    pub index: usize,
    /// The GPU's label (`GPU 1`) and what the child's CUDA_VISIBLE_DEVICES said.
    pub device: String,
    pub cuda_visible: String,
    pub params: Params,
    /// The command line as run.
    pub command: Vec<String>,
    pub status: Status,
    /// In words: the exit, the stack that ran out of memory, the time limit, the skip rule.
    pub reason: String,
    pub oom: Option<OomMessage>,
    pub exit: Option<Exit>,
    pub wall_s: f64,
    /// The program reported every step it was told to run (warmup included).
    pub reached_steps: bool,
    pub measured: Measured,
    pub memory: MemoryReading,
    pub report: ReportHealth,
    /// The last lines of stderr, for a trial that did not end OK.
    pub stderr_tail: Vec<String>,
    /// Where its report, stdout and stderr are kept.
    pub folder: Option<PathBuf>,
}

impl TrialResult {
    /// The trial's peak memory and the memory it could have had, in the same terms: the
    /// program's own peak against the memory it reported free when it started (both from the
    /// report, exact), else NVML's reading against the GPU's memory less what was in use before
    /// the trial. The limit is None unless it is known in the peak's terms.
    pub fn memory_terms(&self) -> (Option<u64>, Option<u64>) {
        let m = &self.measured;
        let reported_free = m.device.as_ref().and_then(|d| d.free_bytes);
        if m.framework_peak_bytes.is_some() && reported_free.is_some() {
            return (m.framework_peak_bytes, reported_free);
        }
        let nvml_limit = match (
            self.memory.device_total_bytes,
            self.memory.device_before_bytes,
        ) {
            (Some(total), Some(before)) => Some(total.saturating_sub(before)),
            _ => None,
        };
        match (self.memory.peak_bytes, nvml_limit) {
            (Some(p), Some(l)) => (Some(p), Some(l)),
            // A peak without a limit in its own terms: shown, but not held against a limit.
            (nvml, _) => (nvml.or(m.framework_peak_bytes), None),
        }
    }

    /// A trial not run.
    pub fn skipped(index: usize, params: Params, reason: String) -> TrialResult {
        TrialResult {
            index,
            device: String::new(),
            cuda_visible: String::new(),
            params,
            command: Vec::new(),
            status: Status::Skipped,
            reason,
            oom: None,
            exit: None,
            wall_s: 0.0,
            reached_steps: false,
            measured: Measured::from_report(&ReportFile::default(), 0, None, &[]),
            memory: MemoryReading::unmeasured("not run"),
            report: ReportHealth::default(),
            stderr_tail: Vec::new(),
            folder: None,
        }
    }

    /// `OK 1234 samples/s`, `OOM (PyTorch)`, `FAILED: exit status 2`: for progress lines.
    pub fn verdict(&self) -> String {
        match self.status {
            Status::Ok => match self.measured.samples_per_s {
                Some(s) => format!("OK {s:.1} samples/s"),
                None => "OK".into(),
            },
            Status::Oom => format!(
                "OOM ({})",
                self.oom
                    .as_ref()
                    .map_or("out of memory", |m| m.stack.as_str())
            ),
            Status::Hang => format!("HANG: {}", self.reason),
            Status::Failed => format!("FAILED: {}", self.reason),
            Status::Skipped => format!("SKIPPED: {}", self.reason),
        }
    }
}

/// A running program's report as it grows: when each step's line was first seen (the tuner's
/// own clock, to the resolution of [super::process::POLL]), and whether all were reported. The
/// file is re-read only when it grew.
struct StepWatch<'a> {
    path: &'a Path,
    wanted: usize,
    seen_len: u64,
    start: Instant,
    /// Seconds from the start to the poll that first saw each step line.
    arrivals: Vec<f64>,
}

impl<'a> StepWatch<'a> {
    fn new(path: &'a Path, wanted: usize) -> StepWatch<'a> {
        StepWatch {
            path,
            wanted,
            seen_len: 0,
            start: Instant::now(),
            arrivals: Vec::new(),
        }
    }

    /// Look at the report again; true once every step the program was told to run is in it.
    fn all_reported(&mut self) -> bool {
        let len = std::fs::metadata(self.path).map(|m| m.len()).unwrap_or(0);
        if len != self.seen_len {
            self.seen_len = len;
            let now = self.start.elapsed().as_secs_f64();
            let steps = ReportFile::read(self.path).steps.len();
            while self.arrivals.len() < steps {
                self.arrivals.push(now);
            }
        }
        self.arrivals.len() >= self.wanted
    }
}

/// The report file, stdout and stderr of a trial, in its folder.
pub fn report_path(folder: &Path) -> PathBuf {
    folder.join("report.jsonl")
}

/// What a trial's process finds in its environment besides what it inherits (the module page
/// of [super] says why each is there).
pub fn trial_environment(
    params: &Params,
    index: usize,
    device: &Device,
    report: &Path,
) -> Vec<(&'static str, OsString)> {
    let mut env: Vec<(&'static str, OsString)> = Program::env_for(params)
        .into_iter()
        .map(|(k, v)| (k, v.into()))
        .collect();
    env.extend([
        (REPORT_ENV, report.as_os_str().to_owned()),
        (TRIAL_ENV, index.to_string().into()),
        ("CUDA_VISIBLE_DEVICES", device.cuda_visible.clone().into()),
        ("NCCL_NVLS_ENABLE", "0".into()),
        ("PYTHONUNBUFFERED", "1".into()),
    ]);
    if device.pci_bus_order {
        env.push(("CUDA_DEVICE_ORDER", "PCI_BUS_ID".into()));
    }
    env
}

/// Run trial `index` of `program` with `params` on `device`, keeping its files in `folder`
/// (created; an old report there is removed). Never fails: a program that cannot start is a
/// FAILED result saying why.
pub fn trial(
    program: &Program,
    params: &Params,
    index: usize,
    device: &Device,
    folder: &Path,
    limits: &Limits,
) -> TrialResult {
    let argv = program.argv_for(params);
    let mut result = TrialResult::skipped(index, *params, String::new());
    result.device = device.label.clone();
    result.cuda_visible = device.cuda_visible.clone();
    result.command = argv.clone();
    result.folder = Some(folder.to_path_buf());
    result.memory = MemoryReading::unmeasured("no NVML reading for this device");
    let failed = |mut r: TrialResult, why: String| {
        r.status = Status::Failed;
        r.stderr_tail = vec![why.clone()];
        r.reason = why;
        r
    };

    let folder = match std::fs::create_dir_all(folder).and_then(|_| folder.canonicalize()) {
        Ok(f) => f,
        Err(e) => {
            return failed(
                result,
                format!("cannot create the trial's folder {}: {e}", folder.display()),
            )
        }
    };
    let report = report_path(&folder);
    let _ = std::fs::remove_file(&report);
    let (stdout, stderr) = (folder.join("stdout.log"), folder.join("stderr.log"));
    let files =
        std::fs::File::create(&stdout).and_then(|o| Ok((o, std::fs::File::create(&stderr)?)));
    let (out_file, err_file) = match files {
        Ok(f) => f,
        Err(e) => return failed(result, format!("cannot create the trial's logs: {e}")),
    };

    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .envs(trial_environment(params, index, device, &report))
        .stdin(Stdio::null())
        .stdout(out_file)
        .stderr(err_file);

    let before = device.probe.as_ref().and_then(|p| p.device_used());
    let mut sampler = None;
    let mut watch = StepWatch::new(&report, params.total_steps());
    let finished = run_in_group(
        cmd,
        limits.time_limit,
        |pid| {
            sampler = device
                .probe
                .clone()
                .map(|p| Sampler::start(p, pid, limits.memory_period, before));
        },
        // Asked on every poll, stopping or not: the arrivals are the tuner's clock.
        || watch.all_reported() && limits.stop_after_steps,
    );
    if let Some(s) = sampler {
        result.memory = s.finish();
        result.memory.device_total_bytes = device.probe.as_ref().and_then(|p| p.device_total());
    }
    let finished = match finished {
        Ok(f) => f,
        Err(e) => {
            return failed(
                result,
                format!("could not start '{}': {e}", Program::display(&argv[..1])),
            )
        }
    };
    result.exit = Some(finished.exit);
    result.wall_s = finished.wall.as_secs_f64();

    let file = ReportFile::read(&report);
    result.reached_steps = file.steps.len() >= params.total_steps();
    // The whole process's wall time stands in only for a program that finished.
    let wall = finished.exit.success().then(|| {
        (
            (params.samples_per_step() * params.total_steps()) as u64,
            result.wall_s,
        )
    });
    result.measured = Measured::from_report(&file, params.warmup_steps, wall, &watch.arrivals);
    result.report = ReportHealth {
        lines: file.lines,
        bad_lines: file.bad_lines,
        first_bad: file.first_bad,
        truncated_last_line: file.truncated_last_line,
        unknown_kinds: file.unknown_kinds,
    };

    let verdict = classify(
        finished.exit,
        &read_tail(&stderr, 256 * 1024),
        &read_tail(&stdout, 64 * 1024),
    );
    result.status = verdict.status;
    result.oom = verdict.oom;
    result.reason = if finished.exit == Exit::TimedOut {
        format!(
            "{} of {:.0} s",
            verdict.reason,
            limits.time_limit.as_secs_f64()
        )
    } else {
        verdict.reason
    };
    if result.status != Status::Ok {
        result.stderr_tail = tail_lines(&stderr, limits.tail_lines);
    }
    result
}
