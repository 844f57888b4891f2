//! The model the tuner trains: ch1-basics's MLP generalized to any depth. `depth` hidden layers
//! of `hidden` units (Linear -> ReLU each), then Linear(hidden, classes), softmax
//! cross-entropy. Parameters are one flat vector, layer by layer `[W0 | b0 | W1 | b1 | ...]`,
//! every W row-major `[out][in]` (PyTorch's layout), so one optimizer kernel updates them all.
//!
//! Also here: the presets, the optimizer's settings, and a float64 reference of one step that the
//! GPU tests check the device step against.

use std::ops::Range;

use serde::{Deserialize, Serialize};

use common::verify::seeded_f32;

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

/// The named sizes, as the usual guides have them (input 256 and 10 classes, ch1-basics's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Preset {
    Small,
    Medium,
    Large,
}

impl Preset {
    pub const ALL: [Preset; 3] = [Preset::Small, Preset::Medium, Preset::Large];

    pub fn name(self) -> &'static str {
        match self {
            Preset::Small => "small",
            Preset::Medium => "medium",
            Preset::Large => "large",
        }
    }

    pub fn by_name(name: &str) -> Option<Preset> {
        Preset::ALL.into_iter().find(|p| p.name() == name)
    }

    pub fn arch(self) -> Arch {
        let (depth, hidden) = match self {
            Preset::Small => (3, 16),
            Preset::Medium => (6, 64),
            Preset::Large => (12, 128),
        };
        Arch {
            input: ch1_basics::model::INPUT,
            hidden,
            depth,
            classes: ch1_basics::model::CLASSES,
        }
    }
}

/// Largest width or depth the tool accepts: past this no GPU holds the weights anyway.
pub const MAX_WIDTH: usize = 1 << 20;
pub const MAX_DEPTH: usize = 1024;

impl Arch {
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
        if self.classes > i32::MAX as usize {
            return Err("too many classes".into());
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
    /// and the input gradient of every layer but the first.
    pub fn flops_per_sample(&self) -> u64 {
        let layers = self.layers();
        let macs: u64 = layers
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
}

/// Seeded initial parameters: He-normal weights (fan-in), small random biases.
pub fn initial_params(arch: &Arch, seed: u64) -> Vec<f32> {
    let mut p = vec![0f32; arch.param_count()];
    for (i, layer) in arch.layers().iter().enumerate() {
        let s = seed.wrapping_add(2 * i as u64);
        let std = (2.0 / layer.fan_in as f64).sqrt();
        p[layer.w.clone()]
            .copy_from_slice(&seeded_f32(s, layer.w.len(), |r| (r.normal() * std) as f32));
        p[layer.b.clone()].copy_from_slice(&seeded_f32(s + 1, layer.b.len(), |r| {
            (r.normal() * 0.05) as f32
        }));
    }
    p
}

/// The optimizer and its settings.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Optimizer {
    /// SGD; momentum 0 is plain SGD (no velocity buffer).
    Sgd { momentum: f32, weight_decay: f32 },
    /// AdamW (decoupled weight decay), PyTorch's defaults for the betas and epsilon.
    AdamW {
        beta1: f32,
        beta2: f32,
        eps: f32,
        weight_decay: f32,
    },
}

impl Optimizer {
    pub fn adamw_default() -> Optimizer {
        Optimizer::AdamW {
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.01,
        }
    }

    /// fp32 state buffers per parameter: SGD none, momentum one, AdamW two.
    pub fn state_copies(&self) -> usize {
        match self {
            Optimizer::Sgd { momentum, .. } if *momentum == 0.0 => 0,
            Optimizer::Sgd { .. } => 1,
            Optimizer::AdamW { .. } => 2,
        }
    }

    pub fn name(&self) -> String {
        match self {
            Optimizer::Sgd { momentum, .. } if *momentum == 0.0 => "sgd".into(),
            Optimizer::Sgd { momentum, .. } => format!("sgd (momentum {momentum})"),
            Optimizer::AdamW { .. } => "adamw".into(),
        }
    }
}

/// Mean loss over the batch and its gradient, in float64: the reference for the GPU step.
pub fn loss_and_gradient(
    arch: &Arch,
    params: &[f64],
    features: &[f32],
    labels: &[i32],
) -> (f64, Vec<f64>) {
    let layers = arch.layers();
    let batch = labels.len();
    let mut grad = vec![0f64; params.len()];
    let mut total_loss = 0.0;
    for s in 0..batch {
        // Forward, keeping every layer's input.
        let mut inputs: Vec<Vec<f64>> = Vec::with_capacity(layers.len());
        let mut a: Vec<f64> = features[s * arch.input..(s + 1) * arch.input]
            .iter()
            .map(|&x| x as f64)
            .collect();
        for (i, l) in layers.iter().enumerate() {
            let w = &params[l.w.clone()];
            let b = &params[l.b.clone()];
            let z: Vec<f64> = (0..l.fan_out)
                .map(|o| {
                    b[o] + w[o * l.fan_in..(o + 1) * l.fan_in]
                        .iter()
                        .zip(&a)
                        .map(|(w, x)| w * x)
                        .sum::<f64>()
                })
                .collect();
            inputs.push(std::mem::take(&mut a));
            a = if i + 1 < layers.len() {
                z.iter().map(|v| v.max(0.0)).collect()
            } else {
                z
            };
        }
        let m = a.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = a.iter().map(|z| (z - m).exp()).sum();
        let label = labels[s] as usize;
        total_loss += sum.ln() + m - a[label];
        let mut dz: Vec<f64> = (0..arch.classes)
            .map(|c| ((a[c] - m).exp() / sum - (c == label) as u8 as f64) / batch as f64)
            .collect();
        // Backward.
        for (i, l) in layers.iter().enumerate().rev() {
            let x = &inputs[i];
            for o in 0..l.fan_out {
                let g = dz[o];
                grad[l.b.start + o] += g;
                let row = &mut grad[l.w.start + o * l.fan_in..l.w.start + (o + 1) * l.fan_in];
                for (r, xv) in row.iter_mut().zip(x) {
                    *r += g * xv;
                }
            }
            if i > 0 {
                let w = &params[l.w.clone()];
                dz = (0..l.fan_in)
                    .map(|j| {
                        if x[j] > 0.0 {
                            (0..l.fan_out).map(|o| dz[o] * w[o * l.fan_in + j]).sum()
                        } else {
                            0.0
                        }
                    })
                    .collect();
            }
        }
    }
    (total_loss / batch as f64, grad)
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
    fn presets_match_the_issue() {
        assert_eq!(Preset::Small.arch().depth, 3);
        assert_eq!(Preset::Small.arch().hidden, 16);
        assert_eq!(Preset::Medium.arch().hidden, 64);
        assert_eq!(Preset::Large.arch().depth, 12);
        assert_eq!(Preset::by_name("large"), Some(Preset::Large));
        assert_eq!(Preset::by_name("huge"), None);
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
    }

    #[test]
    fn gradient_matches_finite_differences() {
        let arch = tiny();
        let x = common::verify::normal_f32(3, 6 * arch.input, 1.0);
        let labels = vec![0, 1, 2, 1, 0, 2];
        let p: Vec<f64> = initial_params(&arch, 9).iter().map(|&v| v as f64).collect();
        let (_, g) = loss_and_gradient(&arch, &p, &x, &labels);
        for i in 0..p.len() {
            let (mut a, mut b) = (p.clone(), p.clone());
            a[i] += 1e-6;
            b[i] -= 1e-6;
            let fd = (loss_and_gradient(&arch, &a, &x, &labels).0
                - loss_and_gradient(&arch, &b, &x, &labels).0)
                / 2e-6;
            let err = (fd - g[i]).abs() / (fd.abs() + g[i].abs()).max(1e-7);
            assert!(err < 1e-5, "parameter {i}: {} vs {fd}", g[i]);
        }
    }

    #[test]
    fn optimizer_state_copies() {
        let plain = Optimizer::Sgd {
            momentum: 0.0,
            weight_decay: 0.0,
        };
        let mom = Optimizer::Sgd {
            momentum: 0.9,
            weight_decay: 0.0,
        };
        assert_eq!(plain.state_copies(), 0);
        assert_eq!(mom.state_copies(), 1);
        assert_eq!(Optimizer::adamw_default().state_copies(), 2);
    }
}
