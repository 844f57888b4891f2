//! `--sweep pinned`: one host-to-device copy of 32 KiB to 64 MiB, from pageable memory (the
//! group's baseline) or from page-locked memory, two ways:
//!
//! - **eager**: the host waits for each copy, as the naive training loop does. A pageable copy
//!   goes through the driver's bounce buffer, the host copying into it; a pinned one is one DMA.
//!   Small copies are latency-bound either way (the chapter's 32 KiB microbatch among them);
//!   large ones run at the DMA's rate pinned and at the host's copy rate pageable.
//! - **overlapped**: the copy is queued on a second stream, then a compute kernel (the double
//!   buffering part's map, `--iterations` FMAs per element, over as many elements as the copy
//!   moves) on the lesson's stream, as a loader feeds the next batch while this one computes.
//!   A pinned copy returns at once and runs beside the kernel; a pageable one holds the host
//!   until it is done, so the kernel starts only after it.
//!
//! Every run copies the same host bytes (small ones stay in the CPU's caches, as a batch just
//! prepared would). Checks: the copied bytes against the host's, exactly; the kernel's output
//! against the map's float64 closed form.

use std::sync::Arc;

use cudarc::driver::{CudaEvent, CudaFunction, CudaSlice, CudaStream};
use serde_json::json;

use common::bench::BenchConfig;
use common::counters::Work;
use common::error::CudaContext as _;
use common::gpu::Gpu;
use common::kernels;
use common::pinned::Pinned;
use common::report::{Section, VariantReport};
use common::runner::{Lesson, Meter, Output, Reference, VariantSpec};
use common::verify::{check_by, uniform_f32, Precision};
use common::Result;

use super::{points, size_label, sweep_bench, Kind, Planned, Summary};
use crate::pipeline::engine::{queue_affine, reference_value, KERNELS, TOLERANCE};

/// Copy sizes (bytes): 32 KiB (the chapter's microbatch of 32 samples) to 64 MiB, doubling.
pub const SIZES: [usize; 12] = [
    32 << 10,
    64 << 10,
    128 << 10,
    256 << 10,
    512 << 10,
    1 << 20,
    2 << 20,
    4 << 20,
    8 << 20,
    16 << 20,
    32 << 20,
    64 << 20,
];

/// The two sides of every point: the first is the group's baseline.
pub const SIDES: [&str; 2] = ["pageable", "pinned"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Eager,
    Overlapped,
}

impl Mode {
    pub const ALL: [Mode; 2] = [Mode::Eager, Mode::Overlapped];

    pub fn name(self) -> &'static str {
        match self {
            Mode::Eager => "eager",
            Mode::Overlapped => "overlapped",
        }
    }
}

/// The sweep's points: every mode at every size (sorted, each once), the mode's points together.
pub fn plan(sizes: &[usize]) -> Vec<(Mode, usize)> {
    let mut sizes = sizes.to_vec();
    sizes.sort_unstable();
    sizes.dedup();
    Mode::ALL
        .iter()
        .flat_map(|&m| sizes.iter().map(move |&s| (m, s)))
        .collect()
}

/// "eager 32 KiB": the group of a point.
pub fn group(mode: Mode, bytes: usize) -> String {
    format!("{} {}", mode.name(), size_label(bytes as u64))
}

pub struct CopySweep {
    points: Vec<(Mode, usize)>,
    iterations: u32,
    pageable: Vec<f32>,
    pinned: Pinned<f32>,
    /// Where the copies land.
    target: CudaSlice<f32>,
    /// What the overlapped compute maps, and its values before the checked run.
    work: CudaSlice<f32>,
    work_init: Vec<f32>,
    kernel: CudaFunction,
    sm_count: u32,
    copy_stream: Arc<CudaStream>,
    fork: CudaEvent,
    join: CudaEvent,
}

impl CopySweep {
    /// Host data (pageable and page-locked, the same values) and device buffers for the largest
    /// size; the compute's map with `iterations` FMAs per element.
    pub fn new(gpu: &Gpu, sizes: &[usize], iterations: u32, seed: u64) -> Result<CopySweep> {
        let points = plan(sizes);
        let largest = points.iter().map(|p| p.1).max().unwrap_or(4) / 4;
        gpu.check_fits("the copy sweep's buffers", 8 * largest as u64)?;
        let pageable = uniform_f32(seed, largest, -1.0, 1.0);
        let mut pinned = Pinned::<f32>::new(gpu, largest, "the page-locked copy source")?;
        pinned.as_mut_slice().copy_from_slice(&pageable);
        let work_init = uniform_f32(seed.wrapping_add(1), largest, -1.0, 1.0);
        let event = || gpu.ctx.new_event(None).cuda("creating an event");
        Ok(CopySweep {
            points,
            iterations,
            pageable,
            pinned,
            target: gpu.alloc::<f32>(largest, "the copy target")?,
            work: gpu.upload(&work_init, "the compute's buffer")?,
            work_init,
            kernel: kernels::load(gpu, KERNELS, &[])?.function("affine_iterate")?,
            sm_count: gpu.info.sm_count,
            copy_stream: gpu.ctx.new_stream().cuda("creating the copy stream")?,
            fork: event()?,
            join: event()?,
        })
    }

    fn locate(&self, index: usize) -> (Mode, usize, bool) {
        let (mode, bytes) = self.points[index / SIDES.len()];
        (mode, bytes, index % SIDES.len() == 1)
    }

    /// Copy the first `len` floats of the host data to the target on `stream`.
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

    pub fn plan(&self) -> Vec<Planned> {
        self.points
            .iter()
            .map(|&(mode, bytes)| Planned {
                group: group(mode, bytes),
                series: mode.name().into(),
                x: bytes as u64,
            })
            .collect()
    }
}

impl Lesson for CopySweep {
    fn name(&self) -> &str {
        "ch1-basics-sweep-pinned"
    }

    fn parameters(&self) -> serde_json::Value {
        let sizes: Vec<usize> = self
            .points
            .iter()
            .filter(|p| p.0 == Mode::Eager)
            .map(|p| p.1)
            .collect();
        json!({
            "sizes_bytes": sizes,
            "modes": Mode::ALL.map(Mode::name),
            "iterations": self.iterations,
            "stop_rule": sweep_bench(BenchConfig::default()).stop,
            "checks": "copied bytes against the host's, exactly; the overlapped compute against the float64 closed form",
        })
    }

    fn variants(&self) -> Vec<VariantSpec> {
        self.points
            .iter()
            .flat_map(|&(mode, bytes)| {
                let flops = match mode {
                    Mode::Eager => 0,
                    Mode::Overlapped => 2 * self.iterations as u64 * (bytes / 4) as u64,
                };
                let work = Work {
                    bytes_read: bytes as u64,
                    bytes_written: 0,
                    flops,
                };
                let what = match mode {
                    Mode::Eager => "the host waits for the copy",
                    Mode::Overlapped => "copy on a second stream beside a compute kernel",
                };
                SIDES.map(|side| {
                    VariantSpec::new(
                        side,
                        format!("{} host-to-device copy, {what}", size_label(bytes as u64)),
                        Precision::Fp32,
                        work,
                    )
                    .host_device()
                    .in_group(group(mode, bytes))
                })
            })
            .collect()
    }

    /// Each side's checks are made in [Lesson::output].
    fn reference(&self, _index: usize) -> Option<&Reference> {
        None
    }

    fn poison(&mut self, gpu: &Gpu, _index: usize) -> Result<()> {
        gpu.poison(&mut self.target)?;
        gpu.stream
            .memcpy_htod(&self.work_init, &mut self.work)
            .cuda("resetting the compute's buffer")
    }

    fn run(&mut self, gpu: &Gpu, index: usize) -> Result<()> {
        let (mode, bytes, pinned) = self.locate(index);
        let len = bytes / 4;
        if mode == Mode::Eager {
            self.copy(&gpu.stream, len, pinned)?;
            return gpu.sync();
        }
        // The copy stream starts after what the lesson's stream holds (the timer's start).
        self.fork.record(&gpu.stream).cuda("recording the fork")?;
        self.copy_stream
            .wait(&self.fork)
            .cuda("forking the copy stream")?;
        let copies = self.copy_stream.clone();
        self.copy(&copies, len, pinned)?;
        queue_affine(
            &self.kernel,
            self.sm_count,
            &gpu.stream,
            &mut self.work,
            len,
            self.iterations,
        )?;
        self.join
            .record(&self.copy_stream)
            .cuda("recording the join")?;
        gpu.stream.wait(&self.join).cuda("joining the copy stream")
    }

    fn output(&mut self, gpu: &Gpu, index: usize) -> Result<Output> {
        let (mode, bytes, _) = self.locate(index);
        let len = bytes / 4;
        let copied = gpu.download(&self.target)?;
        let source = &self.pageable;
        let mut checks = vec![
            check_by(&copied[..len], |i| source[i] as f64, 0.0, "the host data").named("copy"),
        ];
        if mode == Mode::Overlapped {
            let mapped = gpu.download(&self.work)?;
            let (init, iterations) = (&self.work_init, self.iterations);
            checks.push(
                check_by(
                    &mapped[..len],
                    |i| reference_value(init[i], iterations),
                    TOLERANCE,
                    "the float64 closed form",
                )
                .named("compute"),
            );
        }
        Ok(Output::checked(checks))
    }

    fn bench_config(&self, _index: usize, cfg: BenchConfig) -> BenchConfig {
        sweep_bench(cfg)
    }

    fn sections(
        &mut self,
        _gpu: &Gpu,
        variants: &[VariantReport],
        _meter: &mut Meter,
    ) -> Result<Vec<Section>> {
        Ok(vec![section(&self.plan(), variants, self.iterations)])
    }
}

/// The sweep's section from the variant reports: each point with the pinned side's copy rate.
pub fn section(plan: &[Planned], variants: &[VariantReport], iterations: u32) -> Section {
    let mut pts = points(plan, variants, (SIDES[0], SIDES[1]));
    for p in &mut pts {
        for (name, side) in [("pageable GB/s", &p.baseline), ("pinned GB/s", &p.changed)] {
            if let Some(s) = side.as_ref().filter(|s| s.passed && p.series == "eager") {
                p.figures
                    .push((name.into(), p.x as f64 / (s.median_ms / 1e3) / 1e9));
            }
        }
    }
    Summary::new(Kind::Pinned, (SIDES[0], SIDES[1]), pts).section(
        "pinned vs pageable host-to-device copies, by size",
        vec![
            "eager: the host waits for each copy; GB/s are the copy's bytes over its median time, the wait included".into(),
            format!("overlapped: the copy on a second stream, queued before a compute kernel of {iterations} FMAs per element over as many elements on the lesson's stream"),
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mode_at_every_size_pageable_first() {
        let p = plan(&[1 << 20, 32 << 10, 1 << 20]);
        assert_eq!(
            p,
            vec![
                (Mode::Eager, 32 << 10),
                (Mode::Eager, 1 << 20),
                (Mode::Overlapped, 32 << 10),
                (Mode::Overlapped, 1 << 20)
            ]
        );
        assert_eq!(group(Mode::Overlapped, 64 << 20), "overlapped 64 MiB");
        assert_eq!(plan(&SIZES).len(), 24);
        assert_eq!(
            SIZES[0],
            32 * 256 * 4,
            "the chapter's microbatch of 32 samples"
        );
        assert_eq!(*SIZES.last().unwrap(), 64 << 20);
        assert!(SIZES.windows(2).all(|w| w[1] == 2 * w[0]));
        assert_eq!(SIDES[0], "pageable", "the baseline comes first");
    }
}
