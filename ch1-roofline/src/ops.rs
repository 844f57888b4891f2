//! The operations placed on the roofline: what each computes, the work it does, and how its
//! output is checked against float64 (sampled elements for the elementwise ones; the GEMMs
//! check sampled dot products through `GemmProblem`). [crate::lesson] runs them.

use common::blas::{GemmPrecision, GemmProblem};
use common::counters::Work;
use common::kernels::KernelSource;
use common::verify::{Precision, Rng, Verification};
use plotting::format::human_bytes;

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
pub const SAXPY_ALPHA: f32 = 0.5;
/// Entries compared against float64 per elementwise check (plus an all-finite scan).
pub const CHECK_SAMPLES: usize = 1 << 20;
/// Entries of C compared against float64 dot products per GEMM.
pub const GEMM_CHECK_SAMPLES: usize = 256;
/// Seed of the GEMMs' inputs.
pub const GEMM_SEED: u64 = 31;
/// What the measured points' source column says.
pub const MEASURED: &str = "measured (cold)";

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

/// What an operation computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// c = a + b
    Add,
    /// c = a * b
    Mul,
    /// y = alpha * x + y, in place
    Saxpy,
    /// out = P_D(x)
    Poly(u32),
    /// C = A * B, square, through cuBLAS
    Gemm(GemmPrecision, usize),
}

/// One operation on the roofline.
#[derive(Debug, Clone, PartialEq)]
pub struct Op {
    pub kind: Kind,
    /// Elements of an elementwise operation (0 for a GEMM).
    pub n: u64,
    pub family: &'static str,
    pub label: String,
    /// Why it is not measured, decided before the run (vectors larger than free memory).
    pub left_out: Option<String>,
}

impl Op {
    pub fn precision(&self) -> Precision {
        match self.kind {
            Kind::Gemm(p, _) => p.precision(),
            _ => Precision::Fp32,
        }
    }

    pub fn work(&self) -> Work {
        let n = self.n;
        match self.kind {
            Kind::Add | Kind::Mul => Work::elementwise_f32(n, 2, 1, 1),
            Kind::Saxpy => Work::elementwise_f32(n, 2, 1, 2),
            Kind::Poly(d) => Work::elementwise_f32(n, 1, 1, 2 * d as u64),
            Kind::Gemm(p, s) => GemmProblem::work_of(s, s, s, p),
        }
    }

    pub fn description(&self) -> String {
        match self.kind {
            Kind::Add => "c = a + b, float4 loads, grid-stride".into(),
            Kind::Mul => "c = a * b, float4 loads, grid-stride".into(),
            Kind::Saxpy => format!("y = {SAXPY_ALPHA} x + y in place, one FMA per element"),
            Kind::Poly(d) => format!("P_{d}(x) by Horner's rule: {d} FMAs per 8 bytes"),
            Kind::Gemm(p, s) => format!("{s}^3 {p:?} GEMM, cuBLAS GemmEx"),
        }
    }

    pub fn tolerance(&self) -> f64 {
        match self.kind {
            Kind::Gemm(p, _) => p.tolerance(),
            _ => Precision::Fp32.tolerance(),
        }
    }
}

/// Three vectors of `n` floats fit when they take under half the free memory.
pub fn vectors_fit(n: u64, free: u64) -> bool {
    12 * n < free / 2
}

/// Every operation, the elementwise ones sized for `max_n` elements at most (sizes above it are
/// left out, the single-size ones shrink to it).
pub fn operations(max_n: u64, free: u64) -> Vec<Op> {
    let mut ops = Vec::new();
    for (kind, family, short) in [
        (Kind::Add, "vector add", "add"),
        (Kind::Mul, "vector multiply", "mul"),
    ] {
        for n in VECTOR_SIZES {
            ops.push(Op {
                kind,
                n,
                family,
                label: format!("{short} {}M", n >> 20),
                left_out: (n > max_n).then(|| {
                    format!(
                        "three vectors of {}M floats need {}, more than half the {} free",
                        n >> 20,
                        human_bytes(12 * n),
                        human_bytes(free)
                    )
                }),
            });
        }
    }
    let n = SAXPY_SIZE.min(max_n);
    ops.push(Op {
        kind: Kind::Saxpy,
        n,
        family: "SAXPY",
        label: format!("saxpy {}M", n >> 20),
        left_out: None,
    });
    let n = POLY_SIZE.min(max_n);
    for d in POLY_DEGREES {
        ops.push(Op {
            kind: Kind::Poly(d),
            n,
            family: "polynomial (fused Horner)",
            label: format!("poly D={d}"),
            left_out: None,
        });
    }
    for (precision, sizes, family, short) in [
        (
            GemmPrecision::Fp32,
            &SGEMM_SIZES[..],
            "SGEMM fp32 (cuBLAS)",
            "sgemm",
        ),
        (
            GemmPrecision::Bf16,
            &BF16_SIZES[..],
            "GEMM bf16 (cuBLAS)",
            "bf16",
        ),
    ] {
        for &s in sizes {
            ops.push(Op {
                kind: Kind::Gemm(precision, s),
                n: 0,
                family,
                label: format!("{short} {s}"),
                left_out: None,
            });
        }
    }
    ops
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

    #[test]
    fn every_operation_once_with_its_work() {
        let ops = operations(256 << 20, 1 << 40);
        assert_eq!(ops.len(), 23);
        let labels: Vec<&str> = ops.iter().map(|o| o.label.as_str()).collect();
        let mut unique = labels.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), labels.len(), "labels name groups: {labels:?}");
        assert!(ops.iter().all(|o| o.left_out.is_none()));
        let by = |label: &str| ops.iter().find(|o| o.label == label).unwrap();
        // 1 FLOP per 12 bytes, 2 per 12, 2D per 8.
        assert_eq!(by("add 64M").work().bytes(), 12 * (64 << 20));
        assert_eq!(by("saxpy 64M").work().flops, 2 * (64 << 20));
        assert!((by("poly D=16").work().intensity() - 4.0).abs() < 1e-12);
        let bf16 = by("bf16 4096");
        assert_eq!(bf16.precision(), Precision::Bf16);
        assert_eq!(bf16.work().bytes(), 2 * 3 * 4096 * 4096);
        assert_eq!(by("sgemm 256").tolerance(), 1e-4);
        assert_eq!(by("mul 16M").tolerance(), 1e-5);
    }

    #[test]
    fn vectors_beyond_free_memory_are_left_out_and_the_rest_shrink() {
        // 2 GiB free: three 64M vectors (768 MiB) fit under half of it, 256M ones do not.
        let free = 2u64 << 30;
        assert!(vectors_fit(64 << 20, free) && !vectors_fit(256 << 20, free));
        let ops = operations(64 << 20, free);
        let left_out: Vec<&str> = ops
            .iter()
            .filter(|o| o.left_out.is_some())
            .map(|o| o.label.as_str())
            .collect();
        assert_eq!(left_out, ["add 256M", "mul 256M"]);
        let why = ops[2].left_out.as_deref().unwrap();
        assert!(why.contains("3 GiB") && why.contains("2 GiB free"), "{why}");
        let small = operations(16 << 20, 1 << 30);
        let saxpy = small.iter().find(|o| o.kind == Kind::Saxpy).unwrap();
        assert_eq!((saxpy.n, saxpy.label.as_str()), (16 << 20, "saxpy 16M"));
    }
}
