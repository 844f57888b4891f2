//! The operations placed on the roofline, as one lesson the runner measures: every operation
//! a variant, checked against float64 (sampled elements for the elementwise ones, sampled dot
//! products for the GEMMs) and timed with L2 flushed before every sample, so each point is held
//! to DRAM, not to L2. After the runs, each is placed against its roof.
//!
//! Each operation is its own group (named by its label, "add 64M"), with its family ("vector
//! add") as the variant's name: operations of a family do different work (more elements, a
//! higher degree, a larger GEMM), so none is another's baseline and no speedup between them
//! would mean anything.

use cudarc::cublas::CudaBlas;
use cudarc::driver::{CudaFunction, CudaSlice, LaunchConfig, PushKernelArg};

use common::bench::BenchConfig;
use common::blas::{GemmPrecision, GemmProblem};
use common::ceilings::DeviceCeilings;
use common::counters::Work;
use common::error::{human_bytes, CudaContext as _};
use common::gpu::Gpu;
use common::kernels::{self, KernelSource};
use common::report::{Section, VariantReport};
use common::runner::{Lesson, Meter, Output, Reference, VariantSpec};
use common::verify::{Precision, Rng, Verification};
use common::{Error, Result};

use crate::report::{place_operations, sections, Point, Roofs, LESSON};
use crate::roofs_from;

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
/// Entries of C compared against float64 dot products per GEMM.
const GEMM_CHECK_SAMPLES: usize = 256;
/// Seed of the GEMMs' inputs.
const GEMM_SEED: u64 = 31;
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
fn vectors_fit(n: u64, free: u64) -> bool {
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

struct Kernels {
    add: CudaFunction,
    mul: CudaFunction,
    saxpy: CudaFunction,
    poly: Vec<(u32, CudaFunction)>,
}

/// The vectors every elementwise operation works on (a prefix of them), and their host copies
/// for the references.
struct Vectors {
    a: CudaSlice<f32>,
    b: CudaSlice<f32>,
    c: CudaSlice<f32>,
    a_host: Vec<f32>,
    b_host: Vec<f32>,
    /// SAXPY ran on b since it was uploaded: b no longer holds `b_host`.
    b_changed: bool,
}

impl Vectors {
    fn new(gpu: &Gpu, n: u64) -> Result<Vectors> {
        gpu.check_fits("three vectors for the elementwise points", 12 * n)?;
        common::gpu::check_host_fits("the elementwise inputs", 8 * n)?;
        let a_host = common::verify::uniform_f32(21, n as usize, -0.9, 0.9);
        let b_host = common::verify::normal_f32(22, n as usize, 1.0);
        Ok(Vectors {
            a: gpu.upload(&a_host, "vector a")?,
            b: gpu.upload(&b_host, "vector b")?,
            c: gpu.alloc(n as usize, "vector c")?,
            a_host,
            b_host,
            b_changed: false,
        })
    }
}

/// What the device holds for the operation being measured: the vectors, or one GEMM.
enum Buffers {
    None,
    Vectors(Vectors),
    Gemm(usize, GemmProblem),
}

/// The roofline lesson: its operations, the ceilings and roofs they are placed against, and
/// the points read from elsewhere (the ch1-intensity variants) placed beside them.
pub struct Roofline<'g> {
    /// Kept to ask, before a GEMM is set up, how much memory is free.
    gpu: &'g Gpu,
    ops: Vec<Op>,
    max_n: u64,
    kernels: Kernels,
    buffers: Buffers,
    blas: Option<CudaBlas>,
    ceilings: DeviceCeilings,
    roofs: Roofs,
    other_points: Vec<Point>,
    notes: Vec<String>,
}

impl<'g> Roofline<'g> {
    /// The operations sized for the memory free now, the kernels compiled; nothing allocated
    /// until an operation runs.
    pub fn new(
        gpu: &'g Gpu,
        ceilings: DeviceCeilings,
        other_points: Vec<Point>,
        notes: Vec<String>,
    ) -> Result<Roofline<'g>> {
        let roofs = roofs_from(&ceilings)
            .ok_or_else(|| Error::invalid("no memory ceiling was measured"))?;
        if roofs.compute_roof("fp32").is_none() {
            return Err(Error::invalid("no FP32 compute ceiling was measured"));
        }
        let (free, _) = gpu.memory()?;
        let max_n = VECTOR_SIZES
            .iter()
            .copied()
            .filter(|&n| vectors_fit(n, free))
            .max()
            .unwrap_or(VECTOR_SIZES[0]);
        let module = kernels::load(gpu, KERNELS, &[])?;
        let kernels = Kernels {
            add: module.function("vector_add4")?,
            mul: module.function("vector_mul4")?,
            saxpy: module.function("saxpy4")?,
            poly: POLY_DEGREES
                .iter()
                .map(|&d| Ok((d, module.function(&format!("poly_{d}"))?)))
                .collect::<Result<_>>()?,
        };
        Ok(Roofline {
            gpu,
            ops: operations(max_n, free),
            max_n,
            kernels,
            buffers: Buffers::None,
            blas: None,
            ceilings,
            roofs,
            other_points,
            notes,
        })
    }

    pub fn roofs(&self) -> &Roofs {
        &self.roofs
    }

    pub fn operations(&self) -> &[Op] {
        &self.ops
    }

    /// The vectors, uploaded when first needed (a GEMM's buffers are freed first), with b
    /// restored if SAXPY changed it.
    fn vectors(&mut self, gpu: &Gpu) -> Result<&mut Vectors> {
        if !matches!(self.buffers, Buffers::Vectors(_)) {
            self.buffers = Buffers::None;
            self.buffers = Buffers::Vectors(Vectors::new(gpu, self.max_n)?);
        }
        let Buffers::Vectors(v) = &mut self.buffers else {
            unreachable!("set above")
        };
        if v.b_changed {
            gpu.stream
                .memcpy_htod(&v.b_host, &mut v.b)
                .cuda("restoring vector b")?;
            v.b_changed = false;
        }
        Ok(v)
    }

    /// The GEMM of operation `index`, set up when first needed (earlier buffers freed first).
    fn gemm(&mut self, gpu: &Gpu, index: usize) -> Result<&mut GemmProblem> {
        if !matches!(self.buffers, Buffers::Gemm(i, _) if i == index) {
            let Kind::Gemm(precision, s) = self.ops[index].kind else {
                return Err(Error::invalid(format!(
                    "{} is not a GEMM",
                    self.ops[index].label
                )));
            };
            self.buffers = Buffers::None;
            let problem = GemmProblem::new(gpu, s, s, s, precision, GEMM_SEED)?;
            self.buffers = Buffers::Gemm(index, problem);
        }
        let Buffers::Gemm(_, p) = &mut self.buffers else {
            unreachable!("set above")
        };
        Ok(p)
    }

    fn launch_elementwise(&mut self, gpu: &Gpu, index: usize) -> Result<()> {
        let op = &self.ops[index];
        let (kind, n) = (op.kind, op.n as usize);
        let n4 = op.n / 4;
        let blocks = n4.div_ceil(256).min(gpu.info.sm_count as u64 * 16).max(1) as u32;
        let cfg = LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let Buffers::Vectors(v) = &mut self.buffers else {
            return Err(Error::invalid("the vectors were not set up"));
        };
        let k = &self.kernels;
        let stream = &gpu.stream;
        match kind {
            Kind::Add | Kind::Mul => {
                let f = if kind == Kind::Add { &k.add } else { &k.mul };
                let (a, b) = (v.a.slice(..n), v.b.slice(..n));
                let mut c = v.c.slice_mut(..n);
                // SAFETY: (const float4*, const float4*, float4*, u64) over n4 vectors.
                unsafe {
                    stream
                        .launch_builder(f)
                        .arg(&a)
                        .arg(&b)
                        .arg(&mut c)
                        .arg(&n4)
                        .launch(cfg)
                }
                .cuda("vector_add4 / vector_mul4")?;
            }
            Kind::Saxpy => {
                let x = v.a.slice(..n);
                let mut y = v.b.slice_mut(..n);
                // SAFETY: saxpy4(float, const float4*, float4*, u64) over n4 vectors.
                unsafe {
                    stream
                        .launch_builder(&k.saxpy)
                        .arg(&SAXPY_ALPHA)
                        .arg(&x)
                        .arg(&mut y)
                        .arg(&n4)
                        .launch(cfg)
                }
                .cuda("saxpy4")?;
                v.b_changed = true;
            }
            Kind::Poly(d) => {
                let (_, f) = k
                    .poly
                    .iter()
                    .find(|(degree, _)| *degree == d)
                    .ok_or_else(|| Error::invalid(format!("no kernel for degree {d}")))?;
                let x = v.a.slice(..n);
                let mut out = v.c.slice_mut(..n);
                // SAFETY: poly_D(const float4*, float4*, u64) over n4 vectors.
                unsafe {
                    stream
                        .launch_builder(f)
                        .arg(&x)
                        .arg(&mut out)
                        .arg(&n4)
                        .launch(cfg)
                }
                .cuda("poly")?;
            }
            Kind::Gemm(..) => unreachable!("GEMMs go through cuBLAS"),
        }
        Ok(())
    }

    /// Check an elementwise operation's output at sampled elements against float64.
    fn check_elementwise(&mut self, gpu: &Gpu, index: usize) -> Result<Verification> {
        let op = &self.ops[index];
        let (kind, n, tolerance) = (op.kind, op.n as usize, op.tolerance());
        let Buffers::Vectors(v) = &self.buffers else {
            return Err(Error::invalid("the vectors were not set up"));
        };
        // SAXPY writes y in place; the others write c.
        let out = if kind == Kind::Saxpy { &v.b } else { &v.c };
        let got = gpu
            .stream
            .clone_dtoh(&out.slice(..n))
            .cuda("copying a result back from the GPU")?;
        let (a, b) = (&v.a_host, &v.b_host);
        Ok(match kind {
            Kind::Add => sampled_check(&got, |i| a[i] as f64 + b[i] as f64, tolerance),
            Kind::Mul => sampled_check(&got, |i| a[i] as f64 * b[i] as f64, tolerance),
            Kind::Saxpy => sampled_check(
                &got,
                |i| SAXPY_ALPHA as f64 * a[i] as f64 + b[i] as f64,
                tolerance,
            ),
            Kind::Poly(d) => sampled_check(&got, |i| poly_reference(a[i], d), tolerance),
            Kind::Gemm(..) => unreachable!("GEMMs are checked by GemmProblem"),
        })
    }
}

impl Lesson for Roofline<'_> {
    fn name(&self) -> &str {
        LESSON
    }

    fn parameters(&self) -> serde_json::Value {
        serde_json::json!({
            "vector_elements": VECTOR_SIZES.iter().filter(|&&n| n <= self.max_n).collect::<Vec<_>>(),
            "saxpy_elements": SAXPY_SIZE.min(self.max_n),
            "saxpy_alpha": SAXPY_ALPHA,
            "poly_elements": POLY_SIZE.min(self.max_n),
            "poly_degrees": POLY_DEGREES,
            "sgemm_sizes": SGEMM_SIZES,
            "bf16_gemm_sizes": BF16_SIZES,
            "elementwise_check": format!("{CHECK_SAMPLES} sampled elements against float64, every element finite"),
            "gemm_check": format!("{GEMM_CHECK_SAMPLES} sampled entries against float64 dot products, every entry finite"),
            "gemm_seed": GEMM_SEED,
            "timing": "cold: L2 flushed before every sample",
        })
    }

    fn variants(&self) -> Vec<VariantSpec> {
        self.ops
            .iter()
            .map(|op| {
                VariantSpec::new(op.family, op.description(), op.precision(), op.work())
                    .in_group(op.label.clone())
                    .with_tolerance(op.tolerance())
            })
            .collect()
    }

    /// Each operation checks sampled elements in [Lesson::output]: a full float64 reference
    /// would cost as much as the operation.
    fn reference(&self, _index: usize) -> Option<&Reference> {
        None
    }

    fn skip(&mut self, index: usize) -> Option<String> {
        if let Some(why) = &self.ops[index].left_out {
            return Some(why.clone());
        }
        let Kind::Gemm(precision, s) = self.ops[index].kind else {
            return None;
        };
        // What the operation before held is not needed any more: free it, then ask.
        if !matches!(self.buffers, Buffers::Gemm(i, _) if i == index) {
            self.buffers = Buffers::None;
        }
        let needed = GemmProblem::device_bytes(s, s, s, precision);
        match self.gpu.check_fits(&format!("a {s}x{s}x{s} GEMM"), needed) {
            Err(e) if e.is_out_of_memory() => Some(e.to_string()),
            // Any other error (the memory query itself) surfaces when the GEMM is set up.
            _ => None,
        }
    }

    /// NaN over the output, so an element the run does not write cannot pass. SAXPY writes y
    /// in place, so its y is restored to the uploaded values instead: an element it does not
    /// write keeps y and fails the check against alpha * x + y.
    fn poison(&mut self, gpu: &Gpu, index: usize) -> Result<()> {
        match self.ops[index].kind {
            Kind::Gemm(..) => self.gemm(gpu, index)?.poison(gpu),
            Kind::Saxpy => self.vectors(gpu).map(|_| ()),
            _ => {
                let v = self.vectors(gpu)?;
                gpu.poison(&mut v.c)
            }
        }
    }

    fn run(&mut self, gpu: &Gpu, index: usize) -> Result<()> {
        match self.ops[index].kind {
            Kind::Gemm(..) => {
                if self.blas.is_none() {
                    self.blas = Some(common::blas::handle(gpu)?);
                }
                let Buffers::Gemm(i, p) = &mut self.buffers else {
                    return Err(Error::invalid("the GEMM was not set up"));
                };
                if *i != index {
                    return Err(Error::invalid("another GEMM is set up"));
                }
                p.run(gpu, self.blas.as_ref().expect("made above"))
            }
            _ => self.launch_elementwise(gpu, index),
        }
    }

    fn output(&mut self, gpu: &Gpu, index: usize) -> Result<Output> {
        let check = match self.ops[index].kind {
            Kind::Gemm(..) => self
                .gemm(gpu, index)?
                .check_sampled(gpu, GEMM_CHECK_SAMPLES)?,
            _ => self.check_elementwise(gpu, index)?,
        };
        Ok(Output::checked(vec![check]))
    }

    /// Every operation cold: each point is held to DRAM, not to L2.
    fn bench_config(&self, _index: usize, cfg: BenchConfig) -> BenchConfig {
        BenchConfig { cold: true, ..cfg }
    }

    /// Each operation placed against its roof, then the points from elsewhere; the ceilings,
    /// roofs and points as tables and data.
    fn sections(
        &mut self,
        _gpu: &Gpu,
        variants: &[VariantReport],
        _meter: &mut Meter,
    ) -> Result<Vec<Section>> {
        self.buffers = Buffers::None;
        let mut points = place_operations(variants, &self.roofs, MEASURED);
        points.extend(self.other_points.iter().cloned());
        Ok(sections(&self.ceilings, &self.roofs, &points, &self.notes))
    }
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
        assert!(
            why.contains("3.00 GiB") && why.contains("2.00 GiB free"),
            "{why}"
        );
        let small = operations(16 << 20, 1 << 30);
        let saxpy = small.iter().find(|o| o.kind == Kind::Saxpy).unwrap();
        assert_eq!((saxpy.n, saxpy.label.as_str()), (16 << 20, "saxpy 16M"));
    }
}
