//! `--sweep`: where does batching stop mattering? Square products of sizes 16..4096 in counts
//! 8..1024, each point a group of two variants run by the one runner: one call per product (the
//! group's baseline) and one strided-batched call. Per size, the inputs are made once for the
//! largest count measured and every count uses a prefix of them; each side's products 0 and
//! count-1 are checked against the float64 reference before it is timed. Points over a per-run
//! work cap or the memory at hand are skipped up front, and a wall-time cap keeps the whole
//! sweep short: points past it are reported as skipped too.

use std::collections::HashMap;
use std::time::Instant;

use serde_json::json;

use common::bench::BenchConfig;
use common::gpu::Gpu;
use common::report::{Metric, Section, Status, VariantReport};
use common::runner::{Lesson, Meter, Output, Reference, VariantSpec};
use common::stop::StopRule;
use common::verify::{check, Precision};
use common::Result;
use plotting::format::human_bytes;

use crate::batch::GemmBatch;
use crate::problem::{inputs, reference, tolerance, work, MemoryPlan, Shape};
use crate::table::{crossover, sections, Point, Timing, MATTERS_ABOVE};
use crate::{can_hold, per_product, Variant};

/// Sizes past 1024: on an H200 a single 1024^3 product still leaves SMs idle, so the grid goes
/// on until one product fills the GPU.
pub const SIZES: [usize; 9] = [16, 32, 64, 128, 256, 512, 1024, 2048, 4096];
pub const COUNTS: [usize; 8] = [8, 16, 32, 64, 128, 256, 512, 1024];

/// The two sides of every point, in order: the first is the group's baseline.
pub const SIDES: [Variant; 2] = [Variant::Baseline, Variant::Strided];

/// Most FLOPs one run of a point may cost (2^41, 2.2 TFLOP: 1024 products of 1024^3, 128 of
/// 2048^3, 16 of 4096^3; about 40 ms at fp32): larger points are skipped, so the sweep's time
/// goes to covering the grid rather than to a few huge points.
pub const MAX_RUN_FLOPS: u64 = 1 << 41;

/// What the wall-time cap says of the points it skips.
pub const TIME_CAP: &str = "time cap";

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
        stop: StopRule::sweep(),
        cold,
        hold: can_hold(calls),
        max_batch: (crate::MAX_HELD_CALLS / calls.max(1)).max(1),
        warmup_runs: 2,
        warmup_time_s: 0.01,
        ..BenchConfig::default()
    }
}

/// "64^3 x 16": the group of a point's two sides.
pub fn point_group(size: usize, count: usize) -> String {
    format!("{size}^3 x {count}")
}

/// The inputs and batch of one size, for the largest count measured at it, and the float64
/// products checked so far (each computed once).
struct SizeBatch {
    size: usize,
    a: Vec<f32>,
    b: Vec<f32>,
    batch: GemmBatch,
    references: HashMap<usize, Vec<f64>>,
}

impl SizeBatch {
    fn product_reference(&mut self, i: usize) -> &[f64] {
        let (shape, a, b) = (*self.batch.shape(), &self.a, &self.b);
        self.references
            .entry(i)
            .or_insert_with(|| reference(&shape, a, b, i, 1))
    }
}

pub struct GemmSweep {
    sizes: Vec<usize>,
    counts: Vec<usize>,
    precision: Precision,
    seed: u64,
    time_cap_s: f64,
    start: Instant,
    /// Per point: why it is skipped regardless of time (work cap, memory).
    limits: Vec<Option<String>>,
    /// Per point, once asked: whether it runs, or why not. Both sides follow the first answer,
    /// so the time cap never leaves a point half measured.
    decided: Vec<Option<Option<String>>>,
    current: Option<SizeBatch>,
}

impl GemmSweep {
    /// The grid `sizes` x `counts` (each sorted, without repeats). Points over the work cap or
    /// the memory free now are marked skipped here, before anything is allocated; the time cap
    /// counts from here.
    pub fn new(
        gpu: &Gpu,
        sizes: &[usize],
        counts: &[usize],
        precision: Precision,
        seed: u64,
        time_cap_s: f64,
    ) -> Result<GemmSweep> {
        let (free, _) = gpu.memory()?;
        let host = common::gpu::host_available_bytes();
        GemmSweep::planned(sizes, counts, precision, seed, time_cap_s, (free, host))
    }

    /// [GemmSweep::new] for `free` device bytes and `host` bytes available (where the system
    /// says): the plan alone, nothing touches a GPU until a variant runs.
    pub fn planned(
        sizes: &[usize],
        counts: &[usize],
        precision: Precision,
        seed: u64,
        time_cap_s: f64,
        (free, host): (u64, Option<u64>),
    ) -> Result<GemmSweep> {
        crate::batch::math_mode(precision)?;
        let start = Instant::now();
        let mut sizes = sizes.to_vec();
        let mut counts = counts.to_vec();
        for v in [&mut sizes, &mut counts] {
            v.sort_unstable();
            v.dedup();
        }
        let limits: Vec<Option<String>> = sizes
            .iter()
            .flat_map(|&s| counts.iter().map(move |&c| (s, c)))
            .map(|(s, c)| skip_reason(s, c, free, host))
            .collect();
        Ok(GemmSweep {
            decided: vec![None; limits.len()],
            sizes,
            counts,
            precision,
            seed,
            time_cap_s,
            start,
            limits,
            current: None,
        })
    }

    /// (point, side) of variant `index`.
    fn locate(&self, index: usize) -> (usize, Variant) {
        (index / SIDES.len(), SIDES[index % SIDES.len()])
    }

    /// (size, count) of point `point`.
    fn point(&self, point: usize) -> (usize, usize) {
        (
            self.sizes[point / self.counts.len()],
            self.counts[point % self.counts.len()],
        )
    }

    /// The largest count measured at `size`: the batch the inputs are made for.
    fn capacity(&self, size: usize) -> Option<usize> {
        let row = self.sizes.iter().position(|&s| s == size)?;
        let limits = &self.limits[row * self.counts.len()..][..self.counts.len()];
        self.counts
            .iter()
            .zip(limits)
            .filter(|(_, limit)| limit.is_none())
            .map(|(&c, _)| c)
            .max()
    }

    /// The batch of `size`, made (after freeing the previous size's) when first needed.
    fn batch_for(&mut self, gpu: &Gpu, size: usize) -> Result<&mut SizeBatch> {
        if self.current.as_ref().is_none_or(|c| c.size != size) {
            self.current = None;
            let capacity = self
                .capacity(size)
                .ok_or_else(|| common::Error::invalid(format!("no point of size {size} runs")))?;
            let shape = Shape::square(size, capacity);
            let (a, b) = inputs(&shape, self.seed);
            let batch = GemmBatch::new(gpu, shape, &a, &b, self.precision)?;
            self.current = Some(SizeBatch {
                size,
                a,
                b,
                batch,
                references: HashMap::new(),
            });
        }
        Ok(self.current.as_mut().expect("made above"))
    }

    /// The batch of variant `index`'s size, which its poison made.
    fn prepared(&mut self, index: usize) -> Result<&mut SizeBatch> {
        let (size, _) = self.point(self.locate(index).0);
        self.current
            .as_mut()
            .filter(|c| c.size == size)
            .ok_or_else(|| common::Error::invalid(format!("size {size} was not set up")))
    }

    /// The point of every group that ran or was skipped, from the runner's variant reports;
    /// `bench` is the run's measuring settings (whether a side was held follows from them).
    pub fn points(&self, variants: &[VariantReport], bench: BenchConfig) -> Vec<Point> {
        (0..self.limits.len())
            .filter_map(|point| {
                let (size, count) = self.point(point);
                let group = point_group(size, count);
                let side = |s: usize| {
                    let v = variants
                        .iter()
                        .find(|v| v.group == group && v.name == SIDES[s].name())?;
                    let held = self.bench_config(point * SIDES.len() + s, bench).hold;
                    Some((v, timing(v, held)))
                };
                let (one_by_one, strided) = (side(0), side(1));
                let (first, _) = one_by_one.as_ref().or(strided.as_ref())?;
                if first.status == Status::Skipped {
                    let why = first.note.clone().unwrap_or_default();
                    return Some(Point::skipped(size, count, why));
                }
                Some(Point {
                    size,
                    count,
                    one_by_one: one_by_one.and_then(|(_, t)| t),
                    strided: strided.and_then(|(_, t)| t),
                    skipped: None,
                })
            })
            .collect()
    }

    /// The grids, the crossover and the skipped points of a sweep that took `wall_s`.
    pub fn sections_of(&self, points: &[Point], wall_s: f64) -> Vec<Section> {
        let crossover = crossover(points, MATTERS_ABOVE);
        let mut out = sections(points, &crossover);
        out[0].lines.insert(
            0,
            format!(
                "{}, square products, time cap {} s, whole sweep {wall_s:.1} s; products 0 and count-1 of every side checked against float64",
                self.precision.label(),
                self.time_cap_s
            ),
        );
        if let Some(data) = out[0].data.as_object_mut() {
            data.insert("wall_s".into(), json!(wall_s));
        }
        out
    }
}

/// One side's timing from its variant report: None when it did not run.
fn timing(v: &VariantReport, held: bool) -> Option<Timing> {
    if v.status == Status::Skipped {
        return None;
    }
    Some(Timing {
        median_ms: v.time_ms.as_ref().map_or(f64::INFINITY, |t| t.median),
        rel_stddev: v.time_ms.as_ref().map_or(f64::INFINITY, |t| t.rel_stddev),
        held,
        rel_l2_error: v.worst_error(),
        passed: v.status == Status::Ok,
    })
}

impl Lesson for GemmSweep {
    fn name(&self) -> &str {
        "ch1-gemm-sweep"
    }

    fn parameters(&self) -> serde_json::Value {
        json!({
            "sizes": self.sizes, "counts": self.counts, "seed": self.seed,
            "precision": self.precision.label(),
            "time_cap_s": self.time_cap_s,
            "stop_rule": sweep_bench(false, 1).stop,
            "max_held_calls": crate::MAX_HELD_CALLS,
            "max_run_flops": MAX_RUN_FLOPS,
            "speedup_that_matters": MATTERS_ABOVE,
            "checked_products": "0 and count-1 of every side, relative L2 against float64",
            "tolerance_rel_l2": self
                .sizes
                .iter()
                .map(|&s| tolerance(self.precision, s))
                .collect::<Vec<_>>(),
        })
    }

    fn variants(&self) -> Vec<VariantSpec> {
        (0..self.limits.len())
            .flat_map(|point| {
                let (size, count) = self.point(point);
                SIDES.map(|side| {
                    VariantSpec::new(
                        side.name(),
                        side.description(),
                        self.precision,
                        work(&Shape::square(size, count), false),
                    )
                    .in_group(point_group(size, count))
                    .with_tolerance(tolerance(self.precision, size))
                })
            })
            .collect()
    }

    /// Each side's checks are made in [Lesson::output], against the products it checks.
    fn reference(&self, _index: usize) -> Option<&Reference> {
        None
    }

    fn skip(&mut self, index: usize) -> Option<String> {
        let (point, _) = self.locate(index);
        if self.decided[point].is_none() {
            let why = self.limits[point].clone().or_else(|| {
                (self.start.elapsed().as_secs_f64() > self.time_cap_s).then(|| TIME_CAP.into())
            });
            self.decided[point] = Some(why);
        }
        self.decided[point].clone().flatten()
    }

    fn poison(&mut self, gpu: &Gpu, index: usize) -> Result<()> {
        let (size, _) = self.point(self.locate(index).0);
        self.batch_for(gpu, size)?.batch.poison(gpu)
    }

    fn run(&mut self, gpu: &Gpu, index: usize) -> Result<()> {
        let (point, side) = self.locate(index);
        let (_, count) = self.point(point);
        self.prepared(index)?.batch.run(gpu, side, count)
    }

    /// Products 0 and count-1 against float64: the first and last a run writes.
    fn output(&mut self, gpu: &Gpu, index: usize) -> Result<Output> {
        let (point, _) = self.locate(index);
        let (size, count) = self.point(point);
        let tol = tolerance(self.precision, size);
        let current = self.prepared(index)?;
        let mut checks = Vec::new();
        for (part, i) in [("first product", 0), ("last product", count - 1)] {
            let got = current.batch.product(gpu, i)?;
            let want = current.product_reference(i);
            checks.push(check(&got, want, tol, "float64 CPU reference").named(part));
        }
        Ok(Output::checked(checks))
    }

    fn bench_config(&self, index: usize, cfg: BenchConfig) -> BenchConfig {
        let (point, side) = self.locate(index);
        let (_, count) = self.point(point);
        let calls = if side == Variant::Baseline { count } else { 1 };
        let sweep = sweep_bench(cfg.cold, calls);
        BenchConfig {
            hold: cfg.hold && sweep.hold,
            ..sweep
        }
    }

    fn metrics(
        &mut self,
        _gpu: &Gpu,
        index: usize,
        timed: &VariantReport,
        _meter: &mut Meter,
    ) -> Result<Vec<Metric>> {
        let (_, count) = self.point(self.locate(index).0);
        Ok(per_product(timed, count))
    }

    fn sections(
        &mut self,
        _gpu: &Gpu,
        variants: &[VariantReport],
        meter: &mut Meter,
    ) -> Result<Vec<Section>> {
        self.current = None;
        let points = self.points(variants, meter.bench);
        Ok(self.sections_of(&points, self.start.elapsed().as_secs_f64()))
    }
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

    fn plan(time_cap_s: f64) -> GemmSweep {
        // Listed out of order and with a repeat: the grid is sorted, each point once.
        let grid = (&[4096, 16, 16][..], &[32, 8][..]);
        GemmSweep::planned(
            grid.0,
            grid.1,
            Precision::Fp32,
            1,
            time_cap_s,
            (PLENTY, None),
        )
        .unwrap()
    }

    /// A side as the runner reports it: checked, and timed at `ms` unless it failed.
    fn side(spec: &VariantSpec, ms: f64, passed: bool) -> VariantReport {
        let got = if passed { 1.0f32 } else { f32::NAN };
        let checks = vec![check(&[got], &[1.0], spec.tolerance, "ref").named("first product")];
        let mut v = VariantReport::checked(
            &spec.name,
            &spec.description,
            spec.precision,
            checks,
            spec.work,
        );
        v.group = spec.group.clone();
        if passed {
            v.time_ms = common::stats::Summary::of(&[ms, ms]);
        }
        v
    }

    #[test]
    fn every_point_is_a_group_with_the_loop_as_its_baseline() {
        let sweep = plan(60.0);
        let ids: Vec<String> = sweep.variants().iter().map(VariantSpec::id).collect();
        assert_eq!(
            ids,
            [
                "16^3 x 8:baseline",
                "16^3 x 8:strided",
                "16^3 x 32:baseline",
                "16^3 x 32:strided",
                "4096^3 x 8:baseline",
                "4096^3 x 8:strided",
                "4096^3 x 32:baseline",
                "4096^3 x 32:strided",
            ]
        );
        let specs = sweep.variants();
        assert_eq!(common::runner::baseline_of(&specs, 3), 2);
        assert_eq!(specs[3].work.flops, 32 * 2 * 16 * 16 * 16);
        assert_eq!(specs[3].work, work(&Shape::square(16, 32), false));
        // The loop of 32 calls is held (32 runs per sample at most); one call is held too.
        let cfg = BenchConfig::default();
        let (loop_side, strided) = (sweep.bench_config(2, cfg), sweep.bench_config(3, cfg));
        assert!(loop_side.hold && strided.hold);
        assert_eq!((loop_side.max_batch, strided.max_batch), (8, 256));
        assert_eq!(loop_side.stop, sweep_bench(false, 1).stop);
        // The run's cold flag carries through; a run that holds nothing holds no side.
        let cold = BenchConfig {
            cold: true,
            hold: false,
            ..cfg
        };
        assert!(sweep.bench_config(0, cold).cold && !sweep.bench_config(0, cold).hold);
    }

    #[test]
    fn skips_are_decided_per_point_and_said() {
        let mut sweep = plan(60.0);
        assert_eq!(sweep.skip(0), None);
        assert_eq!(sweep.skip(1), None);
        assert_eq!(sweep.skip(4), None, "4096^3 x 8 is under the work cap");
        let why = sweep.skip(6).unwrap();
        assert!(why.contains("TFLOP per run, over the sweep's"), "{why}");
        assert_eq!(sweep.skip(7), Some(why));
        assert_eq!(sweep.capacity(16), Some(32));
        assert_eq!(sweep.capacity(4096), Some(8));
        // Past the time cap, every point not yet begun is skipped, both of its sides.
        let mut capped = plan(0.0);
        std::thread::sleep(std::time::Duration::from_millis(2));
        assert_eq!(capped.skip(0).as_deref(), Some(TIME_CAP));
        assert_eq!(capped.skip(1).as_deref(), Some(TIME_CAP));
    }

    #[test]
    fn a_side_begun_before_the_time_cap_finishes_its_point() {
        let mut sweep = plan(0.05);
        assert_eq!(sweep.skip(0), None);
        std::thread::sleep(std::time::Duration::from_millis(60));
        assert_eq!(
            sweep.skip(1),
            None,
            "the strided side of a begun point runs"
        );
        assert_eq!(sweep.skip(2).as_deref(), Some(TIME_CAP));
    }

    #[test]
    fn points_are_built_from_the_variant_reports() {
        let mut sweep = plan(60.0);
        let specs = sweep.variants();
        let mut reports = vec![
            side(&specs[0], 0.040, true),
            side(&specs[1], 0.004, true),
            side(&specs[2], 0.160, true),
            side(&specs[3], 0.002, false),
            side(&specs[4], 8.0, true),
            side(&specs[5], 7.9, true),
        ];
        for i in [6, 7] {
            let mut skipped = side(&specs[i], 0.0, true);
            skipped.status = Status::Skipped;
            skipped.time_ms = None;
            skipped.note = sweep.skip(i);
            reports.push(skipped);
        }
        let points = sweep.points(&reports, BenchConfig::default());
        assert_eq!(points.len(), 4);
        assert_eq!((points[0].size, points[0].count), (16, 8));
        assert!((points[0].speedup().unwrap() - 10.0).abs() < 1e-9);
        assert!((points[0].strided.as_ref().unwrap().per_product_us(8) - 0.5).abs() < 1e-9);
        assert!(points[1].failed(), "a side that did not verify");
        assert_eq!(points[1].speedup(), None);
        assert_eq!(points[1].strided.as_ref().unwrap().median_ms, f64::INFINITY);
        assert!(points[2].one_by_one.as_ref().unwrap().held);
        let why = points[3].skipped.as_deref().unwrap();
        assert!(why.contains("TFLOP per run"), "{why}");
        // The grids, the crossover and the skipped point are the report's sections.
        let sections = sweep.sections_of(&points, 1.5);
        let md: String = sections.iter().map(Section::markdown).collect();
        assert!(md.contains("| 16 | 10.0x | FAILED |"), "{md}");
        assert!(md.contains("skipped 1 point(s): 4096x32: "), "{md}");
        assert!(md.contains("whole sweep 1.5 s"), "{md}");
        assert_eq!(sections[0].data["wall_s"], 1.5);
    }

    #[test]
    fn only_calls_that_fit_the_launch_queue_are_held() {
        let one_by_one = sweep_bench(false, 300);
        assert!(!one_by_one.hold);
        assert_eq!(one_by_one.max_batch, 1);
        let strided = sweep_bench(true, 1);
        assert!(strided.hold && strided.cold);
        assert_eq!(strided.max_batch, crate::MAX_HELD_CALLS);
        assert_eq!(sweep_bench(false, 8).max_batch, 32);
        assert_eq!(point_group(64, 16), "64^3 x 16");
    }
}
