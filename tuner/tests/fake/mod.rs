//! The fake training program (tests/fake_trainer.py) as a command for the tuner, and
//! scratch folders for its trials.

#![allow(dead_code)] // each test file uses a part

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tuner::autobatch::{AutobatchReport, Options};
use tuner::gpu::Device;
use tuner::granularity::Granularity;
use tuner::launch::Launcher;
use tuner::program::{Params, Precision, Program};
use tuner::run::RunOptions;
use tuner::trial::{Limits, Runner, TrialResult};

pub fn script() -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fake_trainer.py").to_string()
}

/// Every setting of a trial as the flags of train_resnet.py and the fake take them.
pub const PLACEHOLDER_FLAGS: [&str; 12] = [
    "--batch-size",
    "{batch_size}",
    "--workers",
    "{workers}",
    "--amp",
    "{amp}",
    "--accumulation",
    "{accumulation}",
    "--steps",
    "{steps}",
    "--warmup",
    "{warmup}",
];

/// `env VARS... python3 fake_trainer.py --batch-size {batch_size} ...`: the fake's behaviour is
/// set through `env`, so tests running side by side do not share settings.
pub fn argv(vars: &[(&str, &str)]) -> Vec<String> {
    let mut argv = vec!["env".to_string()];
    argv.extend(vars.iter().map(|(k, v)| format!("{k}={v}")));
    argv.extend(["python3".to_string(), script()]);
    argv.extend(PLACEHOLDER_FLAGS.map(String::from));
    argv
}

/// [argv] as the tuner's program.
pub fn program(vars: &[(&str, &str)]) -> Program {
    Program::new(argv(vars)).unwrap()
}

pub fn params(batch: usize) -> Params {
    Params {
        batch_size: batch,
        workers: 0,
        amp: Precision::Off,
        amp_from_on: false,
        accumulation: 1,
        steps: 2,
        warmup_steps: 1,
        axes: Default::default(),
    }
}

/// One trial of `program` on one GPU, spawned.
pub fn trial(
    program: &Program,
    params: &Params,
    index: usize,
    device: &Device,
    folder: &Path,
    limits: &Limits,
) -> TrialResult {
    group_trial(
        program,
        params,
        index,
        std::slice::from_ref(device),
        folder,
        limits,
    )
}

/// One trial of `program` on a group of GPUs, one process (rank) on each, spawned.
pub fn group_trial(
    program: &Program,
    params: &Params,
    index: usize,
    group: &[Device],
    folder: &Path,
    limits: &Limits,
) -> TrialResult {
    Runner {
        program,
        launcher: &Launcher::Spawn,
        limits: *limits,
        env: &[],
    }
    .trial(params, index, group, folder)
}

/// `gpus` stand-in GPUs, `GPU 0` on `0` and so on.
pub fn stand_ins(gpus: usize) -> Vec<Device> {
    (0..gpus)
        .map(|i| Device::stand_in(&format!("GPU {i}"), &i.to_string()))
        .collect()
}

/// A run of the fake with `vars` on `gpus` stand-in GPUs, trials of one process each forked
/// from a Python parent, their files in `dir`, a minute's time and stall limits, no progress.
pub fn run_options(dir: &Scratch, vars: &[(&str, &str)], gpus: usize) -> RunOptions {
    RunOptions {
        program: program(vars),
        devices: stand_ins(gpus),
        limits: Limits::new(Duration::from_secs(60)),
        trials_dir: Some(dir.path("trials")),
        json: Some(dir.path("autobatch.json")),
        progress: false,
        fork: true,
        ranks: 1,
    }
}

/// The finder's options: from 8 at `granularity`, a 20-step confirmation, nothing written.
pub fn finder_options(granularity: Granularity) -> Options {
    Options {
        start: 8,
        granularity,
        margin: None,
        confirm_steps: 20,
        confirm_runs: 1,
        effective_batch: None,
        write: None,
        keys: tuner::writeback::Keys::tuner_config(),
        team: None,
        model_name: None,
    }
}

/// Every trial of a finder's report, the search's and the confirmations', in the order they ran.
pub fn every_trial(r: &AutobatchReport) -> Vec<&TrialResult> {
    let mut all: Vec<&TrialResult> = (r.search.iter())
        .chain(r.confirmations.iter().map(|c| &c.trial))
        .collect();
    all.sort_by_key(|t| t.index);
    all
}

/// A finder's confirmations as (batch size, whether it held), in order.
pub fn confirmed(r: &AutobatchReport) -> Vec<(usize, bool)> {
    r.confirmations
        .iter()
        .map(|c| (c.batch_size, c.held))
        .collect()
}

/// A fresh folder, removed when dropped.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(name: &str) -> Scratch {
        static COUNT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "tuner-external-{}-{name}-{}",
            std::process::id(),
            COUNT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    pub fn str(&self, name: &str) -> String {
        self.path(name).to_str().unwrap().to_string()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A results file read back: the results, and how many lines were not results (a line cut
/// short when the machine went down).
pub fn results_in(path: &Path) -> (Vec<TrialResult>, usize) {
    let text = std::fs::read_to_string(path).unwrap();
    let lines = text.lines().filter(|l| !l.trim().is_empty());
    let read: Vec<serde_json::Result<TrialResult>> = lines.map(serde_json::from_str).collect();
    let bad = read.iter().filter(|r| r.is_err()).count();
    (read.into_iter().flatten().collect(), bad)
}

/// The JSON lines the fake appended to its FAKE_LOG.
pub fn log_entries(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("the fake writes whole JSON lines"))
        .collect()
}

/// The trial a FAKE_LOG entry was written by (its PERF_LESSONS_TRIAL).
pub fn trial_of(entry: &serde_json::Value) -> usize {
    entry["env"]["PERF_LESSONS_TRIAL"]
        .as_str()
        .and_then(|t| t.parse().ok())
        .expect("every trial has its number in the environment")
}

/// Whether a process is gone (or a zombie nobody has reaped yet: it runs nothing).
pub fn gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state == "Z" || state == "X"),
    }
}

/// Every pid the trial's processes wrote to `file` (at least `at_least` of them), each gone
/// within a few seconds: how many there were.
pub fn none_left(file: &Path, at_least: usize) -> usize {
    let text = std::fs::read_to_string(file).expect("the trial's processes wrote their pids");
    let pids: Vec<u32> = text
        .split_whitespace()
        .map(|w| w.parse().unwrap())
        .collect();
    assert!(pids.len() >= at_least, "{pids:?}");
    for &pid in &pids {
        assert!(
            eventually(Duration::from_secs(5), || gone(pid)),
            "process {pid} outlived its trial"
        );
    }
    pids.len()
}

/// Wait up to `limit` for `cond`.
pub fn eventually(limit: Duration, cond: impl Fn() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    cond()
}

/// What a run of the `tuner` binary said.
pub struct Out {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// `tuner ARGS -- env VARS python3 fake_trainer.py --batch-size {batch_size} ...` in `cwd`, on
/// the stand-in GPUs `gpus`, with the system's temporary folder at `tmp`.
pub fn tuner(args: &[&str], vars: &[(&str, &str)], gpus: &str, cwd: &Path, tmp: &Path) -> Out {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tuner"));
    cmd.args(args);
    cmd.arg("--");
    cmd.args(argv(vars));
    run(cmd, gpus, cwd, tmp)
}

/// Run `cmd` in `cwd` on the stand-in GPUs `gpus`, with the system's temporary folder at `tmp`;
/// the test's own PERF_LESSONS_ and FAKE_ variables stay out, those set on `cmd` go in.
pub fn run(cmd: Command, gpus: &str, cwd: &Path, tmp: &Path) -> Out {
    let out = placed(cmd, gpus, cwd, tmp).output().expect("running tuner");
    let o = Out {
        code: out.status.code().unwrap_or(-1),
        stdout: common::table::unpadded(&String::from_utf8_lossy(&out.stdout)),
        stderr: common::table::unpadded(&String::from_utf8_lossy(&out.stderr)),
    };
    assert!(!o.stderr.contains("panicked"), "{}", o.stderr);
    o
}

/// `cmd` set to run as [run] runs it.
pub fn placed(mut cmd: Command, gpus: &str, cwd: &Path, tmp: &Path) -> Command {
    std::fs::create_dir_all(tmp).unwrap();
    let set: Vec<std::ffi::OsString> = cmd.get_envs().map(|(k, _)| k.to_owned()).collect();
    cmd.current_dir(cwd)
        .env("CUDA_VISIBLE_DEVICES", gpus)
        .env("CUDA_DEVICE_ORDER", "FASTEST_FIRST")
        .env("TMPDIR", tmp);
    for (k, _) in std::env::vars() {
        if (k.starts_with("PERF_LESSONS_") || k.starts_with("FAKE_"))
            && !set.contains(&k.clone().into())
        {
            cmd.env_remove(k);
        }
    }
    cmd
}

pub fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// A scratch folder with a working folder and a temporary folder in it.
pub fn places(name: &str) -> (Scratch, PathBuf, PathBuf) {
    let s = Scratch::new(name);
    let (work, tmp) = (s.path("work"), s.path("tmp"));
    std::fs::create_dir_all(&work).unwrap();
    std::fs::create_dir_all(&tmp).unwrap();
    (s, work, tmp)
}

pub fn json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

/// Each trial's status in a report's JSON.
pub fn statuses(report: &serde_json::Value) -> Vec<String> {
    (report["trials"].as_array().unwrap().iter())
        .map(|t| t["status"].as_str().unwrap().to_string())
        .collect()
}

/// What must agree between a local sweep's JSON and a gathered one.
pub fn essentials(report: &serde_json::Value) -> serde_json::Value {
    let trials: Vec<serde_json::Value> = report["trials"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            serde_json::json!([
                t["index"],
                t["status"],
                t["params"],
                t["measured"]["samples_per_s"],
                t["measured"]["reported_steps"],
                t["reason"],
            ])
        })
        .collect();
    let best = &report["best"];
    serde_json::json!({
        "schema": report["schema"],
        "command": report["command"],
        "settings": report["settings"],
        "trials": trials,
        "picks": [
            best["highest_throughput"]["key"],
            best["best_efficiency"]["key"],
            best["recommended"]["key"],
        ],
        "margin": report["margin"],
    })
}

/// The finder's flags both ways run: batches above 40 run out of memory.
pub const FINDER: [&str; 10] = [
    "autobatch",
    "--workers",
    "0",
    "--confirm-steps",
    "3",
    "--steps",
    "2",
    "--warmup",
    "1",
    "--quiet",
];
