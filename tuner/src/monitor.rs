//! What a trial reads beside its events: the memory pool's high watermark (every device buffer
//! of the tool comes from the stream-ordered pool that cudarc allocates from, the cuBLAS
//! workspace included) and NVML's GPU utilization, sampled on a thread during the trial.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cudarc::driver::sys::{self, CUmemPool_attribute as Attr};

use common::error::CudaContext as _;
use common::gpu::Gpu;
use common::Result;

/// The device's current memory pool (the one `cuMemAllocAsync` draws from).
pub struct Pool(sys::CUmemoryPool);

impl Pool {
    /// None when the device has no stream-ordered allocator (cudarc then uses cuMemAlloc).
    pub fn of(gpu: &Gpu) -> Result<Option<Pool>> {
        if !gpu.ctx.has_async_alloc() {
            return Ok(None);
        }
        let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
        // SAFETY: writes one handle for a valid device.
        unsafe { sys::cuDeviceGetMemPool(&mut pool, gpu.ctx.cu_device()) }
            .result()
            .cuda("reading the device's memory pool")?;
        Ok(Some(Pool(pool)))
    }

    fn get(&self, attr: Attr) -> Result<u64> {
        let mut v: u64 = 0;
        // SAFETY: these attributes are 64-bit values.
        unsafe { sys::cuMemPoolGetAttribute(self.0, attr, (&mut v as *mut u64).cast()) }
            .result()
            .cuda("reading a memory-pool attribute")?;
        Ok(v)
    }

    /// Highest bytes in use since the last reset.
    pub fn used_high(&self) -> Result<u64> {
        self.get(Attr::CU_MEMPOOL_ATTR_USED_MEM_HIGH)
    }

    /// Highest bytes the pool held from the device since the last reset: what the device gave
    /// it, in its allocation granularity, cached blocks included.
    pub fn reserved_high(&self) -> Result<u64> {
        self.get(Attr::CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH)
    }

    /// Start new watermarks (in use and reserved) at what is held now.
    pub fn reset_high(&self) -> Result<()> {
        for attr in [
            Attr::CU_MEMPOOL_ATTR_USED_MEM_HIGH,
            Attr::CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH,
        ] {
            let mut zero: u64 = 0;
            // SAFETY: setting a high watermark takes a 64-bit zero, which resets it.
            unsafe { sys::cuMemPoolSetAttribute(self.0, attr, (&mut zero as *mut u64).cast()) }
                .result()
                .cuda("resetting the pool's watermarks")?;
        }
        Ok(())
    }

    /// Give every unused byte back to the device (after a synchronize).
    pub fn trim(&self) -> Result<()> {
        // SAFETY: a valid pool handle.
        unsafe { sys::cuMemPoolTrimTo(self.0, 0) }
            .result()
            .cuda("trimming the memory pool")
    }
}

/// NVML utilization samples taken every `period` on a thread of its own.
pub struct UtilSampler {
    samples: Arc<Mutex<Vec<(Instant, u32, u64)>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl UtilSampler {
    pub fn start(uuid: String, period: Duration) -> UtilSampler {
        let samples = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (s, st) = (samples.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("nvml-sampler".into())
            .spawn(move || {
                let Some(nvml) = common::nvml::Nvml::open() else {
                    return;
                };
                while !st.load(Ordering::Relaxed) {
                    if let Some((used, util)) = nvml.usage(&uuid) {
                        if let Ok(mut v) = s.lock() {
                            v.push((Instant::now(), util, used));
                            if v.len() > 100_000 {
                                v.drain(..50_000);
                            }
                        }
                    }
                    std::thread::sleep(period);
                }
            })
            .ok();
        UtilSampler {
            samples,
            stop,
            thread,
        }
    }

    /// Mean utilization (percent) of the samples taken between `from` and `to`.
    pub fn mean_between(&self, from: Instant, to: Instant) -> Option<f64> {
        let v = self.samples.lock().ok()?;
        let inside: Vec<f64> = v
            .iter()
            .filter(|(t, _, _)| *t >= from && *t <= to)
            .map(|(_, u, _)| *u as f64)
            .collect();
        (!inside.is_empty()).then(|| inside.iter().sum::<f64>() / inside.len() as f64)
    }
}

impl Drop for UtilSampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
