//! `--sweep`: where does batching stop mattering? Square products of sizes 16..4096 in counts
//! 8..1024, each point a group of two variants run by the one runner: one call per product (the
//! group's baseline) and one strided-batched call. Per size, the inputs are made once for the
//! largest count measured and every count uses a prefix of them; each side's products 0 and
//! count-1 are checked against the float64 reference before it is timed. Points over a per-run
//! work cap or the memory at hand are skipped up front, and a wall-time cap keeps the whole
//! sweep short: points past it are reported as skipped too.

use std::collections::HashMap;
use std::time::Instant;

use plotting::format::human_bytes;
use serde_json::json;

use common::bench::BenchConfig;
use common::gpu::Gpu;
use common::report::{Metric, Section, VariantReport};
use common::runner::{Output, VariantSpec};
use common::stop::StopRule;
use common::sweep::{Axis, Plan, Point, Side, Summary, Sweep};
use common::table::{three_figures, Table, EMPTY};
use common::verify::{check, Precision};
use common::Result;

use crate::batch::GemmBatch;
use crate::problem::{tolerance, work, MemoryPlan, Shape};
use crate::{can_hold, per_product, Variant};

/// Sizes past 1024: on an H200 a single 1024^3 product still leaves SMs idle, so the grid goes
/// on until one product fills the GPU.
pub const SIZES: [usize; 9] = [16, 32, 64, 128, 256, 512, 1024, 2048, 4096];
pub const COUNTS: [usize; 8] = [8, 16, 32, 64, 128, 256, 512, 1024];

/// Batching matters at a point when the strided call's speedup has its 95% interval above
/// this.
pub const BAR: f64 = 1.1;

/// Most FLOPs one run of a point may cost (2^41, 2.2 TFLOP: 1024 products of 1024^3, 128 of
/// 2048^3, 16 of 4096^3; about 40 ms at fp32): larger points are skipped, so the sweep's time
/// goes to covering the grid rather than to a few huge points.
pub const MAX_RUN_FLOPS: u64 = 1 << 41;

/// What the wall-time cap says of the points it skips.
pub const TIME_CAP: &str = "time cap";

/// The two sides of every point: one call per product (the group's baseline) and one
/// strided-batched call.
const SIDES: [Variant; 2] = [Variant::Baseline, Variant::Strided];

/// Why a point of `count` products of `size`^3 is not measured, decided before any time is
/// spent on it: too much work per run, or more memory than the device has `free` (a quarter
/// is left for the harness and cuBLAS) or the host has `host` (half is left).
pub fn skip_reason(size: usize, count: usize, free: u64, host: Option<u64>) -> Option<String> {
    let shape = Shape::square(size, count);
    let Ok(plan) = MemoryPlan::of(&shape) else {
        return Some("more bytes than 64 bits count".into());
    };
    let flops = shape.flops_per_product().saturating_mul(count as u64);
    let host_inputs = 4 * (shape.a_len() + shape.b_len()) as u64 * count as u64;
    if flops > MAX_RUN_FLOPS {
        let tflop = |f: u64| f as f64 / 1e12;
        Some(format!(
            "{:.1} TFLOP per run, over the sweep's {:.1}",
            tflop(flops),
            tflop(MAX_RUN_FLOPS)
        ))
    } else if plan.device_bytes > free / 4 * 3 {
        let (needed, free) = (human_bytes(plan.device_bytes), human_bytes(free));
        Some(format!("needs {needed} of device memory, {free} free"))
    } else {
        host.filter(|&h| host_inputs > h / 2).map(|available| {
            let (needed, available) = (human_bytes(host_inputs), human_bytes(available));
            format!("needs {needed} of host memory for its inputs, {available} available")
        })
    }
}

/// Per side of a point in a run measured by `run`'s settings: a few samples suffice to place it
/// in a table of ratios. A side of `calls` cuBLAS calls per run is held behind the blocking
/// kernel only when the run holds and its runs fit the launch queue, and a held sample queues at
/// most [crate::MAX_HELD_CALLS] calls.
pub fn sweep_bench(run: BenchConfig, calls: usize) -> BenchConfig {
    BenchConfig {
        stop: StopRule::sweep(),
        cold: run.cold,
        hold: run.hold && can_hold(calls),
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

/// The batch of one size, for the largest count measured at it, and the float64 products
/// checked so far (each computed once).
struct SizeBatch {
    batch: GemmBatch,
    references: HashMap<usize, Vec<f64>>,
}

impl SizeBatch {
    fn product_reference(&mut self, i: usize) -> &[f64] {
        let batch = &self.batch;
        self.references
            .entry(i)
            .or_insert_with(|| batch.reference(i, 1))
    }
}

pub struct GemmSweep {
    plan: Plan,
    precision: Precision,
    seed: u64,
    time_cap_s: f64,
    start: Instant,
    /// Per point, once decided: whether it runs, or why not. The work cap and the memory decide
    /// up front, the time cap when the point's first side is asked; both sides follow the first
    /// answer, so the time cap never leaves a point half measured.
    skips: Vec<Option<Option<String>>>,
    current: Option<SizeBatch>,
}

/// Every count at every size, a size's points together; one call per product first.
pub fn plan(sizes: &[usize], counts: &[usize]) -> Plan {
    let values = |v: &[usize]| v.iter().map(|&x| x as u64).collect::<Vec<_>>();
    let axes = vec![
        Axis::counts("size", &values(sizes)),
        Axis::counts("count", &values(counts)).labelled(|c| format!("{c} products")),
    ];
    Plan::product(axes, "size", SIDES.map(Variant::name), BAR)
}

/// Device memory free on `gpu` now, and host memory available where the system says: what
/// [GemmSweep::new] plans by.
pub fn memory_at_hand(gpu: &Gpu) -> Result<(u64, Option<u64>)> {
    Ok((gpu.memory()?.0, common::gpu::host_available_bytes()))
}

impl GemmSweep {
    /// The grid `sizes` x `counts` (each sorted, without repeats), for `free` device bytes and
    /// `host` bytes available ([memory_at_hand]). Points over the work cap or that memory are
    /// marked skipped here, before anything is allocated (nothing touches a GPU until a variant
    /// runs); the time cap counts from here.
    pub fn new(
        sizes: &[usize],
        counts: &[usize],
        precision: Precision,
        seed: u64,
        time_cap_s: f64,
        (free, host): (u64, Option<u64>),
    ) -> Result<GemmSweep> {
        crate::batch::math_mode(precision)?;
        let plan = plan(sizes, counts);
        let skip = |p: &Vec<u64>| skip_reason(p[0] as usize, p[1] as usize, free, host);
        Ok(GemmSweep {
            skips: plan.points.iter().map(|p| skip(p).map(Some)).collect(),
            plan,
            precision,
            seed,
            time_cap_s,
            start: Instant::now(),
            current: None,
        })
    }

    /// (size, count) of point `point`.
    fn point(&self, point: usize) -> (usize, usize) {
        let p = &self.plan.points[point];
        (p[0] as usize, p[1] as usize)
    }

    /// The largest count measured at `size`: the batch the inputs are made for.
    fn capacity(&self, size: usize) -> Option<usize> {
        (0..self.skips.len())
            .filter(|&i| !matches!(self.skips[i], Some(Some(_))) && self.point(i).0 == size)
            .map(|i| self.point(i).1)
            .max()
    }

    /// The batch of point `point`'s size, made (after freeing the previous size's) when first
    /// needed.
    fn batch_for(&mut self, gpu: &Gpu, point: usize) -> Result<&mut SizeBatch> {
        let (size, _) = self.point(point);
        if self
            .current
            .as_ref()
            .is_none_or(|c| c.batch.shape().m != size)
        {
            self.current = None;
            let capacity = self
                .capacity(size)
                .ok_or_else(|| common::Error::invalid(format!("no point of size {size} runs")))?;
            let shape = Shape::square(size, capacity);
            let batch = GemmBatch::new(gpu, shape, self.seed, self.precision)?;
            let references = HashMap::new();
            self.current = Some(SizeBatch { batch, references });
        }
        Ok(self.current.as_mut().expect("made above"))
    }

    /// The grids, the crossover and the skipped points of a sweep that took `wall_s`; `bench`
    /// is the run's measuring settings (whether a side was held follows from them).
    pub fn sections_of(&self, summary: &Summary, bench: BenchConfig, wall_s: f64) -> Vec<Section> {
        let pts = &summary.points;
        let held = |i: usize| self.bench_config(i, false, bench).hold;
        let per_product = |i: usize, side: &Option<Side>| {
            let s = side.as_ref().filter(|s| s.passed)?;
            Some(three_figures(s.median_ms * 1e3 / self.point(i).1 as f64))
        };
        let mut speedup = Section::new(SPEEDUP_TITLE);
        speedup.table = Some(self.grid(pts, |_, p| {
            p.speedup().map(|r| format!("{}x", three_figures(r.value)))
        }));
        let (precision, cap) = (self.precision.label(), self.time_cap_s);
        speedup.lines.push(format!(
            "{precision}, square products, time cap {cap} s, whole sweep {wall_s:.1} s; products 0 and count-1 of every side checked against float64"
        ));
        for size in self.plan.values_of("size") {
            let at: Vec<(usize, f64)> = (0..pts.len())
                .filter(|&i| pts[i].x == size)
                .filter_map(|i| Some((self.point(i).1, pts[i].speedup()?.value)))
                .collect();
            let Some(&(best, max)) = at.iter().max_by(|a, b| a.1.total_cmp(&b.1)) else {
                continue;
            };
            let min = at.iter().map(|a| a.1).fold(f64::INFINITY, f64::min);
            let (min, max) = (three_figures(min), three_figures(max));
            speedup.lines.push(format!(
                "size {size}: strided is {min}x..{max}x faster (best at {best} products)"
            ));
        }
        speedup.lines.push(summary.rule_line());
        speedup.lines.push(match summary.across_lines().stops_from {
            Some(size) => format!(
                "batching stops mattering from size {size}: at no count does the speedup's 95% interval lie above {BAR}x from there on"
            ),
            None => format!(
                "batching still pays (95% interval above {BAR}x) at some count at the largest size measured"
            ),
        });
        let skipped: Vec<String> = (0..pts.len())
            .filter_map(|i| Some((self.point(i), pts[i].skipped.as_ref()?)))
            .map(|((size, count), why)| format!("{size}x{count}: {why}"))
            .collect();
        if !skipped.is_empty() {
            let (n, all) = (skipped.len(), skipped.join("; "));
            speedup.lines.push(format!("skipped {n} point(s): {all}"));
        }
        speedup.data = serde_json::to_value(summary).unwrap_or_default();
        speedup.data["wall_s"] = json!(wall_s);

        let mut one_by_one = Section::new(LOOP_TITLE);
        one_by_one.table = Some(self.grid(pts, |i, p| {
            let mark = if held(i) { "" } else { "*" };
            per_product(i, &p.baseline).map(|t| format!("{t}{mark}"))
        }));
        if (0..pts.len()).any(|i| pts[i].baseline.is_some() && !held(i)) {
            one_by_one.lines.push("* launched without the blocking kernel (too many calls to queue): includes the host's launch cost".into());
        }
        let mut strided = Section::new(STRIDED_TITLE);
        strided.table = Some(self.grid(pts, |i, p| per_product(i, &p.changed)));
        vec![speedup, one_by_one, strided]
    }

    /// One size-by-count table whose cells `cell` fills; "-" where a point is skipped or has
    /// nothing to show, "FAILED" where a side did not verify.
    fn grid(&self, pts: &[Point], cell: impl Fn(usize, &Point) -> Option<String>) -> Table {
        let mut table = Table::new().left("size \\ count");
        for c in self.plan.values_of("count") {
            table = table.right(c.to_string());
        }
        for size in self.plan.values_of("size") {
            let mut row = vec![size.to_string()];
            for i in (0..pts.len()).filter(|&i| pts[i].x == size) {
                row.push(match &pts[i] {
                    p if p.failed() => "FAILED".to_string(),
                    p => cell(i, p).unwrap_or_else(|| EMPTY.into()),
                });
            }
            table.row(row);
        }
        table
    }
}

/// Titles of the sweep's sections, in the order they are printed.
pub const SPEEDUP_TITLE: &str = "speedup of one strided-batched call over one call per product";
pub const LOOP_TITLE: &str = "one call per product: time per product (us)";
pub const STRIDED_TITLE: &str = "one strided-batched call: time per product (us)";

impl Sweep for GemmSweep {
    fn name(&self) -> &str {
        "ch1-gemm-sweep"
    }

    fn plan(&self) -> &Plan {
        &self.plan
    }

    fn group(&self, point: usize) -> String {
        let (size, count) = self.point(point);
        point_group(size, count)
    }

    fn parameters(&self) -> serde_json::Value {
        let tolerance_at = |size: &u64| tolerance(self.precision, *size as usize);
        let tolerances: Vec<f64> = self
            .plan
            .values_of("size")
            .iter()
            .map(tolerance_at)
            .collect();
        json!({
            "seed": self.seed,
            "precision": self.precision.label(),
            "time_cap_s": self.time_cap_s,
            "stop_rule": StopRule::sweep(),
            "max_held_calls": crate::MAX_HELD_CALLS,
            "max_run_flops": MAX_RUN_FLOPS,
            "checked_products": "0 and count-1 of every side, relative L2 against float64",
            "tolerance_rel_l2": tolerances,
        })
    }

    fn spec(&self, point: usize, strided: bool) -> VariantSpec {
        let (size, count) = self.point(point);
        let (side, work) = (
            SIDES[strided as usize],
            work(&Shape::square(size, count), false),
        );
        VariantSpec::new("", side.description(), self.precision, work)
            .with_tolerance(tolerance(self.precision, size))
    }

    fn skip(&mut self, point: usize) -> Option<String> {
        let over_time = self.start.elapsed().as_secs_f64() > self.time_cap_s;
        let decided = self.skips[point].get_or_insert_with(|| over_time.then(|| TIME_CAP.into()));
        decided.clone()
    }

    fn poison(&mut self, gpu: &Gpu, point: usize) -> Result<()> {
        self.batch_for(gpu, point)?.batch.poison(gpu)
    }

    fn run(&mut self, gpu: &Gpu, point: usize, strided: bool) -> Result<()> {
        let (_, count) = self.point(point);
        let side = SIDES[strided as usize];
        self.batch_for(gpu, point)?.batch.run(gpu, side, count)
    }

    /// Products 0 and count-1 against float64: the first and last a run writes.
    fn output(&mut self, gpu: &Gpu, point: usize, _strided: bool) -> Result<Output> {
        let (size, count) = self.point(point);
        let tol = tolerance(self.precision, size);
        let current = self.batch_for(gpu, point)?;
        let mut checks = Vec::new();
        for (part, i) in [("first product", 0), ("last product", count - 1)] {
            let got = current.batch.product(gpu, i)?;
            let want = current.product_reference(i);
            checks.push(check(&got, want, tol, "float64 CPU reference").named(part));
        }
        Ok(Output::checked(checks))
    }

    fn bench_config(&self, point: usize, strided: bool, cfg: BenchConfig) -> BenchConfig {
        let (_, count) = self.point(point);
        sweep_bench(cfg, if strided { 1 } else { count })
    }

    fn metrics(&mut self, point: usize, _: bool, timed: &VariantReport) -> Result<Vec<Metric>> {
        Ok(per_product(timed, self.point(point).1))
    }

    fn sections(&mut self, summary: Summary, bench: BenchConfig) -> Vec<Section> {
        self.current = None;
        self.sections_of(&summary, bench, self.start.elapsed().as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use common::report::Status;
    use common::runner::Lesson;
    use common::sweep::{summarize, SweepLesson};

    const PLENTY: u64 = 1 << 40;

    #[test]
    fn points_are_skipped_over_the_work_cap_or_the_memory_and_say_which() {
        let up_to_1024 = SIZES.iter().filter(|&&s| s <= 1024);
        for (size, count) in up_to_1024.flat_map(|&s| COUNTS.map(|c| (s, c))) {
            assert_eq!(skip_reason(size, count, PLENTY, Some(PLENTY)), None);
        }
        assert_eq!(skip_reason(2048, 128, PLENTY, None), None);
        assert_eq!(skip_reason(4096, 16, PLENTY, None), None);
        let why = skip_reason(4096, 32, PLENTY, None).unwrap();
        assert_eq!(why, "4.4 TFLOP per run, over the sweep's 2.2");
        // 1024 products of 1024^2: 12 GiB of A, B and C.
        let why = skip_reason(1024, 1024, 8 << 30, None).unwrap();
        assert!(
            why.starts_with("needs 12.03 GiB of device memory, 8 GiB free"),
            "{why}"
        );
        let why = skip_reason(1024, 1024, PLENTY, Some(4 << 30)).unwrap();
        assert!(why.contains("of host memory"), "{why}");
        assert_eq!(skip_reason(1024, 1024, PLENTY, None), None);
    }

    fn plan(time_cap_s: f64) -> SweepLesson<GemmSweep> {
        // Listed out of order and with a repeat: the grid is sorted, each point once.
        let (sizes, counts, fp32) = ([4096, 16, 16], [32, 8], Precision::Fp32);
        let memory = (PLENTY, None);
        SweepLesson(GemmSweep::new(&sizes, &counts, fp32, 1, time_cap_s, memory).unwrap())
    }

    /// A side as the runner reports it: checked, and timed at `ms` unless it failed.
    fn side(spec: &VariantSpec, ms: f64, passed: bool) -> VariantReport {
        let got = if passed { 1.0f32 } else { f32::NAN };
        let checks = vec![check(&[got], &[1.0], spec.tolerance, "ref").named("first product")];
        let (name, what) = (&spec.name, &spec.description);
        let mut v = VariantReport::checked(name, what, spec.precision, checks, spec.work);
        v.group = spec.group.clone();
        v.time_ms = common::stats::Summary::of(&[ms, ms]).filter(|_| passed);
        v
    }

    #[test]
    fn every_point_is_a_group_with_the_loop_as_its_baseline() {
        let sweep = plan(60.0);
        let ids: Vec<String> = sweep.variants().iter().map(VariantSpec::id).collect();
        // Every point's group, its loop (the baseline) first.
        let groups = ["16^3 x 8", "16^3 x 32", "4096^3 x 8", "4096^3 x 32"];
        let sides = |g: &&str| [format!("{g}:baseline"), format!("{g}:strided")];
        assert_eq!(ids, groups.iter().flat_map(sides).collect::<Vec<_>>());
        let specs = sweep.variants();
        assert_eq!(common::runner::baseline_of(&specs, 3), 2);
        assert_eq!(specs[3].work.flops, 32 * 2 * 16 * 16 * 16);
        assert_eq!(specs[3].work, work(&Shape::square(16, 32), false));
        // The loop of 32 calls is held (32 runs per sample at most); one call is held too.
        let cfg = BenchConfig::default();
        let (loop_side, strided) = (sweep.bench_config(2, cfg), sweep.bench_config(3, cfg));
        assert!(loop_side.hold && strided.hold);
        assert_eq!((loop_side.max_batch, strided.max_batch), (8, 256));
        assert_eq!(loop_side.stop, StopRule::sweep());
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
        assert_eq!(sweep.0.capacity(16), Some(32));
        assert_eq!(sweep.0.capacity(4096), Some(8));
    }

    #[test]
    fn past_the_time_cap_a_begun_point_finishes_and_the_others_are_skipped() {
        let mut sweep = plan(0.05);
        assert_eq!(sweep.skip(0), None);
        std::thread::sleep(std::time::Duration::from_millis(60));
        assert_eq!(sweep.skip(1), None, "the strided side of a begun point");
        for side in [2, 3] {
            assert_eq!(sweep.skip(side).as_deref(), Some(TIME_CAP));
        }
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
        let summary = summarize(&sweep.0, &reports);
        let points = &summary.points;
        assert_eq!(points.len(), 4);
        assert_eq!((points[0].x, points[0].series.as_str()), (16, "8 products"));
        assert!((points[0].speedup().unwrap().value - 10.0).abs() < 1e-9);
        assert!(points[1].failed(), "a side that did not verify");
        assert_eq!(points[1].speedup(), None);
        let why = points[3].skipped.as_deref().unwrap();
        assert!(why.contains("TFLOP per run"), "{why}");
        // The grids, the crossover and the skipped point are the report's sections.
        let sections = sweep.0.sections_of(&summary, BenchConfig::default(), 1.5);
        let md: String = sections.iter().map(Section::markdown).collect();
        let md = common::table::unpadded(&md);
        assert!(md.contains("| size \\ count | 8 | 32 |"), "{md}");
        assert!(md.contains("| 16 | 10.0x | FAILED |"), "{md}");
        assert!(md.contains("| 16 | 5.00 | FAILED |"), "{md}");
        assert!(md.contains("| 4096 | 1.01x | - |"), "{md}");
        assert!(md.contains("skipped 1 point(s): 4096x32: "), "{md}");
        assert!(md.contains("whole sweep 1.5 s"), "{md}");
        assert!(
            md.contains("batching stops mattering from size 4096"),
            "{md}"
        );
        assert_eq!(sections[0].data["wall_s"], 1.5);
        assert_eq!(Summary::from_section(&sections[0]).as_ref(), Some(&summary));
    }

    #[test]
    fn only_calls_that_fit_the_launch_queue_are_held() {
        let hot = BenchConfig::default();
        let one_by_one = sweep_bench(hot, 300);
        assert_eq!((one_by_one.hold, one_by_one.max_batch), (false, 1));
        // The run's cold flag carries through; a run that holds nothing holds no side.
        let strided = sweep_bench(BenchConfig { cold: true, ..hot }, 1);
        assert!(strided.hold && strided.cold);
        assert!(!sweep_bench(BenchConfig { hold: false, ..hot }, 1).hold);
        assert_eq!(strided.max_batch, crate::MAX_HELD_CALLS);
        assert_eq!(sweep_bench(hot, 8).max_batch, 32);
        assert!(can_hold(crate::MAX_HELD_CALLS) && !can_hold(crate::MAX_HELD_CALLS + 1));
        assert_eq!(point_group(64, 16), "64^3 x 16");
    }
}
