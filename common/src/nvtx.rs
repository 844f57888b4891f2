//! NVTX ranges, loaded at run time. cudarc's nvtx module looks only for libnvToolsExt, which
//! CUDA 13 no longer ships, and the `nvtx` crate needs libclang to build. CUDA 13 ships
//! libnvtx3interop.so.1, which exports the plain C API; older toolkits ship libnvToolsExt.so.1
//! with the same symbols. With neither, every call is a no-op and the run goes on.
//!
//! The harness opens a range per variant (named `lesson:variant`; not `lesson/variant`, because
//! ncu's NVTX filters read `/` as "nested in"), and inside it `verify`, `warmup` and `timed`;
//! lessons add their phases (copy in, compute, copy out; forward, backward, update) with
//! [range] or [in_range]. Nsight Systems shows them on the timeline; `ncu --nvtx --nvtx-include
//! "ch1-intensity:fused/"` filters by them.
//!
//! Ranges are CPU-side: they cover the time the host spent issuing the work, which for queued
//! launches is not when the GPU ran it. The built-in trace ([crate::trace]) also records them
//! itself (name, start, end on its clock) through [record_with], so they appear in its trace
//! file whether or not an NVTX library is present.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, CString};
use std::sync::{Mutex, OnceLock};

use libloading::Library;

type PushFn = unsafe extern "C" fn(*const c_char) -> c_int;
type PopFn = unsafe extern "C" fn() -> c_int;
type MarkFn = unsafe extern "C" fn(*const c_char);

struct Api {
    push: PushFn,
    pop: PopFn,
    mark: MarkFn,
    library: &'static str,
    /// Held for the life of the process: the function pointers above point into it.
    _library: Library,
}

/// The library names tried, in order.
pub const LIBRARIES: [&str; 4] = [
    "libnvtx3interop.so.1",
    "libnvtx3interop.so",
    "libnvToolsExt.so.1",
    "libnvToolsExt.so",
];

/// The three entry points of one library, or `None` when it lacks any of them.
fn entry_points(library: &Library) -> Option<(PushFn, PopFn, MarkFn)> {
    // SAFETY: the NVTX C API's signatures, as these libraries export them.
    unsafe {
        Some((
            *library.get::<PushFn>(b"nvtxRangePushA\0").ok()?,
            *library.get::<PopFn>(b"nvtxRangePop\0").ok()?,
            *library.get::<MarkFn>(b"nvtxMarkA\0").ok()?,
        ))
    }
}

fn load() -> Option<Api> {
    LIBRARIES.into_iter().find_map(|name| {
        // SAFETY: loading an NVTX library by name; its initialisers are NVIDIA's own.
        let library = unsafe { Library::new(name) }.ok()?;
        let (push, pop, mark) = entry_points(&library)?;
        Some(Api {
            push,
            pop,
            mark,
            library: name,
            _library: library,
        })
    })
}

fn api() -> Option<&'static Api> {
    static API: OnceLock<Option<Api>> = OnceLock::new();
    API.get_or_init(load).as_ref()
}

/// Which NVTX library was loaded, if any.
pub fn library() -> Option<&'static str> {
    api().map(|a| a.library)
}

/// An NVTX range that ends when dropped.
#[must_use = "the range ends when this is dropped"]
pub struct Range {
    pushed: bool,
}

/// A range as the built-in recorder saw it: times from the recorder's clock (nanoseconds).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedRange {
    pub name: String,
    pub start_ns: u64,
    pub end_ns: u64,
    /// 0 for an outermost range.
    pub depth: usize,
    /// Small per-process number of the thread that opened it (1 for the first).
    pub thread: u64,
}

struct Recorder {
    clock: fn() -> u64,
    done: Vec<RecordedRange>,
}

static RECORDER: Mutex<Option<Recorder>> = Mutex::new(None);

thread_local! {
    /// This thread's open ranges: name and, when a recorder was on at push, the start time.
    static OPEN: RefCell<Vec<(String, Option<u64>)>> = const { RefCell::new(Vec::new()) };
    static THREAD: u64 = {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    };
}

fn recorder_clock() -> Option<fn() -> u64> {
    RECORDER.lock().ok()?.as_ref().map(|r| r.clock)
}

/// Open a range named `name` (a no-op without NVTX, apart from the recorder and
/// [current_range]).
pub fn range(name: &str) -> Range {
    let start = recorder_clock().map(|clock| clock());
    OPEN.with(|open| open.borrow_mut().push((name.to_string(), start)));
    let pushed = match (api(), CString::new(name)) {
        (Some(a), Ok(c)) => {
            // SAFETY: a NUL-terminated string that outlives the call.
            unsafe { (a.push)(c.as_ptr()) };
            true
        }
        _ => false,
    };
    Range { pushed }
}

/// Run `f` inside a range named `name`.
pub fn in_range<T>(name: &str, f: impl FnOnce() -> T) -> T {
    let _range = range(name);
    f()
}

/// The innermost range open on this thread, if any.
pub fn current_range() -> Option<String> {
    OPEN.with(|open| open.borrow().last().map(|(name, _)| name.clone()))
}

impl Drop for Range {
    fn drop(&mut self) {
        if let (true, Some(a)) = (self.pushed, api()) {
            // SAFETY: pops the range this value pushed.
            unsafe { (a.pop)() };
        }
        let popped = OPEN.with(|open| {
            let mut open = open.borrow_mut();
            let entry = open.pop();
            entry.map(|(name, start)| (name, start, open.len()))
        });
        if let Some((name, Some(start_ns), depth)) = popped {
            if let Ok(mut guard) = RECORDER.lock() {
                if let Some(rec) = guard.as_mut() {
                    let end_ns = (rec.clock)();
                    let thread = THREAD.with(|t| *t);
                    rec.done.push(RecordedRange {
                        name,
                        start_ns,
                        end_ns,
                        depth,
                        thread,
                    });
                }
            }
        }
    }
}

/// Record every range opened from now on with `clock` (replacing an earlier recorder).
pub fn record_with(clock: fn() -> u64) {
    if let Ok(mut guard) = RECORDER.lock() {
        *guard = Some(Recorder {
            clock,
            done: Vec::new(),
        });
    }
}

/// The ranges that ended since [record_with], taken out; recording goes on.
pub fn take_recorded() -> Vec<RecordedRange> {
    RECORDER
        .lock()
        .ok()
        .and_then(|mut g| g.as_mut().map(|r| std::mem::take(&mut r.done)))
        .unwrap_or_default()
}

/// Stop recording and return what was recorded and not yet taken.
pub fn stop_recording() -> Vec<RecordedRange> {
    RECORDER
        .lock()
        .ok()
        .and_then(|mut g| g.take().map(|r| r.done))
        .unwrap_or_default()
}

/// An instantaneous marker.
pub fn mark(name: &str) {
    if let (Some(a), Ok(c)) = (api(), CString::new(name)) {
        // SAFETY: a NUL-terminated string that outlives the call.
        unsafe { (a.mark)(c.as_ptr()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_safe_without_nvtx() {
        // On CI there is no NVTX library: everything must be a quiet no-op.
        let outer = range("outer");
        {
            let _inner = range("inner");
            mark("a mark");
        }
        drop(outer);
        let _ = range("name with \0 a NUL is skipped, not a panic");
    }

    fn fake_clock() -> u64 {
        use std::sync::atomic::{AtomicU64, Ordering};
        static T: AtomicU64 = AtomicU64::new(100);
        T.fetch_add(10, Ordering::Relaxed)
    }

    #[test]
    fn the_recorder_sees_nested_ranges_with_depths() {
        // One test touches the process-wide recorder, so nothing else races it.
        assert_eq!(current_range(), None);
        record_with(fake_clock);
        {
            let _outer = range("lesson:variant");
            assert_eq!(current_range().as_deref(), Some("lesson:variant"));
            in_range("timed", || {
                assert_eq!(current_range().as_deref(), Some("timed"));
            });
        }
        let mut got = stop_recording();
        // Other tests open ranges on their own threads meanwhile: keep this thread's.
        let me = THREAD.with(|t| *t);
        got.retain(|r| r.thread == me);
        assert_eq!(current_range(), None);
        let names: Vec<(&str, usize)> = got.iter().map(|r| (r.name.as_str(), r.depth)).collect();
        assert_eq!(names, vec![("timed", 1), ("lesson:variant", 0)]);
        let (inner, outer) = (&got[0], &got[1]);
        assert!(outer.start_ns < inner.start_ns && inner.end_ns < outer.end_ns);
        // Off again: ranges are not recorded.
        drop(range("unrecorded"));
        assert!(stop_recording().iter().all(|r| r.thread != me));
    }
}
