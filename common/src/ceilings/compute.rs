//! Compute ceilings: FP32 FMA throughput of the CUDA cores, and cuBLAS GEMMs at a size that
//! saturates the GPU in fp32, tf32 and bf16.

use cudarc::driver::{LaunchConfig, PushKernelArg};

use super::ceiling::{best_of, ceiling_bench, Ceiling, RateAt, Theoretical};
use crate::bench::{measure, BenchConfig, Timer};
use crate::blas::{self, GemmPrecision, GemmProblem};
use crate::error::{CudaContext as _, Error, Result};
use crate::gpu::{DeviceInfo, Gpu};
use crate::kernels;
use crate::kernels::HARNESS;

pub const FMA_CHAINS: u64 = 8;
pub const FMA_ITERS: i32 = 4096;
const FMA_A: f32 = 0.999_9;
const FMA_B: f32 = 0.000_1;

/// FP32 lanes per SM, an architectural fact by compute capability (None where unknown).
pub fn fp32_lanes_per_sm(cc: (i32, i32)) -> Option<u32> {
    match cc {
        (7, _) => Some(64),
        (8, 0) => Some(64),
        (8, 6) | (8, 7) | (8, 9) => Some(128),
        (9, 0) => Some(128),
        (10, _) | (12, _) => Some(128),
        _ => None,
    }
}

/// SMs x FP32 lanes x 2 FLOPs (one FMA) x clock, GFLOP/s.
pub fn fp32_theoretical_gflops(info: &DeviceInfo, clock_mhz: u32) -> Option<f64> {
    let lanes = fp32_lanes_per_sm(info.compute_capability)?;
    Some(info.sm_count as f64 * lanes as f64 * 2.0 * clock_mhz as f64 * 1e6 / 1e9)
}

/// The value thread `t` of fma_chains computes, with the same correctly rounded FMAs.
pub fn fma_chains_reference(t: u64, iters: i32) -> f32 {
    let mut s = 0.0f32;
    for k in 0..FMA_CHAINS {
        let mut x = (t % 1024) as f32 * 0.001 + k as f32 * 0.125;
        for _ in 0..iters {
            x = x.mul_add(FMA_A, FMA_B);
        }
        s += x;
    }
    s
}

pub fn measure_fp32_fma(gpu: &Gpu, timer: &mut Timer) -> Result<Ceiling> {
    let module = kernels::load(gpu, HARNESS, &[])?;
    let f = module.function("fma_chains")?;
    // 2048 resident threads per SM on recent GPUs; 8 blocks of 256 per SM fills them.
    let blocks = gpu.info.sm_count * 8;
    let threads = blocks as u64 * 256;
    let mut out = gpu.alloc::<f32>(threads as usize, "FMA output")?;
    gpu.poison(&mut out)?;
    let cfg = LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    let stream = gpu.stream.clone();
    let (a, b, iters) = (FMA_A, FMA_B, FMA_ITERS);
    let launch = |out: &mut cudarc::driver::CudaSlice<f32>| {
        let mut l = stream.launch_builder(&f);
        l.arg(out);
        l.arg(&iters);
        l.arg(&a);
        l.arg(&b);
        // SAFETY: fma_chains(float*, int, float, float); one output per launched thread.
        unsafe { l.launch(cfg) }.cuda("fma_chains").map(|_| ())
    };
    launch(&mut out)?;
    let got = gpu.download(&out)?;
    // Check a spread of threads (the CPU would take minutes for all of them).
    let picks: Vec<u64> = (0..64).map(|i| i * (threads / 64) + i % 7).collect();
    let reference: Vec<f64> = crate::par::map(picks.len(), |i| {
        fma_chains_reference(picks[i], iters) as f64
    });
    let sampled: Vec<f32> = picks.iter().map(|&t| got[t as usize]).collect();
    let check = crate::verify::check(
        &sampled,
        &reference,
        1e-6,
        "the same FMA recurrence on the CPU",
    );
    if !check.passed || got.iter().any(|v| !v.is_finite()) {
        return Err(Error::invalid(format!(
            "the FMA peak kernel computed wrong values: {check:?}"
        )));
    }
    let m = measure(gpu, timer, &ceiling_bench(), &mut || launch(&mut out))?;
    let flops = threads as f64 * FMA_CHAINS as f64 * iters as f64 * 2.0;
    let mut c = best_of(
        gpu,
        vec![(
            "fma_chains kernel (8 independent FMA chains per thread)".into(),
            m,
        )],
        RateAt::P10,
        |s| flops / s / 1e9,
        "GFLOP/s",
        |name, s| {
            format!(
                "{name}, {blocks} blocks of 256, median of {} samples",
                s.samples
            )
        },
    )?;
    c.verification_error = Some(check.rel_l2_error);
    let clock = c.sm_clock_mhz.unwrap_or(gpu.info.max_sm_clock_mhz);
    c.theoretical = fp32_theoretical_gflops(&gpu.info, clock).map(|value| Theoretical {
        value,
        basis: format!(
            "{} SMs x {} FP32 lanes x 2 x {clock} MHz (SM clock read during the run)",
            gpu.info.sm_count,
            fp32_lanes_per_sm(gpu.info.compute_capability).unwrap_or(0)
        ),
    });
    Ok(c)
}

pub struct GemmCeilings {
    pub fp32: Ceiling,
    pub tf32: Ceiling,
    pub bf16: Ceiling,
}

/// Square GEMM size used for the ceilings: 8192 where memory allows, else the largest power
/// of two that fits in a quarter of free memory.
pub fn gemm_ceiling_size(free_bytes: u64) -> usize {
    let mut n = 8192usize;
    while n > 512 && 3 * (n * n) as u64 * 4 > free_bytes / 4 {
        n /= 2;
    }
    n
}

/// Each precision's ceiling is the best of several square sizes: the largest is not always
/// the fastest (an 8192^3 bf16 GEMM runs long enough to meet the power limit; seen on an H200,
/// where 4096^3 ran 10% faster), and runs spaced by L2 flushes beat back-to-back ones.
pub fn measure_gemms(gpu: &Gpu, timer: &mut Timer) -> Result<GemmCeilings> {
    Ok(GemmCeilings {
        fp32: measure_gemm(gpu, timer, GemmPrecision::Fp32)?,
        tf32: measure_gemm(gpu, timer, GemmPrecision::Tf32)?,
        bf16: measure_gemm(gpu, timer, GemmPrecision::Bf16)?,
    })
}

/// The sizes of the full GEMM ceilings.
pub const GEMM_CEILING_SIZES: [usize; 3] = [2048, 4096, 8192];

/// The one size of the quick SGEMM figure ([measure_gemm_one_size]): where the best of the full
/// figure's six runs came on the H100 and the H200 (`results/*/ch1-roofline.json`; the 8192
/// runs within 0.2% of it).
pub const GEMM_ONE_SIZE: usize = 4096;

/// The sizes of `candidates` that fit in `free` bytes of device memory.
pub fn gemm_sizes_that_fit(candidates: &[usize], free: u64) -> Vec<usize> {
    let largest = gemm_ceiling_size(free);
    candidates
        .iter()
        .copied()
        .filter(|&s| s <= largest)
        .collect()
}

/// One precision's GEMM ceiling (see [measure_gemms]).
pub fn measure_gemm(gpu: &Gpu, timer: &mut Timer, precision: GemmPrecision) -> Result<Ceiling> {
    measure_gemm_at(gpu, timer, precision, &GEMM_CEILING_SIZES)
}

/// A precision's GEMM rate at [GEMM_ONE_SIZE] alone, hot and cold: about a third of the time of
/// [measure_gemm], whose 8192 problem's inputs take most of the rest, for a figure the full one
/// is within a fraction of a percent of on the GPUs measured. Not a ceiling a roofline draws.
pub fn measure_gemm_one_size(
    gpu: &Gpu,
    timer: &mut Timer,
    precision: GemmPrecision,
) -> Result<Ceiling> {
    measure_gemm_at(gpu, timer, precision, &[GEMM_ONE_SIZE])
}

/// The best of `candidates` (those that fit), each hot and cold.
fn measure_gemm_at(
    gpu: &Gpu,
    timer: &mut Timer,
    precision: GemmPrecision,
    candidates: &[usize],
) -> Result<Ceiling> {
    let blas = blas::handle(gpu)?;
    let (free, _) = gpu.memory()?;
    let sizes = gemm_sizes_that_fit(candidates, free);
    let name = match precision {
        GemmPrecision::Fp32 => "cublasGemmEx fp32, CUBLAS_COMPUTE_32F (SGEMM)",
        GemmPrecision::Tf32 => "cublasGemmEx fp32 in/out, CUBLAS_COMPUTE_32F_FAST_TF32",
        GemmPrecision::Bf16 => "cublasGemmEx bf16 in/out, CUBLAS_COMPUTE_32F",
    };
    let mut best: Option<Ceiling> = None;
    let mut all = Vec::new();
    let mut worst_error: f64 = 0.0;
    for &n in &sizes {
        let mut p = GemmProblem::new(gpu, n, n, n, precision, 11)?;
        p.poison(gpu)?;
        p.run(gpu, &blas)?;
        let check = p.check_sampled(gpu, 256)?;
        if !check.passed {
            return Err(Error::invalid(format!(
                "the {precision:?} GEMM ceiling computed wrong values at {n}: {check:?}"
            )));
        }
        worst_error = worst_error.max(check.rel_l2_error);
        let flops = p.work().flops as f64;
        // Back-to-back runs heat the chip toward its power limit; runs with an L2 flush
        // between them do not. Both are real rates; the ceiling is the best.
        for (mode, cold) in [
            ("back-to-back", false),
            ("one per sample after an L2 flush", true),
        ] {
            let cfg = BenchConfig {
                cold,
                ..ceiling_bench()
            };
            let m = measure(gpu, timer, &cfg, &mut || p.run(gpu, &blas))?;
            let label = format!("{name}, {n}x{n}x{n}, {mode}");
            let c = best_of(
                gpu,
                vec![(label.clone(), m)],
                RateAt::P10,
                |s| flops / s / 1e9,
                "GFLOP/s",
                |name, s| {
                    format!("{name}, random normal inputs, rate at the 10th-percentile time of {} samples (best of sizes {sizes:?}, hot and cold)", s.samples)
                },
            )?;
            all.push((label, c.value));
            if best.as_ref().is_none_or(|b| c.value > b.value) {
                best = Some(c);
            }
        }
    }
    let mut c = best.ok_or_else(|| Error::invalid("no GEMM size fits in device memory"))?;
    c.candidates = all;
    c.verification_error = Some(worst_error);
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fma_reference_is_a_stable_recurrence() {
        // x -> x * a + b converges to b / (1 - a) = 1.0.
        let v = fma_chains_reference(5, 100_000);
        assert!((v - 8.0).abs() < 1e-2, "{v}");
        assert_ne!(fma_chains_reference(1, 10), fma_chains_reference(2, 10));
    }

    #[test]
    fn theoretical_fp32_of_an_h100_sxm() {
        let info = DeviceInfo {
            ordinal: 0,
            name: "NVIDIA H100 80GB HBM3".into(),
            uuid: String::new(),
            compute_capability: (9, 0),
            sm_count: 132,
            total_memory_bytes: 0,
            l2_bytes: 0,
            max_sm_clock_mhz: 1980,
            memory_clock_mhz: 0,
            memory_bus_width_bits: 0,
            driver_version: String::new(),
            cuda_driver_version: String::new(),
            nvrtc_version: String::new(),
        };
        // 132 x 128 x 2 x 1.98 GHz = 66.9 TFLOP/s
        let g = fp32_theoretical_gflops(&info, 1980).unwrap();
        assert!((g - 66_908.16).abs() < 0.01, "{g}");
        assert!(fp32_theoretical_gflops(
            &DeviceInfo {
                compute_capability: (3, 5),
                ..info
            },
            1000
        )
        .is_none());
    }

    #[test]
    fn gemm_sizes_are_those_that_fit() {
        let gib = 1u64 << 30;
        assert_eq!(
            gemm_sizes_that_fit(&GEMM_CEILING_SIZES, 80 * gib),
            GEMM_CEILING_SIZES
        );
        // 4096^2 x 3 x 4 bytes = 192 MiB must fit in a quarter of what is free; 8192's 768 MiB not.
        assert_eq!(gemm_sizes_that_fit(&GEMM_CEILING_SIZES, gib), [2048, 4096]);
        assert_eq!(gemm_sizes_that_fit(&[GEMM_ONE_SIZE], gib), [4096]);
        // Too little for the one size: none, and the measurement says no size fits.
        assert!(gemm_sizes_that_fit(&[GEMM_ONE_SIZE], 256 << 20).is_empty());
    }

    #[test]
    fn gemm_size_shrinks_to_fit() {
        assert_eq!(gemm_ceiling_size(140 << 30), 8192);
        assert_eq!(gemm_ceiling_size(1 << 30), 4096);
        assert_eq!(gemm_ceiling_size(1 << 20), 512);
    }
}
