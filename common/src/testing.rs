//! Support for the lessons' CLI tests: run a built binary with every GPU hidden, so the no-GPU
//! path is taken on GPU machines too, and check it never panics.

use std::process::Command;

/// Run `bin args...` without a GPU; returns (exit code, stderr). Fails the test on a panic or
/// a backtrace hint.
pub fn run_without_gpu(bin: &str, args: &[&str]) -> (i32, String) {
    let out = Command::new(bin)
        .args(args)
        .env("CUDA_VISIBLE_DEVICES", "")
        .env(
            "PERF_LESSONS_CACHE",
            std::env::temp_dir().join("perf-lessons-cli-test"),
        )
        .output()
        .expect("binary runs");
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!stderr.contains("panicked"), "panic on {args:?}: {stderr}");
    assert!(
        !stderr.contains("RUST_BACKTRACE"),
        "backtrace hint on {args:?}: {stderr}"
    );
    (out.status.code().unwrap_or(-1), stderr)
}
