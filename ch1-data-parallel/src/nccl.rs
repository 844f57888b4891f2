//! One NCCL communicator per rank, made together with the group API, and the one collective
//! the lesson uses: an in-place fp32 sum on a stream the caller chooses (the compute stream for
//! the baseline, the communication stream for the overlapped side).

use cudarc::driver::{CudaEvent, CudaStream};
use cudarc::nccl::{result, sys};

use common::error::CudaContext as _;
use common::{Error, Gpu, Result};

/// A rank's communicator.
pub struct Communicator {
    comm: sys::ncclComm_t,
    pub rank: usize,
    pub ranks: usize,
}

// SAFETY: an NCCL communicator may be used from any thread, one thread at a time; the lesson
// gives each rank's to that rank's thread alone.
unsafe impl Send for Communicator {}

pub(crate) fn nccl_error(what: &str, e: result::NcclError) -> Error {
    Error::invalid(format!("NCCL failed in {what}: {:?}", e.0))
}

impl Communicator {
    /// One communicator per GPU (rank r on `gpus[r]`), initialized in one NCCL group from this
    /// thread.
    pub fn for_each(gpus: &[&Gpu]) -> Result<Vec<Communicator>> {
        let id = result::get_uniqueid().map_err(|e| nccl_error("making the unique id", e))?;
        let ranks = gpus.len();
        let mut comms = vec![std::ptr::null_mut(); ranks];
        result::group_start().map_err(|e| nccl_error("starting a group", e))?;
        let mut first_error = None;
        for (rank, (gpu, comm)) in gpus.iter().zip(comms.iter_mut()).enumerate() {
            if let Err(e) = gpu.ctx.bind_to_thread() {
                first_error.get_or_insert(Error::Cuda {
                    what: "binding the context".into(),
                    source: e,
                });
                break;
            }
            // SAFETY: comm is written by NCCL; id comes from get_uniqueid above.
            let r = unsafe { result::comm_init_rank(comm, ranks as i32, id, rank as i32) };
            if let Err(e) = r {
                first_error.get_or_insert(nccl_error("initializing a communicator", e));
                break;
            }
        }
        let ended =
            result::group_end().map_err(|e| nccl_error("initializing the communicators", e));
        if let Some(e) = first_error {
            return Err(e);
        }
        ended?;
        Ok(comms
            .into_iter()
            .enumerate()
            .map(|(rank, comm)| Communicator { comm, rank, ranks })
            .collect())
    }

    /// Sum `count` fp32 values at `ptr` over every rank, in place, queued on `stream` (whose
    /// context must be this rank's GPU).
    pub fn all_reduce_sum(&self, stream: &CudaStream, ptr: u64, count: usize) -> Result<()> {
        self.all_reduce_to(stream, ptr, ptr, count)
    }

    /// Sum `count` fp32 values from `src` over every rank into `dst`, on `stream`.
    pub fn all_reduce_to(
        &self,
        stream: &CudaStream,
        src: u64,
        dst: u64,
        count: usize,
    ) -> Result<()> {
        stream
            .context()
            .bind_to_thread()
            .cuda("binding the context")?;
        // SAFETY: src and dst hold count f32 on this rank's GPU, live until the stream has run
        // this.
        unsafe {
            result::all_reduce(
                src as *const std::ffi::c_void,
                dst as *mut std::ffi::c_void,
                count,
                sys::ncclDataType_t::ncclFloat32,
                sys::ncclRedOp_t::ncclSum,
                self.comm,
                stream.cu_stream() as sys::cudaStream_t,
            )
        }
        .map(|_| ())
        .map_err(|e| nccl_error("an all-reduce", e))
    }
}

/// One rank's part of an all-reduce issued for every rank at once: its stream, its input and
/// output (the same pointer for in place), and the event that marks its end.
pub struct RankCall<'a> {
    pub stream: &'a CudaStream,
    pub src: u64,
    pub dst: u64,
    pub done: &'a CudaEvent,
}

/// One all-reduce of `count` fp32 values over every rank, issued from this thread as one NCCL
/// group (`calls[r]` for `comms[r]`), then the first rank's stream waits on every other rank's
/// end: timed on the first stream, a call spans the slowest rank.
pub fn all_reduce_all(comms: &[&Communicator], calls: &[RankCall], count: usize) -> Result<()> {
    let nccl = |e| nccl_error("an all-reduce", e);
    result::group_start().map_err(nccl)?;
    let mut queued = Ok(());
    for (comm, c) in comms.iter().zip(calls) {
        queued = comm.all_reduce_to(c.stream, c.src, c.dst, count);
        if queued.is_err() {
            break;
        }
    }
    result::group_end().map_err(nccl)?;
    queued?;
    for c in &calls[1..] {
        c.done.record(c.stream).cuda("recording a rank's end")?;
        calls[0].stream.wait(c.done).cuda("waiting for a rank")?;
    }
    Ok(())
}

impl Drop for Communicator {
    fn drop(&mut self) {
        // SAFETY: destroyed once; every stream using it has been synchronized by the owner.
        let _ = unsafe { result::comm_destroy(self.comm) };
    }
}

/// Device memory from NCCL's own allocator (`ncclMemAlloc`: the driver's virtual memory API,
/// mapped for the GPU's peers) and registered with a communicator (`ncclCommRegister`), so a
/// collective over it reads and writes the peers' buffers directly instead of staging every
/// chunk through NCCL's own. Every rank of a call must pass registered buffers.
pub struct Registered {
    ptr: *mut std::ffi::c_void,
    bytes: usize,
    comm: sys::ncclComm_t,
    handle: *mut std::ffi::c_void,
}

// SAFETY: plain device memory and a registration handle, used by one thread at a time.
unsafe impl Send for Registered {}

impl Registered {
    /// `bytes` on `gpu`, registered with `comm` (the communicator must outlive the buffer).
    pub fn new(gpu: &Gpu, comm: &Communicator, bytes: usize) -> Result<Registered> {
        gpu.ctx.bind_to_thread().cuda("binding the context")?;
        let mut ptr = std::ptr::null_mut();
        // SAFETY: NCCL writes the pointer of a fresh allocation of `bytes` on the current GPU.
        unsafe { sys::ncclMemAlloc(&mut ptr, bytes) }
            .result()
            .map_err(|e| nccl_error("allocating a buffer to register", e))?;
        let mut handle = std::ptr::null_mut();
        // SAFETY: ptr holds `bytes` from ncclMemAlloc; comm is live.
        let registered = unsafe { sys::ncclCommRegister(comm.comm, ptr, bytes, &mut handle) }
            .result()
            .map_err(|e| nccl_error("registering a buffer", e));
        if let Err(e) = registered {
            // SAFETY: allocated above, not registered, not used.
            let _ = unsafe { sys::ncclMemFree(ptr) };
            return Err(e);
        }
        Ok(Registered {
            ptr,
            bytes,
            comm: comm.comm,
            handle,
        })
    }

    pub fn ptr(&self) -> u64 {
        self.ptr as u64
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        // SAFETY: registered once with a communicator that is still live (owners drop buffers
        // before communicators), freed once; the streams that used it are synchronized.
        unsafe {
            let _ = sys::ncclCommDeregister(self.comm, self.handle);
            let _ = sys::ncclMemFree(self.ptr);
        }
    }
}

/// The NCCL version, as NCCL writes it (22703 for 2.27.3).
pub fn version() -> Option<i32> {
    result::get_nccl_version().ok()
}
