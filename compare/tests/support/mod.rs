//! The lessons' binaries the compare runs, for the tests that run the real ones.

use std::path::PathBuf;
use std::process::Command;

use compare::lessons::{binaries, binaries_dir, LESSONS};

/// The lessons' binaries beside this test's own (target/<profile>, where the compare's is too).
/// Under cargo they are brought up to date first (a no-op when they are: a workspace test run
/// has built them already); elsewhere they are taken as they are.
pub fn lesson_binaries() -> Vec<PathBuf> {
    let dir = binaries_dir().unwrap();
    if let Ok(cargo) = std::env::var("CARGO") {
        let mut build = Command::new(cargo);
        build.args(["build", "--quiet"]);
        if dir.ends_with("release") {
            build.arg("--release");
        }
        for lesson in LESSONS {
            build.args(["-p", lesson]);
        }
        assert!(build.status().unwrap().success(), "building the lessons");
    }
    binaries(&dir, LESSONS).unwrap_or_else(|e| panic!("{e}"))
}
