//! The binaries on bad input and without a GPU: one clear line, a non-zero exit, no panic.
//! These run everywhere, CI included (no GPU there).

use std::path::Path;
use std::process::Command;

use ch1_basics::cli::{selection, sweep_json_path, variants, Args, Part};
use ch1_basics::sweep::Kind;
use ch1_basics::training::TrainConfig;
use clap::Parser;

fn run(bin: &str, args: &[&str]) -> (i32, String) {
    common::testing::run_without_gpu(bin, args)
}

const MAIN: &str = env!("CARGO_BIN_EXE_ch1-basics");

const BINS: [&str; 11] = [
    MAIN,
    env!("CARGO_BIN_EXE_ch1-basics-baseline"),
    env!("CARGO_BIN_EXE_ch1-basics-pinned"),
    env!("CARGO_BIN_EXE_ch1-basics-prealloc"),
    env!("CARGO_BIN_EXE_ch1-basics-batch"),
    env!("CARGO_BIN_EXE_ch1-basics-graphs"),
    env!("CARGO_BIN_EXE_ch1-basics-optimized"),
    env!("CARGO_BIN_EXE_ch1-basics-transpose-naive"),
    env!("CARGO_BIN_EXE_ch1-basics-transpose-tiled"),
    env!("CARGO_BIN_EXE_ch1-basics-pipeline-serial"),
    env!("CARGO_BIN_EXE_ch1-basics-pipeline-overlapped"),
];

#[test]
fn every_binary_takes_the_shared_flags_says_its_version_and_needs_a_gpu() {
    common::testing::assert_lesson_binaries(&BINS);
    common::testing::assert_refused_without_gpu(MAIN, &["--sweep", "pinned"]);
    common::testing::assert_refused_without_gpu(MAIN, &["--sweep", "all"]);
}

#[test]
fn sweeps_refuse_bad_sizes_and_single_variants_before_the_gpu() {
    for (bin, args, expect) in [
        (
            MAIN,
            vec!["--sweep", "batch", "--samples", "2048"],
            "--sweep batch: the batch (4096) does not divide the samples (2048)",
        ),
        (
            MAIN,
            vec!["--sweep", "graphs", "--samples", "1000"],
            "does not divide the samples",
        ),
        (
            env!("CARGO_BIN_EXE_ch1-basics-graphs"),
            vec!["--sweep", "graphs"],
            "run it as `ch1-basics --sweep graphs`",
        ),
    ] {
        let (code, stderr) = run(bin, &args);
        assert_eq!(code, 1, "{args:?}: {stderr}");
        assert!(stderr.contains(expect), "{args:?}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    }
    for (args, expect) in [
        (vec!["--sweep", "fast"], "invalid value 'fast'"),
        (
            vec!["--sweep", "all", "--part", "training"],
            "cannot be used with",
        ),
        (vec!["--sweep-out", "plots"], "--sweep <WHICH>"),
    ] {
        let (code, stderr) = run(MAIN, &args);
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert!(stderr.contains(expect), "{args:?}: {stderr}");
    }
}

#[test]
fn bad_sizes_are_refused_by_the_parser() {
    for (args, expect) in [
        (vec!["--samples", "0"], "a count of 0"),
        (vec!["--samples=-256"], "negative"),
        (vec!["--hidden", "1000000"], "too large"),
        (vec!["--samples", "1G"], "too large"),
        (vec!["--batch", "0"], "a count of 0"),
        (vec!["--side", "100000"], "too large"),
        (vec!["--side", "0"], "a count of 0"),
        (vec!["--n", "8192"], "unexpected argument"),
        (vec!["--pipeline-elements", "1000G"], "too large"),
        (vec!["--buffers", "9"], "too large"),
        (vec!["--part", "everything"], "invalid value"),
    ] {
        let (code, stderr) = run(MAIN, &args);
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert!(stderr.contains(expect), "{args:?}: {stderr}");
    }
}

// `baseline` and `optimized` share their file names with ch1-intensity's binaries in the
// workspace's target folder, so flag tests use this crate's uniquely named binaries.
#[test]
fn sizes_that_do_not_divide_are_refused_before_the_gpu_is_touched() {
    for (bin, args, expect) in [
        (
            MAIN,
            vec!["--samples", "1000"],
            "does not divide the samples",
        ),
        (
            env!("CARGO_BIN_EXE_ch1-basics-prealloc"),
            vec!["--batch", "256", "--microbatch", "48"],
            "does not divide the batch",
        ),
        (
            env!("CARGO_BIN_EXE_ch1-basics-graphs"),
            vec!["--lr=-1"],
            "--lr must be a positive number",
        ),
        (
            env!("CARGO_BIN_EXE_ch1-basics-pipeline-serial"),
            vec!["--pipeline-elements", "1M", "--chunk", "2M"],
            "larger than --pipeline-elements",
        ),
    ] {
        let (code, stderr) = run(bin, &args);
        assert_eq!(code, 1, "{args:?}: {stderr}");
        assert!(stderr.contains(expect), "{args:?}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    }
}

#[test]
fn help_lists_the_lesson_flags() {
    let out = Command::new(MAIN).arg("--help").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--part",
        "--hidden",
        "--samples",
        "--batch",
        "--microbatch",
        "--side",
        "--pipeline-elements",
        "--chunk",
        "--buffers",
        "--json",
        "--device",
        "--sweep",
        "--sweep-out",
    ] {
        assert!(text.contains(flag), "missing {flag} in help");
    }
}

/// The entry point the compare calls, one variant by id per process: names and sizes are
/// checked before any GPU is looked for.
#[test]
fn run_by_variant_id_refuses_bad_names_and_sizes_before_the_gpu() {
    use ch1_basics::cli::run;
    use common::report::Startup;

    let args = Args::parse_from(["ch1-basics"]);
    let err = run(&args, &["pipeline:fast"], Startup::now()).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("unknown variant 'pipeline:fast'"), "{text}");
    assert!(
        text.contains("pipeline:overlapped") && text.contains("training:pinned"),
        "{text}"
    );
    let args = Args::parse_from(["ch1-basics", "--pipeline-elements", "1M", "--chunk", "2M"]);
    let err = run(&args, &["pipeline:overlapped"], Startup::now()).unwrap_err();
    assert!(
        err.to_string().contains("larger than --pipeline-elements"),
        "{err}"
    );
    // A training variant alone checks the training sizes, not the pipeline's.
    let args = Args::parse_from(["ch1-basics", "--samples", "1000", "--chunk", "512M"]);
    let err = run(&args, &["training:pinned"], Startup::now()).unwrap_err();
    assert!(
        err.to_string().contains("does not divide the samples"),
        "{err}"
    );
}

#[test]
fn part_picks_whole_parts_named_variants_their_own_and_the_training_is_the_chapters() {
    let all = selection(Part::All, &[]).unwrap();
    assert_eq!(all.len(), 6 + 7 + 2);
    assert_eq!(all[0], "training:baseline");
    assert_eq!(all[13..], ["pipeline:serial", "pipeline:overlapped"]);
    let t = selection(Part::Transpose, &[]).unwrap();
    assert!(t.len() == 7 && t.iter().all(|id| id.starts_with("transpose:")));
    // Named variants, whatever --part says, in the order the parts run.
    let p = selection(Part::Training, &["pipeline:overlapped"]).unwrap();
    assert_eq!(p, ["pipeline:overlapped"]);
    let p = selection(Part::All, &["tiled32", "training:pinned"]).unwrap();
    assert_eq!(p, ["training:pinned", "transpose:tiled32"]);
    let mut ids: Vec<String> = variants().iter().map(|s| s.id()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), all.len(), "every id is unique");
    let args = Args::parse_from(["ch1-basics"]);
    assert_eq!(args.train_config().unwrap(), TrainConfig::chapter());
}

#[test]
fn several_sweeps_write_a_file_each_beside_the_one_named() {
    let p = Path::new("results/h100/ch1-basics-sweep.json");
    assert_eq!(sweep_json_path(p, Kind::Pinned, false), p);
    assert_eq!(
        sweep_json_path(p, Kind::Graphs, true),
        Path::new("results/h100/ch1-basics-sweep-graphs.json")
    );
    assert_eq!(
        sweep_json_path(Path::new("out"), Kind::Batch, true),
        Path::new("out-batch")
    );
}
