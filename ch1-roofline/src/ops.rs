//! The operations placed on the roofline, measured on the GPU with L2 flushed before every
//! sample (so each point is held to DRAM, not to L2) and checked against float64 references.

use cudarc::driver::{CudaFunction, CudaSlice, LaunchConfig, PushKernelArg};

use common::bench::{measure, BenchConfig, Timer};
use common::blas::{GemmPrecision, GemmProblem};
use common::counters::Work;
use common::error::CudaContext as _;
use common::gpu::Gpu;
use common::kernels::{self, KernelSource};
use common::stats::Summary;
use common::verify::{Precision, Rng, Verification};
use common::Result;

use crate::report::{Point, Roofs};

pub const KERNELS: KernelSource = KernelSource {
    name: "roofline",
    code: include_str!("../kernels/roofline.cu"),
};

pub const VECTOR_SIZES: [u64; 3] = [16 << 20, 64 << 20, 256 << 20];
pub const SAXPY_SIZE: u64 = 64 << 20;
pub const POLY_SIZE: u64 = 64 << 20;
pub const POLY_DEGREES: [u32; 6] = [1, 4, 16, 64, 256, 1024];
pub const SGEMM_SIZES: [usize; 6] = [256, 512, 1024, 2048, 4096, 8192];
pub const BF16_SIZES: [usize; 4] = [1024, 2048, 4096, 8192];
const SAXPY_ALPHA: f32 = 0.5;
/// Entries compared against float64 per elementwise check (plus an all-finite scan).
const CHECK_SAMPLES: usize = 1 << 20;

/// Coefficient j of the lesson's polynomial, exactly as the kernel computes it.
pub fn poly_coef(j: u32) -> f32 {
    (if j & 1 == 1 { -1.0f32 } else { 1.0 }) / (j + 1) as f32
}

/// P_D(x) by Horner's rule in float64, with the kernel's f32 coefficients.
pub fn poly_reference(x: f32, degree: u32) -> f64 {
    let x = x as f64;
    (0..degree)
        .rev()
        .fold(poly_coef(degree) as f64, |w, j| w * x + poly_coef(j) as f64)
}

/// Check `got` against `reference(i)` at CHECK_SAMPLES spread indices, and every element for NaN.
pub fn sampled_check(
    got: &[f32],
    reference: impl Fn(usize) -> f64 + Sync,
    tolerance: f64,
) -> Verification {
    let n = got.len();
    let mut rng = Rng::new(0xc0ffee);
    let picks: Vec<usize> = (0..CHECK_SAMPLES.min(n))
        .map(|_| (rng.next_u64() % n as u64) as usize)
        .collect();
    let expected = common::par::map(picks.len(), |k| reference(picks[k]));
    let sampled: Vec<f32> = picks.iter().map(|&i| got[i]).collect();
    let mut v = common::verify::check(
        &sampled,
        &expected,
        tolerance,
        "float64 reference at sampled elements",
    );
    let non_finite = got.iter().filter(|x| !x.is_finite()).count();
    v.non_finite = non_finite;
    v.passed &= non_finite == 0;
    v.elements = n;
    v
}

struct Elementwise {
    a: CudaSlice<f32>,
    b: CudaSlice<f32>,
    c: CudaSlice<f32>,
    a_host: Vec<f32>,
    b_host: Vec<f32>,
    add: CudaFunction,
    mul: CudaFunction,
    saxpy: CudaFunction,
    poly: Vec<(u32, CudaFunction)>,
    sm_count: u32,
}

impl Elementwise {
    fn new(gpu: &Gpu, n: u64) -> Result<Elementwise> {
        gpu.check_fits("three vectors for the elementwise points", 12 * n)?;
        common::gpu::check_host_fits("the elementwise inputs", 8 * n)?;
        let module = kernels::load(gpu, KERNELS, &[])?;
        let a_host = common::verify::uniform_f32(21, n as usize, -0.9, 0.9);
        let b_host = common::verify::normal_f32(22, n as usize, 1.0);
        Ok(Elementwise {
            a: gpu.upload(&a_host, "vector a")?,
            b: gpu.upload(&b_host, "vector b")?,
            c: gpu.alloc(n as usize, "vector c")?,
            a_host,
            b_host,
            add: module.function("vector_add4")?,
            mul: module.function("vector_mul4")?,
            saxpy: module.function("saxpy4")?,
            poly: POLY_DEGREES
                .iter()
                .map(|&d| Ok((d, module.function(&format!("poly_{d}"))?)))
                .collect::<Result<_>>()?,
            sm_count: gpu.info.sm_count,
        })
    }

    fn cfg(&self, n4: u64) -> LaunchConfig {
        let blocks = n4.div_ceil(256).min(self.sm_count as u64 * 16).max(1) as u32;
        LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        }
    }
}

/// One op's timing: cold, the given stop rule.
fn time(
    gpu: &Gpu,
    timer: &mut Timer,
    cfg: &BenchConfig,
    run: &mut dyn FnMut() -> Result<()>,
) -> Result<Summary> {
    let m = measure(gpu, timer, cfg, run)?;
    Summary::of(&m.samples_s).ok_or_else(|| common::Error::invalid("no valid samples"))
}

/// Measure every operation; `skip_large` leaves out sizes that do not fit (with a note).
pub fn measure_points(
    gpu: &Gpu,
    timer: &mut Timer,
    cfg: &BenchConfig,
    roofs: &Roofs,
    notes: &mut Vec<String>,
) -> Result<Vec<Point>> {
    let mut points = Vec::new();
    let fp32 = roofs.compute_roof("fp32").expect("fp32 roof").clone();
    let bw = roofs.memory_gbps;
    let source = "measured (cold)";
    let (free, _) = gpu.memory()?;
    let max_n = VECTOR_SIZES
        .iter()
        .copied()
        .filter(|n| 12 * n < free / 2)
        .max()
        .unwrap_or(VECTOR_SIZES[0]);
    for n in VECTOR_SIZES.iter().filter(|&&n| n > max_n) {
        notes.push(format!(
            "vector sizes of {}M left out: not enough free device memory",
            n >> 20
        ));
    }
    let mut e = Elementwise::new(gpu, max_n)?;
    let stream = gpu.stream.clone();

    // c = a + b, c = a * b
    for (family, short, is_add) in [
        ("vector add", "add", true),
        ("vector multiply", "mul", false),
    ] {
        for &n in VECTOR_SIZES.iter().filter(|&&n| n <= max_n) {
            let n4 = n / 4;
            let lc = e.cfg(n4);
            let f = if is_add { e.add.clone() } else { e.mul.clone() };
            let run = |e: &mut Elementwise| -> Result<()> {
                let (a, b) = (e.a.slice(..n as usize), e.b.slice(..n as usize));
                let mut c = e.c.slice_mut(..n as usize);
                // SAFETY: (const float4*, const float4*, float4*, u64) over n4 vectors.
                unsafe {
                    stream
                        .launch_builder(&f)
                        .arg(&a)
                        .arg(&b)
                        .arg(&mut c)
                        .arg(&n4)
                        .launch(lc)
                }
                .cuda(family)?;
                Ok(())
            };
            gpu.poison(&mut e.c)?;
            run(&mut e)?;
            let got = gpu.download(&e.c)?;
            let (ah, bh) = (&e.a_host, &e.b_host);
            let v = sampled_check(
                &got[..n as usize],
                |i| {
                    if is_add {
                        ah[i] as f64 + bh[i] as f64
                    } else {
                        ah[i] as f64 * bh[i] as f64
                    }
                },
                Precision::Fp32.tolerance(),
            );
            let t = time(gpu, timer, cfg, &mut || run(&mut e))?;
            points.push(Point::place(
                family,
                &format!("{short} {}M", n >> 20),
                Precision::Fp32,
                &fp32,
                bw,
                Work::elementwise_f32(n, 2, 1, 1),
                t,
                Some(v),
                source,
            ));
        }
    }

    // y = alpha * x + y, in place: check one run from fresh inputs, then time.
    {
        let n = SAXPY_SIZE.min(max_n);
        let n4 = n / 4;
        let lc = e.cfg(n4);
        let f = e.saxpy.clone();
        let run = |e: &mut Elementwise| -> Result<()> {
            let x = e.a.slice(..n as usize);
            let mut y = e.b.slice_mut(..n as usize);
            // SAFETY: saxpy4(float, const float4*, float4*, u64) over n4 vectors.
            unsafe {
                stream
                    .launch_builder(&f)
                    .arg(&SAXPY_ALPHA)
                    .arg(&x)
                    .arg(&mut y)
                    .arg(&n4)
                    .launch(lc)
            }
            .cuda("saxpy4")?;
            Ok(())
        };
        run(&mut e)?;
        let got = gpu.download(&e.b)?;
        let (ah, bh) = (&e.a_host, &e.b_host);
        let v = sampled_check(
            &got[..n as usize],
            |i| SAXPY_ALPHA as f64 * ah[i] as f64 + bh[i] as f64,
            Precision::Fp32.tolerance(),
        );
        let t = time(gpu, timer, cfg, &mut || run(&mut e))?;
        points.push(Point::place(
            "SAXPY",
            &format!("saxpy {}M", n >> 20),
            Precision::Fp32,
            &fp32,
            bw,
            Work::elementwise_f32(n, 2, 1, 2),
            t,
            Some(v),
            source,
        ));
    }

    // out = P_D(x): one fused expression whose intensity walks across the ridge.
    {
        let n = POLY_SIZE.min(max_n);
        let n4 = n / 4;
        let lc = e.cfg(n4);
        for (d, f) in e.poly.clone() {
            let run = |e: &mut Elementwise| -> Result<()> {
                let x = e.a.slice(..n as usize);
                let mut out = e.c.slice_mut(..n as usize);
                // SAFETY: poly_D(const float4*, float4*, u64) over n4 vectors.
                unsafe {
                    stream
                        .launch_builder(&f)
                        .arg(&x)
                        .arg(&mut out)
                        .arg(&n4)
                        .launch(lc)
                }
                .cuda("poly")?;
                Ok(())
            };
            gpu.poison(&mut e.c)?;
            run(&mut e)?;
            let got = gpu.download(&e.c)?;
            let ah = &e.a_host;
            let v = sampled_check(
                &got[..n as usize],
                |i| poly_reference(ah[i], d),
                Precision::Fp32.tolerance(),
            );
            let t = time(gpu, timer, cfg, &mut || run(&mut e))?;
            points.push(Point::place(
                "polynomial (fused Horner)",
                &format!("poly D={d}"),
                Precision::Fp32,
                &fp32,
                bw,
                Work::elementwise_f32(n, 1, 1, 2 * d as u64),
                t,
                Some(v),
                source,
            ));
        }
    }
    drop(e);

    // GEMMs through cuBLAS.
    let blas = common::blas::handle(gpu)?;
    let bf16 = roofs.compute_roof("bf16").expect("bf16 roof").clone();
    for (precision, sizes, roof, family, short) in [
        (
            GemmPrecision::Fp32,
            &SGEMM_SIZES[..],
            &fp32,
            "SGEMM fp32 (cuBLAS)",
            "sgemm",
        ),
        (
            GemmPrecision::Bf16,
            &BF16_SIZES[..],
            &bf16,
            "GEMM bf16 (cuBLAS)",
            "bf16",
        ),
    ] {
        for &s in sizes {
            let mut p = match GemmProblem::new(gpu, s, s, s, precision, 31) {
                Ok(p) => p,
                Err(err) if err.is_out_of_memory() => {
                    notes.push(format!("{short} {s} left out: {err}"));
                    continue;
                }
                Err(err) => return Err(err),
            };
            p.poison(gpu)?;
            p.run(gpu, &blas)?;
            let v = p.check_sampled(gpu, 256)?;
            let t = time(gpu, timer, cfg, &mut || p.run(gpu, &blas))?;
            points.push(Point::place(
                family,
                &format!("{short} {s}"),
                precision.precision(),
                roof,
                bw,
                p.work(),
                t,
                Some(v),
                source,
            ));
        }
    }
    Ok(points)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn polynomial_reference_matches_its_closed_form() {
        // sum_j (-x)^j / (j+1) -> ln(1+x)/x as D grows.
        let x = 0.5f32;
        let v = poly_reference(x, 1024);
        assert!((v - (1.5f64).ln() / 0.5).abs() < 1e-6, "{v}");
        assert_eq!(poly_reference(x, 1), 1.0 - 0.5 * 0.5);
        assert_eq!(poly_coef(0), 1.0);
        assert_eq!(poly_coef(3), -0.25);
    }

    #[test]
    fn sampled_check_catches_nan_outside_the_sample() {
        let mut got = vec![2.0f32; 1 << 21];
        let ok = sampled_check(&got, |_| 2.0, 1e-5);
        assert!(ok.passed);
        got[12345] = f32::NAN;
        let bad = sampled_check(&got, |_| 2.0, 1e-5);
        assert!(!bad.passed);
        assert_eq!(bad.non_finite, 1);
        got[12345] = 2.0;
        let wrong = sampled_check(&got, |_| 2.5, 1e-5);
        assert!(!wrong.passed);
    }
}
