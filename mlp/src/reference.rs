//! The float64 reference the GPU step is checked against: one batch's per-sample losses and
//! parameter gradient at any depth, and a whole plain-SGD run (final parameters and loss
//! curve). Samples are independent in the forward and backward pass and are summed in order
//! into the gradient, so the answer does not depend on the number of threads.

use crate::arch::Arch;

/// What one sample leaves for the gradient.
#[derive(Debug, Clone, Default)]
struct Sample {
    loss: f64,
    /// Each hidden layer's output after the ReLU (the next layer's input).
    hidden: Vec<Vec<f64>>,
    /// Each layer's output gradient (before its ReLU), layer 0 first.
    dz: Vec<Vec<f64>>,
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(a, b)| a * b).sum()
}

/// Per-sample losses and the gradient of `sum(losses) * scale` for one batch (`scale` = 1 /
/// the samples of the optimizer step: the step's mean loss, however it is split).
pub fn loss_and_gradient(
    arch: &Arch,
    params: &[f64],
    features: &[f32],
    labels: &[i32],
    scale: f64,
) -> (Vec<f64>, Vec<f64>) {
    let layers = arch.layers();
    let ni = arch.input;
    let batch = labels.len();
    assert_eq!(params.len(), arch.param_count());
    assert_eq!(features.len(), batch * ni);
    // Forward and backward to every layer's output gradient, one sample per task.
    let samples = common::par::map(batch, |s| {
        let x = &features[s * ni..(s + 1) * ni];
        let mut hidden: Vec<Vec<f64>> = Vec::with_capacity(arch.depth);
        let mut logits = Vec::new();
        for (l, layer) in layers.iter().enumerate() {
            let (w, b) = (&params[layer.w.clone()], &params[layer.b.clone()]);
            let fi = layer.fan_in;
            let z: Vec<f64> = (0..layer.fan_out)
                .map(|o| {
                    let row = &w[o * fi..(o + 1) * fi];
                    b[o] + if l == 0 {
                        row.iter().zip(x).map(|(w, &x)| w * x as f64).sum::<f64>()
                    } else {
                        dot(row, &hidden[l - 1])
                    }
                })
                .collect();
            if l < arch.depth {
                hidden.push(z.iter().map(|v| v.max(0.0)).collect());
            } else {
                logits = z;
            }
        }
        let m = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = logits.iter().map(|z| (z - m).exp()).sum();
        let label = labels[s] as usize;
        let loss = sum.ln() + m - logits[label];
        let mut dz = vec![Vec::new(); layers.len()];
        dz[arch.depth] = (0..arch.classes)
            .map(|c| ((logits[c] - m).exp() / sum - (c == label) as u8 as f64) * scale)
            .collect();
        // The input gradient of layer l (W_l^T dz_l), masked by the ReLU that made its input.
        for l in (1..layers.len()).rev() {
            let layer = &layers[l];
            let w = &params[layer.w.clone()];
            let a = &hidden[l - 1];
            dz[l - 1] = (0..layer.fan_in)
                .map(|j| {
                    if a[j] > 0.0 {
                        (0..layer.fan_out)
                            .map(|o| dz[l][o] * w[o * layer.fan_in + j])
                            .sum()
                    } else {
                        0.0
                    }
                })
                .collect();
        }
        Sample { loss, hidden, dz }
    });
    // Parameter gradients, one output row (its weights and bias) per task, samples in order.
    let rows: Vec<(usize, usize)> = layers
        .iter()
        .enumerate()
        .flat_map(|(l, layer)| (0..layer.fan_out).map(move |o| (l, o)))
        .collect();
    let row_grads = common::par::map(rows.len(), |r| {
        let (l, o) = rows[r];
        let fi = layers[l].fan_in;
        let mut row = vec![0f64; fi + 1];
        for (s, sample) in samples.iter().enumerate() {
            let g = sample.dz[l][o];
            if g == 0.0 {
                continue;
            }
            if l == 0 {
                for (r, &x) in row.iter_mut().zip(&features[s * ni..(s + 1) * ni]) {
                    *r += g * x as f64;
                }
            } else {
                for (r, a) in row.iter_mut().zip(&sample.hidden[l - 1]) {
                    *r += g * a;
                }
            }
            row[fi] += g;
        }
        row
    });
    let mut grad = vec![0f64; params.len()];
    for (&(l, o), row) in rows.iter().zip(&row_grads) {
        let layer = &layers[l];
        let fi = layer.fan_in;
        grad[layer.w.start + o * fi..layer.w.start + (o + 1) * fi].copy_from_slice(&row[..fi]);
        grad[layer.b.start + o] = row[fi];
    }
    (samples.iter().map(|s| s.loss).collect(), grad)
}

/// Mean of each step's per-sample losses: the loss curve.
pub fn loss_curve(per_sample: &[f32], samples_per_step: usize) -> Vec<f64> {
    per_sample
        .chunks(samples_per_step)
        .map(|c| c.iter().map(|&l| l as f64).sum::<f64>() / c.len() as f64)
        .collect()
}

/// A whole training run in float64: final parameters and the loss curve.
#[derive(Debug, Clone)]
pub struct RunReference {
    pub params: Vec<f64>,
    pub losses: Vec<f64>,
}

/// Plain SGD in float64 over `features`/`labels` from `init`, `samples_per_step` samples per
/// step, the gradient the mean over the step's samples.
pub fn train_sgd(
    arch: &Arch,
    init: &[f32],
    features: &[f32],
    labels: &[i32],
    samples_per_step: usize,
    lr: f64,
) -> RunReference {
    let mut params: Vec<f64> = init.iter().map(|&p| p as f64).collect();
    let mut losses = Vec::new();
    let scale = 1.0 / samples_per_step as f64;
    let ni = arch.input;
    for step in 0..labels.len() / samples_per_step {
        let s = step * samples_per_step..(step + 1) * samples_per_step;
        let (l, g) = loss_and_gradient(
            arch,
            &params,
            &features[s.start * ni..s.end * ni],
            &labels[s],
            scale,
        );
        losses.push(l.iter().sum::<f64>() * scale);
        for (p, g) in params.iter_mut().zip(&g) {
            *p -= lr * g;
        }
    }
    RunReference { params, losses }
}
