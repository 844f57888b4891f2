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
use common::blas::GemmProblem;
use common::ceilings::DeviceCeilings;
use common::error::CudaContext as _;
use common::gpu::Gpu;
use common::kernels;
use common::report::{Section, VariantReport};
use common::runner::{Lesson, Meter, Output, Reference, VariantSpec};
use common::verify::Verification;
use common::{Error, Result};

use crate::ops::{
    operations, poly_reference, sampled_check, vectors_fit, Kind, Op, BF16_SIZES, CHECK_SAMPLES,
    GEMM_CHECK_SAMPLES, GEMM_SEED, KERNELS, MEASURED, POLY_DEGREES, POLY_SIZE, SAXPY_ALPHA,
    SAXPY_SIZE, SGEMM_SIZES, VECTOR_SIZES,
};
use crate::report::{place_operations, sections, Point, Roofs, LESSON};
use crate::roofs_from;

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
