//! The lessons' binaries the compare runs, for the tests that run the real ones.

use std::path::PathBuf;
use std::process::Command;

use compare::lessons::{binaries, binaries_dir, LESSONS};

/// The lessons' binaries beside this test's own (target/<profile>, where the compare's is too),
/// built first where missing (a workspace test run has built them already).
pub fn lesson_binaries() -> Vec<PathBuf> {
    let dir = binaries_dir().unwrap();
    if let Err(missing) = binaries(&dir, LESSONS) {
        let mut build = Command::new(std::env::var("CARGO").unwrap_or("cargo".into()));
        build.arg("build");
        if dir.ends_with("release") {
            build.arg("--release");
        }
        for lesson in LESSONS {
            build.args(["-p", lesson]);
        }
        assert!(build.status().unwrap().success(), "{missing}");
    }
    binaries(&dir, LESSONS).unwrap()
}
