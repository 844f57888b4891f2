//! The PyTorch example beside the tuner, checked without PyTorch or a GPU: its config reads as
//! a tuner config, its scripts compile, the one-file reporter writes the protocol the tuner
//! reads (and nothing outside the tuner), the training script and Lightning's finder answer bad
//! flags at once, and the fresh-process check of an answer reads the fake trainer right.

mod fake;

use std::path::PathBuf;
use std::process::Command;

use fake::Scratch;
use tuner::protocol::ReportFile;

fn examples() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/pytorch"))
}

fn python(args: &[&str]) -> Command {
    let mut c = Command::new("python3");
    c.args(args).current_dir(examples());
    for (k, _) in std::env::vars() {
        if k.starts_with("PERF_LESSONS_") {
            c.env_remove(k);
        }
    }
    c
}

#[test]
fn the_example_config_is_a_tuner_config() {
    let overrides =
        tuner::config::load(&examples().join("train_resnet.toml"), Default::default()).unwrap();
    let s = overrides.resolve().unwrap();
    assert_eq!(s.workers, vec![0, 4, 8]);
    assert_eq!(s.batch_sizes, vec![32, 64, 128, 256]);
    use tuner::program::Precision::{Off, On};
    assert_eq!(s.amp, [Off, On]);
    assert_eq!((s.steps, s.warmup_steps), (30, 5));
    assert_eq!((s.batch_size, s.accumulation_steps), (Some(128), 1));
}

#[test]
fn the_example_scripts_compile() {
    let dir = Scratch::new("compile");
    for script in [
        "perf_lessons_report.py",
        "train_resnet.py",
        "train_resnet_ddp.py",
        "train_resnet_lightning.py",
        "lightning_batch_finder.py",
        "check_fit.py",
    ] {
        let out = python(&[
            "-c",
            "import py_compile, sys; py_compile.compile(sys.argv[1], cfile=sys.argv[2], doraise=True)",
            script,
            &dir.str("out.pyc"),
        ])
        .output()
        .expect("python3 runs");
        assert!(
            out.status.success(),
            "{script}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

const USE_THE_REPORTER: &str = r#"
import time
from perf_lessons_report import Reporter, setting
r = Reporter()
print("enabled" if r.enabled else "disabled")
time.sleep(0.02)
r.step(samples=32)
r.device(name="GPU X", total_bytes=1000, free_bytes=900)
r.step(samples=32, step_s=0.5, forward_s=0.1, data_s=float("nan"), peak_memory_bytes=123,
       metrics={"loss": 2.5, "grad_norm": float("inf")})
try:
    r.step(samples=1, fwd_s=1.0)
except TypeError as e:
    print("refused:", e)
try:
    r.step(samples=1, metrics={"loss": "low"})
except TypeError as e:
    print("refused:", e)
r.end(samples_per_s=64.0, metrics={"loss": 2.25})
r.close()
print(setting("BATCH_SIZE", 7), setting("AMP", False), setting("WORKERS", 3))
"#;

#[test]
fn the_memory_check_of_real_models_answers_without_a_gpu_in_one_line() {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../scripts/memory_parts_check.py"
    );
    for (args, says) in [
        (vec![], "memory_parts_check.py: "),
        (
            vec!["--tuner", "bert=x.json"],
            "--tuner takes resnet=FILE or vit=FILE",
        ),
    ] {
        let out = python(&[script]).args(&args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(!stderr.contains("Traceback"), "{stderr}");
    }
}

#[test]
fn the_reporter_writes_the_protocol_and_nothing_outside_the_tuner() {
    let dir = Scratch::new("reporter");
    let report = dir.path("report.jsonl");
    let out = python(&["-c", USE_THE_REPORTER])
        .env("PERF_LESSONS_REPORT", &report)
        .env("PERF_LESSONS_BATCH_SIZE", "48")
        // What `--amp on` reaches a program as: a precision, which is on as a bool.
        .env("PERF_LESSONS_AMP", "bf16")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.starts_with("enabled\n"), "{stdout}");
    assert!(
        stdout.contains("refused: unknown phase(s) ['fwd_s']"),
        "{stdout}"
    );
    assert!(
        stdout.contains("refused: metric 'loss' must be a number, got 'low'"),
        "{stdout}"
    );
    assert!(stdout.ends_with("48 True 3\n"), "{stdout}");

    // Every line is the protocol's, field for field: the records the tuner reads and mlp-train
    // writes (common::protocol) are the Python reporter's too.
    let text = std::fs::read_to_string(&report).unwrap();
    for line in text.lines() {
        common::protocol::check_line(line).unwrap_or_else(|e| panic!("{e}: {line}"));
    }
    // A rank of a group writes its rank on each line, and the records have it.
    let ranks = Scratch::new("reporter-rank");
    let ranked = ranks.path("report.jsonl");
    let out = python(&["-c", USE_THE_REPORTER])
        .env("PERF_LESSONS_REPORT", &ranked)
        .env("WORLD_SIZE", "2")
        .env("RANK", "1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&ranked).unwrap();
    assert!(text.lines().count() >= 4, "{text}");
    for line in text.lines() {
        assert!(line.contains("\"rank\":1"), "{line}");
        common::protocol::check_line(line).unwrap_or_else(|e| panic!("{e}: {line}"));
    }

    let r = ReportFile::read(&report);
    assert_eq!((r.health.lines, r.health.bad_lines), (4, 0));
    let device = r.device.as_ref().expect("the device line");
    assert_eq!(device.name.as_deref(), Some("GPU X"));
    assert_eq!(
        (device.total_bytes, device.free_bytes),
        (Some(1000), Some(900))
    );
    assert_eq!(r.steps.len(), 2, "the refused steps wrote nothing");
    assert!(
        r.steps[0].step_s >= 0.02,
        "time since the Reporter was made"
    );
    assert_eq!(r.steps[1].step_s, 0.5);
    assert_eq!(r.steps[1].forward_s, Some(0.1));
    assert_eq!(r.steps[1].data_s, None, "a NaN phase is left out");
    assert_eq!(r.steps[1].peak_memory_bytes, Some(123));
    let metrics = &r.steps[1].metrics;
    assert_eq!(metrics.get("loss"), Some(&Some(2.5)));
    assert_eq!(metrics.get("grad_norm"), Some(&None), "not finite: null");
    let end = r.end.unwrap();
    assert_eq!(end.samples_per_s, Some(64.0));
    assert_eq!(end.metrics.get("loss"), Some(&Some(2.25)));

    // Outside the tuner: every call does nothing, no file appears.
    let out = python(&["-c", USE_THE_REPORTER])
        .current_dir(&dir.0)
        .env("PYTHONPATH", examples())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("disabled\n"));
    let left: Vec<_> = std::fs::read_dir(&dir.0).unwrap().collect();
    assert_eq!(left.len(), 1, "only the report of the first run: {left:?}");
}

/// A script refuses a bad flag at once: exit 2 and a line that `says` why, no traceback.
fn refuses(mut script: Command, says: &str) {
    let out = script.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let what = format!("{:?}", script.get_args().collect::<Vec<_>>());
    assert_eq!(out.status.code(), Some(2), "{what}: {err}");
    assert!(err.contains(says), "{what}: {err}");
    assert!(!err.contains("Traceback"), "{what}: {err}");
}

#[test]
fn the_training_script_answers_bad_flags_without_pytorch() {
    for (flag, value, says) in [
        ("--batch-size", "0", "must be at least 1"),
        ("--workers", "-1", "must be 0 or more"),
        ("--amp", "maybe", "invalid choice"),
        ("--steps", "x", "invalid positive value"),
        ("--memory-limit", "0", "must be more than 0 GiB"),
        ("--memory-limit", "lots", "invalid gibibytes value"),
    ] {
        for script in ["train_resnet.py", "train_resnet_ddp.py"] {
            refuses(python(&[script, flag, value]), says);
        }
    }
    let out = python(&["train_resnet.py", "--help"]).output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("--accumulation"));
}

/// Each script that takes `--amp` takes every precision the tuner passes (and `on`, for a run
/// of its own), and parses it without PyTorch.
#[test]
fn the_scripts_take_every_precision() {
    let package = concat!(env!("CARGO_MANIFEST_DIR"), "/../python");
    let parse = r#"
import importlib, sys
script, extra = sys.argv[1], sys.argv[2:]
module = importlib.import_module(script)
print(" ".join(module.parse_args(extra + ["--amp", p]).amp for p in ("off", "bf16", "fp16", "on")))
"#;
    for (script, extra) in [
        ("train_resnet", &[][..]),
        ("train_resnet_lightning", &[]),
        ("lightning_batch_finder", &[]),
        ("check_fit", &["96"]),
    ] {
        let mut args = vec!["-c", parse, script];
        args.extend_from_slice(extra);
        let out = python(&args).env("PYTHONPATH", package).output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{script}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(stdout.trim(), "off bf16 fp16 on", "{script}");
    }
    refuses(
        python(&["check_fit.py", "96", "--amp", "fp8"]),
        "invalid choice",
    );
    refuses(
        python(&["lightning_batch_finder.py", "--amp", "both"]),
        "invalid choice",
    );
    let out = python(&["train_resnet.py", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout).replace(char::is_whitespace, "");
    assert!(help.contains("gradientscaler"), "{help}");
}

/// The in-process finders' result (Lightning's here, Hugging Face's beside the transformer
/// scripts): each trial's row, fitting when it ran every step of a trial, and the record's
/// times and settings, built without a GPU from a stand-in PyTorch.
#[test]
fn an_in_process_finder_s_result_keeps_each_trial_and_the_times() {
    let code = r#"
import json, types
from lightning_batch_finder import finder_result, parse_args, trial_rows
recorded = [{"batch_size": 2, "steps": 3, "start": 1.0, "end": 1.5},
            {"batch_size": 4, "steps": 1, "start": 2.0, "end": 2.25}]
rows = trial_rows(recorded, 3)
torch = types.SimpleNamespace(__version__="2.0", cuda=types.SimpleNamespace(
    get_device_name=lambda: "GPU X"))
args = parse_args(["--amp", "bf16", "--workers", "2"])
print(json.dumps(finder_result("a finder", 2, rows, args, torch, "bf16", (10.0, 12.0, 15.5),
                               {"mode": "binsearch"}, lightning_version="9.9")))
"#;
    let out = python(&["-c", code]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = r["trials"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(r["trial_count"], 2);
    assert_eq!(rows[0]["fits"], true);
    assert_eq!(rows[1]["fits"], false);
    assert_eq!(rows[0]["seconds"], 0.5);
    assert_eq!(rows[1]["steps"], 1);
    assert_eq!(r["answer"], 2);
    assert_eq!(r["wall_s"], 5.5);
    assert_eq!(r["search_s"], 3.5);
    assert_eq!(
        (&r["amp"], &r["precision"], &r["workers"]),
        (&"bf16".into(), &"bf16".into(), &2.into())
    );
    assert_eq!(r["gpu"], "GPU X");
    assert_eq!(r["lightning_version"], "9.9");
    assert_eq!(r["torch_version"], "2.0");
    assert_eq!(r["options"]["mode"], "binsearch");
}

#[test]
fn lightning_s_finder_answers_bad_flags_without_lightning() {
    for (flag, value, says) in [
        ("--max-trials", "0", "must be at least 1"),
        ("--memory-limit", "-4", "must be more than 0 GiB"),
    ] {
        refuses(python(&["lightning_batch_finder.py", flag, value]), says);
    }
    let out = python(&["lightning_batch_finder.py", "--help"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(
        help.contains("--steps-per-trial") && help.contains("--init-val"),
        "{help}"
    );
}

#[test]
fn the_lightning_training_script_answers_bad_flags_without_lightning() {
    // The package as the checkout has it, where it is not installed.
    let package = concat!(env!("CARGO_MANIFEST_DIR"), "/../python");
    for (flag, value, says) in [
        ("--accumulation", "0", "must be at least 1"),
        ("--amp", "fp8", "invalid choice"),
    ] {
        let mut script = python(&["train_resnet_lightning.py", flag, value]);
        script.env("PYTHONPATH", package);
        refuses(script, says);
    }
}

/// `check_fit.py B --script fake_trainer.py`: its JSON and exit status.
fn check_fit(args: &[&str], vars: &[(&str, &str)]) -> (i32, serde_json::Value) {
    let fake = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fake_trainer.py");
    let mut all = vec!["check_fit.py"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--workers", "0", "--steps", "2", "--script", fake]);
    let mut c = python(&all);
    for (k, v) in vars {
        c.env(k, v);
    }
    let out = c.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let json = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{e}: {text} {}", String::from_utf8_lossy(&out.stderr)));
    (out.status.code().unwrap_or(-1), json)
}

#[test]
fn the_fresh_process_check_tells_an_exact_answer_from_a_wrong_one() {
    let limit = [("FAKE_OOM_ABOVE", "100")];
    let (code, r) = check_fit(&["96"], &limit);
    assert_eq!(code, 0, "{r}");
    assert_eq!(
        (r["fits"].as_bool(), r["next"].as_u64()),
        (Some(true), Some(104))
    );
    assert_eq!(r["runs"][1]["verdict"], "out of memory");
    // Several fresh runs at the answer, each of which must fit, and one at the next size.
    let (code, r) = check_fit(&["96", "--repeat", "3"], &limit);
    assert_eq!(code, 0, "{r}");
    assert_eq!(
        (r["fits_runs"].as_u64(), r["runs_at_batch"].as_u64()),
        (Some(3), Some(3)),
        "{r}"
    );
    assert_eq!(r["runs"].as_array().unwrap().len(), 4, "{r}");
    assert_eq!(r["runs"][3]["batch"], 104);
    // One sample's granularity, as Lightning answers: 100 fits, 101 does not.
    let (code, r) = check_fit(&["100", "--step", "1"], &limit);
    assert_eq!((code, r["exact"].as_bool()), (0, Some(true)), "{r}");
    // Too small an answer (104 fits too) and too large a one (neither fits) are not exact.
    let (code, r) = check_fit(&["88"], &limit);
    assert_eq!((code, r["next_fits"].as_bool()), (1, Some(true)), "{r}");
    let (code, r) = check_fit(&["104"], &limit);
    assert_eq!((code, r["fits"].as_bool()), (1, Some(false)), "{r}");
    // A failure that is not out of memory says nothing either way.
    let (code, r) = check_fit(&["8"], &[("FAKE_MODE", "fail")]);
    assert_eq!(code, 2, "{r}");
    assert_eq!(r["runs"][0]["verdict"], "failed");
    assert!(r["runs"][0]["stderr_last_line"]
        .as_str()
        .unwrap()
        .contains("ValueError"));
}
