//! One trial: the user's command with one set of values, on one GPU, in a process of its own,
//! with a time limit; what it reported, how it ended, the memory it used and how busy NVML saw
//! the GPU.
//!
//! While it runs the tuner watches three files. The report: each step line is timed on the
//! tuner's own clock as it arrives, with the peak memory so far (the program's own figure on
//! the line, else NVML's), so a finder's trial can stop as soon as memory is steady. Stderr and
//! stdout: an out-of-memory message ends the trial at once (the program's wind-down, which can
//! take longer than the trial, says nothing more).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use common::process::{read_from, read_tail, tail_lines, watch, Exit};

use crate::classify::{classify, find_oom, OomMessage, Status};
use crate::gpu::Device;
use crate::launch::{Launcher, Spawn};
use crate::nvml::{MemoryReading, Sampler};
use crate::program::{Params, Program, REPORT_ENV, TRIAL_ENV};
use crate::protocol::{step_of, Measured, ReportFile, ReportHealth};

/// When a trial is over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// When the program exits (a sweep's trials: every step is measured, and how it ends).
    AtExit,
    /// Once it has reported every step it was told to run (a confirmation: whether memory held
    /// for those steps is all it asks; winding down would only cost time).
    AfterSteps,
    /// As soon as its memory is steady ([steady]) or it has reported every step it was told
    /// to run: all a batch finder needs to know.
    WhenSteady,
}

/// How long a trial may run, and how it is watched.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// Past this the trial's process group is killed and the trial is a HANG.
    pub time_limit: Duration,
    pub stop: Stop,
}

impl Limits {
    pub fn new(time_limit: Duration) -> Limits {
        Limits {
            time_limit,
            stop: Stop::AtExit,
        }
    }
}

/// NVML's sampling period.
const SAMPLE_PERIOD: Duration = Duration::from_millis(50);
/// Lines of stderr kept in a result that is not OK.
const TAIL_LINES: usize = 20;

/// Steps a program reports before its memory can be steady: the first creates the optimizer's
/// state, the second holds it with the activations, the third must agree with the second.
pub const MIN_STEADY_STEPS: usize = 3;

/// Whether memory is steady after the steps whose peaks (the most held so far, at each step's
/// end; None where not known) are `peaks`: at least [MIN_STEADY_STEPS] steps, and the last two
/// peaks known and in agreement, within 1 MiB or 0.1% (an allocator's rounding).
pub fn steady(peaks: &[Option<u64>]) -> bool {
    match *peaks {
        [.., Some(a), Some(b)] if peaks.len() >= MIN_STEADY_STEPS => {
            a.abs_diff(b) <= (1u64 << 20).max(a.max(b) / 1000)
        }
        _ => false,
    }
}

/// One trial's result: one line of the results file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TrialResult {
    pub index: usize,
    /// The GPU's label (`GPU 1`) and what the child's CUDA_VISIBLE_DEVICES said.
    pub device: String,
    pub cuda_visible: String,
    /// The CPU cores it was pinned to (trials side by side on several GPUs); None: the tuner's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<Vec<usize>>,
    /// Its settings, `on` resolved to the precision its GPU has.
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
    /// The step at which memory was steady, for a trial stopped there.
    pub steady_at: Option<usize>,
    /// The peak memory so far at the end of each step, as the steadiness rule saw it.
    pub step_peaks: Vec<Option<u64>>,
    pub measured: Measured,
    pub memory: MemoryReading,
    /// Mean NVML GPU utilization over the measured steps (percent), where NVML reads it.
    pub nvml_util_pct: Option<f64>,
    pub report: ReportHealth,
    /// The last lines of stderr, for a trial that did not end OK.
    pub stderr_tail: Vec<String>,
    /// Where its report, stdout and stderr are kept.
    #[serde(serialize_with = "common::files::serialize_recorded")]
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
        let nvml_limit = (self.memory.device_total_bytes)
            .zip(self.memory.device_before_bytes)
            .map(|(total, before)| total.saturating_sub(before));
        match (self.memory.peak_bytes, nvml_limit) {
            (Some(p), Some(l)) => (Some(p), Some(l)),
            // A peak without a limit in its own terms: shown, but not held against a limit.
            (nvml, _) => (nvml.or(m.framework_peak_bytes), None),
        }
    }

    /// Whether its batch fits: it ended OK (or reported every step it was told to run: a
    /// program may crash on its way out), or ran out of memory. None for a trial that says
    /// nothing about memory (a hang, a failure, an incomplete or skipped trial).
    pub fn fits(&self) -> Option<bool> {
        match self.status {
            _ if self.reached_steps => Some(true),
            Status::Ok => Some(true),
            Status::Oom => Some(false),
            _ => None,
        }
    }

    /// A trial not run.
    pub fn skipped(index: usize, params: Params, reason: String) -> TrialResult {
        TrialResult {
            index,
            params,
            status: Status::Skipped,
            reason,
            memory: MemoryReading::unmeasured("not run"),
            ..TrialResult::default()
        }
    }

    /// `OK 1234 samples/s`, `OOM (PyTorch)`, `FAILED: exit status 2`: for progress lines.
    pub fn verdict(&self) -> String {
        match self.status {
            Status::Ok => match (self.measured.samples_per_s, self.steady_at) {
                (_, Some(at)) => format!("fits (memory steady at step {at})"),
                (Some(s), None) => format!("OK {s:.1} samples/s"),
                (None, None) => "OK".into(),
            },
            Status::Oom => format!(
                "OOM ({})",
                self.oom
                    .as_ref()
                    .map_or("out of memory", |m| m.stack.as_str())
            ),
            Status::Incomplete => format!("INCOMPLETE: {}", self.reason),
            Status::Hang => format!("HANG: {}", self.reason),
            Status::Failed => format!("FAILED: {}", self.reason),
            Status::Skipped => format!("SKIPPED: {}", self.reason),
            Status::Unfinished => format!("UNFINISHED: {}", self.reason),
        }
    }
}

/// A skip rule for sweeps: a batch at or above one that ran out of memory with the same other
/// settings (the user's axes among them, the precision as asked) would run out too.
pub fn larger_batch_after_oom(p: &Params, done: &[TrialResult]) -> Option<String> {
    done.iter()
        .filter(|r| r.status == Status::Oom)
        .filter(|r| {
            r.params.batch_size <= p.batch_size
                && Params {
                    batch_size: p.batch_size,
                    ..r.params.as_asked()
                } == p.as_asked()
        })
        .map(|r| r.params.batch_size)
        .min()
        .map(|b| format!("batch {b} of the same setting ran out of memory"))
}

/// A growing text file read piece by piece: the complete lines that arrived since the last
/// look.
struct Tail<'a> {
    path: &'a Path,
    offset: u64,
    partial: String,
}

impl<'a> Tail<'a> {
    fn new(path: &'a Path) -> Tail<'a> {
        Tail {
            path,
            offset: 0,
            partial: String::new(),
        }
    }

    /// New complete lines, if the file grew.
    fn new_lines(&mut self) -> Vec<String> {
        let len = std::fs::metadata(self.path).map(|m| m.len()).unwrap_or(0);
        if len <= self.offset {
            return Vec::new();
        }
        // A flood is read in pieces; the rest comes at the next look.
        let (text, _) = read_from(self.path, Some(self.offset), 4 << 20);
        self.offset += text.len() as u64;
        self.partial.push_str(&text);
        let Some(end) = self.partial.rfind('\n') else {
            // One line longer than any report: keep only its start.
            if self.partial.len() > 1 << 20 {
                self.partial.truncate(1 << 20);
            }
            return Vec::new();
        };
        let rest = self.partial.split_off(end + 1);
        let done = std::mem::replace(&mut self.partial, rest);
        done.lines().map(str::to_string).collect()
    }
}

/// What is watched while a trial runs.
struct Watcher<'a> {
    report: Tail<'a>,
    outputs: [Tail<'a>; 2],
    start: Instant,
    /// When each step line arrived (seconds from the start).
    arrivals: Vec<f64>,
    peaks: Vec<Option<u64>>,
    last_samples: usize,
    told: usize,
    oom_seen: bool,
    steady_at: Option<usize>,
}

impl Watcher<'_> {
    /// Look again; true once the trial can stop.
    fn look(&mut self, stop: Stop, sampler: Option<&Sampler>) -> bool {
        for out in &mut self.outputs {
            if out.new_lines().iter().any(|l| find_oom(l).is_some()) {
                self.oom_seen = true;
            }
        }
        let now = self.start.elapsed().as_secs_f64();
        for line in self.report.new_lines() {
            let Some(step) = step_of(&line) else { continue };
            self.arrivals.push(now);
            let nvml = sampler.and_then(|s| {
                let (peak, samples) = s.so_far();
                // A reading counts for this step only if a sample was taken since the last.
                let fresh = samples > self.last_samples;
                self.last_samples = samples;
                peak.filter(|_| fresh)
            });
            self.peaks.push(step.peak_memory_bytes.or(nvml));
            if stop == Stop::WhenSteady && self.steady_at.is_none() && steady(&self.peaks) {
                self.steady_at = Some(self.peaks.len());
            }
        }
        let all = self.arrivals.len() >= self.told;
        self.oom_seen
            || match stop {
                Stop::AtExit => false,
                Stop::AfterSteps => all,
                Stop::WhenSteady => all || self.steady_at.is_some(),
            }
    }
}

/// What a trial's process finds in its environment besides what it inherits.
pub fn trial_environment(
    params: &Params,
    index: usize,
    device: &Device,
    report: &Path,
) -> Vec<(String, OsString)> {
    let mut env: Vec<(String, OsString)> = Program::env_for(params)
        .into_iter()
        .map(|(k, v)| (k, v.into()))
        .collect();
    let ours: [(&str, OsString); 5] = [
        (REPORT_ENV, report.as_os_str().to_owned()),
        (TRIAL_ENV, index.to_string().into()),
        ("CUDA_VISIBLE_DEVICES", device.cuda_visible.clone().into()),
        ("NCCL_NVLS_ENABLE", "0".into()),
        ("PYTHONUNBUFFERED", "1".into()),
    ];
    env.extend(ours.map(|(k, v)| (k.to_string(), v)));
    if device.pci_bus_order {
        env.push(("CUDA_DEVICE_ORDER".into(), "PCI_BUS_ID".into()));
    }
    env
}

/// What every trial of a run shares.
pub struct Runner<'a> {
    pub program: &'a Program,
    pub launcher: &'a Launcher,
    pub limits: Limits,
    /// Variables every trial gets besides its values' (a profiler's, say).
    pub env: &'a [(String, OsString)],
}

impl Runner<'_> {
    /// Run trial `index` with `params` on `device` (`--amp on` resolved to the precision the
    /// device has), keeping its files in `folder` (created; an old report there is removed).
    /// Never fails: a program that cannot start is a FAILED result saying why.
    pub fn trial(
        &self,
        params: &Params,
        index: usize,
        device: &Device,
        folder: &Path,
    ) -> TrialResult {
        let params = &params.on_gpu(device.capability);
        let argv = self.program.argv_for(params);
        let mut result = TrialResult::skipped(index, params.clone(), String::new());
        result.device = device.label.clone();
        result.cuda_visible = device.cuda_visible.clone();
        result.cpus = device.cpus.clone();
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
        let report = folder.join("report.jsonl");
        let _ = std::fs::remove_file(&report);
        let (stdout, stderr) = (folder.join("stdout.log"), folder.join("stderr.log"));
        let spawn = Spawn {
            argv: &argv,
            env: [
                trial_environment(params, index, device, &report),
                self.env.to_vec(),
            ]
            .concat(),
            cpus: device.cpus.as_deref(),
            stdout: &stdout,
            stderr: &stderr,
        };
        let before = device.probe.as_ref().and_then(|p| p.device_used());
        let start = Instant::now();
        let mut running = match self.launcher.start(&spawn) {
            Ok(r) => r,
            Err(e) => {
                return failed(
                    result,
                    format!("could not start '{}': {e}", Program::display(&argv[..1])),
                )
            }
        };
        let pgid = running.pgid();
        let sampler = device
            .probe
            .clone()
            .map(|p| Sampler::start(p, pgid, SAMPLE_PERIOD, before, start));
        let mut watcher = Watcher {
            report: Tail::new(&report),
            outputs: [Tail::new(&stderr), Tail::new(&stdout)],
            start,
            arrivals: Vec::new(),
            peaks: Vec::new(),
            last_samples: 0,
            told: params.total_steps(),
            oom_seen: false,
            steady_at: None,
        };
        let stop = self.limits.stop;
        let finished = watch(
            pgid,
            start,
            self.limits.time_limit,
            || running.exited(),
            || watcher.look(stop, sampler.as_ref()),
        );
        // The lines that came with the exit.
        watcher.look(stop, sampler.as_ref());
        result.wall_s = start.elapsed().as_secs_f64();
        if let Some(s) = sampler {
            let (memory, utilization) = s.finish();
            result.memory = memory;
            result.memory.device_total_bytes = device.probe.as_ref().and_then(|p| p.device_total());
            // From the last warmup step's line (the start without warmup) to the last line.
            let from = params.warmup_steps.checked_sub(1).map_or(0.0, |w| {
                watcher.arrivals.get(w).copied().unwrap_or(f64::INFINITY)
            });
            let to = watcher.arrivals.last().copied().unwrap_or(0.0);
            let window: Vec<f64> = utilization
                .iter()
                .filter(|(t, _)| *t > from && *t <= to)
                .map(|(_, u)| f64::from(*u))
                .collect();
            result.nvml_util_pct = (!window.is_empty()).then(|| common::stats::mean(&window));
        }
        let exit = match finished {
            Ok(e) => e,
            Err(e) => return failed(result, format!("lost track of the trial's process: {e}")),
        };
        result.exit = Some(exit);
        let file = ReportFile::read(&report);
        result.reached_steps = file.steps.len() >= params.total_steps();
        result.steady_at = watcher.steady_at;
        result.step_peaks = watcher.peaks.clone();
        // The whole process's wall time stands in only for a program that finished by itself.
        let told_samples = (params.samples_per_step() * params.total_steps()) as u64;
        let wall = (exit == Exit::Code(0)).then_some((told_samples, result.wall_s));
        result.measured =
            Measured::from_report(&file, params.warmup_steps, wall, &watcher.arrivals);
        result.report = file.health;
        let verdict = classify(
            exit,
            &read_tail(&stderr, 256 * 1024),
            &read_tail(&stdout, 64 * 1024),
            (file.steps.len(), params.total_steps()),
        );
        result.status = verdict.status;
        result.oom = verdict.oom;
        result.reason = if exit == Exit::TimedOut {
            format!(
                "{} of {:.0} s",
                verdict.reason,
                self.limits.time_limit.as_secs_f64()
            )
        } else {
            verdict.reason
        };
        if result.status != Status::Ok {
            result.stderr_tail = tail_lines(&stderr, TAIL_LINES);
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GB: u64 = 1_000_000_000;
    const MB: u64 = 1_000_000;

    #[test]
    fn memory_is_steady_once_two_steps_after_the_first_agree() {
        let mb =
            |peaks: &[u64]| -> Vec<Option<u64>> { peaks.iter().map(|&p| Some(p * MB)).collect() };
        assert!(!steady(&[]));
        let first = "the optimizer's first step may come later";
        assert!(!steady(&mb(&[1000, 1000])), "{first}");
        assert!(steady(&[None, Some(5 * GB), Some(5 * GB)]));
        assert!(
            steady(&[Some(GB), Some(5 * GB), Some(5 * GB + 1000)]),
            "rounding"
        );
        assert!(!steady(&mb(&[1000, 5000, 6000])));
        assert!(!steady(&[Some(GB), Some(5 * GB), None]));
        assert!(steady(&mb(&[1000, 5000, 6000, 6000])));
        assert!(!steady(&mb(&[100_000, 100_200, 100_000])));
    }

    #[test]
    fn a_growing_file_is_read_in_complete_lines() {
        let dir = std::env::temp_dir().join(format!("tuner-tail-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("report");
        let mut t = Tail::new(&p);
        assert!(t.new_lines().is_empty(), "no file yet");
        std::fs::write(&p, "one\ntw").unwrap();
        assert_eq!(t.new_lines(), ["one"]);
        std::fs::write(&p, "one\ntwo\nthree\n").unwrap();
        assert_eq!(t.new_lines(), ["two", "three"]);
        assert!(t.new_lines().is_empty());
        let _ = std::fs::remove_dir_all(dir);
    }
}
