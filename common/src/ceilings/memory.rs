//! Read-only and write-only DRAM bandwidth over a buffer of at least 8x the L2 size.

use cudarc::driver::{LaunchConfig, PushKernelArg};

use super::ceiling::{
    best_of, ceiling_bench, copy_buffer_bytes, dram_theoretical, Ceiling, RateAt,
};
use crate::bench::{measure, Timer};
use crate::error::{CudaContext as _, Result};
use crate::gpu::Gpu;
use crate::kernels;
use crate::kernels::HARNESS;
use plotting::format::human_bytes;

/// (read-only, write-only) bandwidth in GB/s.
pub fn measure_read_write(gpu: &Gpu, timer: &mut Timer) -> Result<(Ceiling, Ceiling)> {
    let (free, _) = gpu.memory()?;
    // One buffer this time, so it can be twice the copy buffers' size.
    let bytes = 2 * copy_buffer_bytes(gpu.info.l2_bytes, free);
    gpu.check_fits("the bandwidth buffer", bytes)?;
    let n4 = bytes / 16;
    let mut buf = gpu.alloc_zeros::<u8>(bytes as usize, "the bandwidth buffer")?;
    let mut sink = gpu.alloc_zeros::<f32>(1, "the read sink")?;
    let module = kernels::load(gpu, HARNESS, &[])?;
    let read = module.function("read_f32x4")?;
    let write = module.function("write_f32x4")?;
    let sms = gpu.info.sm_count;
    let cfg = |blocks_per_sm: u32| LaunchConfig {
        grid_dim: (sms * blocks_per_sm, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    let bench = ceiling_bench();
    let stream = gpu.stream.clone();
    let mut reads = Vec::new();
    let mut writes = Vec::new();
    for blocks_per_sm in [4u32, 8, 16] {
        let m = measure(gpu, timer, &bench, &mut || {
            let mut b = stream.launch_builder(&read);
            b.arg(&buf);
            b.arg(&n4);
            b.arg(&mut sink);
            // SAFETY: read_f32x4(const float4*, u64, float*) over n4 vectors of the buffer.
            unsafe { b.launch(cfg(blocks_per_sm)) }
                .cuda("read_f32x4")
                .map(|_| ())
        })?;
        reads.push((
            format!("read_f32x4 kernel, {blocks_per_sm} blocks of 256 per SM"),
            m,
        ));
        let value = 1.5f32;
        let m = measure(gpu, timer, &bench, &mut || {
            let mut b = stream.launch_builder(&write);
            b.arg(&mut buf);
            b.arg(&n4);
            b.arg(&value);
            // SAFETY: write_f32x4(float4*, u64, float) over n4 vectors of the buffer.
            unsafe { b.launch(cfg(blocks_per_sm)) }
                .cuda("write_f32x4")
                .map(|_| ())
        })?;
        writes.push((
            format!("write_f32x4 kernel, {blocks_per_sm} blocks of 256 per SM"),
            m,
        ));
    }
    let memset = measure(gpu, timer, &bench, &mut || {
        stream.memset_zeros(&mut buf).cuda("memset")
    })?;
    writes.push(("cuMemsetD8Async".to_string(), memset));
    let gbps = |s: f64| bytes as f64 / s / 1e9;
    let describe = |what: &'static str| {
        move |name: &str, s: &crate::stats::Summary| {
            format!(
                "{name}, median of {} samples over {}, {what} bytes",
                s.samples,
                human_bytes(bytes)
            )
        }
    };
    let mut read = best_of(gpu, reads, RateAt::Median, gbps, "GB/s", describe("read"))?;
    let mut write = best_of(
        gpu,
        writes,
        RateAt::Median,
        gbps,
        "GB/s",
        describe("written"),
    )?;
    read.theoretical = Some(dram_theoretical(&gpu.info));
    write.theoretical = Some(dram_theoretical(&gpu.info));
    Ok((read, write))
}
