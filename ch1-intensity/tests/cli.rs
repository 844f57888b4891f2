//! The binaries on bad input and without a GPU: one clear line, a non-zero exit, no panic.
//! These run everywhere, CI included (no GPU there).

use std::process::Command;

fn run(bin: &str, args: &[&str]) -> (i32, String) {
    common::testing::run_without_gpu(bin, args)
}

const MAIN: &str = env!("CARGO_BIN_EXE_ch1-intensity");

const BINS: [&str; 4] = [
    MAIN,
    env!("CARGO_BIN_EXE_ch1-intensity-baseline"),
    env!("CARGO_BIN_EXE_ch1-intensity-optimized"),
    env!("CARGO_BIN_EXE_vector_add"),
];

#[test]
fn every_binary_takes_the_shared_flags_says_its_version_and_needs_a_gpu() {
    common::testing::assert_lesson_binaries(&BINS);
}

#[test]
fn bad_sizes_are_refused_by_the_parser() {
    for (args, expect) in [
        (vec!["--elements", "0"], "a count of 0"),
        (vec!["--elements=-5"], "negative"),
        (vec!["--elements", "ten"], "not a count"),
        (vec!["--elements", "1.5"], "not a count"),
        (vec!["--elements", "1000G"], "too large"),
        (vec!["--max-noise", "0"], "percentage"),
        (vec!["--min-time=-1"], "non-negative"),
        (vec!["--min-samples", "0"], "a count of 0"),
        (vec!["--device", "x"], "invalid digit"),
    ] {
        let (code, stderr) = run(MAIN, &args);
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert!(stderr.contains(expect), "{args:?}: {stderr}");
    }
}

#[test]
fn help_lists_the_shared_flags() {
    let out = Command::new(MAIN).arg("--help").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--device",
        "--json",
        "--elements",
        "--min-time",
        "--max-noise",
        "--cold",
    ] {
        assert!(text.contains(flag), "missing {flag} in help");
    }
}
