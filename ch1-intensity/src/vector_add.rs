//! A plain vector add, c = a + b, one element per thread: the operation used to check the
//! harness's timing against independent timers (ncu, triton.testing.do_bench).

use cudarc::driver::{CudaFunction, CudaSlice, PushKernelArg};
use serde_json::json;

use common::counters::Work;
use common::error::CudaContext as _;
use common::gpu::Gpu;
use common::kernels;
use common::runner::{Lesson, Output, Reference, VariantSpec};
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
    reference: Reference,
}

impl VectorAdd {
    pub fn new(gpu: &Gpu, n: u64, seed: u64) -> Result<VectorAdd> {
        gpu.check_fits(&format!("3 arrays of {n} floats"), 12 * n)?;
        common::gpu::check_host_fits(&format!("inputs and reference for {n} elements"), 20 * n)?;
        let kernel = kernels::load(gpu, KERNELS, &[])?.function("vector_add")?;
        let a = normal_f32(seed, n as usize, 1.0);
        let b = normal_f32(seed.wrapping_add(1), n as usize, 1.0);
        let sum = a.iter().zip(&b).map(|(&x, &y)| x as f64 + y as f64);
        let reference = Reference::single("float64 CPU reference", sum.collect());
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
    fn name(&self) -> &str {
        "vector-add"
    }

    fn parameters(&self) -> serde_json::Value {
        json!({ "elements": self.n, "seed": self.seed, "dtype": "f32" })
    }

    fn variants(&self) -> Vec<VariantSpec> {
        vec![VariantSpec::new(
            "vector_add",
            "c = a + b, one element per thread",
            Precision::Fp32,
            Work::elementwise_f32(self.n, 2, 1, 1),
        )]
    }

    fn reference(&self, _index: usize) -> Option<&Reference> {
        Some(&self.reference)
    }

    fn poison(&mut self, gpu: &Gpu, _index: usize) -> Result<()> {
        gpu.poison(&mut self.c)
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

    fn output(&mut self, gpu: &Gpu, _index: usize) -> Result<Output> {
        Ok(Output::values(gpu.download(&self.c)?))
    }
}
