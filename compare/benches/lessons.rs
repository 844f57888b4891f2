//! `cargo bench -p compare`: criterion benchmarks. The lesson variants are timed on the GPU
//! with CUDA events (iter_custom), and skipped with a printed reason without one; the
//! harness's CPU-side statistics and stopping rule are benchmarked everywhere.

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use cudarc::driver::sys::CUevent_flags;

use common::gpu::Gpu;
use common::lesson::Lesson;
use common::stats::Summary;
use common::stop::StopRule;

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

/// Time `iters` runs of a variant with CUDA events around them.
fn gpu_time(gpu: &Gpu, iters: u64, run: &mut dyn FnMut()) -> Duration {
    let start = gpu
        .ctx
        .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
        .expect("event");
    let end = gpu
        .ctx
        .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
        .expect("event");
    start.record(&gpu.stream).expect("record");
    for _ in 0..iters {
        run();
    }
    end.record(&gpu.stream).expect("record");
    Duration::from_secs_f64(start.elapsed_ms(&end).expect("elapsed") as f64 / 1e3)
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
    for (index, spec) in lesson.variants().iter().enumerate() {
        group.bench_function(BenchmarkId::from_parameter(spec.name), |b| {
            b.iter_custom(|iters| {
                gpu_time(&gpu, iters, &mut || {
                    lesson.run(&gpu, index).expect("launch")
                })
            })
        });
    }
    group.finish();
}

criterion_group!(benches, cpu_side, gpu_variants);
criterion_main!(benches);
