//! NVTX ranges, loaded at run time. cudarc's nvtx module looks only for libnvToolsExt, which
//! CUDA 13 no longer ships, and the `nvtx` crate needs libclang to build. CUDA 13 ships
//! libnvtx3interop.so.1, which exports the plain C API; older toolkits ship libnvToolsExt.so.1
//! with the same symbols. With neither, every call is a no-op and the run goes on.
//!
//! The harness opens a range per variant, and inside it one for warmup and one for the timed
//! samples; lessons add their phases (copy in, compute, copy out; forward, backward, update).
//! Nsight Systems shows them on the timeline; `ncu --nvtx --nvtx-include` filters by them.

use std::ffi::{c_char, c_int, c_void, CString};
use std::sync::OnceLock;

type PushFn = unsafe extern "C" fn(*const c_char) -> c_int;
type PopFn = unsafe extern "C" fn() -> c_int;
type MarkFn = unsafe extern "C" fn(*const c_char);

struct Api {
    push: PushFn,
    pop: PopFn,
    mark: MarkFn,
    library: &'static str,
}

/// The library names tried, in order.
pub const LIBRARIES: [&str; 4] = [
    "libnvtx3interop.so.1",
    "libnvtx3interop.so",
    "libnvToolsExt.so.1",
    "libnvToolsExt.so",
];

extern "C" {
    fn dlopen(filename: *const c_char, flag: c_int) -> *mut c_void;
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
}

fn load() -> Option<Api> {
    const RTLD_NOW: c_int = 2;
    for name in LIBRARIES {
        let c_name = CString::new(name).expect("no NUL");
        // SAFETY: dlopen of an NVTX library by name; the handle is kept for the process.
        let handle = unsafe { dlopen(c_name.as_ptr(), RTLD_NOW) };
        if handle.is_null() {
            continue;
        }
        let sym = |s: &str| {
            let c = CString::new(s).expect("no NUL");
            // SAFETY: looking up a symbol in a library we just opened.
            unsafe { dlsym(handle, c.as_ptr()) }
        };
        let (push, pop, mark) = (sym("nvtxRangePushA"), sym("nvtxRangePop"), sym("nvtxMarkA"));
        if push.is_null() || pop.is_null() || mark.is_null() {
            continue;
        }
        // SAFETY: the NVTX C API's signatures, as exported by these libraries.
        return Some(unsafe {
            Api {
                push: std::mem::transmute::<*mut c_void, PushFn>(push),
                pop: std::mem::transmute::<*mut c_void, PopFn>(pop),
                mark: std::mem::transmute::<*mut c_void, MarkFn>(mark),
                library: name,
            }
        });
    }
    None
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
pub struct Range(bool);

/// Open a range named `name` (a no-op without NVTX).
pub fn range(name: &str) -> Range {
    match (api(), CString::new(name)) {
        (Some(a), Ok(c)) => {
            // SAFETY: a NUL-terminated string that outlives the call.
            unsafe { (a.push)(c.as_ptr()) };
            Range(true)
        }
        _ => Range(false),
    }
}

impl Drop for Range {
    fn drop(&mut self) {
        if let (true, Some(a)) = (self.0, api()) {
            // SAFETY: pops the range this value pushed.
            unsafe { (a.pop)() };
        }
    }
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
}
