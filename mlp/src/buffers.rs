//! Device buffers from either allocator, so that a naive loop can allocate the way
//! `cudaMalloc` does (the baseline's lesson) while everything else draws from the stream-ordered
//! pool.

use std::ops::{Deref, DerefMut};

use cudarc::driver::sys;
use cudarc::driver::{CudaSlice, DeviceRepr};

use common::error::{CudaContext as _, Error};
use common::gpu::Gpu;
use common::Result;

/// Where a device buffer comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Allocator {
    /// `cuMemAlloc` / `cuMemFree`: what `cudaMalloc` / `cudaFree` do. Synchronous, and a free
    /// waits for the whole device to go idle.
    Driver,
    /// The stream-ordered pool (`cuMemAllocAsync`), the harness's default.
    Pool,
}

/// A device buffer that frees itself the way it was allocated.
pub struct DeviceBuf<T> {
    slice: std::mem::ManuallyDrop<CudaSlice<T>>,
    allocator: Allocator,
}

impl<T: DeviceRepr> DeviceBuf<T> {
    /// `len` elements from `allocator` (contents undefined until written).
    pub fn new(gpu: &Gpu, allocator: Allocator, len: usize, what: &str) -> Result<DeviceBuf<T>> {
        let slice =
            match allocator {
                Allocator::Pool => gpu.alloc::<T>(len, what)?,
                Allocator::Driver => {
                    let bytes = len * std::mem::size_of::<T>();
                    gpu.ctx.bind_to_thread().cuda("binding the context")?;
                    // SAFETY: a plain allocation of `bytes`; the pointer is owned by the slice below.
                    let ptr = unsafe { cudarc::driver::result::malloc_sync(bytes.max(1)) }
                        .map_err(|e| match e.0 {
                            sys::cudaError_enum::CUDA_ERROR_OUT_OF_MEMORY => {
                                gpu.out_of_memory(what, bytes as u64)
                            }
                            _ => Error::Cuda {
                                what: format!("cuMemAlloc for {what}"),
                                source: e,
                            },
                        })?;
                    // SAFETY: ptr holds `len` elements of T; contents are written before use.
                    unsafe { gpu.stream.upgrade_device_ptr(ptr, len) }
                }
            };
        Ok(DeviceBuf {
            slice: std::mem::ManuallyDrop::new(slice),
            allocator,
        })
    }
}

impl<T> DeviceBuf<T> {
    pub fn allocator(&self) -> Allocator {
        self.allocator
    }
}

impl<T> Deref for DeviceBuf<T> {
    type Target = CudaSlice<T>;
    fn deref(&self) -> &CudaSlice<T> {
        &self.slice
    }
}

impl<T> DerefMut for DeviceBuf<T> {
    fn deref_mut(&mut self) -> &mut CudaSlice<T> {
        &mut self.slice
    }
}

impl<T> Drop for DeviceBuf<T> {
    fn drop(&mut self) {
        // SAFETY: the slice is taken once, here.
        let slice = unsafe { std::mem::ManuallyDrop::take(&mut self.slice) };
        match self.allocator {
            Allocator::Pool => drop(slice),
            Allocator::Driver => {
                let ctx = slice.context().clone();
                let ptr = slice.leak();
                // SAFETY: allocated by cuMemAlloc above and freed once.
                ctx.record_err(unsafe { cudarc::driver::result::free_sync(ptr) });
            }
        }
    }
}
