//! Seeded starting points: the initial parameters and a synthetic dataset with something to
//! learn. Both are drawn in seeded chunks (common::verify), so they are the same on every
//! machine and any number of threads.

use common::verify::{normal_f32, seeded_f32, Rng};

use crate::arch::Arch;

/// How the initial weights are scaled: each W is normal with standard deviation
/// `sqrt(gain / fan_in)`, each bias normal with `bias_std` (small, never zeros).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Init {
    /// Gain of the layers followed by a ReLU (2: He initialization).
    pub hidden_gain: f64,
    /// Gain of the output layer, which no ReLU follows.
    pub output_gain: f64,
    pub bias_std: f64,
}

impl Init {
    /// He for the hidden layers, LeCun (gain 1) for the output layer, biases 0.1: ch1-basics's.
    pub const HE_LECUN_OUTPUT: Init = Init {
        hidden_gain: 2.0,
        output_gain: 1.0,
        bias_std: 0.1,
    };
    /// He for every layer, biases 0.05: the tuner's.
    pub const HE: Init = Init {
        hidden_gain: 2.0,
        output_gain: 2.0,
        bias_std: 0.05,
    };
}

/// Seeded initial parameters in the flat layout: layer i's weights from seed + 2i, its biases
/// from seed + 2i + 1.
pub fn initial_params(arch: &Arch, seed: u64, init: Init) -> Vec<f32> {
    let mut p = vec![0f32; arch.param_count()];
    let layers = arch.layers();
    for (i, layer) in layers.iter().enumerate() {
        let s = seed.wrapping_add(2 * i as u64);
        let gain = if i + 1 == layers.len() {
            init.output_gain
        } else {
            init.hidden_gain
        };
        let std = (gain / layer.fan_in as f64).sqrt();
        p[layer.w.clone()]
            .copy_from_slice(&seeded_f32(s, layer.w.len(), |r| (r.normal() * std) as f32));
        p[layer.b.clone()].copy_from_slice(&seeded_f32(s.wrapping_add(1), layer.b.len(), |r| {
            (r.normal() * init.bias_std) as f32
        }));
    }
    p
}

/// Features (`samples x input`, sample-major) and class labels in host memory.
#[derive(Debug, Clone, PartialEq)]
pub struct Samples {
    pub features: Vec<f32>,
    pub labels: Vec<i32>,
}

impl Samples {
    /// Normal features; each label is the class a fixed random linear teacher scores highest,
    /// so there is something to learn and the loss falls.
    pub fn synthetic(input: usize, classes: usize, samples: usize, seed: u64) -> Samples {
        let features = normal_f32(seed, samples * input, 1.0);
        let mut rng = Rng::new(seed ^ 0x7eac_4e55);
        let teacher: Vec<f64> = (0..classes * input).map(|_| rng.normal()).collect();
        let labels = common::par::map(samples, |s| {
            let x = &features[s * input..(s + 1) * input];
            let score = |c: usize| -> f64 {
                let w = &teacher[c * input..(c + 1) * input];
                w.iter().zip(x).map(|(w, &x)| w * x as f64).sum()
            };
            (0..classes)
                .max_by(|&a, &b| score(a).total_cmp(&score(b)))
                .unwrap_or(0) as i32
        });
        Samples { features, labels }
    }

    pub fn len(&self) -> usize {
        self.labels.len()
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_layer_has_its_own_seed_and_scale() {
        let arch = Arch::one_hidden_layer(64);
        let p = initial_params(&arch, 7, Init::HE_LECUN_OUTPUT);
        let layers = arch.layers();
        let std = |r: std::ops::Range<usize>| {
            let v = &p[r];
            (v.iter().map(|&x| (x as f64).powi(2)).sum::<f64>() / v.len() as f64).sqrt()
        };
        // He (sqrt(2/256)) for the hidden layer, LeCun (sqrt(1/64)) for the output layer.
        assert!((std(layers[0].w.clone()) / (2.0f64 / 256.0).sqrt() - 1.0).abs() < 0.02);
        assert!((std(layers[1].w.clone()) / (1.0f64 / 64.0).sqrt() - 1.0).abs() < 0.1);
        assert!(p.iter().all(|&v| v != 0.0), "never zeros");
        // Layer 1's weights come from seed + 2, as if drawn on their own.
        let w1 = seeded_f32(9, layers[1].w.len(), |r| (r.normal() * 0.125) as f32);
        assert_eq!(&p[layers[1].w.clone()], &w1[..]);
        assert_eq!(p, initial_params(&arch, 7, Init::HE_LECUN_OUTPUT));
        assert_ne!(p, initial_params(&arch, 7, Init::HE));
    }

    #[test]
    fn every_class_occurs_in_the_synthetic_labels() {
        let data = Samples::synthetic(16, 10, 512, 3);
        assert_eq!(data.features.len(), 512 * 16);
        let mut seen = [0usize; 10];
        for &l in &data.labels {
            seen[l as usize] += 1;
        }
        assert!(seen.iter().all(|&n| n > 0), "every class occurs: {seen:?}");
        assert_eq!(data, Samples::synthetic(16, 10, 512, 3));
    }
}
