//! The CUPTI activity API through cudarc's bindings, loaded at run time like every other CUDA
//! library: probe first (cudarc panics on a missing library), then subscribe, hand CUPTI
//! buffers, and turn the records of each completed buffer into [Activity] values.

use std::alloc::Layout;
use std::collections::BTreeMap;
use std::ffi::{c_char, CStr};
use std::sync::Mutex;

use cudarc::cupti::sys::{self, CUptiResult, CUpti_ActivityKind as Kind};
use cudarc::driver::sys::CUcontext;

use super::activity::{parse_record, Activity};
use crate::error::{Error, Result};

/// The kinds recorded: kernels (without serializing them), copies and sets.
const KINDS: [Kind; 3] = [
    Kind::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
    Kind::CUPTI_ACTIVITY_KIND_MEMCPY,
    Kind::CUPTI_ACTIVITY_KIND_MEMSET,
];
const BUFFER_BYTES: usize = 8 << 20;
const BUFFER_ALIGN: usize = 8;
/// `CUPTI_ACTIVITY_FLAG_FLUSH_FORCED`: deliver buffers even when not full.
const FLUSH_FORCED: u32 = 1;

fn buffer_layout() -> Layout {
    Layout::from_size_align(BUFFER_BYTES, BUFFER_ALIGN).expect("a valid layout")
}

fn cupti_error(what: &str, code: CUptiResult) -> Error {
    let hint = match code {
        CUptiResult::CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED => {
            ": another CUPTI client is attached (nsys, ncu, or a debugger): run --trace without \
             a profiler, or the profiler without --trace"
        }
        CUptiResult::CUPTI_ERROR_NOT_INITIALIZED | CUptiResult::CUPTI_ERROR_INVALID_DEVICE => {
            ": CUPTI found no usable GPU"
        }
        _ => "",
    };
    Error::invalid(format!("CUPTI {what} failed ({code:?}){hint}"))
}

fn check(what: &str, code: CUptiResult) -> Result<()> {
    match code {
        CUptiResult::CUPTI_SUCCESS => Ok(()),
        other => Err(cupti_error(what, other)),
    }
}

/// Is libcupti loadable? A clear error if not (only asked when --trace was given).
pub fn probe() -> Result<()> {
    // SAFETY: only tries to open the library.
    if unsafe { sys::is_culib_present() } {
        Ok(())
    } else {
        Err(Error::MissingLibrary(
            "libcupti.so (CUPTI, needed by --trace)",
            "CUPTI",
        ))
    }
}

/// The CUPTI API version the loaded library reports (130001 for CUDA 13.0).
pub fn version() -> Result<u32> {
    let mut v = 0u32;
    // SAFETY: writes one u32.
    check("cuptiGetVersion", unsafe { sys::cuptiGetVersion(&mut v) })?;
    Ok(v)
}

/// Now, on the clock of the activity records (ns); 0 if CUPTI cannot say.
pub fn now() -> u64 {
    let mut t = 0u64;
    // SAFETY: writes one u64; only called while a session holds the library loaded.
    match unsafe { sys::cuptiGetTimestamp(&mut t) } {
        CUptiResult::CUPTI_SUCCESS => t,
        _ => 0,
    }
}

/// A CUPTI subscription with the activity kinds enabled; [stop] undoes it.
pub struct Recording {
    subscriber: sys::CUpti_SubscriberHandle,
}

// SAFETY: the handle is an opaque token CUPTI accepts from any thread.
unsafe impl Send for Recording {}

/// Where completed buffers' records go: set by [start], called from CUPTI's callback thread.
static DELIVER: Mutex<Option<Deliver>> = Mutex::new(None);

/// Receives a completed buffer's records and how many CUPTI dropped.
pub type Deliver = fn(Vec<Activity>, u64);

/// Subscribe (so a second client is refused clearly), register the buffer callbacks and
/// enable the kinds; every completed buffer's records go to `deliver`.
pub fn start(deliver: Deliver) -> Result<Recording> {
    if let Ok(mut d) = DELIVER.lock() {
        *d = Some(deliver);
    }
    let mut subscriber: sys::CUpti_SubscriberHandle = std::ptr::null_mut();
    // SAFETY: no callback function, so no user data is ever read.
    check("cuptiSubscribe", unsafe {
        sys::cuptiSubscribe(&mut subscriber, None, std::ptr::null_mut())
    })?;
    let recording = Recording { subscriber };
    let enabled = (|| {
        // SAFETY: both callbacks match CUPTI's signatures and live for the whole program.
        check("cuptiActivityRegisterCallbacks", unsafe {
            sys::cuptiActivityRegisterCallbacks(Some(buffer_requested), Some(buffer_completed))
        })?;
        for kind in KINDS {
            // SAFETY: plain enable of a kind.
            check("cuptiActivityEnable", unsafe {
                sys::cuptiActivityEnable(kind)
            })?;
        }
        Ok(())
    })();
    match enabled {
        Ok(()) => Ok(recording),
        Err(e) => {
            let _ = recording.stop();
            Err(e)
        }
    }
}

/// Deliver every buffered record now (to the function given to [start]).
pub fn flush() -> Result<()> {
    // SAFETY: plain call; the completion callback runs before it returns.
    check("cuptiActivityFlushAll", unsafe {
        sys::cuptiActivityFlushAll(FLUSH_FORCED)
    })
}

impl Recording {
    /// Flush, disable the kinds and unsubscribe; errors are reported, not fatal.
    pub fn stop(self) -> Result<()> {
        let flushed = flush();
        for kind in KINDS {
            // SAFETY: plain disable of a kind enabled in start.
            unsafe { sys::cuptiActivityDisable(kind) };
        }
        // SAFETY: the handle came from cuptiSubscribe and is released once.
        let unsubscribed = check("cuptiUnsubscribe", unsafe {
            sys::cuptiUnsubscribe(self.subscriber)
        });
        flushed.and(unsubscribed)
    }
}

unsafe extern "C" fn buffer_requested(
    buffer: *mut *mut u8,
    size: *mut usize,
    max_records: *mut usize,
) {
    // SAFETY: a non-zero-sized layout; freed in buffer_completed.
    let p = unsafe { std::alloc::alloc(buffer_layout()) };
    // SAFETY: CUPTI passes valid out-pointers.
    unsafe {
        *buffer = p;
        *size = if p.is_null() { 0 } else { BUFFER_BYTES };
        *max_records = 0;
    }
}

/// Kernel names by CUPTI's pointer: the same pointer is reused for every launch of a kernel.
static NAMES: Mutex<BTreeMap<usize, String>> = Mutex::new(BTreeMap::new());

fn name_of(names: &mut BTreeMap<usize, String>, p: *const c_char) -> String {
    if p.is_null() {
        return "<unnamed kernel>".into();
    }
    names
        .entry(p as usize)
        // SAFETY: CUPTI's kernel names are NUL-terminated and outlive the records.
        .or_insert_with(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
        .clone()
}

unsafe extern "C" fn buffer_completed(
    context: CUcontext,
    stream_id: u32,
    buffer: *mut u8,
    _size: usize,
    valid: usize,
) {
    if buffer.is_null() {
        return;
    }
    let mut activities: Vec<Activity> = Vec::new();
    if let Ok(mut names) = NAMES.lock() {
        let mut record: *mut sys::CUpti_Activity = std::ptr::null_mut();
        // SAFETY: walks the records CUPTI wrote into this buffer; each is whole.
        while unsafe { sys::cuptiActivityGetNextRecord(buffer, valid, &mut record) }
            == CUptiResult::CUPTI_SUCCESS
        {
            let parsed = unsafe {
                parse_record(record.cast::<u8>().cast_const(), &mut |p| {
                    name_of(&mut names, p)
                })
            };
            activities.extend(parsed);
        }
    }
    let mut dropped = 0usize;
    // SAFETY: context and stream as CUPTI passed them; writes one usize.
    unsafe { sys::cuptiActivityGetNumDroppedRecords(context, stream_id, &mut dropped) };
    if let Some(deliver) = DELIVER.lock().ok().and_then(|d| *d) {
        deliver(activities, dropped as u64);
    }
    // SAFETY: allocated in buffer_requested with the same layout.
    unsafe { std::alloc::dealloc(buffer, buffer_layout()) };
}
