//! # Chapter 1: many small GEMMs, one by one or in one batched call
//!
//! 40 products `C_i = A_i · B_i` of (32 x 256) x (256 x 256) in fp32 as 40 `cublasSgemm` calls,
//! one `cublasSgemmBatched` call or one `cublasSgemmStridedBatched` call. The lesson (what each
//! side does, what to expect and why, the results on the H100 and the H200) is the page
//! `ch1-gemm/README.md`. cuBLAS is column-major and the lesson's matrices are row-major: see
//! [layout] for how the call is arranged, and the tests that check it against float64.

pub mod batch;
pub mod cli;
pub mod layout;
pub mod problem;
pub mod sweep;

use serde_json::json;

use common::bench::BenchConfig;
use common::gpu::Gpu;
use common::report::{Metric, Section, VariantReport};
use common::runner::{Lesson, Meter, Output, Reference, VariantSpec};
use common::verify::Precision;
use common::Result;

use batch::GemmBatch;
use problem::{tolerance, work, MemoryPlan, Shape};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    Baseline,
    Batched,
    Strided,
}

impl Variant {
    pub const ALL: [Variant; 3] = [Variant::Baseline, Variant::Batched, Variant::Strided];

    /// Each variant's name and description, in the order of [Variant::ALL].
    const TEXT: [(&str, &str); 3] = [
        ("baseline", "one cublasSgemm call per product"),
        (
            "batched",
            "one cublasSgemmBatched call (device arrays of pointers)",
        ),
        (
            "strided",
            "one cublasSgemmStridedBatched call (fixed strides)",
        ),
    ];

    pub fn name(self) -> &'static str {
        Variant::TEXT[self as usize].0
    }

    pub fn description(self) -> &'static str {
        Variant::TEXT[self as usize].1
    }
}

/// Above this many cuBLAS calls in one sample, launches are not held behind the harness's
/// blocking kernel: CUDA's queue of pending launches (about a thousand kernels) would fill,
/// block the host, and stall the held stream until the blocking kernel times out.
pub const MAX_HELD_CALLS: usize = 256;

/// Whether a run of `calls` cuBLAS calls can be queued behind the blocking kernel.
pub fn can_hold(calls: usize) -> bool {
    calls <= MAX_HELD_CALLS
}

/// The lesson's own figure: time per product, microseconds, from a run's median.
pub const PER_PRODUCT: &str = "per product";

/// [PER_PRODUCT] of a timed variant whose runs compute `count` products.
pub fn per_product(timed: &VariantReport, count: usize) -> Vec<Metric> {
    let per = |us: f64| Metric::new(PER_PRODUCT, us / count as f64, "us");
    timed.time_ms.iter().map(|t| per(t.median * 1e3)).collect()
}

/// What was computed, in what precision, checked how closely.
pub fn problem_section(shape: &Shape, precision: Precision) -> Section {
    let math = match precision {
        Precision::Tf32 => "tf32 (cuBLAS TF32 tensor-op math)",
        _ => "fp32 (cuBLAS default math, no tensor-op shortcuts)",
    };
    let (label, tolerance) = (shape.label(), tolerance(precision, shape.k));
    let mut s = Section::new("problem");
    s.lines.push(format!(
        "{label}, {math} (tolerance {tolerance:.1e} relative L2 against float64)"
    ));
    s
}

pub struct GemmLesson {
    seed: u64,
    batch: GemmBatch,
    reference: Reference,
}

impl GemmLesson {
    /// Check the shape, memory (device, host) and the reference's cost first, then make the
    /// batch on the GPU from seeded inputs, and the float64 reference.
    pub fn new(gpu: &Gpu, shape: Shape, precision: Precision, seed: u64) -> Result<GemmLesson> {
        let (free, total) = gpu.memory()?;
        MemoryPlan::of(&shape)?.check(&shape, free, total, common::gpu::host_available_bytes())?;
        let batch = GemmBatch::new(gpu, shape, seed, precision)?;
        let reference = batch.reference(0, shape.count);
        let reference = Reference::single("float64 CPU reference", reference);
        Ok(GemmLesson {
            seed,
            batch,
            reference,
        })
    }

    pub fn batch_mut(&mut self) -> &mut GemmBatch {
        &mut self.batch
    }

    pub fn shape(&self) -> Shape {
        *self.batch.shape()
    }
}

impl Lesson for GemmLesson {
    fn name(&self) -> &str {
        "ch1-gemm"
    }

    fn parameters(&self) -> serde_json::Value {
        let s = self.shape();
        json!({
            "shape": s.dims(), "m": s.m, "n": s.n, "k": s.k, "count": s.count,
            "layout": "row-major A (m x k), B (k x n), C (m x n), products back to back",
            "dtype": "f32",
            "precision": self.batch.precision().label(),
            "math_mode": batch::math_mode(self.batch.precision())
                .map(|m| format!("{m:?}"))
                .unwrap_or_default(),
            "tolerance_rel_l2": tolerance(self.batch.precision(), s.k),
            "seed": self.seed,
            "launches_held": can_hold(s.count),
        })
    }

    fn variants(&self) -> Vec<VariantSpec> {
        let s = self.shape();
        let precision = self.batch.precision();
        Variant::ALL
            .iter()
            .map(|&v| {
                let work = work(&s, v == Variant::Batched);
                VariantSpec::new(v.name(), v.description(), precision, work)
                    .with_tolerance(tolerance(precision, s.k))
            })
            .collect()
    }

    fn reference(&self, _index: usize) -> Option<&Reference> {
        Some(&self.reference)
    }

    fn poison(&mut self, gpu: &Gpu, _index: usize) -> Result<()> {
        self.batch.poison(gpu)
    }

    fn run(&mut self, gpu: &Gpu, index: usize) -> Result<()> {
        let count = self.shape().count;
        self.batch.run(gpu, Variant::ALL[index], count)
    }

    fn output(&mut self, gpu: &Gpu, _index: usize) -> Result<Output> {
        Ok(Output::values(self.batch.output(gpu)?))
    }

    /// The baseline's `count` calls decide for all three, so the table compares runs queued
    /// the same way.
    fn bench_config(&self, _index: usize, cfg: BenchConfig) -> BenchConfig {
        BenchConfig {
            hold: cfg.hold && can_hold(self.shape().count),
            ..cfg
        }
    }

    fn metrics(
        &mut self,
        _gpu: &Gpu,
        _index: usize,
        timed: &VariantReport,
        _meter: &mut Meter,
    ) -> Result<Vec<Metric>> {
        Ok(per_product(timed, self.shape().count))
    }

    fn sections(&mut self, _: &Gpu, _: &[VariantReport], _: &mut Meter) -> Result<Vec<Section>> {
        Ok(vec![problem_section(&self.shape(), self.batch.precision())])
    }
}
