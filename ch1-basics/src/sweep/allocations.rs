//! `--sweep prealloc`: what `cuMemAlloc`/`cuMemFree` cost by buffer size. Each use takes 1 or 16
//! buffers of 4 KiB to 64 MiB, writes each from a source with a kernel and reads it into an
//! accumulator with another; the baseline allocates each buffer with `cuMemAlloc` for the use
//! and frees it with `cuMemFree` after (what `cudaMalloc`/`cudaFree` do; the free waits for the
//! device), the change allocates the buffers once and reuses them. The kernels are the same on
//! both sides, so the difference per buffer is what an allocation and its free cost. Checked:
//! the accumulator against float64.

use cudarc::driver::{CudaFunction, CudaSlice, PushKernelArg};
use serde_json::json;

use common::bench::BenchConfig;
use common::counters::Work;
use common::error::CudaContext as _;
use common::gpu::Gpu;
use common::kernels::{self, KernelSource};
use common::report::{Section, VariantReport};
use common::runner::{Lesson, Meter, Output, Reference, VariantSpec};
use common::verify::{check_by, uniform_f32, Precision};
use common::Result;
use mlp::{Allocator, DeviceBuf};

use super::{points, size_label, sweep_bench, Kind, Planned, Summary};
use crate::pipeline::engine::grid_stride;

pub const KERNELS: KernelSource = KernelSource {
    name: "buffers",
    code: include_str!("../../kernels/buffers.cu"),
};

/// Buffer sizes (bytes): 4 KiB to 64 MiB, by fours.
pub const SIZES: [usize; 8] = [
    4 << 10,
    16 << 10,
    64 << 10,
    256 << 10,
    1 << 20,
    4 << 20,
    16 << 20,
    64 << 20,
];

/// Buffers per use.
pub const COUNTS: [usize; 2] = [1, 16];

/// The two sides of every point: the first is the group's baseline.
pub const SIDES: [&str; 2] = ["cuMemAlloc", "reuse"];

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

/// The figure each point gets: what one allocation and its free cost, in microseconds.
pub const ALLOCATION_US: &str = "alloc+free us";

/// The points: every count at every size (each sorted, each once), a count's points together.
pub fn plan(sizes: &[usize], counts: &[usize]) -> Vec<(usize, usize)> {
    let sorted = |v: &[usize]| {
        let mut v = v.to_vec();
        v.sort_unstable();
        v.dedup();
        v
    };
    let (sizes, counts) = (sorted(sizes), sorted(counts));
    counts
        .iter()
        .flat_map(|&c| sizes.iter().map(move |&s| (c, s)))
        .collect()
}

/// "16 x 1 MiB": the group of a point.
pub fn group(count: usize, bytes: usize) -> String {
    format!("{count} x {}", size_label(bytes as u64))
}

/// "16 buffers per use": the line of a count.
pub fn series(count: usize) -> String {
    match count {
        1 => "1 buffer per use".into(),
        n => format!("{n} buffers per use"),
    }
}

pub struct AllocationSweep {
    points: Vec<(usize, usize)>,
    src_host: Vec<f32>,
    src: CudaSlice<f32>,
    out: CudaSlice<f32>,
    /// The reused buffers: as many as the largest count, of the largest size.
    pre: Vec<CudaSlice<f32>>,
    write: CudaFunction,
    accumulate: CudaFunction,
    sm_count: u32,
}

impl AllocationSweep {
    pub fn new(gpu: &Gpu, sizes: &[usize], counts: &[usize], seed: u64) -> Result<AllocationSweep> {
        let points = plan(sizes, counts);
        let largest = points.iter().map(|p| p.1).max().unwrap_or(4) / 4;
        let most = points.iter().map(|p| p.0).max().unwrap_or(1);
        // Source, accumulator, the reused buffers and one allocated per use.
        gpu.check_fits(
            "the preallocation sweep's buffers",
            4 * (largest * (most + 3)) as u64,
        )?;
        let src_host = uniform_f32(seed, largest, -1.0, 1.0);
        let module = kernels::load(gpu, KERNELS, &[])?;
        Ok(AllocationSweep {
            points,
            src: gpu.upload(&src_host, "the sweep's source")?,
            src_host,
            out: gpu.alloc::<f32>(largest, "the sweep's accumulator")?,
            pre: (0..most)
                .map(|_| gpu.alloc::<f32>(largest, "a reused buffer"))
                .collect::<Result<Vec<_>>>()?,
            write: module.function("write_affine")?,
            accumulate: module.function("accumulate")?,
            sm_count: gpu.info.sm_count,
        })
    }

    fn locate(&self, index: usize) -> (usize, usize, bool) {
        let (count, bytes) = self.points[index / SIDES.len()];
        (count, bytes, index % SIDES.len() == 1)
    }

    pub fn plan(&self) -> Vec<Planned> {
        planned(&self.points)
    }
}

/// The runner's groups and the plot's lines of (count, bytes) points.
pub fn planned(points: &[(usize, usize)]) -> Vec<Planned> {
    points
        .iter()
        .map(|&(count, bytes)| Planned {
            group: group(count, bytes),
            series: series(count),
            x: bytes as u64,
        })
        .collect()
}

/// The use of one buffer: write its first `len` elements from `src`, add them into `out`.
fn use_buffer(
    gpu: &Gpu,
    (write, accumulate, sm_count): (&CudaFunction, &CudaFunction, u32),
    src: &CudaSlice<f32>,
    out: &mut CudaSlice<f32>,
    buf: &mut CudaSlice<f32>,
    len: usize,
) -> Result<()> {
    assert!(len <= buf.len() && len <= src.len() && len <= out.len());
    let (count, a, b) = (len as i64, A, B);
    let mut l = gpu.stream.launch_builder(write);
    l.arg(&mut *buf).arg(src).arg(&count).arg(&a).arg(&b);
    // SAFETY: write_affine(float*, const float*, i64, float, float) over len elements.
    unsafe { l.launch(grid_stride(len, sm_count)) }.cuda("write_affine")?;
    let mut l = gpu.stream.launch_builder(accumulate);
    l.arg(out).arg(&*buf).arg(&count);
    // SAFETY: accumulate(float*, const float*, i64) over len elements.
    unsafe { l.launch(grid_stride(len, sm_count)) }.cuda("accumulate")?;
    Ok(())
}

impl Lesson for AllocationSweep {
    fn name(&self) -> &str {
        "ch1-basics-sweep-prealloc"
    }

    fn parameters(&self) -> serde_json::Value {
        let mut sizes: Vec<usize> = self.points.iter().map(|p| p.1).collect();
        let mut counts: Vec<usize> = self.points.iter().map(|p| p.0).collect();
        for v in [&mut sizes, &mut counts] {
            v.sort_unstable();
            v.dedup();
        }
        json!({
            "sizes_bytes": sizes,
            "buffers_per_use": counts,
            "stop_rule": sweep_bench(BenchConfig::default()).stop,
            "tolerance": TOLERANCE,
            "allocator": "cuMemAlloc/cuMemFree per use (what cudaMalloc/cudaFree do); reused buffers come from the stream-ordered pool once",
        })
    }

    fn variants(&self) -> Vec<VariantSpec> {
        self.points
            .iter()
            .flat_map(|&(count, bytes)| {
                // Per buffer: the source read and the buffer written, the buffer read and the
                // accumulator read and written.
                let work = Work {
                    bytes_read: 3 * (count * bytes) as u64,
                    bytes_written: 2 * (count * bytes) as u64,
                    flops: 3 * (count * bytes / 4) as u64,
                };
                let descriptions = [
                    format!(
                        "{count} cuMemAlloc + cuMemFree of {} per use",
                        size_label(bytes as u64)
                    ),
                    format!(
                        "{count} buffers of {} allocated once, reused",
                        size_label(bytes as u64)
                    ),
                ];
                descriptions.map(|d| (d, work)).into_iter().zip(SIDES).map(
                    move |((description, work), side)| {
                        VariantSpec::new(side, description, Precision::Fp32, work)
                            .with_tolerance(TOLERANCE)
                            .in_group(group(count, bytes))
                    },
                )
            })
            .collect()
    }

    /// Each side's check is made in [Lesson::output].
    fn reference(&self, _index: usize) -> Option<&Reference> {
        None
    }

    fn poison(&mut self, gpu: &Gpu, _index: usize) -> Result<()> {
        gpu.poison(&mut self.out)?;
        for buf in &mut self.pre {
            gpu.poison(buf)?;
        }
        Ok(())
    }

    fn run(&mut self, gpu: &Gpu, index: usize) -> Result<()> {
        let (count, bytes, reuse) = self.locate(index);
        let len = bytes / 4;
        gpu.stream
            .memset_zeros(&mut self.out.slice_mut(..len))
            .cuda("clearing the accumulator")?;
        let kernels = (&self.write, &self.accumulate, self.sm_count);
        for i in 0..count {
            if reuse {
                use_buffer(
                    gpu,
                    kernels,
                    &self.src,
                    &mut self.out,
                    &mut self.pre[i],
                    len,
                )?;
            } else {
                let mut buf = DeviceBuf::<f32>::new(gpu, Allocator::Driver, len, "a buffer")?;
                use_buffer(gpu, kernels, &self.src, &mut self.out, &mut buf, len)?;
                // Freed here: cuMemFree waits for the device.
            }
        }
        Ok(())
    }

    fn output(&mut self, gpu: &Gpu, index: usize) -> Result<Output> {
        let (count, bytes, _) = self.locate(index);
        let out = gpu.download(&self.out)?;
        let src = &self.src_host;
        let check = check_by(
            &out[..bytes / 4],
            |i| expected(src[i], count),
            TOLERANCE,
            "float64",
        );
        Ok(Output::checked(vec![check.named("accumulator")]))
    }

    fn bench_config(&self, _index: usize, cfg: BenchConfig) -> BenchConfig {
        sweep_bench(cfg)
    }

    fn sections(
        &mut self,
        _gpu: &Gpu,
        variants: &[VariantReport],
        _meter: &mut Meter,
    ) -> Result<Vec<Section>> {
        Ok(vec![section(&self.points, variants)])
    }
}

/// The sweep's section from the variant reports of its (count, bytes) points: each point with
/// what one allocation and its free cost there.
pub fn section(plan: &[(usize, usize)], variants: &[VariantReport]) -> Section {
    let mut pts = points(&planned(plan), variants, (SIDES[0], SIDES[1]));
    for (p, &(count, _)) in pts.iter_mut().zip(plan) {
        if let (Some(_), Some(b), Some(r)) = (p.speedup(), &p.baseline, &p.changed) {
            let per_buffer_us = (b.median_ms - r.median_ms) * 1e3 / count as f64;
            p.figures.push((ALLOCATION_US.into(), per_buffer_us));
        }
    }
    Summary::new(Kind::Prealloc, (SIDES[0], SIDES[1]), pts).section(
        "cuMemAlloc/cuMemFree per use vs buffers allocated once, by size",
        vec![
            "each use writes every buffer from a source and reads it into an accumulator (two kernels per buffer, the same on both sides); the baseline allocates each buffer for the use and frees it after".into(),
            format!("{ALLOCATION_US}: (baseline - reuse) / buffers per use, what one allocation and its free (with its wait for the device) cost at that size"),
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_count_at_every_size() {
        let p = plan(&[1 << 20, 4 << 10], &[16, 1, 16]);
        assert_eq!(
            p,
            vec![(1, 4 << 10), (1, 1 << 20), (16, 4 << 10), (16, 1 << 20)]
        );
        assert_eq!(plan(&SIZES, &COUNTS).len(), 16);
        assert!(SIZES.windows(2).all(|w| w[1] == 4 * w[0]));
        assert_eq!(group(16, 1 << 20), "16 x 1 MiB");
        assert_eq!(series(1), "1 buffer per use");
        assert_eq!(series(16), "16 buffers per use");
        assert_eq!(SIDES[0], "cuMemAlloc", "the baseline comes first");
    }

    #[test]
    fn the_accumulator_holds_every_buffer_once() {
        assert_eq!(expected(1.0, 1), 0.75);
        assert_eq!(expected(-0.5, 16), 0.0);
        assert_eq!(expected(0.5, 4), 2.0);
    }
}
