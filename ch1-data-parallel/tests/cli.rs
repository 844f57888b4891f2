//! The binaries' command line without a GPU: bad input is one line and a non-zero exit, and no
//! GPU is one line saying so with exit code 3.

use std::process::Command;

fn run(bin: &str, args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(bin)
        .args(args)
        .output()
        .expect("the binary runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

fn has_gpu() -> bool {
    common::gpu::probe_driver().is_ok()
}

const MAIN: &str = env!("CARGO_BIN_EXE_ch1-data-parallel");
const SIDES: [&str; 2] = [
    env!("CARGO_BIN_EXE_ch1-data-parallel-baseline"),
    env!("CARGO_BIN_EXE_ch1-data-parallel-optimized"),
];

#[test]
fn bad_sizes_are_one_line_and_exit_2() {
    for (flag, value, says) in [
        ("--per-rank", "0", "at least 1"),
        ("--steps", "0", "at least 1"),
        ("--hidden", "0", "at least 1"),
        ("--bucket-mib", "0", "at least 1"),
        ("--runs", "three", "not a count"),
        ("--hidden", "lots", "not a count"),
        ("--max-size", "4K", "smallest size"),
    ] {
        let (code, err) = run(MAIN, &[flag, value]);
        assert_eq!(code, Some(2), "{flag} {value}: {err}");
        assert!(
            err.starts_with("error: ") && err.contains(says),
            "{flag} {value}: {err}"
        );
        assert!(!err.contains("panicked"), "{err}");
    }
}

#[test]
fn every_binary_takes_the_shared_flags_says_its_version_and_needs_a_gpu() {
    common::testing::assert_lesson_binaries(&[MAIN, SIDES[0], SIDES[1]]);
}

#[test]
fn device_alone_is_one_rank_and_conflicts_with_devices() {
    use ch1_data_parallel::cli::Args;
    let args = Args::parse_argv(["ch1-data-parallel", "--device", "0"]).unwrap();
    assert_eq!(args.devices.as_deref(), Some("0"), "--device 0 is one rank");
    let args = Args::parse_argv(["ch1-data-parallel"]).unwrap();
    assert_eq!(args.devices, None, "every GPU by default");
    let args = Args::parse_argv(["ch1-data-parallel", "--devices", "0,1"]).unwrap();
    assert_eq!(args.devices.as_deref(), Some("0,1"));
    let err =
        Args::parse_argv(["ch1-data-parallel", "--devices", "0,1", "--device", "1"]).unwrap_err();
    assert!(err.to_string().contains("cannot be used with"), "{err}");
}

#[test]
fn the_shared_measuring_flags_count_whole_runs() {
    use ch1_data_parallel::cli::Args;
    let bench = |argv: &[&str]| {
        let argv = std::iter::once("ch1-data-parallel").chain(argv.iter().copied());
        Args::parse_argv(argv).unwrap().bench()
    };
    let plain = bench(&[]);
    assert_eq!((plain.stop.min_samples, plain.stop.max_samples), (3, 3));
    let quick = bench(&["--quick"]);
    assert_eq!((quick.stop.min_samples, quick.stop.max_samples), (2, 2));
    let more = bench(&["--min-samples", "7"]);
    assert_eq!((more.stop.min_samples, more.stop.max_samples), (7, 7));
    let timed = bench(&["--min-time", "2"]);
    assert_eq!(timed.stop.min_time_s, 2.0);
    assert!(timed.stop.max_samples > 1000, "a time bound decides");
    assert!(bench(&["--cold"]).cold);
}

#[test]
fn unknown_devices_are_one_line() {
    for list in ["x", "0,0", "0,,1"] {
        let (code, err) = run(MAIN, &["--devices", list]);
        assert_eq!(code, Some(2), "{list}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.starts_with("error: --devices"), "{err}");
    }
}

#[test]
fn a_model_too_large_is_refused_before_any_gpu() {
    let (code, err) = run(MAIN, &["--depth", "99999"]);
    assert_ne!(code, Some(0));
    assert!(err.contains("depth") && err.lines().count() == 1, "{err}");
}

#[test]
fn no_gpu_is_one_line_with_exit_3() {
    if has_gpu() {
        eprintln!("a GPU is present: nothing to check here");
        return;
    }
    let runs = [
        (MAIN, &[][..]),
        (MAIN, &["--allreduce"]),
        (MAIN, &["--devices", "0,1"]),
        (SIDES[0], &[]),
        (SIDES[1], &[]),
    ];
    for (bin, args) in runs {
        let (code, err) = run(bin, args);
        assert_eq!(code, Some(3), "{bin} {args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.contains("NVIDIA driver") || err.contains("GPU"),
            "{err}"
        );
    }
}
