//! `scripts/gpu-results` against fake binaries (no GPU): every step runs and writes where it
//! should, a failed step is reported while the rest go on, no GPU is one line and exit 3, bad
//! flags are refused, and the summary table comes last.

use std::path::{Path, PathBuf};
use std::process::Command;

const BINARIES: [&str; 8] = [
    "ch1-intensity",
    "ch1-gemm",
    "ch1-basics",
    "ch1-graph-shapes",
    "ch1-roofline",
    "compare",
    "tuner",
    "mlp-train",
];

/// One fake for every binary, told apart by its name: it writes what its flags ask for
/// (--json, --plot, --out, --html), `compare --gpu-slug` names a "fake" GPU, and each compare
/// run is counted. FAKE_FAIL=<name> makes that binary fail; FAKE_NO_GPU=1 makes --gpu-slug
/// find no driver.
const FAKE: &str = r#"#!/bin/sh
name=$(basename "$0")
if [ "$name" = "$FAKE_FAIL" ]; then echo "error: planted failure" >&2; exit 1; fi
prev=""
for a in "$@"; do
  case "$prev" in
    --json) echo '{}' > "$a" ;;
    --plot) echo '<svg/>' > "$a.svg"; echo png > "$a.png" ;;
    --out) mkdir -p "$a"; echo '<svg/>' > "$a/roofline.svg"; echo png > "$a/roofline.png" ;;
    --html) echo '<html></html>' > "$a" ;;
  esac
  if [ "$a" = "--gpu-slug" ]; then
    if [ -n "$FAKE_NO_GPU" ]; then echo "error: no NVIDIA driver found (libcuda.so.1)" >&2; exit 3; fi
    echo fake; exit 0
  fi
  prev="$a"
done
if [ "$name" = compare ] && [ "$1" != "--html" ]; then
  echo run >> "$(dirname "$0")/compare-runs"
  printf '| pair | speedup |\n|---|---:|\n| ch1-fake/pair | 2.00x |\n\ngate: 1 judged (1 SAME); 0 NO EXPECTATION\n'
fi
exit 0
"#;

fn fakes(name: &str) -> (PathBuf, PathBuf) {
    let d = std::env::temp_dir().join(format!("gpu-results-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    let bin = d.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for b in BINARIES {
        let p = bin.join(b);
        std::fs::write(&p, FAKE).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
    }
    (bin, d.join("out"))
}

fn script(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/gpu-results");
    let out = Command::new("bash")
        .arg(path)
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

#[test]
fn every_step_runs_and_the_summary_comes_last() {
    let (bin, out) = fakes("all");
    let (b, o) = (bin.to_str().unwrap(), out.to_str().unwrap());
    let (code, stdout, stderr) = script(&["--bin", b, "--out", o, "--runs", "2"], &[]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    for f in [
        "ch1-intensity.json",
        "ch1-gemm.json",
        "ch1-gemm-tf32.json",
        "ch1-gemm-sweep.json",
        "ch1-basics.json",
        "ch1-basics-hidden4096.json",
        "ch1-graph-shapes.json",
        "ch1-roofline.json",
        "ch1-roofline.svg",
        "ch1-roofline.png",
        "ch1-basics-sweep.json",
        "compare.json",
        "tuner-sweep.json",
        "tuner-sweep.svg",
        "tuner-memory.json",
        "tuner-autobatch.json",
        "chapter.html",
    ] {
        assert!(out.join(f).exists(), "{f} was not written\n{stdout}");
    }
    let runs = std::fs::read_to_string(bin.join("compare-runs")).unwrap();
    assert_eq!(runs.lines().count(), 2, "two compare runs recorded");
    assert!(out.join("compare-runs/run-2.json").exists(), "{stdout}");
    assert!(
        !out.join("compare-runs/run-1.json").exists(),
        "run 1 is compare.json"
    );
    assert!(stdout.contains("the fake at device 0"), "{stdout}");
    assert!(stdout.contains("| ch1-fake/pair | 2.00x |"), "{stdout}");
    assert!(stdout.contains("gate: 1 judged"), "{stdout}");
    let table = &stdout[stdout.find("| step | result |").expect("a summary table")..];
    for step in [
        "ch1-intensity",
        "ch1-roofline",
        "ch1-basics-sweep",
        "compare-run-1",
        "compare-run-2",
        "tuner-sweep",
        "tuner-autobatch",
        "torch-gemm",
        "page",
    ] {
        assert!(table.contains(&format!("| {step} |")), "{step}\n{table}");
    }
    assert!(!table.contains("FAILED"), "{table}");
    // Without PyTorch that sees a GPU (as here), the cross-checks say why they were skipped.
    if !table.contains("| torch-gemm | ok |") {
        assert!(
            table.contains("| torch-gemm | skipped: python3 with PyTorch"),
            "{table}"
        );
    }
    // The tuner as a team runs it needs the same PyTorch, and says so where it is not here.
    if !table.contains("| tuner-grid |") {
        assert!(
            table.contains("| workflow | skipped: python3 with PyTorch, torchvision and timm"),
            "{table}"
        );
    }
    // The table is last, followed only by where the logs are.
    let lines: Vec<&str> = stdout.trim_end().lines().collect();
    assert!(lines[lines.len() - 1].starts_with("logs: "), "{stdout}");
    assert!(lines[lines.len() - 3].starts_with("| page |"), "{stdout}");
}

#[test]
fn a_failed_step_is_reported_and_the_rest_still_run() {
    let (bin, out) = fakes("fail");
    let (b, o) = (bin.to_str().unwrap(), out.to_str().unwrap());
    let (code, stdout, _) = script(
        &["--bin", b, "--out", o, "--runs", "1"],
        &[("FAKE_FAIL", "ch1-gemm")],
    );
    assert_eq!(code, 1, "{stdout}");
    assert!(
        stdout.contains("| ch1-gemm | FAILED (exit 1: error: planted failure) |"),
        "{stdout}"
    );
    assert!(stdout.contains("| tuner-sweep | ok |"), "{stdout}");
    assert!(out.join("tuner-sweep.json").exists());
}

#[test]
fn no_gpu_is_one_line_and_exit_3_and_bad_flags_exit_2() {
    let (bin, out) = fakes("refused");
    let (b, o) = (bin.to_str().unwrap(), out.to_str().unwrap());
    let (code, stdout, stderr) = script(&["--bin", b, "--out", o], &[("FAKE_NO_GPU", "1")]);
    assert_eq!(code, 3, "{stdout}{stderr}");
    assert_eq!(
        stderr.trim(),
        "gpu-results: error: no NVIDIA driver found (libcuda.so.1)"
    );
    assert!(!out.exists(), "nothing written without a GPU");
    for (args, says) in [
        (vec!["--runs", "0"], "--runs takes 1 to 10"),
        (vec!["--device", "x"], "--device takes a GPU ordinal"),
        (vec!["--frobnicate"], "unknown argument '--frobnicate'"),
        (vec!["--bin"], "--bin needs a folder"),
        (
            vec!["--only", "lessons,plots"],
            "--only: unknown group 'plots'",
        ),
    ] {
        let (code, _, stderr) = script(&args, &[]);
        assert_eq!(code, 2, "{args:?}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
    }
    std::fs::remove_file(bin.join("tuner")).unwrap();
    let (code, _, stderr) = script(&["--bin", b], &[]);
    assert_eq!(code, 2);
    assert!(stderr.contains("lacks tuner"), "{stderr}");
}

/// The steps of the summary table that ends the script's output, in order, and the table.
fn summary_steps(stdout: &str) -> (Vec<&str>, &str) {
    let table = &stdout[stdout.find("| step | result |").expect("a summary table")..];
    let steps = table
        .lines()
        .skip(2)
        .filter_map(|l| l.strip_prefix("| ")?.split(" |").next())
        .collect();
    (steps, table)
}

#[test]
fn only_the_groups_asked_for_run() {
    let (bin, out) = fakes("only");
    let (b, o) = (bin.to_str().unwrap(), out.to_str().unwrap());
    let (code, stdout, stderr) = script(
        &[
            "--bin",
            b,
            "--out",
            o,
            "--runs",
            "2",
            "--only",
            "compare,pages",
        ],
        &[],
    );
    assert_eq!(code, 0, "{stdout}{stderr}");
    let runs = std::fs::read_to_string(bin.join("compare-runs")).unwrap();
    assert_eq!(runs.lines().count(), 2, "two compare runs recorded");
    assert!(out.join("compare.json").exists() && out.join("chapter.html").exists());
    for f in [
        "ch1-intensity.json",
        "ch1-basics-sweep.json",
        "tuner-sweep.json",
    ] {
        assert!(
            !out.join(f).exists(),
            "{f} written though its group was not asked for"
        );
    }
    let (steps, table) = summary_steps(&stdout);
    assert_eq!(steps, ["compare-run-1", "compare-run-2", "page"], "{table}");

    // One part of the ResNet group alone: its step, run or (without PyTorch that sees a GPU,
    // as here) skipped, and nothing else.
    let (code, stdout, stderr) = script(&["--bin", b, "--out", o, "--only", "resnet-sweep"], &[]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    let (steps, table) = summary_steps(&stdout);
    assert!(
        steps == ["resnet-sweep"] || steps == ["tuner-resnet-sweep"],
        "{table}"
    );
}

/// Every table of the pages is the one scripts/results-tables makes from the committed results:
/// a result regenerated without refreshing the pages, or a figure edited by hand, fails here.
#[test]
fn the_pages_are_in_step_with_the_committed_results() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = Command::new("python3")
        .arg(root.join("scripts/results-tables"))
        .arg("--check")
        .output()
        .expect("python3 runs scripts/results-tables");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A lesson report as far as scripts/results-tables reads it: the GPU and each variant's
/// status, median and speedup.
fn lesson_json(gpu: &str, variants: &[(&str, f64, f64)]) -> String {
    let variants: Vec<serde_json::Value> = variants
        .iter()
        .map(|&(name, ms, speedup)| {
            serde_json::json!({
                "name": name, "status": "OK", "time_ms": {"median": ms}, "speedup": speedup
            })
        })
        .collect();
    serde_json::json!({"device": {"name": gpu}, "variants": variants}).to_string()
}

/// Folders of several GPUs of one host (`h100x2`) join a variants table after the one-GPU
/// folders when they have its file; a one-GPU folder without it says so in its cells.
#[test]
fn a_variants_table_has_a_column_per_several_gpu_folder_with_its_file() {
    let d = std::env::temp_dir().join(format!("results-tables-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    let h100 = "NVIDIA H100 80GB HBM3";
    for (folder, file) in [
        (
            "h100",
            Some(lesson_json(
                h100,
                &[("baseline", 20.0, 1.0), ("optimized", 10.0, 2.0)],
            )),
        ),
        ("h200", None),
        (
            "h100x2",
            Some(lesson_json(
                h100,
                &[("baseline", 11.0, 1.0), ("optimized", 5.25, 2.1)],
            )),
        ),
        ("h200x4", None),
    ] {
        std::fs::create_dir_all(d.join(folder)).unwrap();
        if let Some(json) = file {
            std::fs::write(d.join(folder).join("ch1-data-parallel.json"), json).unwrap();
        }
    }
    let table = |args: &[&str]| {
        let out = Command::new("python3")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/results-tables"))
            .arg("--results")
            .arg(&d)
            .args(args)
            .output()
            .expect("python3 runs scripts/results-tables");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let (code, out, err) = table(&["--table", "variants", "ch1-data-parallel"]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0],
        "| variant | NVIDIA H100 80GB HBM3 median | speedup | h200 median | speedup \
         | NVIDIA H100 80GB HBM3 x 2 median | speedup |",
        "{out}"
    );
    assert_eq!(
        lines[3], "| optimized | 10.000 ms | 2.00x | not measured | - | 5.250 ms | 2.10x |",
        "{out}"
    );
    assert!(
        out.contains(
            "`results/h100/ch1-data-parallel.json`, `results/h100x2/ch1-data-parallel.json`."
        ),
        "{out}"
    );
    // The pair tables take one-GPU folders only.
    let (code, out, _) = table(&["--table", "index"]);
    assert_eq!(code, 0);
    assert!(!out.contains("x 2") && !out.contains("h100x2"), "{out}");
    let (code, _, err) = table(&["--table", "no-such-kind"]);
    assert_eq!(code, 2);
    assert!(err.contains("unknown kind 'no-such-kind'"), "{err}");
    let _ = std::fs::remove_dir_all(&d);
}
