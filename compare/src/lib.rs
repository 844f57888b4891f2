//! The cross-lesson compare: how readers see the whole chapter at once, and how the project
//! catches regressions. The variants run in child processes (each lesson's own binary, found
//! beside this one; one process per lesson and set of flags, one per variant when a process
//! fails), so a crash, a hang or a sticky CUDA error costs that process, not the run. The
//! compare builds on no lesson's code.

pub mod child;
pub mod cli;
pub mod expectations;
pub mod fleet;
pub mod host;
pub mod lessons;
pub mod outcome;
pub mod page;
pub mod phases;
pub mod rule;

/// A versioned JSON document of any of `versions` (the newest last, whose error is the one
/// reported when none fits), as a value for the caller to read.
pub(crate) fn read_any_version(
    path: &std::path::Path,
    versions: &[u32],
    what: &str,
    advice: &str,
) -> common::Result<serde_json::Value> {
    let mut last = None;
    for &v in versions {
        match common::files::read_versioned(path, v, what, advice) {
            Ok(value) => return Ok(value),
            Err(e) => last = Some(e),
        }
    }
    Err(last.expect("at least one version"))
}
