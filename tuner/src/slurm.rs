//! A sweep's trials as a Slurm array job. The tuner does not schedule across hosts itself: it
//! writes the plan of trials into a folder every node sees, and each array task runs one trial
//! exactly as a local sweep does (a process of its own, the protocol, the time limit, out of
//! memory by message), leaving its result in the folder. The report is made from whatever
//! results are there, at any time, by the same code as a local sweep's.
//!
//! The folder:
//!
//! ```text
//! plan.json           the command, the settings and each trial's values (versioned)
//! array.sh            the array job's script: `tuner task DIR`, one task per trial
//! job.json            the job sbatch accepted, once submitted
//! results/NNN.json    each trial's result and the GPU it ran on, written whole
//! trials/NNN/         each trial's report, stdout and stderr
//! slurm/NNN.out|.err  what each task itself printed
//! ```
//!
//! The batch finder's trials depend on each other, so `autobatch --slurm DIR` is one job on one
//! GPU that runs the whole finder as locally: its plan holds the finder's settings and options
//! as the submitting host resolved and checked them (the node reads them, it parses no command
//! line), and the
//! job leaves `autobatch.txt` (the answer as printed) and `autobatch.json` (its report) in DIR,
//! beside `slurm/autobatch.out|.err`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use common::exit::{no_gpu, usage};
use common::files::{read_versioned, write_json_file};
use common::process::Exit;
use common::report::Provenance;

use crate::analysis::PickRule;
use crate::classify::Status;
use crate::config::{Settings, SlurmArgs};
use crate::gpu::visible_devices;
use crate::launch::Launcher;
use crate::program::{on_path, quoted, Params, Program};
use crate::run::{default_margin, DeviceSummary, Ran};
use crate::trial::{larger_batch_after_oom, Limits, Runner, TrialResult};

/// The plan's format; a folder written by another format is refused, never half read.
pub const PLAN_VERSION: u32 = 3;
const PLAN: &str = "plan.json";
const JOB: &str = "job.json";
const SCRIPT: &str = "array.sh";
const ANSWER_TEXT: &str = "autobatch.txt";
const ANSWER_JSON: &str = "autobatch.json";

/// What every task of the array job runs from.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Plan {
    pub schema_version: u32,
    /// The tuner that wrote it (`tuner --version`).
    pub tuner: String,
    /// The user's command, placeholders and all.
    pub command: Vec<String>,
    /// Where the command was given: each trial starts there, as a local trial would.
    pub cwd: PathBuf,
    pub settings: Settings,
    /// `--margin`, where given; else the margin by the GPUs' memory, at gather time.
    pub margin: Option<f64>,
    pub pick: Option<PickRule>,
    /// The sweep's `--json` and `--plot`, where the report goes by default.
    pub json: Option<PathBuf>,
    pub plot: Option<PathBuf>,
    /// Seconds since the epoch when the plan was written.
    pub written_at: f64,
    /// Each trial's values, in the order a local sweep runs them (array task i runs trial i).
    pub trials: Vec<Params>,
    /// The options of the batch finder the one job runs, with `settings` (its trials are then
    /// not planned here, they depend on each other); None for a sweep.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autobatch: Option<serde_json::Value>,
}

/// One task's result file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TaskResult {
    /// The GPU it ran on, as the report names it.
    pub device: DeviceSummary,
    /// Seconds since the epoch when the task wrote it.
    pub ended_at: f64,
    pub result: TrialResult,
}

/// The job sbatch accepted.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Job {
    pub job_id: String,
    /// sbatch's command line.
    pub sbatch: Vec<String>,
    pub submitted_at: f64,
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

/// `results/007.json`.
pub fn result_path(dir: &Path, index: usize) -> PathBuf {
    dir.join("results").join(format!("{index:03}.json"))
}

impl Plan {
    /// The plan of a sweep of `command` with `settings`, given in `cwd`; `json` and `plot` are
    /// where its report goes by default.
    pub fn new(
        command: Vec<String>,
        cwd: PathBuf,
        settings: Settings,
        json: Option<&Path>,
        plot: Option<&Path>,
    ) -> Plan {
        let keep = |p: Option<&Path>| {
            p.map(|p| match p.to_str() {
                Some("-") => p.into(),
                _ => absolute(p),
            })
        };
        Plan {
            schema_version: PLAN_VERSION,
            tuner: common::cli::VERSION.to_string(),
            command,
            cwd,
            trials: crate::config::plan(&settings),
            settings,
            margin: None,
            pick: None,
            json: keep(json),
            plot: keep(plot),
            written_at: now(),
            autobatch: None,
        }
    }

    /// Write the plan into `dir`, a folder that holds none yet (created).
    pub fn write(&self, dir: &Path) -> anyhow::Result<()> {
        if dir.join(PLAN).exists() {
            return Err(usage(format!(
                "{} already holds a plan: gather it with `tuner gather {0}`, or give --slurm a new folder",
                dir.display()
            )));
        }
        std::fs::create_dir_all(dir.join("results"))
            .and_then(|_| std::fs::create_dir_all(dir.join("slurm")))
            .map_err(|e| usage(format!("cannot create {}: {e}", dir.display())))?;
        write_json_file(&dir.join(PLAN), self, "the plan").map_err(usage)
    }

    /// The plan in `dir` as a job's task sees it: where the folder is not there at all, one line
    /// saying it must be on shared storage (the submitting host wrote it; this node cannot see
    /// it).
    pub fn read_in_job(dir: &Path) -> anyhow::Result<Plan> {
        if !dir.is_dir() {
            let node = std::env::var("SLURMD_NODENAME").unwrap_or_else(|_| Provenance::now().host);
            return Err(usage(format!(
                "{} is not there on node {}: the folder of a Slurm run must be on shared storage, at the same path on every node and on the host that submits",
                dir.display(),
                node.trim()
            )));
        }
        Plan::read(dir)
    }

    /// The plan in `dir`; one line for a folder without one or with another version's.
    pub fn read(dir: &Path) -> anyhow::Result<Plan> {
        read_versioned(
            &dir.join(PLAN),
            PLAN_VERSION,
            "a tuner's Slurm plan",
            "gather it with the tuner that wrote it, or run the sweep again with this one",
        )
        .map_err(usage)
    }
}

/// The results written so far, by trial; a file cut short or from another tuner is left out
/// (its trial shows as unfinished).
pub fn read_results(dir: &Path, trials: usize) -> BTreeMap<usize, TaskResult> {
    (0..trials)
        .filter_map(|i| Some((i, read_json(&result_path(dir, i))?)))
        .collect()
}

/// The JSON file at `path`, where it is there and reads as a `T`.
fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Option<T> {
    serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()
}

/// `tuner task DIR [INDEX]`: run one trial of a sweep's plan on the GPU this process sees and
/// write its result. A trial whose setting already ran out of memory at a smaller batch is
/// recorded as skipped without running, as a local sweep would skip it.
pub fn task(dir: &Path, plan: &Plan, index: Option<usize>) -> anyhow::Result<TrialResult> {
    // INDEX where given, else $SLURM_ARRAY_TASK_ID.
    let index = match index {
        Some(i) => i,
        None => {
            let id = std::env::var("SLURM_ARRAY_TASK_ID").map_err(|_| {
                usage("which trial? give INDEX, or run inside a Slurm array task (SLURM_ARRAY_TASK_ID)")
            })?;
            id.trim()
                .parse()
                .map_err(|_| usage(format!("SLURM_ARRAY_TASK_ID '{id}' is not a trial number")))?
        }
    };
    let trials = plan.trials.len();
    let Some(params) = plan.trials.get(index) else {
        return Err(usage(format!(
            "trial {index}: the plan has {trials} trials, numbered from 0"
        )));
    };
    let program = Program::new(plan.command.clone()).map_err(usage)?;
    let mut group = visible_devices(None)?;
    let ranks = plan.settings.ranks;
    if group.len() < ranks {
        return Err(no_gpu(format!(
            "the task sees {} GPU(s) and each trial has {ranks} ranks: ask sbatch for {ranks} GPUs (--gres=gpu:{ranks})",
            group.len()
        )));
    }
    group.truncate(ranks);
    if let Ok(node) = std::env::var("SLURMD_NODENAME") {
        for d in &mut group {
            d.label = format!("{node} {}", d.label);
        }
    }
    let done: Vec<TrialResult> = (read_results(dir, trials).into_values())
        .map(|t| t.result)
        .collect();
    let result = match larger_batch_after_oom(params, &done) {
        Some(why) => TrialResult::skipped(index, params.clone(), why),
        None => {
            enter(plan)?;
            let runner = Runner {
                program: &program,
                launcher: &Launcher::Spawn,
                limits: Limits::of(&plan.settings),
                env: &[],
            };
            let folder = dir.join("trials").join(format!("{index:03}"));
            runner.trial(params, index, &group, &folder)
        }
    };
    let saved = TaskResult {
        device: DeviceSummary::of(&group[0]),
        ended_at: now(),
        result,
    };
    write_json_file(&result_path(dir, index), &saved, "the trial's result")?;
    Ok(saved.result)
}

/// Go to the folder the command was given in, where its trials start as a local run's would.
pub fn enter(plan: &Plan) -> anyhow::Result<()> {
    std::env::set_current_dir(&plan.cwd).map_err(|e| {
        usage(format!(
            "cannot start in {}, where the command was given: {e}",
            plan.cwd.display()
        ))
    })
}

/// The finder's answer, as it printed it, and its report, left in DIR by the job.
pub fn write_answer<T: Serialize>(dir: &Path, report: &T, text: &str) -> anyhow::Result<()> {
    write_json_file(&dir.join(ANSWER_JSON), report, "the finder's report")?;
    common::files::write_atomically(&dir.join(ANSWER_TEXT), text.as_bytes())
        .map_err(|e| anyhow::anyhow!("{}: could not write the answer: {e}", dir.display()))
}

/// `tuner gather DIR` of a batch finder's folder: the answer as the finder printed it and its
/// report; where there is none, one line with why (still queued or running, or how the job
/// ended by Slurm, and the last line it printed).
pub fn gather_autobatch(dir: &Path) -> anyhow::Result<(String, serde_json::Value)> {
    let text = std::fs::read_to_string(dir.join(ANSWER_TEXT));
    if let (Ok(text), Some(json)) = (text, read_json(&dir.join(ANSWER_JSON))) {
        return Ok((text, json));
    }
    let Some(job) = read_json::<Job>(&dir.join(JOB)) else {
        return Err(anyhow::anyhow!(
            "{}: no answer, and no job was submitted (submit it with `sbatch {}`)",
            dir.display(),
            dir.join(SCRIPT).display()
        ));
    };
    let state = task_states(&job).remove(&0);
    // The finder's own error line, where it printed one, rather than the stderr it quotes.
    let err = dir.join("slurm/autobatch.err");
    let lines = common::process::tail_lines(&err, 40);
    let said = match lines
        .iter()
        .rfind(|l| l.starts_with("error:"))
        .or(lines.last())
    {
        Some(line) => format!(
            "; it printed: {} (all of it in {})",
            line.trim(),
            err.display()
        ),
        None => String::new(),
    };
    Err(match state.as_deref() {
        Some(s) if s == "PENDING" || s == "RUNNING" || s == "CONFIGURING" => anyhow::anyhow!(
            "the batch finder (Slurm job {}) is {}: gather again once it is done",
            job.job_id,
            s.to_lowercase()
        ),
        Some(s) => anyhow::anyhow!(
            "the batch finder (Slurm job {}) ended without an answer: Slurm state {s}{said}",
            job.job_id
        ),
        None => anyhow::anyhow!(
            "the batch finder (Slurm job {}) left no answer in {} and Slurm no longer knows the job{said}",
            job.job_id,
            dir.display()
        ),
    })
}

/// `tuner gather DIR`: the sweep's trials from the results in DIR so far, as a local queue
/// leaves them; the sweep makes its report from them as from a local run's.
pub fn gather(dir: &Path, plan: &Plan) -> anyhow::Result<Ran> {
    let saved = read_results(dir, plan.trials.len());
    let job: Option<Job> = read_json(&dir.join(JOB));
    let states = job.as_ref().map(task_states).unwrap_or_default();
    // Each trial's result where it has one, unfinished where not, and skipped where a smaller
    // batch of its setting ran out of memory (the local rule, applied in the local order, so
    // the report is the one a local sweep of the same trials makes).
    let mut trials: Vec<TrialResult> = Vec::with_capacity(plan.trials.len());
    for (i, p) in plan.trials.iter().enumerate() {
        let r = match (larger_batch_after_oom(p, &trials), saved.get(&i)) {
            (Some(why), _) => TrialResult::skipped(i, p.clone(), why),
            (None, Some(t)) => t.result.clone(),
            (None, None) => unfinished(dir, i, p, states.get(&i)),
        };
        trials.push(r);
    }
    let mut devices: Vec<DeviceSummary> = Vec::new();
    for t in (saved.values()).filter(|t| t.result.status != Status::Skipped) {
        if !devices.contains(&t.device) {
            devices.push(t.device.clone());
        }
    }
    let array = job.map_or("a Slurm array job".into(), |j| {
        format!("Slurm array job {}", j.job_id)
    });
    let last = saved
        .values()
        .map(|t| t.ended_at)
        .fold(plan.written_at, f64::max);
    Ok(Ran {
        command: plan.command.clone(),
        margin: plan
            .margin
            .unwrap_or_else(|| default_margin(&devices, &trials)),
        devices,
        launch: format!("each trial a task of {array}, spawned"),
        provenance: Provenance::now(),
        settings: plan.settings.clone(),
        trials,
        trials_file: Some(absolute(&dir.join("results"))),
        wall_s: last - plan.written_at,
        kept: Some(format!(
            "each trial's output (report, stdout, stderr) is in {}",
            absolute(&dir.join("trials")).display()
        )),
    })
}

/// Trial `i` of the plan, with `p`, where its task left no result: Slurm's `state` of it and
/// what the task itself printed.
fn unfinished(dir: &Path, i: usize, p: &Params, state: Option<&String>) -> TrialResult {
    let mut reason = match state {
        Some(state) => format!("no result; Slurm state {state}"),
        None => "no result yet".into(),
    };
    let err = dir.join("slurm").join(format!("{i:03}.err"));
    let failed = state.is_some_and(|s| s.starts_with("FAILED"));
    if failed && !err.exists() && !err.with_extension("out").exists() {
        // A task that failed without even its output files: Slurm could not open them on the
        // node, which does not see DIR.
        reason.push_str(&format!(
            "; it left no output in {}: the folder must be on shared storage that every node sees",
            dir.display()
        ));
    }
    TrialResult {
        status: Status::Unfinished,
        stderr_tail: common::process::tail_lines(&err, 20),
        ..TrialResult::skipped(i, p.clone(), reason)
    }
}

/// Each array task's state, by trial: sacct's where the cluster keeps accounting, else what
/// squeue still remembers of the job (slurmctld keeps a finished job for its MinJobAge, 300 s
/// by default); empty where neither says.
fn task_states(job: &Job) -> BTreeMap<usize, String> {
    let asked = |program: &str, args: &[&str]| {
        let out = ask(job, program, args).filter(|o| o.status.success())?;
        let states = parse_states(&String::from_utf8_lossy(&out.stdout), &job.job_id);
        (!states.is_empty()).then_some(states)
    };
    asked("sacct", &["-X", "-n", "-P", "-o", "JobID,State"])
        .or_else(|| asked("squeue", &["-h", "-r", "-t", "all", "-o", "%i|%T"]))
        .unwrap_or_default()
}

/// What the Slurm client `program` answers with `args` about the job, where it runs.
fn ask(job: &Job, program: &str, args: &[&str]) -> Option<Output> {
    Command::new(program)
        .args(args)
        .args(["-j", &job.job_id])
        .output()
        .ok()
}

/// `4242_3|CANCELLED by 0` lines (sacct's, and squeue's `%i|%T`): the state of each task of
/// the array; a line for tasks not yet split from the array (`4242_[4-7%2]|PENDING`) gives
/// its state to each of them. A job that is no array (a batch finder's, `4243|RUNNING`) is
/// task 0.
pub fn parse_states(text: &str, job_id: &str) -> BTreeMap<usize, String> {
    let tasks = text.lines().filter_map(|line| {
        let (id, state) = line.split_once('|')?;
        let tasks = id.trim().strip_prefix(job_id)?;
        let tasks = tasks
            .strip_prefix('_')
            .or(tasks.is_empty().then_some("0"))?;
        Some((tasks, state))
    });
    let mut states = BTreeMap::new();
    for (tasks, state) in tasks {
        let tasks = match tasks.strip_prefix('[').and_then(|t| t.strip_suffix(']')) {
            Some(list) => list.split('%').next().unwrap_or(""),
            None => tasks,
        };
        for part in tasks.split(',') {
            let (first, last) = part.split_once('-').unwrap_or((part, part));
            if let (Ok(first), Ok(last)) = (first.parse::<usize>(), last.parse::<usize>()) {
                for i in first..=last {
                    states.insert(i, state.trim().to_string());
                }
            }
        }
    }
    states
}

/// The job's script: for a sweep, an array of one task per trial, each `tuner task DIR` on a
/// GPU of its own; for a batch finder, one job on one GPU.
pub fn script(plan: &Plan, dir: &Path, tuner: &Path, s: &SlurmArgs) -> anyhow::Result<String> {
    let dir = absolute(dir);
    let (name, what, output) = match plan.autobatch {
        Some(_) => ("autobatch", "batch finder as a Slurm job", "autobatch"),
        None => (
            "sweep",
            "sweep as a Slurm array job, one trial per task",
            "%3a",
        ),
    };
    let last = plan.trials.len().saturating_sub(1);
    let at_once = s.max_parallel.map_or(String::new(), |n| format!("%{n}"));
    let array = format!("--array=0-{last}{at_once}");
    let mut options = vec![format!("--job-name=tuner-{name}")];
    options.extend(plan.autobatch.is_none().then_some(array));
    for (flag, ext) in [("output", "out"), ("error", "err")] {
        let path = dir.join(format!("slurm/{output}.{ext}"));
        options.push(format!("--{flag}={}", path.display()));
    }
    let asks_gpus =
        |o: &str| o.starts_with("--gres") || o.starts_with("--gpus") || o.starts_with("-G");
    if !s.sbatch.iter().any(|o| asks_gpus(o)) {
        options.push(format!("--gres=gpu:{}", plan.settings.ranks));
    }
    for o in &s.sbatch {
        if o.contains('\n') || !o.starts_with('-') {
            return Err(usage(format!(
                "--sbatch '{o}': give one sbatch option a time, as --sbatch=--partition=gpu"
            )));
        }
        options.push(o.clone());
    }
    let mut text = format!("#!/bin/sh\n# A tuner {what} (tuner {name} --slurm).\n");
    for o in options {
        text.push_str(&format!("#SBATCH {o}\n"));
    }
    text.push_str(&format!(
        "exec {} task {}\n",
        quoted(&tuner.display().to_string()),
        quoted(&dir.display().to_string())
    ));
    Ok(text)
}

/// `sweep --slurm DIR`: write the plan and the script into DIR, submit them once with sbatch,
/// and wait for the job unless told not to. Returns whether the job was waited for. Nothing is
/// written where sbatch is missing; where it refuses, what was written is removed again, so the
/// same command can run once the cause is mended.
pub fn submit(plan: &Plan, dir: &Path, s: &SlurmArgs) -> anyhow::Result<bool> {
    let sbatch = (!s.no_submit).then(|| on_path("sbatch").ok_or_else(|| {
        usage("sbatch is not on the PATH: run on a machine of the Slurm cluster (a login node), or give --no-submit to write the plan only")
    })).transpose()?;
    let tuner = std::env::current_exe()
        .map_err(|e| usage(format!("cannot find the tuner's own executable: {e}")))?;
    let text = script(plan, dir, &tuner, s)?;
    plan.write(dir)?;
    let path = dir.join(SCRIPT);
    std::fs::write(&path, text).map_err(|e| usage(format!("{}: {e}", path.display())))?;
    let (what, kind) = match plan.autobatch {
        Some(_) => ("the batch finder".to_string(), "job"),
        None => (format!("{} trials", plan.trials.len()), "array job"),
    };
    let Some(sbatch) = sbatch else {
        println!(
            "{what} planned in {}: submit with `sbatch {}`, then `tuner gather {0}`",
            dir.display(),
            path.display()
        );
        return Ok(false);
    };
    let line = [&sbatch, Path::new("--parsable"), &path].map(|a| a.display().to_string());
    let out = Command::new(&sbatch).args(&line[1..]).output();
    let refused = |why: String| {
        let _ = std::fs::remove_file(dir.join(PLAN));
        let _ = std::fs::remove_file(&path);
        anyhow::anyhow!("sbatch refused the job: {why}; nothing was submitted")
    };
    let out = out.map_err(|e| refused(format!("could not run {}: {e}", sbatch.display())))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    // `--parsable` prints `ID` or `ID;CLUSTER`.
    let id = stdout.trim().split(';').next().unwrap_or("").to_string();
    if !out.status.success() || id.is_empty() || !id.chars().all(|c| c.is_ascii_digit()) {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let said = stderr
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        return Err(refused(format!(
            "{} ({said})",
            Exit::of(out.status).describe()
        )));
    }
    let job = Job {
        job_id: id,
        sbatch: line.to_vec(),
        submitted_at: now(),
    };
    write_json_file(&dir.join(JOB), &job, "the job's record")?;
    eprintln!(
        "submitted Slurm {kind} {}: {what} from {}",
        job.job_id,
        dir.display()
    );
    if s.no_wait {
        println!(
            "job {}: gather its report at any time with `tuner gather {}`",
            job.job_id,
            dir.display()
        );
        return Ok(false);
    }
    wait(&job, dir, plan);
    Ok(true)
}

/// The states of the job's tasks still in the queue (`squeue -h -r -o %T`): empty once the job
/// has left it, None where squeue could not say.
fn in_queue(job: &Job) -> Option<Vec<String>> {
    let out = ask(job, "squeue", &["-h", "-r", "-o", "%T"])?;
    let text = String::from_utf8_lossy(&out.stdout);
    let states = text.lines().map(str::trim).filter(|l| !l.is_empty());
    if out.status.success() {
        return Some(states.map(String::from).collect());
    }
    // squeue refuses a job id it no longer knows: the job is over.
    String::from_utf8_lossy(&out.stderr)
        .contains("Invalid job id")
        .then(Vec::new)
}

/// Wait until squeue no longer lists the job, with its progress on stderr: redrawn in place on
/// a terminal, a line per change otherwise.
fn wait(job: &Job, dir: &Path, plan: &Plan) {
    let tasks = plan.trials.len().max(1);
    let bar = crate::run::bar("{spinner} [{elapsed_precise}] {msg}");
    bar.enable_steady_tick(Duration::from_millis(250));
    // Seconds between looks at the queue (PERF_LESSONS_SLURM_POLL_S, default 10).
    let period = std::env::var("PERF_LESSONS_SLURM_POLL_S")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map_or(Duration::from_secs(10), Duration::from_secs_f64);
    let mut failures = 0;
    loop {
        let Some(queued) = in_queue(job) else {
            failures += 1;
            if failures == 5 {
                eprintln!(
                    "job {}: squeue does not answer; stopped waiting (`tuner gather {}` once it does)",
                    job.job_id,
                    dir.display()
                );
                break;
            }
            std::thread::sleep(period);
            continue;
        };
        failures = 0;
        let pending = queued.iter().filter(|s| *s == "PENDING").count();
        let running = queued.len() - pending;
        let done = tasks.saturating_sub(queued.len());
        let id = &job.job_id;
        // Where the job is: how many of its tasks wait, run and are done, and how many results
        // are in.
        let line = match plan.autobatch {
            Some(_) if dir.join(ANSWER_TEXT).exists() => format!("job {id}: the answer is in"),
            Some(_) if pending > 0 => format!("job {id}: pending"),
            Some(_) if running > 0 => format!("job {id}: running"),
            Some(_) => format!("job {id}: done"),
            None => format!(
                "job {id}: {pending} pending, {running} running, {done} done; {}/{} trials have results",
                read_results(dir, plan.trials.len()).len(),
                plan.trials.len()
            ),
        };
        // The bar keeps the line last shown, drawn or not.
        if bar.message() != line {
            if bar.is_hidden() {
                eprintln!("{line}");
            }
            bar.set_message(line);
        }
        if queued.is_empty() {
            break;
        }
        std::thread::sleep(period);
    }
    bar.finish();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sacct_s_lines_give_each_task_s_state() {
        let text = "4242_0|COMPLETED\n4242_3|CANCELLED by 0\n4242_[4-5,7%2]|PENDING\n99_1|FAILED\n4242_2|FAILED\n42_6|RUNNING\n";
        let states = parse_states(text, "4242");
        let got: Vec<(usize, &str)> = states.iter().map(|(i, s)| (*i, s.as_str())).collect();
        assert_eq!(
            got,
            [
                (0, "COMPLETED"),
                (2, "FAILED"),
                (3, "CANCELLED by 0"),
                (4, "PENDING"),
                (5, "PENDING"),
                (7, "PENDING")
            ]
        );
    }

    #[test]
    fn the_script_runs_one_trial_per_task_on_a_gpu_of_its_own() {
        let settings = crate::config::Overrides {
            batch_sizes: Some(vec![8, 16, 32]),
            ..Default::default()
        }
        .resolve()
        .unwrap();
        let plan = Plan::new(vec!["t".into()], "/w".into(), settings, None, None);
        let s = SlurmArgs {
            max_parallel: Some(2),
            sbatch: vec!["--partition=gpu".into()],
            ..SlurmArgs::default()
        };
        let text = script(
            &plan,
            Path::new("/shared/run"),
            Path::new("/opt/it's/tuner"),
            &s,
        )
        .unwrap();
        for line in [
            "#SBATCH --array=0-2%2",
            "#SBATCH --output=/shared/run/slurm/%3a.out",
            "#SBATCH --gres=gpu:1",
            "#SBATCH --partition=gpu",
            "exec '/opt/it'\\''s/tuner' task '/shared/run'",
        ] {
            assert!(text.lines().any(|l| l == line), "{line}:\n{text}");
        }
        // A --gres or --gpus of the user's replaces the default.
        let own = SlurmArgs {
            sbatch: vec!["--gpus-per-task=2".into()],
            ..SlurmArgs::default()
        };
        let text = script(&plan, Path::new("/d"), Path::new("/t"), &own).unwrap();
        assert!(
            !text.contains("--gres") && text.contains("#SBATCH --array=0-2\n"),
            "{text}"
        );
        let bad = SlurmArgs {
            sbatch: vec!["partition=gpu".into()],
            ..SlurmArgs::default()
        };
        assert!(script(&plan, Path::new("/d"), Path::new("/t"), &bad).is_err());
    }
}
