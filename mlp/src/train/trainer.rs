//! The device side of a run: the model at its initial weights with the buffers of one
//! micro-batch, and the step's operations over them. Gradient accumulation scales each
//! micro-batch's loss by 1 / the optimizer step's samples, so the gradients add up to the step's
//! mean loss: the first backward overwrites the gradient and the others add to it.

use common::gpu::Gpu;
use common::Result;

use crate::buffers::Allocator;
use crate::device::{Activations, Input, LossSlot, Losses, Model};
use crate::exec::Exec;
use crate::step::Mlp;
use crate::train::options::Options;

pub struct Trainer {
    pub model: Model,
    pub act: Activations,
    /// The last micro-batch's per-sample losses (their slot counter stays at 0).
    pub losses: Losses,
    /// Samples of one micro-batch and micro-batches of one optimizer step.
    pub batch: usize,
    pub accumulation: usize,
}

impl Trainer {
    /// The model at `init` (the flat parameter vector) and the buffers of a micro-batch of
    /// `batch`, from the pool.
    pub fn new(
        gpu: &Gpu,
        opts: &Options,
        init: &[f32],
        batch: usize,
        accumulation: usize,
    ) -> Result<Trainer> {
        Ok(Trainer {
            model: Model::new(gpu, opts.arch, opts.optimizer, opts.amp, init)?,
            act: Activations::new(gpu, &opts.arch, opts.amp, batch, Allocator::Pool)?,
            losses: Losses::new(gpu, batch)?,
            batch,
            accumulation,
        })
    }

    pub fn input<X, L>(&self, gpu: &Gpu, x: &X, labels: &L) -> Input
    where
        X: cudarc::driver::DevicePtr<f32>,
        L: cudarc::driver::DevicePtr<i32>,
    {
        Input::new(gpu, &self.model.arch, x, labels, self.batch)
    }

    /// Forward and loss of a micro-batch.
    pub fn forward(&mut self, mlp: &Mlp, ex: &Exec, input: Input) -> Result<()> {
        let slot = loss_slot(self.batch, self.accumulation);
        mlp.forward_loss(
            ex,
            &self.model,
            &mut self.act,
            input,
            &mut self.losses,
            slot,
        )
    }

    /// Backward of micro-batch `i` of the step: the first overwrites the gradient.
    pub fn backward(&mut self, mlp: &Mlp, ex: &Exec, input: Input, i: usize) -> Result<()> {
        mlp.backward(ex, &mut self.model, &mut self.act, input, i > 0)
    }

    /// Forward and backward of micro-batch `i`.
    pub fn micro_batch(&mut self, mlp: &Mlp, ex: &Exec, input: Input, i: usize) -> Result<()> {
        self.forward(mlp, ex, input)?;
        self.backward(mlp, ex, input, i)
    }

    pub fn update(&mut self, mlp: &Mlp, ex: &Exec, lr: f32) -> Result<()> {
        mlp.update(ex, &mut self.model, lr, None)
    }

    /// Mean of the last micro-batch's per-sample losses (synchronizes).
    pub fn mean_loss(&self, gpu: &Gpu) -> Result<f64> {
        Ok(mean(&gpu.download(&self.losses.values)?))
    }
}

/// Where a micro-batch's losses go: scaled by the optimizer step's samples, every micro-batch
/// to the same slots (the run keeps one micro-batch of them; the gradient is what is trained).
pub fn loss_slot(batch: usize, accumulation: usize) -> LossSlot {
    LossSlot {
        samples_per_step: batch * accumulation,
        offset: 0,
    }
}

pub fn mean(values: &[f32]) -> f64 {
    values.iter().map(|&v| v as f64).sum::<f64>() / values.len().max(1) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn micro_batches_scale_by_the_whole_step() {
        assert_eq!(
            loss_slot(64, 4),
            LossSlot {
                samples_per_step: 256,
                offset: 0
            }
        );
        assert_eq!(loss_slot(256, 1), LossSlot::whole_step(256));
        assert_eq!(mean(&[1.0, 2.0, 3.0]), 2.0);
        assert_eq!(mean(&[]), 0.0);
    }
}
