//! The problem every variant solves: `count` independent row-major products
//! `C_i (m x n) = A_i (m x k) · B_i (k x n)`, stored back to back in three buffers, and what it
//! costs: FLOPs, bytes, device and host memory, and the float64 reference it is checked against.

use common::counters::Work;
use common::verify::{normal_f32, Precision};
use common::{Error, Result};
use plotting::format::human_bytes;

/// Largest dimension or count: cuBLAS takes them as 32-bit `int`.
pub const MAX_DIM: u64 = i32::MAX as u64;

/// Workspace handed to cuBLAS before anything is timed (NVIDIA recommends 32 MiB on Hopper), so
/// that no call in a timed run allocates one.
pub const WORKSPACE_BYTES: u64 = 32 << 20;

/// Most float64 FLOPs the CPU reference may cost (about a minute on 16 cores); larger problems
/// are refused rather than left computing for an hour.
pub const MAX_REFERENCE_FLOPS: u64 = 1 << 40;

/// Bytes of one device pointer in the pointer arrays of the batched call.
pub const POINTER_BYTES: u64 = 8;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Shape {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub count: usize,
}

impl Shape {
    /// The chapter's shapes: 40 products of (32 x 256) x (256 x 256).
    pub const CHAPTER: Shape = Shape::new(32, 256, 256, 40);

    /// `count` products of (m x k) x (k x n).
    pub const fn new(m: usize, n: usize, k: usize, count: usize) -> Shape {
        Shape { m, n, k, count }
    }

    pub const fn square(size: usize, count: usize) -> Shape {
        Shape::new(size, size, size, count)
    }

    /// Elements of one A, B and C.
    pub fn a_len(&self) -> usize {
        self.m * self.k
    }
    pub fn b_len(&self) -> usize {
        self.k * self.n
    }
    pub fn c_len(&self) -> usize {
        self.m * self.n
    }

    /// FLOPs of one product (an FMA is two).
    pub fn flops_per_product(&self) -> u64 {
        2 * self.m as u64 * self.n as u64 * self.k as u64
    }

    /// "32x256x256": M, N and K as `--shape` takes them.
    pub fn dims(&self) -> String {
        format!("{}x{}x{}", self.m, self.n, self.k)
    }

    /// "40 x (32x256)x(256x256)"
    pub fn label(&self) -> String {
        let (m, n, k) = (self.m, self.n, self.k);
        format!("{} x ({m}x{k})x({k}x{n})", self.count)
    }

    /// Refuse shapes cuBLAS cannot take or whose sizes overflow, with the reason.
    pub fn validate(&self) -> Result<()> {
        MemoryPlan::of(self).map(drop)
    }

    /// Every dimension and the count at least 1 and at most [MAX_DIM].
    fn check_dims(&self) -> Result<()> {
        for (name, v) in [
            ("--shape: M", self.m),
            ("--shape: N", self.n),
            ("--shape: K", self.k),
            ("--count", self.count),
        ] {
            let why = match v {
                0 => "is 0: every dimension and the count must be at least 1".to_string(),
                v if v as u64 > MAX_DIM => {
                    format!("{v} is too large: cuBLAS takes at most {MAX_DIM}")
                }
                _ => continue,
            };
            return Err(Error::invalid(format!("{name} {why}")));
        }
        Ok(())
    }
}

/// What one run needs, counted before anything is allocated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryPlan {
    /// A, B, C, the three pointer arrays and the cuBLAS workspace.
    pub device_bytes: u64,
    /// A and B (f32), the float64 reference and one downloaded output (f32), the pointer tables.
    pub host_bytes: u64,
    /// FLOPs of the float64 reference.
    pub reference_flops: u64,
}

impl MemoryPlan {
    /// Of a shape whose dimensions cuBLAS takes, counted in 128 bits: one whose counts
    /// overflow 64 is refused here.
    pub fn of(shape: &Shape) -> Result<MemoryPlan> {
        shape.check_dims()?;
        let [m, n, k, count] = [shape.m, shape.n, shape.k, shape.count].map(|v| v as u128);
        let too_large = || {
            let label = shape.label();
            Error::invalid(format!(
                "{label} is too large: its byte count overflows 64 bits"
            ))
        };
        let (a, b, c) = (m * k * count, k * n * count, m * n * count);
        let pointers = 3 * POINTER_BYTES as u128 * count;
        let fit = |v: u128| u64::try_from(v).map_err(|_| too_large());
        Ok(MemoryPlan {
            device_bytes: fit(4 * (a + b + c) + pointers + WORKSPACE_BYTES as u128)?,
            host_bytes: fit(4 * (a + b) + 12 * c + pointers)?,
            reference_flops: fit(2 * k * c)?,
        })
    }

    /// Device memory first (`free` of `total`), then host memory (`host_available`, where the
    /// system says), then the cost of the reference: each refusal says what and how much.
    pub fn check(
        &self,
        shape: &Shape,
        free: u64,
        total: u64,
        host_available: Option<u64>,
    ) -> Result<()> {
        let label = shape.label();
        let what = format!("{label} (A, B, C, pointer arrays, cuBLAS workspace)");
        common::gpu::check_fits_in(&what, self.device_bytes, free, total)?;
        if let Some(available) = host_available.filter(|&h| self.host_bytes > h) {
            return Err(Error::invalid(format!(
                "out of host memory: inputs and float64 reference of {label} need {}, the system has {} available",
                human_bytes(self.host_bytes),
                human_bytes(available)
            )));
        }
        if self.reference_flops > MAX_REFERENCE_FLOPS {
            return Err(Error::invalid(format!(
                "the float64 CPU reference of {label} would take {:.1} TFLOP, over the {:.1} TFLOP this lesson computes on the host: choose smaller sizes or fewer products (--sweep times large sizes)",
                self.reference_flops as f64 / 1e12,
                MAX_REFERENCE_FLOPS as f64 / 1e12
            )));
        }
        Ok(())
    }
}

/// Bytes and FLOPs of one run over `shape`. `pointer_arrays` adds the three device arrays of
/// pointers the batched call reads.
pub fn work(shape: &Shape, pointer_arrays: bool) -> Work {
    let count = shape.count as u64;
    let pointers = 3 * POINTER_BYTES * count * pointer_arrays as u64;
    Work {
        bytes_read: (shape.a_len() + shape.b_len()) as u64 * 4 * count + pointers,
        bytes_written: shape.c_len() as u64 * 4 * count,
        flops: shape.flops_per_product() * count,
    }
}

/// Relative-L2 tolerance for a product over `k` terms. fp32: 1e-5, widened past K = 1024 as
/// the rounding error of a k-term sum grows with sqrt(k) (4 sqrt(k) eps: 1.5e-5 at K = 1024);
/// measured errors sit far below (cuBLAS sums in blocks). TF32 and lower: the precision's own.
pub fn tolerance(precision: Precision, k: usize) -> f64 {
    match precision {
        Precision::Fp32 => {
            let grows = 4.0 * (k as f64).sqrt() * f32::EPSILON as f64;
            Precision::Fp32.tolerance().max(grows)
        }
        other => other.tolerance(),
    }
}

/// Seeded inputs of normal magnitude: all A matrices, then all B matrices, back to back.
/// Product `i` of a shape with more products starts the same: its inputs are a prefix.
pub fn inputs(shape: &Shape, seed: u64) -> (Vec<f32>, Vec<f32>) {
    let a = normal_f32(seed, shape.a_len() * shape.count, 1.0);
    let b = normal_f32(seed.wrapping_add(1), shape.b_len() * shape.count, 1.0);
    (a, b)
}

/// The float64 products `first..first + products` of the batch, row-major, concatenated.
pub fn reference(shape: &Shape, a: &[f32], b: &[f32], first: usize, products: usize) -> Vec<f64> {
    let (m, n, k) = (shape.m, shape.n, shape.k);
    let mut out = vec![0f64; products * m * n];
    // One chunk per output row: chunk r is row r % m of product first + r / m.
    common::par::for_each_chunk_mut(&mut out, n, |r, row| {
        let p = first + r / m;
        let i = r % m;
        let a_row = &a[p * m * k + i * k..][..k];
        let b_p = &b[p * k * n..][..k * n];
        for (l, &a_il) in a_row.iter().enumerate() {
            let a_il = a_il as f64;
            for (c, &b_lj) in row.iter_mut().zip(&b_p[l * n..(l + 1) * n]) {
                *c += a_il * b_lj as f64;
            }
        }
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flops_and_bytes_of_the_chapter_shape() {
        let s = Shape::CHAPTER;
        // 2 * 32 * 256 * 256 = 4 194 304 FLOPs a product, 40 products.
        assert_eq!(s.flops_per_product(), 4_194_304);
        let w = work(&s, false);
        assert_eq!(w.flops, 40 * 4_194_304);
        assert_eq!(w.bytes_read, 40 * (32 * 256 + 256 * 256) * 4);
        assert_eq!(w.bytes_written, 40 * 32 * 256 * 4);
        let batched = work(&s, true);
        assert_eq!(batched.bytes_read - w.bytes_read, 40 * 3 * 8);
        assert_eq!(batched.flops, w.flops);
        assert_eq!(s.label(), "40 x (32x256)x(256x256)");
    }

    #[test]
    fn zero_and_oversized_dimensions_are_refused() {
        for (shape, says) in [
            (Shape::new(32, 256, 0, 40), "--shape: K is 0"),
            (
                Shape::new(32, 1 << 31, 256, 40),
                "--shape: N 2147483648 is too large",
            ),
            (Shape::new(32, 256, 256, 0), "--count is 0"),
        ] {
            let err = shape.validate().unwrap_err().to_string();
            assert!(err.contains(says), "{err}");
        }
        assert!(Shape::CHAPTER.validate().is_ok());
        assert_eq!(Shape::CHAPTER.dims(), "32x256x256");
    }

    #[test]
    fn memory_plan_counts_every_buffer_and_refuses_overflow() {
        let err = MemoryPlan::of(&Shape::square(i32::MAX as usize, 2)).unwrap_err();
        assert!(err.to_string().contains("overflows 64 bits"), "{err}");
        let err = MemoryPlan::of(&Shape::square(usize::MAX, 1)).unwrap_err();
        assert!(err.to_string().contains("cuBLAS takes at most"), "{err}");
        let p = MemoryPlan::of(&Shape::CHAPTER).unwrap();
        let elements = 40 * (32 * 256 + 256 * 256 + 32 * 256);
        assert_eq!(p.device_bytes, elements * 4 + 40 * 24 + WORKSPACE_BYTES);
        assert_eq!(
            p.host_bytes,
            40 * (32 * 256 + 256 * 256) * 4 + 40 * 32 * 256 * 12 + 40 * 24
        );
        assert_eq!(p.reference_flops, 40 * 4_194_304);
    }

    #[test]
    fn device_then_host_memory_then_the_references_cost_are_checked() {
        // 64 products of 65536^2 fp32 matrices: 3 TiB, on an 80 GiB card.
        let s = Shape::square(65536, 64);
        let p = MemoryPlan::of(&s).unwrap();
        let err = p.check(&s, 79 << 30, 80 << 30, None).unwrap_err();
        assert!(err.is_out_of_memory());
        let msg = err.to_string();
        assert!(
            msg.starts_with("out of device memory: 64 x (65536x65536)x(65536x65536)"),
            "{msg}"
        );
        assert!(msg.contains("needs 3 TiB"), "{msg}");
        assert!(msg.contains("79 GiB free of 80 GiB"), "{msg}");
        let (s, plenty) = (Shape::CHAPTER, 1 << 40);
        let p = MemoryPlan::of(&s).unwrap();
        assert!(p.check(&s, plenty, plenty, Some(plenty)).is_ok());
        let err = p.check(&s, plenty, plenty, Some(1 << 20)).unwrap_err();
        assert!(err.to_string().starts_with("out of host memory"), "{err}");
        let huge = Shape::square(8192, 4);
        let p = MemoryPlan::of(&huge).unwrap();
        let err = p.check(&huge, plenty, plenty, None).unwrap_err();
        assert!(err.to_string().contains("float64 CPU reference"), "{err}");
    }

    #[test]
    fn tolerance_fits_k_and_precision() {
        assert_eq!(tolerance(Precision::Fp32, 256), 1e-5);
        assert_eq!(tolerance(Precision::Fp32, 1), 1e-5);
        let t = tolerance(Precision::Fp32, 1024);
        assert!(t > 1e-5 && t < 2e-5, "{t}");
        assert_eq!(tolerance(Precision::Tf32, 256), 1e-3);
        assert!(tolerance(Precision::Fp32, 1 << 20) < tolerance(Precision::Tf32, 256));
    }

    #[test]
    fn reference_is_the_row_major_product() {
        // Two products of (2x3)x(3x2), by hand; the second's A is the 2x3 identity.
        let s = Shape::new(2, 2, 3, 2);
        let a = [1., 2., 3., 4., 5., 6., 1., 0., 0., 0., 1., 0.];
        let b = [7., 8., 9., 10., 11., 12., 1., 2., 3., 4., 5., 6.];
        let all = reference(&s, &a, &b, 0, 2);
        assert_eq!(all, vec![58., 64., 139., 154., 1., 2., 3., 4.]);
        assert_eq!(reference(&s, &a, &b, 1, 1), vec![1., 2., 3., 4.]);
    }

    #[test]
    fn inputs_are_seeded_and_prefixes_of_larger_batches() {
        let s = Shape::square(8, 4);
        let (a, b) = inputs(&s, 9);
        assert_eq!((a.len(), b.len()), (256, 256));
        assert_eq!(inputs(&s, 9).0, a);
        assert_ne!(a, b);
        assert!(a.iter().all(|v| v.is_finite() && *v != 0.0));
        let (a2, _) = inputs(&Shape::square(8, 2), 9);
        assert_eq!(&a[..128], &a2[..]);
    }
}
