//! `--sweep prealloc`: what `cuMemAlloc`/`cuMemFree` cost by buffer size. Each use writes 1 or
//! 16 buffers from a source with a kernel and adds each into an accumulator with another; the
//! baseline allocates each buffer for the use and frees it after (what `cudaMalloc`/`cudaFree`
//! do; the free waits for the device), the change allocates them once. The kernels are the same
//! on both sides, so the difference per buffer is what an allocation and its free cost.

use cudarc::driver::{CudaFunction, CudaSlice, PushKernelArg};
use serde_json::json;

use common::bench::BenchConfig;
use common::counters::Work;
use common::error::CudaContext as _;
use common::gpu::Gpu;
use common::kernels::{self, KernelSource};
use common::report::{Section, VariantReport};
use common::runner::{Output, VariantSpec};
use common::sweep::{Axis, Plan, Point, Summary, Sweep};
use common::verify::{check_by, uniform_f32, Precision};
use common::Result;
use mlp::{Allocator, DeviceBuf};

use super::{geometric, sweep_bench, BAR};
use crate::pipeline::engine::grid_stride;

pub const KERNELS: KernelSource = KernelSource {
    name: "buffers",
    code: include_str!("../../kernels/buffers.cu"),
};

/// Buffer sizes (bytes): 4 KiB to 64 MiB, by fours.
pub const SIZES: [u64; 8] = geometric(4 << 10, 4);

/// Buffers per use.
pub const COUNTS: [u64; 2] = [1, 16];

/// dst = A * src + B, the write of every buffer.
const A: f32 = 0.5;
const B: f32 = 0.25;

/// The accumulator after `count` buffers: count * (A * src + B), float64.
pub fn expected(src: f32, count: usize) -> f64 {
    count as f64 * (A as f64 * src as f64 + B as f64)
}

/// Relative L2 tolerance of the accumulator: one rounding per write and per addition, at most
/// 16 additions.
pub const TOLERANCE: f64 = 1e-5;

pub const ALLOCATION_US: &str = "alloc+free us";

/// Every count at every size, a count's points together; `cuMemAlloc` per use first.
pub fn plan(sizes: &[u64], counts: &[u64]) -> Plan {
    let lines = Axis::counts("buffers per use", counts).labelled(|n| match n {
        1 => "1 buffer per use".into(),
        n => format!("{n} buffers per use"),
    });
    let axes = vec![lines, Axis::bytes("bytes", sizes)];
    Plan::product(axes, "bytes", ["cuMemAlloc", "reuse"], BAR)
}

pub struct AllocationSweep {
    plan: Plan,
    src_host: Vec<f32>,
    src: CudaSlice<f32>,
    out: CudaSlice<f32>,
    /// As many as the largest count, of the largest size.
    reused: Vec<CudaSlice<f32>>,
    write: CudaFunction,
    accumulate: CudaFunction,
    sm_count: u32,
}

impl AllocationSweep {
    pub fn new(gpu: &Gpu, sizes: &[u64], counts: &[u64], seed: u64) -> Result<AllocationSweep> {
        let plan = plan(sizes, counts);
        let largest = sizes.iter().copied().max().unwrap_or(4) as usize / 4;
        let most = counts.iter().copied().max().unwrap_or(1) as usize;
        // Source, accumulator, the reused buffers and one allocated per use.
        gpu.check_fits(
            "the preallocation sweep's buffers",
            4 * (largest * (most + 3)) as u64,
        )?;
        let src_host = uniform_f32(seed, largest, -1.0, 1.0);
        let module = kernels::load(gpu, KERNELS, &[])?;
        Ok(AllocationSweep {
            plan,
            src: gpu.upload(&src_host, "the sweep's source")?,
            src_host,
            out: gpu.alloc::<f32>(largest, "the sweep's accumulator")?,
            reused: (0..most)
                .map(|_| gpu.alloc::<f32>(largest, "a reused buffer"))
                .collect::<Result<Vec<_>>>()?,
            write: module.function("write_affine")?,
            accumulate: module.function("accumulate")?,
            sm_count: gpu.info.sm_count,
        })
    }

    /// (buffers per use, floats per buffer).
    fn locate(&self, point: usize) -> (usize, usize) {
        let count = self.plan.value(point, "buffers per use");
        (count as usize, self.plan.x(point) as usize / 4)
    }
}

impl Sweep for AllocationSweep {
    fn name(&self) -> &str {
        "ch1-basics-sweep-prealloc"
    }

    fn plan(&self) -> &Plan {
        &self.plan
    }

    fn group(&self, point: usize) -> String {
        let (count, _) = self.locate(point);
        format!("{count} x {}", self.plan.axes[1].label(self.plan.x(point)))
    }

    fn parameters(&self) -> serde_json::Value {
        json!({
            "stop_rule": sweep_bench(BenchConfig::default()).stop,
            "tolerance": TOLERANCE,
            "allocator": "cuMemAlloc/cuMemFree per use (what cudaMalloc/cudaFree do); reused buffers come from the stream-ordered pool once",
        })
    }

    fn spec(&self, point: usize, reuse: bool) -> VariantSpec {
        let (count, len) = self.locate(point);
        let moved = (count * len * 4) as u64;
        // Per buffer: source read, buffer written and read, accumulator read and written.
        let work = Work {
            bytes_read: 3 * moved,
            bytes_written: 2 * moved,
            flops: 3 * (count * len) as u64,
        };
        let size = self.plan.axes[1].label(self.plan.x(point));
        let description = if reuse {
            format!("{count} buffers of {size} allocated once, reused")
        } else {
            format!("{count} cuMemAlloc + cuMemFree of {size} per use")
        };
        VariantSpec::new("", description, Precision::Fp32, work).with_tolerance(TOLERANCE)
    }

    fn poison(&mut self, gpu: &Gpu, _point: usize) -> Result<()> {
        gpu.poison(&mut self.out)?;
        for buf in &mut self.reused {
            gpu.poison(buf)?;
        }
        Ok(())
    }

    fn run(&mut self, gpu: &Gpu, point: usize, reuse: bool) -> Result<()> {
        let (count, len) = self.locate(point);
        gpu.stream
            .memset_zeros(&mut self.out.slice_mut(..len))
            .cuda("clearing the accumulator")?;
        let (n, a, b) = (len as i64, A, B);
        let grid = grid_stride(len, self.sm_count);
        for i in 0..count {
            let mut fresh;
            let buf = if reuse {
                &mut self.reused[i]
            } else {
                fresh = DeviceBuf::<f32>::new(gpu, Allocator::Driver, len, "a buffer")?;
                &mut *fresh
            };
            let mut l = gpu.stream.launch_builder(&self.write);
            l.arg(&mut *buf).arg(&self.src).arg(&n).arg(&a).arg(&b);
            // SAFETY: write_affine(float*, const float*, i64, float, float) over len elements.
            unsafe { l.launch(grid) }.cuda("write_affine")?;
            let mut l = gpu.stream.launch_builder(&self.accumulate);
            l.arg(&mut self.out).arg(&*buf).arg(&n);
            // SAFETY: accumulate(float*, const float*, i64) over len elements.
            unsafe { l.launch(grid) }.cuda("accumulate")?;
            // A fresh buffer is freed here: cuMemFree waits for the device.
        }
        Ok(())
    }

    fn output(&mut self, gpu: &Gpu, point: usize, _reuse: bool) -> Result<Output> {
        let (count, len) = self.locate(point);
        let out = gpu.download(&self.out)?;
        let src = &self.src_host;
        let check = check_by(
            &out[..len],
            |i| expected(src[i], count),
            TOLERANCE,
            "float64",
        );
        Ok(Output::checked(vec![check.named("accumulator")]))
    }

    fn bench_config(&self, _point: usize, _reuse: bool, cfg: BenchConfig) -> BenchConfig {
        sweep_bench(cfg)
    }

    fn figures(&self, index: usize, p: &Point, _: Option<&VariantReport>) -> Vec<(String, f64)> {
        let (count, _) = self.locate(index);
        match (p.speedup(), &p.baseline, &p.changed) {
            (Some(_), Some(b), Some(r)) => {
                let per_buffer_us = (b.median_ms - r.median_ms) * 1e3 / count as f64;
                vec![(ALLOCATION_US.into(), per_buffer_us)]
            }
            _ => Vec::new(),
        }
    }

    fn sections(&mut self, summary: Summary, _bench: BenchConfig) -> Vec<Section> {
        vec![summary.section(
            "cuMemAlloc/cuMemFree per use vs buffers allocated once, by size",
            vec![
                "each use writes every buffer from a source and reads it into an accumulator (two kernels per buffer, the same on both sides); the baseline allocates each buffer for the use and frees it after".into(),
                format!("{ALLOCATION_US}: (baseline - reuse) / buffers per use, what one allocation and its free (with its wait for the device) cost at that size"),
            ],
        )]
    }
}
