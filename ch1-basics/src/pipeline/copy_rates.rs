//! Pinned host-device copy rates by the size of one copy: small copies are latency-bound, one
//! reason small batches are slow.

use serde::Serialize;

use common::bench::BenchConfig;
use common::ceilings::transfer::TRANSFER_BYTES;
use common::gpu::Gpu;
use common::pinned::Pinned;
use common::report::Section;
use common::runner::Meter;
use common::stats::Summary;
use common::stop::StopRule;
use common::table::Table;
use common::Result;
use plotting::format::human_bytes;

/// One input microbatch and one batch of the training part (32 and 256 samples of 256 fp32).
pub const MICROBATCH_BYTES: usize = 32 * 256 * 4;
pub const BATCH_BYTES: usize = 256 * 256 * 4;

#[derive(Debug, Clone, Serialize)]
pub struct CopyRate {
    pub direction: &'static str,
    pub bytes: usize,
    /// Seconds per copy.
    pub time_s: Summary,
    pub median_gb_per_s: f64,
    /// At the fastest sample.
    pub best_gb_per_s: f64,
}

/// A microbatch, a batch, 4 MiB, one chunk of the pipeline, the pinned ceilings' 256 MiB.
pub fn sizes(chunk_bytes: usize) -> Vec<usize> {
    let mut sizes = vec![
        MICROBATCH_BYTES,
        BATCH_BYTES,
        4 << 20,
        chunk_bytes,
        TRANSFER_BYTES,
    ];
    sizes.sort();
    sizes.dedup();
    sizes
}

/// Time pinned copies of each size (bytes) each way, queued behind the blocking kernel.
pub fn measure(gpu: &Gpu, meter: &mut Meter, sizes: &[usize]) -> Result<Vec<CopyRate>> {
    let largest = sizes.iter().copied().max().unwrap_or(0) / 4;
    let mut host = Pinned::from_slice(gpu, &vec![1.0f32; largest], "the pinned copy-rate buffer")?;
    let mut dev = gpu.alloc::<f32>(largest, "the copy-rate device buffer")?;
    let stream = gpu.stream.clone();
    // A short stopping rule: ten copies of each size are plenty for a rate to two figures.
    let stop = StopRule {
        max_samples: 1000,
        max_noise: 0.01,
        ..StopRule::quick()
    };
    let cfg = BenchConfig {
        stop,
        ..BenchConfig::default()
    };
    let mut rates = Vec::new();
    for &bytes in sizes {
        let len = bytes / 4;
        for direction in ["host-to-device", "device-to-host"] {
            let timed = meter.measure(&cfg, &mut || {
                if direction == "host-to-device" {
                    host.copy_to_device(0..len, &mut dev.slice_mut(..len), &stream)
                } else {
                    host.copy_from_device(0, &dev.slice(..len), &stream)
                }
            })?;
            let time_s = Summary::of(&timed.measurement.samples_s)
                .ok_or_else(|| common::Error::invalid("no valid samples"))?;
            rates.push(CopyRate {
                direction,
                bytes,
                median_gb_per_s: bytes as f64 / time_s.median / 1e9,
                best_gb_per_s: bytes as f64 / time_s.min / 1e9,
                time_s,
            });
        }
    }
    Ok(rates)
}

pub fn section(rates: &[CopyRate]) -> Section {
    let mut table = Table::new()
        .left("pinned copy")
        .right("bytes")
        .right("median GB/s")
        .right("best GB/s");
    for r in rates {
        table.row(vec![
            r.direction.to_string(),
            human_bytes(r.bytes as u64),
            format!("{:.1}", r.median_gb_per_s),
            format!("{:.1}", r.best_gb_per_s),
        ]);
    }
    Section {
        table: Some(table),
        lines: vec![
            "each size timed with CUDA events, copies queued back to back behind a blocking kernel; best = the fastest sample".into(),
        ],
        data: serde_json::to_value(rates).unwrap_or_default(),
        ..Section::new("pinned copy rates by size")
    }
}
