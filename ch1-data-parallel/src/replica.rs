//! One copy of the model training on one GPU: its weights, a batch's activations, its samples
//! of every step and where their losses go. A replica trains alone (the one-GPU runs the pair
//! is checked and timed against) or as a rank's half of a data-parallel step
//! ([crate::train]), where its backward pass calls back after each layer so the gradients can
//! be reduced as they appear. A [Fault] plants a wrong gradient on one rank, the error the
//! check must catch.

use cudarc::cublas::CudaBlas;
use cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut};

use common::error::CudaContext as _;
use common::{Gpu, Result};
use mlp::{
    Activations, Allocator, Arch, Exec, Input, LossSlot, Losses, Mlp, Model, Optimizer, Samples,
};

use crate::plan::ELEMENT_BYTES;

/// A wrong gradient planted on one rank before the all-reduce: the two errors a data-parallel
/// step can make with its shards, for the tests that show the check catches them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The rank's gradient is left out of the sum (zeros in its place).
    Missing(usize),
    /// The rank's gradient is counted twice.
    Twice(usize),
}

impl std::str::FromStr for Fault {
    type Err = String;

    /// `missing:R` or `twice:R`, R a rank.
    fn from_str(s: &str) -> std::result::Result<Fault, String> {
        let bad = || format!("'{s}': a planted fault is missing:RANK or twice:RANK");
        let (kind, rank) = s.split_once(':').ok_or_else(bad)?;
        let rank: usize = rank.parse().map_err(|_| bad())?;
        match kind {
            "missing" => Ok(Fault::Missing(rank)),
            "twice" => Ok(Fault::Twice(rank)),
            _ => Err(bad()),
        }
    }
}

impl Fault {
    pub fn rank(self) -> usize {
        match self {
            Fault::Missing(r) | Fault::Twice(r) => r,
        }
    }
}

/// One model on one GPU with its data.
pub struct Replica<'g> {
    pub gpu: &'g Gpu,
    mlp: Mlp,
    pub model: Model,
    act: Activations,
    x: CudaSlice<f32>,
    labels: CudaSlice<i32>,
    pub losses: Losses,
    init: CudaSlice<f32>,
    /// Samples per step (the activations' capacity).
    pub batch: usize,
    /// Where this replica's losses sit within each step's.
    pub slot: LossSlot,
    learning_rate: f32,
    /// The first step's gradient (all-reduced, for a rank), kept when a run asks for it.
    pub first_gradient: Option<CudaSlice<f32>>,
    /// Where the shards' gradients add up, and the cuBLAS handle that adds them (runs that
    /// split the batch on one GPU).
    sum: Option<(CudaSlice<f32>, CudaBlas)>,
}

impl<'g> Replica<'g> {
    /// A replica training on `samples` (`steps` batches of `batch`), its losses placed at
    /// `slot` within each step.
    pub fn new(
        gpu: &'g Gpu,
        arch: Arch,
        init: &[f32],
        samples: &Samples,
        (batch, slot): (usize, LossSlot),
        learning_rate: f32,
    ) -> Result<Replica<'g>> {
        let steps = samples.len() / batch;
        Ok(Replica {
            gpu,
            mlp: Mlp::new(gpu)?,
            model: Model::new(gpu, arch, Optimizer::PLAIN_SGD, false, init)?,
            act: Activations::new(gpu, &arch, false, batch, Allocator::Pool)?,
            x: gpu.upload(&samples.features, "the replica's samples")?,
            labels: gpu.upload(&samples.labels, "the replica's labels")?,
            losses: Losses::new(gpu, steps * slot.samples_per_step)?,
            init: gpu.upload(init, "the initial parameters")?,
            batch,
            slot,
            learning_rate,
            first_gradient: None,
            sum: None,
        })
    }

    pub fn steps(&self) -> usize {
        self.labels.len() / self.batch
    }

    /// The `index`-th batch of `samples` samples.
    fn input(&self, index: usize, samples: usize) -> Input {
        let arch = self.model.arch;
        let x = self.x.slice(index * samples * arch.input..);
        let labels = self.labels.slice(index * samples..);
        Input::new(self.gpu, &arch, &x, &labels, samples)
    }

    /// Back to the initial weights and the first loss slot, on this thread.
    pub fn start(&mut self) -> Result<()> {
        self.gpu.ctx.bind_to_thread().cuda("binding the context")?;
        let ex = Exec::queued(self.gpu);
        self.mlp.reset(&ex, &mut self.model, &self.init)?;
        self.losses.rewind(self.gpu)
    }

    /// A whole run on this GPU alone, no communication. With one shard each step is one
    /// forward and backward over the whole batch. With several, each step's batch is cut
    /// into `order.len()` shards as the ranks cut it; each shard's gradient is computed on its
    /// own and the gradients are added in `order` (`[0, 1, ...]`: rank order), as an
    /// all-reduce adds the ranks' gradients: the ranks' arithmetic on one GPU. `keep_first`
    /// keeps the first step's gradient in [Replica::first_gradient].
    pub fn train_alone(&mut self, order: &[usize], keep_first: bool) -> Result<()> {
        self.start()?;
        let ex = Exec::queued(self.gpu);
        let shards = order.len();
        let shard = self.batch / shards;
        if shards > 1 && self.sum.is_none() {
            let n = self.model.arch.param_count();
            let buffer = self.gpu.alloc::<f32>(n, "the shards' gradient sum")?;
            self.sum = Some((buffer, common::blas::handle(self.gpu)?));
        }
        for step in 0..self.steps() {
            for (i, &s) in order.iter().enumerate() {
                let input = self.input(step * shards + s, shard);
                let slot = LossSlot {
                    samples_per_step: self.slot.samples_per_step,
                    offset: self.slot.offset + s * shard,
                };
                let m = &self.mlp;
                m.forward_loss(
                    &ex,
                    &self.model,
                    &mut self.act,
                    input,
                    &mut self.losses,
                    slot,
                )?;
                m.backward(&ex, &mut self.model, &mut self.act, input, false)?;
                if let Some((sum, blas)) = self.sum.as_mut().filter(|_| shards > 1) {
                    add_into(self.gpu, blas, &self.model.grads, sum, i == 0)?;
                }
            }
            if let Some((sum, _)) = self.sum.as_ref().filter(|_| shards > 1) {
                self.gpu
                    .stream
                    .memcpy_dtod(sum, &mut self.model.grads)
                    .cuda("taking the shards' sum as the gradient")?;
            }
            self.update(&ex)?;
            if step == 0 && keep_first {
                self.keep_first_gradient()?;
            }
        }
        Ok(())
    }

    /// Copy the gradient now in the buffer to [Replica::first_gradient], in stream order.
    pub fn keep_first_gradient(&mut self) -> Result<()> {
        if self.first_gradient.is_none() {
            let n = self.model.arch.param_count();
            self.first_gradient = Some(self.gpu.alloc::<f32>(n, "the first step's gradient")?);
        }
        let kept = self.first_gradient.as_mut().expect("allocated above");
        self.gpu
            .stream
            .memcpy_dtod(&self.model.grads, kept)
            .cuda("keeping the first step's gradient")
    }

    /// Forward and loss of step `step`'s batch.
    pub fn forward(&mut self, ex: &Exec, step: usize) -> Result<Input> {
        let input = self.input(step, self.batch);
        let r = self;
        r.mlp
            .forward_loss(ex, &r.model, &mut r.act, input, &mut r.losses, r.slot)?;
        Ok(input)
    }

    /// Backward of `input`, calling `on_layer_done(l)` once layer `l`'s gradients are queued;
    /// `fault` (when it is this replica's) plants its wrong gradient first: a missing gradient
    /// is zeroed layer by layer before the call, a doubled one is backward run twice, the
    /// second time accumulating.
    pub fn backward(
        &mut self,
        ex: &Exec,
        input: Input,
        fault: Option<Fault>,
        on_layer_done: &mut dyn FnMut(usize) -> Result<()>,
    ) -> Result<()> {
        let (mlp, model, act) = (&self.mlp, &mut self.model, &mut self.act);
        match fault {
            None => mlp.backward_with(ex, model, act, input, false, on_layer_done),
            Some(Fault::Twice(_)) => {
                mlp.backward(ex, model, act, input, false)?;
                mlp.backward_with(ex, model, act, input, true, on_layer_done)
            }
            Some(Fault::Missing(_)) => {
                let grads = model.grads.device_ptr(&self.gpu.stream).0;
                let layers = model.arch.layers();
                let stream = self.gpu.stream.cu_stream();
                mlp.backward_with(ex, model, act, input, false, &mut |l| {
                    for range in [&layers[l].w, &layers[l].b] {
                        let at = grads + (range.start * ELEMENT_BYTES) as u64;
                        // SAFETY: the range lies inside the gradient buffer, which outlives the
                        // stream's work; zeroed in stream order after backward wrote it.
                        unsafe {
                            cudarc::driver::result::memset_d8_async(
                                at,
                                0,
                                range.len() * ELEMENT_BYTES,
                                stream,
                            )
                        }
                        .cuda("zeroing a planted missing gradient")?;
                    }
                    on_layer_done(l)
                })
            }
        }
    }

    /// The optimizer step (plain SGD), the loss counter moved on.
    pub fn update(&mut self, ex: &Exec) -> Result<()> {
        self.mlp.update(
            ex,
            &mut self.model,
            self.learning_rate,
            Some(&mut self.losses),
        )
    }

    pub fn grads_ptr(&self) -> u64 {
        self.model.grads.device_ptr(&self.gpu.stream).0
    }
}

/// `sum = grads` (`first`) or `sum = sum + grads` in fp32, on the GPU's stream: cuBLAS's
/// axpy with alpha 1, whose fused multiply-add rounds `1 * g + s` once, as an all-reduce's
/// sum does.
fn add_into(
    gpu: &Gpu,
    blas: &CudaBlas,
    grads: &CudaSlice<f32>,
    sum: &mut CudaSlice<f32>,
    first: bool,
) -> Result<()> {
    if first {
        return gpu
            .stream
            .memcpy_dtod(grads, sum)
            .cuda("starting the shards' gradient sum");
    }
    let n = grads.len() as i64;
    let alpha = 1.0f32;
    let x = grads.device_ptr(&gpu.stream).0 as *const f32;
    let y = sum.device_ptr_mut(&gpu.stream).0 as *mut f32;
    // SAFETY: x and y hold n f32 on this GPU; the handle runs on the GPU's stream.
    unsafe { cudarc::cublas::sys::cublasSaxpy_v2_64(*blas.handle(), n, &alpha, x, 1, y, 1) }
        .result()
        .map_err(|e| common::blas::blas_error(gpu, e, "adding a shard's gradient"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_are_read_from_their_names() {
        assert_eq!("missing:1".parse(), Ok(Fault::Missing(1)));
        assert_eq!("twice:0".parse(), Ok(Fault::Twice(0)));
        for bad in ["missing", "twice:x", "half:1", ""] {
            assert!(bad.parse::<Fault>().is_err(), "{bad}");
        }
        assert_eq!(Fault::Twice(3).rank(), 3);
    }
}
