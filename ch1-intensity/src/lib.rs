//! # Chapter 1: arithmetic intensity
//!
//! One elementwise function written five ways, from three memory-bound one-op kernels to one
//! fused kernel; every variant checked against a float64 CPU reference. The lesson (what each
//! variant changes, what to expect and why, the results on the H100 and the H200) is the page
//! `ch1-intensity/README.md`; the kernels are in `kernels/intensity.cu`.

use cudarc::driver::{CudaFunction, CudaSlice, LaunchConfig, PushKernelArg};
use serde_json::json;

use common::counters::Work;
use common::error::CudaContext as _;
use common::gpu::Gpu;
use common::kernels::{self, KernelSource};
use common::runner::{Lesson, Output, Reference, VariantSpec};
use common::verify::{normal_f32, Precision};
use common::Result;

pub const KERNELS: KernelSource = KernelSource {
    name: "intensity",
    code: include_str!("../kernels/intensity.cu"),
};

pub const ALPHA: f64 = 1.5;
pub const BETA: f64 = -0.25;
/// Window coefficients, lowest power first: sum of (-t/2)^k for k = 0..8.
pub const WINDOW: [f64; 9] = [
    1.0, -0.5, 0.25, -0.125, 0.0625, -0.03125, 0.015625, -0.0078125, 0.00390625,
];
/// FLOPs to compute one window value: one FMA for t, eight for Horner.
pub const WINDOW_FLOPS: u64 = 18;

pub const THREADS: u32 = 256;
pub const UNROLL: u64 = 4;

/// The window at element i of n, in float64.
pub fn window(i: u64, n: u64) -> f64 {
    let t = (i as f64 + 0.5) / n as f64;
    WINDOW.iter().rev().fold(0.0, |acc, &c| acc * t + c)
}

/// The function every variant computes, in float64.
pub fn reference(x: &[f32], y: &[f32]) -> Vec<f64> {
    let n = x.len() as u64;
    common::par::map(x.len(), |i| {
        ALPHA * (x[i] as f64 * window(i as u64, n) + y[i] as f64) + BETA
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    Baseline,
    Unrolled,
    Vectorized,
    MoreFlops,
    Fused,
}

impl Variant {
    pub const ALL: [Variant; 5] = [
        Variant::Baseline,
        Variant::Unrolled,
        Variant::Vectorized,
        Variant::MoreFlops,
        Variant::Fused,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Variant::Baseline => "baseline",
            Variant::Unrolled => "unrolled",
            Variant::Vectorized => "vectorized",
            Variant::MoreFlops => "more-flops",
            Variant::Fused => "fused",
        }
    }

    pub fn description(self) -> &'static str {
        match self {
            Variant::Baseline => "3 one-op kernels, 1 element/thread, window read from a table",
            Variant::Unrolled => "3 kernels, 4 elements/thread, loads issued first",
            Variant::Vectorized => "3 kernels, float4 loads/stores, scalar tail",
            Variant::MoreFlops => "3 float4 kernels, window recomputed (9 FMAs) instead of loaded",
            Variant::Fused => "1 float4 kernel: read x and y once, write out once",
        }
    }

    /// Bytes and FLOPs one run moves and does over n elements, kernel by kernel.
    pub fn work(self, n: u64) -> Work {
        let scale_from_table = Work::elementwise_f32(n, 2, 1, 1);
        let add = Work::elementwise_f32(n, 2, 1, 1);
        let affine = Work::elementwise_f32(n, 1, 1, 2);
        match self {
            Variant::Baseline | Variant::Unrolled | Variant::Vectorized => {
                scale_from_table + add + affine
            }
            Variant::MoreFlops => Work::elementwise_f32(n, 1, 1, WINDOW_FLOPS + 1) + add + affine,
            // window, x*w+y as one FMA, affine as one FMA
            Variant::Fused => Work::elementwise_f32(n, 2, 1, WINDOW_FLOPS + 2 + 2),
        }
    }
}

struct Kernels {
    scale: CudaFunction,
    add: CudaFunction,
    affine: CudaFunction,
    scale_unrolled: CudaFunction,
    add_unrolled: CudaFunction,
    affine_unrolled: CudaFunction,
    scale_vec4: CudaFunction,
    add_vec4: CudaFunction,
    affine_vec4: CudaFunction,
    scale_computed_vec4: CudaFunction,
    fused_vec4: CudaFunction,
}

/// Device buffers per element: x, y, window table, two intermediates, output.
pub const DEVICE_ARRAYS: u64 = 6;
/// Host bytes per element: x, y, window (f32), reference (f64), one downloaded output (f32).
pub const HOST_BYTES_PER_ELEMENT: u64 = 4 * 3 + 8 + 4;

pub struct Intensity {
    n: u64,
    seed: u64,
    x: CudaSlice<f32>,
    y: CudaSlice<f32>,
    w: CudaSlice<f32>,
    t: CudaSlice<f32>,
    s: CudaSlice<f32>,
    out: CudaSlice<f32>,
    k: Kernels,
    reference: Reference,
}

impl Intensity {
    /// Check memory first (device and host), then make seeded inputs and the reference.
    pub fn new(gpu: &Gpu, n: u64, seed: u64) -> Result<Intensity> {
        gpu.check_fits(
            &format!("{DEVICE_ARRAYS} arrays of {n} floats"),
            DEVICE_ARRAYS * 4 * n,
        )?;
        common::gpu::check_host_fits(
            &format!("inputs and reference for {n} elements"),
            HOST_BYTES_PER_ELEMENT * n,
        )?;
        let module = kernels::load(gpu, KERNELS, &[])?;
        let f = |name: &str| module.function(name);
        let k = Kernels {
            scale: f("scale_by_window")?,
            add: f("add_residual")?,
            affine: f("affine")?,
            scale_unrolled: f("scale_by_window_unrolled")?,
            add_unrolled: f("add_residual_unrolled")?,
            affine_unrolled: f("affine_unrolled")?,
            scale_vec4: f("scale_by_window_vec4")?,
            add_vec4: f("add_residual_vec4")?,
            affine_vec4: f("affine_vec4")?,
            scale_computed_vec4: f("scale_by_computed_window_vec4")?,
            fused_vec4: f("fused_vec4")?,
        };
        let len = n as usize;
        let x = normal_f32(seed, len, 1.0);
        let y = normal_f32(seed.wrapping_add(1), len, 1.0);
        let w: Vec<f32> = common::par::map(len, |i| window(i as u64, n) as f32);
        let reference = Reference::single("float64 CPU reference", reference(&x, &y));
        Ok(Intensity {
            n,
            seed,
            x: gpu.upload(&x, "x")?,
            y: gpu.upload(&y, "y")?,
            w: gpu.upload(&w, "the window table")?,
            t: gpu.alloc(len, "intermediate x*w")?,
            s: gpu.alloc(len, "intermediate x*w+y")?,
            out: gpu.alloc(len, "output")?,
            k,
            reference,
        })
    }

    pub fn n(&self) -> u64 {
        self.n
    }

    /// x, y and the output, for tests that plant kernels of their own.
    pub fn io_mut(&mut self) -> (&CudaSlice<f32>, &CudaSlice<f32>, &mut CudaSlice<f32>) {
        (&self.x, &self.y, &mut self.out)
    }

    pub fn inv_n(&self) -> f32 {
        (1.0 / self.n as f64) as f32
    }

    /// Launch one variant on the GPU's stream.
    pub fn launch(&mut self, gpu: &Gpu, variant: Variant) -> Result<()> {
        let n = self.n;
        let one_per_thread = grid(n);
        let unrolled = grid(n.div_ceil(UNROLL));
        let vec4 = grid((n / 4).max(n % 4));
        let fused = grid((n / 4).div_ceil(2).max(n % 4));
        let inv_n = self.inv_n();
        let st = &gpu.stream;
        let k = &self.k;
        let (x, y, w, t, s, out) = (
            &self.x,
            &self.y,
            &self.w,
            &mut self.t,
            &mut self.s,
            &mut self.out,
        );
        // SAFETY (every launch below): arguments match the kernel signatures in intensity.cu,
        // and each kernel touches at most n elements of buffers holding n elements.
        unsafe {
            match variant {
                Variant::Baseline | Variant::Unrolled | Variant::Vectorized => {
                    let (scale, add, aff, cfg) = match variant {
                        Variant::Baseline => (&k.scale, &k.add, &k.affine, one_per_thread),
                        Variant::Unrolled => (
                            &k.scale_unrolled,
                            &k.add_unrolled,
                            &k.affine_unrolled,
                            unrolled,
                        ),
                        _ => (&k.scale_vec4, &k.add_vec4, &k.affine_vec4, vec4),
                    };
                    st.launch_builder(scale)
                        .arg(x)
                        .arg(w)
                        .arg(&mut *t)
                        .arg(&n)
                        .launch(cfg)
                        .cuda("scale_by_window")?;
                    st.launch_builder(add)
                        .arg(&*t)
                        .arg(y)
                        .arg(&mut *s)
                        .arg(&n)
                        .launch(cfg)
                        .cuda("add_residual")?;
                    st.launch_builder(aff)
                        .arg(&*s)
                        .arg(&mut *out)
                        .arg(&n)
                        .launch(cfg)
                        .cuda("affine")?;
                }
                Variant::MoreFlops => {
                    st.launch_builder(&k.scale_computed_vec4)
                        .arg(x)
                        .arg(&mut *t)
                        .arg(&n)
                        .arg(&inv_n)
                        .launch(vec4)
                        .cuda("scale_by_computed_window_vec4")?;
                    st.launch_builder(&k.add_vec4)
                        .arg(&*t)
                        .arg(y)
                        .arg(&mut *s)
                        .arg(&n)
                        .launch(vec4)
                        .cuda("add_residual_vec4")?;
                    st.launch_builder(&k.affine_vec4)
                        .arg(&*s)
                        .arg(&mut *out)
                        .arg(&n)
                        .launch(vec4)
                        .cuda("affine_vec4")?;
                }
                Variant::Fused => {
                    st.launch_builder(&k.fused_vec4)
                        .arg(x)
                        .arg(y)
                        .arg(&mut *out)
                        .arg(&n)
                        .arg(&inv_n)
                        .launch(fused)
                        .cuda("fused_vec4")?;
                }
            }
        }
        Ok(())
    }
}

/// Blocks of THREADS covering `threads` threads (at least one block).
pub fn grid(threads: u64) -> LaunchConfig {
    common::kernels::grid_1d(threads, THREADS)
}

impl Lesson for Intensity {
    fn name(&self) -> &str {
        "ch1-intensity"
    }

    fn parameters(&self) -> serde_json::Value {
        json!({ "elements": self.n, "seed": self.seed, "dtype": "f32", "threads_per_block": THREADS })
    }

    fn variants(&self) -> Vec<VariantSpec> {
        Variant::ALL
            .iter()
            .map(|v| VariantSpec::new(v.name(), v.description(), Precision::Fp32, v.work(self.n)))
            .collect()
    }

    fn reference(&self, _index: usize) -> Option<&Reference> {
        Some(&self.reference)
    }

    fn poison(&mut self, gpu: &Gpu, _index: usize) -> Result<()> {
        gpu.poison(&mut self.out)?;
        gpu.poison(&mut self.t)?;
        gpu.poison(&mut self.s)
    }

    fn run(&mut self, gpu: &Gpu, index: usize) -> Result<()> {
        self.launch(gpu, Variant::ALL[index])
    }

    fn output(&mut self, gpu: &Gpu, _index: usize) -> Result<Output> {
        Ok(Output::values(gpu.download(&self.out)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_matches_its_closed_form() {
        // sum_{k=0}^{8} (-t/2)^k = (1 - (-t/2)^9) / (1 + t/2)
        for (i, n) in [(0u64, 10u64), (5, 10), (9, 10), (123, 1000)] {
            let t = (i as f64 + 0.5) / n as f64;
            let closed = (1.0 - (-t / 2.0).powi(9)) / (1.0 + t / 2.0);
            assert!((window(i, n) - closed).abs() < 1e-15);
        }
    }

    #[test]
    fn reference_is_the_stated_function() {
        let x = [1.0f32, -2.0];
        let y = [0.5f32, 0.25];
        let r = reference(&x, &y);
        assert!((r[0] - (1.5 * (1.0 * window(0, 2) + 0.5) - 0.25)).abs() < 1e-15);
        assert!((r[1] - (1.5 * (-2.0 * window(1, 2) + 0.25) - 0.25)).abs() < 1e-15);
    }

    #[test]
    fn bytes_and_flops_per_element() {
        let per = |v: Variant| {
            let w = v.work(1);
            (w.bytes(), w.flops)
        };
        assert_eq!(per(Variant::Baseline), (32, 4));
        assert_eq!(per(Variant::Unrolled), (32, 4));
        assert_eq!(per(Variant::Vectorized), (32, 4));
        assert_eq!(per(Variant::MoreFlops), (28, 22));
        assert_eq!(per(Variant::Fused), (12, 22));
        assert!((Variant::Baseline.work(1).intensity() - 0.125).abs() < 1e-12);
        assert!((Variant::Fused.work(1).intensity() - 22.0 / 12.0).abs() < 1e-12);
    }

    #[test]
    fn grids_cover_every_element_and_the_tail() {
        assert_eq!(grid(0).grid_dim.0, 1);
        assert_eq!(grid(256).grid_dim.0, 1);
        assert_eq!(grid(257).grid_dim.0, 2);
    }

    #[test]
    fn variant_names_are_unique() {
        let mut names: Vec<_> = Variant::ALL.iter().map(|v| v.name()).collect();
        names.dedup();
        assert_eq!(names.len(), 5);
    }
}

pub mod cli;
pub mod vector_add;
