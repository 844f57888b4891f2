//! Timing on the device: CUDA events on the lesson's stream around the work, after warmup,
//! many samples, stopped by a [StopRule]. Each sample's launches are queued behind a blocking
//! kernel and released together, so host launch latency never shows up inside a sample.
//!
//! Two modes, always named in the report:
//! - hot: L2 is not flushed; each sample times `batch` back-to-back runs (batch chosen in
//!   warmup so a sample lasts at least ~0.2 ms, far above event resolution) and records the
//!   time per run;
//! - cold: before each sample a kernel reads a buffer twice the L2 size, evicting the working set
//!   and leaving only clean lines (a memset would leave L2 full of dirty lines whose write-back
//!   the timed run would pay for), then one run is timed.
//!
//! Runs that are not held (the host's own work is timed too) are measured with the measuring
//! thread kept on one CPU core, near the GPU where NVML says which cores are ([crate::affinity]);
//! the measurement records which core, or none where the OS did not allow it.
//!
//! For profilers: warmup and the timed samples are NVTX ranges ("warmup", "timed") inside
//! whatever range the caller has open (the runner opens `lesson:variant`), and the timed loop
//! sits between cuProfilerStart and cuProfilerStop, so `nsys --capture-range=cudaProfilerApi`
//! records only timed regions. With a [crate::trace] session open, the timed loop is a trace
//! region and its kernel summary goes into [Measurement::trace].

use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::sys::{self, CUevent_flags};
use cudarc::driver::{
    CudaEvent, CudaFunction, CudaSlice, LaunchConfig, PinnedHostSlice, PushKernelArg,
};
use serde::{Deserialize, Serialize};

use crate::affinity::Pin;
use crate::error::{CudaContext as _, Error, Result};
use crate::gpu::Gpu;
use crate::kernels::{self, HARNESS};
use crate::nvml::{clock_dropped, GpuState};
use crate::nvtx;
use crate::stop::{StopReason, StopRule};
use crate::trace::{self, TraceSummary};

/// How to measure; the same for every variant of a lesson.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BenchConfig {
    pub stop: StopRule,
    /// Flush L2 before each sample.
    pub cold: bool,
    pub warmup_runs: usize,
    pub warmup_time_s: f64,
    /// Hot mode: smallest time one sample should span.
    pub min_sample_s: f64,
    /// Hot mode: most runs queued in one sample.
    pub max_batch: usize,
    /// Queue each sample behind the blocking kernel. Lessons whose runs synchronize with the
    /// host (on purpose, as in a naive training loop) must turn this off, or they would wait
    /// on the blocking kernel until it times out.
    pub hold: bool,
}

impl Default for BenchConfig {
    fn default() -> Self {
        BenchConfig {
            stop: StopRule::default(),
            cold: false,
            warmup_runs: 3,
            warmup_time_s: 0.05,
            min_sample_s: 200e-6,
            max_batch: 256,
            hold: true,
        }
    }
}

/// The raw result of measuring one variant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Measurement {
    /// Seconds per run, one value per sample.
    pub samples_s: Vec<f64>,
    /// Runs per sample (1 in cold mode).
    pub batch: usize,
    pub cold: bool,
    /// Whether each sample's runs were queued behind the blocking kernel (not when the runs
    /// synchronize with the host, or the host's work is what is measured).
    pub held: bool,
    pub warmup_runs: usize,
    pub stop_reason: StopReason,
    /// Wall time spent in the timed loop.
    pub wall_s: f64,
    pub before: GpuState,
    pub after: GpuState,
    pub clock_dropped: bool,
    /// Samples whose blocking kernel gave up waiting (their launches may include gaps).
    pub hold_timeouts: usize,
    /// What the built-in trace saw in the timed region, when `--trace` was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<TraceSummary>,
    /// The CPU core the measuring thread was kept on (runs not held only, where the OS allows).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<usize>,
}

impl Measurement {
    pub fn mode_label(&self) -> String {
        let mode = match (self.cold, self.held) {
            (false, true) => "hot (L2 warm, runs queued back-to-back behind a blocking kernel)",
            (false, false) => {
                "hot (L2 warm, runs issued as the host goes: no blocking kernel, the host's own work is timed too)"
            }
            (true, true) => {
                "cold (L2 flushed by reading 2x its size before each sample, each run queued behind a blocking kernel)"
            }
            (true, false) => {
                "cold (L2 flushed by reading 2x its size before each sample, runs issued as the host goes)"
            }
        };
        match (self.held, self.cpu) {
            (true, _) => mode.to_string(),
            (false, Some(cpu)) => format!("{mode}, measuring thread kept on CPU {cpu}"),
            (false, None) => {
                format!("{mode}, measuring thread not kept on one core")
            }
        }
    }
}

/// The device-side machinery of the timer, made once per GPU.
pub struct Timer {
    gpu_stream: Arc<cudarc::driver::CudaStream>,
    start: CudaEvent,
    end: CudaEvent,
    hold: CudaFunction,
    _release: PinnedHostSlice<i32>,
    release_ptr: *mut i32,
    release_dev: u64,
    timed_out: CudaSlice<i32>,
    flush_kernel: CudaFunction,
    flush: Option<(CudaSlice<u8>, CudaSlice<f32>)>,
    flush_bytes: usize,
    sm_count: u32,
}

/// How long the blocking kernel waits before giving up (GPU time).
const HOLD_TIMEOUT_NS: u64 = 2_000_000_000;

impl Timer {
    pub fn new(gpu: &Gpu) -> Result<Timer> {
        let module = kernels::load(gpu, HARNESS, &[])?;
        let hold = module.function("hold_stream")?;
        let flush_kernel = module.function("flush_l2_by_reading")?;
        let timing = Some(CUevent_flags::CU_EVENT_DEFAULT);
        let start = gpu.ctx.new_event(timing).cuda("creating a timing event")?;
        let end = gpu.ctx.new_event(timing).cuda("creating a timing event")?;
        // SAFETY: one i32, written below before any use.
        let mut release = unsafe {
            gpu.ctx.alloc_pinned_with_flags::<i32>(
                1,
                sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE,
            )
        }
        .cuda("allocating the mapped release flag")?;
        let release_ptr = release.as_mut_ptr().cuda("mapping the release flag")?;
        let mut release_dev: sys::CUdeviceptr = 0;
        // SAFETY: the pointer comes from a DEVICEMAP host allocation that outlives the Timer.
        unsafe { sys::cuMemHostGetDevicePointer_v2(&mut release_dev, release_ptr.cast(), 0) }
            .result()
            .cuda("mapping the release flag")?;
        let timed_out = gpu.alloc_zeros::<i32>(1, "the hold timeout flag")?;
        Ok(Timer {
            gpu_stream: gpu.stream.clone(),
            start,
            end,
            hold,
            _release: release,
            release_ptr,
            release_dev,
            timed_out,
            flush_kernel,
            flush: None,
            flush_bytes: ((2 * gpu.info.l2_bytes as usize).max(8 << 20)).next_multiple_of(16),
            sm_count: gpu.info.sm_count,
        })
    }

    fn hold(&mut self) -> Result<()> {
        // SAFETY: the flag is only read by the hold kernel, which is not running now.
        unsafe { std::ptr::write_volatile(self.release_ptr, 0) };
        let cfg = LaunchConfig {
            grid_dim: (1, 1, 1),
            block_dim: (1, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = self.gpu_stream.launch_builder(&self.hold);
        b.arg(&self.release_dev);
        b.arg(&mut self.timed_out);
        b.arg(&HOLD_TIMEOUT_NS);
        // SAFETY: arguments match hold_stream's signature.
        unsafe { b.launch(cfg) }.cuda("launching hold_stream")?;
        Ok(())
    }

    fn release(&self) {
        // SAFETY: a plain store the spinning kernel reads through a volatile pointer.
        unsafe { std::ptr::write_volatile(self.release_ptr, 1) };
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    }

    fn flush_l2(&mut self) -> Result<()> {
        if self.flush.is_none() {
            let buf = self
                .gpu_stream
                .alloc_zeros::<u8>(self.flush_bytes)
                .cuda("allocating the L2 flush buffer")?;
            let sink = self
                .gpu_stream
                .alloc_zeros::<f32>(1)
                .cuda("allocating the L2 flush sink")?;
            self.flush = Some((buf, sink));
        }
        let (buf, sink) = self.flush.as_mut().expect("allocated above");
        let n4 = (self.flush_bytes / 16) as u64;
        let cfg = LaunchConfig {
            grid_dim: (self.sm_count * 4, 1, 1),
            block_dim: (512, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = self.gpu_stream.launch_builder(&self.flush_kernel);
        b.arg(&*buf);
        b.arg(&n4);
        b.arg(sink);
        // SAFETY: flush_l2_by_reading(const float4*, u64, float*) over n4 vectors of the buffer.
        unsafe { b.launch(cfg) }.cuda("launching flush_l2_by_reading")?;
        Ok(())
    }

    /// Time `runs` runs of `launch` as one sample; returns seconds for the whole sample.
    pub fn sample(
        &mut self,
        runs: usize,
        cold: bool,
        hold: bool,
        launch: &mut dyn FnMut() -> Result<()>,
    ) -> Result<(f64, bool)> {
        if hold {
            self.hold()?;
        }
        if cold {
            self.flush_l2()?;
        }
        let queued = (|| {
            self.start
                .record(&self.gpu_stream)
                .cuda("recording the start event")?;
            for _ in 0..runs {
                launch()?;
            }
            self.end
                .record(&self.gpu_stream)
                .cuda("recording the end event")
        })();
        // Release even when queuing failed, so the stream drains.
        self.release();
        queued?;
        let ms = self
            .start
            .elapsed_ms(&self.end)
            .cuda("reading the sample time")?;
        let timed_out = self
            .gpu_stream
            .clone_dtoh(&self.timed_out)
            .cuda("reading the hold flag")?[0]
            != 0;
        if timed_out {
            self.gpu_stream
                .memset_zeros(&mut self.timed_out)
                .cuda("resetting the hold flag")?;
        }
        Ok((ms as f64 / 1e3, timed_out))
    }
}

/// CUDA events at the phase boundaries of a repeated loop on one stream (a training step's
/// data, forward, backward, optimizer): one event before the first step, then one at the end of
/// each phase of each step. Phase 0 of a step runs from the end of the previous step's last
/// phase, so the phases of a step add up to the step exactly.
pub struct PhaseTimer {
    events: Vec<CudaEvent>,
    phases: usize,
}

impl PhaseTimer {
    pub fn new(gpu: &Gpu, steps: usize, phases: usize) -> Result<PhaseTimer> {
        assert!(phases >= 1, "a step has at least one phase");
        let timing = Some(CUevent_flags::CU_EVENT_DEFAULT);
        let events = (0..1 + steps * phases)
            .map(|_| gpu.ctx.new_event(timing).cuda("creating a timing event"))
            .collect::<Result<Vec<_>>>()?;
        Ok(PhaseTimer { events, phases })
    }

    pub fn steps(&self) -> usize {
        (self.events.len() - 1) / self.phases
    }

    /// Record the start, before step 0's first phase.
    pub fn start(&self, stream: &Arc<cudarc::driver::CudaStream>) -> Result<()> {
        self.events[0]
            .record(stream)
            .cuda("recording the start event")
    }

    /// Record the end of `phase` of `step`.
    pub fn end_of(
        &self,
        step: usize,
        phase: usize,
        stream: &Arc<cudarc::driver::CudaStream>,
    ) -> Result<()> {
        assert!(phase < self.phases && step < self.steps());
        self.events[1 + step * self.phases + phase]
            .record(stream)
            .cuda("recording a phase event")
    }

    /// Milliseconds of every phase of steps `from..` (their work must have completed):
    /// `result[phase][step - from]`.
    pub fn phase_ms(&self, from: usize) -> Result<Vec<Vec<f64>>> {
        let mut out = vec![Vec::new(); self.phases];
        for step in from..self.steps() {
            for (phase, times) in out.iter_mut().enumerate() {
                let end = 1 + step * self.phases + phase;
                let ms = self.events[end - 1]
                    .elapsed_ms(&self.events[end])
                    .cuda("reading a phase time")?;
                times.push(ms as f64);
            }
        }
        Ok(out)
    }
}

/// Warm up, pick the batch, then take samples until the stop rule says enough.
pub fn measure(
    gpu: &Gpu,
    timer: &mut Timer,
    cfg: &BenchConfig,
    launch: &mut dyn FnMut() -> Result<()>,
) -> Result<Measurement> {
    cfg.stop.validate().map_err(Error::invalid)?;
    // The host paces runs that are not held: keep it on one core for warmup and samples.
    let pin = if cfg.hold {
        None
    } else {
        let near = gpu
            .nvml
            .as_ref()
            .map(|n| n.cpus_near(&gpu.info.uuid))
            .unwrap_or_default();
        Pin::current_thread(&near)
    };
    // The region's name in traces: the caller's innermost range (the runner's lesson:variant).
    let label = nvtx::current_range().unwrap_or_else(|| "measure".into());
    // Warmup: module load, first-touch and clock ramp stay out of the numbers.
    let warmup_range = nvtx::range("warmup");
    let warm_start = Instant::now();
    let mut warmup_runs = 0;
    let mut single_s = f64::INFINITY;
    while warmup_runs < cfg.warmup_runs || warm_start.elapsed().as_secs_f64() < cfg.warmup_time_s {
        let (t, _) = timer.sample(1, cfg.cold, cfg.hold, launch)?;
        single_s = single_s.min(t);
        warmup_runs += 1;
        if warm_start.elapsed().as_secs_f64() > cfg.stop.max_time_s {
            break;
        }
    }
    drop(warmup_range);
    let batch = if cfg.cold {
        1
    } else {
        batch_for(single_s, cfg.min_sample_s, cfg.max_batch)
    };

    let before = state(gpu);
    let timed_range = nvtx::range("timed");
    let region = trace::region_begin();
    let profiler = ProfilerRange::start(gpu);
    let start = Instant::now();
    let mut samples = Vec::new();
    // The stop rule sees whole samples: its minimum GPU time counts every run of a batch (the
    // per-run times would undercount it `batch` times over); the noise is the same either way.
    let mut sample_times = Vec::new();
    let mut hold_timeouts = 0;
    let stop_reason = loop {
        let (t, timed_out) = timer.sample(batch, cfg.cold, cfg.hold, launch)?;
        hold_timeouts += timed_out as usize;
        samples.push(t / batch as f64);
        sample_times.push(t);
        if let Some(reason) = cfg.stop.check(&sample_times, start.elapsed().as_secs_f64()) {
            break reason;
        }
    };
    let wall_s = start.elapsed().as_secs_f64();
    drop(profiler);
    let trace = match region {
        Some(r) => Some(trace::region_end(
            r,
            &label,
            (samples.len() * batch) as u64,
        )?),
        None => None,
    };
    drop(timed_range);
    let cpu = pin.as_ref().map(|p| p.cpu);
    drop(pin);
    let after = state(gpu);
    Ok(Measurement {
        clock_dropped: clock_dropped(before.sm_clock_mhz, after.sm_clock_mhz, 0.05),
        samples_s: samples,
        batch,
        cold: cfg.cold,
        held: cfg.hold,
        warmup_runs,
        stop_reason,
        wall_s,
        before,
        after,
        hold_timeouts,
        trace,
        cpu,
    })
}

/// Text every program that times through this harness carries in its executable, so that a
/// profiler wrapper can tell, before running it, that it brackets its timed samples with
/// cuProfilerStart/Stop (a program that never calls them would give nsys nothing to record
/// under `--capture-range=cudaProfilerApi`).
pub const TIMED_REGIONS_MARKER: &str =
    "perf-lessons: timed samples between cuProfilerStart and cuProfilerStop";

/// cuProfilerStart now, cuProfilerStop when dropped: the timed loop is what
/// `nsys --capture-range=cudaProfilerApi` records. Without a profiler both are no-ops; their
/// results are ignored because profiling control must never fail a measurement.
struct ProfilerRange;

impl ProfilerRange {
    fn start(gpu: &Gpu) -> ProfilerRange {
        // Keeps the marker's bytes in every executable that can reach this call.
        std::hint::black_box(TIMED_REGIONS_MARKER);
        if gpu.ctx.bind_to_thread().is_ok() {
            // SAFETY: plain driver call on the current context.
            let _ = unsafe { sys::cuProfilerStart() };
        }
        ProfilerRange
    }
}

impl Drop for ProfilerRange {
    fn drop(&mut self) {
        // SAFETY: plain driver call.
        let _ = unsafe { sys::cuProfilerStop() };
    }
}

/// Runs per hot sample so that one sample spans at least `min_sample_s`.
pub fn batch_for(single_s: f64, min_sample_s: f64, max_batch: usize) -> usize {
    if single_s.is_nan() || single_s <= 0.0 || single_s.is_infinite() {
        return 1;
    }
    ((min_sample_s / single_s).ceil() as usize).clamp(1, max_batch.max(1))
}

fn state(gpu: &Gpu) -> GpuState {
    gpu.nvml
        .as_ref()
        .map(|n| n.state(&gpu.info.uuid))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_spans_the_minimum_sample_time() {
        assert_eq!(
            batch_for(1e-3, 200e-6, 256),
            1,
            "a long run needs no batching"
        );
        assert_eq!(batch_for(10e-6, 200e-6, 256), 20);
        assert_eq!(batch_for(1e-7, 200e-6, 256), 256, "capped");
        assert_eq!(batch_for(0.0, 200e-6, 256), 1);
        assert_eq!(batch_for(f64::INFINITY, 200e-6, 256), 1);
    }

    fn measurement(held: bool, cpu: Option<usize>) -> Measurement {
        Measurement {
            samples_s: vec![1e-3],
            batch: 1,
            cold: false,
            held,
            warmup_runs: 1,
            stop_reason: StopReason::Converged,
            wall_s: 1e-3,
            before: GpuState::default(),
            after: GpuState::default(),
            clock_dropped: false,
            hold_timeouts: 0,
            trace: None,
            cpu,
        }
    }

    #[test]
    fn the_mode_says_where_the_measuring_thread_ran() {
        let held = measurement(true, None).mode_label();
        assert!(held.contains("behind a blocking kernel"), "{held}");
        assert!(!held.contains("CPU"), "{held}");
        let pinned = measurement(false, Some(7)).mode_label();
        assert!(
            pinned.ends_with("measuring thread kept on CPU 7"),
            "{pinned}"
        );
        let free = measurement(false, None).mode_label();
        assert!(free.ends_with("not kept on one core"), "{free}");
        // Read back from a report written before the field existed: not pinned.
        let mut json = serde_json::to_value(measurement(false, Some(3))).unwrap();
        json.as_object_mut().unwrap().remove("cpu");
        let old: Measurement = serde_json::from_value(json).unwrap();
        assert_eq!(old.cpu, None);
    }
}
