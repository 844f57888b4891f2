//! Ceilings measured on the GPU in hand, never typed in, and cached per device so every lesson
//! can say "% of what this GPU can do" without re-measuring. The figure a datasheet would give
//! is printed beside them, derived from the clocks and bus width the driver reports, and
//! labelled as such.
//!
//! - memory: copy (1:1 read/write), read-only and write-only bandwidth over working sets of at
//!   least 8x the L2 size ([memory]);
//! - compute: an FP32 FMA kernel and cuBLAS GEMMs in fp32, tf32 and bf16 ([compute]);
//! - transfer: host-to-device copies from pinned and pageable memory ([transfer]).

mod ceiling;
pub mod compute;
pub mod memory;
pub mod transfer;

pub use ceiling::{
    best_of, ceiling_bench, copy_buffer_bytes, dram_theoretical, theoretical_dram_gbps, Ceiling,
    CeilingRef, RateAt, Theoretical,
};

use std::path::PathBuf;

use cudarc::driver::{CudaSlice, LaunchConfig, PushKernelArg};
use serde::{Deserialize, Serialize};

use crate::bench::{measure, Timer};
use crate::blas::GemmPrecision;
use crate::counters::Work;
use crate::error::{CudaContext as _, Result};
use crate::files::{rfc3339_utc, write_json_file};
use crate::gpu::{DeviceInfo, Gpu};
use crate::kernels;
use crate::kernels::HARNESS;

pub const CEILINGS_SCHEMA_VERSION: u32 = 6;

/// The cached ceilings of one device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceCeilings {
    pub schema_version: u32,
    pub device: DeviceInfo,
    pub measured_at: String,
    /// Device-memory copy bandwidth, bytes read + written, GB/s.
    pub copy_bandwidth: Option<Ceiling>,
    #[serde(default)]
    pub read_bandwidth: Option<Ceiling>,
    #[serde(default)]
    pub write_bandwidth: Option<Ceiling>,
    /// FP32 FMA throughput of CUDA cores, GFLOP/s.
    #[serde(default)]
    pub fp32_fma: Option<Ceiling>,
    #[serde(default)]
    pub sgemm_fp32: Option<Ceiling>,
    /// SGEMM at one size ([compute::GEMM_ONE_SIZE]), hot and cold: the compare's figure for its
    /// GEMM pairs where [Self::sgemm_fp32], the best of three sizes, was never measured. Kept
    /// apart so that neither replaces the other; no roofline draws it.
    #[serde(default)]
    pub sgemm_fp32_one_size: Option<Ceiling>,
    #[serde(default)]
    pub gemm_tf32: Option<Ceiling>,
    #[serde(default)]
    pub gemm_bf16: Option<Ceiling>,
    /// Host-to-device from pinned memory, GB/s.
    #[serde(default)]
    pub h2d_pinned: Option<Ceiling>,
    #[serde(default)]
    pub h2d_pageable: Option<Ceiling>,
    /// Device-to-host into pinned memory, GB/s.
    #[serde(default)]
    pub d2h_pinned: Option<Ceiling>,
}

impl DeviceCeilings {
    pub fn empty(info: &DeviceInfo) -> DeviceCeilings {
        DeviceCeilings {
            schema_version: CEILINGS_SCHEMA_VERSION,
            device: info.clone(),
            measured_at: String::new(),
            copy_bandwidth: None,
            read_bandwidth: None,
            write_bandwidth: None,
            fp32_fma: None,
            sgemm_fp32: None,
            sgemm_fp32_one_size: None,
            gemm_tf32: None,
            gemm_bf16: None,
            h2d_pinned: None,
            h2d_pageable: None,
            d2h_pinned: None,
        }
    }

    /// The highest measured device-memory bandwidth and its name: the roofline's slope.
    pub fn memory_roof(&self) -> Option<(&'static str, &Ceiling)> {
        [
            ("copy", &self.copy_bandwidth),
            ("read", &self.read_bandwidth),
            ("write", &self.write_bandwidth),
        ]
        .into_iter()
        .filter_map(|(n, c)| c.as_ref().map(|c| (n, c)))
        .max_by(|a, b| a.1.value.total_cmp(&b.1.value))
    }

    /// The SGEMM figure a GEMM's share is taken against, and its name: the best of three sizes
    /// where it was measured, else the one-size figure.
    pub fn sgemm(&self) -> Option<(String, &Ceiling)> {
        match (&self.sgemm_fp32, &self.sgemm_fp32_one_size) {
            (Some(c), _) => Some(("SGEMM".to_string(), c)),
            (None, Some(c)) => Some((format!("SGEMM at {}", compute::GEMM_ONE_SIZE), c)),
            (None, None) => None,
        }
    }

    /// Every ceiling that was measured, by name.
    pub fn named(&self) -> Vec<(&'static str, &Ceiling)> {
        [
            ("DRAM copy bandwidth", &self.copy_bandwidth),
            ("DRAM read bandwidth", &self.read_bandwidth),
            ("DRAM write bandwidth", &self.write_bandwidth),
            ("FP32 FMA (CUDA cores)", &self.fp32_fma),
            ("SGEMM fp32 (cuBLAS)", &self.sgemm_fp32),
            ("GEMM tf32 (cuBLAS)", &self.gemm_tf32),
            ("GEMM bf16 (cuBLAS)", &self.gemm_bf16),
            ("host-to-device, pinned", &self.h2d_pinned),
            ("host-to-device, pageable", &self.h2d_pageable),
            ("device-to-host, pinned", &self.d2h_pinned),
        ]
        .into_iter()
        .filter_map(|(n, c)| c.as_ref().map(|c| (n, c)))
        .collect()
    }
}

/// Every ceiling, measuring those not cached (or all with `refresh`), and store them.
pub fn measure_all(gpu: &Gpu, timer: &mut Timer, refresh: bool) -> Result<DeviceCeilings> {
    let mut c = if refresh {
        DeviceCeilings::empty(&gpu.info)
    } else {
        load_cached(&gpu.info).unwrap_or_else(|| DeviceCeilings::empty(&gpu.info))
    };
    if c.copy_bandwidth.is_none() {
        c.copy_bandwidth = Some(measure_copy_bandwidth(gpu, timer)?);
    }
    if c.read_bandwidth.is_none() || c.write_bandwidth.is_none() {
        let (read, write) = memory::measure_read_write(gpu, timer)?;
        c.read_bandwidth = Some(read);
        c.write_bandwidth = Some(write);
    }
    if c.fp32_fma.is_none() {
        c.fp32_fma = Some(compute::measure_fp32_fma(gpu, timer)?);
    }
    fill_gemms(&mut c, gpu, timer)?;
    if c.h2d_pinned.is_none() || c.h2d_pageable.is_none() || c.d2h_pinned.is_none() {
        let t = transfer::measure(gpu, timer)?;
        c.h2d_pinned = Some(t.h2d_pinned);
        c.h2d_pageable = Some(t.h2d_pageable);
        c.d2h_pinned = Some(t.d2h_pinned);
    }
    c.measured_at = rfc3339_utc(std::time::SystemTime::now());
    let _ = store(&c);
    Ok(c)
}

/// The host-device copy ceilings (pinned both ways, pageable host-to-device), from the cache
/// unless `refresh` or absent.
pub fn transfers(gpu: &Gpu, timer: &mut Timer, refresh: bool) -> Result<transfer::Transfers> {
    let mut c = load_cached(&gpu.info).unwrap_or_else(|| DeviceCeilings::empty(&gpu.info));
    if let (false, Some(h2d_pinned), Some(h2d_pageable), Some(d2h_pinned)) =
        (refresh, &c.h2d_pinned, &c.h2d_pageable, &c.d2h_pinned)
    {
        return Ok(transfer::Transfers {
            h2d_pinned: h2d_pinned.clone(),
            h2d_pageable: h2d_pageable.clone(),
            d2h_pinned: d2h_pinned.clone(),
        });
    }
    let t = transfer::measure(gpu, timer)?;
    c.h2d_pinned = Some(t.h2d_pinned.clone());
    c.h2d_pageable = Some(t.h2d_pageable.clone());
    c.d2h_pinned = Some(t.d2h_pinned.clone());
    c.measured_at = rfc3339_utc(std::time::SystemTime::now());
    // A cache that cannot be written costs a re-measurement next time, nothing more.
    let _ = store(&c);
    Ok(t)
}

fn cache_path(info: &DeviceInfo) -> PathBuf {
    crate::files::cache_dir().join("ceilings").join(format!(
        "{}-{}.json",
        info.uuid,
        info.driver_version.replace(['/', ' '], "_")
    ))
}

/// Load the device's cached ceilings, if any were measured with this driver.
pub fn load_cached(info: &DeviceInfo) -> Option<DeviceCeilings> {
    let text = std::fs::read_to_string(cache_path(info)).ok()?;
    let c: DeviceCeilings = serde_json::from_str(&text).ok()?;
    (c.schema_version == CEILINGS_SCHEMA_VERSION && &c.device == info).then_some(c)
}

pub fn store(c: &DeviceCeilings) -> Result<()> {
    let path = cache_path(&c.device);
    write_json_file(&path, c, "the ceilings cache")
}

/// The copy-bandwidth ceiling, from the cache unless `refresh` or absent.
pub fn copy_bandwidth(gpu: &Gpu, timer: &mut Timer, refresh: bool) -> Result<Ceiling> {
    let mut cached = load_cached(&gpu.info).unwrap_or_else(|| DeviceCeilings::empty(&gpu.info));
    if let (false, Some(c)) = (refresh, &cached.copy_bandwidth) {
        return Ok(c.clone());
    }
    let c = measure_copy_bandwidth(gpu, timer)?;
    cached.copy_bandwidth = Some(c.clone());
    cached.measured_at = rfc3339_utc(std::time::SystemTime::now());
    // A cache that cannot be written costs a re-measurement next time, nothing more.
    let _ = store(&cached);
    Ok(c)
}

/// Every cached ceiling, with an SGEMM figure for a program that needs one and not the roofline
/// (the compare's GEMM pairs): the cached ones where either SGEMM figure is there, else the
/// one-size figure measured and stored beside the others ([DeviceCeilings::sgemm_fp32_one_size]),
/// a third of the time of the three sizes. With `refresh` the one-size figure is measured again
/// and is the one returned (the full figure is left in the cache, not in the answer).
pub fn with_sgemm(gpu: &Gpu, timer: &mut Timer, refresh: bool) -> Result<DeviceCeilings> {
    let mut c = load_cached(&gpu.info).unwrap_or_else(|| DeviceCeilings::empty(&gpu.info));
    if !refresh && c.sgemm().is_some() {
        return Ok(c);
    }
    c.sgemm_fp32_one_size = Some(compute::measure_gemm_one_size(
        gpu,
        timer,
        GemmPrecision::Fp32,
    )?);
    c.measured_at = rfc3339_utc(std::time::SystemTime::now());
    // A cache that cannot be written costs a re-measurement next time, nothing more.
    let _ = store(&c);
    if refresh {
        c.sgemm_fp32 = None;
    }
    Ok(c)
}

/// Measure the GEMM ceilings into `c` where any is absent; whether it measured.
fn fill_gemms(c: &mut DeviceCeilings, gpu: &Gpu, timer: &mut Timer) -> Result<bool> {
    let mut measured = false;
    for (slot, precision) in [
        (&mut c.sgemm_fp32, GemmPrecision::Fp32),
        (&mut c.gemm_tf32, GemmPrecision::Tf32),
        (&mut c.gemm_bf16, GemmPrecision::Bf16),
    ] {
        if slot.is_none() {
            *slot = Some(compute::measure_gemm(gpu, timer, precision)?);
            measured = true;
        }
    }
    Ok(measured)
}

/// Best of a 16-byte-per-thread copy kernel and the driver's device-to-device memcpy.
pub fn measure_copy_bandwidth(gpu: &Gpu, timer: &mut Timer) -> Result<Ceiling> {
    let (free, _) = gpu.memory()?;
    let bytes = copy_buffer_bytes(gpu.info.l2_bytes, free);
    gpu.check_fits("the copy-bandwidth buffers", 2 * bytes)?;
    let n4 = bytes / 16;
    let src: CudaSlice<u8> = gpu.alloc_zeros(bytes as usize, "copy source")?;
    let mut dst: CudaSlice<u8> = gpu.alloc_zeros(bytes as usize, "copy destination")?;
    let module = kernels::load(gpu, HARNESS, &[])?;
    let threads = 256u32;
    let launch_cfg = |blocks: u64| LaunchConfig {
        grid_dim: (blocks as u32, 1, 1),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: 0,
    };
    let kernels = [
        (
            "copy_f32x4 kernel (16 B per thread, grid-stride)",
            module.function("copy_f32x4")?,
            launch_cfg(
                n4.div_ceil(threads as u64)
                    .min(gpu.info.sm_count as u64 * 64),
            ),
        ),
        (
            "copy_f32x4_x2 kernel (2 x 16 B per thread)",
            module.function("copy_f32x4_x2")?,
            launch_cfg(n4.div_ceil(2 * threads as u64)),
        ),
    ];
    let bench = ceiling_bench();
    let work = Work {
        bytes_read: bytes,
        bytes_written: bytes,
        flops: 0,
    };
    let stream = gpu.stream.clone();
    let mut candidates = Vec::new();
    for (name, function, cfg) in &kernels {
        let m = measure(gpu, timer, &bench, &mut || {
            let mut b = stream.launch_builder(function);
            b.arg(&src);
            b.arg(&mut dst);
            b.arg(&n4);
            // SAFETY: (const float4*, float4*, u64) over n4 16-byte elements of each buffer.
            unsafe { b.launch(*cfg) }.cuda(name).map(|_| ())
        })?;
        candidates.push((*name, m));
    }
    let memcpy_m = measure(gpu, timer, &bench, &mut || {
        stream
            .memcpy_dtod(&src, &mut dst)
            .cuda("device-to-device memcpy")
    })?;
    candidates.push(("cuMemcpyDtoDAsync", memcpy_m));
    let candidates = candidates
        .into_iter()
        .map(|(n, m)| (n.to_string(), m))
        .collect();
    let mut c = best_of(
        gpu,
        candidates,
        RateAt::Median,
        |s| work.throughput(s).gb_per_s,
        "GB/s",
        |name, s| {
            format!(
                "{name}, median of {} samples, 2 x {} buffers, read+write bytes",
                s.samples,
                plotting::format::human_bytes(bytes)
            )
        },
    )?;
    c.theoretical = Some(dram_theoretical(&gpu.info));
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(mem_mhz: u32, bus: u32) -> DeviceInfo {
        DeviceInfo {
            ordinal: 0,
            name: "NVIDIA H100 80GB HBM3".into(),
            uuid: "GPU-0".into(),
            compute_capability: (9, 0),
            sm_count: 132,
            total_memory_bytes: 80 << 30,
            l2_bytes: 50 << 20,
            max_sm_clock_mhz: 1980,
            memory_clock_mhz: mem_mhz,
            memory_bus_width_bits: bus,
            driver_version: "580".into(),
            cuda_driver_version: "13.0".into(),
            nvrtc_version: "13.0".into(),
        }
    }

    fn sgemm_at(value: f64) -> Ceiling {
        Ceiling {
            value,
            unit: "GFLOP/s".into(),
            method: "test".into(),
            time_s: crate::stats::Summary::of(&[1e-3, 1.1e-3]).unwrap(),
            candidates: vec![],
            theoretical: None,
            sm_clock_mhz: None,
            verification_error: None,
        }
    }

    #[test]
    fn the_full_sgemm_figure_wins_and_the_one_size_figure_is_named() {
        let mut c = DeviceCeilings::empty(&info(2619, 5120));
        assert!(c.sgemm().is_none());
        c.sgemm_fp32_one_size = Some(sgemm_at(51_000.0));
        let (name, one) = c.sgemm().unwrap();
        assert_eq!((name.as_str(), one.value), ("SGEMM at 4096", 51_000.0));
        c.sgemm_fp32 = Some(sgemm_at(52_000.0));
        let (name, full) = c.sgemm().unwrap();
        assert_eq!((name.as_str(), full.value), ("SGEMM", 52_000.0));
        // Neither replaces the other in the cache's file.
        let back: DeviceCeilings =
            serde_json::from_str(&serde_json::to_string(&c).unwrap()).unwrap();
        assert_eq!(back, c);
        assert!(c.named().iter().all(|(_, n)| n.value != 51_000.0));
    }

    #[test]
    fn a_cache_written_before_the_one_size_figure_still_reads() {
        let mut c = DeviceCeilings::empty(&info(2619, 5120));
        c.sgemm_fp32 = Some(sgemm_at(52_000.0));
        let mut json = serde_json::to_value(&c).unwrap();
        json.as_object_mut().unwrap().remove("sgemm_fp32_one_size");
        let back: DeviceCeilings = serde_json::from_value(json).unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn theoretical_bandwidth_from_clock_and_bus() {
        // H100 SXM: 2619 MHz HBM3 on a 5120-bit bus = 3352 GB/s, the datasheet's 3.35 TB/s.
        let gbps = theoretical_dram_gbps(&info(2619, 5120));
        assert!((gbps - 3352.3).abs() < 0.5, "{gbps}");
    }

    #[test]
    fn copy_buffers_cover_eight_l2s() {
        let l2 = 60 << 20;
        assert_eq!(copy_buffer_bytes(l2, 140 << 30), 1 << 30);
        // A small card still gets 4x L2 per buffer.
        assert_eq!(copy_buffer_bytes(l2, 512 << 20), 4 * l2);
        assert_eq!(copy_buffer_bytes(1000, 1 << 40) % 16, 0);
    }
}
