//! A sweep as a Slurm array job, against the fake training program, with no Slurm: the plan
//! written by `sweep --slurm DIR`, each task run by hand as an array task would run it, and the
//! report gathered from their results, which must be the report a local sweep of the same
//! trials makes.

mod fake;

use std::path::Path;
use std::process::Command;

use fake::{argv, essentials, json, places, run, statuses, tuner, Out, FINDER};
use serde_json::Value;

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
    assert_eq!(plan["schema_version"], 3);
    assert_eq!(plan["trials"].as_array().unwrap().len(), 8);
    assert_eq!(plan["command"].as_array().unwrap().len(), argv(&FAKE).len());

    // Before any task: every trial unfinished, no pick, exit 1.
    let early = tuner_bare(&["gather", &dir, "--json", "early.json"], &[], &work, &tmp);
    assert_eq!(early.code, 1, "{}", early.stderr);
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
        text.replace("\"schema_version\": 3", "\"schema_version\": 9"),
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

/// Stand-ins for sbatch, squeue and sacct in `bin`: sbatch logs its arguments, refuses where
/// FAKE_SBATCH_REFUSE says why, runs every array task of the script in turn as Slurm would
/// (SLURM_ARRAY_TASK_ID, the script's output files) but those in FAKE_SBATCH_CANCEL (a line
/// of slurmstepd's on stderr) and FAKE_SBATCH_LOST (nothing, as on a node that does not see
/// the folder), and
/// prints job id 4242 (a script of no array it runs once, job 4243); squeue lists one running task the first time it is asked, none after;
/// sacct prints FAKE_SACCT.
fn stand_ins(bin: &Path) {
    std::fs::create_dir_all(bin).unwrap();
    let sbatch = r#"#!/bin/sh
here=$(dirname "$0")
echo "$@" >> "$here/sbatch.log"
if [ -n "$FAKE_SBATCH_REFUSE" ]; then
  echo "sbatch: error: $FAKE_SBATCH_REFUSE" >&2
  exit 1
fi
for a in "$@"; do script="$a"; done
cp "$script" "$here/submitted.sh"
last=$(sed -n 's/^#SBATCH --array=0-\([0-9]*\).*/\1/p' "$script")
out=$(sed -n 's/^#SBATCH --output=//p' "$script")
err=$(sed -n 's/^#SBATCH --error=//p' "$script")
if [ -z "$last" ]; then
  sh "$script" > "$out" 2> "$err"
  echo "4243"
  exit 0
fi
i=0
while [ "$i" -le "$last" ]; do
  n=$(printf %03d "$i")
  o=$(echo "$out" | sed "s/%3a/$n/")
  e=$(echo "$err" | sed "s/%3a/$n/")
  case " $FAKE_SBATCH_LOST " in
    *" $i "*) i=$((i + 1)); continue ;;
  esac
  case " $FAKE_SBATCH_CANCEL " in
    *" $i "*) echo "slurmstepd: error: *** JOB 4242 CANCELLED ***" > "$e" ;;
    *) SLURM_ARRAY_TASK_ID=$i sh "$script" > "$o" 2> "$e" ;;
  esac
  i=$((i + 1))
done
echo "4242;cluster"
"#;
    let squeue = r#"#!/bin/sh
here=$(dirname "$0")
echo "$@" >> "$here/squeue.log"
if [ ! -e "$here/squeue.seen" ]; then touch "$here/squeue.seen"; echo RUNNING; fi
"#;
    let sacct = "#!/bin/sh\nprintf '%s\\n' \"$FAKE_SACCT\"\n";
    for (name, text) in [("sbatch", sbatch), ("squeue", squeue), ("sacct", sacct)] {
        let path = bin.join(name);
        std::fs::write(&path, text).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

/// `tuner sweep GRID ARGS -- fake` with the stand-ins first on the PATH and `env` set.
fn slurm_sweep(args: &[&str], env: &[(&str, &str)], bin: &Path, work: &Path, tmp: &Path) -> Out {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tuner"));
    cmd.args(GRID).args(args).arg("--").args(argv(&FAKE));
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    cmd.env("PATH", path).env("PERF_LESSONS_SLURM_POLL_S", "0");
    for (k, v) in env {
        cmd.env(k, v);
    }
    run(cmd, "5", work, tmp)
}

fn log(bin: &Path, name: &str) -> Vec<String> {
    let text = std::fs::read_to_string(bin.join(name)).unwrap_or_default();
    text.lines().map(String::from).collect()
}

#[test]
fn submitted_once_waited_for_and_gathered_as_a_local_sweep() {
    let (s, work, tmp) = places("slurm-submit");
    let bin = s.path("bin");
    stand_ins(&bin);
    let local = tuner(
        &[&GRID[..], &["--json", "local.json"]].concat(),
        &FAKE,
        "5",
        &work,
        &tmp,
    );
    assert_eq!(local.code, 0, "{}", local.stderr);
    let dir = s.str("plan");
    let flags = [
        "--slurm",
        &dir,
        "--max-parallel",
        "3",
        "--sbatch=--partition=gpu",
        "--sbatch",
        "--time=10:00",
        "--json",
        "slurm.json",
    ];
    let o = slurm_sweep(&flags, &[], &bin, &work, &tmp);
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    assert_eq!(log(&bin, "sbatch.log").len(), 1, "submitted once");
    let script = std::fs::read_to_string(bin.join("submitted.sh")).unwrap();
    for line in [
        "#SBATCH --array=0-7%3",
        "#SBATCH --gres=gpu:1",
        "#SBATCH --partition=gpu",
        "#SBATCH --time=10:00",
    ] {
        assert!(script.lines().any(|l| l == line), "{line}:\n{script}");
    }
    assert_eq!(json(&Path::new(&dir).join("job.json"))["job_id"], "4242");
    // Waited: squeue asked until the job left the queue, progress on stderr (the other
    // squeue, of every state, is gather's, where sacct said nothing).
    let waits = log(&bin, "squeue.log");
    let waits: Vec<&String> = waits.iter().filter(|l| !l.contains("-t all")).collect();
    assert_eq!(waits.len(), 2, "{}", o.stderr);
    assert!(
        o.stderr
            .contains("submitted Slurm array job 4242: 8 trials"),
        "{}",
        o.stderr
    );
    for line in [
        "job 4242: 0 pending, 1 running, 7 done; 8/8 trials have results",
        "job 4242: 0 pending, 0 running, 8 done; 8/8 trials have results",
    ] {
        assert!(o.stderr.lines().any(|l| l == line), "{line}: {}", o.stderr);
    }
    let gathered = json(&work.join("slurm.json"));
    assert_eq!(
        essentials(&gathered),
        essentials(&json(&work.join("local.json")))
    );
    assert!(o.stdout.contains("Slurm array job 4242"), "{}", o.stdout);

    // The same folder again: refused, nothing submitted.
    let again = slurm_sweep(&flags, &[], &bin, &work, &tmp);
    assert_eq!(again.code, 2, "{}", again.stderr);
    assert!(
        again.stderr.contains("already holds a plan"),
        "{}",
        again.stderr
    );
    assert_eq!(log(&bin, "sbatch.log").len(), 1);
}

#[test]
fn a_cancelled_task_is_named_with_its_slurm_state_and_stderr() {
    let (s, work, tmp) = places("slurm-cancel");
    let bin = s.path("bin");
    stand_ins(&bin);
    let dir = s.str("plan");
    let env = [
        ("FAKE_SBATCH_CANCEL", "1"),
        ("FAKE_SACCT", "4242_0|COMPLETED\n4242_1|CANCELLED by 0"),
    ];
    let o = slurm_sweep(&["--slurm", &dir, "--no-wait"], &env, &bin, &work, &tmp);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stdout.contains("tuner gather"), "{}", o.stdout);
    assert!(
        log(&bin, "squeue.log").is_empty(),
        "--no-wait does not wait"
    );
    let mut gather = Command::new(env!("CARGO_BIN_EXE_tuner"));
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    gather
        .args(["gather", &dir, "--json", "g.json"])
        .env("PATH", path);
    gather.env("FAKE_SACCT", env[1].1);
    let g = run(gather, "5", &work, &tmp);
    assert_eq!(g.code, 0, "{}", g.stderr);
    let report = json(&work.join("g.json"));
    let t = &report["trials"][1];
    assert_eq!(t["status"], "UNFINISHED");
    assert_eq!(t["reason"], "no result; Slurm state CANCELLED by 0");
    assert!(
        g.stdout.contains("trial 1 (batch 16, workers 0, amp off): UNFINISHED: no result; Slurm state CANCELLED by 0; stderr ended with: slurmstepd: error: *** JOB 4242 CANCELLED ***"),
        "{}",
        g.stdout
    );
}

#[test]
fn sbatch_missing_or_refusing_is_one_line_and_nothing_is_submitted_twice() {
    let (s, work, tmp) = places("slurm-refused");
    let bin = s.path("bin");
    let dir = s.str("plan");
    // No sbatch on the PATH (only what the command runs): nothing written.
    let only = s.path("no-sbatch");
    std::fs::create_dir_all(&only).unwrap();
    common::testing::link_system_tools(&only, &["env", "python3"]);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tuner"));
    cmd.args(GRID)
        .args(["--slurm", &dir])
        .arg("--")
        .args(argv(&FAKE));
    cmd.env("PATH", &only);
    let o = run(cmd, "5", &work, &tmp);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert_eq!(o.stderr.lines().count(), 1, "{}", o.stderr);
    assert!(
        o.stderr.contains("sbatch is not on the PATH"),
        "{}",
        o.stderr
    );
    assert!(!Path::new(&dir).exists());

    stand_ins(&bin);
    let refuse = [("FAKE_SBATCH_REFUSE", "invalid partition specified: nope")];
    let o = slurm_sweep(&["--slurm", &dir], &refuse, &bin, &work, &tmp);
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert_eq!(o.stderr.lines().count(), 1, "{}", o.stderr);
    assert!(
        o.stderr.contains("sbatch refused the job: exit status 1 (sbatch: error: invalid partition specified: nope); nothing was submitted"),
        "{}",
        o.stderr
    );
    assert!(!Path::new(&dir).join("plan.json").exists());
    // Mended, the same command submits once.
    let o = slurm_sweep(&["--slurm", &dir], &[], &bin, &work, &tmp);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(log(&bin, "sbatch.log").len(), 2);
}

/// The lines of a finder's answer that do not hold times.
fn answer_lines(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| {
            [
                "**maximum",
                "maximum ",
                "for the config:",
                "Hydra:",
                "LightningCLI:",
            ]
            .iter()
            .any(|p| l.starts_with(p))
        })
        .collect()
}

#[test]
fn the_batch_finder_is_one_job_whose_answer_comes_back_through_the_folder() {
    let (s, work, tmp) = places("slurm-autobatch");
    let bin = s.path("bin");
    stand_ins(&bin);
    let vars = [("FAKE_OOM_ABOVE", "40")];
    let local = tuner(&FINDER, &vars, "5", &work, &tmp);
    assert_eq!(local.code, 0, "{}", local.stderr);
    assert_eq!(answer_lines(&local.stdout).len(), 5, "{}", local.stdout);

    let dir = s.str("finder");
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let submit = |dir: &str, extra: &[&str], vars: &[(&str, &str)]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tuner"));
        cmd.args(FINDER)
            .args(["--slurm", dir, "--sbatch=--partition=gpu"])
            .args(extra)
            .arg("--")
            .args(argv(vars))
            .env("PATH", &path)
            .env("PERF_LESSONS_SLURM_POLL_S", "0");
        run(cmd, "5", &work, &tmp)
    };
    let o = submit(&dir, &["--json", "finder.json"], &vars);
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    assert_eq!(answer_lines(&o.stdout), answer_lines(&local.stdout));
    assert!(
        o.stderr
            .contains("submitted Slurm job 4243: the batch finder"),
        "{}",
        o.stderr
    );
    assert!(
        o.stderr.contains("job 4243: the answer is in"),
        "{}",
        o.stderr
    );
    let script = std::fs::read_to_string(bin.join("submitted.sh")).unwrap();
    for line in [
        "#SBATCH --job-name=tuner-autobatch",
        "#SBATCH --gres=gpu:1",
        "#SBATCH --partition=gpu",
    ] {
        assert!(script.lines().any(|l| l == line), "{line}:\n{script}");
    }
    assert!(!script.contains("--array"), "{script}");
    let report = json(&work.join("finder.json"));
    assert_eq!(report["maximum"], 40);
    assert_eq!(report["schema"], "tuner-autobatch/2");

    // gather prints the same answer, at any time after.
    let g = tuner_bare(&["gather", &dir, "--json", "again.json"], &[], &work, &tmp);
    assert_eq!(g.code, 0, "{}", g.stderr);
    assert_eq!(g.stdout, o.stdout);
    assert_eq!(json(&work.join("again.json"))["maximum"], 40);

    // A finder that fails: no answer, the Slurm state and what the job said, exit 1.
    let failed = s.str("failed");
    let o = submit(&failed, &[], &[("FAKE_MODE", "fail")]);
    assert_eq!(o.code, 1, "{}\n{}", o.stdout, o.stderr);
    let mut gather = Command::new(env!("CARGO_BIN_EXE_tuner"));
    gather
        .args(["gather", &failed])
        .env("PATH", &path)
        .env("FAKE_SACCT", "4243|FAILED");
    let g = run(gather, "5", &work, &tmp);
    assert_eq!(g.code, 1, "{}", g.stderr);
    assert_eq!(g.stderr.lines().count(), 1, "{}", g.stderr);
    assert!(
        g.stderr.contains("the batch finder (Slurm job 4243) ended without an answer: Slurm state FAILED; it printed: error: "),
        "{}",
        g.stderr
    );
    // --max-parallel is a sweep's.
    let o = submit(&s.str("parallel"), &["--max-parallel", "2"], &vars);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(
        o.stderr.contains("--max-parallel is a sweep's"),
        "{}",
        o.stderr
    );
}

#[test]
fn a_folder_the_nodes_cannot_see_or_the_submitter_cannot_write_is_named_in_one_line() {
    let (s, work, tmp) = places("slurm-unshared");
    let bin = s.path("bin");
    stand_ins(&bin);
    // A task on a node where the folder is not there.
    let t = tuner_bare(
        &["task", &s.str("elsewhere/plan"), "0"],
        &[("SLURMD_NODENAME", "gpu7")],
        &work,
        &tmp,
    );
    assert_eq!(t.code, 2, "{}", t.stderr);
    assert_eq!(t.stderr.lines().count(), 1, "{}", t.stderr);
    assert!(
        t.stderr.contains(
            "is not there on node gpu7: the folder of a Slurm run must be on shared storage"
        ),
        "{}",
        t.stderr
    );
    // A task that failed leaving nothing in the folder (Slurm could not open its output there).
    let dir = s.str("plan");
    let env = [
        ("FAKE_SBATCH_LOST", "1"),
        ("FAKE_SACCT", "4242_0|COMPLETED\n4242_1|FAILED"),
    ];
    let o = slurm_sweep(&["--slurm", &dir], &env, &bin, &work, &tmp);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        o.stdout.contains(&format!("trial 1 (batch 16, workers 0, amp off): UNFINISHED: no result; Slurm state FAILED; it left no output in {dir}: the folder must be on shared storage that every node sees")),
        "{}",
        o.stdout
    );
    // A folder that cannot be made: one line, nothing submitted.
    std::fs::write(s.path("file"), "").unwrap();
    let inside_a_file = s.str("file/plan");
    let o = slurm_sweep(&["--slurm", &inside_a_file], &[], &bin, &work, &tmp);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert_eq!(o.stderr.lines().count(), 1, "{}", o.stderr);
    assert!(o.stderr.contains("cannot create"), "{}", o.stderr);
    assert_eq!(
        log(&bin, "sbatch.log").len(),
        1,
        "only the first sweep was submitted"
    );
}
