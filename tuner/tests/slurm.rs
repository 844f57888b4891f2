//! A sweep as a Slurm array job, against the fake training program, with no Slurm: the plan
//! written by `sweep --slurm DIR`, each task run by hand as an array task would run it, and the
//! report gathered from their results, which must be the report a local sweep of the same
//! trials makes.

mod fake;

use std::path::Path;
use std::process::Command;

use fake::{argv, places, run, tuner, Out};
use serde_json::Value;

fn json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

/// `tuner ARGS` (no command after it) in `work`, on stand-in GPU 5, with `env` set.
fn tuner_bare(args: &[&str], env: &[(&str, &str)], work: &Path, tmp: &Path) -> Out {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tuner"));
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    run(cmd, "5", work, tmp)
}

/// The grid both ways run: batch 32 runs out of memory, so 64 is skipped after it.
const GRID: [&str; 10] = [
    "sweep",
    "--batch-sizes",
    "8,16,32,64",
    "--workers",
    "0,2",
    "--steps",
    "2",
    "--warmup",
    "1",
    "--quiet",
];
const FAKE: [(&str, &str); 1] = [("FAKE_OOM_ABOVE", "16")];

/// What must agree between a local sweep's JSON and a gathered one.
fn essentials(report: &Value) -> Value {
    let trials: Vec<Value> = report["trials"]
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

#[test]
fn tasks_run_by_hand_then_gathered_make_the_local_sweep_s_report() {
    let (s, work, tmp) = places("slurm-gather");
    let local = tuner(
        &[&GRID[..], &["--json", "local.json"]].concat(),
        &FAKE,
        "5",
        &work,
        &tmp,
    );
    assert_eq!(local.code, 0, "{}\n{}", local.stdout, local.stderr);

    let dir = s.str("plan");
    let planned = tuner(
        &[
            &GRID[..],
            &["--slurm", &dir, "--no-submit", "--json", "gathered.json"],
        ]
        .concat(),
        &FAKE,
        "5",
        &work,
        &tmp,
    );
    assert_eq!(planned.code, 0, "{}", planned.stderr);
    let plan = json(&Path::new(&dir).join("plan.json"));
    assert_eq!(plan["schema_version"], 1);
    assert_eq!(plan["trials"].as_array().unwrap().len(), 8);
    assert_eq!(plan["command"].as_array().unwrap().len(), argv(&FAKE).len());

    // Before any task: every trial unfinished, no pick, exit 1.
    let early = tuner_bare(&["gather", &dir, "--json", "early.json"], &[], &work, &tmp);
    assert_eq!(early.code, 1, "{}", early.stderr);
    let statuses = |r: &Value| -> Vec<String> {
        let trials = r["trials"].as_array().unwrap();
        trials
            .iter()
            .map(|t| t["status"].as_str().unwrap().to_string())
            .collect()
    };
    assert!(statuses(&json(&work.join("early.json")))
        .iter()
        .all(|s| s == "UNFINISHED"));
    assert!(early.stdout.contains("UNFINISHED"), "{}", early.stdout);

    // Every task, the largest batches first, so batch 64 runs before 32 has run out of memory:
    // the skip rule still holds at gather time. Trial 7 (batch 64, workers 2) is run through
    // SLURM_ARRAY_TASK_ID, as an array task is.
    for i in (0..7).rev() {
        let t = tuner_bare(&["task", &dir, &i.to_string()], &[], &work, &tmp);
        assert_eq!(t.code, 0, "task {i}: {}", t.stderr);
    }
    let t = tuner_bare(
        &["task", &dir],
        &[("SLURM_ARRAY_TASK_ID", "7")],
        &work,
        &tmp,
    );
    assert_eq!(t.code, 0, "{}", t.stderr);
    assert!(
        t.stdout.starts_with("trial 7: batch 64, workers 2"),
        "{}",
        t.stdout
    );
    let ran_anyway = json(&Path::new(&dir).join("results/003.json"));
    assert_eq!(
        ran_anyway["result"]["status"], "OOM",
        "batch 64 ran before 32's OOM"
    );
    // Trial 7 ran after trial 6 (batch 32, workers 2) ran out of memory: skipped at once.
    let skipped = json(&Path::new(&dir).join("results/007.json"));
    assert_eq!(skipped["result"]["status"], "SKIPPED");

    let gathered = tuner_bare(&["gather", &dir], &[], &work, &tmp);
    assert_eq!(gathered.code, 0, "{}", gathered.stderr);
    let local = json(&work.join("local.json"));
    let gathered_json = json(&work.join("gathered.json"));
    assert_eq!(essentials(&gathered_json), essentials(&local));
    assert_eq!(
        statuses(&gathered_json),
        ["OK", "OK", "OOM", "SKIPPED", "OK", "OK", "OOM", "SKIPPED"]
    );
    assert!(
        gathered_json["launch"]
            .as_str()
            .unwrap()
            .contains("Slurm array job"),
        "{}",
        gathered_json["launch"]
    );
    assert!(
        gathered.stdout.contains("- recommended: batch 16, workers"),
        "{}",
        gathered.stdout
    );
}

#[test]
fn a_partly_run_plan_gathers_what_finished() {
    let (s, work, tmp) = places("slurm-partial");
    let dir = s.str("plan");
    let planned = tuner(
        &[&GRID[..], &["--slurm", &dir, "--no-submit"]].concat(),
        &FAKE,
        "5",
        &work,
        &tmp,
    );
    assert_eq!(planned.code, 0, "{}", planned.stderr);
    for i in [0, 1] {
        let t = tuner_bare(&["task", &dir, &i.to_string()], &[], &work, &tmp);
        assert_eq!(t.code, 0, "{}", t.stderr);
    }
    let g = tuner_bare(&["gather", &dir, "--json", "-"], &[], &work, &tmp);
    assert_eq!(g.code, 0, "{}", g.stderr);
    let report: Value = serde_json::from_str(&g.stdout).unwrap();
    let ok = report["trials"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["status"] == "OK")
        .count();
    assert_eq!(ok, 2);
    assert_eq!(report["best"]["highest_throughput"]["key"]["batch"], 16);
    assert!(
        g.stderr.contains("UNFINISHED: no result yet"),
        "the unfinished trials are named: {}",
        g.stderr
    );
}

#[test]
fn bad_plans_and_tasks_are_one_line_and_exit_2() {
    let (s, work, tmp) = places("slurm-bad");
    let dir = s.str("plan");
    let plan = |extra: &[&str]| {
        tuner(
            &[&GRID[..], &["--slurm", &dir, "--no-submit"], extra].concat(),
            &FAKE,
            "5",
            &work,
            &tmp,
        )
    };
    assert_eq!(plan(&[]).code, 0);
    let one_line = |o: &Out, says: &str| {
        assert_eq!(o.code, 2, "{}\n{}", o.stdout, o.stderr);
        assert_eq!(o.stderr.lines().count(), 1, "{}", o.stderr);
        assert!(o.stderr.contains(says), "{says}: {}", o.stderr);
    };
    one_line(&plan(&[]), "already holds a plan");
    one_line(
        &tuner_bare(&["task", &dir, "8"], &[], &work, &tmp),
        "the plan has 8 trials",
    );
    one_line(
        &tuner_bare(&["task", &dir], &[], &work, &tmp),
        "SLURM_ARRAY_TASK_ID",
    );
    one_line(
        &tuner_bare(
            &["task", &dir],
            &[("SLURM_ARRAY_TASK_ID", "x")],
            &work,
            &tmp,
        ),
        "not a trial number",
    );
    one_line(
        &tuner_bare(&["gather", &s.str("nowhere")], &[], &work, &tmp),
        "plan.json",
    );
    // A plan of another version is refused whole.
    let path = Path::new(&dir).join("plan.json");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        text.replace("\"schema_version\": 1", "\"schema_version\": 9"),
    )
    .unwrap();
    one_line(
        &tuner_bare(&["gather", &dir], &[], &work, &tmp),
        "schema version 9",
    );
    one_line(
        &tuner_bare(&["task", &dir, "0"], &[], &work, &tmp),
        "schema version 9",
    );
    // The Slurm flags need --slurm.
    let o = tuner(&["sweep", "--max-parallel", "2"], &FAKE, "5", &work, &tmp);
    assert_eq!(o.code, 2, "{}", o.stderr);
}
