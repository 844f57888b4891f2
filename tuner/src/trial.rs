//! One trial: train `warmup + steps` real steps of one configuration (batch, workers, AMP,
//! pinning) and measure each step's phases with CUDA events on the training stream.
//!
//! The loop double-buffers its input: while step k computes, the host takes batch k+1 from the
//! loader and queues its copy on a second stream into the other device slot (after step k-1,
//! which read that slot, is done). Step k's phases on the GPU timeline:
//! data = end of step k-1 -> its batch is on the device (the GPU waiting for the host's batch
//! and the copy), then forward, backward, optimizer: common's [PhaseTimer], so the four add up
//! to the step exactly.
//!
//! Busy fraction: the same forward + backward + optimizer queued back-to-back behind common's
//! blocking kernel ([Timer]; no host gaps at all) gives the device time of a step; over the
//! loop's median step, that is the share of the step the GPU was working.
//!
//! Out of memory is an answer: every buffer is allocated before the loop, so a failed
//! allocation (driver or cuBLAS) ends the trial as OOM; its buffers are dropped, the stream
//! synchronized and the pool trimmed, and the sweep goes on.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::sys;
use cudarc::driver::{CudaSlice, CudaStream, DevicePtrMut};

use common::bench::{PhaseTimer, Timer};
use common::error::CudaContext as _;
use common::gpu::Gpu;
use common::stats::Summary;
use common::verify::rel_l2_error;
use common::Result;
use mlp::Allocator;
use mlp::{Activations, Exec, Init, Input, LossSlot, Losses, Mlp, Model};

use crate::analysis::{TrialKey, TrialResult, TrialStatus};
use crate::config::Settings;
use crate::data::{Dataset, Sampler};
use crate::loader::{buffer_count, BatchSource, HostBatch, HostBuf, Loader, Ready};
use crate::memory;
use crate::monitor::{Pool, UtilSampler};

/// One step's gradient against the float64 reference.
#[derive(Debug, Clone, Copy)]
pub struct GradientCheck {
    /// Relative L2 error of the whole gradient (infinite when any entry is not finite).
    pub rel_l2: f64,
    /// The same over the bias entries alone (a small share of the vector, summed over the
    /// batch by their own kernels).
    pub bias_rel_l2: f64,
    /// |mean loss - reference mean loss|.
    pub loss_error: f64,
}

/// The peak device memory of a trial (bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Peak {
    /// The pool's high watermark of bytes in use: the sum of the live buffers at the worst
    /// moment (the buffer sizes when the device has no stream-ordered pool).
    pub used: u64,
    /// The pool's high watermark of bytes taken from the device (allocation granularity and
    /// cached blocks included); None without a pool.
    pub reserved: Option<u64>,
}

/// The phases of a step, in the order their ends are recorded.
const DATA: usize = 0;
const FORWARD: usize = 1;
const BACKWARD: usize = 2;
const OPTIMIZER: usize = 3;
const PHASES: usize = 4;

/// A model at the initial weights with the buffers of one batch: the device side of a trial.
struct Batch {
    model: Model,
    act: Activations,
    /// The batch's per-sample losses (their slot counter stays at 0).
    losses: Losses,
}

impl Batch {
    fn input(&self, gpu: &Gpu, x: &CudaSlice<f32>, y: &CudaSlice<i32>, batch: usize) -> Input {
        Input::new(gpu, &self.model.arch, x, y, batch)
    }

    /// One optimizer step over `inputs`, one micro-batch each: gradient accumulation when
    /// there are several ([Batch::accumulate]), then the optimizer's update.
    fn step(&mut self, mlp: &Mlp, ex: &Exec, inputs: &[Input], lr: f32) -> Result<()> {
        self.accumulate(mlp, ex, inputs)?;
        mlp.update(ex, &mut self.model, lr, None)
    }

    /// Forward and backward of each micro-batch of one optimizer step ([micro_batches]).
    fn accumulate(&mut self, mlp: &Mlp, ex: &Exec, inputs: &[Input]) -> Result<()> {
        let samples: Vec<usize> = inputs.iter().map(|i| i.samples).collect();
        for (input, (slot, add)) in inputs.iter().zip(micro_batches(&samples)) {
            mlp.forward_loss(
                ex,
                &self.model,
                &mut self.act,
                *input,
                &mut self.losses,
                slot,
            )?;
            mlp.backward(ex, &mut self.model, &mut self.act, *input, add)?;
        }
        Ok(())
    }

    fn forward(&mut self, mlp: &Mlp, ex: &Exec, input: Input) -> Result<()> {
        let slot = LossSlot::whole_step(input.samples);
        mlp.forward_loss(
            ex,
            &self.model,
            &mut self.act,
            input,
            &mut self.losses,
            slot,
        )
    }

    /// Mean of the last step's per-sample losses.
    fn mean_loss(&self, gpu: &Gpu, batch: usize) -> Result<f64> {
        let losses = gpu.download(&self.losses.values)?;
        Ok(losses[..batch].iter().map(|&v| v as f64).sum::<f64>() / batch as f64)
    }
}

/// How the micro-batches of one optimizer step (of `samples[i]` samples each) are run: each
/// loss is scaled by 1 / the step's samples, so the gradients add up to the step's mean loss;
/// the first backward overwrites the gradient and the others add to it. Every micro-batch's
/// per-sample losses go to the same slots (the trial keeps one micro-batch of them: the
/// gradient is what is trained).
pub fn micro_batches(samples: &[usize]) -> Vec<(LossSlot, bool)> {
    let per_step = samples.iter().sum();
    (0..samples.len())
        .map(|i| {
            let slot = LossSlot {
                samples_per_step: per_step,
                offset: 0,
            };
            (slot, i > 0)
        })
        .collect()
}

/// Everything that lives across trials: device, kernels and cuBLAS, timer, data, monitors.
pub struct Session<'g> {
    pub gpu: &'g Gpu,
    pub settings: Settings,
    pub mlp: Mlp,
    timer: Timer,
    copy: Arc<CudaStream>,
    pub pool: Option<Pool>,
    util: UtilSampler,
    pub data: Arc<Dataset>,
    pub init: Vec<f32>,
}

impl<'g> Session<'g> {
    pub fn new(gpu: &'g Gpu, settings: Settings, data: Arc<Dataset>) -> Result<Session<'g>> {
        let mlp = Mlp::new(gpu)?;
        let timer = Timer::new(gpu)?;
        let copy = gpu.ctx.new_stream().cuda("creating the copy stream")?;
        let pool = Pool::of(gpu)?;
        let util = UtilSampler::start(gpu.info.uuid.clone(), Duration::from_millis(10));
        let init = mlp::initial_params(&settings.arch, settings.seed.wrapping_add(100), Init::HE);
        Ok(Session {
            gpu,
            settings,
            mlp,
            timer,
            copy,
            pool,
            util,
            data,
            init,
        })
    }

    /// The model at the initial weights and the buffers of a batch of `batch`.
    fn batch(&self, amp: bool, batch: usize) -> Result<Batch> {
        let s = &self.settings;
        Ok(Batch {
            model: Model::new(self.gpu, s.arch, s.optimizer, amp, &self.init)?,
            act: Activations::new(self.gpu, &s.arch, amp, batch, Allocator::Pool)?,
            losses: Losses::new(self.gpu, batch)?,
        })
    }

    /// Free what a trial left, wait for the device, give cached pool memory back.
    pub fn clean_up(&self) -> Result<()> {
        self.copy
            .synchronize()
            .cuda("synchronizing the copy stream")?;
        self.gpu.sync()?;
        if let Some(p) = &self.pool {
            p.trim()?;
        }
        Ok(())
    }

    /// Run one trial. Out of memory is a result (status OOM); other errors end the sweep.
    pub fn run(&mut self, key: TrialKey) -> Result<TrialResult> {
        let s = &self.settings;
        let estimated = memory::estimate(&s.arch, &s.optimizer, key.amp, key.batch).total;
        Ok(match self.recovering(|s| s.try_run(key, estimated))? {
            Ok(r) => r,
            Err(oom) => TrialResult::empty(key, TrialStatus::Oom, estimated, Some(oom.to_string())),
        })
    }

    /// Run `attempt` from a clean device with fresh pool watermarks, and clean up after it
    /// whatever happens: `Ok(Err(e))` when it ran out of memory (recovered: freed, synchronized,
    /// trimmed), `Ok(Ok(value))` when it ran; other errors end the caller.
    fn recovering<T>(
        &mut self,
        attempt: impl FnOnce(&mut Self) -> Result<T>,
    ) -> Result<std::result::Result<T, common::Error>> {
        self.clean_up()?;
        if let Some(p) = &self.pool {
            p.reset_high()?;
        }
        let outcome = attempt(self);
        let cleaned = self.clean_up();
        match outcome {
            Ok(v) => {
                cleaned?;
                Ok(Ok(v))
            }
            Err(e) if e.is_out_of_memory() => {
                cleaned?;
                Ok(Err(e))
            }
            Err(e) => Err(e),
        }
    }

    fn try_run(&mut self, key: TrialKey, estimated: u64) -> Result<TrialResult> {
        let gpu = self.gpu;
        let s = self.settings.clone();
        let (arch, batch) = (s.arch, key.batch);
        let mut b = self.batch(key.amp, batch)?;
        let mut x_dev: Vec<CudaSlice<f32>> = (0..2)
            .map(|_| gpu.alloc::<f32>(batch * arch.input, "an input slot"))
            .collect::<Result<_>>()?;
        let mut y_dev: Vec<CudaSlice<i32>> = (0..2)
            .map(|_| gpu.alloc::<i32>(batch, "a label slot"))
            .collect::<Result<_>>()?;
        let mut first_losses = gpu.alloc::<f32>(batch, "the first step's losses")?;
        let host = (0..buffer_count(key.workers))
            .map(|_| -> Result<HostBatch> {
                Ok(if key.pin.unwrap_or(true) {
                    HostBatch {
                        features: HostBuf::pinned(gpu, batch * arch.input, "a pinned batch")?,
                        labels: HostBuf::pinned(gpu, batch, "pinned labels")?,
                    }
                } else {
                    HostBatch {
                        features: HostBuf::pageable(batch * arch.input),
                        labels: HostBuf::pageable(batch),
                    }
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let source: Arc<dyn BatchSource> = Arc::new(Sampler::new(
            self.data.clone(),
            batch,
            s.seed,
            Duration::from_nanos((s.cpu_cost_us * 1000.0) as u64),
        ));
        let mut loader = Loader::start(source, key.workers, host);

        let total = s.warmup_steps + s.steps;
        let phases = PhaseTimer::new(gpu, total, PHASES)?;
        let ev = || gpu.ctx.new_event(None).cuda("creating an event");
        let copied = [ev()?, ev()?];
        let slot_free = [ev()?, ev()?];
        let mut in_flight: [Option<Ready>; 2] = [None, None];
        let compute = gpu.stream.clone();
        let ex = Exec::queued(gpu);

        let started = Instant::now();
        let mut measured_from = started;
        phases.start(&compute)?;
        let copy_stream = self.copy.clone();
        let enqueue = |k: usize,
                       loader: &mut Loader,
                       in_flight: &mut [Option<Ready>; 2],
                       x_dev: &mut [CudaSlice<f32>],
                       y_dev: &mut [CudaSlice<i32>]|
         -> Result<()> {
            let slot = k % 2;
            if let Some(old) = in_flight[slot].take() {
                copied[slot].synchronize().cuda("waiting for a copy")?;
                loader.recycle(old);
            }
            let ready = loader.next_batch()?;
            if k >= 2 {
                copy_stream
                    .wait(&slot_free[slot])
                    .cuda("ordering the copy")?;
            }
            htod(
                &copy_stream,
                ready.buffers.features.as_slice(),
                &mut x_dev[slot],
            )?;
            htod(
                &copy_stream,
                ready.buffers.labels.as_slice(),
                &mut y_dev[slot],
            )?;
            copied[slot].record(&copy_stream).cuda("recording a copy")?;
            in_flight[slot] = Some(ready);
            Ok(())
        };
        enqueue(0, &mut loader, &mut in_flight, &mut x_dev, &mut y_dev)?;
        for k in 0..total {
            if k == s.warmup_steps {
                measured_from = Instant::now();
            }
            let slot = k % 2;
            let input = b.input(gpu, &x_dev[slot], &y_dev[slot], batch);
            compute.wait(&copied[slot]).cuda("waiting for the batch")?;
            phases.end_of(k, DATA, &compute)?;
            b.forward(&self.mlp, &ex, input)?;
            phases.end_of(k, FORWARD, &compute)?;
            self.mlp
                .backward(&ex, &mut b.model, &mut b.act, input, false)?;
            phases.end_of(k, BACKWARD, &compute)?;
            self.mlp.update(&ex, &mut b.model, s.lr, None)?;
            phases.end_of(k, OPTIMIZER, &compute)?;
            slot_free[slot]
                .record(&compute)
                .cuda("recording an event")?;
            if k == 0 {
                compute
                    .memcpy_dtod(&b.losses.values, &mut first_losses)
                    .cuda("keeping the first losses")?;
            }
            if k + 1 < total {
                enqueue(k + 1, &mut loader, &mut in_flight, &mut x_dev, &mut y_dev)?;
            }
        }
        compute.synchronize().cuda("finishing the trial's steps")?;
        let finished = Instant::now();
        let peak = match &self.pool {
            Some(p) => Some(p.used_high()?),
            None => None,
        };
        let ms = phases.phase_ms(s.warmup_steps)?;
        let (data, fwd, bwd, opt) = (&ms[DATA], &ms[FORWARD], &ms[BACKWARD], &ms[OPTIMIZER]);
        let tot: Vec<f64> = (0..data.len())
            .map(|i| data[i] + fwd[i] + bwd[i] + opt[i])
            .collect();
        let mean_loss = |v: Vec<f32>| v.iter().map(|&l| l as f64).sum::<f64>() / v.len() as f64;
        let first_loss = mean_loss(gpu.download(&first_losses)?);
        let last_loss = b.mean_loss(gpu, batch)?;

        // The step's device time with no host gaps: the same work queued behind a hold.
        let reps = 5;
        let input = b.input(gpu, &x_dev[0], &y_dev[0], batch);
        let mut compute_only = Vec::new();
        for _ in 0..3 {
            let (secs, _) = self.timer.sample(reps, false, true, &mut || {
                b.step(&self.mlp, &ex, &[input], s.lr)
            })?;
            compute_only.push(secs * 1e3 / reps as f64);
        }
        for r in in_flight.iter_mut() {
            if let Some(old) = r.take() {
                loader.recycle(old);
            }
        }
        loader.shutdown();

        let total_ms = Summary::of(&tot);
        let median = |v: &Option<Summary>| v.as_ref().map(|s| s.median);
        let step_ms = median(&total_ms);
        let compute_only_ms = Summary::of(&compute_only).map(|s| s.median);
        let compute_share: Vec<f64> = (0..tot.len())
            .map(|i| (fwd[i] + bwd[i] + opt[i]) / tot[i])
            .collect();
        let mut r = TrialResult::empty(key, TrialStatus::Ok, estimated, None);
        r.samples_per_s = step_ms.map(|t| batch as f64 / (t / 1e3));
        r.busy_fraction = match (compute_only_ms, step_ms) {
            (Some(c), Some(t)) if t > 0.0 => Some((c / t).min(1.0)),
            _ => None,
        };
        r.compute_only_ms = compute_only_ms;
        r.compute_phase_fraction = Summary::of(&compute_share).map(|s| s.median);
        r.data_fraction = match (median(&Summary::of(data)), step_ms) {
            (Some(d), Some(t)) if t > 0.0 => Some(d / t),
            _ => None,
        };
        r.data_ms = Summary::of(data);
        r.forward_ms = Summary::of(fwd);
        r.backward_ms = Summary::of(bwd);
        r.optimizer_ms = Summary::of(opt);
        r.total_ms = total_ms;
        r.nvml_util_pct = self.util.mean_between(measured_from, finished);
        r.peak_bytes = peak.or(Some(estimated));
        r.first_loss = Some(first_loss);
        r.last_loss = Some(last_loss);
        Ok(r)
    }

    /// Whether `steps` real optimizer steps (forward, backward and the optimizer), each of
    /// `accumulation` micro-batches of `batch` samples, fit: the pool's peaks when they do, None
    /// on out-of-memory (recovered: freed, synchronized, trimmed). The trial's device buffers
    /// exactly; the batch is device-resident zeros (valid labels), since only the memory is in
    /// question.
    pub fn fits(
        &mut self,
        batch: usize,
        amp: bool,
        steps: usize,
        accumulation: usize,
    ) -> Result<Option<Peak>> {
        Ok(self
            .recovering(|s| s.try_fits(batch, amp, steps, accumulation))?
            .ok())
    }

    fn try_fits(
        &mut self,
        batch: usize,
        amp: bool,
        steps: usize,
        accumulation: usize,
    ) -> Result<Peak> {
        let gpu = self.gpu;
        let s = self.settings.clone();
        let arch = s.arch;
        let mut b = self.batch(amp, batch)?;
        let x: Vec<CudaSlice<f32>> = (0..2)
            .map(|_| gpu.alloc_zeros::<f32>(batch * arch.input, "an input slot"))
            .collect::<Result<_>>()?;
        let y: Vec<CudaSlice<i32>> = (0..2)
            .map(|_| gpu.alloc_zeros::<i32>(batch, "a label slot"))
            .collect::<Result<_>>()?;
        let _first_losses = gpu.alloc::<f32>(batch, "the first step's losses")?;
        let ex = Exec::queued(gpu);
        for k in 0..steps {
            let inputs: Vec<Input> = (0..accumulation.max(1))
                .map(|i| b.input(gpu, &x[(k + i) % 2], &y[(k + i) % 2], batch))
                .collect();
            b.step(&self.mlp, &ex, &inputs, s.lr)?;
        }
        gpu.sync()?;
        Ok(match &self.pool {
            Some(p) => Peak {
                used: p.used_high()?,
                reserved: Some(p.reserved_high()?),
            },
            None => Peak {
                used: memory::estimate(&arch, &s.optimizer, amp, batch).total,
                reserved: None,
            },
        })
    }

    /// A model at the initial weights, the buffers of `batch`, the session's sampler and its
    /// host batch: what the loss curve and the float64 check start from.
    fn fresh_run(&self, amp: bool, batch: usize) -> Result<FreshRun> {
        let s = &self.settings;
        Ok(FreshRun {
            batch: self.batch(amp, batch)?,
            sampler: Sampler::new(self.data.clone(), batch, s.seed, Duration::ZERO),
            features: vec![0f32; batch * s.arch.input],
            labels: vec![0i32; batch],
        })
    }

    /// Train `steps` steps of `batch` on the calling thread and return each step's mean loss
    /// (synchronizing every step): for the AMP-vs-fp32 comparison.
    pub fn loss_curve(&self, amp: bool, batch: usize, steps: usize) -> Result<Vec<f64>> {
        let gpu = self.gpu;
        let mut run = self.fresh_run(amp, batch)?;
        let ex = Exec::queued(gpu);
        let mut curve = Vec::with_capacity(steps);
        for k in 0..steps {
            let (x, y) = run.upload(gpu, k)?;
            let input = run.batch.input(gpu, &x, &y, batch);
            run.batch.step(&self.mlp, &ex, &[input], self.settings.lr)?;
            curve.push(run.batch.mean_loss(gpu, batch)?);
        }
        Ok(curve)
    }

    /// One optimizer step's loss and gradient, `accumulation` micro-batches of `batch`
    /// samples accumulated, against the float64 reference of the whole step's samples.
    pub fn check_gradient(
        &self,
        amp: bool,
        batch: usize,
        accumulation: usize,
    ) -> Result<GradientCheck> {
        let gpu = self.gpu;
        let arch = self.settings.arch;
        let mut run = self.fresh_run(amp, batch)?;
        let (mut features, mut labels, mut uploaded) = (Vec::new(), Vec::new(), Vec::new());
        for k in 0..accumulation.max(1) {
            uploaded.push(run.upload(gpu, k)?);
            features.extend_from_slice(&run.features);
            labels.extend_from_slice(&run.labels);
        }
        let inputs: Vec<Input> = uploaded
            .iter()
            .map(|(x, y)| run.batch.input(gpu, x, y, batch))
            .collect();
        let ex = Exec::queued(gpu);
        let b = &mut run.batch;
        gpu.poison(&mut b.model.grads)?;
        b.accumulate(&self.mlp, &ex, &inputs)?;
        let grads = gpu.download(&b.model.grads)?;
        // The losses kept are the last micro-batch's.
        let loss = b.mean_loss(gpu, batch)?;
        // The reference sees what the GPU saw: bf16-rounded inputs and weights under AMP.
        let round = |v: f32| {
            if amp {
                common::blas::bf16_to_f32(common::blas::bf16_bits(v))
            } else {
                v
            }
        };
        let params: Vec<f64> = self.init.iter().map(|&p| round(p) as f64).collect();
        let xr: Vec<f32> = features.iter().map(|&v| round(v)).collect();
        let samples = labels.len();
        let (ref_losses, ref_grad) =
            mlp::reference::loss_and_gradient(&arch, &params, &xr, &labels, 1.0 / samples as f64);
        let ref_loss = ref_losses[samples - batch..].iter().sum::<f64>() / batch as f64;
        let (bias, bias_ref): (Vec<f32>, Vec<f64>) = arch
            .layers()
            .into_iter()
            .flat_map(|layer| layer.b)
            .map(|i| (grads[i], ref_grad[i]))
            .unzip();
        Ok(GradientCheck {
            rel_l2: rel_l2_error(&grads, &ref_grad),
            bias_rel_l2: rel_l2_error(&bias, &bias_ref),
            loss_error: (loss - ref_loss).abs(),
        })
    }
}

/// One run from the initial weights on the calling thread ([Session::fresh_run]).
struct FreshRun {
    batch: Batch,
    sampler: Sampler,
    features: Vec<f32>,
    labels: Vec<i32>,
}

impl FreshRun {
    /// Fill the host batch with the sampler's batch `k` and upload it.
    fn upload(&mut self, gpu: &Gpu, k: usize) -> Result<(CudaSlice<f32>, CudaSlice<i32>)> {
        self.sampler.fill(k, &mut self.features, &mut self.labels);
        Ok((
            gpu.upload(&self.features, "a batch")?,
            gpu.upload(&self.labels, "labels")?,
        ))
    }
}

/// Queue a host-to-device copy on `stream`: one DMA from pinned memory; from pageable memory the
/// driver stages it and the host waits, as a non-pinned loader does.
fn htod<T: cudarc::driver::DeviceRepr>(
    stream: &Arc<CudaStream>,
    src: &[T],
    dst: &mut CudaSlice<T>,
) -> Result<()> {
    assert!(src.len() <= dst.len());
    let (dptr, _record) = dst.device_ptr_mut(stream);
    // SAFETY: the host range is live until the copy's event completes (the caller keeps the
    // batch in flight until then); the device range lies in dst.
    unsafe {
        sys::cuMemcpyHtoDAsync_v2(
            dptr,
            src.as_ptr().cast(),
            std::mem::size_of_val(src),
            stream.cu_stream(),
        )
    }
    .result()
    .cuda("copying a batch to the GPU")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn micro_batches_scale_by_the_step_and_add_after_the_first() {
        let plan = micro_batches(&[64, 64, 64, 64]);
        assert_eq!(plan.len(), 4);
        assert!(plan.iter().all(|(slot, _)| slot.samples_per_step == 256));
        let adds: Vec<bool> = plan.iter().map(|p| p.1).collect();
        assert_eq!(adds, [false, true, true, true]);
        let one = micro_batches(&[256]);
        assert_eq!(one, vec![(LossSlot::whole_step(256), false)]);
    }
}
