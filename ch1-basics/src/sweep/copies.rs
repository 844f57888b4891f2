//! `--sweep pinned`: one host-to-device copy from pageable memory (the baseline) or page-locked
//! memory. **eager**: the host waits for it, as the naive loop does (pageable goes through the
//! driver's bounce buffer, pinned is one DMA). **overlapped**: queued on a second stream before
//! the double-buffering map over as many elements on the lesson's stream, as a loader feeds the
//! next batch; a pinned copy returns at once, a pageable one holds the host until it is done,
//! so the kernel starts only after it. Every run copies the same host bytes (small ones stay in
//! the CPU's caches, as a batch just prepared would).

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream};
use serde_json::json;

use common::bench::BenchConfig;
use common::counters::Work;
use common::error::CudaContext as _;
use common::gpu::Gpu;
use common::pinned::Pinned;
use common::report::{Section, VariantReport};
use common::runner::{Output, VariantSpec};
use common::sweep::{Axis, Plan, Point, Summary, Sweep};
use common::verify::{check_by, uniform_f32, Precision};
use common::Result;

use super::{geometric, sweep_bench, BAR};
use crate::pipeline::engine::Affine;
use crate::training::engine::Overlap;

/// Copy sizes (bytes): 32 KiB (the chapter's microbatch of 32 samples) to 64 MiB, doubling.
pub const SIZES: [u64; 12] = geometric(32 << 10, 2);

pub const MODES: [&str; 2] = ["eager", "overlapped"];
const EAGER: u64 = 0;

/// Every mode at every size, a mode's points together; pageable first.
pub fn plan(sizes: &[u64]) -> Plan {
    let axes = vec![Axis::names("mode", &MODES), Axis::bytes("bytes", sizes)];
    Plan::product(axes, "bytes", ["pageable", "pinned"], BAR)
}

pub struct CopySweep {
    plan: Plan,
    pageable: Vec<f32>,
    pinned: Pinned<f32>,
    target: CudaSlice<f32>,
    /// What the overlapped compute maps, and its values before the checked run.
    work: CudaSlice<f32>,
    work_init: Vec<f32>,
    affine: Affine,
    overlap: Overlap,
}

impl CopySweep {
    pub fn new(gpu: &Gpu, sizes: &[u64], iterations: u32, seed: u64) -> Result<CopySweep> {
        let plan = plan(sizes);
        let largest = sizes.iter().copied().max().unwrap_or(4) as usize / 4;
        gpu.check_fits("the copy sweep's buffers", 8 * largest as u64)?;
        let pageable = uniform_f32(seed, largest, -1.0, 1.0);
        let pinned = Pinned::from_slice(gpu, &pageable, "the page-locked copy source")?;
        let work_init = uniform_f32(seed.wrapping_add(1), largest, -1.0, 1.0);
        Ok(CopySweep {
            plan,
            pageable,
            pinned,
            target: gpu.alloc::<f32>(largest, "the copy target")?,
            work: gpu.upload(&work_init, "the compute's buffer")?,
            work_init,
            affine: Affine::new(gpu, iterations)?,
            overlap: Overlap::new(gpu)?,
        })
    }

    /// (eager, floats copied).
    fn locate(&self, point: usize) -> (bool, usize) {
        let eager = self.plan.value(point, "mode") == EAGER;
        (eager, self.plan.x(point) as usize / 4)
    }

    fn copy(&mut self, stream: &Arc<CudaStream>, len: usize, pinned: bool) -> Result<()> {
        let mut dst = self.target.slice_mut(..len);
        if pinned {
            self.pinned.copy_to_device(0..len, &mut dst, stream)
        } else {
            stream
                .memcpy_htod(&self.pageable[..len], &mut dst)
                .cuda("copying from pageable memory")
        }
    }
}

impl Sweep for CopySweep {
    fn name(&self) -> &str {
        "ch1-basics-sweep-pinned"
    }

    fn plan(&self) -> &Plan {
        &self.plan
    }

    fn group(&self, point: usize) -> String {
        let bytes = self.plan.axes[1].label(self.plan.x(point));
        format!("{} {bytes}", self.plan.series(point))
    }

    fn parameters(&self) -> serde_json::Value {
        json!({
            "iterations": self.affine.iterations,
            "stop_rule": sweep_bench(BenchConfig::default()).stop,
            "checks": "copied bytes against the host's, exactly; the overlapped compute against the float64 closed form",
        })
    }

    fn spec(&self, point: usize, _pinned: bool) -> VariantSpec {
        let (eager, len) = self.locate(point);
        let (what, fmas) = if eager {
            ("the host waits for the copy", 0)
        } else {
            let what = "copy on a second stream beside a compute kernel";
            (what, self.affine.iterations as u64)
        };
        let (bytes_read, flops) = (4 * len as u64, 2 * fmas * len as u64);
        let work = Work {
            bytes_read,
            bytes_written: 0,
            flops,
        };
        let bytes = self.plan.axes[1].label(self.plan.x(point));
        let description = format!("{bytes} host-to-device copy, {what}");
        VariantSpec::new("", description, Precision::Fp32, work).host_device()
    }

    fn poison(&mut self, gpu: &Gpu, _point: usize) -> Result<()> {
        gpu.poison(&mut self.target)?;
        gpu.stream
            .memcpy_htod(&self.work_init, &mut self.work)
            .cuda("resetting the compute's buffer")
    }

    fn run(&mut self, gpu: &Gpu, point: usize, pinned: bool) -> Result<()> {
        let (eager, len) = self.locate(point);
        if eager {
            self.copy(&gpu.stream, len, pinned)?;
            return gpu.sync();
        }
        // Forked after the timer's start on the lesson's stream, joined before its end.
        let copies = self.overlap.fork(gpu)?.clone();
        self.copy(&copies, len, pinned)?;
        self.affine.queue(&gpu.stream, &mut self.work, len)?;
        self.overlap.join(gpu)
    }

    fn output(&mut self, gpu: &Gpu, point: usize, _pinned: bool) -> Result<Output> {
        let (eager, len) = self.locate(point);
        let copied = gpu.download(&self.target)?;
        let source = &self.pageable;
        let mut checks = vec![
            check_by(&copied[..len], |i| source[i] as f64, 0.0, "the host data").named("copy"),
        ];
        if !eager {
            let mapped = gpu.download(&self.work)?;
            let compute = self.affine.check(&mapped[..len], &self.work_init);
            checks.push(compute.named("compute"));
        }
        Ok(Output::checked(checks))
    }

    fn bench_config(&self, _point: usize, _pinned: bool, cfg: BenchConfig) -> BenchConfig {
        sweep_bench(cfg)
    }

    /// Eager points: each side's copy rate, the wait included.
    fn figures(&self, _: usize, p: &Point, _: Option<&VariantReport>) -> Vec<(String, f64)> {
        [("pageable GB/s", &p.baseline), ("pinned GB/s", &p.changed)]
            .into_iter()
            .filter_map(|(name, side)| {
                let s = side.as_ref().filter(|s| s.passed && p.series == MODES[0])?;
                Some((name.into(), p.x as f64 / (s.median_ms / 1e3) / 1e9))
            })
            .collect()
    }

    fn sections(&mut self, summary: Summary, _bench: BenchConfig) -> Vec<Section> {
        vec![summary.section(
            "pinned vs pageable host-to-device copies, by size",
            vec![
                "eager: the host waits for each copy; GB/s are the copy's bytes over its median time, the wait included".into(),
                format!("overlapped: the copy on a second stream, queued before a compute kernel of {} FMAs per element over as many elements on the lesson's stream", self.affine.iterations),
            ],
        )]
    }
}
