//! `--sweep`: where does batching stop mattering? Square products of sizes 16..4096 in counts
//! 8..1024, each timed one call per product and as one strided-batched call. Per size, the
//! inputs are made once for the largest count measured and every count uses a prefix of them;
//! each side's products 0 and count-1 are checked against the float64 reference before it is
//! timed. Points over a per-run work cap or the memory at hand are skipped up front, and a
//! wall-time cap keeps the whole sweep short: points past it are reported as skipped too.

use std::collections::HashMap;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use common::bench::{measure, BenchConfig, Timer};
use common::cli::CommonArgs;
use common::error::human_bytes;
use common::gpu::{DeviceInfo, Gpu};
use common::report::{write_json_file, Provenance};
use common::stats::Summary;
use common::stop::StopRule;
use common::verify::{rel_l2_error, Precision};
use common::{Error, Result};

use crate::batch::GemmBatch;
use crate::problem::{inputs, reference, tolerance, MemoryPlan, Shape};
use crate::table::{crossover, Crossover, Point, Timing, MATTERS_ABOVE};
use crate::{can_hold, Variant};

/// Sizes past 1024: on an H200 a single 1024^3 product still leaves SMs idle, so the grid goes
/// on until one product fills the GPU.
pub const SIZES: [usize; 9] = [16, 32, 64, 128, 256, 512, 1024, 2048, 4096];
pub const COUNTS: [usize; 8] = [8, 16, 32, 64, 128, 256, 512, 1024];
pub const SCHEMA_VERSION: u32 = 1;

/// Most FLOPs one run of a point may cost (2^41, 2.2 TFLOP: 1024 products of 1024^3, 128 of
/// 2048^3, 16 of 4096^3; about 40 ms at fp32): larger points are skipped, so the sweep's time
/// goes to covering the grid rather than to a few huge points.
pub const MAX_RUN_FLOPS: u64 = 1 << 41;

/// Why a point of `count` products of `size`^3 is not measured, decided before any time is
/// spent on it: too much work per run, or more memory than the device has `free` (a quarter
/// is left for the harness and cuBLAS) or the host has `host` (half is left).
pub fn skip_reason(size: usize, count: usize, free: u64, host: Option<u64>) -> Option<String> {
    let shape = Shape::square(size, count);
    let Ok(plan) = MemoryPlan::of(&shape) else {
        return Some("more bytes than 64 bits count".into());
    };
    let flops = shape.flops_per_product().saturating_mul(count as u64);
    if flops > MAX_RUN_FLOPS {
        return Some(format!(
            "{:.1} TFLOP per run, over the sweep's {:.1}",
            flops as f64 / 1e12,
            MAX_RUN_FLOPS as f64 / 1e12
        ));
    }
    if plan.device_bytes > free / 4 * 3 {
        return Some(format!(
            "needs {} of device memory, {} free",
            human_bytes(plan.device_bytes),
            human_bytes(free)
        ));
    }
    let host_inputs = 4 * (shape.a_len() + shape.b_len()) as u64 * count as u64;
    if let Some(available) = host.filter(|&h| host_inputs > h / 2) {
        return Some(format!(
            "needs {} of host memory for its inputs, {} available",
            human_bytes(host_inputs),
            human_bytes(available)
        ));
    }
    None
}

/// Per side of a point: a few samples suffice to place it in a table of ratios. A side of
/// `calls` cuBLAS calls per run is held behind the blocking kernel only when its runs fit the
/// launch queue, and a held sample queues at most [crate::MAX_HELD_CALLS] calls.
pub fn sweep_bench(cold: bool, calls: usize) -> BenchConfig {
    BenchConfig {
        stop: StopRule {
            min_samples: 5,
            max_samples: 1000,
            min_time_s: 0.02,
            max_time_s: 0.5,
            max_noise: 0.03,
        },
        cold,
        hold: can_hold(calls),
        max_batch: (crate::MAX_HELD_CALLS / calls.max(1)).max(1),
        warmup_runs: 2,
        warmup_time_s: 0.01,
        ..BenchConfig::default()
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepReport {
    pub schema_version: u32,
    pub lesson: String,
    pub kind: String,
    pub device: DeviceInfo,
    pub provenance: Provenance,
    pub precision: Precision,
    pub parameters: serde_json::Value,
    pub points: Vec<Point>,
    pub crossover: Crossover,
    pub wall_s: f64,
}

impl common::report::RunReport for SweepReport {
    fn markdown(&self) -> String {
        let d = &self.device;
        format!(
            "## ch1-gemm sweep on {} ({} SMs, driver {}), {}, square products, time cap {} s\n\n{}timing: CUDA events, {}; products 0 and count-1 of every side checked against float64\n",
            d.name,
            d.sm_count,
            d.driver_version,
            self.precision.label(),
            self.parameters["time_cap_s"],
            crate::table::markdown(&self.points, &self.crossover),
            if self.parameters["cold"].as_bool() == Some(true) {
                "cold (L2 flushed before each sample)"
            } else {
                "hot (L2 warm)"
            }
        )
    }

    fn write_json(&self, path: &std::path::Path) -> Result<()> {
        write_json_file(path, self, "the sweep")
    }

    fn all_passed(&self) -> bool {
        !self.points.iter().any(Point::failed)
    }
}

/// The products of one size the sweep checks, computed once each.
struct References<'a> {
    shape: Shape,
    a: &'a [f32],
    b: &'a [f32],
    cache: HashMap<usize, Vec<f64>>,
}

impl References<'_> {
    fn product(&mut self, i: usize) -> &[f64] {
        let (shape, a, b) = (self.shape, self.a, self.b);
        self.cache
            .entry(i)
            .or_insert_with(|| reference(&shape, a, b, i, 1))
    }
}

/// Run the sweep over `sizes` x `counts` (ascending) and build its report.
pub fn run(
    gpu: &Gpu,
    sizes: &[usize],
    counts: &[usize],
    precision: Precision,
    seed: u64,
    time_cap_s: f64,
    args: &CommonArgs,
) -> Result<SweepReport> {
    let start = Instant::now();
    let mut timer = Timer::new(gpu)?;
    let provenance = Provenance::now();
    let trace = common::trace::Session::start_if(args)?;
    let mut points = Vec::new();
    for &size in sizes {
        let (free, _) = gpu.memory()?;
        let host = common::gpu::host_available_bytes();
        let skips: Vec<Option<String>> = counts
            .iter()
            .map(|&c| skip_reason(size, c, free, host))
            .collect();
        let capacity = counts
            .iter()
            .zip(&skips)
            .filter(|(_, skip)| skip.is_none())
            .map(|(&c, _)| c)
            .max();
        let capacity = match capacity {
            Some(c) if start.elapsed().as_secs_f64() <= time_cap_s => c,
            _ => {
                for (&count, skip) in counts.iter().zip(skips) {
                    let why = skip.unwrap_or_else(|| "time cap".into());
                    points.push(Point::skipped(size, count, why));
                }
                continue;
            }
        };
        let shape = Shape::square(size, capacity);
        let (a, b) = inputs(&shape, seed);
        let mut batch = GemmBatch::new(gpu, shape, &a, &b, precision)?;
        let mut refs = References {
            shape,
            a: &a,
            b: &b,
            cache: HashMap::new(),
        };
        let tol = tolerance(precision, size);
        for (&count, skip) in counts.iter().zip(skips) {
            if let Some(why) = skip {
                points.push(Point::skipped(size, count, why));
            } else if start.elapsed().as_secs_f64() > time_cap_s {
                points.push(Point::skipped(size, count, "time cap"));
            } else {
                let mut side = |variant: Variant, calls: usize| {
                    measure_side(
                        gpu, &mut timer, &mut batch, &mut refs, variant, count, calls, tol, args,
                    )
                };
                let one_by_one = side(Variant::Baseline, count)?;
                let strided = side(Variant::Strided, 1)?;
                points.push(Point {
                    size,
                    count,
                    one_by_one: Some(one_by_one),
                    strided: Some(strided),
                    skipped: None,
                });
            }
        }
    }
    if let Some(t) = trace {
        t.finish()?;
    }
    let crossover = crossover(&points, MATTERS_ABOVE);
    Ok(SweepReport {
        schema_version: SCHEMA_VERSION,
        lesson: "ch1-gemm".into(),
        kind: "sweep".into(),
        device: gpu.info.clone(),
        provenance,
        precision,
        parameters: serde_json::json!({
            "sizes": sizes, "counts": counts, "seed": seed, "time_cap_s": time_cap_s,
            "cold": args.cold,
            "stop_rule": sweep_bench(args.cold, 1).stop,
            "max_held_calls": crate::MAX_HELD_CALLS,
            "max_run_flops": MAX_RUN_FLOPS,
            "speedup_that_matters": MATTERS_ABOVE,
            "checked_products": "0 and count-1 of every side, relative L2 against float64",
            "tolerance_rel_l2": sizes.iter().map(|&s| tolerance(precision, s)).collect::<Vec<_>>(),
        }),
        points,
        crossover,
        wall_s: start.elapsed().as_secs_f64(),
    })
}

/// Check one side's first and last product, then time it (a side that fails is not timed).
#[allow(clippy::too_many_arguments)]
fn measure_side(
    gpu: &Gpu,
    timer: &mut Timer,
    batch: &mut GemmBatch,
    refs: &mut References,
    variant: Variant,
    count: usize,
    calls: usize,
    tolerance: f64,
    args: &CommonArgs,
) -> Result<Timing> {
    // Named like the runner's variant ranges, with the point: "ch1-gemm:strided:40x64^3".
    let _range = common::nvtx::range(&format!(
        "ch1-gemm:{}:{count}x{}^3",
        variant.name(),
        batch.shape().m
    ));
    batch.poison(gpu)?;
    batch.run(gpu, variant, count)?;
    gpu.sync()?;
    let mut worst = 0f64;
    for i in [0, count - 1] {
        let got = batch.product(gpu, i)?;
        worst = worst.max(rel_l2_error(&got, refs.product(i)));
    }
    let cfg = sweep_bench(args.cold, calls);
    let held = cfg.hold;
    let passed = worst <= tolerance;
    if !passed {
        return Ok(Timing {
            median_ms: f64::INFINITY,
            rel_stddev: f64::INFINITY,
            samples: 0,
            held,
            rel_l2_error: worst,
            passed,
            samples_ms: Vec::new(),
            hold_timeouts: 0,
        });
    }
    let m = measure(gpu, timer, &cfg, &mut || batch.run(gpu, variant, count))?;
    let ms: Vec<f64> = m.samples_s.iter().map(|s| s * 1e3).collect();
    let summary = Summary::of(&ms).ok_or_else(|| Error::invalid("no valid samples"))?;
    Ok(Timing {
        median_ms: summary.median,
        rel_stddev: summary.rel_stddev,
        samples: summary.samples,
        held,
        rel_l2_error: worst,
        passed,
        samples_ms: ms,
        hold_timeouts: m.hold_timeouts,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLENTY: u64 = 1 << 40;

    #[test]
    fn the_default_grid_keeps_every_point_up_to_1024() {
        for size in SIZES.iter().filter(|&&s| s <= 1024) {
            for count in COUNTS {
                assert_eq!(skip_reason(*size, count, PLENTY, Some(PLENTY)), None);
            }
        }
    }

    #[test]
    fn large_sizes_stop_at_the_work_cap() {
        assert_eq!(skip_reason(2048, 128, PLENTY, None), None);
        assert_eq!(skip_reason(4096, 16, PLENTY, None), None);
        let why = skip_reason(4096, 32, PLENTY, None).unwrap();
        assert_eq!(why, "4.4 TFLOP per run, over the sweep's 2.2");
    }

    #[test]
    fn memory_limits_say_which_memory() {
        // 1024 products of 1024^2: 12 GiB of A, B and C.
        let why = skip_reason(1024, 1024, 8 << 30, None).unwrap();
        assert!(
            why.starts_with("needs 12.03 GiB of device memory, 8.00 GiB free"),
            "{why}"
        );
        let why = skip_reason(1024, 1024, PLENTY, Some(4 << 30)).unwrap();
        assert!(why.contains("of host memory"), "{why}");
        assert_eq!(skip_reason(1024, 1024, PLENTY, None), None);
    }
}
