//! The data loader: N host threads prepare batches (shuffle, gather, normalize, optional
//! per-sample CPU cost) into a bounded set of host buffers, page-locked or not; 0 workers
//! prepares each batch on the calling thread. Batches come out in step order whatever the
//! workers' timing: worker w prepares batches w, w + N, w + 2N, ... and the consumer reads
//! worker `k % N`'s queue for batch k. Each worker owns a fixed number of buffers that travel
//! back to it once the consumer is done with them, so memory stays bounded.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;

use common::error::Error;
use common::gpu::Gpu;
use common::pinned::Pinned;
use common::Result;

/// Host memory a batch is prepared in: a plain vector, or page-locked memory whose copies to the
/// device are one asynchronous DMA.
pub enum HostBuf<T> {
    Pageable(Vec<T>),
    Pinned(Pinned<T>),
}

// SAFETY: the pinned variant is plain host memory owned by this value (its raw pointer is only
// a view of it), and access goes through &self / &mut self; the loader hands each buffer to one
// thread at a time.
unsafe impl<T: Send> Send for HostBuf<T> {}

impl<T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits + Clone + Default> HostBuf<T> {
    pub fn pageable(len: usize) -> HostBuf<T> {
        HostBuf::Pageable(vec![T::default(); len])
    }

    /// Page-locked and cacheable (not write-combined), so the CPU may read what it wrote.
    pub fn pinned(gpu: &Gpu, len: usize, what: &str) -> Result<HostBuf<T>> {
        Ok(HostBuf::Pinned(Pinned::new(gpu, len, what)?))
    }
}

impl<T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits> HostBuf<T> {
    pub fn is_pinned(&self) -> bool {
        matches!(self, HostBuf::Pinned(_))
    }

    pub fn as_slice(&self) -> &[T] {
        match self {
            HostBuf::Pageable(v) => v,
            HostBuf::Pinned(p) => p.as_slice(),
        }
    }

    pub fn as_mut_slice(&mut self) -> &mut [T] {
        match self {
            HostBuf::Pageable(v) => v,
            HostBuf::Pinned(p) => p.as_mut_slice(),
        }
    }
}

/// One batch's host memory: `batch x input` features and `batch` labels.
pub struct HostBatch {
    pub features: HostBuf<f32>,
    pub labels: HostBuf<i32>,
}

/// A prepared batch, numbered in step order.
pub struct Ready {
    pub index: usize,
    pub buffers: HostBatch,
}

/// What fills a batch: given its index, write its features and labels.
pub trait BatchSource: Send + Sync + 'static {
    fn fill(&self, index: usize, features: &mut [f32], labels: &mut [i32]);
}

struct Worker {
    ready: Receiver<Ready>,
    free: SyncSender<HostBatch>,
    thread: JoinHandle<()>,
}

pub struct Loader {
    source: Arc<dyn BatchSource>,
    workers: Vec<Worker>,
    stop: Arc<AtomicBool>,
    /// Workers == 0: the buffers the calling thread fills in turn.
    inline_free: Vec<HostBatch>,
    next: usize,
}

/// Buffers each worker owns: one being filled, one waiting, one in use by the consumer.
pub const BUFFERS_PER_WORKER: usize = 3;

/// How many buffers a loader with `workers` threads needs.
pub fn buffer_count(workers: usize) -> usize {
    if workers == 0 {
        2
    } else {
        workers * BUFFERS_PER_WORKER
    }
}

impl Loader {
    /// Start `workers` threads (0: prepare on the caller's thread) over `buffers`, which must
    /// number [buffer_count].
    pub fn start(
        source: Arc<dyn BatchSource>,
        workers: usize,
        buffers: Vec<HostBatch>,
    ) -> Result<Loader> {
        assert_eq!(buffers.len(), buffer_count(workers));
        let stop = Arc::new(AtomicBool::new(false));
        let mut loader = Loader {
            source: source.clone(),
            workers: Vec::new(),
            stop: stop.clone(),
            inline_free: Vec::new(),
            next: 0,
        };
        if workers == 0 {
            loader.inline_free = buffers;
            return Ok(loader);
        }
        let mut buffers = buffers.into_iter();
        for w in 0..workers {
            let (ready_tx, ready) = sync_channel::<Ready>(BUFFERS_PER_WORKER);
            let (free, free_rx) = sync_channel::<HostBatch>(BUFFERS_PER_WORKER);
            for _ in 0..BUFFERS_PER_WORKER {
                free.send(buffers.next().expect("counted above"))
                    .expect("the receiver is alive");
            }
            let (source, stop) = (source.clone(), stop.clone());
            let thread = std::thread::Builder::new()
                .name(format!("loader-{w}"))
                .spawn(move || {
                    let mut index = w;
                    while let Ok(mut buffers) = free_rx.recv() {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        source.fill(
                            index,
                            buffers.features.as_mut_slice(),
                            buffers.labels.as_mut_slice(),
                        );
                        if ready_tx.send(Ready { index, buffers }).is_err() {
                            break;
                        }
                        index += workers;
                    }
                });
            match thread {
                Ok(thread) => loader.workers.push(Worker {
                    ready,
                    free,
                    thread,
                }),
                Err(e) => {
                    loader.shutdown();
                    return Err(Error::invalid(format!(
                        "could not start loader thread {w} of {workers}: {e}; use fewer --workers"
                    )));
                }
            }
        }
        Ok(loader)
    }

    /// The next batch in order; blocks until it is ready.
    pub fn next_batch(&mut self) -> Result<Ready> {
        let index = self.next;
        self.next += 1;
        if self.workers.is_empty() {
            let mut buffers = self.inline_free.pop().ok_or_else(|| {
                Error::invalid("loader: every buffer is in use (recycle batches)")
            })?;
            self.source.fill(
                index,
                buffers.features.as_mut_slice(),
                buffers.labels.as_mut_slice(),
            );
            return Ok(Ready { index, buffers });
        }
        let n = self.workers.len();
        let ready = self.workers[index % n]
            .ready
            .recv()
            .map_err(|_| Error::invalid("loader: a worker thread stopped (did it panic?)"))?;
        debug_assert_eq!(ready.index, index);
        Ok(ready)
    }

    /// Give a batch's buffers back once nothing reads them any more.
    pub fn recycle(&mut self, ready: Ready) {
        if self.workers.is_empty() {
            self.inline_free.push(ready.buffers);
        } else {
            let n = self.workers.len();
            // A worker that stopped has dropped its receiver; then the buffers are dropped here.
            let _ = self.workers[ready.index % n].free.send(ready.buffers);
        }
    }

    /// Stop the workers and wait for them; every buffer is freed.
    pub fn shutdown(self) {
        self.stop.store(true, Ordering::Relaxed);
        for w in self.workers {
            // Dropping both ends wakes a worker blocked on either queue.
            drop(w.free);
            drop(w.ready);
            let _ = w.thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Writes the batch index into every element; worker timing varies with the index.
    struct Numbered;
    impl BatchSource for Numbered {
        fn fill(&self, index: usize, features: &mut [f32], labels: &mut [i32]) {
            std::thread::sleep(Duration::from_micros(((index * 7919) % 5) as u64 * 300));
            features.fill(index as f32);
            labels.fill(index as i32);
        }
    }

    fn buffers(workers: usize) -> Vec<HostBatch> {
        (0..buffer_count(workers))
            .map(|_| HostBatch {
                features: HostBuf::pageable(8),
                labels: HostBuf::pageable(2),
            })
            .collect()
    }

    #[test]
    fn batches_come_in_order_whatever_the_workers() {
        for workers in [0, 1, 3, 4] {
            let mut loader = Loader::start(Arc::new(Numbered), workers, buffers(workers)).unwrap();
            for k in 0..40 {
                let b = loader.next_batch().unwrap();
                assert_eq!(b.index, k);
                assert!(b.buffers.features.as_slice().iter().all(|&v| v == k as f32));
                assert!(b.buffers.labels.as_slice().iter().all(|&v| v == k as i32));
                loader.recycle(b);
            }
            loader.shutdown();
        }
    }

    #[test]
    fn holding_two_batches_at_once_works() {
        let mut loader = Loader::start(Arc::new(Numbered), 2, buffers(2)).unwrap();
        let a = loader.next_batch().unwrap();
        let b = loader.next_batch().unwrap();
        let c = loader.next_batch().unwrap();
        assert_eq!((a.index, b.index, c.index), (0, 1, 2));
        loader.recycle(a);
        loader.recycle(b);
        loader.recycle(c);
        assert_eq!(loader.next_batch().unwrap().index, 3);
        loader.shutdown();
    }

    #[test]
    fn shutdown_returns_with_batches_unconsumed_and_in_flight() {
        // Workers blocked on full queues and batches never recycled must not hang shutdown.
        let mut loader = Loader::start(Arc::new(Numbered), 4, buffers(4)).unwrap();
        let held = loader.next_batch().unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let t = std::time::Instant::now();
        loader.shutdown();
        drop(held);
        assert!(t.elapsed() < Duration::from_secs(2));
    }

    #[test]
    fn inline_loader_without_recycling_says_so() {
        let mut loader = Loader::start(Arc::new(Numbered), 0, buffers(0)).unwrap();
        let _a = loader.next_batch().unwrap();
        let _b = loader.next_batch().unwrap();
        let err = loader.next_batch().err().unwrap().to_string();
        assert!(err.contains("recycle"), "{err}");
    }
}
