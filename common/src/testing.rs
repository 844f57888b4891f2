//! Support for tests: run a built binary with every GPU hidden, so the no-GPU path is taken on
//! GPU machines too, and check it never panics; a device description for reports built by hand.

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

/// An H200 as [crate::gpu::DeviceInfo] describes it, for reports built without a GPU.
pub fn h200_info() -> crate::gpu::DeviceInfo {
    crate::gpu::DeviceInfo {
        ordinal: 0,
        name: "NVIDIA H200".into(),
        uuid: "GPU-00000000-0000-0000-0000-000000000000".into(),
        compute_capability: (9, 0),
        sm_count: 132,
        total_memory_bytes: 150_000_000_000,
        l2_bytes: 62_914_560,
        max_sm_clock_mhz: 1980,
        memory_clock_mhz: 3201,
        memory_bus_width_bits: 6144,
        driver_version: "580.159.04".into(),
        cuda_driver_version: "13.0".into(),
        nvrtc_version: "13.0".into(),
    }
}
