//! The binary's answers to bad input, without a GPU: one clear line and a non-zero exit.

use std::process::Command;

fn tuner(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tuner"))
        .args(args)
        .output()
        .expect("running tuner");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

#[test]
fn bad_flags_are_usage_errors() {
    for (args, says) in [
        (vec!["sweep", "--batch-sizes", "0"], "at least 1"),
        (vec!["sweep", "--batch-sizes=-4"], "negative"),
        (vec!["sweep", "--batch-sizes", "1G"], "too large"),
        (vec!["sweep", "--workers", "x"], "not a worker count"),
        (vec!["sweep", "--amp", "maybe"], "on, off or both"),
        (vec!["sweep", "--preset", "huge"], "small, medium or large"),
        (vec!["sweep", "--hidden", "0"], "at least 1"),
        (vec!["sweep", "--optimizer", "adam"], "sgd or adamw"),
    ] {
        let (code, err) = tuner(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(!err.contains("panicked"));
    }
}

#[test]
fn bad_config_files_name_the_key() {
    let dir = std::env::temp_dir().join(format!("tuner-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("bad.toml");
    std::fs::write(&cfg, "[model]\nhidden = \"wide\"\n").unwrap();
    let (code, err) = tuner(&["sweep", "--config", cfg.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(err.contains("'model.hidden' must be an integer"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    let (code, err) = tuner(&["sweep", "--config", "/nonexistent/t.toml"]);
    assert_eq!(code, 1);
    assert!(err.contains("cannot read the config"), "{err}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn without_a_gpu_the_answer_is_exit_2() {
    // On a machine with a GPU this runs a tiny sweep instead; both are fine answers.
    let (code, err) = tuner(&["sweep", "--batch-sizes", "1", "--steps", "1", "--quiet"]);
    if code != 0 {
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("driver") || err.contains("GPU"), "{err}");
    }
}

#[test]
fn memory_and_autobatch_refuse_bad_input_before_the_gpu() {
    let (code, err) = tuner(&["memory", "--batch-size", "0"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("at least 1"), "{err}");
    let (code, err) = tuner(&["memory", "--batch-size", "256,lots"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("'lots'"), "{err}");
    let (code, err) = tuner(&["autobatch", "--start", "0", "--test-only"]);
    assert_eq!(code, 2, "{err}");
    let (code, err) = tuner(&["autobatch"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("--config FILE, or --test-only"), "{err}");
    let (code, err) = tuner(&["autobatch", "--config", "/nonexistent/run.toml"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("cannot read the config"), "{err}");
    let (code, err) = tuner(&["autobatch", "--test-only", "--pow2", "--multiple-of", "8"]);
    assert_eq!(code, 2, "{err}");
    let (code, err) = tuner(&["memory", "--margin", "95"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("leaves nothing"), "{err}");
}

#[test]
fn a_read_only_config_is_refused_before_the_gpu() {
    let dir = std::env::temp_dir().join(format!("tuner-ro-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("run.toml");
    std::fs::write(&cfg, "[training]\nbatch_size = 64\n").unwrap();
    let mut perms = std::fs::metadata(&cfg).unwrap().permissions();
    perms.set_readonly(true);
    std::fs::set_permissions(&cfg, perms).unwrap();
    let (code, err) = tuner(&["autobatch", "--config", cfg.to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("read-only"), "{err}");
    let _ = std::fs::remove_dir_all(dir);
}
