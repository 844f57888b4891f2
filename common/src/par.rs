//! Data-parallel helpers for host-side work that sits on the startup path (input generation,
//! float64 references): plain scoped threads, results independent of the thread count; and
//! [lock], for state threads share.

use std::sync::{Mutex, MutexGuard};

/// The value behind `m`, also where a thread that held it panicked: one thread's panic must
/// not take the state the others share (results, a cache, the progress shown) with it.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Threads to use: what the OS offers, at most 32.
pub fn threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(32)
}

/// Call `f(chunk_index, chunk)` for every `chunk_len`-sized chunk of `data`, in parallel.
pub fn for_each_chunk_mut<T: Send>(
    data: &mut [T],
    chunk_len: usize,
    f: impl Fn(usize, &mut [T]) + Sync,
) {
    let chunk_len = chunk_len.max(1);
    let chunks: Vec<(usize, &mut [T])> = data.chunks_mut(chunk_len).enumerate().collect();
    let workers = threads().min(chunks.len()).max(1);
    let per_worker = chunks.len().div_ceil(workers);
    let mut chunks = chunks;
    std::thread::scope(|scope| {
        while !chunks.is_empty() {
            let take = per_worker.min(chunks.len());
            let batch: Vec<(usize, &mut [T])> = chunks.drain(..take).collect();
            let f = &f;
            scope.spawn(move || {
                for (i, chunk) in batch {
                    f(i, chunk);
                }
            });
        }
    });
}

/// `(0..n).map(f)` computed in parallel, in order.
pub fn map<T: Send + Default + Clone>(n: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let mut out = vec![T::default(); n];
    let chunk = n.div_ceil(threads()).max(1);
    for_each_chunk_mut(&mut out, chunk, |c, slice| {
        for (k, v) in slice.iter_mut().enumerate() {
            *v = f(c * chunk + k);
        }
    });
    out
}

/// A copy of `data`, made in parallel: a large output kept for a later check (1 GiB for the
/// pipeline) costs a fraction of one thread's copy and of its page faults.
pub fn copy_of<T: Copy + Default + Send + Sync>(data: &[T]) -> Vec<T> {
    let mut out = vec![T::default(); data.len()];
    let chunk = data.len().div_ceil(threads()).max(1 << 16);
    for_each_chunk_mut(&mut out, chunk, |c, slice| {
        slice.copy_from_slice(&data[c * chunk..c * chunk + slice.len()]);
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_is_the_same_values() {
        for n in [0, 1, 1000, (1 << 16) + 3, 3 * (1 << 18) + 7] {
            let data: Vec<f32> = (0..n).map(|i| i as f32 * 0.5 - 3.0).collect();
            assert_eq!(copy_of(&data), data, "{n}");
        }
    }

    #[test]
    fn map_is_in_order() {
        let v = map(10_007, |i| i * 2);
        assert!(v.iter().enumerate().all(|(i, &x)| x == 2 * i));
        assert!(map(0, |i| i).is_empty());
    }

    #[test]
    fn every_chunk_is_visited_once() {
        let mut v = vec![0usize; 1000];
        for_each_chunk_mut(&mut v, 7, |c, chunk| {
            for x in chunk.iter_mut() {
                *x += c + 1;
            }
        });
        assert!(v.iter().enumerate().all(|(i, &x)| x == i / 7 + 1));
    }
}
