//! `cargo bench -p ch1-intensity`: criterion benchmarks. The lesson's variants are timed on the
//! GPU by the harness's own timer (CUDA events on the lesson's stream, one sample of `iters` runs
//! per criterion iteration, not held behind the blocking kernel: criterion's iteration counts can
//! exceed the launch queue), and skipped with a printed reason without one; the harness's
//! CPU-side statistics and stopping rule are benchmarked everywhere.

use std::time::Duration;

use common::bench::Timer;
use common::gpu::Gpu;
use common::runner::Lesson;
use common::stats::Summary;
use common::stop::StopRule;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};

fn cpu_side(c: &mut Criterion) {
    let samples: Vec<f64> = common::verify::uniform_f32(1, 10_000, 1.0, 2.0)
        .into_iter()
        .map(f64::from)
        .collect();
    c.bench_function("stats/summary of 10k samples", |b| {
        b.iter(|| Summary::of(std::hint::black_box(&samples)))
    });
    let rule = StopRule::default();
    c.bench_function("stop/check on 10k samples", |b| {
        b.iter(|| rule.check(std::hint::black_box(&samples), 1.0))
    });
}

fn gpu_variants(c: &mut Criterion) {
    let gpu = match Gpu::open(0) {
        Ok(g) => g,
        Err(e) => {
            println!("skipping the GPU benchmarks: {e}");
            return;
        }
    };
    let mut group = c.benchmark_group("ch1-intensity (10M, GPU time)");
    group
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(300));
    let mut lesson = ch1_intensity::Intensity::new(&gpu, 10 << 20, 42).expect("lesson");
    let mut timer = Timer::new(&gpu).expect("timer");
    for (index, spec) in lesson.variants().iter().enumerate() {
        group.bench_function(BenchmarkId::from_parameter(&spec.name), |b| {
            b.iter_custom(|iters| {
                let (seconds, _) = timer
                    .sample(iters as usize, false, false, &mut || {
                        lesson.run(&gpu, index)
                    })
                    .expect("a timed sample");
                Duration::from_secs_f64(seconds)
            })
        });
    }
    group.finish();
}

criterion_group!(benches, cpu_side, gpu_variants);
criterion_main!(benches);
