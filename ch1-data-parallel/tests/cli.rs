//! The binaries' command line without a GPU: bad input is one line and a non-zero exit, and no
//! GPU is one line saying so with exit code 2.

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
fn unknown_devices_are_one_line() {
    for list in ["x", "0,0", "0,,1"] {
        let (code, err) = run(MAIN, &["--devices", list]);
        assert_eq!(code, Some(1), "{list}: {err}");
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
fn no_gpu_is_one_line_with_exit_2() {
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
        assert_eq!(code, Some(2), "{bin} {args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.contains("NVIDIA driver") || err.contains("GPU"),
            "{err}"
        );
    }
}
