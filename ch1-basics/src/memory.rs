//! Device and host memory the lessons need beyond the harness's: device buffers from either
//! allocator (so the baseline can allocate the way naive code does), and page-locked host
//! buffers whose copies are truly asynchronous.

use std::ops::{Deref, DerefMut, Range};
use std::sync::Arc;

use cudarc::driver::sys;
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut, DeviceRepr, PinnedHostSlice};

use common::error::{human_bytes, CudaContext as _, Error};
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

/// Page-locked host memory, cacheable (not write-combined: the CPU reads it back), used
/// through raw asynchronous copies so that nothing synchronizes behind the caller's back.
///
/// The caller orders CPU access against copies in flight (with events or a synchronize).
pub struct Pinned<T> {
    _alloc: PinnedHostSlice<T>,
    ptr: *mut T,
    len: usize,
}

impl<T: DeviceRepr + cudarc::driver::ValidAsZeroBits> Pinned<T> {
    pub fn new(gpu: &Gpu, len: usize, what: &str) -> Result<Pinned<T>> {
        let bytes = (len as u64).saturating_mul(std::mem::size_of::<T>() as u64);
        common::gpu::check_host_fits(what, bytes)?;
        // SAFETY: contents are written before they are read.
        let mut alloc = unsafe { gpu.ctx.alloc_pinned_with_flags::<T>(len, 0) }.map_err(|e| {
            Error::invalid(format!(
                "could not page-lock {} of host memory for {what}: {e}",
                human_bytes(bytes)
            ))
        })?;
        let ptr = alloc.as_mut_ptr().cuda("mapping pinned memory")?;
        Ok(Pinned {
            _alloc: alloc,
            ptr,
            len,
        })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The host view. Only valid while no copy into or out of it is in flight.
    pub fn as_slice(&self) -> &[T] {
        // SAFETY: ptr/len come from one live allocation.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// The host view. Only valid while no copy into or out of it is in flight.
    pub fn as_mut_slice(&mut self) -> &mut [T] {
        // SAFETY: ptr/len come from one live allocation, borrowed mutably.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }

    /// Queue a copy of `self[range]` to `dst` on `stream` (asynchronous).
    pub fn copy_to_device<D: DevicePtrMut<T>>(
        &self,
        range: Range<usize>,
        dst: &mut D,
        stream: &Arc<CudaStream>,
    ) -> Result<()> {
        assert!(range.end <= self.len && dst.len() >= range.len());
        let (dptr, _record) = dst.device_ptr_mut(stream);
        // SAFETY: the host range lies in this allocation, the device range in dst; the caller
        // keeps the host memory untouched until the copy completes.
        unsafe {
            sys::cuMemcpyHtoDAsync_v2(
                dptr,
                self.ptr.add(range.start).cast(),
                range.len() * std::mem::size_of::<T>(),
                stream.cu_stream(),
            )
        }
        .result()
        .cuda("copying pinned host memory to the GPU")
    }

    /// Queue a copy of `src` to `self[start..start + src.len()]` on `stream` (asynchronous).
    pub fn copy_from_device<S: DevicePtr<T>>(
        &mut self,
        start: usize,
        src: &S,
        stream: &Arc<CudaStream>,
    ) -> Result<()> {
        assert!(start + src.len() <= self.len);
        let (sptr, _record) = src.device_ptr(stream);
        // SAFETY: the device range lies in src, the host range in this allocation.
        unsafe {
            sys::cuMemcpyDtoHAsync_v2(
                self.ptr.add(start).cast(),
                sptr,
                src.len() * std::mem::size_of::<T>(),
                stream.cu_stream(),
            )
        }
        .result()
        .cuda("copying GPU memory to pinned host memory")
    }
}
