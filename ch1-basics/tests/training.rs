//! The training part on the CPU: sizes that do not divide say what to change, where a step's
//! time goes, and each variant's file differs from the one before it only where the lesson says
//! (it reads the sources). On a GPU (`cargo test -- --ignored`) every variant trains what the
//! float64 reference and the baseline train, graphs replay exactly what eager execution does,
//! and absurd sizes are clear out-of-memory errors.

use ch1_basics::training::host::{host_part, sample_time, section, HOST_BOUND_SAMPLE_S};
use ch1_basics::training::lesson::specs;
use ch1_basics::training::{host, Engine, RunOutput, TrainConfig, TrainingLesson, Variant};
use common::bench::Measurement;
use common::counters::Work;
use common::gpu::Gpu;
use common::report::{Metric, Status, VariantReport};
use common::runner::{run_lesson, Parts, RunOptions};
use common::stats::Summary;
use common::stop::StopRule;
use common::verify::{check, Precision};
use mlp::{Allocator, DeviceBuf};

#[test]
fn sizes_that_do_not_divide_say_what_to_change_and_the_rate_shrinks_with_width() {
    // The chapter's training with one setting changed.
    let with = |change: fn(&mut TrainConfig)| {
        let mut c = TrainConfig::chapter();
        change(&mut c);
        c
    };
    assert!(with(|_| ()).validate().is_ok());
    for (bad, expect) in [
        (with(|c| c.samples = 1000), "does not divide the samples"),
        (with(|c| c.microbatch = 48), "does not divide the batch"),
        (with(|c| c.lr = -1.0), "--lr must be a positive number"),
        (with(|c| c.lr = f32::NAN), "--lr"),
        (with(|c| c.hidden = 0), "hidden must be at least 1"),
        (with(|c| c.microbatch = 0), "at least 1"),
    ] {
        let e = bad.validate().unwrap_err();
        assert!(e.contains(expect), "{bad:?}: {e}");
    }
    assert_eq!(TrainConfig::default_lr(256), 0.05);
    assert_eq!(TrainConfig::default_lr(100), 0.05);
    assert_eq!(TrainConfig::default_lr(4096), 0.003125);
    let c = TrainConfig::chapter();
    assert_eq!(c.steps(), 64);
    assert_eq!(c.samples_of(2, 32, 32), 544..576);
    assert_eq!(Variant::Baseline.pass_batch(&c), 32);
    assert_eq!(Variant::Optimized.pass_batch(&c), 256);
    let names = Variant::ALL.map(|v| v.name()).join(" ");
    assert_eq!(names, "baseline pinned prealloc batch graphs optimized");
}

#[test]
fn samples_span_a_quarter_second_unless_the_time_cap_is_short() {
    assert_eq!(sample_time(&StopRule::default()), 0.25);
    // The compare's 2 s cap, whatever its least number of samples: 0.1 s; the quick
    // rule's 1 s: 0.05 s.
    let compare = StopRule {
        max_time_s: 2.0,
        min_samples: 10,
        ..StopRule::default()
    };
    assert!((sample_time(&compare) - 0.1).abs() < 1e-12);
    assert!((sample_time(&StopRule::quick()) - 0.05).abs() < 1e-12);
    let long = StopRule {
        max_time_s: 60.0,
        ..StopRule::default()
    };
    assert_eq!(sample_time(&long), HOST_BOUND_SAMPLE_S);
}

fn variant(name: &str, step_ms: f64, compute_ms: f64, cpu: Option<usize>) -> VariantReport {
    let mut v = VariantReport::checked(
        name,
        "",
        Precision::Fp32,
        vec![check(&[1.0f32], &[1.0], 1e-5, "ref")],
        Work::default(),
    );
    v.time_ms = Summary::of(&[64.0 * step_ms, 64.0 * step_ms * 1.1]);
    v.metrics = vec![
        Metric::new(host::STEP_MS, step_ms, "ms"),
        Metric::new(host::COMPUTE_MS, compute_ms, "ms"),
    ];
    v.measurement = Some(Measurement {
        batch: 3,
        held: false,
        cpu,
        ..common::testing::measurement(&[1.0])
    });
    v
}

#[test]
fn the_section_names_host_bound_steps_and_where_the_thread_ran() {
    // A compute-bound step timed apart from its compute can read under zero.
    let (host, share) = host_part(0.0468, 0.0470);
    assert!(host < 0.0 && share < 0.0);
    let variants = vec![
        variant("baseline", 1.8, 0.25, Some(5)),
        variant("optimized", 0.047, 0.046, Some(5)),
        VariantReport::checked("failed", "", Precision::Fp32, vec![], Work::default()),
    ];
    let s = section(&variants);
    let md = common::table::unpadded(&s.markdown());
    assert_eq!(s.table.as_ref().unwrap().rows.len(), 2, "{md}");
    assert!(
        md.contains("| baseline | 1.800 ms | 250.00 us | 1.550 ms | 86.1% |"),
        "{md}"
    );
    assert!(md.contains("| 3 | host |"), "{md}");
    assert!(
        md.contains("| optimized |") && md.contains("| device |"),
        "{md}"
    );
    assert!(md.contains("measuring thread kept on CPU 5"), "{md}");
    assert_eq!(s.data[0]["host_share"], host_part(1.8, 0.25).1);
    let unpinned = section(&[variant("baseline", 1.8, 0.25, None)]).markdown();
    assert!(unpinned.contains("not pinned"), "{unpinned}");
}

/// A variant file's code lines (the `//!` header, which says what the variant is, left out),
/// trimmed.
fn code(variant: &str) -> Vec<String> {
    let path = format!("{}/src/training/{variant}.rs", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .lines()
        .filter(|l| !l.starts_with("//!"))
        .map(|l| l.trim().to_string())
        .filter(|l| !l.is_empty())
        .collect()
}

/// Lines removed from `a` and added in `b` (a longest common subsequence keeps the rest).
fn changed_lines(a: &[String], b: &[String]) -> Vec<String> {
    let (n, m) = (a.len(), b.len());
    let mut lcs = vec![vec![0usize; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j, mut changed) = (0, 0, Vec::new());
    while i < n || j < m {
        if i < n && j < m && a[i] == b[j] {
            i += 1;
            j += 1;
        } else if i < n && (j == m || lcs[i + 1][j] >= lcs[i][j + 1]) {
            changed.push(format!("- {}", a[i]));
            i += 1;
        } else {
            changed.push(format!("+ {}", b[j]));
            j += 1;
        }
    }
    changed
}

/// (variant, the variant it changes, words every changed line must contain one of (none: the
/// change restructures the loop), the size of the change in lines).
const LESSON_STEPS: [(&str, &str, &[&str], usize); 5] = [
    // Copies from page-locked memory, which the host does not wait for.
    (
        "pinned",
        "baseline",
        &["copy_pageable", "copy_pinned", "copying the input"],
        3,
    ),
    // Buffers allocated once, by the engine, instead of per microbatch.
    (
        "prealloc",
        "baseline",
        &[
            "Allocator",
            "use mlp::",
            "Buffers",
            "engine::Engine",
            "e.pre",
            "freed",
        ],
        7,
    ),
    // One pass of the whole step instead of microbatches.
    ("batch", "baseline", &["let mb ="], 2),
    // The step's copies and operations captured into one graph, one wait per step.
    ("graphs", "prealloc", &[], 16),
    // Overlapped copies into two slots, no wait per step.
    ("optimized", "graphs", &[], 30),
];

#[test]
fn each_training_variant_differs_from_the_one_before_only_where_the_lesson_says() {
    for (variant, before, words, size) in LESSON_STEPS {
        let changed = changed_lines(&code(before), &code(variant));
        let shown = changed.join("\n");
        assert!(!changed.is_empty(), "{variant} is {before}");
        assert_eq!(
            changed.len(),
            size,
            "{before} -> {variant} changes {} lines, the lesson's change is {size}:\n{shown}",
            changed.len()
        );
        if !words.is_empty() {
            for line in &changed {
                assert!(
                    words.iter().any(|w| line.contains(w)),
                    "{before} -> {variant}: a change the lesson does not name: {line}\n{shown}"
                );
            }
        }
    }
    // Every variant is the same kind of loop over the same operations.
    for variant in Variant::ALL {
        let lines = code(variant.name());
        for skeleton in [
            "pub fn run(e: &mut Engine) -> Result<()> {",
            "let (gpu, cfg) = (e.gpu, e.cfg);",
            "Ok(())",
        ] {
            assert!(
                lines.iter().any(|l| l == skeleton),
                "{} lacks `{skeleton}`",
                variant.name()
            );
        }
        for operation in ["train.pass(&ex,", "train.update(&ex)"] {
            assert!(
                lines.iter().any(|l| l.contains(operation)),
                "{} lacks `{operation}`",
                variant.name()
            );
        }
    }
}

#[test]
fn the_line_diff_finds_what_changed() {
    let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    assert_eq!(
        changed_lines(&v(&["a", "b", "c"]), &v(&["a", "x", "c"])),
        ["- b", "+ x"]
    );
    assert!(changed_lines(&v(&["a"]), &v(&["a"])).is_empty());
    assert_eq!(changed_lines(&v(&[]), &v(&["a"])), ["+ a"]);
}

fn small(hidden: usize) -> TrainConfig {
    TrainConfig {
        hidden,
        samples: 2048,
        step_batch: 256,
        microbatch: 32,
        lr: 0.05,
        seed: 5,
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn every_training_variant_matches_the_float64_reference_and_the_baseline() {
    let gpu = Gpu::open(0).unwrap();
    for hidden in [256, 100] {
        let cfg = small(hidden);
        let lesson = TrainingLesson::new(&gpu, cfg).unwrap();
        let r = lesson
            .reference_loss_curve()
            .expect("a small run has a reference")
            .to_vec();
        assert!(r[cfg.steps() - 1] < r[0], "the reference learns");
        let mut parts = Parts::new("ch1-basics").part("training", specs(&cfg), || Ok(lesson));
        let mut options = RunOptions::default();
        options.bench.stop = StopRule::quick();
        let report = run_lesson(&gpu, &mut parts, &options).unwrap();
        for v in Variant::ALL {
            let got = report
                .variant(&format!("training:{}", v.name()))
                .expect("every variant ran");
            let mut against: Vec<&str> = vec!["float64 CPU reference"];
            if v != Variant::Baseline {
                against.push("the baseline");
            }
            for other in against {
                let check = |part: &str| {
                    got.checks
                        .iter()
                        .find(|c| c.part == part && c.against == other)
                        .unwrap_or_else(|| panic!("{} has no {part} check vs {other}", v.name()))
                };
                let (w, l) = (check("weight change"), check("loss curve"));
                println!(
                    "hidden {hidden} {}: vs {other}: dW {:.2e}, losses {:.2e}",
                    v.name(),
                    w.rel_l2_error,
                    l.rel_l2_error
                );
                assert!(w.passed && l.passed, "{} vs {other}: {w:?} {l:?}", v.name());
            }
            assert_eq!(got.status, Status::Ok, "{}", v.name());
            // The step split into device and host time, the measuring thread on one core.
            let metric = |name: &str| {
                got.metric(name)
                    .unwrap_or_else(|| panic!("{} has no {name}", v.name()))
            };
            let (step, compute) = (metric(host::STEP_MS), metric(host::COMPUTE_MS));
            assert!((metric(host::HOST_MS) - (step - compute)).abs() < 1e-9);
            let share = metric(host::HOST_SHARE);
            assert!((share - 100.0 * (1.0 - compute / step)).abs() < 1e-9);
            assert!(share < 100.0, "{}: {share}", v.name());
            let m = got.measurement.as_ref().unwrap();
            assert!(!m.held, "{}", v.name());
            assert!(
                m.cpu.is_some(),
                "{}: the measuring thread was not pinned",
                v.name()
            );
        }
        let split = report
            .sections
            .iter()
            .find(|s| s.title == "training: where each step's time goes")
            .expect("the host-share section");
        assert_eq!(split.table.as_ref().unwrap().rows.len(), Variant::ALL.len());
        // The naive loop waits on the host for most of each step.
        let baseline = host::StepSplit::of(report.variant("training:baseline").unwrap()).unwrap();
        assert!(baseline.host_bound(), "{baseline:?}");
    }
}

/// Run `v` once from the initial weights, its losses poisoned first, and bring the result back.
fn run_checked(v: Variant, e: &mut Engine) -> RunOutput {
    e.gpu.poison(&mut e.train.losses.values).unwrap();
    e.reset().unwrap();
    v.run(e).unwrap();
    e.gpu.sync().unwrap();
    e.download().unwrap()
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn graph_replays_give_the_weights_of_eager_execution() {
    let gpu = Gpu::open(0).unwrap();
    let cfg = small(256);
    let mut t = Engine::new(&gpu, cfg).unwrap();
    // Same microbatches, same operations, same order: eager (prealloc) and replayed (graphs).
    let eager = run_checked(Variant::Prealloc, &mut t);
    let graphs = run_checked(Variant::Graphs, &mut t);
    let eager_batch = run_checked(Variant::Batch, &mut t);
    let optimized = run_checked(Variant::Optimized, &mut t);
    let close = |a: &[f32], b: &[f32]| {
        let d: f64 = a.iter().zip(b).map(|(x, y)| ((x - y) as f64).powi(2)).sum();
        let n: f64 = b.iter().map(|y| (*y as f64).powi(2)).sum();
        (d / n).sqrt()
    };
    let e1 = close(&graphs.params, &eager.params);
    let e2 = close(&optimized.params, &eager_batch.params);
    println!("graphs vs eager: {e1:.2e}; optimized vs batch: {e2:.2e}");
    assert!(e1 < 1e-6, "{e1}");
    assert!(e2 < 1e-6, "{e2}");
    assert_eq!(graphs.losses.len(), eager.losses.len());
    assert!(graphs.losses.iter().all(|l| l.is_finite()));
    // A second run of the same graphs starts again from the initial weights.
    let again = run_checked(Variant::Optimized, &mut t);
    assert_eq!(again.params, optimized.params);
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn absurd_sizes_are_clear_out_of_memory_errors_and_the_context_survives() {
    let gpu = Gpu::open(0).unwrap();
    let (free, _) = gpu.memory().unwrap();
    let err = match DeviceBuf::<f32>::new(
        &gpu,
        Allocator::Driver,
        (free / 4 + (1 << 30)) as usize,
        "too much",
    ) {
        Err(e) => e,
        Ok(_) => panic!("allocating more than is free succeeded"),
    };
    assert!(err.is_out_of_memory(), "{err}");
    assert!(err
        .to_string()
        .contains("out of device memory: too much needs"));
    let huge = TrainConfig {
        hidden: 1 << 20,
        samples: 1 << 16,
        step_batch: 1 << 16,
        microbatch: 1 << 16,
        lr: 0.05,
        seed: 1,
    };
    let err = match TrainingLesson::new(&gpu, huge) {
        Err(e) => e,
        Ok(_) => panic!("an absurd model fit"),
    };
    assert!(err.is_out_of_memory(), "{err}");
    // The context is still usable.
    let small = gpu.upload(&[1.0f32, 2.0], "small").unwrap();
    assert_eq!(gpu.download(&small).unwrap(), vec![1.0, 2.0]);
}
