//! The model's shape and the flat parameter layout shared by the host and the GPU.
//!
//! `depth` hidden layers of `hidden` units (Linear -> ReLU each), then Linear(hidden, classes)
//! and softmax cross-entropy. The parameters are one flat vector, layer by layer
//! `[W0 | b0 | W1 | b1 | ...]`, every W row-major `[out][in]` (PyTorch's layout), so one
//! optimizer kernel updates them all and the weights of two runs compare as one vector.

use std::ops::Range;

use serde::{Deserialize, Serialize};

/// Features per sample of the chapter's workload.
pub const INPUT: usize = 256;
/// Classes of the chapter's workload.
pub const CLASSES: usize = 10;

/// Largest width or depth accepted: past this no GPU holds the weights anyway.
pub const MAX_WIDTH: usize = 1 << 20;
pub const MAX_DEPTH: usize = 1024;

/// Layer widths and depth.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Arch {
    pub input: usize,
    pub hidden: usize,
    /// Number of hidden layers (Linear + ReLU); the output Linear comes on top.
    pub depth: usize,
    pub classes: usize,
}

/// One Linear layer's place in the flat parameter vector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layer {
    pub fan_in: usize,
    pub fan_out: usize,
    pub w: Range<usize>,
    pub b: Range<usize>,
}

impl Arch {
    /// The chapter's MLP: `Linear(256, hidden) -> ReLU -> Linear(hidden, 10)`.
    pub fn one_hidden_layer(hidden: usize) -> Arch {
        Arch {
            input: INPUT,
            hidden,
            depth: 1,
            classes: CLASSES,
        }
    }

    /// Every size at least 1 and at most the limits; one line saying which is not.
    pub fn validate(&self) -> Result<(), String> {
        for (name, v, max) in [
            ("input", self.input, MAX_WIDTH),
            ("hidden", self.hidden, MAX_WIDTH),
            ("depth", self.depth, MAX_DEPTH),
            ("classes", self.classes, MAX_WIDTH),
        ] {
            if v == 0 {
                return Err(format!("model {name} must be at least 1"));
            }
            if v > max {
                return Err(format!("model {name} {v} is too large: at most {max}"));
            }
        }
        if self.classes < 2 {
            return Err(
                "model classes must be at least 2 (a softmax over one class learns nothing)".into(),
            );
        }
        Ok(())
    }

    /// The Linear layers, input first.
    pub fn layers(&self) -> Vec<Layer> {
        let mut layers = Vec::with_capacity(self.depth + 1);
        let mut at = 0;
        for l in 0..=self.depth {
            let fan_in = if l == 0 { self.input } else { self.hidden };
            let fan_out = if l == self.depth {
                self.classes
            } else {
                self.hidden
            };
            let w = at..at + fan_in * fan_out;
            let b = w.end..w.end + fan_out;
            at = b.end;
            layers.push(Layer {
                fan_in,
                fan_out,
                w,
                b,
            });
        }
        layers
    }

    pub fn param_count(&self) -> usize {
        self.layers().last().map(|l| l.b.end).unwrap_or(0)
    }

    /// Widest layer output (the activation-gradient buffers are this wide).
    pub fn max_width(&self) -> usize {
        self.hidden.max(self.classes)
    }

    /// FLOPs of forward + backward per sample: every layer's GEMM forward, its weight gradient,
    /// and the input gradient of every layer but the first (nothing needs the input's).
    pub fn flops_per_sample(&self) -> u64 {
        let macs: u64 = self
            .layers()
            .iter()
            .enumerate()
            .map(|(i, l)| {
                let m = (l.fan_in * l.fan_out) as u64;
                if i == 0 {
                    2 * m
                } else {
                    3 * m
                }
            })
            .sum();
        2 * macs
    }

    /// FLOPs of forward + backward over `samples` samples.
    pub fn flops(&self, samples: u64) -> u64 {
        samples * self.flops_per_sample()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> Arch {
        Arch {
            input: 5,
            hidden: 4,
            depth: 2,
            classes: 3,
        }
    }

    #[test]
    fn layout_is_contiguous() {
        let a = tiny();
        let l = a.layers();
        assert_eq!(l.len(), 3);
        assert_eq!(l[0].w, 0..20);
        assert_eq!(l[0].b, 20..24);
        assert_eq!(l[1].w, 24..40);
        assert_eq!(l[2].w, 44..56);
        assert_eq!(a.param_count(), 59);
        // 2 * (20*2 + 16*3 + 12*3)
        assert_eq!(a.flops_per_sample(), 2 * (40 + 48 + 36));
    }

    #[test]
    fn the_chapter_layout_is_contiguous_and_complete() {
        let d = Arch::one_hidden_layer(256);
        let l = d.layers();
        assert_eq!(l.len(), 2);
        assert_eq!(l[0].w, 0..65536);
        assert_eq!(l[0].b, 65536..65792);
        assert_eq!(l[1].w, 65792..68352);
        assert_eq!(l[1].b, 68352..68362);
        assert_eq!(d.param_count(), 68362);
        // 2 * (256*256 + 256*10 + 256*10 + 256*10 + 256*256) per sample
        assert_eq!(d.flops(1), 2 * (2 * 65536 + 3 * 2560));
        assert_eq!(d.flops(16384), 16384 * d.flops(1));
    }

    #[test]
    fn bad_sizes_are_refused() {
        let mut a = tiny();
        a.depth = 0;
        assert!(a.validate().unwrap_err().contains("depth"));
        a = tiny();
        a.classes = 1;
        assert!(a.validate().is_err());
        a = tiny();
        a.hidden = MAX_WIDTH + 1;
        assert!(a.validate().unwrap_err().contains("too large"));
        assert!(tiny().validate().is_ok());
    }
}
