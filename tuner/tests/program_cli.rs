//! The `tuner` binary on a program, end to end, against the fake training program: what
//! reaches the program, how each ending is told apart, what a program that reports nothing or
//! reports badly gets, the finder's answer and its trial count, Python trials forked from one
//! parent, the queue over several (stand-in) GPUs, results written as they come, what is and is
//! not written back. No GPU: the GPUs are named in CUDA_VISIBLE_DEVICES, and a device order
//! other than the bus's keeps NVML (where a machine has it) from reading real GPUs for them.
//! Progress is drawn only on a terminal, so these runs' stderr holds only errors (and the text
//! of a `--json -` run).

mod fake;

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use fake::{listing, log_entries, none_left, places, run, script, trial_of, tuner, Out};
use serde_json::Value;

fn json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn placeholders_and_environment_reach_the_program() {
    let (s, work, tmp) = places("env");
    let log = s.str("log.jsonl");
    std::fs::write(
        work.join("run.toml"),
        "[training]\naccumulation_steps = 2\nsteps = 4\nwarmup_steps = 2\n",
    )
    .unwrap();
    let o = tuner(
        &[
            "sweep",
            "--config",
            "run.toml",
            "--batch-sizes",
            "24",
            "--workers",
            "3",
            "--amp",
            "on",
            "--json",
            "out.json",
        ],
        &[("FAKE_LOG", &log)],
        "5",
        &work,
        &tmp,
    );
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    let e = &log_entries(Path::new(&log))[0];
    assert_eq!(e["args"]["batch_size"], 24);
    assert_eq!(e["args"]["workers"], 3);
    // No NVML here: the capability is not known, and `on` is fp16, which trains everywhere.
    assert_eq!(e["args"]["amp"], "fp16");
    assert_eq!(e["args"]["accumulation"], 2);
    assert_eq!(e["args"]["steps"], 4);
    assert_eq!(e["args"]["warmup"], 2);
    for (k, v) in [
        ("PERF_LESSONS_BATCH_SIZE", "24"),
        ("PERF_LESSONS_WORKERS", "3"),
        ("PERF_LESSONS_AMP", "fp16"),
        ("PERF_LESSONS_ACCUMULATION", "2"),
        ("PERF_LESSONS_STEPS", "4"),
        ("PERF_LESSONS_WARMUP_STEPS", "2"),
        ("PERF_LESSONS_TRIAL", "0"),
    ] {
        assert_eq!(e["env"][k], v, "{k}");
    }
    assert_eq!(e["cuda_visible_devices"], "5");
    assert_eq!(e["nccl_nvls_enable"], "0");
    assert_eq!(e["pid"], e["pgid"], "a process group of its own");

    // The report's shape: each trial as it ran, picks, the program's own count beside ours.
    let report = json(&work.join("out.json"));
    assert_eq!(report["schema"], "tuner-sweep/2");
    let row = &report["trials"][0];
    assert_eq!(row["status"], "OK");
    assert_eq!(row["params"]["batch_size"], 24);
    assert_eq!(
        (&row["params"]["amp"], &row["params"]["amp_from_on"]),
        (&"fp16".into(), &true.into())
    );
    let amp_on = report["devices"][0]["amp_on"].as_str().unwrap();
    assert!(
        amp_on.starts_with("fp16 (compute capability not read"),
        "{amp_on}"
    );
    assert!(
        o.stdout.contains(&format!("- GPU 0: --amp on is {amp_on}")),
        "{}",
        o.stdout
    );
    assert!(o.stdout.contains("| 24 | 3 | fp16 (on) |"), "{}", o.stdout);
    assert_eq!(row["report"]["bad_lines"], 0);
    // 6 steps reported, 2 of them warmup; 48 samples per 10 ms.
    assert!((row["measured"]["samples_per_s"].as_f64().unwrap() - 4800.0).abs() < 1e-6);
    assert_eq!(row["measured"]["source"], "protocol");
    assert_eq!(row["measured"]["reported_steps"], 6);
    assert_eq!(report["best"]["recommended"]["key"]["batch"], 24);
    assert!(
        report["launch"].as_str().unwrap().contains("spawned"),
        "{}",
        report["launch"]
    );
    assert!(
        o.stdout.contains("| batch | workers | AMP | data ms |"),
        "{}",
        o.stdout
    );
    assert!(
        o.stdout
            .contains("- recommended: batch 24, workers 3, fp16: 4800 samples/s"),
        "{}",
        o.stdout
    );
    assert!(
        o.stdout
            .contains("samples/s against the program's own count: within 0.00% on 1 trial(s)"),
        "{}",
        o.stdout
    );
    assert!(
        o.stdout
            .contains("samples/s against the tuner's clock over the report's lines: within"),
        "{}",
        o.stdout
    );
    assert!(report["throughput_check"]["clock"]["trials_compared"] == 1);
    // The trials' JSON lines beside the JSON; the temporary trials' folder is gone.
    assert_eq!(lines(&work.join("out.trials.jsonl")).len(), 1);
    assert_eq!(listing(&work), ["out.json", "out.trials.jsonl", "run.toml"]);
    assert!(listing(&tmp).is_empty(), "{:?}", listing(&tmp));
    // `tuner plot` redraws a program's sweep from its JSON.
    let mut plot = Command::new(env!("CARGO_BIN_EXE_tuner"));
    plot.args(["plot", "--from", "out.json", "--out", "again"]);
    let p = run(plot, "5", &work, &tmp);
    assert_eq!(p.code, 0, "{}", p.stderr);
    assert!(work.join("again.png").exists() && work.join("again.svg").exists());
    let svg = std::fs::read_to_string(work.join("again.svg")).unwrap();
    assert!(
        svg.contains("tuner sweep of env"),
        "the program's command in the title"
    );
    // A JSON that is not there is bad usage: one line, exit 2.
    let mut plot = Command::new(env!("CARGO_BIN_EXE_tuner"));
    plot.args(["plot", "--from", "missing.json", "--out", "again"]);
    let p = run(plot, "5", &work, &tmp);
    assert_eq!(p.code, 2, "{}", p.stderr);
    assert_eq!(p.stderr.lines().count(), 1, "{}", p.stderr);
}

#[test]
fn a_hang_is_killed_at_the_time_limit_with_its_children() {
    let (s, work, tmp) = places("hang");
    let pids = s.str("pids");
    let o = tuner(
        &[
            "sweep",
            "--batch-sizes",
            "8",
            "--time-limit",
            "2",
            "--steps",
            "2",
        ],
        &[("FAKE_MODE", "hang"), ("FAKE_PID_FILE", &pids)],
        "0",
        &work,
        &tmp,
    );
    // No trial ended OK: nothing to recommend, and the exit says so.
    assert_eq!(o.code, 1, "{}\n{}", o.stdout, o.stderr);
    assert!(o.stdout.contains("| HANG |"), "{}", o.stdout);
    assert!(o.stdout.contains("time limit of 2 s"), "{}", o.stdout);
    assert!(
        o.stdout
            .contains("waiting for a collective that never comes"),
        "the trial's last words: {}",
        o.stdout
    );
    none_left(Path::new(&pids), 1);
    // A hang is worth reading: its folder is kept and named.
    assert!(o.stdout.contains("the trials' output"), "{}", o.stdout);
    assert_eq!(listing(&tmp).len(), 1);
}

/// Interrupted (Ctrl-C, or a job's SIGTERM), the tuner kills every trial still running with
/// the processes it started, forked or spawned, says so, and exits with the shell's code for
/// the signal.
#[test]
fn an_interrupted_tuner_leaves_no_trial_running() {
    use nix::sys::signal::{kill, Signal};
    for (fork, signal, code) in [(true, Signal::SIGINT, 130), (false, Signal::SIGTERM, 143)] {
        let (s, work, tmp) = places(&format!("interrupted-{}", code));
        let pids = s.path("pids");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tuner"));
        cmd.args(["sweep", "--batch-sizes", "8", "--workers", "0", "--quiet"])
            .args((!fork).then_some("--no-fork"))
            .args(["--", "python3", &script()])
            .args(fake::PLACEHOLDER_FLAGS)
            .env("FAKE_MODE", "hang")
            .env("FAKE_PID_FILE", &pids)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let tuner = fake::placed(cmd, "0", &work, &tmp).spawn().unwrap();
        let both =
            || std::fs::read_to_string(&pids).is_ok_and(|t| t.split_whitespace().count() >= 2);
        assert!(
            fake::eventually(std::time::Duration::from_secs(30), both),
            "the trial started"
        );
        let pid = nix::unistd::Pid::from_raw(tuner.id() as i32);
        kill(pid, signal).unwrap();
        let out = tuner.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{stderr}");
        assert!(
            stderr.contains(&format!(
                "error: interrupted by {signal}: the trials still running were killed"
            )),
            "{stderr}"
        );
        // The trial and the child it started.
        none_left(&pids, 2);
    }
}

#[test]
fn a_trial_silent_between_its_steps_is_a_hang_at_the_stall_limit() {
    let (s, work, tmp) = places("stall");
    let pids = s.str("pids");
    let started = std::time::Instant::now();
    let o = tuner(
        &[
            "sweep",
            "--batch-sizes",
            "8",
            "--stall-limit",
            "1",
            "--steps",
            "10",
        ],
        &[("FAKE_MODE", "stall"), ("FAKE_PIDS", &pids)],
        "0",
        &work,
        &tmp,
    );
    let took = started.elapsed().as_secs_f64();
    // The sweep shows a failed trial, says why, and ends long before the time limit (600 s).
    assert_eq!(o.code, 1, "{}\n{}", o.stdout, o.stderr);
    assert!(o.stdout.contains("| HANG |"), "{}", o.stdout);
    assert!(
        o.stdout
            .contains("HANG: no report or output for 1 s after step 3 (the slowest step so far"),
        "{}",
        o.stdout
    );
    assert!(o.stdout.contains("stall limit 1 s"), "{}", o.stdout);
    assert!(took < 30.0, "{took:.1} s");
    none_left(Path::new(&pids), 1);
}

#[test]
fn out_of_memory_is_told_apart_from_a_failure() {
    let (_s, work, tmp) = places("endings");
    let o = tuner(
        &[
            "sweep",
            "--batch-sizes",
            "8,64,128",
            "--steps",
            "2",
            "--json",
            "oom.json",
        ],
        &[("FAKE_OOM_ABOVE", "32")],
        "0",
        &work,
        &tmp,
    );
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    let rows: Vec<&str> = o.stdout.lines().filter(|l| l.starts_with("| ")).collect();
    assert!(
        rows[1].starts_with("| 8 |") && rows[1].contains("| OK |"),
        "{rows:?}"
    );
    assert!(
        rows[2].starts_with("| 64 |") && rows[2].contains("| OOM |"),
        "{rows:?}"
    );
    assert!(
        rows[3].starts_with("| 128 |") && rows[3].contains("| SKIPPED |"),
        "{rows:?}"
    );
    assert!(
        o.stdout
            .contains("memory-bound: batch 64 ran out of memory"),
        "{}",
        o.stdout
    );
    let trials = &json(&work.join("oom.json"))["trials"];
    assert_eq!(trials[1]["oom"]["stack"], "PyTorch");
    assert!(
        trials[1]["reason"]
            .as_str()
            .unwrap()
            .starts_with("out of memory (PyTorch)"),
        "{}",
        trials[1]["reason"]
    );
    assert!(
        trials[2]["reason"]
            .as_str()
            .unwrap()
            .contains("batch 64 of the same setting ran out of memory"),
        "{}",
        trials[2]["reason"]
    );

    let o = tuner(
        &["sweep", "--batch-sizes", "8", "--steps", "2"],
        &[("FAKE_MODE", "fail")],
        "0",
        &work,
        &tmp,
    );
    assert_eq!(o.code, 1);
    assert!(o.stdout.contains("| FAILED |"), "{}", o.stdout);
    assert!(
        o.stdout
            .contains("ValueError: the dataset has no split called 'trian'"),
        "{}",
        o.stdout
    );
    assert!(!o.stdout.contains("memory-bound"), "{}", o.stdout);
}

#[test]
fn a_program_that_exits_0_after_fewer_steps_than_told_is_incomplete() {
    let (_s, work, tmp) = places("short");
    let o = tuner(
        &[
            "sweep",
            "--batch-sizes",
            "8",
            "--steps",
            "3",
            "--warmup",
            "1",
        ],
        &[("FAKE_MODE", "short")],
        "0",
        &work,
        &tmp,
    );
    // Not an answer: no pick, exit 1, and its output kept to read.
    assert_eq!(o.code, 1, "{}\n{}", o.stdout, o.stderr);
    assert!(o.stdout.contains("| INCOMPLETE |"), "{}", o.stdout);
    assert!(
        o.stdout
            .contains("INCOMPLETE: exit status 0 after 1 of the 4 steps it was told to run"),
        "{}",
        o.stdout
    );
    assert!(o.stdout.contains("- recommended: none"), "{}", o.stdout);
    assert!(o.stdout.contains("the trials' output"), "{}", o.stdout);
    assert_eq!(listing(&tmp).len(), 1);
}

#[test]
fn a_program_that_reports_no_steps_is_shown_so_and_never_picked() {
    let (_s, work, tmp) = places("silent");
    let o = tuner(
        &[
            "sweep",
            "--batch-sizes",
            "8,16",
            "--steps",
            "2",
            "--warmup",
            "1",
            "--json",
            "s.json",
        ],
        &[("FAKE_MODE", "silent")],
        "0",
        &work,
        &tmp,
    );
    // Nothing to pick from: the exit says so.
    assert_eq!(o.code, 1, "{}\n{}", o.stdout, o.stderr);
    let rows: Vec<&str> = o.stdout.lines().filter(|l| l.starts_with("| ")).collect();
    assert_eq!(rows.len(), 3, "{rows:?}");
    for row in &rows[1..] {
        assert!(
            row.contains("| OK: no step lines: samples/s from the process's wall time, start-up included (never picked) |"),
            "{row}"
        );
    }
    assert!(
        o.stdout.contains("- highest throughput: none"),
        "{}",
        o.stdout
    );
    assert!(o.stdout.contains("- recommended: none"), "{}", o.stdout);
    let report = json(&work.join("s.json"));
    for t in report["trials"].as_array().unwrap() {
        assert_eq!(t["status"], "OK");
        assert_eq!(t["measured"]["source"], "wall-clock");
        assert_eq!(t["measured"]["reported_steps"], 0);
        assert!(
            t["measured"]["samples_per_s"].as_f64().unwrap() > 0.0,
            "shown, though never picked"
        );
    }
    for pick in ["highest_throughput", "best_efficiency", "recommended"] {
        assert_eq!(report["best"][pick], Value::Null, "{pick}");
    }
    assert!(
        report["diagnosis"].as_array().unwrap().is_empty(),
        "{}",
        report["diagnosis"]
    );
}

#[test]
fn invalid_report_lines_are_counted_and_the_first_quoted() {
    let (_s, work, tmp) = places("garbage");
    let o = tuner(
        &[
            "sweep",
            "--batch-sizes",
            "8",
            "--steps",
            "2",
            "--warmup",
            "1",
            "--json",
            "g.json",
        ],
        &[("FAKE_MODE", "garbage")],
        "0",
        &work,
        &tmp,
    );
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    // The table counts them...
    let rows: Vec<&str> = o.stdout.lines().filter(|l| l.starts_with("| ")).collect();
    let header: Vec<&str> = rows[0].split('|').map(str::trim).collect();
    let cells: Vec<&str> = rows[1].split('|').map(str::trim).collect();
    let column = header
        .iter()
        .position(|h| *h == "bad lines")
        .expect("a bad lines column");
    assert_eq!(cells[column], "2", "{rows:?}");
    // ...and the first is quoted under it: 3 steps and the end line, then stray text.
    assert!(
        o.stdout.contains(
            "trial 0 (batch 8, workers 4, amp off): 2 report line(s) not valid; the first, line 5: not JSON"
        ),
        "{}",
        o.stdout
    );
    assert!(o.stdout.contains("epoch 1 done, loss 0.42"), "{}", o.stdout);
    // The JSON has the count, each bad line's place and reason, and the cut-off last line.
    let report = &json(&work.join("g.json"))["trials"][0]["report"];
    assert_eq!(
        (report["lines"].as_u64(), report["bad_lines"].as_u64()),
        (Some(6), Some(2))
    );
    assert_eq!(report["truncated_last_line"], true);
    let first = &report["first_bad"][0];
    assert_eq!(first["line"], 5);
    assert!(
        first["reason"]
            .as_str()
            .unwrap()
            .ends_with("epoch 1 done, loss 0.42"),
        "{first}"
    );
    assert_eq!(report["first_bad"][1]["line"], 6);
}

/// `tuner memory` of three batches on the fake, its JSON to stdout, and the fake's memory:
/// 600 MB + 40 MB per sample of 79 GB free, so 2048 runs out.
const MEMORY_ON_THE_FAKE: [&str; 11] = [
    "memory",
    "--batch-sizes",
    "64,1024,2048",
    "--steps",
    "2",
    "--warmup",
    "1",
    "--workers",
    "0",
    "--json",
    "-",
];
const FAKE_MEMORY: (&str, &str) = ("FAKE_MEMORY", "600000000,40000000,79000000000");

/// `memory`'s bound under the largest batch that fits names how the batch above it ended,
/// and a batch that said nothing about memory is never taken for one that fit or failed.
#[test]
fn memory_says_how_the_batch_above_the_largest_fit_ended() {
    let (_s, work, tmp) = places("memory-endings");
    let mut args = MEMORY_ON_THE_FAKE.to_vec();
    args[2] = "64,1024";
    args.extend(["--stall-limit", "1"]);
    let hung = [("FAKE_STALL_ABOVE", "100"), ("FAKE_STALL_AFTER", "1")];
    let o = tuner(&args, &hung, "0", &work, &tmp);
    assert!(
        o.stderr
            .contains("largest listed batch that fits 64 (1024 hung (counted as not fitting))"),
        "{}",
        o.stderr
    );
    let o = tuner(&args, &[("FAKE_MODE", "fail")], "0", &work, &tmp);
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(
        o.stderr.contains("largest listed batch that fits 0 (none ran out of memory; no answer from 64 FAILED, 1024 FAILED (above))"),
        "{}",
        o.stderr
    );
}

#[test]
fn memory_shows_where_it_goes_from_the_program_s_model_line() {
    // The fake's peak is 600 MB + 40 MB per sample; its model line counts 150 MB of
    // parameters, 150 MB of gradients and 300 MB of optimizer state.
    let (_s, work, tmp) = places("memory-parts");
    let (args, memory) = (MEMORY_ON_THE_FAKE, FAKE_MEMORY);
    let o = tuner(&args, &[memory], "0", &work, &tmp);
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    for row in [
        "| 64 | off | 0.150 GB | 0.150 GB | 0.300 GB | 2.560 GB | 3.160 GB | - | - |",
        "| 1024 | off | 0.150 GB | 0.150 GB | 0.300 GB | 40.960 GB | 41.560 GB | - | 40.00 MB |",
        "bytes per sample 40.00 MB (the slope of the peak line); its fixed part 0.600 GB against 0.600 GB of parameters, gradients and optimizer state",
    ] {
        assert!(o.stderr.contains(row), "{row}\n{}", o.stderr);
    }
    assert!(!o.stderr.contains("| 2048 | off | 0.150"), "{}", o.stderr);
    let report: Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(report["schema"], "tuner-memory/2");
    let parts = report["precisions"][0]["parts"].as_array().unwrap();
    assert_eq!(parts.len(), 2, "the batches that fit");
    assert_eq!(parts[1]["batch_size"], 1024);
    assert_eq!(parts[1]["model"]["optimizer_state_bytes"], 300_000_000u64);
    assert_eq!(parts[1]["activations_bytes"], 40_960_000_000u64);
    assert_eq!(parts[1]["bytes_per_sample"], 40_000_000.0);
    let trial = &report["trials"][0]["measured"]["model"];
    assert_eq!(
        trial["parameter_bytes"], 150_000_000u64,
        "the trial keeps it"
    );
    // The GPU check of real models reads this JSON: the fake's parts pass it, others do not.
    let json = work.join("memory.json");
    std::fs::write(&json, &o.stdout).unwrap();
    let check = |optimizer_state: u64| {
        let out = std::process::Command::new("python3")
            .arg("-c")
            .arg(concat!(
                "import sys; sys.path.insert(0, sys.argv[1]); import memory_parts_check as m\n",
                "counted = {'parameter_bytes': 150000000, 'gradient_bytes': 150000000,\n",
                "           'optimizer_state_bytes': int(sys.argv[3])}\n",
                "print(m.check_tuner({'counted': counted}, sys.argv[2]))",
            ))
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts"))
            .arg(&json)
            .arg(optimizer_state.to_string())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert_eq!(check(300_000_000), "[]\n");
    assert!(check(1).contains("is not the count"), "{}", check(1));

    // A program that sends no model line: the same peaks, its parts not reported.
    let o = tuner(&args, &[memory, ("FAKE_NO_MODEL", "1")], "0", &work, &tmp);
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    let row = "| 1024 | off | not reported | not reported | not reported | not reported | 41.560 GB | - | 40.00 MB |";
    assert!(o.stderr.contains(row), "{}", o.stderr);
    assert!(!o.stderr.contains("its fixed part"), "{}", o.stderr);
}

#[test]
fn json_to_stdout_leaves_the_text_to_stderr() {
    let (_s, work, tmp) = places("json-stdout");
    let o = tuner(&MEMORY_ON_THE_FAKE, &[FAKE_MEMORY], "0", &work, &tmp);
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    let report: Value = serde_json::from_str(&o.stdout).expect("stdout is the JSON alone");
    assert!(o.stderr.starts_with("## tuner memory: "), "{}", o.stderr);
    assert!(
        o.stderr.contains("| 2048 | off | no: OOM (PyTorch) |"),
        "{}",
        o.stderr
    );
    assert_eq!(report["schema"], "tuner-memory/2");
    assert_eq!(report["trials"].as_array().unwrap().len(), 3);
    let p = &report["precisions"][0];
    assert_eq!(p["amp"], "off");
    assert_eq!(
        (p["largest_fitting"].as_u64(), p["first_failing"].as_u64()),
        (Some(1024), Some(2048))
    );
    // The line through the program's peaks, against the memory it reported free.
    assert_eq!(p["fit"]["line"]["bytes_per_sample"], 40_000_000.0);
    assert_eq!(p["fit"]["limit_bytes"], 79_000_000_000u64);
    assert_eq!(p["tiers"]["maximum"], 1024);
    // No file beside a `-`, no trials' folder left.
    assert!(listing(&work).is_empty(), "{:?}", listing(&work));
    assert!(listing(&tmp).is_empty(), "{:?}", listing(&tmp));
}

/// `tuner ARGS -- python3 fake_trainer.py --batch-size {batch_size} ...`, the fake's settings in
/// the tuner's own environment: a Python command as a user gives it, so its trials are forked.
fn python_command(args: &[&str], vars: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tuner"));
    cmd.args(args)
        .args(["--", "python3", &script()])
        .args(fake::PLACEHOLDER_FLAGS);
    for (k, v) in vars {
        cmd.env(k, v);
    }
    cmd
}

#[test]
fn a_python_program_s_trials_are_forked_each_a_process_of_its_own() {
    let (s, work, tmp) = places("fork");
    let forked_from =
        "each trial forked from a Python parent that imported the program's modules once";
    let limit = [("FAKE_OOM_ABOVE", "100")];
    let args = ["autobatch", "--json", "ab.json", "--workers", "0"];
    let o = run(python_command(&args, &limit), "0", &work, &tmp);
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    let forked = json(&work.join("ab.json"));
    let launch = forked["launch"].as_str().unwrap();
    assert!(launch.starts_with(forked_from), "{launch}");
    assert!(o.stdout.contains(forked_from), "{}", o.stdout);
    assert_eq!(confirmed(&forked), (96, 104));
    // The parent's files go with the trials' folder.
    assert!(listing(&tmp).is_empty(), "{:?}", listing(&tmp));

    // --no-fork spawns the same command, and the search goes the same way.
    let no_fork = [
        "autobatch",
        "--no-fork",
        "--json",
        "spawned.json",
        "--workers",
        "0",
    ];
    let o = run(python_command(&no_fork, &limit), "0", &work, &tmp);
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    let spawned = json(&work.join("spawned.json"));
    assert_eq!(spawned["launch"], "each trial spawned as the command says");
    assert_eq!(spawned["found"], forked["found"]);
    assert_eq!(confirmed(&spawned), (96, 104));

    // A sweep's trials run to their end: each one forked is a process of its own, leading its
    // own group, with its own trial's settings and report.
    let log = s.str("log.jsonl");
    let args = [
        "sweep",
        "--batch-sizes",
        "8,16,24",
        "--steps",
        "2",
        "--workers",
        "0",
        "--json",
        "sweep.json",
    ];
    let o = run(
        python_command(&args, &[("FAKE_LOG", &log)]),
        "0",
        &work,
        &tmp,
    );
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    let sweep = json(&work.join("sweep.json"));
    assert!(
        sweep["launch"].as_str().unwrap().starts_with(forked_from),
        "{}",
        sweep["launch"]
    );
    for t in sweep["trials"].as_array().unwrap() {
        let batch = t["params"]["batch_size"].as_f64().unwrap();
        assert_eq!(t["status"], "OK", "{t}");
        // Its own report: batch samples per 10 ms step.
        assert!(
            (t["measured"]["samples_per_s"].as_f64().unwrap() - 100.0 * batch).abs() < 1e-6,
            "{t}"
        );
    }
    let entries = log_entries(Path::new(&log));
    assert_eq!(entries.len(), 3, "{entries:?}");
    let mut pids = std::collections::BTreeSet::new();
    for (i, e) in entries.iter().enumerate() {
        assert_eq!(e["pid"], e["pgid"], "a process group of its own");
        assert!(
            pids.insert(e["pid"].as_u64().unwrap()),
            "a pid used twice: {entries:?}"
        );
        assert_eq!(e["args"]["batch_size"], 8 * (i + 1));
        assert_eq!(
            e["env"]["PERF_LESSONS_BATCH_SIZE"],
            (8 * (i + 1)).to_string()
        );
        assert_eq!(e["env"]["PERF_LESSONS_TRIAL"], i.to_string());
        assert_eq!(e["cuda_visible_devices"], "0");
    }
    assert!(listing(&tmp).is_empty(), "{:?}", listing(&tmp));
}

/// A forked trial gets its GPU's share of the cores as a spawned one does: the fork server's
/// child sets it before the program runs.
#[test]
fn forked_trials_side_by_side_run_on_their_share_of_the_cores() {
    let (s, work, tmp) = places("fork-cpus");
    let log = s.str("log.jsonl");
    let args = [
        "sweep",
        "--batch-sizes",
        "8,16,24,32",
        "--steps",
        "2",
        "--workers",
        "0",
        "--json",
        "sweep.json",
    ];
    let o = run(
        python_command(&args, &[("FAKE_LOG", &log), ("FAKE_STEP_S", "0.05")]),
        "0,1",
        &work,
        &tmp,
    );
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    let sweep = json(&work.join("sweep.json"));
    let launch = sweep["launch"].as_str().unwrap();
    assert!(launch.starts_with("each trial forked"), "{launch}");
    let trials = sweep["trials"].as_array().unwrap();
    let entries = log_entries(Path::new(&log));
    assert_eq!(entries.len(), 4);
    for e in &entries {
        let t = &trials[trial_of(e)];
        assert!(t["cpus"].is_array(), "{t}");
        assert_eq!(e["cpus"], t["cpus"], "{t}");
    }
}

/// A forked trial runs as many PyTorch threads as a spawned one on its cores would: one per
/// core of its share, or OMP_NUM_THREADS where the environment sets it. The program imports a
/// stand-in torch module (beside it, so the server imports it too) that keeps the count it was
/// given, starting from 64.
#[test]
fn forked_trials_run_as_many_threads_as_their_cores() {
    let (s, work, tmp) = places("fork-threads");
    let home = s.path("program");
    std::fs::create_dir_all(&home).unwrap();
    let torch = "threads = 64\n\n\ndef set_num_threads(n):\n    global threads\n    threads = n\n";
    std::fs::write(home.join("torch.py"), torch).unwrap();
    let wrapper = format!(
        "import runpy\nimport sys\n\nimport torch  # noqa: F401\n\nsys.argv[0] = {fake:?}\nrunpy.run_path({fake:?}, run_name=\"__main__\")\n",
        fake = script()
    );
    let program = home.join("train.py");
    std::fs::write(&program, wrapper).unwrap();
    let log = s.str("log.jsonl");
    let sweep = |gpus: &str, vars: &[(&str, &str)]| {
        let _ = std::fs::remove_file(&log);
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tuner"));
        cmd.args([
            "sweep",
            "--batch-sizes",
            "8,16",
            "--steps",
            "2",
            "--workers",
            "0",
        ])
        .args(["--json", "sweep.json", "--", "python3"])
        .arg(&program)
        .args(fake::PLACEHOLDER_FLAGS)
        .env("FAKE_LOG", &log);
        for (k, v) in vars {
            cmd.env(k, v);
        }
        let o = run(cmd, gpus, &work, &tmp);
        assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
        let launch = json(&work.join("sweep.json"))["launch"].clone();
        assert!(launch.as_str().unwrap().contains("torch"), "{launch}");
        log_entries(Path::new(&log))
    };
    // Side by side, each on its share of the cores.
    let entries = sweep("0,1", &[]);
    assert_eq!(entries.len(), 2);
    for e in &entries {
        let cores = e["cpus"].as_array().unwrap().len();
        assert_eq!(e["threads"], cores, "{e}");
    }
    // Alone, on every core the tuner has.
    let entries = sweep("0", &[]);
    let cores = entries[0]["cpus"].as_array().unwrap().len();
    assert_eq!(entries[0]["threads"], cores, "{entries:?}");
    assert!(cores < 64);
    // The environment's count wins.
    for e in sweep("0,1", &[("OMP_NUM_THREADS", "3")]) {
        assert_eq!(e["threads"], 3, "{e}");
    }
}

/// `tuner sweep` of batches 8, 16 and 24 on one GPU over a program that calls
/// perf_lessons.fork_here() and then runs the fake: above the call it logs each run of it to
/// FAKE_BUILD_LOG, sleeps FAKE_BUILD_S seconds, exits where FAKE_BUILD_FAILS is set, and where
/// FAKE_OPENMP is set runs a parallel region of GNU OpenMP there and again in the trial; where
/// FAKE_ARGS_ABOVE is set the trial keeps the arguments the program had above the call. What the
/// tuner said, its report, the builds logged and the fake's log entries.
fn fork_here_sweep(name: &str, vars: &[(&str, &str)]) -> (Out, Value, Vec<Value>, Vec<Value>) {
    let (s, work, tmp) = places(name);
    let home = s.path("program");
    std::fs::create_dir_all(&home).unwrap();
    let python = concat!(env!("CARGO_MANIFEST_DIR"), "/../python");
    let wrapper = format!(
        r#"import json
import os
import runpy
import sys
import time

sys.path.insert(0, {python:?})
import perf_lessons  # noqa: E402

with open(os.environ["FAKE_BUILD_LOG"], "a") as f:
    f.write(json.dumps({{"pid": os.getpid(), "batch": sys.argv[2],
                        "report": os.environ.get("PERF_LESSONS_REPORT")}}) + "\n")
if os.environ.get("FAKE_BUILD_FAILS"):
    sys.exit("building the model failed")
time.sleep(float(os.environ.get("FAKE_BUILD_S", "0")))
if os.environ.get("FAKE_OPENMP"):  # a parallel region of GNU OpenMP, as PyTorch's CPU work runs
    import ctypes
    gomp = ctypes.CDLL("libgomp.so.1")
    region = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(lambda data: None)
    gomp.GOMP_parallel(region, None, 4, 0)
print("built")
above = list(sys.argv)
perf_lessons.fork_here()
if os.environ.get("FAKE_ARGS_ABOVE"):  # arguments read above the call: the first trial's
    sys.argv = above
if os.environ.get("FAKE_OPENMP"):
    gomp.GOMP_parallel(region, None, 4, 0)
sys.argv[0] = {fake:?}
runpy.run_path({fake:?}, run_name="__main__")
"#,
        fake = script()
    );
    let program = home.join("train.py");
    std::fs::write(&program, wrapper).unwrap();
    let (log, built) = (s.str("log.jsonl"), s.str("built.jsonl"));
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tuner"));
    cmd.args([
        "sweep",
        "--batch-sizes",
        "8,16,24",
        "--steps",
        "2",
        "--time-limit",
        "60",
    ])
    .args(["--workers", "0", "--json", "sweep.json", "--", "python3"])
    .arg(&program)
    .args(fake::PLACEHOLDER_FLAGS)
    .env("FAKE_LOG", &log)
    .env("FAKE_BUILD_LOG", &built);
    for (k, v) in vars {
        cmd.env(k, v);
    }
    let o = run(cmd, "0", &work, &tmp);
    let report = json(&work.join("sweep.json"));
    let (builds, entries) = (log_entries(Path::new(&built)), log_entries(Path::new(&log)));
    (o, report, builds, entries)
}

/// [fork_here_sweep] where every trial must run: the tuner exits 0, the program is built once,
/// and each trial is OK. Its report, the build and the fake's log entries.
fn fork_here_sweep_runs(name: &str, vars: &[(&str, &str)]) -> (Value, Value, Vec<Value>) {
    let (o, report, builds, entries) = fork_here_sweep(name, vars);
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    assert_eq!(builds.len(), 1, "built once: {builds:?}");
    assert_eq!(entries.len(), 3, "{entries:?}");
    for t in report["trials"].as_array().unwrap() {
        assert_eq!(t["status"], "OK", "{t}");
    }
    (report, builds[0].clone(), entries)
}

/// A program that calls perf_lessons.fork_here() is run once up to there: what it builds above
/// the call is built once, with no PERF_LESSONS_ variables, and each trial is forked from that
/// point with its own arguments and environment. Where the program fails before it gets there,
/// each trial runs it from the top and fails as it would alone.
#[test]
fn a_program_that_calls_fork_here_builds_once() {
    let (report, build, entries) = fork_here_sweep_runs("fork-here", &[]);
    let launch = report["launch"].as_str().unwrap();
    assert!(
        launch.ends_with("and ran the program once up to its fork_here()"),
        "{launch}"
    );
    assert_eq!(build["batch"], "8", "with the first trial's arguments");
    assert_eq!(
        build["report"],
        Value::Null,
        "and no PERF_LESSONS_ variables"
    );
    let mut pids = std::collections::BTreeSet::new();
    for (i, e) in entries.iter().enumerate() {
        assert_eq!(e["pid"], e["pgid"], "a process group of its own");
        assert_ne!(e["pid"], build["pid"]);
        assert!(pids.insert(e["pid"].as_u64().unwrap()), "{entries:?}");
        assert_eq!(e["args"]["batch_size"], 8 * (i + 1));
        assert_eq!(e["env"]["PERF_LESSONS_TRIAL"], i.to_string());
    }

    // Failing before fork_here(): each trial runs the program from the top, and says why.
    let (o, report, builds, entries) =
        fork_here_sweep("fork-here-fails", &[("FAKE_BUILD_FAILS", "1")]);
    assert_ne!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    for t in report["trials"].as_array().unwrap() {
        assert_eq!(t["status"], "FAILED", "{t}");
        let stderr = t["stderr_tail"].to_string();
        assert!(stderr.contains("building the model failed"), "{t}");
    }
    assert_eq!(builds.len(), 1 + 3);
    assert!(entries.is_empty());
}

/// A program that reads its arguments above fork_here() runs the first trial's batch in every
/// trial: the trials of other batches fail, saying so, rather than standing under a batch they
/// did not run.
#[test]
fn a_trial_that_ran_another_batch_fails_saying_so() {
    let (o, report, builds, _) = fork_here_sweep("args-above", &[("FAKE_ARGS_ABOVE", "1")]);
    assert_eq!(builds.len(), 1);
    assert_eq!(o.code, 0, "batch 8 ran: {}\n{}", o.stdout, o.stderr);
    let trials = report["trials"].as_array().unwrap();
    assert_eq!(
        fake::statuses(&report),
        ["OK", "FAILED", "FAILED"],
        "{}",
        o.stdout
    );
    let reason = trials[1]["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("its steps reported 8 samples, where batch 16 x accumulation 1 is 16: the program ran another batch than the trial's"),
        "{reason}"
    );
    assert!(reason.contains("below fork_here()"), "{reason}");
    assert_eq!(trials[2]["reached_steps"], false);
    assert_eq!(report["best"]["highest_throughput"]["key"]["batch"], 8);
}

/// A program whose CPU work above fork_here() started OpenMP's threads (PyTorch building a model
/// does): its trials run parallel regions of their own, where a child of a process whose pool
/// runs would wait for ever.
#[test]
fn trials_forked_after_openmp_ran_run_it_again() {
    fork_here_sweep_runs("fork-here-openmp", &[("FAKE_OPENMP", "1")]);
}

/// Building what is above fork_here() may take longer than a fork is waited for (30 s): the
/// first trial waits for it.
#[test]
fn a_build_before_fork_here_longer_than_a_fork_is_waited_for() {
    fork_here_sweep_runs("fork-here-slow", &[("FAKE_BUILD_S", "32")]);
}

/// `tuner autobatch --json ab.json ...` on the fake; the JSON report.
fn autobatch(name: &str, args: &[&str], vars: &[(&str, &str)]) -> (Value, Out) {
    let (_s, work, tmp) = places(name);
    let mut all = vec!["autobatch", "--json", "ab.json", "--workers", "0"];
    all.extend_from_slice(args);
    let o = tuner(&all, vars, "0", &work, &tmp);
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    (json(&work.join("ab.json")), o)
}

/// The search's trials, those of its rounds that held as confirmations included.
fn trial_count(report: &Value) -> usize {
    let count = |key: &str| report["found"][key].as_array().unwrap().len();
    count("trials") + count("confirmations")
}

/// The answer, the next size seen to fail, and the confirmation that held it: of the answer,
/// in a run of its own, every step it was told to run reported.
fn confirmed(r: &Value) -> (u64, u64) {
    let maximum = r["maximum"].as_u64().unwrap();
    let c = r["confirmations"].as_array().unwrap().last().unwrap();
    assert_eq!(
        (
            c["batch_size"].as_u64(),
            c["steps"].as_u64(),
            c["held"].as_bool()
        ),
        (Some(maximum), Some(20), Some(true)),
        "{c}"
    );
    assert_eq!(c["trial"]["status"], "OK");
    assert_eq!(c["trial"]["measured"]["reported_steps"], 20);
    (maximum, r["next_failing"].as_u64().unwrap())
}

#[test]
fn the_finder_s_answer_is_the_fake_s_limit() {
    for (args, expected, next) in [
        (vec![], 96, 104),
        (vec!["--multiple-of", "4"], 100, 104),
        (vec!["--pow2"], 64, 128),
    ] {
        let (r, o) = autobatch("limit", &args, &[("FAKE_OOM_ABOVE", "100")]);
        assert_eq!(r["schema"], "tuner-autobatch/2");
        assert_eq!(confirmed(&r), (expected, next), "{args:?}");
        assert_eq!(r["confirmations"].as_array().unwrap().len(), 1, "{args:?}");
        // Every search trial's verdict is the fake's truth; those that fit stopped once their
        // memory was steady, long before the steps they were told to run.
        for t in r["search"].as_array().unwrap() {
            let batch = t["params"]["batch_size"].as_u64().unwrap();
            let status = if batch <= 100 { "OK" } else { "OOM" };
            assert_eq!(t["status"], status, "batch {batch}");
            if batch <= 100 {
                assert_eq!(t["steady_at"], 3, "batch {batch}");
            }
        }
        // Held in a run after the search, or in the search's trial of the last size open.
        let held = format!("**maximum {expected}**: held for 20 steps");
        let next = format!("; {next} ran out of memory");
        assert!(
            o.stdout
                .lines()
                .any(|l| l.starts_with(&held) && l.ends_with(&next)),
            "{}",
            o.stdout
        );
    }
    // --confirm-steps sets the confirmation's length.
    let (r, _) = autobatch(
        "confirm",
        &["--confirm-steps", "7"],
        &[("FAKE_OOM_ABOVE", "100")],
    );
    let c = &r["confirmations"][0];
    assert_eq!(
        (
            c["steps"].as_u64(),
            c["trial"]["measured"]["reported_steps"].as_u64()
        ),
        (Some(7), Some(7))
    );
}

#[test]
fn reported_memory_cuts_the_finder_s_trials() {
    // A GPU with 79 GB free, 0.6 GB fixed and 40 MB per sample: batch 1960 fills it exactly.
    let memory = ("FAKE_MEMORY", "600000000,40000000,79000000000");
    let (guided, o) = autobatch("guided", &[], &[memory, ("FAKE_GPU_NAME", "Fake H100")]);
    let (plain, _) = autobatch("plain", &[], &[("FAKE_OOM_ABOVE", "1960")]);
    assert_eq!(confirmed(&guided), (1960, 1968));
    assert_eq!(confirmed(&plain), (1960, 1968));
    // Start, a jump proportional to its peak (below the answer), the line through the two
    // peaks and the size above it: 4 trials where doubling and bisecting take 16.
    assert_eq!(trial_count(&guided), 4, "{}", guided["found"]["trials"]);
    assert_eq!(trial_count(&plain), 16, "{}", plain["found"]["trials"]);
    assert!(
        o.stdout
            .contains("peak = 0.60 GB + 40.00 MB per sample, limit 79.00 GB"),
        "{}",
        o.stdout
    );
    assert_eq!(guided["gpu_name"], "Fake H100");
    // The recommended batch leaves 5% of the memory free (80 GB total: the large class):
    // (0.95 x 79 GB - 0.6 GB) / 40 MB = 1861 samples, 1856 at multiples of 8.
    assert_eq!(guided["tiers"]["recommended"], 1856);
    assert_eq!(guided["tiers"]["safe"], 1760);
    assert_eq!(
        (
            guided["batch_size"].as_u64(),
            guided["accumulation_steps"].as_u64()
        ),
        (Some(1856), Some(1))
    );

    // Where the report is 3% off the truth, the answer is still exact, in fewer trials.
    let (off, _) = autobatch(
        "off",
        &[],
        &[memory, ("FAKE_MEMORY_REAL_FREE", "76630000000")],
    );
    let (plain_off, _) = autobatch("plain-off", &[], &[("FAKE_OOM_ABOVE", "1900")]);
    assert_eq!(confirmed(&off), (1896, 1904));
    assert_eq!(confirmed(&plain_off), (1896, 1904));
    assert!(
        trial_count(&off) + 4 <= trial_count(&plain_off),
        "{} against {}",
        off["found"]["trials"],
        plain_off["found"]["trials"]
    );
}

#[test]
fn the_queue_spreads_trials_over_several_gpus_one_each_at_a_time() {
    let (s, work, tmp) = places("queue");
    let log = s.str("log.jsonl");
    let o = tuner(
        &[
            "sweep",
            "--batch-sizes",
            "8,16,24,32,40,48,56,64,72",
            "--steps",
            "3",
            "--warmup",
            "0",
            "--json",
            "q.json",
        ],
        &[("FAKE_LOG", &log), ("FAKE_STEP_S", "0.1")],
        "3,5,7",
        &work,
        &tmp,
    );
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    let report = json(&work.join("q.json"));
    let runs = report["trials"].as_array().unwrap();
    assert_eq!(runs.len(), 9);
    assert!(runs.iter().all(|r| r["status"] == "OK"), "{runs:?}");
    let visible: HashMap<&str, &str> = [("GPU 0", "3"), ("GPU 1", "5"), ("GPU 2", "7")].into();
    let mut spans: HashMap<String, Vec<(f64, f64)>> = HashMap::new();
    for e in log_entries(Path::new(&log)) {
        let index = trial_of(&e);
        let r = &runs[index];
        let device = r["device"].as_str().unwrap();
        assert_eq!(e["cuda_visible_devices"], visible[device]);
        spans
            .entry(device.to_string())
            .or_default()
            .push((e["start"].as_f64().unwrap(), e["end"].as_f64().unwrap()));
    }
    assert_eq!(spans.len(), 3, "every GPU took trials: {spans:?}");
    for (device, s) in &mut spans {
        s.sort_by(|a, b| a.0.total_cmp(&b.0));
        for w in s.windows(2) {
            assert!(w[0].1 <= w[1].0, "{device}: two trials at once {w:?}");
        }
    }
    let all: Vec<(&String, (f64, f64))> = spans
        .iter()
        .flat_map(|(d, s)| s.iter().map(move |x| (d, *x)))
        .collect();
    assert!(
        all.iter()
            .any(|(d1, a)| all.iter().any(|(d2, b)| d1 != d2 && a.0 < b.1 && b.0 < a.1)),
        "no two GPUs ran at once: {spans:?}"
    );
    // Every trial in the results file, none twice.
    let mut written: Vec<u64> = lines(&work.join("q.trials.jsonl"))
        .iter()
        .map(|t| t["index"].as_u64().unwrap())
        .collect();
    written.sort_unstable();
    assert_eq!(written, (0..9).collect::<Vec<u64>>());

    // --devices chooses among the visible ones.
    let log2 = s.str("log2.jsonl");
    let o = tuner(
        &[
            "sweep",
            "--batch-sizes",
            "8,16,24,32",
            "--steps",
            "2",
            "--devices",
            "0,2",
        ],
        &[("FAKE_LOG", &log2)],
        "3,5,7",
        &work,
        &tmp,
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let used: std::collections::BTreeSet<String> = log_entries(Path::new(&log2))
        .iter()
        .map(|e| e["cuda_visible_devices"].as_str().unwrap().to_string())
        .collect();
    assert!(used.iter().all(|v| v == "3" || v == "7"), "{used:?}");
}

#[test]
fn results_are_written_as_each_trial_ends() {
    let (s, work, tmp) = places("as-they-come");
    let log = s.str("log.jsonl");
    let results = work.join("r.trials.jsonl");
    let o = tuner(
        &[
            "sweep",
            "--batch-sizes",
            "8,16,24,32",
            "--steps",
            "2",
            "--json",
            "r.json",
        ],
        &[
            ("FAKE_LOG", &log),
            ("FAKE_WATCH_FILE", results.to_str().unwrap()),
        ],
        "0",
        &work,
        &tmp,
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    // On one GPU the trials run in turn: trial k found the results of the k before it.
    let mut seen: Vec<(usize, u64)> = log_entries(Path::new(&log))
        .iter()
        .map(|e| (trial_of(e), e["watched_lines"].as_u64().unwrap_or(0)))
        .collect();
    seen.sort();
    assert_eq!(seen, [(0, 0), (1, 1), (2, 2), (3, 3)]);
    assert_eq!(lines(&results).len(), 4);
}

const CONFIG: &str = "# our run\n[training]\n# tuned by hand\nbatch_size = 64 # before the tuner\naccumulation_steps = 4\n";

#[test]
fn the_answer_is_printed_and_nothing_written_unless_asked() {
    let (_s, work, tmp) = places("print-only");
    std::fs::write(work.join("run.toml"), CONFIG).unwrap();
    let o = tuner(
        &["autobatch", "--config", "run.toml", "--workers", "0"],
        &[("FAKE_OOM_ABOVE", "50")],
        "0",
        &work,
        &tmp,
    );
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    assert!(o.stdout.contains("maximum 48"), "{}", o.stdout);
    // The config's effective batch, 64 x 4, in steps of at most the recommended 32 (80% of 48,
    // no memory limit known), printed for the config.
    assert!(
        o.stdout.contains(
            "for the config: batch size 32, accumulation steps 8 (--write FILE --key DOTTED.PATH puts them into a TOML, YAML or JSON file)"
        ),
        "{}",
        o.stdout
    );
    assert!(
        o.stdout.contains("team entry (--team FILE writes it)"),
        "{}",
        o.stdout
    );
    // Not the config, not a backup, not a team file, no trials left behind.
    assert_eq!(listing(&work), ["run.toml"]);
    assert_eq!(
        std::fs::read_to_string(work.join("run.toml")).unwrap(),
        CONFIG
    );
    assert!(listing(&tmp).is_empty(), "{:?}", listing(&tmp));
}

#[test]
fn the_answer_is_written_back_keeping_comments_and_the_team_file_keys_the_model() {
    let (_s, work, tmp) = places("write-back");
    std::fs::write(work.join("run.toml"), CONFIG).unwrap();
    let memory = ("FAKE_MEMORY", "600000000,40000000,79000000000");
    let gpu = ("FAKE_GPU_NAME", "Fake H100");
    let args = |model: &'static str| {
        vec![
            "autobatch",
            "--config",
            "run.toml",
            "--write",
            "--team",
            "team.toml",
            "--model-name",
            model,
            "--workers",
            "0",
            "--effective-batch",
            "4096",
        ]
    };
    let o = tuner(&args("resnet18"), &[memory, gpu], "0", &work, &tmp);
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    // 4096 in steps of at most the recommended 1856: 4 steps of 1024 keep it exactly.
    let written = std::fs::read_to_string(work.join("run.toml")).unwrap();
    assert!(
        written.starts_with("# our run\n[training]\n# tuned by hand\n"),
        "{written}"
    );
    assert!(
        written.contains("batch_size = 1024 # before the tuner"),
        "{written}"
    );
    assert!(written.contains("accumulation_steps = 4"), "{written}");
    assert_eq!(
        std::fs::read_to_string(work.join("run.toml.bak")).unwrap(),
        CONFIG
    );
    assert!(
        o.stdout
            .contains("wrote training.batch_size = 1024 and training.accumulation_steps = 4 into run.toml (backup run.toml.bak)"),
        "{}",
        o.stdout
    );
    // The answer under the split held for 20 steps in a run of its own.
    assert!(
        o.stdout.contains("**maximum 1960**: held for 20 steps"),
        "{}",
        o.stdout
    );
    // A second model on the same GPU type gets an entry of its own.
    let o = tuner(&args("vit"), &[memory, gpu], "0", &work, &tmp);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let mut team = Command::new(env!("CARGO_BIN_EXE_tuner"));
    team.args(["team", "team.toml"]);
    let t = run(team, "0", &work, &tmp);
    assert_eq!(t.code, 0, "{}", t.stderr);
    let mut missing = Command::new(env!("CARGO_BIN_EXE_tuner"));
    missing.args(["team", "missing.toml"]);
    let m = run(missing, "0", &work, &tmp);
    assert_eq!(
        m.code, 2,
        "a team file that is not there is bad usage: {}",
        m.stderr
    );
    assert!(
        m.stderr.contains("missing.toml: cannot read the team file"),
        "{}",
        m.stderr
    );
    assert!(
        t.stdout
            .contains("| Fake H100 | `resnet18` | 1024 | 4 | 4096 | fp32 |"),
        "{}",
        t.stdout
    );
    assert!(
        t.stdout
            .contains("| Fake H100 | `vit` | 1024 | 4 | 4096 | fp32 |"),
        "{}",
        t.stdout
    );
}

/// A usage error (exit 2) saying `says`, and nothing on stdout.
fn usage_error(o: &Out, args: &[&str], says: &str) {
    assert_eq!(o.code, 2, "{args:?}: {}", o.stderr);
    assert!(
        o.stderr.starts_with("error: ") && o.stderr.contains(says),
        "{args:?}: {}",
        o.stderr
    );
    assert!(o.stdout.is_empty(), "{args:?}: {}", o.stdout);
}

/// `tuner ARGS` with no trial expected: its output.
fn refused(args: &[&str], gpus: &str, work: &Path, tmp: &Path) -> Out {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tuner"));
    c.args(args);
    run(c, gpus, work, tmp)
}

#[test]
fn bad_input_is_one_line_before_any_trial() {
    let (_s, work, tmp) = places("bad");
    let fake = script();
    // Bad usage is 2, no GPU to see 3.
    let cases: Vec<(Vec<&str>, &str, &str)> = vec![
        (
            vec!["sweep", "--", "/nonexistent/train", "{batch_size}"],
            "0",
            "not an executable file",
        ),
        (
            vec!["autobatch", "--", "no-such-trainer"],
            "0",
            "not on PATH",
        ),
        (
            vec!["sweep", "--", "python3", &fake, "--b", "{batch}"],
            "0",
            "{batch} in the command is not a placeholder",
        ),
        (
            vec!["sweep", "--devices", "9", "--", "python3", &fake],
            "3,5",
            "GPU 9 is not visible",
        ),
        (
            vec!["sweep", "--devices", "1,1", "--", "python3", &fake],
            "3,5",
            "GPU 1 is named twice",
        ),
        (
            vec!["sweep", "--devices", "one", "--", "python3", &fake],
            "",
            "'one' is not a GPU number",
        ),
        (
            vec![
                "autobatch",
                "--",
                "torchrun",
                "--nproc-per-node",
                "2",
                &fake,
            ],
            "0,1",
            "torchrun starts ranks of its own",
        ),
        (
            vec!["memory", "--", "python3", &fake],
            "0",
            "give --batch-sizes",
        ),
        (
            vec![
                "autobatch",
                "--config",
                "missing.toml",
                "--write",
                "--",
                "python3",
                &fake,
            ],
            "0",
            "missing.toml",
        ),
        (
            vec!["sweep", "--", "python3", &fake],
            "",
            "CUDA_VISIBLE_DEVICES is set but empty",
        ),
        (
            vec!["autobatch", "--write", "--", "python3", &fake],
            "0",
            "--write without a FILE writes into the --config file",
        ),
    ];
    for (args, gpus, says) in cases {
        let o = refused(&args, gpus, &work, &tmp);
        let code = if says.contains("CUDA_VISIBLE_DEVICES") {
            3
        } else {
            2
        };
        assert_eq!(o.code, code, "{args:?}: {}", o.stderr);
        assert!(o.stderr.contains(says), "{args:?}: {}", o.stderr);
        assert_eq!(
            o.stderr.trim().lines().count(),
            1,
            "{args:?}: one line: {}",
            o.stderr
        );
        assert!(o.stdout.is_empty(), "{args:?}: {}", o.stdout);
    }
    assert!(listing(&work).is_empty() && listing(&tmp).is_empty());
    // What clap checks answers with its usage error (exit 2): a command is required, and the
    // tuner takes no model flags of its own.
    let clap: Vec<(Vec<&str>, &str)> = vec![
        (vec!["sweep", "--"], "<COMMAND>"),
        (vec!["sweep", "--devices", "0"], "<COMMAND>"),
        (
            vec!["sweep", "--preset", "large", "--", "python3", &fake],
            "unexpected argument '--preset'",
        ),
        (
            vec!["sweep", "--batch-size", "8", "--", "python3", &fake],
            "unexpected argument '--batch-size'",
        ),
        (
            vec!["autobatch", "--test-only", "--", "python3", &fake],
            "unexpected argument '--test-only'",
        ),
        (
            vec!["sweep", "--batch-sizes", "8,x", "--", "python3", &fake],
            "'x' is not a count",
        ),
        (
            vec!["sweep", "--time-limit", "0.5", "--", "python3", &fake],
            "at least 1",
        ),
        (
            vec!["sweep", "--stall-limit", "0", "--", "python3", &fake],
            "more than 0",
        ),
    ];
    for (args, says) in clap {
        let o = refused(&args, "0", &work, &tmp);
        usage_error(&o, &args, says);
    }
    assert!(listing(&work).is_empty() && listing(&tmp).is_empty());
}

/// A choice the command cannot make (one precision, one worker count for a finder or a memory
/// run) is refused before anything starts: no trial, no trials' folder, no Python parent
/// importing the program's modules.
#[test]
fn a_choice_the_command_cannot_make_is_refused_before_anything_starts() {
    let (_s, work, tmp) = places("one-choice");
    let fake = script();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["autobatch", "--amp", "both", "--", "python3", &fake],
            "--amp off, bf16, fp16 or on",
        ),
        (
            vec!["autobatch", "--workers", "0,4", "--", "python3", &fake],
            "--workers N",
        ),
        (
            vec![
                "memory",
                "--batch-sizes",
                "8",
                "--workers",
                "0,4",
                "--",
                "python3",
                &fake,
            ],
            "--workers N",
        ),
    ];
    for (args, says) in cases {
        let o = refused(&args, "0", &work, &tmp);
        assert_eq!(o.code, 2, "bad usage: {args:?}: {}", o.stderr);
        assert!(o.stderr.contains(says), "{args:?}: {}", o.stderr);
        assert_eq!(
            o.stderr.trim().lines().count(),
            1,
            "{args:?}: one line: {}",
            o.stderr
        );
        assert!(o.stdout.is_empty(), "{args:?}: {}", o.stdout);
        assert!(
            listing(&tmp).is_empty(),
            "{args:?} left {:?}",
            listing(&tmp)
        );
    }
    assert!(listing(&work).is_empty());
}

/// `tuner ARGS -- env VARS python3 fake_trainer.py ... --lr {lr}` on two stand-in GPUs.
fn grid(args: &[&str], vars: &[(&str, &str)], work: &Path, tmp: &Path) -> Out {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tuner"));
    cmd.args(args).arg("--").args(fake::argv(vars));
    cmd.args(["--lr", "{lr}"]);
    run(cmd, "3,5", work, tmp)
}

#[test]
fn a_grid_of_the_user_s_axes_runs_over_two_gpus_and_is_picked_by_loss() {
    let (s, work, tmp) = places("grid");
    let log = s.str("log.jsonl");
    let args = [
        "sweep",
        "--batch-sizes",
        "8,16",
        "--axis",
        "lr=0.001,0.01,1",
        "--axis",
        "opt=sgd,adam",
        "--steps",
        "2",
        "--warmup",
        "1",
        "--pick",
        "loss:min",
        "--json",
        "g.json",
    ];
    // `{opt}` inside an argument; batch 16 reports no loss; lr 1 diverges.
    let vars = [
        ("FAKE_LOG", log.as_str()),
        ("FAKE_TAG", "run-{opt}"),
        ("FAKE_NO_LOSS_BATCH", "16"),
    ];
    let o = grid(&args, &vars, &work, &tmp);
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    let report = json(&work.join("g.json"));
    let trials = report["trials"].as_array().unwrap();
    assert_eq!(trials.len(), 2 * 3 * 2, "batch x lr x opt");
    assert!(trials.iter().all(|t| t["status"] == "OK"), "{trials:?}");
    let mut combos: Vec<(u64, String, String)> = Vec::new();
    for t in trials {
        let axes = &t["params"]["axes"];
        let keys: Vec<&String> = axes.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["lr", "opt"], "the axes' order");
        let (lr, opt) = (axes["lr"].as_str().unwrap(), axes["opt"].as_str().unwrap());
        let command = t["command"].as_array().unwrap();
        let word = |w: &str| command.iter().any(|c| c == w);
        assert!(
            word(&format!("FAKE_TAG=run-{opt}")) && word(lr),
            "{command:?}"
        );
        combos.push((
            t["params"]["batch_size"].as_u64().unwrap(),
            lr.into(),
            opt.into(),
        ));
    }
    combos.sort();
    combos.dedup();
    assert_eq!(combos.len(), 12, "every combination once");
    // What each trial's program saw: its values as flags and in the environment, on one GPU.
    let entries = log_entries(Path::new(&log));
    assert_eq!(entries.len(), 12);
    let mut gpus = std::collections::BTreeSet::new();
    for e in &entries {
        let index = trial_of(e);
        let axes = &trials[index]["params"]["axes"];
        assert_eq!(e["env"]["PERF_LESSONS_LR"], axes["lr"]);
        assert_eq!(e["env"]["PERF_LESSONS_OPT"], axes["opt"]);
        let lr: f64 = axes["lr"].as_str().unwrap().parse().unwrap();
        assert_eq!(e["args"]["lr"].as_f64(), Some(lr));
        gpus.insert(e["cuda_visible_devices"].as_str().unwrap().to_string());
    }
    assert_eq!(gpus.into_iter().collect::<Vec<_>>(), ["3", "5"]);
    // Side by side on two GPUs, each trial ran on its GPU's share of the tuner's cores: what
    // the program saw is what its line of the JSON and the report's GPU lines say.
    let allowed = common::affinity::thread_cpus().unwrap();
    let mut shares = std::collections::BTreeMap::new();
    for e in &entries {
        let t = &trials[trial_of(e)];
        assert_eq!(e["cpus"], t["cpus"], "{t}");
        shares.insert(t["device"].as_str().unwrap().to_string(), e["cpus"].clone());
    }
    let share = |gpu: usize| -> Vec<usize> {
        serde_json::from_value(report["devices"][gpu]["cpus"].clone()).unwrap()
    };
    assert_eq!(shares["GPU 0"], serde_json::json!(share(0)));
    assert_eq!(shares["GPU 1"], serde_json::json!(share(1)));
    if allowed.len() >= 2 {
        let mut both = [share(0), share(1)].concat();
        both.sort_unstable();
        assert_eq!(both, allowed, "disjoint, and every core the tuner may use");
    }
    let cores = tuner::gpu::cpu_list(&share(1));
    assert!(
        o.stdout.contains(&format!("- GPU 1: CPU cores {cores}\n")),
        "{}",
        o.stdout
    );
    assert!(
        o.stdout.contains("| status | GPU | CPU cores |"),
        "{}",
        o.stdout
    );
    // The grid is in the sweep's JSON and in every trial's line.
    assert_eq!(report["settings"]["axes"][0]["name"], "lr");
    assert_eq!(report["settings"]["axes"][1]["values"][1], "adam");
    let jsonl = lines(&work.join("g.trials.jsonl"));
    assert!(jsonl.iter().all(|t| t["params"]["axes"]["opt"].is_string()));
    // Picked by the lowest loss: lr 0.01 at batch 8 (loss 1.0 = 0 + 8/8); batch 16 reported
    // none, lr 1 only NaN; the tie between the two optimizers goes to the first in order.
    let best = &report["best"];
    assert_eq!(best["picked_by"]["metric"], "loss");
    assert_eq!(best["picked_by"]["goal"], "min");
    let r = &best["recommended"];
    assert_eq!(r["key"]["batch"], 8);
    assert_eq!(r["key"]["axes"]["lr"], "0.01");
    assert_eq!(r["key"]["axes"]["opt"], "adam");
    assert_eq!(r["metric"], 1.0);
    // The table: a column per axis and per metric, and why a trial was not picked.
    let table = &o.stdout;
    assert!(
        table.contains("| batch | workers | AMP | lr | opt | data ms |"),
        "{table}"
    );
    assert!(table.contains("| samples/s | loss | accuracy |"), "{table}");
    let row = |start: &str| {
        table
            .lines()
            .find(|l| l.starts_with(start))
            .unwrap_or_else(|| panic!("no row {start}: {table}"))
            .to_string()
    };
    assert!(
        row("| 8 | 4 | off | 0.01 | adam |").contains("| 1.000 | 0.5000 |"),
        "{table}"
    );
    let said = [
        (row("| 8 | 4 | off | 1 | sgd |"), "| NaN | NaN |"),
        (row("| 8 | 4 | off | 1 | sgd |"), "OK: loss not a number (not picked)"),
        (row("| 16 | 4 | off | 0.001 | sgd |"), "OK: reported no loss (not picked)"),
        (table.clone(), "- recommended, by lowest loss: batch 8, workers 4, fp32, lr 0.01, opt adam: loss 1.000, the lowest loss of the 4 trial(s)"),
    ];
    for (text, says) in said {
        assert!(text.contains(says), "{says}: {text}");
    }
    // Throughput's picks stand beside it.
    assert!(table.contains("- highest throughput: batch 16"), "{table}");
}

#[test]
fn axes_and_picks_that_are_not_right_are_refused() {
    let (_s, work, tmp) = places("grid-bad");
    // Before any trial: one line (clap's own form for a flag's value), exit 2.
    let before: Vec<(Vec<&str>, &str)> = vec![
        (vec!["sweep", "--axis", "LR=0.1"], "lowercase identifier"),
        (vec!["sweep", "--axis", "lr"], "NAME=V1,V2"),
        (
            vec!["sweep", "--axis", "batch_size=8,16"],
            "the tuner's own {batch_size}",
        ),
        (vec!["sweep", "--axis", "lr=0.1,"], "empty value"),
        (
            vec!["sweep", "--axis", "lr=1", "--axis", "lr=2"],
            "given twice",
        ),
        (
            vec!["sweep", "--pick", "loss"],
            "not METRIC:min or METRIC:max",
        ),
        (
            vec!["sweep", "--pick", "loss:lowest"],
            "not METRIC:min or METRIC:max",
        ),
        (vec!["sweep"], "{lr} in the command is not a placeholder"),
        (
            vec!["memory", "--axis", "lr=0.1", "--batch-sizes", "8"],
            "unexpected argument '--axis'",
        ),
    ];
    for (args, says) in before {
        let o = grid(&args, &[], &work, &tmp);
        usage_error(&o, &args, says);
        let first = o.stderr.lines().next().unwrap();
        assert!(
            first.contains(says) || says.contains("unexpected"),
            "{args:?}: one line: {}",
            o.stderr
        );
    }
    assert!(listing(&work).is_empty() && listing(&tmp).is_empty());

    // A metric nobody reported is known only after the trials: they are kept, the pick refused.
    let args = [
        "sweep",
        "--batch-sizes",
        "8",
        "--axis",
        "lr=0.01,0.1",
        "--steps",
        "1",
        "--pick",
        "los:min",
        "--json",
        "p.json",
    ];
    let o = grid(&args, &[], &work, &tmp);
    assert_eq!(o.code, 2, "{}\n{}", o.stdout, o.stderr);
    assert_eq!(
        o.stderr.trim(),
        "error: --pick los: no trial reported a metric 'los'; the trials reported loss, accuracy"
    );
    assert!(
        o.stdout
            .contains("- recommended, by lowest los: none (--pick los: no trial"),
        "{}",
        o.stdout
    );
    let report = json(&work.join("p.json"));
    assert_eq!(report["trials"].as_array().unwrap().len(), 2);
    assert!(report["pick_error"].as_str().unwrap().contains("'los'"));
    assert_eq!(lines(&work.join("p.trials.jsonl")).len(), 2);
}

#[test]
fn a_data_parallel_answer_is_confirmed_twice_unless_asked_otherwise() {
    let (_s, work, tmp) = places("ranks-confirm");
    let held_at_maximum = |r: &Value| {
        (r["confirmations"].as_array().unwrap().iter())
            .filter(|c| c["held"] == true && c["batch_size"] == r["maximum"])
            .count()
    };
    let vars = [("FAKE_OOM_ABOVE", "100")];
    for (runs, expected) in [(None, 2), (Some("1"), 1), (Some("3"), 3)] {
        let mut args = vec![
            "autobatch",
            "--ranks",
            "2",
            "--workers",
            "0",
            "--json",
            "ab.json",
        ];
        args.extend(runs.iter().flat_map(|n| ["--confirm-runs", n]));
        let o = tuner(&args, &vars, "0,1", &work, &tmp);
        assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
        let r = json(&work.join("ab.json"));
        assert_eq!(r["maximum"], 96, "{runs:?}");
        assert_eq!(held_at_maximum(&r), expected, "{runs:?}");
        let said = match expected {
            1 => "**maximum 96**: held for 20 steps;".to_string(),
            n => format!("**maximum 96**: held for 20 steps in each of {n} runs"),
        };
        assert!(o.stdout.contains(&said), "{}", o.stdout);
    }
    let o = tuner(
        &["autobatch", "--confirm-runs", "0"],
        &vars,
        "0",
        &work,
        &tmp,
    );
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("--confirm-runs"), "{}", o.stderr);
}

#[test]
fn a_sweep_of_a_data_parallel_program_runs_each_trial_on_a_group() {
    let (s, work, tmp) = places("ranks");
    let log = s.str("log.jsonl");
    let args = [
        "sweep",
        "--ranks",
        "2",
        "--batch-sizes",
        "8,16,32",
        "--workers",
        "0",
        "--json",
        "out.json",
    ];
    // Rank 1's GPU holds 16 a GPU: batch 32 runs out of memory there, and the group with it.
    let vars = [("FAKE_LOG", log.as_str()), ("FAKE_OOM_ABOVE", "100,16")];
    let o = tuner(&args, &vars, "0,1", &work, &tmp);
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    let report = json(&work.join("out.json"));
    assert_eq!(report["settings"]["ranks"], 2);
    let trials = report["trials"].as_array().unwrap();
    let statuses: Vec<&str> = trials
        .iter()
        .map(|t| t["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["OK", "OK", "OOM"], "{}", o.stdout);
    for t in trials {
        assert_eq!(
            (&t["ranks"], &t["cuda_visible"]),
            (&2.into(), &"0,1".into())
        );
    }
    assert!(trials[2]["reason"]
        .as_str()
        .unwrap()
        .starts_with("rank 1 of 2"));
    // Two processes a trial that fits; of the other, the rank that ran out of memory, and its
    // partner's line only where it finished before the group was ended (on a loaded host the
    // fake's few steps can).
    let entries = log_entries(Path::new(&log));
    let outcomes = |batch: u64| -> Vec<(String, String)> {
        let mut o: Vec<(String, String)> = entries
            .iter()
            .filter(|e| e["args"]["batch_size"] == batch)
            .map(|e| {
                let rank = e["torchrun"]["RANK"].as_str().unwrap_or("?").to_string();
                (rank, e["outcome"].as_str().unwrap().to_string())
            })
            .collect();
        o.sort();
        o
    };
    let ok = |rank: &str| (rank.to_string(), "ok".to_string());
    assert_eq!(outcomes(8), [ok("0"), ok("1")]);
    assert_eq!(outcomes(16), [ok("0"), ok("1")]);
    let last = outcomes(32);
    let oom = ("1".to_string(), "oom".to_string());
    assert!(last == [oom.clone()] || last == [ok("0"), oom], "{last:?}");

    // More ranks than GPUs: one line, before anything runs.
    let o = tuner(&["sweep", "--ranks", "3"], &[], "0,1", &work, &tmp);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert_eq!(o.stderr.lines().count(), 1, "{}", o.stderr);
    assert!(o.stderr.contains("--ranks 3"), "{}", o.stderr);
}
