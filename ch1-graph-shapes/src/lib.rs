#![doc = include_str!("../README.md")]

use std::collections::{hash_map::Entry, HashMap};

use cudarc::driver::{CudaFunction, CudaGraph, CudaSlice, CudaViewMut, PushKernelArg};

use common::bench::BenchConfig;
use common::error::CudaContext as _;
use common::kernels::{grid_1d, load, KernelSource};
use common::runner::{Lesson, Reference, VariantSpec};
use common::{counters::Work, verify::Precision, Gpu, Result};

pub mod cli;

pub const KERNELS: KernelSource = KernelSource {
    name: "graph-shapes",
    code: include_str!("../kernels/steps.cu"),
};
/// Kernels per request, and what each does to an element (in float64).
pub const STEPS: i32 = 16;
pub fn step(v: f64, k: i32) -> f64 {
    0.9 * v - 0.1 * v * v * v + 0.01 * (k + 1) as f64
}
pub const VARIANTS: [(&str, &str); 3] = [
    (
        "per-shape",
        "capture, instantiate, launch a graph at each request's length",
    ),
    ("eager", "launch each request's kernels one by one"),
    (
        "bucketed",
        "replay the graph of the request's power-of-two bucket",
    ),
];

pub struct GraphShapes {
    lengths: Vec<usize>,
    x: CudaSlice<f32>,
    y: CudaSlice<f32>,
    /// Every request is copied here, run in place, and copied back: a graph's pointers are fixed.
    staged: CudaSlice<f32>,
    step: CudaFunction,
    buckets: HashMap<usize, CudaGraph>,
    reference: Reference,
}

/// Queue the STEPS kernels of one request, in place on `y`.
fn queue(gpu: &Gpu, step: &CudaFunction, y: &mut CudaViewMut<f32>) -> Result<()> {
    let (n, cfg) = (y.len() as u64, grid_1d(y.len() as u64, 256));
    for k in 0..STEPS {
        // SAFETY: step(float*, u64, int) over the n elements of y.
        unsafe {
            gpu.stream
                .launch_builder(step)
                .arg(&mut *y)
                .arg(&n)
                .arg(&k)
                .launch(cfg)
        }
        .cuda("step")?;
    }
    Ok(())
}

impl GraphShapes {
    /// `lengths`: each request's element count (all different: no shape repeats).
    pub fn new(gpu: &Gpu, lengths: Vec<usize>, seed: u64) -> Result<GraphShapes> {
        let x = common::verify::uniform_f32(seed, lengths.iter().sum(), -1.0, 1.0);
        let want = x.iter().map(|&v| (0..STEPS).fold(v as f64, step));
        let largest = lengths.iter().max().unwrap_or(&1).next_power_of_two();
        Ok(GraphShapes {
            y: gpu.alloc(x.len(), "the outputs")?,
            x: gpu.upload(&x, "the inputs")?,
            staged: gpu.alloc_zeros(largest, "the staged request")?,
            step: load(gpu, KERNELS, &[])?.function("step")?,
            buckets: HashMap::new(),
            reference: Reference::single("float64 CPU reference", want.collect()),
            lengths,
        })
    }
}

impl Lesson for GraphShapes {
    fn name(&self) -> &str {
        "ch1-graph-shapes"
    }
    fn parameters(&self) -> serde_json::Value {
        serde_json::json!({ "request_lengths": self.lengths, "kernels_per_request": STEPS })
    }
    fn variants(&self) -> Vec<VariantSpec> {
        let n = self.lengths.iter().sum::<usize>() as u64;
        let work = Work::elementwise_f32(n, STEPS as u64, STEPS as u64, 4 * STEPS as u64);
        let spec = |(name, what)| VariantSpec::new(name, what, Precision::Fp32, work);
        VARIANTS.into_iter().map(spec).collect()
    }
    fn reference(&self, _index: usize) -> Option<&Reference> {
        Some(&self.reference)
    }
    fn output_buffer(&mut self, _index: usize) -> Option<&mut CudaSlice<f32>> {
        Some(&mut self.y)
    }
    fn bench_config(&self, _index: usize, cfg: BenchConfig) -> BenchConfig {
        BenchConfig { hold: false, ..cfg } // the host's launches and captures are the lesson
    }
    fn run(&mut self, gpu: &Gpu, index: usize) -> Result<()> {
        let mut at = 0;
        for &len in &self.lengths {
            let (x, mut y) = (self.x.slice(at..at + len), self.y.slice_mut(at..at + len));
            at += len;
            let (step, staged) = (&self.step, &mut self.staged);
            gpu.stream
                .memcpy_dtod(&x, &mut staged.slice_mut(..len))
                .cuda("staging")?;
            match VARIANTS[index].0 {
                "eager" => queue(gpu, step, &mut staged.slice_mut(..len))?,
                "per-shape" => {
                    let graph = gpu.capture(|| queue(gpu, step, &mut staged.slice_mut(..len)))?;
                    graph.launch().cuda("launching a graph")?;
                }
                _ => {
                    let graph = match self.buckets.entry(len.next_power_of_two()) {
                        Entry::Occupied(cached) => cached.into_mut(),
                        Entry::Vacant(new) => {
                            let size = *new.key();
                            new.insert(
                                gpu.capture(|| queue(gpu, step, &mut staged.slice_mut(..size)))?,
                            )
                        }
                    };
                    graph.launch().cuda("launching a graph")?;
                }
            }
            gpu.stream
                .memcpy_dtod(&staged.slice(..len), &mut y)
                .cuda("unstaging")?;
        }
        Ok(())
    }
}
