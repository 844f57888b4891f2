//! GPU tests: `cargo test -p compare -- --ignored` on a machine with an NVIDIA GPU.

use std::process::Command;

mod support;

fn compare(args: &[&str]) -> (i32, String, String) {
    // On a GPU machine the binary travels apart from the build tree: COMPARE_BIN says where
    // (with the lessons' binaries beside it).
    let bin = std::env::var("COMPARE_BIN").unwrap_or_else(|_| {
        support::lesson_binaries();
        env!("CARGO_BIN_EXE_compare").into()
    });
    let out = Command::new(bin).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        common::table::unpadded(&String::from_utf8_lossy(&out.stdout)),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn the_full_compare_verifies_every_pair_and_catches_a_planted_regression() {
    let exp = std::env::temp_dir().join(format!("compare-gpu-{}.json", std::process::id()));
    let exp = exp.to_str().unwrap();
    // A machine that never measured its ceilings: the GEMM pairs are still placed against the
    // SGEMM ceiling, which the compare measures when it is not cached.
    let cache = std::env::temp_dir().join(format!("compare-gpu-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&cache);
    std::env::set_var("PERF_LESSONS_CACHE", &cache);
    let (code, out, err) = compare(&["--quick", "--expectations", exp, "--update-expectations"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(!out.contains("| NO |") && !out.contains("ERROR"), "{out}");
    // The pairs table's GEMM rows (the variants table names sides, with no arrow).
    let gemm_pairs: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("| ch1-gemm/") && l.contains(" -> "))
        .collect();
    assert_eq!(gemm_pairs.len(), 2, "{out}");
    for row in gemm_pairs {
        assert!(row.contains("% SGEMM"), "{row}");
    }
    // The same build again, with ch1-intensity's fused kernel run twice per timed run.
    let (code, out, err) = compare(&[
        "--quick",
        "--filter",
        "ch1-intensity",
        "--expectations",
        exp,
        "--plant-slowdown",
        "ch1-intensity/fused",
    ]);
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(err.contains("ch1-intensity/fused: SLOWER"), "{err}");
    assert!(
        out.contains("ch1-intensity/baseline | ok") && out.contains("| SAME |"),
        "{out}"
    );
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn host_paced_variants_are_judged_on_their_machine_only() {
    let exp = std::env::temp_dir().join(format!("compare-gpu-host-{}.json", std::process::id()));
    let exp = exp.to_str().unwrap();
    // The training pair's two sides are host-paced: three runs recorded on this machine.
    let training = [
        "--quick",
        "--filter",
        "ch1-basics/training",
        "--expectations",
        exp,
    ];
    for _ in 0..3 {
        let (code, out, err) = compare(&[&training[..], &["--update-expectations"]].concat());
        assert_eq!(code, 0, "{out}\n{err}");
        assert!(
            out.contains("| ch1-basics/training:baseline | ok | host |"),
            "{out}"
        );
    }
    // Two more runs on the same machine: judged by their runs, never SLOWER.
    for _ in 0..2 {
        let (code, out, err) = compare(&training);
        assert_eq!(code, 0, "{out}\n{err}");
        assert!(
            !out.contains("| SLOWER |") && !out.contains("| NO EXPECTATION |"),
            "{out}"
        );
    }
    // The same GPU model on another machine (the recorded board renamed): no expectation.
    let mut e: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(exp).unwrap()).unwrap();
    for h in e["hosts"].as_array_mut().unwrap() {
        h["host"]["gpu_uuid"] = "GPU-another-machine".into();
    }
    std::fs::write(exp, serde_json::to_string(&e).unwrap()).unwrap();
    let (code, out, err) = compare(&training);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("gate: 0 judged; 2 NO EXPECTATION"), "{out}");
}
