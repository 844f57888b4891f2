//! The batch-size finder's logic, over any oracle "does batch B fit?" (real training steps on
//! the GPU; a fake in the tests). Grow geometrically from the start until the first failure,
//! then binary-search the multiples of the granularity between the last success and the first
//! failure. With a maximum M, a start S and a granularity G it needs at most
//! floor(log2(M/S)) + 2 trials to bracket M and ceil(log2(M/G)) to pin it, within the bound
//! ceil(log2(M/S)) + ceil(log2(M/G)) + 2.

use serde::Serialize;

/// The search's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Found {
    /// Largest batch at the granularity that fits.
    pub maximum: usize,
    /// Every trial in order: (batch, fitted).
    pub trials: Vec<(usize, bool)>,
    /// Whether `maximum + granularity` (the next candidate) was tried and failed.
    pub next_failed: bool,
}

/// The granularity of the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Granularity {
    Multiple(usize),
    Pow2,
}

impl Granularity {
    /// The multiple to snap to; None for powers of two.
    pub fn multiple(self) -> Option<usize> {
        match self {
            Granularity::Multiple(m) => Some(m),
            Granularity::Pow2 => None,
        }
    }
}

/// The trial bound of the issue: ceil(log2(max/start)) + ceil(log2(max/multiple)) + 2.
pub fn trial_bound(maximum: usize, start: usize, multiple: usize) -> usize {
    let clog2 = |x: f64| {
        if x <= 1.0 {
            0
        } else {
            x.log2().ceil() as usize
        }
    };
    clog2(maximum as f64 / start as f64) + clog2(maximum as f64 / multiple as f64) + 2
}

/// Find the largest fitting batch. `cap` bounds the growth (a batch no GPU could hold).
pub fn find<E>(
    start: usize,
    granularity: Granularity,
    cap: usize,
    mut fits: impl FnMut(usize) -> Result<bool, E>,
) -> Result<Result<Found, String>, E> {
    if start == 0 {
        return Ok(Err("the start batch must be at least 1".into()));
    }
    let mut trials = Vec::new();
    let mut try_batch = |b: usize, trials: &mut Vec<(usize, bool)>| -> Result<bool, E> {
        let ok = fits(b)?;
        trials.push((b, ok));
        Ok(ok)
    };
    if !try_batch(start, &mut trials)? {
        return Ok(Err(format!(
            "batch {start} already runs out of memory: give a smaller --start"
        )));
    }
    // Grow geometrically until the first failure.
    let mut lo = start;
    let hi = loop {
        let next = lo.saturating_mul(2);
        if next > cap {
            // Nothing failed below the cap: the cap is the answer at this granularity.
            let maximum = match granularity {
                Granularity::Pow2 => lo,
                Granularity::Multiple(m) => (cap / m * m).max(lo / m * m),
            };
            if maximum > lo && !try_batch(maximum, &mut trials)? {
                break maximum;
            }
            let snapped_lo = match granularity {
                Granularity::Pow2 => lo,
                Granularity::Multiple(m) => lo / m * m,
            };
            return Ok(Ok(Found {
                maximum: maximum.max(snapped_lo),
                trials,
                next_failed: false,
            }));
        }
        if try_batch(next, &mut trials)? {
            lo = next;
        } else {
            break next;
        }
    };
    let m = match granularity {
        Granularity::Pow2 => {
            return Ok(Ok(Found {
                maximum: lo,
                trials,
                next_failed: true,
            }))
        }
        Granularity::Multiple(m) => m.max(1),
    };
    // Binary search over the multiples k*m with lo < k*m < hi; lo fits, hi fails.
    let mut good = lo / m; // k with k*m <= lo: fits (smaller than a fitting batch)
    let mut bad = hi.div_ceil(m); // k with k*m >= hi: fails
    let mut bad_tried = hi % m == 0;
    while bad - good > 1 {
        let mid = good + (bad - good) / 2;
        if try_batch(mid * m, &mut trials)? {
            good = mid;
        } else {
            bad = mid;
            bad_tried = true;
        }
    }
    if good == 0 {
        return Ok(Err(format!(
            "no multiple of {m} fits (batch {lo} fits, {} does not): use a smaller --multiple-of",
            m
        )));
    }
    Ok(Ok(Found {
        maximum: good * m,
        trials,
        next_failed: bad_tried,
    }))
}

/// Gradient accumulation for a target effective batch.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Accumulation {
    pub target: usize,
    /// Per-step batch and accumulation steps: what is written into the config.
    pub batch: usize,
    pub steps: usize,
    pub effective: usize,
    /// The learning-rate factor the effective batch's change asks for (1 when kept).
    pub lr_scale: f64,
    pub advice: String,
}

fn lr_rule(adam_like: bool) -> &'static str {
    if adam_like {
        "square-root rule for Adam-type optimizers: lr x sqrt(new / old)"
    } else {
        "linear rule for SGD: lr x (new / old)"
    }
}

fn lr_scale(new: usize, old: usize, adam_like: bool) -> f64 {
    let ratio = new as f64 / old as f64;
    if adam_like {
        ratio.sqrt()
    } else {
        ratio
    }
}

/// How to reach a `target` effective batch with per-step batches of at most `limit` (the
/// recommended batch). The fewest accumulation steps whose per-step batch divides the target
/// exactly (looking up to twice the fewest steps possible) keep the effective batch and the
/// learning rate; failing that, the fewest steps with the per-step batch rounded up grow the
/// effective batch a little, and the learning-rate rule says by how much. A target that fits
/// in one step stays as it is: a larger per-step batch would be a larger effective batch, a
/// training change rather than a memory one, so the advice only says what it would take.
pub fn accumulation(target: usize, limit: usize, adam_like: bool) -> Accumulation {
    let target = target.max(1);
    let limit = limit.max(1);
    let fewest = target.div_ceil(limit);
    let exact = (fewest..=2 * fewest).find(|s| target % s == 0);
    let steps = exact.unwrap_or(fewest);
    let batch = target.div_ceil(steps);
    let effective = steps * batch;
    let scale = lr_scale(effective, target, adam_like);
    let mut advice = if effective == target {
        format!(
            "{steps} step(s) of {batch} keep the effective batch at {target}: keep the learning rate"
        )
    } else {
        format!(
            "{steps} step(s) of {batch} give an effective batch of {effective}, not {target}: scale the learning rate by {scale:.4} ({})",
            lr_rule(adam_like)
        )
    };
    if steps == 1 && limit > target {
        advice.push_str(&format!(
            "; batches up to {limit} fit: running {limit} per step makes the effective batch {:.1}x larger, then scale the learning rate by {:.3} ({})",
            limit as f64 / target as f64,
            lr_scale(limit, target, adam_like),
            lr_rule(adam_like)
        ));
    }
    Accumulation {
        target,
        batch,
        steps,
        effective,
        lr_scale: scale,
        advice,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn oracle(limit: usize) -> impl FnMut(usize) -> Result<bool, ()> {
        move |b| Ok(b <= limit)
    }

    #[test]
    fn finds_the_limit_at_every_granularity_within_the_bound() {
        for limit in [1usize, 7, 8, 9, 100, 1000, 4096, 5000, 123_457, 1 << 20] {
            for start in [1usize, 8, 64] {
                for m in [1usize, 8, 64] {
                    let r = find(start, Granularity::Multiple(m), 1 << 26, oracle(limit)).unwrap();
                    let expected = limit / m * m;
                    match r {
                        Ok(f) => {
                            assert!(start <= limit);
                            assert_eq!(f.maximum, expected, "limit {limit} start {start} m {m}");
                            assert!(f.maximum <= limit && f.maximum + m > limit);
                            let bound = trial_bound(limit, start, m);
                            assert!(
                                f.trials.len() <= bound,
                                "limit {limit} start {start} m {m}: {} > {bound}",
                                f.trials.len()
                            );
                            assert!(f.trials.iter().all(|&(b, ok)| ok == (b <= limit)));
                            if f.next_failed {
                                assert!(f.trials.contains(&(f.maximum + m, false)));
                            }
                        }
                        Err(e) => assert!(start > limit || expected == 0, "{e}"),
                    }
                }
            }
        }
    }

    #[test]
    fn powers_of_two() {
        let f = find(1, Granularity::Pow2, 1 << 26, oracle(5000))
            .unwrap()
            .unwrap();
        assert_eq!(f.maximum, 4096);
        assert_eq!(f.trials.len(), 14, "1, 2, ..., 8192");
        assert!(f.next_failed);
    }

    #[test]
    fn a_start_above_every_fitting_size_is_an_error() {
        let e = find(4096, Granularity::Multiple(8), 1 << 26, oracle(1000))
            .unwrap()
            .unwrap_err();
        assert!(e.contains("smaller --start"), "{e}");
        assert!(find(0, Granularity::Pow2, 1 << 26, oracle(10))
            .unwrap()
            .is_err());
    }

    #[test]
    fn the_cap_ends_the_growth() {
        let f = find(1, Granularity::Multiple(8), 1000, oracle(usize::MAX))
            .unwrap()
            .unwrap();
        assert_eq!(f.maximum, 1000);
        assert!(!f.next_failed);
    }

    #[test]
    fn oracle_errors_propagate() {
        let r = find(1, Granularity::Pow2, 1 << 20, |b| {
            if b > 4 {
                Err("gpu gone")
            } else {
                Ok(true)
            }
        });
        assert_eq!(r.unwrap_err(), "gpu gone");
    }

    #[test]
    fn accumulation_advice() {
        let a = accumulation(1024, 256, false);
        assert_eq!(
            (a.steps, a.batch, a.effective, a.lr_scale),
            (4, 256, 1024, 1.0)
        );
        assert!(a.advice.contains("keep the learning rate"));
        // 3 steps cannot split 1000 evenly; 4 steps of 250 can and keep it.
        let a = accumulation(1000, 384, false);
        assert_eq!((a.steps, a.batch, a.effective), (4, 250, 1000));
        // 1031 is prime: 3 steps of 344 = 1032, and the learning rate follows.
        let a = accumulation(1031, 384, false);
        assert_eq!((a.steps, a.batch, a.effective), (3, 344, 1032));
        assert!((a.lr_scale - 1032.0 / 1031.0).abs() < 1e-12);
        assert!(a.advice.contains("1.0010") && a.advice.contains("linear"));
        let a = accumulation(1031, 384, true);
        assert!((a.lr_scale - (1032.0f64 / 1031.0).sqrt()).abs() < 1e-12);
        assert!(a.advice.contains("square-root"));
        // A target that fits in one step is kept; the advice says what the limit would mean.
        let a = accumulation(100, 4096, false);
        assert_eq!(
            (a.steps, a.batch, a.effective, a.lr_scale),
            (1, 100, 100, 1.0)
        );
        assert!(a.advice.contains("41.0x larger"), "{}", a.advice);
        assert!(a.advice.contains("by 40.960"), "{}", a.advice);
        let a = accumulation(100, 4096, true);
        assert!(a.advice.contains("by 6.400"), "{}", a.advice);
        // Never above the limit.
        for (t, l) in [(7usize, 3usize), (1 << 20, 61_640_992), (99_991, 1000)] {
            let a = accumulation(t, l, false);
            assert!(a.batch <= l && a.effective >= t && a.steps * a.batch == a.effective);
        }
    }
}
