//! The binaries on bad input and without a GPU: one clear line, a non-zero exit, no panic.
//! These run everywhere, CI included (no GPU there).

use std::process::Command;

fn run(bin: &str, args: &[&str]) -> (i32, String) {
    common::testing::run_without_gpu(bin, args)
}

const MAIN: &str = env!("CARGO_BIN_EXE_ch1-gemm");

#[test]
fn every_binary_takes_the_shared_flags_says_its_version_and_needs_a_gpu() {
    common::testing::assert_lesson_binaries(&[
        MAIN,
        env!("CARGO_BIN_EXE_ch1-gemm-baseline"),
        env!("CARGO_BIN_EXE_ch1-gemm-optimized"),
    ]);
}

#[test]
fn no_gpu_is_one_line_and_exit_3() {
    // `baseline` and `optimized` share their file names with other lessons' binaries in the
    // workspace's target folder (cargo warns of the collision), so a workspace build may leave
    // another lesson's there: they get only the arguments every lesson accepts.
    let runs: [(&str, &[&str]); 5] = [
        (MAIN, &[]),
        (MAIN, &["--tf32"]),
        (MAIN, &["--sweep"]),
        (env!("CARGO_BIN_EXE_ch1-gemm-baseline"), &[]),
        (env!("CARGO_BIN_EXE_ch1-gemm-optimized"), &[]),
    ];
    for (bin, args) in runs {
        common::testing::assert_refused_without_gpu(bin, args);
    }
}

#[test]
fn bad_sizes_are_refused_by_the_parser() {
    for (args, expect) in [
        (vec!["--shape", "0x256x256"], "a count of 0"),
        (vec!["--shape", "32x0x256"], "a count of 0"),
        (vec!["--shape=32x256x-5"], "negative"),
        (vec!["--shape", "-32x256x256"], "negative"),
        (vec!["--count", "-1"], "negative"),
        (vec!["--count", "ten"], "not a count"),
        (vec!["--shape", "32x256x2.5"], "not a count"),
        (vec!["--shape", "32x3000000000x256"], "too large"),
        (vec!["--shape", "32x256"], "not a shape: give MxNxK"),
        (
            vec!["--sweep", "--shape", "64x64x64"],
            "cannot be used with",
        ),
        (vec!["--sweep-sizes", "16"], "--sweep"),
        (vec!["--sweep", "--sweep-counts", "8,0"], "a count of 0"),
        (vec!["--sweep", "--sweep-time-cap=-1"], "non-negative"),
        (vec!["--max-noise", "0"], "percentage"),
        (vec!["--device", "x"], "invalid digit"),
    ] {
        let (code, stderr) = run(MAIN, &args);
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert!(stderr.contains(expect), "{args:?}: {stderr}");
    }
}

#[test]
fn a_shape_whose_bytes_overflow_is_refused_before_the_gpu() {
    let max = "2147483647";
    let shape = format!("{max}x{max}x{max}");
    let (code, stderr) = run(MAIN, &["--shape", &shape, "--count", max]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("overflows 64 bits"), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
}

#[test]
fn help_lists_the_flags() {
    let out = Command::new(MAIN).arg("--help").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--shape",
        "MxNxK",
        "--count",
        "--tf32",
        "--sweep",
        "--sweep-sizes",
        "--sweep-counts",
        "--sweep-time-cap",
        "--device",
        "--json",
        "--cold",
    ] {
        assert!(text.contains(flag), "missing {flag} in help");
    }
}
