//! The lessons' own binaries take the command lines the compare gives them: every child process
//! of the whole chapter, run without a GPU, gets past its lesson's parser and size checks to
//! the GPU (exit 3). No GPU needed.

mod support;

use clap::Parser;
use common::testing::run_without_gpu;
use compare::cli::{child_argv, Args};
use compare::lessons::{children_of, select, variants_of, LESSONS};

#[test]
fn every_child_of_the_chapter_reaches_the_gpu() {
    let bins = support::lesson_binaries();
    let bin = |lesson: &str| {
        let i = LESSONS.iter().position(|l| *l == lesson).unwrap();
        bins[i].to_str().unwrap().to_string()
    };
    let compare = Args::try_parse_from(["compare"]).unwrap();
    let children = children_of(&variants_of(&select::<&str>(&[])), false);
    assert_eq!(children.len(), 6);
    for child in &children {
        let argv = child_argv(&compare.common, child);
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        let (code, stderr) = run_without_gpu(&bin(child.lesson), &argv);
        assert_eq!(code, 3, "{} {argv:?}: {stderr}", child.lesson);
    }
    // A size the lesson refuses is refused before the GPU: the check above can fail.
    let (code, stderr) = run_without_gpu(
        &bin("ch1-basics"),
        &[
            "--variants",
            "training:pinned",
            "--batch",
            "4096",
            "--microbatch",
            "3000",
        ],
    );
    assert_eq!(code, 1, "{stderr}");
    let (code, stderr) = run_without_gpu(&bin("ch1-gemm"), &["--variants"]);
    assert_eq!(code, 2, "{stderr}");
}
