//! Training data: a seeded synthetic set by default, or features and labels read from a file
//! (`.npy`, `.safetensors`, or `.h5` with the `hdf5` feature), and the sampler the loader's
//! workers run: per-epoch shuffle, gather, per-feature normalization, optional CPU cost.

#[cfg(feature = "hdf5")]
pub mod hdf5;
pub mod npy;
pub mod safetensors;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::verify::Rng;

use crate::loader::BatchSource;

/// A numeric array read from a file, as f64 for any element type, with its shape.
#[derive(Debug, Clone, PartialEq)]
pub struct Array {
    pub shape: Vec<usize>,
    pub data: Vec<f64>,
}

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
        let s = mlp::Samples::synthetic(input, classes, samples, seed);
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

    /// Features and labels as two arrays: `samples x input` (or `samples`, one feature) and
    /// `samples` integer class indices below `classes`.
    pub fn from_arrays(
        features: Array,
        labels: Array,
        classes: usize,
        what: &str,
    ) -> Result<Dataset, String> {
        let samples = *features.shape.first().ok_or_else(|| {
            format!("{what}: the features are a scalar; expected samples x features")
        })?;
        let input = match features.shape.len() {
            1 => 1,
            2 => features.shape[1],
            d => {
                return Err(format!(
                    "{what}: the features have {d} dimensions; expected 2 (samples x features)"
                ))
            }
        };
        if samples == 0 || input == 0 {
            return Err(format!(
                "{what}: the features are empty (shape {:?})",
                features.shape
            ));
        }
        let label_count = match labels.shape.as_slice() {
            [n] => *n,
            [n, 1] => *n,
            other => {
                return Err(format!(
                    "{what}: the labels have shape {other:?}; expected one label per sample"
                ))
            }
        };
        if label_count != samples {
            return Err(format!(
                "{what}: {samples} samples of features but {label_count} labels; they must match"
            ));
        }
        let mut ints = Vec::with_capacity(samples);
        for (i, &l) in labels.data.iter().enumerate() {
            if l.fract() != 0.0 || l < 0.0 || l >= classes as f64 {
                return Err(format!(
                    "{what}: label {i} is {l}; labels must be whole class indices 0..{} (set the model's classes)",
                    classes - 1
                ));
            }
            ints.push(l as i32);
        }
        if let Some(i) = features.data.iter().position(|v| !v.is_finite()) {
            return Err(format!("{what}: feature value {i} is not finite"));
        }
        let features = features.data.iter().map(|&v| v as f32).collect();
        Ok(Dataset::new(input, features, ints))
    }

    /// Read features and labels from `path` by its extension. A `.npy` holds one array, so its
    /// labels come from `labels` (another `.npy`); the other formats hold both, named
    /// `features` and `labels` (or `x` and `y`).
    pub fn from_file(
        path: &Path,
        labels: Option<&Path>,
        classes: usize,
    ) -> Result<Dataset, String> {
        let what = path.display().to_string();
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .unwrap_or("")
            .to_ascii_lowercase();
        let (f, l) = match ext.as_str() {
            "npy" => {
                let labels = labels.ok_or_else(|| {
                    format!("{what}: a .npy file holds one array; give the labels with --labels FILE.npy")
                })?;
                (npy::read(path)?, npy::read(labels)?)
            }
            "safetensors" => {
                let tensors = safetensors::read(path)?;
                pick_pair(tensors, &what)?
            }
            "h5" | "hdf5" => {
                #[cfg(feature = "hdf5")]
                {
                    pick_pair(hdf5::read(path)?, &what)?
                }
                #[cfg(not(feature = "hdf5"))]
                {
                    return Err(format!(
                        "{what}: HDF5 support is not built in; rebuild with `--features hdf5` (needs libhdf5)"
                    ));
                }
            }
            _ => {
                return Err(format!(
                    "{what}: unknown data format '.{ext}'; use .npy, .safetensors or .h5"
                ))
            }
        };
        Dataset::from_arrays(f, l, classes, &what)
    }

    pub fn samples(&self) -> usize {
        self.labels.len()
    }
}

/// The features and labels out of named arrays.
fn pick_pair(mut arrays: Vec<(String, Array)>, what: &str) -> Result<(Array, Array), String> {
    let mut take = |names: &[&str]| {
        arrays
            .iter()
            .position(|(n, _)| names.contains(&n.as_str()))
            .map(|i| arrays.remove(i).1)
    };
    let f = take(&["features", "x", "X"]);
    let l = take(&["labels", "y", "Y"]);
    match (f, l) {
        (Some(f), Some(l)) => Ok((f, l)),
        _ => Err(format!(
            "{what}: expected arrays named 'features' and 'labels' (or 'x' and 'y')"
        )),
    }
}

/// What a worker does for a batch: position k*batch.. of a stream of per-epoch permutations.
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
        let mut cache = self.permutations.lock().unwrap_or_else(|p| p.into_inner());
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

    fn arr(shape: &[usize], data: Vec<f64>) -> Array {
        Array {
            shape: shape.to_vec(),
            data,
        }
    }

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
        // The same index gives the same batch (deterministic), a batch across the epoch edge works.
        let s = Sampler::new(data, 5, 7, Duration::ZERO);
        let (mut a, mut b) = (vec![0f32; 15], vec![0f32; 15]);
        let mut l = vec![0i32; 5];
        s.fill(2, &mut a, &mut l);
        s.fill(2, &mut b, &mut l);
        assert_eq!(a, b);
    }

    #[test]
    fn normalization_centres_the_features() {
        let d = Dataset::from_arrays(
            arr(&[4, 2], vec![1.0, 10.0, 3.0, 10.0, 5.0, 10.0, 7.0, 10.0]),
            arr(&[4], vec![0.0, 1.0, 1.0, 0.0]),
            2,
            "t",
        )
        .unwrap();
        let s = Sampler::new(Arc::new(d), 4, 1, Duration::ZERO);
        let mut f = vec![0f32; 8];
        let mut l = vec![0i32; 4];
        s.fill(0, &mut f, &mut l);
        let mean0: f32 = f.iter().step_by(2).sum::<f32>() / 4.0;
        assert!(mean0.abs() < 1e-6);
        // A constant feature is centred and left unscaled.
        assert!(f.iter().skip(1).step_by(2).all(|&v| v == 0.0));
    }

    #[test]
    fn mismatched_or_bad_arrays_say_what() {
        let err = |f: Array, l: Array| Dataset::from_arrays(f, l, 3, "d.npy").err().unwrap();
        assert!(err(arr(&[3, 2], vec![0.0; 6]), arr(&[4], vec![0.0; 4]))
            .contains("3 samples of features but 4 labels"));
        assert!(
            err(arr(&[2, 2, 2], vec![0.0; 8]), arr(&[2], vec![0.0; 2])).contains("3 dimensions")
        );
        assert!(err(arr(&[2, 2], vec![0.0; 4]), arr(&[2], vec![0.0, 3.0])).contains("label 1 is 3"));
        assert!(err(arr(&[2, 2], vec![0.0; 4]), arr(&[2], vec![0.5, 1.0])).contains("whole class"));
        assert!(err(arr(&[0, 2], vec![]), arr(&[0], vec![])).contains("empty"));
        assert!(err(arr(&[1, 1], vec![f64::NAN]), arr(&[1], vec![0.0])).contains("not finite"));
    }

    #[test]
    fn unknown_formats_and_missing_labels_are_errors() {
        let e = Dataset::from_file(Path::new("x.csv"), None, 2)
            .err()
            .unwrap();
        assert!(e.contains("unknown data format"));
        let e = Dataset::from_file(Path::new("x.npy"), None, 2)
            .err()
            .unwrap();
        assert!(e.contains("--labels"));
    }
}
