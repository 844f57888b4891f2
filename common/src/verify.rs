//! Proving a variant computes the right thing: seeded random inputs (never zeros), outputs
//! poisoned with NaN before a checked run, and the relative L2 error against a float64 CPU
//! reference, with a tolerance set by the precision the variant computes in.

use serde::{Deserialize, Serialize};

/// SplitMix64: small, fast, and the same sequence on every machine for a given seed.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1) with 53 random bits.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in [lo, hi).
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.next_f64()
    }

    /// Standard normal (Box-Muller).
    pub fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.next_f64(); // (0, 1]
        let u2 = self.next_f64();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }
}

/// Values are drawn in chunks of this many, each chunk from its own stream seeded from
/// (seed, chunk index): the same output on any number of threads.
pub const RNG_CHUNK: usize = 1 << 16;

fn chunk_rng(seed: u64, chunk: usize) -> Rng {
    let mut mix = Rng::new(seed ^ (chunk as u64).wrapping_mul(0xd1b5_4a32_d192_ed03));
    Rng::new(mix.next_u64())
}

/// `n` values, chunk by chunk in parallel, each chunk from its own seeded stream.
pub fn seeded_f32(seed: u64, n: usize, draw: impl Fn(&mut Rng) -> f32 + Sync) -> Vec<f32> {
    let mut out = vec![0f32; n];
    seeded_f32_into(seed, &mut out, draw);
    out
}

/// [seeded_f32] written into `out` (pinned memory, say, with no copy of it made first).
pub fn seeded_f32_into(seed: u64, out: &mut [f32], draw: impl Fn(&mut Rng) -> f32 + Sync) {
    crate::par::for_each_chunk_mut(out, RNG_CHUNK, |chunk_index, chunk| {
        let mut rng = chunk_rng(seed, chunk_index);
        for v in chunk.iter_mut() {
            *v = draw(&mut rng);
        }
    });
}

/// `n` uniform f32 values in [lo, hi) from `seed`.
pub fn uniform_f32(seed: u64, n: usize, lo: f32, hi: f32) -> Vec<f32> {
    let mut out = vec![0f32; n];
    uniform_f32_into(seed, &mut out, lo, hi);
    out
}

/// [uniform_f32] written into `out`.
pub fn uniform_f32_into(seed: u64, out: &mut [f32], lo: f32, hi: f32) {
    seeded_f32_into(seed, out, |rng| rng.uniform(lo as f64, hi as f64) as f32)
}

/// `n` normal f32 values with the given standard deviation from `seed`.
pub fn normal_f32(seed: u64, n: usize, std: f32) -> Vec<f32> {
    seeded_f32(seed, n, |rng| (rng.normal() * std as f64) as f32)
}

/// The arithmetic a variant computes in; it sets the default tolerance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    Fp32,
    Tf32,
    Bf16,
    Fp16,
}

impl Precision {
    /// Default relative-L2 tolerance: fp32 ~1e-5, tf32 ~1e-3, bf16/fp16 ~1e-2.
    pub fn tolerance(self) -> f64 {
        match self {
            Precision::Fp32 => 1e-5,
            Precision::Tf32 => 1e-3,
            Precision::Bf16 | Precision::Fp16 => 1e-2,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::Tf32 => "tf32",
            Precision::Bf16 => "bf16",
            Precision::Fp16 => "fp16",
        }
    }
}

/// The outcome of checking one variant's output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verification {
    /// What was checked: "output", or a named part ("loss curve", "sampled elements").
    #[serde(default = "output_part")]
    pub part: String,
    /// ||got - ref|| / ||ref||; infinite when an element is NaN/inf or lengths differ
    /// (written as null in JSON, which has no infinity).
    #[serde(with = "crate::stats::infinite_as_null")]
    pub rel_l2_error: f64,
    pub tolerance: f64,
    /// Elements that are NaN or infinite: still poisoned (never written) or broken.
    pub non_finite: usize,
    pub elements: usize,
    pub passed: bool,
    /// What the output was compared against ("float64 CPU reference", "the baseline", ...).
    pub against: String,
}

fn output_part() -> String {
    "output".into()
}

impl Verification {
    /// The same check under another part name.
    pub fn named(self, part: impl Into<String>) -> Verification {
        Verification {
            part: part.into(),
            ..self
        }
    }

    /// Short label for a table column: "rel. error", or the part when it is not the output.
    pub fn label(&self) -> String {
        if self.part == "output" {
            "rel. error".into()
        } else {
            format!("{} error", self.part)
        }
    }
}

/// Relative L2 error of `got` (f32 or f64) against a float64 reference: the one place the
/// project computes it.
pub fn rel_l2_error<T: Copy + Into<f64> + Sync>(got: &[T], reference: &[f64]) -> f64 {
    if got.len() != reference.len() {
        return f64::INFINITY;
    }
    rel_l2_error_by(got, |i| reference[i])
}

/// [rel_l2_error] against a reference computed element by element (a closed form too large to
/// keep in memory, or values at sampled positions), in parallel chunks.
pub fn rel_l2_error_by<T: Copy + Into<f64> + Sync>(
    got: &[T],
    reference: impl Fn(usize) -> f64 + Sync,
) -> f64 {
    // Partial sums per chunk, in parallel: (squared difference, squared reference, all finite).
    const CHUNK: usize = 1 << 16;
    let chunks = got.len().div_ceil(CHUNK);
    let partial = crate::par::map(chunks, |c| {
        let range = c * CHUNK..((c + 1) * CHUNK).min(got.len());
        let mut diff = 0.0f64;
        let mut norm = 0.0f64;
        for i in range {
            let g: f64 = got[i].into();
            if !g.is_finite() {
                return (0.0, 0.0, false);
            }
            let r = reference(i);
            diff += (g - r) * (g - r);
            norm += r * r;
        }
        (diff, norm, true)
    });
    if partial.iter().any(|p| !p.2) {
        return f64::INFINITY;
    }
    let diff: f64 = partial.iter().map(|p| p.0).sum();
    let norm: f64 = partial.iter().map(|p| p.1).sum();
    if norm == 0.0 {
        // A zero reference: only an exact zero output matches.
        return if diff == 0.0 { 0.0 } else { f64::INFINITY };
    }
    (diff / norm).sqrt()
}

/// Check `got` against `reference` with `tolerance`.
pub fn check<T: Copy + Into<f64> + Sync>(
    got: &[T],
    reference: &[f64],
    tolerance: f64,
    against: &str,
) -> Verification {
    check_values(got, reference, tolerance, against)
}

/// [check] against a reference of any precision, each value read as float64 where it is
/// compared (another run's f32 output, say, with no float64 copy of it made).
pub fn check_values<T: Copy + Into<f64> + Sync, R: Copy + Into<f64> + Sync>(
    got: &[T],
    reference: &[R],
    tolerance: f64,
    against: &str,
) -> Verification {
    if got.len() != reference.len() {
        return verification(got, f64::INFINITY, tolerance, against);
    }
    check_by(got, |i| reference[i].into(), tolerance, against)
}

/// [check] against a reference computed element by element ([rel_l2_error_by]).
pub fn check_by<T: Copy + Into<f64> + Sync>(
    got: &[T],
    reference: impl Fn(usize) -> f64 + Sync,
    tolerance: f64,
    against: &str,
) -> Verification {
    verification(got, rel_l2_error_by(got, reference), tolerance, against)
}

fn verification<T: Copy + Into<f64>>(
    got: &[T],
    err: f64,
    tolerance: f64,
    against: &str,
) -> Verification {
    let non_finite = got.iter().filter(|&&v| !v.into().is_finite()).count();
    Verification {
        part: output_part(),
        rel_l2_error: err,
        tolerance,
        non_finite,
        elements: got.len(),
        passed: non_finite == 0 && err <= tolerance,
        against: against.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rng_is_reproducible_and_spread() {
        let a = uniform_f32(7, 1000, -1.0, 1.0);
        assert_eq!(a, uniform_f32(7, 1000, -1.0, 1.0));
        assert_ne!(a, uniform_f32(8, 1000, -1.0, 1.0));
        assert!(a.iter().all(|&v| (-1.0..1.0).contains(&v)));
        assert!(a.iter().all(|&v| v != 0.0), "inputs are never zeros");
        let m: f32 = a.iter().sum::<f32>() / 1000.0;
        assert!(m.abs() < 0.1);
    }

    #[test]
    fn values_written_in_place_are_the_drawn_ones() {
        let n = 2 * RNG_CHUNK + 3;
        let mut out = vec![f32::NAN; n];
        uniform_f32_into(11, &mut out, -1.0, 1.0);
        assert_eq!(out, uniform_f32(11, n, -1.0, 1.0));
    }

    #[test]
    fn chunked_generation_is_independent_of_threads() {
        // Deterministic across runs and identical for a prefix of a longer draw.
        let long = uniform_f32(3, 3 * RNG_CHUNK + 5, 0.0, 1.0);
        let short = uniform_f32(3, RNG_CHUNK + 1, 0.0, 1.0);
        assert_eq!(&long[..RNG_CHUNK + 1], &short[..]);
        assert_ne!(
            &long[..100],
            &long[RNG_CHUNK..RNG_CHUNK + 100],
            "chunks differ"
        );
    }

    #[test]
    fn normal_has_unit_variance() {
        let v = normal_f32(1, 100_000, 1.0);
        let mean = v.iter().map(|&x| x as f64).sum::<f64>() / v.len() as f64;
        let var = v.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / v.len() as f64;
        assert!(mean.abs() < 0.02, "mean {mean}");
        assert!((var - 1.0).abs() < 0.02, "variance {var}");
    }

    #[test]
    fn exact_output_passes() {
        let r = vec![1.0f64, -2.0, 3.5];
        let g = vec![1.0f32, -2.0, 3.5];
        let v = check(&g, &r, 1e-5, "ref");
        assert!(v.passed);
        assert_eq!(v.rel_l2_error, 0.0);
        assert_eq!(v.label(), "rel. error");
        assert_eq!(v.named("loss curve").label(), "loss curve error");
    }

    #[test]
    fn one_poisoned_element_fails() {
        let r = vec![1.0f64; 100];
        let mut g = vec![1.0f32; 100];
        g[99] = f32::NAN;
        let v = check(&g, &r, 1e-5, "ref");
        assert!(!v.passed);
        assert_eq!(v.non_finite, 1);
        assert!(v.rel_l2_error.is_infinite());
    }

    #[test]
    fn error_is_relative_l2() {
        let r = vec![3.0f64, 4.0]; // norm 5
        let g = vec![3.0f32, 4.5]; // diff norm 0.5
        assert!((rel_l2_error(&g, &r) - 0.1).abs() < 1e-12);
        assert!(!check(&g, &r, 0.05, "ref").passed);
        assert!(check(&g, &r, 0.2, "ref").passed);
    }

    #[test]
    fn length_mismatch_and_zero_reference() {
        assert!(rel_l2_error(&[1.0f32], &[1.0, 2.0]).is_infinite());
        assert_eq!(rel_l2_error(&[0.0f32], &[0.0]), 0.0);
        assert!(rel_l2_error(&[0.1f32], &[0.0]).is_infinite());
        // float64 outputs (a loss curve) are checked by the same function.
        assert!((rel_l2_error(&[3.0f64, 4.5], &[3.0, 4.0]) - 0.1).abs() < 1e-12);
        assert!(rel_l2_error(&[f64::NAN], &[1.0]).is_infinite());
    }

    #[test]
    fn a_computed_reference_gives_the_same_answer() {
        let r: Vec<f64> = (0..100_000).map(|i| (i as f64).sin()).collect();
        let g: Vec<f32> = r.iter().map(|&x| (x * 1.001) as f32).collect();
        let stored = check(&g, &r, 1e-2, "ref");
        let computed = check_by(&g, |i| (i as f64).sin(), 1e-2, "ref");
        assert_eq!(stored, computed);
        assert!((stored.rel_l2_error - 1e-3).abs() < 1e-6);
        assert!(!check(&g[..10], &r, 1.0, "ref").passed, "lengths differ");
    }

    #[test]
    fn tolerances_grow_as_precision_drops() {
        assert!(Precision::Fp32.tolerance() < Precision::Tf32.tolerance());
        assert!(Precision::Tf32.tolerance() < Precision::Bf16.tolerance());
    }
}
