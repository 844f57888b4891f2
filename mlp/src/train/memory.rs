//! Where device memory goes, from the model definition alone: the model (parameters,
//! gradients, optimizer state, the bf16 weight copy under AMP) and one batch (inputs, activations
//! saved for backward, transient activation gradients and losses, bf16 copies under AMP), plus
//! the cuBLAS workspace. The sizes are the ones the step allocates and mlp-train's own input
//! slots and losses, so the estimate holds to the memory pool's measured high watermark of
//! bytes in use; an out-of-memory message says what the run needed by it.

use crate::arch::Arch;
use crate::device::{bias_scratch_len, gradient_buffers};
use crate::optimizer::Optimizer;
use crate::step::BLAS_WORKSPACE_BYTES;

/// The model's share, independent of the batch (bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelMemory {
    pub parameters: u64,
    pub gradients: u64,
    /// SGD none, momentum one fp32 copy, AdamW two.
    pub optimizer_state: u64,
    /// AMP: the bf16 copy of the weights the GEMMs read.
    pub amp_weights: u64,
}

impl ModelMemory {
    pub fn total(&self) -> u64 {
        self.parameters + self.gradients + self.optimizer_state + self.amp_weights
    }
}

/// One batch's share (bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchMemory {
    /// Two device slots of features and labels (one computing, one being copied).
    pub inputs: u64,
    /// Every hidden layer's output, kept for backward, and the logits.
    pub saved_activations: u64,
    /// The activation-gradient buffers (two, ping-pong; one for a single hidden layer), the
    /// per-sample losses and, above 64K samples, the bias gradient's partial sums per chunk.
    pub transient: u64,
    /// AMP: bf16 copies of the input, the hidden activations and the current gradient.
    pub amp_copies: u64,
}

impl BatchMemory {
    pub fn total(&self) -> u64 {
        self.inputs + self.saved_activations + self.transient + self.amp_copies
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Estimate {
    pub batch: usize,
    pub model: ModelMemory,
    pub batch_memory: BatchMemory,
    pub workspace: u64,
    pub total: u64,
}

pub fn model_memory(arch: &Arch, optimizer: &Optimizer, amp: bool) -> ModelMemory {
    let p = arch.param_count() as u64;
    ModelMemory {
        parameters: 4 * p,
        gradients: 4 * p,
        optimizer_state: 4 * p * optimizer.state_copies() as u64,
        amp_weights: if amp { 2 * p } else { 0 },
    }
}

pub fn batch_memory(arch: &Arch, amp: bool, batch: usize) -> BatchMemory {
    let b = batch as u64;
    let (i, h, c, w, d, g) = (
        arch.input as u64,
        arch.hidden as u64,
        arch.classes as u64,
        arch.max_width() as u64,
        arch.depth as u64,
        gradient_buffers(arch) as u64,
    );
    BatchMemory {
        // Two slots of f32 features and i32 labels.
        inputs: 2 * b * (4 * i + 4),
        saved_activations: 4 * b * (d * h + c),
        // The gradient buffers, this batch's losses and the first step's kept losses; the
        // 4 bytes are the loss kernel's slot counter; the bias partial sums.
        transient: 4 * b * (g * w + 2) + 4 + 4 * bias_scratch_len(arch, batch) as u64,
        amp_copies: if amp { 2 * b * (i + d * h + w) } else { 0 },
    }
}

/// Everything a run at `batch` holds on the device at its peak.
pub fn estimate(arch: &Arch, optimizer: &Optimizer, amp: bool, batch: usize) -> Estimate {
    let model = model_memory(arch, optimizer, amp);
    let batch_memory = batch_memory(arch, amp, batch);
    let workspace = BLAS_WORKSPACE_BYTES as u64;
    Estimate {
        batch,
        model,
        batch_memory,
        workspace,
        total: model.total() + batch_memory.total() + workspace,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::preset::Preset;

    fn sgd() -> Optimizer {
        Optimizer::Sgd {
            momentum: 0.0,
            weight_decay: 0.0,
        }
    }

    #[test]
    fn a_hand_computed_example() {
        // input 4, hidden 3, depth 2, classes 2: params 4*3+3 + 3*3+3 + 3*2+2 = 35.
        let arch = Arch {
            input: 4,
            hidden: 3,
            depth: 2,
            classes: 2,
        };
        let m = model_memory(&arch, &Optimizer::adamw_default(), true);
        assert_eq!(m.parameters, 140);
        assert_eq!(m.gradients, 140);
        assert_eq!(m.optimizer_state, 280, "AdamW: two fp32 moments");
        assert_eq!(m.amp_weights, 70);
        let b = batch_memory(&arch, true, 10);
        assert_eq!(b.inputs, 2 * 10 * (16 + 4));
        assert_eq!(b.saved_activations, 4 * 10 * (6 + 2));
        assert_eq!(b.transient, 4 * 10 * (2 * 3 + 2) + 4);
        assert_eq!(b.amp_copies, 2 * 10 * (4 + 6 + 3));
        let e = estimate(&arch, &Optimizer::adamw_default(), true, 10);
        assert_eq!(e.total, m.total() + b.total() + (32 << 20));
        assert_eq!(model_memory(&arch, &sgd(), false).optimizer_state, 0);
        let momentum = Optimizer::Sgd {
            momentum: 0.9,
            weight_decay: 0.0,
        };
        assert_eq!(model_memory(&arch, &momentum, false).optimizer_state, 140);
    }

    #[test]
    fn one_hidden_layer_needs_one_gradient_buffer() {
        let arch = Arch {
            input: 4,
            hidden: 3,
            depth: 1,
            classes: 2,
        };
        assert_eq!(
            batch_memory(&arch, false, 10).transient,
            4 * 10 * (3 + 2) + 4
        );
    }

    #[test]
    fn large_batches_add_the_bias_partial_sums() {
        // Up to 65536 samples: one pass, no scratch. Above: chunks of 32768 samples, at most
        // 1024, each holding the partial sums of the widest layer output (hidden 3 here).
        let arch = Arch {
            input: 4,
            hidden: 3,
            depth: 2,
            classes: 2,
        };
        let plain = |b: u64| 4 * b * (2 * 3 + 2) + 4;
        assert_eq!(batch_memory(&arch, false, 65536).transient, plain(65536));
        assert_eq!(
            batch_memory(&arch, false, 65537).transient,
            plain(65537) + 4 * 3 * 3
        );
        assert_eq!(
            batch_memory(&arch, false, 1 << 26).transient,
            plain(1 << 26) + 4 * 1024 * 3
        );
    }

    #[test]
    fn matches_peaks_measured_on_an_h200() {
        // Pool high watermarks of bytes in use measured on an H200, SGD.
        let small = Preset::Small.arch();
        let large = Preset::Large.arch();
        for (arch, amp, batch, peak) in [
            (small, false, 1usize, 33_595_472u64),
            (small, false, 1024, 36_075_224),
            (small, false, 8192, 53_450_456),
            (small, true, 8192, 58_702_988),
            (large, false, 1024, 44_775_512),
            (large, false, 8192, 111_237_208),
        ] {
            let e = estimate(&arch, &sgd(), amp, batch).total;
            let err = (e as f64 - peak as f64).abs() / peak as f64;
            assert!(err < 1e-4, "{batch}: {e} vs {peak}");
        }
    }
}
