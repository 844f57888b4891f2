//! One trial: the user's command with one set of values, on one GPU in a process of its own
//! (or, for a data-parallel program, on a group of GPUs, a process per GPU started as torchrun
//! would), with a time limit; what it reported, how it ended, the memory it used and how busy
//! NVML saw the GPU. A group fits only where every rank fits, and one rank's end that leaves
//! the others waiting (out of memory, a failure, an early exit) ends the group at once.
//!
//! While it runs the tuner watches three files. The report: each step line is timed on the
//! tuner's own clock as it arrives, with the peak memory so far (the program's own figure on
//! the line, else NVML's), so a finder's trial can stop as soon as memory is steady. Stderr and
//! stdout: an out-of-memory message ends the trial at once (the program's wind-down, which can
//! take longer than the trial, says nothing more). All three: a program that has reported a
//! step and then writes nothing for far longer than its steps take ([Limits::stall_limit]) is
//! hung, most often a data-parallel group waiting in a collective that will never complete,
//! and is ended long before its time limit.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use common::par::lock;
use common::process::{kill_group, read_from, read_tail, tail_lines, watch, Exit};

use crate::classify::{classify, find_oom, OomMessage, Status};
use crate::gpu::Device;
use crate::launch::{Launcher, Running, Spawn};
use crate::nvml::{MemoryReading, Sampler};
use crate::program::{Params, Program, REPORT_ENV, TRIAL_ENV};
use crate::protocol::{last_allocated, step_of, Measured, ReportFile, ReportHealth};

/// When a trial is over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Stop {
    /// When the program exits (a sweep's trials: every step is measured, and how it ends).
    #[default]
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
    /// Past this the trial's process group is killed and the trial is a HANG. Alone it watches
    /// the start (imports, compiling, a rendezvous: minutes are ordinary) and the wind-down.
    pub time_limit: Duration,
    /// Between the first step line and the last the program was told to run, a silence longer
    /// than this, or [STALL_MULTIPLE] times the slowest step so far where that is longer, on
    /// every file of a rank (nothing written to its report, stdout or stderr) ends the trial as
    /// a HANG ([stall_limit_s]).
    pub stall_limit: Duration,
    pub stop: Stop,
}

impl Limits {
    /// The time limit alone: the stall limit as long, so silence never ends a trial first (a
    /// run's settings set both: [crate::config::Settings::stall_limit_s]).
    pub fn new(time_limit: Duration) -> Limits {
        Limits {
            time_limit,
            stall_limit: time_limit,
            stop: Stop::AtExit,
        }
    }
}

/// How many times its slowest step so far a program may be silent before it is hung: a
/// program whose steps take 30 s is not hung after 60 s. Ten covers a step that does several
/// times the work of the others (an evaluation, a checkpoint) with room to spare; where the
/// steps take less than a tenth of the floor (6 s by default), the floor decides.
pub const STALL_MULTIPLE: f64 = 10.0;

/// Seconds of silence after which a program whose slowest step so far took `slowest_s` is
/// hung: the floor `floor_s`, or [STALL_MULTIPLE] times that step where that is longer.
pub fn stall_limit_s(floor_s: f64, slowest_s: f64) -> f64 {
    floor_s.max(STALL_MULTIPLE * slowest_s)
}

/// Why a rank gone silent between its steps is hung, `silent_s` after its step line
/// `after_step`, the slowest step so far across the group's ranks `slowest_s`: `no report or
/// output for 61 s after step 5 (the slowest step so far 1.8 s)`.
fn silence(silent_s: f64, after_step: usize, slowest_s: f64) -> String {
    let digits = if slowest_s < 1.0 { 2 } else { 1 };
    format!(
        "no report or output for {:.0} s after step {} (the slowest step so far {:.*} s)",
        silent_s, after_step, digits, slowest_s
    )
}

/// NVML's sampling period.
const SAMPLE_PERIOD: Duration = Duration::from_millis(50);
/// Lines of stderr kept in a result that is not OK.
const TAIL_LINES: usize = 20;

/// How long a GPU may take to give back the last trial's memory before the next one starts there,
/// and how far above its level before the last trial it may stay (the driver's own use moves a
/// little).
const RELEASE_LIMIT: Duration = Duration::from_secs(10);
const RELEASE_SLACK: u64 = 256 << 20;

/// Wait, up to `limit`, until a GPU's memory in use (`used`, NVML's) is back within
/// [RELEASE_SLACK] of `before`, its level before the last trial; whether it got there. A process
/// killed with kernels in flight is gone long before the driver has freed its memory: on an H100
/// 80 GB, ResNet-18 trials stopped at their third step or their out-of-memory message left the
/// GPU full for over a second after their exit, and the trials started next ran out of memory
/// at once, 1720 among them, which had fit. Memory that other processes took meanwhile is waited
/// for no longer than `limit`; the next trial's level before it counts it.
fn released(mut used: impl FnMut() -> Option<u64>, before: u64, limit: Duration) -> bool {
    let from = Instant::now();
    loop {
        match used() {
            Some(u) if u <= before + RELEASE_SLACK => return true,
            Some(_) if from.elapsed() < limit => std::thread::sleep(Duration::from_millis(20)),
            _ => return false,
        }
    }
}

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
    /// Processes of the group, one per GPU (1: a program on one GPU). Its figures are rank
    /// 0's, per GPU; its memory the rank's that held the most.
    #[serde(default = "crate::config::one", skip_serializing_if = "is_one")]
    pub ranks: usize,
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

fn is_one(n: &usize) -> bool {
    *n == 1
}

impl TrialResult {
    /// The trial's peak memory and the memory it could have had, in the same terms: the
    /// program's own peak against the memory it reported free when it started (both from the
    /// report, exact), else NVML's reading against the GPU's memory less what was in use before
    /// the trial. The limit is None unless it is known in the peak's terms.
    pub fn memory_terms(&self) -> (Option<u64>, Option<u64>) {
        if let Some(free) = self.reported_free() {
            return (self.measured.framework_peak_bytes, Some(free));
        }
        let nvml_limit = (self.memory.device_total_bytes)
            .zip(self.memory.device_before_bytes)
            .map(|(total, before)| total.saturating_sub(before));
        match (self.memory.peak_bytes, nvml_limit) {
            (Some(p), Some(l)) => (Some(p), Some(l)),
            // A peak without a limit in its own terms: shown, but not held against a limit.
            (nvml, _) => (nvml.or(self.measured.framework_peak_bytes), None),
        }
    }

    /// The memory the program reported free when it started, where it reported its own peak
    /// too: the terms of [TrialResult::memory_terms] are then the program's.
    fn reported_free(&self) -> Option<u64> {
        let m = &self.measured;
        (m.device.as_ref()?.free_bytes).filter(|_| m.framework_peak_bytes.is_some())
    }

    /// The steady step's allocated peak where the program reports it in the terms of
    /// [TrialResult::memory_terms] (with its own peak and the memory it reported free): the peak
    /// without the allocator's cache and its fragments.
    pub fn allocated_peak(&self) -> Option<u64> {
        self.reported_free().and(self.measured.allocated_peak_bytes)
    }

    /// Whether its batch fits: it ended OK (or reported every step it was told to run: a
    /// program may crash on its way out), or ran out of memory, or hung between its steps (it
    /// ran at this size, then could not go on: most often a group stuck in a collective beside
    /// an allocator at its cap; a size the program cannot run counts as one that does not fit).
    /// None for a trial that says nothing about memory (a failure, a hang before the steps or
    /// past the time limit, an incomplete or skipped trial).
    pub fn fits(&self) -> Option<bool> {
        match self.status {
            _ if self.reached_steps => Some(true),
            Status::Ok => Some(true),
            Status::Oom => Some(false),
            Status::Hang if self.exit == Some(Exit::Stalled) => Some(false),
            _ => None,
        }
    }

    /// Whether its output is worth reading: it hung, failed, ended early or left no result
    /// (OK, out of memory and skipped say all there is).
    pub fn troubled(&self) -> bool {
        !matches!(self.status, Status::Ok | Status::Oom | Status::Skipped)
    }

    /// Why its batch does not fit, in a few words: `ran out of memory`, or `hung (counted as
    /// not fitting)`.
    pub fn misfit(&self) -> &'static str {
        match self.status {
            Status::Hang => "hung (counted as not fitting)",
            _ => "ran out of memory",
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
            ranks: 1,
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
            Status::Oom => {
                let stack = self
                    .oom
                    .as_ref()
                    .map_or("out of memory", |m| m.stack.as_str());
                format!("OOM ({stack})")
            }
            // INCOMPLETE, HANG, FAILED, SKIPPED, UNFINISHED: why.
            s => format!("{}: {}", s.name(), self.reason),
        }
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
#[derive(Default)]
struct Tail {
    path: PathBuf,
    offset: u64,
    partial: String,
}

impl Tail {
    fn new(path: &Path) -> Tail {
        Tail {
            path: path.to_path_buf(),
            ..Tail::default()
        }
    }

    /// New complete lines, if the file grew.
    fn new_lines(&mut self) -> Vec<String> {
        // A flood is read in pieces; the rest comes at the next look.
        let (text, _) = read_from(&self.path, Some(self.offset), 4 << 20);
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

/// What is watched while a rank runs: its files, the memory NVML sees it use, and whether it
/// is where `stop` says after the steps it was `told` to run.
#[derive(Default)]
struct Watcher {
    report: Tail,
    stderr: Tail,
    stdout: Tail,
    sampler: Option<Sampler>,
    stop: Stop,
    /// When each step line arrived (seconds from the start).
    arrivals: Vec<f64>,
    /// When any of its files last grew (seconds from the start): a line, or part of one (a
    /// progress bar redrawn with carriage returns).
    last_written: f64,
    /// Its slowest step so far: the longest step time it reported, or the longest time between
    /// two of its step lines on the tuner's clock.
    slowest_s: f64,
    peaks: Vec<Option<u64>>,
    told: usize,
    oom_seen: bool,
    steady_at: Option<usize>,
}

impl Watcher {
    /// Mean NVML utilization (`utilization`: seconds from the start, percent) from the line of
    /// the last of `warmup` steps (the start without warmup) to the last line.
    fn mean_utilization(&self, utilization: &[(f64, u32)], warmup: usize) -> Option<f64> {
        let from = warmup.checked_sub(1).map_or(0.0, |w0| {
            self.arrivals.get(w0).copied().unwrap_or(f64::INFINITY)
        });
        let to = self.arrivals.last().copied().unwrap_or(0.0);
        let window: Vec<f64> = utilization
            .iter()
            .filter(|(t, _)| *t > from && *t <= to)
            .map(|(_, u)| f64::from(*u))
            .collect();
        (!window.is_empty()).then(|| common::stats::mean(&window))
    }

    /// Look again, `now` seconds from the start; true once the trial can stop.
    fn look(&mut self, now: f64) -> bool {
        let read = |w: &Watcher| w.report.offset + w.stderr.offset + w.stdout.offset;
        let before = read(self);
        for out in [&mut self.stderr, &mut self.stdout] {
            self.oom_seen |= out.new_lines().iter().any(|l| find_oom(l).is_some());
        }
        let lines = self.report.new_lines();
        if read(self) > before {
            self.last_written = now;
        }
        for step in lines.iter().filter_map(|l| step_of(l)) {
            let gap = self.arrivals.last().map_or(0.0, |last| now - last);
            self.slowest_s = self.slowest_s.max(step.step_s).max(gap);
            self.arrivals.push(now);
            let nvml = self.sampler.as_mut().and_then(Sampler::fresh_peak);
            self.peaks.push(step.peak_memory_bytes.or(nvml));
            if self.stop == Stop::WhenSteady && self.steady_at.is_none() && steady(&self.peaks) {
                self.steady_at = Some(self.peaks.len());
            }
        }
        let all = self.arrivals.len() >= self.told;
        self.oom_seen
            || match self.stop {
                Stop::AtExit => false,
                Stop::AfterSteps => all,
                Stop::WhenSteady => all || self.steady_at.is_some(),
            }
    }
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
    /// What rank `rank` of trial `t`'s group of GPUs finds in its environment besides what it
    /// inherits: the trial's values, its report file and the group's GPUs (it picks its own by
    /// LOCAL_RANK, as under torchrun); in a group of several, torchrun's variables, with `port`
    /// the rendezvous port; then the variables of every trial of the run.
    fn environment(
        &self,
        t: &TrialResult,
        group: &[Device],
        rank: usize,
        port: u16,
        report: &Path,
    ) -> Vec<(String, OsString)> {
        let mut env = Program::env_for(&t.params);
        let ours: [(&str, OsString); 5] = [
            (REPORT_ENV, report.as_os_str().to_owned()),
            (TRIAL_ENV, t.index.to_string().into()),
            ("CUDA_VISIBLE_DEVICES", t.cuda_visible.clone().into()),
            ("NCCL_NVLS_ENABLE", "0".into()),
            ("PYTHONUNBUFFERED", "1".into()),
        ];
        env.extend(ours.map(|(k, v)| (k.to_string(), v)));
        if group.len() > 1 {
            let size = group.len().to_string();
            let torchrun = [
                ("RANK", rank.to_string()),
                ("LOCAL_RANK", rank.to_string()),
                ("GROUP_RANK", "0".into()),
                ("WORLD_SIZE", size.clone()),
                ("LOCAL_WORLD_SIZE", size),
                ("MASTER_ADDR", "127.0.0.1".into()),
                ("MASTER_PORT", port.to_string()),
            ];
            env.extend(torchrun.map(|(k, v)| (k.to_string(), v.into())));
        }
        if group.iter().any(|d| d.pci_bus_order) {
            env.push(("CUDA_DEVICE_ORDER".into(), "PCI_BUS_ID".into()));
        }
        env.extend_from_slice(self.env);
        env
    }
}

/// One process of a trial's group, as it is watched.
struct Rank {
    running: Running,
    exit: Option<Exit>,
    watcher: Watcher,
}

/// The group's processes while it runs under its limits, the rank whose end ended the group,
/// and the silence that ends it as hung.
struct Group {
    ranks: Vec<Rank>,
    ended_by: Option<usize>,
    start: Instant,
    limits: Limits,
    /// The rank gone silent, and why it is hung ([silence]).
    silence: Option<(usize, String)>,
}

impl Group {
    /// The group's exit once it has one: every rank exited (the first that did not exit 0, else
    /// 0), or one rank exited before the others could go on without it (an exit that is not 0,
    /// or 0 before it reported every step it was told to run: the others would wait for it in
    /// their next collective).
    fn exited(&mut self) -> std::io::Result<Option<Exit>> {
        // Past the time limit every rank goes, not only the one that leads the watch; their
        // deaths are the limit's doing, not an end of their own.
        let over = (self.start.elapsed() >= self.limits.time_limit).then_some(Exit::TimedOut);
        if let Some(exit) = over.or(self.silence.as_ref().map(|_| Exit::Stalled)) {
            self.kill();
            return Ok(Some(exit));
        }
        for (r, rank) in (self.ranks.iter_mut().enumerate()).filter(|(_, r)| r.exit.is_none()) {
            if let Some(exit) = rank.running.exited()? {
                rank.exit = Some(exit);
                rank.watcher.look(self.start.elapsed().as_secs_f64());
                let early =
                    exit != Exit::Code(0) || rank.watcher.arrivals.len() < rank.watcher.told;
                self.ended_by = self.ended_by.or(early.then_some(r));
            }
        }
        let ender = self.ended_by.filter(|_| self.ranks.len() > 1);
        if let Some(exit) = ender.and_then(|r| self.ranks[r].exit) {
            self.kill();
            return Ok(Some(exit));
        }
        // Every rank's exit: the first that is not 0, else 0.
        let exits: Option<Vec<Exit>> = self.ranks.iter().map(|r| r.exit).collect();
        Ok(exits.and_then(|e| e.into_iter().min_by_key(|e| *e == Exit::Code(0))))
    }

    /// Look at every rank; true once the group can stop: a rank ran out of memory, or every
    /// rank is where `stop` says (its group then killed whole). A rank gone silent is noted,
    /// and ends the group when its exit is next looked for.
    fn enough(&mut self) -> bool {
        let now = self.start.elapsed().as_secs_f64();
        let all = (self.ranks.iter_mut()).fold(true, |all, r| r.watcher.look(now) & all);
        let oom = self.ranks.iter().position(|r| r.watcher.oom_seen);
        self.ended_by = self.ended_by.or(oom);
        let done = oom.is_some() || all;
        if done {
            self.kill();
        } else {
            self.silence = self.silent_rank();
        }
        done
    }

    /// The rank silent the longest past the stall limit, among those still running that have
    /// reported a step and not yet every step they were told to run; the limit counts the
    /// slowest step of any rank (in a group the ranks step together, and one rank's slow step
    /// holds up the others' lines).
    fn silent_rank(&self) -> Option<(usize, String)> {
        let slowest_s = (self.ranks.iter())
            .map(|r| r.watcher.slowest_s)
            .fold(0.0, f64::max);
        let limit = stall_limit_s(self.limits.stall_limit.as_secs_f64(), slowest_s);
        let now = self.start.elapsed().as_secs_f64();
        let (rank, silent_s, after_step) = (self.ranks.iter().enumerate())
            .filter(|(_, r)| r.exit.is_none())
            .filter(|(_, r)| (1..r.watcher.told).contains(&r.watcher.arrivals.len()))
            .map(|(rank, r)| (rank, now - r.watcher.last_written, r.watcher.arrivals.len()))
            .filter(|&(_, silent_s, _)| silent_s > limit)
            .max_by(|a, b| a.1.total_cmp(&b.1))?;
        Some((rank, silence(silent_s, after_step, slowest_s)))
    }

    fn kill(&self) {
        for rank in &self.ranks {
            kill_group(rank.running.pgid());
        }
    }

    /// Kill what is left of every rank, reap each one's process and read the lines that came
    /// with its exit.
    fn end(&mut self) {
        self.kill();
        let from = Instant::now();
        for rank in &mut self.ranks {
            while rank.exit.is_none() && from.elapsed() < Duration::from_secs(10) {
                match rank.running.exited() {
                    Ok(Some(e)) => rank.exit = Some(e),
                    Ok(None) => std::thread::sleep(Duration::from_millis(2)),
                    Err(_) => break,
                }
            }
            rank.watcher.look(self.start.elapsed().as_secs_f64());
        }
    }
}

impl Runner<'_> {
    /// Run trial `index` with `params` on `group`, one process per GPU (`--amp on` resolved to
    /// the precision the first GPU has), keeping its files in `folder` (created; old reports
    /// there are removed). Never fails: a program that cannot start is a FAILED result saying
    /// why.
    pub fn trial(
        &self,
        params: &Params,
        index: usize,
        group: &[Device],
        folder: &Path,
    ) -> TrialResult {
        let params = params.on_gpu(group[0].capability);
        let labels: Vec<&str> = group.iter().map(|d| d.label.as_str()).collect();
        let visible: Vec<&str> = group.iter().map(|d| d.cuda_visible.as_str()).collect();
        let mut result = TrialResult {
            device: labels.join(" + "),
            cuda_visible: visible.join(","),
            ranks: group.len(),
            cpus: group[0].cpus.clone(),
            command: self.program.argv_for(&params),
            folder: Some(folder.to_path_buf()),
            memory: MemoryReading::unmeasured("no NVML reading for this device"),
            ..TrialResult::skipped(index, params, String::new())
        };
        if let Err(why) = self.run(group, folder, &mut result) {
            result.status = Status::Failed;
            result.stderr_tail = vec![why.clone()];
            result.reason = why;
        }
        result
    }

    /// Run `result`'s command with its values on `group` and fill in what came of it; Err says
    /// why the program could not start, or could not be followed to its end.
    fn run(&self, group: &[Device], folder: &Path, result: &mut TrialResult) -> Result<(), String> {
        let (params, argv) = (&result.params.clone(), &result.command.clone());
        let made = std::fs::create_dir_all(folder).and_then(|_| folder.canonicalize());
        let folder = made
            .map_err(|e| format!("cannot create the trial's folder {}: {e}", folder.display()))?;
        let port = match group.len() {
            1 => 0,
            // A port on this host no one listens on, for the rendezvous: the kernel's pick.
            _ => (std::net::TcpListener::bind("127.0.0.1:0"))
                .and_then(|l| l.local_addr())
                .map_err(|e| format!("no free port for the ranks: {e}"))?
                .port(),
        };
        // The last trial's memory given back first ([released]).
        for d in group {
            let idle = *lock(&d.idle);
            if let (Some(p), Some(idle)) = (&d.probe, idle) {
                released(|| Some(p.memory()?.0), idle, RELEASE_LIMIT);
            }
        }
        let start = Instant::now();
        let mut g = Group {
            ranks: Vec::with_capacity(group.len()),
            ended_by: None,
            start,
            limits: self.limits,
            silence: None,
        };
        for (r, d) in group.iter().enumerate() {
            // One rank's files keep the names of a trial of one process.
            let rank = match group.len() {
                1 => String::new(),
                _ => format!(".rank{r}"),
            };
            let [report, stdout, stderr] =
                [("report", "jsonl"), ("stdout", "log"), ("stderr", "log")]
                    .map(|(stem, ext)| folder.join(format!("{stem}{rank}.{ext}")));
            let _ = std::fs::remove_file(&report);
            let spawn = Spawn {
                argv,
                env: self.environment(result, group, r, port, &report),
                cpus: d.cpus.as_deref(),
                stdout: &stdout,
                stderr: &stderr,
            };
            let before = d.probe.as_ref().and_then(|p| Some(p.memory()?.0));
            *lock(&d.idle) = before;
            let running = self.launcher.start(&spawn).map_err(|e| {
                g.end();
                format!("could not start '{}': {e}", Program::display(&argv[..1]))
            })?;
            g.ranks.push(Rank {
                watcher: Watcher {
                    report: Tail::new(&report),
                    stderr: Tail::new(&stderr),
                    stdout: Tail::new(&stdout),
                    sampler: d.probe.clone().map(|p| {
                        let look =
                            move || (p.processes(), p.memory().map(|m| m.0), p.utilization());
                        Sampler::start(look, running.pgid(), SAMPLE_PERIOD, before, start)
                    }),
                    stop: self.limits.stop,
                    told: params.total_steps(),
                    ..Watcher::default()
                },
                running,
                exit: None,
            });
        }
        let group_state = std::cell::RefCell::new(g);
        let leader = group_state.borrow().ranks[0].running.pgid();
        let finished = watch(
            leader,
            start,
            self.limits.time_limit,
            || group_state.borrow_mut().exited(),
            || group_state.borrow_mut().enough(),
        );
        let mut g = group_state.into_inner();
        g.end();
        result.wall_s = start.elapsed().as_secs_f64();
        let mut readings = Vec::new();
        for (r, (rank, d)) in g.ranks.iter_mut().zip(group).enumerate() {
            if let Some((mut memory, utilization)) =
                rank.watcher.sampler.take().map(Sampler::finish)
            {
                memory.device_total_bytes = d.probe.as_ref().and_then(|p| Some(p.memory()?.1));
                if r == 0 {
                    result.nvml_util_pct = rank
                        .watcher
                        .mean_utilization(&utilization, params.warmup_steps);
                }
                readings.push(memory);
            }
        }
        // The rank that held the most speaks for the group's memory.
        if let Some(m) = readings.into_iter().max_by_key(|m| m.peak_bytes) {
            result.memory = m;
        }
        let exit = finished.map_err(|e| format!("lost track of the trial's process: {e}"))?;
        result.exit = Some(exit);
        let read = |r: &Rank| ReportFile::read(&r.watcher.report.path);
        let files: Vec<ReportFile> = g.ranks.iter().map(read).collect();
        result.reached_steps = files.iter().all(|f| f.steps.len() >= params.total_steps());
        let lead = &g.ranks[0].watcher;
        result.steady_at = g.ranks.iter().map(|r| r.watcher.steady_at).max().flatten();
        result.step_peaks = lead.peaks.clone();
        // The whole process's wall time stands in only for a program that finished by itself.
        let told_samples = (params.batch_size * params.accumulation.max(1)) * params.total_steps();
        let wall = (exit == Exit::Code(0)).then_some((told_samples as u64, result.wall_s));
        result.measured =
            Measured::from_report(&files[0], params.warmup_steps, wall, &lead.arrivals);
        let m = &mut result.measured;
        let peaks = files
            .iter()
            .flat_map(|f| f.steps.iter().filter_map(|s| s.peak_memory_bytes));
        m.framework_peak_bytes = m.framework_peak_bytes.max(peaks.max());
        m.allocated_peak_bytes = files.iter().filter_map(last_allocated).max();
        result.report = files[0].health.clone();
        // Each rank's verdict: its own exit where it had one, else how the group ended.
        let mut verdicts: Vec<_> = (g.ranks.iter().zip(&files))
            .map(|(rank, file)| {
                let own = match (exit, rank.exit) {
                    (Exit::TimedOut | Exit::Stalled | Exit::Stopped, _) | (_, None) => exit,
                    (_, Some(e)) => e,
                };
                classify(
                    own,
                    &read_tail(&rank.watcher.stderr.path, 256 * 1024),
                    &read_tail(&rank.watcher.stdout.path, 64 * 1024),
                    (file.steps.len(), params.total_steps()),
                )
            })
            .collect();
        // Out of memory anywhere is the group's; else the rank that went silent or ended it
        // speaks, else rank 0.
        let silence = g.silence.filter(|_| exit == Exit::Stalled);
        let speaker = (verdicts.iter().position(|v| v.status == Status::Oom))
            .or(silence.as_ref().map(|s| s.0))
            .or(g.ended_by.filter(|_| exit != Exit::TimedOut))
            .unwrap_or(0);
        let verdict = verdicts.swap_remove(speaker);
        result.status = verdict.status;
        result.oom = verdict.oom;
        let limit = self.limits.time_limit.as_secs_f64();
        let reason = match (exit, silence) {
            (Exit::TimedOut, _) => format!("{} of {limit:.0} s", verdict.reason),
            (_, Some((_, why))) => format!("{why}: {}", verdict.reason),
            _ => verdict.reason,
        };
        result.reason = match g.ranks.len() {
            1 => reason,
            n => format!("rank {speaker} of {n}: {reason}"),
        };
        // Steps of another batch than the trial's say nothing about it, however they ended: the
        // trial failed to run what it was given, and its figures stand under no batch. Nor do a
        // group's where a rank reported nothing.
        let exits: Vec<Option<Exit>> = g.ranks.iter().map(|r| r.exit).collect();
        if let Some(why) = off_the_trial(&files, &exits, params, result.status) {
            (result.status, result.reason, result.reached_steps) = (Status::Failed, why, false);
        }
        if result.status != Status::Ok {
            result.stderr_tail = tail_lines(&g.ranks[speaker].watcher.stderr.path, TAIL_LINES);
        }
        Ok(())
    }
}

/// Why the steps a trial's ranks reported do not stand for it: a rank of a group that exited 0
/// by itself having reported none beside one that did, where the group `ended` as if well (the
/// tuner cannot tell such a rank from one that ended early; a rank the group's end killed before
/// its first step says nothing), or a rank that counted samples on none of its steps as
/// batch x accumulation: the program took its batch from elsewhere (a command without
/// `{batch_size}`, or arguments read above `fork_here()`, so that every forked trial runs the
/// first one's).
fn off_the_trial(
    files: &[ReportFile],
    exits: &[Option<Exit>],
    p: &Params,
    ended: Status,
) -> Option<String> {
    let (b, a) = (p.batch_size, p.accumulation.max(1));
    let given = (b * a) as u64;
    let most = files.iter().map(|f| f.steps.len()).max()?;
    files.iter().enumerate().find_map(|(rank, f)| {
        let of = match files.len() {
            1 => String::new(),
            n => format!("rank {rank} of {n}: "),
        };
        // Killed by the group's end, a rank's want of steps says nothing.
        let by_itself = exits.get(rank) == Some(&Some(Exit::Code(0)));
        let silent = f.steps.is_empty() && most > 0 && by_itself;
        if silent && matches!(ended, Status::Ok | Status::Incomplete) {
            return Some(format!(
                "{of}reported no step, where another rank reported {most}: every rank reports its own steps (perf_lessons reports on each, where the program does not report on rank 0 alone)"
            ));
        }
        let mut counted = f.steps.iter().map(|s| s.samples).filter(|&n| n > 0);
        let first = counted.next()?;
        if first == given || counted.any(|n| n == given) {
            return None;
        }
        Some(match first == given * files.len() as u64 && files.len() > 1 {
            true => format!("{of}its steps reported {first} samples, the whole group's: each rank reports its own, batch {b} x accumulation {a} = {given}"),
            false => format!("{of}its steps reported {first} samples, where batch {b} x accumulation {a} is {given}: the program ran another batch than the trial's (give it {{batch_size}} and {{accumulation}} or PERF_LESSONS_BATCH_SIZE, and read them below fork_here() where it calls it)"),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const GB: u64 = 1_000_000_000;
    const MB: u64 = 1_000_000;

    #[test]
    fn steps_of_another_batch_or_a_rank_without_any_are_told_from_a_short_last_one() {
        let file = |samples: &[u64]| ReportFile {
            steps: (samples.iter())
                .map(|&samples| crate::protocol::StepRecord {
                    samples,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
        let p = Params {
            batch_size: 16,
            accumulation: 2,
            ..Params::default()
        };
        // Every rank exited 0 by itself.
        let both = [Some(Exit::Code(0)); 2];
        // Batch x accumulation, the last step short (a dataset that does not divide).
        assert_eq!(
            off_the_trial(&[file(&[32, 32, 7])], &both, &p, Status::Ok),
            None
        );
        // Nothing counted, or steps that count nothing: nothing to hold against the batch.
        assert_eq!(off_the_trial(&[file(&[])], &both, &p, Status::Ok), None);
        assert_eq!(off_the_trial(&[file(&[0, 0])], &both, &p, Status::Ok), None);
        // Another batch on every step, or on every step of one rank.
        let why = off_the_trial(&[file(&[0, 16, 16])], &both, &p, Status::Ok).unwrap();
        assert!(
            why.starts_with("its steps reported 16 samples, where batch 16 x accumulation 2 is 32"),
            "{why}"
        );
        let why = off_the_trial(&[file(&[32]), file(&[8])], &both, &p, Status::Ok).unwrap();
        assert!(
            why.starts_with("rank 1 of 2: its steps reported 8 samples"),
            "{why}"
        );
        // Each rank's count is its own.
        let why = off_the_trial(&[file(&[64]), file(&[64])], &both, &p, Status::Ok).unwrap();
        assert!(
            why.starts_with("rank 0 of 2: its steps reported 64 samples, the whole group's"),
            "{why}"
        );
        // A rank of a group that reported nothing, where another did; no rank that did.
        let why = off_the_trial(&[file(&[32, 32]), file(&[])], &both, &p, Status::Ok).unwrap();
        assert!(
            why.starts_with("rank 1 of 2: reported no step, where another rank reported 2"),
            "{why}"
        );
        assert_eq!(
            off_the_trial(&[file(&[]), file(&[])], &both, &p, Status::Ok),
            None
        );
        // A rank the group's end killed before its first step: another rank ended the group.
        let killed = [Some(Exit::Signal(9)), Some(Exit::Code(0))];
        let early = [file(&[]), file(&[32])];
        assert_eq!(off_the_trial(&early, &killed, &p, Status::Incomplete), None);
        // A group that hung says so itself, whoever reported.
        let hung = [file(&[32, 32]), file(&[])];
        assert_eq!(off_the_trial(&hung, &both, &p, Status::Hang), None);
    }

    #[test]
    fn the_next_trial_waits_for_the_gpu_to_give_the_last_one_s_memory_back() {
        // The driver frees the memory after three more looks.
        let mut looks = [80 * GB, 80 * GB, 80 * GB, GB / 2].into_iter();
        assert!(released(|| looks.next(), GB / 2, Duration::from_secs(5)));
        assert_eq!(looks.next(), None, "every look taken");
        // Within the slack at once; another process's memory past the limit; no reading.
        assert!(released(|| Some(GB / 2 + 100 * MB), GB / 2, Duration::ZERO));
        let from = Instant::now();
        assert!(!released(|| Some(40 * GB), 0, Duration::from_millis(100)));
        assert!(from.elapsed() < Duration::from_secs(1));
        assert!(!released(|| None, 0, Duration::from_secs(5)));
    }

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
    fn the_stall_limit_is_its_floor_or_ten_times_the_slowest_step() {
        // The group measured on two H200s: steps of at most 1.83 s, so the floor decides.
        assert_eq!(stall_limit_s(60.0, 1.83), 60.0);
        assert_eq!(
            stall_limit_s(60.0, 30.0),
            300.0,
            "slow steps are not a hang"
        );
        assert_eq!(stall_limit_s(1.0, 0.0), 1.0);
        assert_eq!(
            silence(61.2, 5, 1.83),
            "no report or output for 61 s after step 5 (the slowest step so far 1.8 s)"
        );
        assert!(silence(61.2, 5, 0.012).ends_with("(the slowest step so far 0.01 s)"));
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
