//! The float64 reference, on the CPU: its gradient against finite differences at depth 1 and 2,
//! gradient accumulation over microbatches, and a training run that learns.

use mlp::reference::{loss_and_gradient, loss_curve, train_sgd};
use mlp::{initial_params, Arch, Init, Samples, CLASSES};

fn tiny() -> Arch {
    Arch {
        input: 7,
        hidden: 5,
        depth: 1,
        classes: 4,
    }
}

fn deeper() -> Arch {
    Arch {
        input: 5,
        hidden: 4,
        depth: 2,
        classes: 3,
    }
}

fn params(arch: &Arch, seed: u64, init: Init) -> Vec<f64> {
    initial_params(arch, seed, init)
        .iter()
        .map(|&v| v as f64)
        .collect()
}

fn mean_loss(arch: &Arch, p: &[f64], data: &Samples) -> f64 {
    let (l, _) = loss_and_gradient(arch, p, &data.features, &data.labels, 1.0);
    l.iter().sum::<f64>() / l.len() as f64
}

#[test]
fn gradients_match_finite_differences() {
    let arch = tiny();
    let data = Samples::synthetic(arch.input, arch.classes, 6, 11);
    let p = params(&arch, 5, Init::HE_LECUN_OUTPUT);
    let (_, grad) = loss_and_gradient(&arch, &p, &data.features, &data.labels, 1.0 / 6.0);
    let h = 1e-6;
    let mut worst = 0.0f64;
    for i in 0..arch.param_count() {
        let mut plus = p.clone();
        let mut minus = p.clone();
        plus[i] += h;
        minus[i] -= h;
        let fd = (mean_loss(&arch, &plus, &data) - mean_loss(&arch, &minus, &data)) / (2.0 * h);
        let err = (fd - grad[i]).abs() / (fd.abs() + grad[i].abs()).max(1e-7);
        worst = worst.max(err);
        assert!(err < 1e-5, "parameter {i}: analytic {} vs FD {fd}", grad[i]);
    }
    assert!(worst > 0.0, "the check compared something");
}

#[test]
fn a_wrong_gradient_would_be_caught() {
    // The check above is sensitive: perturbing one gradient entry by 1% is far over 1e-5.
    let arch = tiny();
    let data = Samples::synthetic(arch.input, arch.classes, 6, 11);
    let p = params(&arch, 5, Init::HE_LECUN_OUTPUT);
    let (_, grad) = loss_and_gradient(&arch, &p, &data.features, &data.labels, 1.0 / 6.0);
    let i = arch.layers()[1].w.start;
    let mut plus = p.clone();
    let mut minus = p.clone();
    plus[i] += 1e-6;
    minus[i] -= 1e-6;
    let fd = (mean_loss(&arch, &plus, &data) - mean_loss(&arch, &minus, &data)) / 2e-6;
    assert!(((fd - grad[i] * 1.01) / fd).abs() > 1e-3);
}

#[test]
fn a_deeper_gradient_matches_finite_differences() {
    let arch = deeper();
    let x = common::verify::normal_f32(3, 6 * arch.input, 1.0);
    let labels = vec![0, 1, 2, 1, 0, 2];
    let p = params(&arch, 9, Init::HE);
    let mean = |p: &[f64]| {
        let (l, _) = loss_and_gradient(&arch, p, &x, &labels, 1.0 / 6.0);
        l.iter().sum::<f64>() / 6.0
    };
    let (_, g) = loss_and_gradient(&arch, &p, &x, &labels, 1.0 / 6.0);
    for i in 0..p.len() {
        let (mut a, mut b) = (p.clone(), p.clone());
        a[i] += 1e-6;
        b[i] -= 1e-6;
        let fd = (mean(&a) - mean(&b)) / 2e-6;
        let err = (fd - g[i]).abs() / (fd.abs() + g[i].abs()).max(1e-7);
        assert!(err < 1e-5, "parameter {i}: {} vs {fd}", g[i]);
    }
}

#[test]
fn labels_are_learnable_and_training_lowers_the_loss() {
    let arch = Arch::one_hidden_layer(16);
    let data = Samples::synthetic(arch.input, arch.classes, 512, 3);
    let mut seen = [0usize; CLASSES];
    for &l in &data.labels {
        seen[l as usize] += 1;
    }
    assert!(seen.iter().all(|&n| n > 0), "every class occurs: {seen:?}");
    let init = initial_params(&arch, 1, Init::HE_LECUN_OUTPUT);
    let run = train_sgd(&arch, &init, &data.features, &data.labels, 32, 0.05);
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
    let arch = tiny();
    let data = Samples::synthetic(arch.input, arch.classes, 32, 9);
    let p = params(&arch, 2, Init::HE_LECUN_OUTPUT);
    let (_, whole) = loss_and_gradient(&arch, &p, &data.features, &data.labels, 1.0 / 32.0);
    let mut acc = vec![0f64; whole.len()];
    for m in 0..4 {
        let (_, g) = loss_and_gradient(
            &arch,
            &p,
            &data.features[m * 8 * arch.input..(m + 1) * 8 * arch.input],
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
