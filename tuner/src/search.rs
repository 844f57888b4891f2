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

/// Gradient accumulation that keeps a target effective batch at a per-step batch.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Accumulation {
    pub batch: usize,
    pub steps: usize,
    pub effective: usize,
    pub advice: String,
}

pub fn accumulation(target: usize, batch: usize, adam_like: bool) -> Accumulation {
    let steps = target.div_ceil(batch.max(1)).max(1);
    let effective = steps * batch;
    let rule = if adam_like {
        "square-root rule for Adam-type optimizers: lr x sqrt(new / old)"
    } else {
        "linear rule for SGD: lr x (new / old)"
    };
    let advice = if effective == target {
        format!(
            "{steps} accumulation step(s) of {batch} keep the effective batch at {target}: keep the learning rate"
        )
    } else {
        let ratio = effective as f64 / target as f64;
        let scale = if adam_like { ratio.sqrt() } else { ratio };
        format!(
            "{steps} accumulation step(s) of {batch} give an effective batch of {effective}, not {target}: scale the learning rate by {scale:.3} ({rule})"
        )
    };
    Accumulation {
        batch,
        steps,
        effective,
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
        assert_eq!((a.steps, a.effective), (4, 1024));
        assert!(a.advice.contains("keep the learning rate"));
        let a = accumulation(1000, 384, false);
        assert_eq!((a.steps, a.effective), (3, 1152));
        assert!(a.advice.contains("1.152") && a.advice.contains("linear"));
        let a = accumulation(1000, 384, true);
        assert!(a.advice.contains("1.073") && a.advice.contains("square-root"));
        assert_eq!(accumulation(100, 4096, false).steps, 1);
    }
}
