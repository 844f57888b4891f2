//! The training data and what a loader worker does for a batch: a seeded synthetic set held in
//! host memory with its per-feature statistics, and the sampler that shuffles it per epoch,
//! gathers a batch's rows, normalizes them and spends the CPU time decoding would.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::par::lock;
use common::verify::Rng;

use crate::data::Samples;
use crate::train::loader::BatchSource;

/// Features (`samples x input`) and labels in host memory, with per-feature statistics.
pub struct Dataset {
    pub input: usize,
    pub features: Vec<f32>,
    pub labels: Vec<i32>,
    mean: Vec<f32>,
    inv_std: Vec<f32>,
}

impl Dataset {
    /// The `mlp` crate's synthetic set: normal features, labels from a fixed random linear
    /// teacher, so the loss can fall.
    pub fn synthetic(input: usize, classes: usize, samples: usize, seed: u64) -> Dataset {
        let s = Samples::synthetic(input, classes, samples, seed);
        Dataset::new(input, s.features, s.labels)
    }

    fn new(input: usize, features: Vec<f32>, labels: Vec<i32>) -> Dataset {
        let n = labels.len().max(1) as f64;
        let mut sum = vec![0f64; input];
        let mut sq = vec![0f64; input];
        for row in features.chunks(input) {
            for (f, &x) in row.iter().enumerate() {
                sum[f] += x as f64;
                sq[f] += x as f64 * x as f64;
            }
        }
        let mean: Vec<f32> = sum.iter().map(|s| (s / n) as f32).collect();
        let inv_std = sum
            .iter()
            .zip(&sq)
            .map(|(s, q)| {
                let var = (q / n - (s / n) * (s / n)).max(0.0);
                if var > 1e-12 {
                    (1.0 / var.sqrt()) as f32
                } else {
                    1.0
                }
            })
            .collect();
        Dataset {
            input,
            features,
            labels,
            mean,
            inv_std,
        }
    }

    pub fn samples(&self) -> usize {
        self.labels.len()
    }
}

/// Batch k is positions k*batch.. of a stream of per-epoch permutations of the dataset.
pub struct Sampler {
    pub data: Arc<Dataset>,
    pub batch: usize,
    pub seed: u64,
    /// Busy CPU time per sample, imitating decoding.
    pub cost_per_sample: Duration,
    permutations: Mutex<Vec<(usize, Arc<Vec<u32>>)>>,
}

impl Sampler {
    pub fn new(data: Arc<Dataset>, batch: usize, seed: u64, cost_per_sample: Duration) -> Sampler {
        Sampler {
            data,
            batch,
            seed,
            cost_per_sample,
            permutations: Mutex::new(Vec::new()),
        }
    }

    /// The shuffled order of epoch `e` (Fisher-Yates, seeded by the epoch), cached for a few.
    fn permutation(&self, e: usize) -> Arc<Vec<u32>> {
        let mut cache = lock(&self.permutations);
        if let Some((_, p)) = cache.iter().find(|(k, _)| *k == e) {
            return p.clone();
        }
        let n = self.data.samples();
        let mut p: Vec<u32> = (0..n as u32).collect();
        let mut rng = Rng::new(self.seed ^ (e as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        for i in (1..n).rev() {
            let j = (rng.next_u64() % (i as u64 + 1)) as usize;
            p.swap(i, j);
        }
        let p = Arc::new(p);
        cache.push((e, p.clone()));
        if cache.len() > 8 {
            cache.remove(0);
        }
        p
    }
}

impl BatchSource for Sampler {
    fn fill(&self, index: usize, features: &mut [f32], labels: &mut [i32]) {
        let started = Instant::now();
        let d = &self.data;
        let (n, input) = (d.samples(), d.input);
        let mut perm = self.permutation((index * self.batch) / n);
        for s in 0..self.batch {
            let pos = index * self.batch + s;
            if pos % n == 0 && s > 0 {
                perm = self.permutation(pos / n);
            }
            let src = perm[pos % n] as usize;
            let row = &d.features[src * input..(src + 1) * input];
            let out = &mut features[s * input..(s + 1) * input];
            for f in 0..input {
                out[f] = (row[f] - d.mean[f]) * d.inv_std[f];
            }
            labels[s] = d.labels[src];
        }
        let cost = self.cost_per_sample * self.batch as u32;
        while started.elapsed() < cost {
            std::hint::spin_loop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sampler_visits_every_sample_once_per_epoch() {
        let data = Arc::new(Dataset::synthetic(3, 4, 12, 1));
        let s = Sampler::new(data.clone(), 4, 7, Duration::ZERO);
        let mut seen = Vec::new();
        for k in 0..3 {
            let mut f = vec![0f32; 12];
            let mut l = vec![0i32; 4];
            s.fill(k, &mut f, &mut l);
            for row in f.chunks(3) {
                seen.push(row.to_vec());
            }
        }
        // Normalized rows are distinct for distinct samples: 12 different rows.
        seen.sort_by(|a, b| a.partial_cmp(b).unwrap());
        seen.dedup();
        assert_eq!(seen.len(), 12);
        // The same index gives the same batch; a batch across the epoch edge works.
        let s = Sampler::new(data, 5, 7, Duration::ZERO);
        let (mut a, mut b) = (vec![0f32; 15], vec![0f32; 15]);
        let mut l = vec![0i32; 5];
        s.fill(2, &mut a, &mut l);
        s.fill(2, &mut b, &mut l);
        assert_eq!(a, b);
    }

    #[test]
    fn a_batch_larger_than_the_dataset_spans_epochs() {
        let data = Arc::new(Dataset::synthetic(2, 3, 5, 4));
        let s = Sampler::new(data, 12, 9, Duration::ZERO);
        let mut f = vec![f32::NAN; 24];
        let mut l = vec![-1i32; 12];
        s.fill(1, &mut f, &mut l);
        assert!(f.iter().all(|v| v.is_finite()));
        assert!(l.iter().all(|&c| (0..3).contains(&c)));
    }

    #[test]
    fn normalization_centres_and_scales_the_features() {
        let data = Dataset::synthetic(4, 3, 4096, 2);
        let s = Sampler::new(Arc::new(data), 4096, 1, Duration::ZERO);
        let mut f = vec![0f32; 4 * 4096];
        let mut l = vec![0i32; 4096];
        s.fill(0, &mut f, &mut l);
        for feature in 0..4 {
            let col: Vec<f64> = f
                .iter()
                .skip(feature)
                .step_by(4)
                .map(|&v| v as f64)
                .collect();
            let mean = col.iter().sum::<f64>() / col.len() as f64;
            let var = col.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / col.len() as f64;
            assert!(mean.abs() < 1e-5, "feature {feature}: mean {mean}");
            assert!(
                (var - 1.0).abs() < 1e-4,
                "feature {feature}: variance {var}"
            );
        }
    }

    #[test]
    fn the_cpu_cost_is_spent_per_sample() {
        let data = Arc::new(Dataset::synthetic(2, 3, 16, 4));
        let s = Sampler::new(data, 8, 9, Duration::from_micros(500));
        let (mut f, mut l) = (vec![0f32; 16], vec![0i32; 8]);
        let t = Instant::now();
        s.fill(0, &mut f, &mut l);
        assert!(t.elapsed() >= Duration::from_millis(4));
    }
}
