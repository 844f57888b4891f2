//! The binaries on bad input and without a GPU: one clear line, a non-zero exit, no panic.

const MAIN: &str = env!("CARGO_BIN_EXE_ch1-graph-shapes");

const BINS: [&str; 3] = [
    MAIN,
    env!("CARGO_BIN_EXE_ch1-graph-shapes-baseline"),
    env!("CARGO_BIN_EXE_ch1-graph-shapes-optimized"),
];

#[test]
fn every_binary_takes_the_shared_flags_says_its_version_and_needs_a_gpu() {
    common::testing::assert_lesson_binaries(&BINS);
}

#[test]
fn bad_sizes_are_refused_before_the_gpu() {
    for (args, expect) in [
        (vec!["--requests", "0"], "a count of 0"),
        (vec!["--max-length=-3"], "negative"),
        (vec!["--max-length", "1G"], "too large"),
        (
            vec!["--requests", "10", "--max-length", "5"],
            "every request needs its own length",
        ),
    ] {
        let (code, stderr) = common::testing::run_without_gpu(MAIN, &args);
        assert_ne!(code, 0, "{args:?}: {stderr}");
        let first = stderr.lines().next().unwrap_or_default();
        assert!(
            first.contains(expect),
            "the first line says why: {args:?}: {stderr}"
        );
    }
}
