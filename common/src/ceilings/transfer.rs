//! Host-to-device bandwidth: 256 MiB from pinned (page-locked) memory, the ceiling for any
//! lesson that copies data in, and from ordinary pageable memory for comparison.

use super::{best_of, ceiling_bench, Ceiling, RateAt};
use crate::bench::{measure, Timer};
use crate::error::{human_bytes, CudaContext as _, Result};
use crate::gpu::Gpu;

pub const H2D_BYTES: usize = 256 << 20;

/// (pinned, pageable) host-to-device bandwidth in GB/s.
pub fn measure_h2d(gpu: &Gpu, timer: &mut Timer) -> Result<(Ceiling, Ceiling)> {
    let len = H2D_BYTES / 4;
    let mut dev = gpu.alloc::<f32>(len, "the host-to-device target")?;
    // Flags 0: plain page-locked memory (not write-combined), like a training loader's buffers.
    // SAFETY: filled below before use.
    let mut pinned = unsafe { gpu.ctx.alloc_pinned_with_flags::<f32>(len, 0) }
        .cuda("allocating pinned host memory")?;
    pinned
        .as_mut_slice()
        .cuda("mapping pinned memory")?
        .copy_from_slice(&crate::verify::uniform_f32(5, len, -1.0, 1.0));
    let pageable = crate::verify::uniform_f32(6, len, -1.0, 1.0);
    let stream = gpu.stream.clone();
    let bench = ceiling_bench();
    let pinned_m = measure(gpu, timer, &bench, &mut || {
        stream
            .memcpy_htod(&pinned, &mut dev)
            .cuda("pinned host-to-device copy")
    })?;
    // A copy from pageable memory returns only when the host side is done: it cannot queue
    // behind the blocking kernel.
    let no_hold = crate::bench::BenchConfig {
        hold: false,
        ..bench
    };
    let pageable_m = measure(gpu, timer, &no_hold, &mut || {
        stream
            .memcpy_htod(&pageable, &mut dev)
            .cuda("pageable host-to-device copy")
    })?;
    let gbps = |s: f64| H2D_BYTES as f64 / s / 1e9;
    let describe = |name: &str, s: &crate::stats::Summary| {
        format!(
            "{name}, median of {} samples, {}",
            s.samples,
            human_bytes(H2D_BYTES as u64)
        )
    };
    let pinned = best_of(
        gpu,
        vec![("cuMemcpyHtoDAsync from pinned memory".into(), pinned_m)],
        RateAt::Median,
        gbps,
        "GB/s",
        describe,
    )?;
    let pageable = best_of(
        gpu,
        vec![("cuMemcpyHtoD from pageable memory".into(), pageable_m)],
        RateAt::Median,
        gbps,
        "GB/s",
        describe,
    )?;
    Ok((pinned, pageable))
}
