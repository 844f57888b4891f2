//! Running the double-buffering pair: measure the pinned copy ceilings, each stage alone, the
//! serial and the overlapped pass; verify both outputs; report the overlap achieved.

use serde::Serialize;

use common::bench::{BenchConfig, Timer};
use common::cli::CommonArgs;
use common::gpu::{DeviceInfo, Gpu};
use common::report::Provenance;
use common::stats::Summary;
use common::Result;

use crate::bandwidth::{pinned_copy_rates, CopyRate, CEILING_BYTES};
use crate::pipeline::{time_mode, Mode, Pipeline};

/// Relative L2 tolerance of the output against the float64 closed form: one rounding per
/// iteration, damped by |a| < 1, leaves ~1e-6.
pub const TOLERANCE: f64 = 1e-5;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Which {
    Serial,
    Overlapped,
    Both,
}

#[derive(Debug, Clone, Serialize)]
pub struct ModeResult {
    pub mode: &'static str,
    pub time_ms: Summary,
    pub rel_l2_error: f64,
    pub non_finite: usize,
    pub passed: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct PipelineReport {
    pub lesson: &'static str,
    pub part: &'static str,
    pub device: DeviceInfo,
    pub provenance: Provenance,
    pub elements: usize,
    pub bytes: usize,
    pub chunk_elements: usize,
    pub chunks: usize,
    pub buffers: usize,
    pub iterations: u32,
    pub tolerance: f64,
    pub copy_rates: Vec<CopyRate>,
    /// Best of several 256 MiB pinned host-to-device copies, GB/s.
    pub pinned_htod_ceiling_gb_per_s: f64,
    pub pinned_dtoh_ceiling_gb_per_s: f64,
    pub copy_in_alone_ms: Summary,
    pub compute_alone_ms: Summary,
    pub copy_out_alone_ms: Summary,
    pub slowest_stage: &'static str,
    pub slowest_stage_ms: f64,
    /// Copy-in stage alone, GB/s, and its fraction of the pinned host-to-device ceiling.
    pub copy_in_gb_per_s: f64,
    pub copy_in_fraction_of_ceiling: f64,
    pub copy_out_gb_per_s: f64,
    pub copy_out_fraction_of_ceiling: f64,
    pub modes: Vec<ModeResult>,
    /// Overlapped total / slowest stage alone (1.0 = perfect overlap).
    pub overlapped_over_slowest: Option<f64>,
    /// (sum of stages - overlapped) / (sum of stages - slowest): 1.0 = all the time that
    /// could be hidden was hidden.
    pub overlap_achieved: Option<f64>,
    pub speedup: Option<f64>,
    pub serial_and_overlapped_bitwise_equal: Option<bool>,
}

impl PipelineReport {
    pub fn all_passed(&self) -> bool {
        self.modes.iter().all(|m| m.passed)
            && self.serial_and_overlapped_bitwise_equal != Some(false)
    }

    pub fn markdown(&self) -> String {
        let mut out = format!(
            "## ch1-basics double buffering on {}\n\n{} fp32 ({} MiB) in {} chunks of {} ({} buffers), {} FMAs per element\n\n",
            self.device.name,
            self.elements,
            self.bytes >> 20,
            self.chunks,
            self.chunk_elements,
            self.buffers,
            self.iterations
        );
        out.push_str("| what | median | p10..p90 |\n|---|---:|---:|\n");
        let row = |name: &str, s: &Summary| {
            format!(
                "| {name} | {:.3} ms | {:.3}..{:.3} ms |\n",
                s.median, s.p10, s.p90
            )
        };
        out.push_str(&row("copy in alone", &self.copy_in_alone_ms));
        out.push_str(&row("compute alone", &self.compute_alone_ms));
        out.push_str(&row("copy out alone", &self.copy_out_alone_ms));
        for m in &self.modes {
            out.push_str(&row(
                &format!(
                    "{} ({}, error {:.1e})",
                    m.mode,
                    if m.passed { "ok" } else { "FAILED" },
                    m.rel_l2_error
                ),
                &m.time_ms,
            ));
        }
        out.push_str(&format!(
            "\nslowest stage: {} ({:.3} ms)\n",
            self.slowest_stage, self.slowest_stage_ms
        ));
        if let (Some(r), Some(o)) = (self.overlapped_over_slowest, self.overlap_achieved) {
            out.push_str(&format!(
                "overlapped / slowest stage: {r:.3}x; overlap achieved: {:.1}% of the hideable time\n",
                o * 100.0
            ));
        }
        if let Some(s) = self.speedup {
            out.push_str(&format!("speedup overlapped over serial: {s:.2}x\n"));
        }
        out.push_str(&format!(
            "pinned ceilings (best of 256 MiB copies): host-to-device {:.1} GB/s, device-to-host {:.1} GB/s\ncopy-in stage {:.1} GB/s = {:.1}% of the ceiling; copy-out stage {:.1} GB/s = {:.1}%\n",
            self.pinned_htod_ceiling_gb_per_s,
            self.pinned_dtoh_ceiling_gb_per_s,
            self.copy_in_gb_per_s,
            self.copy_in_fraction_of_ceiling * 100.0,
            self.copy_out_gb_per_s,
            self.copy_out_fraction_of_ceiling * 100.0
        ));
        out.push_str("\n| pinned copy | bytes | median GB/s | best GB/s |\n|---|---:|---:|---:|\n");
        for r in &self.copy_rates {
            out.push_str(&format!(
                "| {} | {} | {:.1} | {:.1} |\n",
                r.direction,
                common::error::human_bytes(r.bytes as u64),
                r.median_gb_per_s,
                r.best_gb_per_s
            ));
        }
        out
    }
}

/// Sizes of the copy sweep: a microbatch and a batch of the training lesson, a chunk, the ceiling.
pub fn sweep_sizes(chunk_bytes: usize) -> Vec<usize> {
    let mut sizes = vec![
        32 * 256 * 4,
        256 * 256 * 4,
        4 << 20,
        chunk_bytes,
        CEILING_BYTES,
    ];
    sizes.sort();
    sizes.dedup();
    sizes
}

/// One checked run of `mode` from a poisoned output: (relative L2 error, non-finite elements,
/// passed).
pub fn check_mode(gpu: &Gpu, p: &mut Pipeline, mode: Mode) -> Result<(f64, usize, bool)> {
    p.poison_output();
    p.queue(&gpu.stream, mode)?;
    gpu.sync()?;
    let (err, bad) = p.check_output();
    Ok((err, bad, bad == 0 && err <= TOLERANCE))
}

#[allow(clippy::too_many_arguments)]
pub fn run_pipeline(
    gpu: &Gpu,
    n: usize,
    chunk: usize,
    buffers: usize,
    iterations: u32,
    seed: u64,
    which: Which,
    args: &CommonArgs,
) -> Result<PipelineReport> {
    // Host memory first: the copy ceilings take seconds, an impossible size should not wait.
    common::gpu::check_host_fits("the pipeline's pinned input and output", 8 * n as u64)?;
    let mut timer = Timer::new(gpu)?;
    let provenance = Provenance::now();
    let rates = pinned_copy_rates(gpu, &mut timer, &sweep_sizes(4 * chunk.min(n)))?;
    let best = |dir: &str| {
        rates
            .iter()
            .filter(|r| r.direction == dir && r.bytes == CEILING_BYTES)
            .map(|r| r.best_gb_per_s)
            .fold(0.0, f64::max)
    };
    let (htod, dtoh) = (best("host-to-device"), best("device-to-host"));
    let mut p = Pipeline::new(gpu, n, chunk, buffers, iterations, seed)?;
    common::cli::mark("pipeline buffers ready");
    let bench: BenchConfig = args.bench_config();
    let copy_in = time_mode(gpu, &mut timer, &bench, &mut p, Mode::CopyInOnly)?;
    let compute = time_mode(gpu, &mut timer, &bench, &mut p, Mode::ComputeOnly)?;
    let copy_out = time_mode(gpu, &mut timer, &bench, &mut p, Mode::CopyOutOnly)?;
    let stages = [
        ("copy in", copy_in.median),
        ("compute", compute.median),
        ("copy out", copy_out.median),
    ];
    let (slowest_stage, slowest) =
        stages
            .iter()
            .cloned()
            .fold(("", 0.0), |a, s| if s.1 > a.1 { s } else { a });
    let modes: Vec<(Mode, &'static str)> = match which {
        Which::Serial => vec![(Mode::Serial, "serial")],
        Which::Overlapped => vec![(Mode::Overlapped, "overlapped")],
        Which::Both => vec![(Mode::Serial, "serial"), (Mode::Overlapped, "overlapped")],
    };
    let mut results = Vec::new();
    let mut serial_output: Option<Vec<f32>> = None;
    let mut bitwise = None;
    for (mode, name) in modes {
        let (err, bad, passed) = check_mode(gpu, &mut p, mode)?;
        if mode == Mode::Serial && which == Which::Both {
            serial_output = Some(p.output().to_vec());
        }
        if let (Mode::Overlapped, Some(s)) = (mode, &serial_output) {
            bitwise = Some(
                s.iter()
                    .zip(p.output())
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
            );
        }
        let time_ms = if passed {
            time_mode(gpu, &mut timer, &bench, &mut p, mode)?
        } else {
            Summary::of(&[f64::MAX]).expect("one value")
        };
        results.push(ModeResult {
            mode: name,
            time_ms,
            rel_l2_error: err,
            non_finite: bad,
            passed,
        });
    }
    let find = |name: &str| {
        results
            .iter()
            .find(|r| r.mode == name && r.passed)
            .map(|r| r.time_ms.median)
    };
    let (serial, overlapped) = (find("serial"), find("overlapped"));
    let sum: f64 = stages.iter().map(|s| s.1).sum();
    let bytes = 4 * n;
    let gbps = |ms: f64| bytes as f64 / (ms / 1e3) / 1e9;
    Ok(PipelineReport {
        lesson: "ch1-basics",
        part: "pipeline",
        device: gpu.info.clone(),
        provenance,
        elements: n,
        bytes,
        chunk_elements: p.chunk,
        chunks: p.plan().len(),
        buffers,
        iterations,
        tolerance: TOLERANCE,
        copy_rates: rates,
        pinned_htod_ceiling_gb_per_s: htod,
        pinned_dtoh_ceiling_gb_per_s: dtoh,
        copy_in_gb_per_s: gbps(copy_in.median),
        copy_in_fraction_of_ceiling: gbps(copy_in.median) / htod,
        copy_out_gb_per_s: gbps(copy_out.median),
        copy_out_fraction_of_ceiling: gbps(copy_out.median) / dtoh,
        copy_in_alone_ms: copy_in,
        compute_alone_ms: compute,
        copy_out_alone_ms: copy_out,
        slowest_stage,
        slowest_stage_ms: slowest,
        modes: results,
        overlapped_over_slowest: overlapped.map(|o| o / slowest),
        overlap_achieved: overlapped.map(|o| (sum - o) / (sum - slowest)),
        speedup: serial.zip(overlapped).map(|(s, o)| s / o),
        serial_and_overlapped_bitwise_equal: bitwise,
    })
}
