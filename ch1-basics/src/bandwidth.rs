//! Host-device copy bandwidth measured on the machine in hand: the pinned ceilings the lesson's
//! copies are compared with, and how the achieved rate depends on the size of one copy (small
//! copies are latency-bound, which is one reason small batches are slow).

use serde::Serialize;

use common::bench::{measure, BenchConfig, Timer};
use common::gpu::Gpu;
use common::stats::Summary;
use common::stop::StopRule;
use common::Result;

use crate::memory::Pinned;

/// Bytes of the ceiling measurement's copy.
pub const CEILING_BYTES: usize = 256 << 20;

#[derive(Debug, Clone, Serialize)]
pub struct CopyRate {
    pub direction: &'static str,
    pub bytes: usize,
    /// Seconds per copy.
    pub time_s: Summary,
    /// GB/s at the median time.
    pub median_gb_per_s: f64,
    /// GB/s at the fastest sample (the ceiling uses this: best of several).
    pub best_gb_per_s: f64,
}

/// Time pinned copies of each size in `sizes` (bytes), host-to-device and device-to-host,
/// queued behind the harness's blocking kernel.
pub fn pinned_copy_rates(gpu: &Gpu, timer: &mut Timer, sizes: &[usize]) -> Result<Vec<CopyRate>> {
    let largest = sizes.iter().copied().max().unwrap_or(0) / 4;
    let mut host = Pinned::<f32>::new(gpu, largest, "the pinned copy-bandwidth buffer")?;
    host.as_mut_slice().fill(1.0);
    let mut dev = gpu.alloc::<f32>(largest, "the copy-bandwidth device buffer")?;
    let bench = BenchConfig {
        stop: StopRule {
            min_samples: 10,
            max_samples: 1000,
            min_time_s: 0.05,
            max_time_s: 1.0,
            max_noise: 0.01,
        },
        ..BenchConfig::default()
    };
    let stream = gpu.stream.clone();
    let mut rates = Vec::new();
    for &bytes in sizes {
        let len = bytes / 4;
        for direction in ["host-to-device", "device-to-host"] {
            let m = measure(gpu, timer, &bench, &mut || {
                if direction == "host-to-device" {
                    host.copy_to_device(0..len, &mut dev.slice_mut(..len), &stream)
                } else {
                    host.copy_from_device(0, &dev.slice(..len), &stream)
                }
            })?;
            let s = Summary::of(&m.samples_s).expect("samples");
            rates.push(CopyRate {
                direction,
                bytes,
                median_gb_per_s: bytes as f64 / s.median / 1e9,
                best_gb_per_s: bytes as f64 / s.min / 1e9,
                time_s: s,
            });
        }
    }
    Ok(rates)
}
