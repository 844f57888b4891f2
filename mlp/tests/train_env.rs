//! The settings a tuner varies are read from its PERF_LESSONS_* variables when their flags are
//! not given, and the report goes to PERF_LESSONS_REPORT. One test: this file is a process of
//! its own, so setting the environment here races with nothing.

use std::path::Path;

use clap::Parser;
use mlp::train::report::{EndRecord, REPORT_ENV};
use mlp::train::{Args, Report};

#[test]
fn the_environment_gives_defaults_that_flags_override() {
    let vars = [
        ("PERF_LESSONS_BATCH_SIZE", "96"),
        ("PERF_LESSONS_WORKERS", "0"),
        ("PERF_LESSONS_AMP", "on"),
        ("PERF_LESSONS_ACCUMULATION", "3"),
        ("PERF_LESSONS_STEPS", "7"),
        ("PERF_LESSONS_WARMUP_STEPS", "2"),
    ];
    for (k, v) in vars {
        std::env::set_var(k, v);
    }
    let o = Args::try_parse_from(["mlp-train"])
        .unwrap()
        .options()
        .unwrap();
    assert_eq!(
        (o.batch, o.workers, o.accumulation, o.steps, o.warmup),
        (96, 0, 3, 7, 2)
    );
    assert!(o.amp);

    let o = Args::try_parse_from([
        "mlp-train",
        "--batch-size",
        "8",
        "--amp",
        "off",
        "--warmup",
        "0",
    ])
    .unwrap()
    .options()
    .unwrap();
    assert_eq!((o.batch, o.warmup, o.amp, o.steps), (8, 0, false, 7));

    // A bad value in the environment is refused like a bad flag.
    std::env::set_var("PERF_LESSONS_BATCH_SIZE", "lots");
    let err = Args::try_parse_from(["mlp-train"]).err().unwrap();
    assert_eq!(err.exit_code(), 2);
    assert!(err.to_string().contains("lots"), "{err}");
    std::env::set_var("PERF_LESSONS_BATCH_SIZE", "");
    let err = Args::try_parse_from(["mlp-train"]).err().unwrap();
    assert!(err.to_string().contains("--batch-size"), "{err}");
    for (k, _) in vars {
        std::env::remove_var(k);
    }

    // The report: nowhere when the variable is unset, the file it names when set.
    std::env::remove_var(REPORT_ENV);
    assert!(!Report::from_env().unwrap().is_enabled());
    let path = std::env::temp_dir().join(format!("mlp-train-env-{}.jsonl", std::process::id()));
    let _ = std::fs::remove_file(&path);
    std::env::set_var(REPORT_ENV, &path);
    let mut r = Report::from_env().unwrap();
    assert!(r.is_enabled());
    r.end(&EndRecord {
        samples_per_s: Some(1.0),
        peak_memory_bytes: Some(1),
        ..EndRecord::default()
    })
    .unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.starts_with("{\"kind\":\"end\""), "{text}");
    std::env::remove_var(REPORT_ENV);
    let _ = std::fs::remove_file(Path::new(&path));
}
