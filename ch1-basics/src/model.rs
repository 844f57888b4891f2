//! The model every training variant trains, on the host: its shapes, the flat parameter layout
//! shared with the GPU, the seeded initial weights and synthetic dataset, and the float64
//! reference training step the GPU runs are checked against.
//!
//! Model: `Linear(input, hidden) -> ReLU -> Linear(hidden, classes)`, softmax cross-entropy,
//! plain SGD. Layout (PyTorch's): every matrix row-major `[out][in]`, activations sample-major.
//! The parameters are one flat vector `[W1 | b1 | W2 | b2]`, so one SGD kernel updates all of
//! them and the weights of two runs compare as one vector.

use std::ops::Range;

use serde::Serialize;

use common::verify::{seeded_f32, Rng};

/// Features per sample of the lesson's workload.
pub const INPUT: usize = 256;
/// Classes of the lesson's workload.
pub const CLASSES: usize = 10;

/// Layer widths.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Dims {
    pub input: usize,
    pub hidden: usize,
    pub classes: usize,
}

impl Dims {
    /// The lesson's MLP with `hidden` units.
    pub fn mlp(hidden: usize) -> Dims {
        Dims {
            input: INPUT,
            hidden,
            classes: CLASSES,
        }
    }

    pub fn w1(&self) -> Range<usize> {
        0..self.hidden * self.input
    }
    pub fn b1(&self) -> Range<usize> {
        let s = self.w1().end;
        s..s + self.hidden
    }
    pub fn w2(&self) -> Range<usize> {
        let s = self.b1().end;
        s..s + self.classes * self.hidden
    }
    pub fn b2(&self) -> Range<usize> {
        let s = self.w2().end;
        s..s + self.classes
    }
    pub fn param_count(&self) -> usize {
        self.b2().end
    }

    /// Multiply-adds of forward + backward + update for `samples` samples (the two GEMMs
    /// forward, three backward; the input gradient is not needed).
    pub fn flops(&self, samples: u64) -> u64 {
        let (i, h, c) = (self.input as u64, self.hidden as u64, self.classes as u64);
        let gemm_macs = samples * (i * h + h * c) // forward
            + samples * (h * c + h * c + i * h); // dW2, dA1, dW1
        2 * gemm_macs
    }
}

/// Seeded initial parameters: He-normal weights, small random biases (never zeros).
pub fn initial_params(dims: Dims, seed: u64) -> Vec<f32> {
    let mut p = vec![0f32; dims.param_count()];
    let fill = |p: &mut [f32], seed: u64, std: f64| {
        p.copy_from_slice(&seeded_f32(seed, p.len(), |r| (r.normal() * std) as f32));
    };
    fill(&mut p[dims.w1()], seed, (2.0 / dims.input as f64).sqrt());
    fill(&mut p[dims.b1()], seed + 1, 0.1);
    fill(
        &mut p[dims.w2()],
        seed + 2,
        (1.0 / dims.hidden as f64).sqrt(),
    );
    fill(&mut p[dims.b2()], seed + 3, 0.1);
    p
}

/// Training data in host memory, as a data loader would hold it.
pub struct Dataset {
    /// `samples x input`, sample-major.
    pub features: Vec<f32>,
    pub labels: Vec<i32>,
}

impl Dataset {
    /// Normal features; each label is the class a fixed random linear teacher scores highest, so
    /// there is something to learn and the loss falls.
    pub fn synthetic(dims: Dims, samples: usize, seed: u64) -> Dataset {
        let features = common::verify::normal_f32(seed, samples * dims.input, 1.0);
        let mut rng = Rng::new(seed ^ 0x7eac_4e55);
        let teacher: Vec<f64> = (0..dims.classes * dims.input)
            .map(|_| rng.normal())
            .collect();
        let labels = common::par::map(samples, |s| {
            let x = &features[s * dims.input..(s + 1) * dims.input];
            let score = |c: usize| -> f64 {
                let w = &teacher[c * dims.input..(c + 1) * dims.input];
                w.iter().zip(x).map(|(w, &x)| w * x as f64).sum()
            };
            (0..dims.classes)
                .max_by(|&a, &b| score(a).total_cmp(&score(b)))
                .unwrap_or(0) as i32
        });
        Dataset { features, labels }
    }

    pub fn samples(&self) -> usize {
        self.labels.len()
    }
}

/// Mean of each step's per-sample losses: the loss curve.
pub fn loss_curve(per_sample: &[f32], samples_per_step: usize) -> Vec<f64> {
    per_sample
        .chunks(samples_per_step)
        .map(|c| c.iter().map(|&l| l as f64).sum::<f64>() / c.len() as f64)
        .collect()
}

/// Per-sample losses and the gradient of `sum(losses) * scale` for one batch, in float64.
pub fn loss_and_gradient(
    dims: Dims,
    params: &[f64],
    features: &[f32],
    labels: &[i32],
    scale: f64,
) -> (Vec<f64>, Vec<f64>) {
    let (ni, nh, nc) = (dims.input, dims.hidden, dims.classes);
    let batch = labels.len();
    let (w1, b1, w2, b2) = (
        &params[dims.w1()],
        &params[dims.b1()],
        &params[dims.w2()],
        &params[dims.b2()],
    );
    // Forward, one sample per task: hidden activations, loss and the logits' gradient.
    let per_sample = common::par::map(batch, |s| {
        let x = &features[s * ni..(s + 1) * ni];
        let a1: Vec<f64> = (0..nh)
            .map(|h| {
                let w = &w1[h * ni..(h + 1) * ni];
                let z = b1[h] + w.iter().zip(x).map(|(w, &x)| w * x as f64).sum::<f64>();
                z.max(0.0)
            })
            .collect();
        let z2: Vec<f64> = (0..nc)
            .map(|c| b2[c] + dot(&w2[c * nh..(c + 1) * nh], &a1))
            .collect();
        let m = z2.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = z2.iter().map(|z| (z - m).exp()).sum();
        let label = labels[s] as usize;
        let loss = sum.ln() + m - z2[label];
        let dz2: Vec<f64> = (0..nc)
            .map(|c| ((z2[c] - m).exp() / sum - (c == label) as u8 as f64) * scale)
            .collect();
        // dA1 = W2^T dz2, masked by the ReLU.
        let dz1: Vec<f64> = (0..nh)
            .map(|h| {
                if a1[h] > 0.0 {
                    (0..nc).map(|c| dz2[c] * w2[c * nh + h]).sum()
                } else {
                    0.0
                }
            })
            .collect();
        (loss, a1, dz2, dz1)
    });
    let losses = per_sample.iter().map(|p| p.0).collect();
    let mut grad = vec![0f64; dims.param_count()];
    // Parameter gradients, one output row per task, samples summed in order.
    let dw1_rows = common::par::map(nh, |h| {
        let mut row = vec![0f64; ni + 1];
        for (s, (_, _, _, dz1)) in per_sample.iter().enumerate() {
            let g = dz1[h];
            if g != 0.0 {
                for (r, &x) in row.iter_mut().zip(&features[s * ni..(s + 1) * ni]) {
                    *r += g * x as f64;
                }
                row[ni] += g;
            }
        }
        row
    });
    for (h, row) in dw1_rows.iter().enumerate() {
        grad[dims.w1()][h * ni..(h + 1) * ni].copy_from_slice(&row[..ni]);
        grad[dims.b1()][h] = row[ni];
    }
    for (_, a1, dz2, _) in &per_sample {
        for c in 0..nc {
            let g = dz2[c];
            let row = &mut grad[dims.w2()][c * nh..(c + 1) * nh];
            for (r, a) in row.iter_mut().zip(a1) {
                *r += g * a;
            }
            grad[dims.b2()][c] += g;
        }
    }
    (losses, grad)
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(a, b)| a * b).sum()
}

/// The float64 reference of a whole training run: final parameters and the loss curve.
pub struct ReferenceRun {
    pub params: Vec<f64>,
    pub losses: Vec<f64>,
}

/// Train in float64 on `data` from `init`, `samples_per_step` samples per SGD step, gradient
/// the mean over the step's samples.
pub fn train_reference(
    dims: Dims,
    init: &[f32],
    data: &Dataset,
    samples_per_step: usize,
    lr: f64,
) -> ReferenceRun {
    let mut params: Vec<f64> = init.iter().map(|&p| p as f64).collect();
    let mut losses = Vec::new();
    let scale = 1.0 / samples_per_step as f64;
    for step in 0..data.samples() / samples_per_step {
        let s = step * samples_per_step..(step + 1) * samples_per_step;
        let (l, g) = loss_and_gradient(
            dims,
            &params,
            &data.features[s.start * dims.input..s.end * dims.input],
            &data.labels[s],
            scale,
        );
        losses.push(l.iter().sum::<f64>() * scale);
        for (p, g) in params.iter_mut().zip(&g) {
            *p -= lr * g;
        }
    }
    ReferenceRun { params, losses }
}

/// Float64 multiply-adds the reference does for a run (to decide whether it is affordable).
pub fn reference_cost_flops(dims: Dims, samples: usize) -> u64 {
    dims.flops(samples as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> Dims {
        Dims {
            input: 7,
            hidden: 5,
            classes: 4,
        }
    }

    fn mean_loss(dims: Dims, p: &[f64], data: &Dataset) -> f64 {
        let (l, _) = loss_and_gradient(dims, p, &data.features, &data.labels, 1.0);
        l.iter().sum::<f64>() / l.len() as f64
    }

    #[test]
    fn gradients_match_finite_differences() {
        let dims = tiny();
        let data = Dataset::synthetic(dims, 6, 11);
        let p: Vec<f64> = initial_params(dims, 5).iter().map(|&v| v as f64).collect();
        let (_, grad) = loss_and_gradient(dims, &p, &data.features, &data.labels, 1.0 / 6.0);
        let h = 1e-6;
        let mut worst = 0.0f64;
        for i in 0..dims.param_count() {
            let mut plus = p.clone();
            let mut minus = p.clone();
            plus[i] += h;
            minus[i] -= h;
            let fd = (mean_loss(dims, &plus, &data) - mean_loss(dims, &minus, &data)) / (2.0 * h);
            let err = (fd - grad[i]).abs() / (fd.abs() + grad[i].abs()).max(1e-7);
            worst = worst.max(err);
            assert!(err < 1e-5, "parameter {i}: analytic {} vs FD {fd}", grad[i]);
        }
        assert!(worst > 0.0, "the check compared something");
    }

    #[test]
    fn a_wrong_gradient_would_be_caught() {
        // The check above is sensitive: perturbing one gradient entry by 1% is far over 1e-5.
        let dims = tiny();
        let data = Dataset::synthetic(dims, 6, 11);
        let p: Vec<f64> = initial_params(dims, 5).iter().map(|&v| v as f64).collect();
        let (_, grad) = loss_and_gradient(dims, &p, &data.features, &data.labels, 1.0 / 6.0);
        let i = dims.w2().start;
        let mut plus = p.clone();
        let mut minus = p.clone();
        plus[i] += 1e-6;
        minus[i] -= 1e-6;
        let fd = (mean_loss(dims, &plus, &data) - mean_loss(dims, &minus, &data)) / 2e-6;
        assert!(((fd - grad[i] * 1.01) / fd).abs() > 1e-3);
    }

    #[test]
    fn layout_is_contiguous_and_complete() {
        let d = Dims::mlp(256);
        assert_eq!(d.w1(), 0..65536);
        assert_eq!(d.b1(), 65536..65792);
        assert_eq!(d.w2(), 65792..68352);
        assert_eq!(d.b2(), 68352..68362);
        assert_eq!(d.param_count(), 68362);
        // 2 * (256*256 + 256*10 + 256*10 + 256*10 + 256*256) per sample
        assert_eq!(d.flops(1), 2 * (2 * 65536 + 3 * 2560));
    }

    #[test]
    fn labels_are_learnable_and_training_lowers_the_loss() {
        let dims = Dims::mlp(16);
        let data = Dataset::synthetic(dims, 512, 3);
        let mut seen = [0usize; CLASSES];
        for &l in &data.labels {
            seen[l as usize] += 1;
        }
        assert!(seen.iter().all(|&n| n > 0), "every class occurs: {seen:?}");
        let run = train_reference(dims, &initial_params(dims, 1), &data, 32, 0.05);
        assert_eq!(run.losses.len(), 16);
        assert!(
            run.losses[15] < run.losses[0],
            "loss falls: {:?}",
            run.losses
        );
    }

    #[test]
    fn accumulating_microbatches_is_the_same_gradient() {
        // 4 x 8 with scale 1/32 summed = one batch of 32 with scale 1/32 (up to rounding).
        let dims = tiny();
        let data = Dataset::synthetic(dims, 32, 9);
        let p: Vec<f64> = initial_params(dims, 2).iter().map(|&v| v as f64).collect();
        let (_, whole) = loss_and_gradient(dims, &p, &data.features, &data.labels, 1.0 / 32.0);
        let mut acc = vec![0f64; whole.len()];
        for m in 0..4 {
            let (_, g) = loss_and_gradient(
                dims,
                &p,
                &data.features[m * 8 * dims.input..(m + 1) * 8 * dims.input],
                &data.labels[m * 8..(m + 1) * 8],
                1.0 / 32.0,
            );
            for (a, g) in acc.iter_mut().zip(&g) {
                *a += g;
            }
        }
        for (a, w) in acc.iter().zip(&whole) {
            assert!((a - w).abs() <= 1e-14 * w.abs().max(1.0));
        }
    }

    #[test]
    fn loss_curve_is_per_step_means() {
        assert_eq!(loss_curve(&[1.0, 3.0, 2.0, 2.0], 2), vec![2.0, 2.0]);
    }
}
