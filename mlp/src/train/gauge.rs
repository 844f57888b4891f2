//! How much device memory the program holds, as a framework's allocator would say it: every
//! buffer comes from the stream-ordered memory pool (the cuBLAS workspace included), so the
//! pool's reserved bytes (what it took from the device, granularity and cached blocks
//! included) are what PyTorch calls memory reserved. What was taken outside the pool (the
//! cuBLAS handle's own buffers, loaded kernels) is read once, when set-up is done, from the
//! device's free memory, and added. A device without a pool is read from its free memory alone.

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

    /// Bytes the pool holds from the device now.
    pub fn reserved(&self) -> Result<u64> {
        self.get(Attr::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)
    }

    /// The most bytes the pool has held from the device.
    pub fn reserved_high(&self) -> Result<u64> {
        self.get(Attr::CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH)
    }

    /// The most bytes in live buffers at once.
    pub fn used_high(&self) -> Result<u64> {
        self.get(Attr::CU_MEMPOOL_ATTR_USED_MEM_HIGH)
    }

    /// Give every unused byte back to the device (after a synchronize).
    pub fn trim(&self) -> Result<()> {
        // SAFETY: a valid pool handle.
        unsafe { sys::cuMemPoolTrimTo(self.0, 0) }
            .result()
            .cuda("trimming the memory pool")
    }
}

/// The program's device memory: now, and the most so far.
pub struct MemoryGauge {
    pool: Option<Pool>,
    /// Free device memory once the context existed: what the program started from.
    baseline_free: u64,
    outside_pool: u64,
    /// Without a pool: the most seen held.
    peak_seen: u64,
}

impl MemoryGauge {
    /// `baseline_free`: the device's free memory once the context existed.
    pub fn new(gpu: &Gpu, baseline_free: u64) -> Result<MemoryGauge> {
        Ok(MemoryGauge {
            pool: Pool::of(gpu)?,
            baseline_free,
            outside_pool: 0,
            peak_seen: 0,
        })
    }

    pub fn pool(&self) -> Option<&Pool> {
        self.pool.as_ref()
    }

    /// What set-up took outside the pool ([MemoryGauge::settle]).
    pub fn outside_pool(&self) -> u64 {
        self.outside_pool
    }

    /// Read what set-up took outside the pool; call once every handle and kernel is loaded.
    pub fn settle(&mut self, gpu: &Gpu) -> Result<()> {
        if let Some(pool) = &self.pool {
            let held = self.baseline_free.saturating_sub(gpu.memory()?.0);
            self.outside_pool = outside_pool(held, pool.reserved()?);
        }
        Ok(())
    }

    /// Bytes held now.
    pub fn in_use(&mut self, gpu: &Gpu) -> Result<u64> {
        let now = match &self.pool {
            Some(pool) => pool.reserved()? + self.outside_pool,
            None => self.baseline_free.saturating_sub(gpu.memory()?.0),
        };
        self.peak_seen = self.peak_seen.max(now);
        Ok(now)
    }

    /// The most bytes held so far (without a pool: the most seen by [MemoryGauge::in_use]).
    pub fn peak(&mut self, gpu: &Gpu) -> Result<u64> {
        match &self.pool {
            Some(pool) => Ok(pool.reserved_high()? + self.outside_pool),
            None => {
                self.in_use(gpu)?;
                Ok(self.peak_seen)
            }
        }
    }

    /// (peak, in use) at the end of a step.
    pub fn reading(&mut self, gpu: &Gpu) -> Result<(u64, u64)> {
        let in_use = self.in_use(gpu)?;
        Ok((self.peak(gpu)?.max(in_use), in_use))
    }

    /// Give cached pool memory back to the device (after a synchronize).
    pub fn trim(&self) -> Result<()> {
        match &self.pool {
            Some(pool) => pool.trim(),
            None => Ok(()),
        }
    }
}

/// Of `held` bytes the device lost since the context existed, what the pool's `reserved`
/// bytes do not explain (never below 0: another process may have freed memory meanwhile).
pub fn outside_pool(held: u64, reserved: u64) -> u64 {
    held.saturating_sub(reserved)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_the_pool_does_not_hold_is_outside_it() {
        assert_eq!(outside_pool(100 << 20, 64 << 20), 36 << 20);
        assert_eq!(outside_pool(10, 64), 0);
    }
}
