//! A plain vector add, c = a + b, one element per thread: the operation used to check the
//! harness's timing against independent timers (ncu, triton.testing.do_bench).

use cudarc::driver::{CudaFunction, CudaSlice, PushKernelArg};
use serde_json::json;

use common::counters::Work;
use common::error::CudaContext as _;
use common::gpu::Gpu;
use common::kernels;
use common::lesson::{Lesson, VariantSpec};
use common::verify::{normal_f32, Precision};
use common::Result;

use crate::{grid, KERNELS};

pub struct VectorAdd {
    n: u64,
    seed: u64,
    a: CudaSlice<f32>,
    b: CudaSlice<f32>,
    c: CudaSlice<f32>,
    kernel: CudaFunction,
    reference: Vec<f64>,
}

impl VectorAdd {
    pub fn new(gpu: &Gpu, n: u64, seed: u64) -> Result<VectorAdd> {
        gpu.check_fits(&format!("3 arrays of {n} floats"), 12 * n)?;
        common::gpu::check_host_fits(&format!("inputs and reference for {n} elements"), 20 * n)?;
        let kernel = kernels::load(gpu, KERNELS, &[])?.function("vector_add")?;
        let a = normal_f32(seed, n as usize, 1.0);
        let b = normal_f32(seed.wrapping_add(1), n as usize, 1.0);
        let reference = a
            .iter()
            .zip(&b)
            .map(|(&x, &y)| x as f64 + y as f64)
            .collect();
        Ok(VectorAdd {
            n,
            seed,
            a: gpu.upload(&a, "a")?,
            b: gpu.upload(&b, "b")?,
            c: gpu.alloc(n as usize, "c")?,
            kernel,
            reference,
        })
    }
}

impl Lesson for VectorAdd {
    fn name(&self) -> &'static str {
        "vector-add"
    }

    fn parameters(&self) -> serde_json::Value {
        json!({ "n": self.n, "seed": self.seed, "dtype": "f32" })
    }

    fn variants(&self) -> Vec<VariantSpec> {
        vec![VariantSpec::new(
            "vector_add",
            "c = a + b, one element per thread",
            Precision::Fp32,
            Work::elementwise_f32(self.n, 2, 1, 1),
        )]
    }

    fn baseline(&self) -> &'static str {
        "vector_add"
    }

    fn reference(&self) -> &[f64] {
        &self.reference
    }

    fn poison(&mut self, gpu: &Gpu) -> Result<()> {
        let nan = vec![f32::NAN; self.n as usize];
        gpu.stream
            .memcpy_htod(&nan, &mut self.c)
            .cuda("poisoning the output")
    }

    fn run(&mut self, gpu: &Gpu, _index: usize) -> Result<()> {
        let n = self.n;
        // SAFETY: vector_add(const float*, const float*, float*, u64) over n elements.
        unsafe {
            gpu.stream
                .launch_builder(&self.kernel)
                .arg(&self.a)
                .arg(&self.b)
                .arg(&mut self.c)
                .arg(&n)
                .launch(grid(n))
        }
        .cuda("vector_add")?;
        Ok(())
    }

    fn output(&mut self, gpu: &Gpu) -> Result<Vec<f32>> {
        gpu.download(&self.c)
    }
}
