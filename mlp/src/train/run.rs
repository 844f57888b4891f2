//! One run: check the step, then train `warmup + steps` optimizer steps and report each.
//!
//! The loop double-buffers its input ([crate::train::feed]): once micro-batch m is queued (the
//! last one of a step with its update), the host takes batch m+1 from the loader and queues its
//! copy on a second stream into the other device slot. Each micro-batch's phases on the training
//! stream's timeline: data (from the end of what came before to its batch being on the device:
//! the GPU waiting for the host's batch and the copy), forward, backward; then the optimizer.
//! CUDA events at those boundaries make the phases add up to the step exactly.
//!
//! Each step starts where the one before ended, so the host's work between steps (taking the
//! next batch) is in the next step's data phase and the steps cover the loop. A step's line is
//! written once the next step is queued, so reading its events never leaves the GPU without
//! work.
//!
//! GPU busy: the step's work (every micro-batch's forward and backward, the update) queued
//! back to back behind a blocking kernel (no host gaps at all) gives the device time of a step,
//! measured once before the loop, since every step queues the same work; over a step's time,
//! that is the share of the step the GPU was working.
//!
//! Every buffer is allocated before the loop (device buffers before host ones), so a batch too
//! large for the GPU fails there, as an out-of-memory error.

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::bench::{PhaseTimer, Timer};
use common::error::{CudaContext as _, Error};
use common::gpu::Gpu;
use common::Result;
use plotting::format::human_bytes;

use crate::data::{initial_params, Init};
use crate::device::Input;
use crate::exec::Exec;
use crate::step::Mlp;
use crate::train::check::{check_gradient, GradientCheck};
use crate::train::feed::Feed;
use crate::train::gauge::MemoryGauge;
use crate::train::memory;
use crate::train::options::Options;
use crate::train::report::{step_line, DeviceRecord, EndRecord, Report, StepPhases, Totals};
use crate::train::sampler::Dataset;
use crate::train::trainer::{mean, Trainer};

/// GPU work before the step's device time is measured: clocks up, cuBLAS's choices made,
/// every kernel loaded.
const WARM_TIME: Duration = Duration::from_millis(100);
/// Samples of each piece of the step's device time (the median is kept).
const BUSY_SAMPLES: usize = 3;

/// What a run measured, for the closing lines.
#[derive(Debug, Clone)]
pub struct Summary {
    pub check: Option<GradientCheck>,
    /// Measured steps (after the warmup).
    pub steps: usize,
    pub samples_per_s: Option<f64>,
    pub peak_bytes: u64,
    /// Of the peak: what set-up took outside the memory pool.
    pub outside_pool_bytes: u64,
    /// The most bytes in live buffers at once (None without a memory pool).
    pub buffers_high: Option<u64>,
    pub estimated_bytes: u64,
    /// Device time of one step's work with no host gaps (seconds).
    pub compute_s: Option<f64>,
    pub gpu_busy: Option<f64>,
    pub first_loss: f64,
    pub last_loss: f64,
    /// Every step's time (warmup included) over the loop's wall time on the host: 1 when the
    /// phases cover the loop.
    pub steps_cover: f64,
}

impl Summary {
    /// "30 steps: 4.94e6 samples/s, GPU busy 69%, peak 134 MiB (70.0 MiB of it outside the
    /// pool; in buffers 34.4 MiB, by the estimate 34.4 MiB), loss 3.145 -> 2.543; the steps are
    /// 99.8% of the loop's wall time".
    pub fn describe(&self) -> String {
        let busy = self
            .gpu_busy
            .map_or("not measured".into(), |b| format!("{:.0}%", 100.0 * b));
        let buffers = self.buffers_high.map_or(String::new(), |b| {
            format!("in buffers {}, ", human_bytes(b))
        });
        format!(
            "{} steps: {} samples/s, GPU busy {busy}, peak {} ({} of it outside the pool; \
             {buffers}by the estimate {}), loss {:.3} -> {:.3}; the steps are {:.1}% of the \
             loop's wall time",
            self.steps,
            self.samples_per_s
                .map_or("-".into(), |s| format!("{s:.3e}")),
            human_bytes(self.peak_bytes),
            human_bytes(self.outside_pool_bytes),
            human_bytes(self.estimated_bytes),
            self.first_loss,
            self.last_loss,
            100.0 * self.steps_cover,
        )
    }
}

/// Train as `opts` says, writing the protocol to `report` and a line or two to stdout.
pub fn run(opts: &Options, report: &mut Report) -> Result<Summary> {
    let arch = opts.arch;
    let gpu = Gpu::open(opts.device)?;
    let (free, total) = gpu.memory()?;
    report.device(&DeviceRecord {
        name: Some(gpu.info.name.clone()),
        total_bytes: Some(total),
        free_bytes: Some(free),
        ..DeviceRecord::default()
    })?;
    let mlp = Mlp::new(&gpu)?;
    let mut timer = Timer::new(&gpu)?;
    let mut gauge = MemoryGauge::new(&gpu, free)?;
    let data = Arc::new(Dataset::synthetic(
        arch.input,
        arch.classes,
        opts.samples,
        opts.seed,
    ));
    let init = initial_params(&arch, opts.seed.wrapping_add(100), Init::HE);

    let check = check_gradient(&gpu, &mlp, opts, &init, &data)?;
    let checked = match &check {
        Some(c) if !c.passed() => {
            return Err(Error::invalid(format!(
                "the training step is wrong: {}",
                c.describe()
            )))
        }
        Some(c) => c.describe(),
        None => "model too large for the float64 reference: step not checked".into(),
    };
    gpu.sync()?;
    gauge.trim()?;
    println!(
        "mlp-train: {} on {}; {checked}",
        opts.describe(),
        gpu.info.name
    );

    let estimated_bytes = memory::estimate(&arch, &opts.optimizer, opts.amp, opts.batch).total;
    let mut t = Trainer::new(&gpu, opts, &init, opts.batch, opts.accumulation)?;
    let mut first_losses = gpu.alloc::<f32>(opts.batch, "the first step's losses")?;
    let mut feed = Feed::new(&gpu, opts, data)?;

    let input = t.input(&gpu, &feed.x[0], &feed.y[0]);
    let compute_s = device_time_of_a_step(&gpu, &mlp, &mut timer, &mut t, input)?;
    gauge.settle(&gpu)?;

    let total_steps = opts.total_steps();
    let acc = opts.accumulation;
    let compute = gpu.stream.clone();
    let ex = Exec::queued(&gpu);
    // Three steps' events in turn: step k's are read once step k + 1 is queued, after step
    // k + 2's start is recorded.
    let timers = [
        PhaseTimer::new(&gpu, 1, 3 * acc + 1)?,
        PhaseTimer::new(&gpu, 1, 3 * acc + 1)?,
        PhaseTimer::new(&gpu, 1, 3 * acc + 1)?,
    ];
    let mut totals = Totals::default();
    let mut all_steps_s = 0.0;
    let mut finish = |j: usize, gauge: &mut MemoryGauge, report: &mut Report| -> Result<()> {
        let ms: Vec<f64> = timers[j % 3].phase_ms(0)?.concat();
        let phases = StepPhases::from_phase_ms(&ms, acc);
        let line = step_line(
            opts.samples_per_step(),
            phases,
            gauge.reading(&gpu)?,
            compute_s,
        );
        report.step(&line)?;
        all_steps_s += line.step_s;
        if j >= opts.warmup {
            totals.add(&line);
        }
        if opts.log_every > 0 && (j + 1) % opts.log_every == 0 {
            println!(
                "step {}/{total_steps}: {:.3} ms (data {:.3}), {:.4e} samples/s{}",
                j + 1,
                line.step_s * 1e3,
                phases.data_s * 1e3,
                line.samples as f64 / line.step_s,
                line.gpu_busy
                    .map_or(String::new(), |b| format!(", GPU busy {:.0}%", 100.0 * b)),
            );
        }
        Ok(())
    };

    let loop_started = Instant::now();
    timers[0].start(&compute)?;
    feed.enqueue(0)?;
    for k in 0..total_steps {
        let phases = &timers[k % 3];
        for i in 0..acc {
            let m = k * acc + i;
            let input = feed.wait_for(m, &t, &gpu)?;
            phases.end_of(0, 3 * i, &compute)?;
            t.forward(&mlp, &ex, input)?;
            phases.end_of(0, 3 * i + 1, &compute)?;
            t.backward(&mlp, &ex, input, i)?;
            phases.end_of(0, 3 * i + 2, &compute)?;
            feed.done_with(m, &compute)?;
            if i + 1 < acc {
                feed.enqueue(m + 1)?;
            }
        }
        t.update(&mlp, &ex, opts.lr)?;
        if k == 0 {
            compute
                .memcpy_dtod(&t.losses.values, &mut first_losses)
                .cuda("keeping the first losses")?;
        }
        phases.end_of(0, 3 * acc, &compute)?;
        if k + 1 < total_steps {
            // The next step starts where this one ends, with nothing queued between, so
            // whatever the GPU waits for before it (the host writing a line, taking the next
            // batch) is in that step's data phase.
            timers[(k + 1) % 3].start(&compute)?;
        }
        if k >= 1 {
            finish(k - 1, &mut gauge, report)?;
        }
        if k + 1 < total_steps {
            feed.enqueue((k + 1) * acc)?;
        }
    }
    finish(total_steps - 1, &mut gauge, report)?;
    compute.synchronize().cuda("finishing the last step")?;
    let loop_s = loop_started.elapsed().as_secs_f64();
    feed.shutdown();

    let first_loss = mean(&gpu.download(&first_losses)?);
    let last_loss = t.mean_loss(&gpu)?;
    let peak_bytes = gauge.peak(&gpu)?;
    let gpu_busy = totals.gpu_busy(compute_s);
    let samples_per_s = totals.samples_per_s();
    report.end(&EndRecord {
        samples_per_s,
        peak_memory_bytes: Some(peak_bytes),
        gpu_busy,
        ..EndRecord::default()
    })?;
    Ok(Summary {
        check,
        steps: totals.steps,
        samples_per_s,
        peak_bytes,
        outside_pool_bytes: gauge.outside_pool(),
        buffers_high: gauge.pool().map(|p| p.used_high()).transpose()?,
        estimated_bytes,
        compute_s,
        gpu_busy,
        first_loss,
        last_loss,
        steps_cover: all_steps_s / loop_s,
    })
}

/// Device time (seconds) of one optimizer step's work with no host gaps: the first
/// micro-batch's forward and backward, each further one's (which add to the gradient), and
/// the update, each queued behind common's blocking kernel and timed with events; None when a
/// piece has more launches than the queue holds while the stream is blocked. The weights are
/// left as they were: forward and backward do not change them, the update runs with a
/// learning rate of 0 and the optimizer's state and step count are reset after it.
fn device_time_of_a_step(
    gpu: &Gpu,
    mlp: &Mlp,
    timer: &mut Timer,
    t: &mut Trainer,
    input: Input,
) -> Result<Option<f64>> {
    let ex = Exec::queued(gpu);
    // Every piece runs unheld first: a kernel's first launch may load its code, which waits
    // for the device, and so for the blocking kernel.
    let started = Instant::now();
    while started.elapsed() < WARM_TIME {
        t.micro_batch(mlp, &ex, input, 0)?;
        if t.accumulation > 1 {
            t.micro_batch(mlp, &ex, input, 1)?;
        }
        t.update(mlp, &ex, 0.0)?;
        gpu.sync()?;
    }
    let mut median_of = |piece: &mut dyn FnMut() -> Result<()>| -> Result<Option<f64>> {
        let mut seconds = Vec::with_capacity(BUSY_SAMPLES);
        for _ in 0..BUSY_SAMPLES {
            let (s, timed_out) = timer.sample(1, false, true, piece)?;
            if timed_out {
                return Ok(None);
            }
            seconds.push(s);
        }
        seconds.sort_by(f64::total_cmp);
        Ok(Some(seconds[BUSY_SAMPLES / 2]))
    };
    let first = median_of(&mut || t.micro_batch(mlp, &ex, input, 0))?;
    let further = if t.accumulation > 1 {
        median_of(&mut || t.micro_batch(mlp, &ex, input, 1))?
    } else {
        Some(0.0)
    };
    let update = median_of(&mut || t.update(mlp, &ex, 0.0))?;
    for state in [t.model.state1.as_mut(), t.model.state2.as_mut()]
        .into_iter()
        .flatten()
    {
        gpu.stream
            .memset_zeros(state)
            .cuda("resetting the optimizer state")?;
    }
    t.model.steps = 0;
    gpu.sync()?;
    Ok(match (first, further, update) {
        (Some(a), Some(b), Some(u)) => Some(a + (t.accumulation - 1) as f64 * b + u),
        _ => None,
    })
}
