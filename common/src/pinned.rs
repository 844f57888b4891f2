//! Page-locked host memory whose copies are truly asynchronous: a data loader's pinned buffers,
//! data streamed through the GPU in chunks, copy-rate measurements. cudarc's own pinned slices
//! synchronize on their events when read; this one leaves ordering to the caller.

use std::ops::Range;
use std::sync::Arc;

use cudarc::driver::sys;
use cudarc::driver::{CudaStream, DevicePtr, DevicePtrMut, DeviceRepr, PinnedHostSlice};

use crate::error::{CudaContext as _, Error, Result};
use crate::gpu::{check_host_fits, Gpu};
use plotting::format::human_bytes;

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
        check_host_fits(what, bytes)?;
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

    /// Page-locked memory holding a copy of `values`.
    pub fn from_slice(gpu: &Gpu, values: &[T], what: &str) -> Result<Pinned<T>>
    where
        T: Copy,
    {
        let mut pinned = Pinned::new(gpu, values.len(), what)?;
        pinned.as_mut_slice().copy_from_slice(values);
        Ok(pinned)
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
