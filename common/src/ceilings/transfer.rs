//! Host-device copy bandwidth over 256 MiB: host-to-device from pinned (page-locked) memory,
//! the ceiling for any lesson that copies data in, and from ordinary pageable memory for
//! comparison; device-to-host into pinned memory, the ceiling for copies out.

use super::ceiling::{best_of, ceiling_bench, Ceiling, RateAt};
use crate::bench::{self, BenchConfig, Timer};
use crate::error::{CudaContext as _, Result};
use crate::gpu::Gpu;
use plotting::format::human_bytes;

pub const TRANSFER_BYTES: usize = 256 << 20;

/// The copy ceilings, GB/s at the median time.
#[derive(Debug, Clone)]
pub struct Transfers {
    pub h2d_pinned: Ceiling,
    pub h2d_pageable: Ceiling,
    pub d2h_pinned: Ceiling,
}

pub fn measure(gpu: &Gpu, timer: &mut Timer) -> Result<Transfers> {
    let len = TRANSFER_BYTES / 4;
    let mut dev = gpu.alloc::<f32>(len, "the copy target")?;
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
    let h2d_pinned = bench::measure(gpu, timer, &bench, &mut || {
        stream
            .memcpy_htod(&pinned, &mut dev)
            .cuda("pinned host-to-device copy")
    })?;
    let d2h_pinned = bench::measure(gpu, timer, &bench, &mut || {
        stream
            .memcpy_dtoh(&dev, &mut pinned)
            .cuda("device-to-host copy into pinned memory")
    })?;
    // A copy from pageable memory returns only when the host side is done: it cannot queue
    // behind the blocking kernel.
    let no_hold = BenchConfig {
        hold: false,
        ..bench
    };
    let h2d_pageable = bench::measure(gpu, timer, &no_hold, &mut || {
        stream
            .memcpy_htod(&pageable, &mut dev)
            .cuda("pageable host-to-device copy")
    })?;
    let ceiling = |name: &str, m| {
        best_of(
            gpu,
            vec![(name.to_string(), m)],
            RateAt::Median,
            |s| TRANSFER_BYTES as f64 / s / 1e9,
            "GB/s",
            |name, s| {
                format!(
                    "{name}, median of {} samples, {}",
                    s.samples,
                    human_bytes(TRANSFER_BYTES as u64)
                )
            },
        )
    };
    Ok(Transfers {
        h2d_pinned: ceiling("cuMemcpyHtoDAsync from pinned memory", h2d_pinned)?,
        h2d_pageable: ceiling("cuMemcpyHtoD from pageable memory", h2d_pageable)?,
        d2h_pinned: ceiling("cuMemcpyDtoHAsync into pinned memory", d2h_pinned)?,
    })
}
