//! The sweeps' plans on the CPU: each sweep's points, sides and sizes. On a GPU
//! (`cargo test -p ch1-basics --test sweeps -- --ignored`): every point of each sweep verifies
//! and is timed at small plans, each sweep's section keeps its summary, a planted wrong side is
//! caught, and the binary writes a report and a plot per sweep.

use std::process::Command;

use ch1_basics::sweep::allocations::{self, AllocationSweep};
use ch1_basics::sweep::copies::{self, CopySweep};
use ch1_basics::sweep::training::{self as training_sweep, TrainingSweep};
use ch1_basics::sweep::{geometric, sweep_bench, Kind, BAR};
use ch1_basics::training::TrainConfig;
use common::bench::BenchConfig;
use common::gpu::Gpu;
use common::report::{LessonReport, Status};
use common::runner::{run_lesson, Lesson, RunOptions};
use common::sweep::{Summary, SweepLesson};

#[test]
fn every_sweep_in_turn() {
    assert_eq!(Kind::Pinned.lesson(), "ch1-basics-sweep-pinned");
    assert_eq!(Kind::Pinned.name(), "pinned");
    assert_eq!(geometric::<3>(4, 2), [4, 8, 16]);
    assert_eq!(Kind::All.each().len(), 4);
    assert_eq!(Kind::Batch.each(), vec![Kind::Batch]);
    let cold = BenchConfig {
        cold: true,
        ..BenchConfig::default()
    };
    assert!(sweep_bench(cold).cold);
}

#[test]
fn every_count_at_every_size_and_the_accumulator_holds_every_buffer_once() {
    let p = allocations::plan(&[1 << 20, 4 << 10], &[16, 1, 16]);
    assert_eq!(p.points.len(), 4);
    assert_eq!((p.series(0), p.x(0)), ("1 buffer per use".into(), 4 << 10));
    assert_eq!(
        (p.series(3), p.x(3)),
        ("16 buffers per use".into(), 1 << 20)
    );
    assert_eq!(p.sides[0], "cuMemAlloc", "the baseline comes first");
    assert_eq!(
        allocations::plan(&allocations::SIZES, &allocations::COUNTS)
            .points
            .len(),
        16
    );
    assert_eq!(
        (allocations::SIZES[0], allocations::SIZES[7]),
        (4 << 10, 64 << 20)
    );
    assert_eq!(allocations::expected(1.0, 1), 0.75);
    assert_eq!(allocations::expected(-0.5, 16), 0.0);
    assert_eq!(allocations::expected(0.5, 4), 2.0);
}

#[test]
fn every_mode_at_every_size_pageable_first() {
    let p = copies::plan(&[1 << 20, 32 << 10, 1 << 20]);
    assert_eq!(p.points.len(), 4);
    assert_eq!((p.series(1), p.x(1)), ("eager".into(), 1 << 20));
    assert_eq!((p.series(2), p.x(2)), ("overlapped".into(), 32 << 10));
    assert_eq!(p.sides[0], "pageable", "the baseline comes first");
    assert_eq!(copies::plan(&copies::SIZES).points.len(), 24);
    assert_eq!(copies::SIZES[0], 32 * 256 * 4, "a microbatch of 32 samples");
    assert_eq!(copies::SIZES[11], 64 << 20);
}

#[test]
fn each_training_sweep_takes_the_sizes_that_divide_its_run() {
    let chapter = TrainConfig::chapter();
    let (cfg, p) =
        training_sweep::plan(Kind::Batch, chapter, &training_sweep::MICROBATCHES).unwrap();
    assert_eq!(
        (cfg.step_batch, cfg.microbatch, cfg.steps()),
        (training_sweep::BATCH, 8, 4)
    );
    assert_eq!(p.points.len(), 10);
    assert_eq!(p.series(0), "effective batch 4096");
    assert_eq!(p.sides[0], "accumulated", "the baseline first");
    let (_, p) = training_sweep::plan(Kind::Batch, chapter, &[4096, 8, 96, 8]).unwrap();
    let xs = p.values_of("samples per microbatch");
    assert_eq!(xs, [8, 4096], "96 does not divide 4096; repeats once");
    assert_eq!(training_sweep::group(Kind::Batch, 64), "microbatch 64");
    // Samples that make no whole step of 4096: one line saying what to change.
    let few = TrainConfig {
        samples: 1024,
        ..chapter
    };
    let err = training_sweep::plan(Kind::Batch, few, &training_sweep::MICROBATCHES).unwrap_err();
    assert!(err.contains("does not divide the samples"), "{err}");

    let (cfg, p) =
        training_sweep::plan(Kind::Graphs, chapter, &training_sweep::STEPS_PER_GRAPH).unwrap();
    assert_eq!(cfg, chapter);
    let all = training_sweep::STEPS_PER_GRAPH.map(|x| x as u64);
    assert_eq!(p.values_of("steps per graph"), all);
    assert_eq!(p.series(0), "steps of 8 x 32");
    let short = TrainConfig {
        samples: 256 * 6,
        ..chapter
    };
    let (_, p) =
        training_sweep::plan(Kind::Graphs, short, &training_sweep::STEPS_PER_GRAPH).unwrap();
    assert_eq!(p.values_of("steps per graph"), [1, 2]);
    let err = training_sweep::plan(Kind::Graphs, short, &[4, 5]).unwrap_err();
    assert!(err.contains("divides the run's steps (6)"), "{err}");
    assert_eq!(training_sweep::group(Kind::Graphs, 4), "4 steps per graph");
}

/// Every variant verified and timed, every point with a speedup, the summary of `kind` with a
/// crossover per line.
fn every_point_verified(report: &LessonReport, kind: Kind, points: usize) -> Summary {
    assert_eq!(report.variants.len(), 2 * points);
    for v in &report.variants {
        assert_eq!(v.status, Status::Ok, "{}: {:?}", v.id(), v.checks);
        assert!(!v.checks.is_empty(), "{}", v.id());
        assert!(
            v.checks.iter().all(|c| c.passed),
            "{}: {:?}",
            v.id(),
            v.checks
        );
        let m = v.measurement.as_ref().expect("timed");
        assert!(!m.held, "{}: the host paces every side", v.id());
        assert!(v.speedup.is_some(), "{}", v.id());
    }
    let summary = Summary::from_section(&report.sections[0]).expect("the sweep's summary");
    assert_eq!(report.lesson, kind.lesson());
    assert_eq!(summary.points.len(), points);
    for p in &summary.points {
        let r = p.speedup().unwrap_or_else(|| panic!("{p:?}"));
        assert!(r.value > 0.0 && r.uncertainty.is_finite(), "{p:?}");
    }
    for c in &summary.crossovers {
        assert!(c.measured.is_some(), "{c:?}");
    }
    println!("{}", report.sections[0].markdown());
    summary
}

fn short() -> RunOptions {
    RunOptions::default()
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn every_copy_point_verifies_and_large_pinned_copies_pay() {
    let gpu = Gpu::open(0).unwrap();
    let sizes = [32 << 10, 1 << 20, 64 << 20];
    let mut sweep = SweepLesson(CopySweep::new(&gpu, &sizes, 64, 3).unwrap());
    let report = run_lesson(&gpu, &mut sweep, &short()).unwrap();
    let summary = every_point_verified(&report, Kind::Pinned, 6);
    // The overlapped side checks the compute too.
    let overlapped = report.variant("overlapped 1 MiB:pinned").unwrap();
    let parts: Vec<&str> = overlapped.checks.iter().map(|c| c.part.as_str()).collect();
    assert_eq!(parts, ["copy", "compute"]);
    // The chapter's claim at 64 MiB: a pinned DMA beats the host's pageable copy.
    let largest = summary
        .points
        .iter()
        .find(|p| p.series == "eager" && p.x == 64 << 20)
        .unwrap();
    assert_eq!(largest.pays(BAR), Some(true), "{largest:?}");
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn every_allocation_point_verifies_with_its_cost_per_buffer() {
    let gpu = Gpu::open(0).unwrap();
    let mut sweep =
        SweepLesson(AllocationSweep::new(&gpu, &[4 << 10, 4 << 20], &[1, 4], 3).unwrap());
    let report = run_lesson(&gpu, &mut sweep, &short()).unwrap();
    let summary = every_point_verified(&report, Kind::Prealloc, 4);
    for p in &summary.points {
        assert!(p.figure("alloc+free us").is_some(), "{p:?}");
    }
    assert_eq!(summary.crossovers.len(), 2, "one line per count");
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn every_batch_point_trains_what_the_reference_trains() {
    let gpu = Gpu::open(0).unwrap();
    let base = TrainConfig {
        hidden: 100,
        samples: 8192,
        step_batch: 256,
        microbatch: 32,
        lr: 0.05,
        seed: 7,
    };
    let mut sweep =
        SweepLesson(TrainingSweep::new(&gpu, Kind::Batch, base, &[8, 512, 4096]).unwrap());
    let report = run_lesson(&gpu, &mut sweep, &short()).unwrap();
    every_point_verified(&report, Kind::Batch, 3);
    for v in &report.variants {
        let against: Vec<&str> = v.checks.iter().map(|c| c.against.as_str()).collect();
        assert!(against.contains(&"float64 CPU reference"), "{}", v.id());
        if v.name == "whole batch" {
            assert!(against.contains(&"the baseline"), "{}", v.id());
        }
    }
    // At a microbatch as large as the batch both sides are one pass: the same training exactly.
    let whole = report.variant("microbatch 4096:whole batch").unwrap();
    let same = whole
        .checks
        .iter()
        .find(|c| c.against == "the baseline" && c.part == "weight change")
        .unwrap();
    assert_eq!(same.rel_l2_error, 0.0);
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn every_graphs_point_replays_exactly_what_eager_launches_do() {
    let gpu = Gpu::open(0).unwrap();
    let base = TrainConfig {
        hidden: 256,
        samples: 2048,
        step_batch: 256,
        microbatch: 32,
        lr: 0.05,
        seed: 5,
    };
    let mut sweep = SweepLesson(TrainingSweep::new(&gpu, Kind::Graphs, base, &[1, 2, 8]).unwrap());
    assert_eq!(sweep.variants().len(), 6);
    let report = run_lesson(&gpu, &mut sweep, &short()).unwrap();
    let summary = every_point_verified(&report, Kind::Graphs, 3);
    for v in report.variants.iter().filter(|v| v.name == "graph") {
        let same = v
            .checks
            .iter()
            .find(|c| c.against == "the baseline" && c.part == "weight change")
            .unwrap();
        assert_eq!(
            same.rel_l2_error,
            0.0,
            "{}: graph replays are eager bit for bit",
            v.id()
        );
    }
    // A graph of k steps holds k times the nodes of one step.
    let nodes = |k: u64| {
        summary
            .points
            .iter()
            .find(|p| p.x == k)
            .and_then(|p| p.figure("nodes per graph"))
            .unwrap()
    };
    assert!(nodes(1) >= 8.0 * 3.0, "a step of 8 passes: {}", nodes(1));
    assert_eq!(nodes(8), 8.0 * nodes(1));
}

/// A sweep side that computes something else is caught: the copy sweep's check on a target
/// poisoned after the run.
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn a_wrong_side_fails_its_check() {
    use common::runner::{Meter, Output, Reference, VariantSpec};
    struct Wrong(SweepLesson<CopySweep>);
    impl Lesson for Wrong {
        fn name(&self) -> &str {
            self.0.name()
        }
        fn parameters(&self) -> serde_json::Value {
            self.0.parameters()
        }
        fn variants(&self) -> Vec<VariantSpec> {
            self.0.variants()
        }
        fn reference(&self, i: usize) -> Option<&Reference> {
            self.0.reference(i)
        }
        fn poison(&mut self, gpu: &Gpu, i: usize) -> common::Result<()> {
            self.0.poison(gpu, i)
        }
        fn run(&mut self, gpu: &Gpu, i: usize) -> common::Result<()> {
            self.0.run(gpu, i)?;
            if i == 1 {
                // The pinned side then overwrites what it copied.
                self.0.poison(gpu, i)?;
            }
            Ok(())
        }
        fn bench_config(&self, i: usize, cfg: BenchConfig) -> BenchConfig {
            self.0.bench_config(i, cfg)
        }
        fn output(&mut self, gpu: &Gpu, i: usize) -> common::Result<Output> {
            self.0.output(gpu, i)
        }
        fn sections(
            &mut self,
            gpu: &Gpu,
            v: &[common::report::VariantReport],
            m: &mut Meter,
        ) -> common::Result<Vec<common::report::Section>> {
            self.0.sections(gpu, v, m)
        }
    }
    let gpu = Gpu::open(0).unwrap();
    let sweep = CopySweep::new(&gpu, &[32 << 10], 8, 1).unwrap();
    let mut wrong = Wrong(SweepLesson(sweep));
    let report = run_lesson(&gpu, &mut wrong, &short()).unwrap();
    assert_eq!(
        report.variant("eager 32 KiB:pageable").unwrap().status,
        Status::Ok
    );
    assert_eq!(
        report.variant("eager 32 KiB:pinned").unwrap().status,
        Status::Failed
    );
    let summary = Summary::from_section(&report.sections[0]).unwrap();
    assert!(summary.points[0].failed());
    assert_eq!(summary.points[0].pays(BAR), None);
    assert!(report.sections[0].markdown().contains("FAILED"));
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn the_binary_writes_a_report_and_a_plot_per_sweep() {
    // On a GPU machine the binary travels apart from the build tree: CH1_BASICS_BIN says where.
    let bin = std::env::var("CH1_BASICS_BIN").unwrap_or(env!("CARGO_BIN_EXE_ch1-basics").into());
    let dir = std::env::temp_dir().join(format!("ch1-basics-sweeps-{}", std::process::id()));
    let json = dir.join("sweep.json");
    let out = Command::new(bin)
        .args(["--sweep", "all", "--samples", "4096", "--json"])
        .arg(&json)
        .arg("--sweep-out")
        .arg(&dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    for kind in Kind::All.each() {
        let report = LessonReport::read_json(&dir.join(format!("sweep-{}.json", kind.name())))
            .unwrap_or_else(|e| panic!("{}: {e}", kind.name()));
        assert_eq!(report.lesson, kind.lesson());
        assert!(report.all_passed(), "{}", kind.name());
        let summary = Summary::from_section(&report.sections[0]).unwrap();
        assert!(!summary.crossovers.is_empty());
        for ext in ["svg", "png"] {
            let plot = dir.join(format!("{}.{ext}", kind.lesson()));
            assert!(plot.exists(), "{}", plot.display());
        }
    }
    assert!(
        stdout.contains("rule: the change pays at a size"),
        "{stdout}"
    );
    let _ = std::fs::remove_dir_all(dir);
}
