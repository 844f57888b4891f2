//! The sweeps on a GPU (`cargo test -p ch1-basics --test sweeps -- --ignored`): every point of
//! each sweep verifies and is timed at small plans, each sweep's section keeps its summary,
//! a planted wrong side is caught, and the binary writes a report and a plot per sweep.

use std::process::Command;

use ch1_basics::sweep::allocations::AllocationSweep;
use ch1_basics::sweep::copies::CopySweep;
use ch1_basics::sweep::training::TrainingSweep;
use ch1_basics::sweep::{Kind, BAR};
use ch1_basics::training::TrainConfig;
use common::gpu::Gpu;
use common::report::{LessonReport, Status};
use common::runner::{run_lesson, Lesson, RunOptions};
use common::sweep::{Summary, SweepLesson};

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
    use common::bench::BenchConfig;
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
