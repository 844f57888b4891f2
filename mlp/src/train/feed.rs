//! The double-buffered input of the loop: two device slots, the loader filling host batches,
//! and the copy stream between them. Micro-batch m goes to slot m % 2; its copy waits until
//! micro-batch m - 2, which read that slot, is done, and the host batch it copies from is given
//! back to the loader only once the copy is done.

use std::sync::Arc;

use cudarc::driver::sys;
use cudarc::driver::{CudaEvent, CudaSlice, CudaStream, DevicePtrMut};

use common::error::CudaContext as _;
use common::gpu::Gpu;
use common::Result;

use crate::device::Input;
use crate::train::loader::{buffer_count, HostBatch, HostBuf, Loader, Ready};
use crate::train::options::Options;
use crate::train::sampler::{Dataset, Sampler};
use crate::train::trainer::Trainer;

pub struct Feed {
    pub x: [CudaSlice<f32>; 2],
    pub y: [CudaSlice<i32>; 2],
    loader: Loader,
    copy: Arc<CudaStream>,
    /// Micro-batch m's copy into slot m % 2 is done.
    copied: [CudaEvent; 2],
    /// The micro-batch that read the slot is done with it.
    slot_free: [CudaEvent; 2],
    /// The host batch each slot's copy reads, kept until the copy is done.
    in_flight: [Option<Ready>; 2],
}

impl Feed {
    /// The device slots first (zeros: valid labels before any batch is copied), then the host
    /// buffers and the loader.
    pub fn new(gpu: &Gpu, opts: &Options, data: Arc<Dataset>) -> Result<Feed> {
        let (batch, input) = (opts.batch, opts.arch.input);
        let x = [
            gpu.alloc_zeros::<f32>(batch * input, "an input slot")?,
            gpu.alloc_zeros::<f32>(batch * input, "an input slot")?,
        ];
        let y = [
            gpu.alloc_zeros::<i32>(batch, "a label slot")?,
            gpu.alloc_zeros::<i32>(batch, "a label slot")?,
        ];
        let host = (0..buffer_count(opts.workers))
            .map(|_| -> Result<HostBatch> {
                Ok(if opts.pinned {
                    HostBatch {
                        features: HostBuf::pinned(gpu, batch * input, "a pinned batch")?,
                        labels: HostBuf::pinned(gpu, batch, "pinned labels")?,
                    }
                } else {
                    HostBatch {
                        features: HostBuf::pageable(batch * input),
                        labels: HostBuf::pageable(batch),
                    }
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let sampler = Sampler::new(data, batch, opts.seed, opts.cpu_cost_per_sample);
        let loader = Loader::start(Arc::new(sampler), opts.workers, host)?;
        let event = || gpu.ctx.new_event(None).cuda("creating an event");
        Ok(Feed {
            x,
            y,
            loader,
            copy: gpu.ctx.new_stream().cuda("creating the copy stream")?,
            copied: [event()?, event()?],
            slot_free: [event()?, event()?],
            in_flight: [None, None],
        })
    }

    /// Take micro-batch `m` from the loader and queue its copy into slot m % 2.
    pub fn enqueue(&mut self, m: usize) -> Result<()> {
        let slot = m % 2;
        if let Some(old) = self.in_flight[slot].take() {
            self.copied[slot].synchronize().cuda("waiting for a copy")?;
            self.loader.recycle(old);
        }
        let ready = self.loader.next_batch()?;
        if m >= 2 {
            self.copy
                .wait(&self.slot_free[slot])
                .cuda("ordering the copy")?;
        }
        htod(
            &self.copy,
            ready.buffers.features.as_slice(),
            &mut self.x[slot],
        )?;
        htod(
            &self.copy,
            ready.buffers.labels.as_slice(),
            &mut self.y[slot],
        )?;
        self.copied[slot]
            .record(&self.copy)
            .cuda("recording a copy")?;
        self.in_flight[slot] = Some(ready);
        Ok(())
    }

    /// Make the training stream wait for micro-batch `m`'s copy; its input.
    pub fn wait_for(&self, m: usize, t: &Trainer, gpu: &Gpu) -> Result<Input> {
        let slot = m % 2;
        gpu.stream
            .wait(&self.copied[slot])
            .cuda("waiting for the batch")?;
        Ok(t.input(gpu, &self.x[slot], &self.y[slot]))
    }

    /// Micro-batch `m`'s work is queued on `stream`: its slot is free once that is done.
    pub fn done_with(&self, m: usize, stream: &Arc<CudaStream>) -> Result<()> {
        self.slot_free[m % 2]
            .record(stream)
            .cuda("recording an event")
    }

    /// Wait for the copies, give the batches back, stop the workers.
    pub fn shutdown(mut self) {
        let _ = self.copy.synchronize();
        for r in self.in_flight.iter_mut() {
            if let Some(old) = r.take() {
                self.loader.recycle(old);
            }
        }
        self.loader.shutdown();
    }
}

/// Queue a host-to-device copy on `stream`: one DMA from pinned memory; from pageable memory the
/// driver stages it and the host waits, as a loader without pinned memory does.
fn htod<T: cudarc::driver::DeviceRepr>(
    stream: &Arc<CudaStream>,
    src: &[T],
    dst: &mut CudaSlice<T>,
) -> Result<()> {
    assert!(src.len() <= dst.len());
    let (dptr, _record) = dst.device_ptr_mut(stream);
    // SAFETY: the host range is live until the copy's event completes (the feed keeps the
    // batch in flight until then); the device range lies in dst.
    unsafe {
        sys::cuMemcpyHtoDAsync_v2(
            dptr,
            src.as_ptr().cast(),
            std::mem::size_of_val(src),
            stream.cu_stream(),
        )
    }
    .result()
    .cuda("copying a batch to the GPU")
}
