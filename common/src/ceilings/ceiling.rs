//! One measured ceiling: its figure, how it was measured, the datasheet-style figure beside it,
//! and how the best of several candidates becomes one.

use serde::{Deserialize, Serialize};

use crate::bench::{BenchConfig, Measurement};
use crate::error::{Error, Result};
use crate::gpu::{DeviceInfo, Gpu};
use crate::stats::Summary;
use crate::stop::StopRule;

/// A reference figure the percentages are taken against.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CeilingRef {
    pub name: String,
    pub value: f64,
    pub unit: String,
    pub method: String,
    /// Every method tried and its figure; the ceiling is the best.
    #[serde(default)]
    pub candidates: Vec<(String, f64)>,
}

/// A datasheet-style figure computed from what the driver reports, not measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Theoretical {
    pub value: f64,
    pub basis: String,
}

/// One measured ceiling with how it was measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ceiling {
    pub value: f64,
    pub unit: String,
    pub method: String,
    /// Summary of the winning method's samples (seconds per run).
    pub time_s: Summary,
    /// Every candidate that was tried, with its figure.
    pub candidates: Vec<(String, f64)>,
    /// The figure a datasheet would give, where one can be derived, labelled as such.
    #[serde(default)]
    pub theoretical: Option<Theoretical>,
    /// SM clock (NVML) at the end of the winning measurement.
    #[serde(default)]
    pub sm_clock_mhz: Option<u32>,
    /// Relative L2 error of the kernel's checked output, where it computes something.
    #[serde(default)]
    pub verification_error: Option<f64>,
}

impl Ceiling {
    pub fn as_ref_named(&self, name: &str) -> CeilingRef {
        CeilingRef {
            name: name.to_string(),
            value: self.value,
            unit: self.unit.clone(),
            method: self.method.clone(),
            candidates: self.candidates.clone(),
        }
    }
}

pub fn dram_theoretical(info: &DeviceInfo) -> Theoretical {
    Theoretical {
        value: theoretical_dram_gbps(info),
        basis: format!(
            "datasheet-style: {} MHz memory clock x {} bit bus x 2 (double data rate), as the driver reports",
            info.memory_clock_mhz, info.memory_bus_width_bits
        ),
    }
}

/// The stopping rule every ceiling measurement uses: tight noise, short.
pub fn ceiling_bench() -> BenchConfig {
    BenchConfig {
        stop: StopRule {
            min_samples: 20,
            max_samples: 2000,
            min_time_s: 0.1,
            host_link_min_time_s: 0.0,
            max_time_s: 2.0,
            max_noise: 0.005,
            max_median_error: None,
        },
        ..BenchConfig::default()
    }
}

/// Which sample time a ceiling's rate is taken at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RateAt {
    /// The median: for bandwidths, which hold steady.
    Median,
    /// The 10th-percentile time, the fast end: for compute, where sustained runs meet the power
    /// limit and a ceiling should be what the chip reaches, not what it keeps after heating.
    P10,
}

impl RateAt {
    pub fn time(self, s: &Summary) -> f64 {
        match self {
            RateAt::Median => s.median,
            RateAt::P10 => s.p10,
        }
    }
}

/// The best of several measured candidates of the same work, as a ceiling.
pub fn best_of(
    gpu: &Gpu,
    candidates: Vec<(String, Measurement)>,
    at: RateAt,
    rate_per_s: impl Fn(f64) -> f64,
    unit: &str,
    describe: impl Fn(&str, &Summary) -> String,
) -> Result<Ceiling> {
    let mut rows: Vec<(String, f64, Summary, Option<u32>)> = candidates
        .into_iter()
        .map(|(name, m)| {
            let s = Summary::of(&m.samples_s)
                .ok_or_else(|| Error::invalid("a ceiling had no valid samples"))?;
            Ok((name, rate_per_s(at.time(&s)), s, m.after.sm_clock_mhz))
        })
        .collect::<Result<_>>()?;
    rows.sort_by(|a, b| b.1.total_cmp(&a.1));
    let (name, value, summary, clock) = rows[0].clone();
    Ok(Ceiling {
        value,
        unit: unit.to_string(),
        method: describe(&name, &summary),
        time_s: summary,
        candidates: rows.into_iter().map(|(n, v, _, _)| (n, v)).collect(),
        theoretical: None,
        sm_clock_mhz: clock.or_else(|| gpu.sm_clock_mhz()),
        verification_error: None,
    })
}

/// DRAM bandwidth implied by the driver-reported memory clock and bus width (double data rate),
/// GB/s. This is the datasheet-style figure, not a measurement.
pub fn theoretical_dram_gbps(info: &DeviceInfo) -> f64 {
    2.0 * info.memory_clock_mhz as f64 * 1e6 * info.memory_bus_width_bits as f64 / 8.0 / 1e9
}

/// Bytes per copy buffer: at least 4x L2 each (8x L2 of working set), 1 GiB where memory allows.
pub fn copy_buffer_bytes(l2_bytes: u64, free_bytes: u64) -> u64 {
    let want = (4 * l2_bytes).max(1 << 30);
    let fit = free_bytes / 4; // two buffers, with room to spare
    let bytes = want.min(fit).max(4 * l2_bytes);
    bytes / 16 * 16
}
