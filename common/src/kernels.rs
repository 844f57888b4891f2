//! CUDA C kernels compiled at run time by NVRTC for the device's own architecture, with the
//! machine code (CUBIN) cached on disk. The cache key covers the source, the options, the
//! architecture and NVRTC's version, so any change recompiles and a repeat run loads in
//! milliseconds instead of paying ~200 ms of compilation per module.

use std::ffi::{CStr, CString};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::{CudaFunction, CudaModule, LaunchConfig};
use cudarc::nvrtc::{result as nvrtc, sys as nvrtc_sys, Ptx};

use crate::error::{CudaContext as _, Error, Result};
use crate::files::{cache_dir, write_atomically};
use crate::gpu::Gpu;

/// A `.cu` source the lesson embeds with `include_str!`.
#[derive(Debug, Clone, Copy)]
pub struct KernelSource {
    /// Shown in compile errors and used in the cache file name.
    pub name: &'static str,
    pub code: &'static str,
}

/// The harness's own kernels: the blocking kernel that holds the stream while a sample's
/// launches are queued, the cold-mode L2 flush, and the kernels of the memory and compute
/// ceilings.
pub const HARNESS: KernelSource = KernelSource {
    name: "harness",
    code: include_str!("../kernels/harness.cu"),
};

/// Kernels of the harness that run inside timed regions (the blocking kernel, the cold-mode L2
/// flush): traces label them and leave them out of kernel summaries and busy time.
pub const HARNESS_KERNEL_NAMES: [&str; 2] = ["hold_stream", "flush_l2_by_reading"];

/// A loaded module: look kernels up by their `extern "C"` names.
pub struct Module {
    pub name: &'static str,
    module: Arc<CudaModule>,
    /// Whether this load came from the disk cache.
    pub cached: bool,
}

impl Module {
    pub fn function(&self, kernel: &str) -> Result<CudaFunction> {
        self.module
            .load_function(kernel)
            .cuda(&format!("loading kernel {kernel} from {}", self.name))
    }
}

/// A one-dimensional launch of `threads` threads in blocks of `block` (at least one block).
pub fn grid_1d(threads: u64, block: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (threads.div_ceil(block as u64).max(1) as u32, 1, 1),
        block_dim: (block, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// The NVRTC options every kernel is compiled with: the device's own architecture (real
/// machine code, no JIT at load), C++17, and line info so profilers can show source lines.
pub fn compile_options(arch: &str, extra: &[&str]) -> Vec<String> {
    let mut options = vec![
        format!("--gpu-architecture={arch}"),
        "--std=c++17".to_string(),
        "--generate-line-info".to_string(),
    ];
    options.extend(extra.iter().map(|s| s.to_string()));
    options
}

/// FNV-1a, 64 bit: a stable hash for cache keys (std's hasher may change between releases).
pub fn fnv1a64(parts: &[&[u8]]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for &byte in *part {
            hash ^= byte as u64;
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
        // Separate parts so ("ab","c") and ("a","bc") differ.
        hash ^= 0xff;
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

pub fn cache_key(source: &str, options: &[String], arch: &str, nvrtc_version: &str) -> u64 {
    let joined = options.join("\u{1f}");
    fnv1a64(&[
        source.as_bytes(),
        joined.as_bytes(),
        arch.as_bytes(),
        nvrtc_version.as_bytes(),
    ])
}

/// What this process spent on kernels: modules compiled by NVRTC and loaded from the cache,
/// and the seconds each took (a cold cache pays ~200 ms per module, a warm one milliseconds).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct KernelClock {
    pub compiled: u64,
    pub compile_s: f64,
    pub cached: u64,
    pub load_s: f64,
}

static COMPILED: AtomicU64 = AtomicU64::new(0);
static COMPILE_NS: AtomicU64 = AtomicU64::new(0);
static CACHED: AtomicU64 = AtomicU64::new(0);
static LOAD_NS: AtomicU64 = AtomicU64::new(0);

/// The process's kernel clock so far.
pub fn clock() -> KernelClock {
    let s = |ns: &AtomicU64| ns.load(Ordering::Relaxed) as f64 / 1e9;
    KernelClock {
        compiled: COMPILED.load(Ordering::Relaxed),
        compile_s: s(&COMPILE_NS),
        cached: CACHED.load(Ordering::Relaxed),
        load_s: s(&LOAD_NS),
    }
}

fn count(modules: &AtomicU64, ns: &AtomicU64, since: Instant) {
    modules.fetch_add(1, Ordering::Relaxed);
    ns.fetch_add(since.elapsed().as_nanos() as u64, Ordering::Relaxed);
}

/// Compile (or load from the cache) one source for `gpu`, counted in [clock].
pub fn load(gpu: &Gpu, source: KernelSource, extra_options: &[&str]) -> Result<Module> {
    let start = Instant::now();
    let module = load_uncounted(gpu, source, extra_options)?;
    if module.cached {
        count(&CACHED, &LOAD_NS, start);
    } else {
        count(&COMPILED, &COMPILE_NS, start);
    }
    Ok(module)
}

fn load_uncounted(gpu: &Gpu, source: KernelSource, extra_options: &[&str]) -> Result<Module> {
    let arch = gpu.info.arch();
    let options = compile_options(&arch, extra_options);
    let key = cache_key(source.code, &options, &arch, &gpu.info.nvrtc_version);
    let path = cache_dir()
        .join("kernels")
        .join(format!("{}-{arch}-{key:016x}.cubin", source.name));
    if let Ok(cubin) = std::fs::read(&path) {
        if let Ok(module) = gpu.ctx.load_module(Ptx::from_binary(cubin)) {
            return Ok(Module {
                name: source.name,
                module,
                cached: true,
            });
        }
        // A stale or damaged file: fall through and rebuild it.
    }
    let cubin = compile_cubin(source, &options)?;
    // The cache is an optimisation: failing to write it must not fail the run.
    let _ = write_atomically(&path, &cubin);
    let module = gpu
        .ctx
        .load_module(Ptx::from_binary(cubin))
        .cuda(&format!("loading module {}", source.name))?;
    Ok(Module {
        name: source.name,
        module,
        cached: false,
    })
}

/// Run NVRTC and return the CUBIN; a failure carries NVRTC's log.
pub fn compile_cubin(source: KernelSource, options: &[String]) -> Result<Vec<u8>> {
    let code = CString::new(source.code)
        .map_err(|_| Error::invalid(format!("{} contains a NUL byte", source.name)))?;
    let name = CString::new(format!("{}.cu", source.name)).expect("kernel names have no NUL");
    let prog = nvrtc::create_program(&code, Some(&name)).map_err(|e| Error::Compile {
        name: source.name.to_string(),
        log: format!("creating the program failed: {e:?}"),
    })?;
    // SAFETY: `prog` is live until destroy_program below; `code` and `name` outlive it.
    let outcome = unsafe {
        match nvrtc::compile_program(prog, options) {
            Ok(()) => cubin_of(prog).map_err(|e| format!("reading the CUBIN failed: {e:?}")),
            Err(e) => Err(format!(
                "{e:?} with options {options:?}\n{}",
                program_log(prog)
            )),
        }
    };
    // SAFETY: created above, destroyed once.
    unsafe {
        let _ = nvrtc::destroy_program(prog);
    }
    outcome.map_err(|log| Error::Compile {
        name: source.name.to_string(),
        log,
    })
}

unsafe fn program_log(prog: nvrtc_sys::nvrtcProgram) -> String {
    match nvrtc::get_program_log(prog) {
        Ok(raw) if !raw.is_empty() => CStr::from_ptr(raw.as_ptr()).to_string_lossy().into_owned(),
        _ => String::from("(NVRTC gave no log)"),
    }
}

unsafe fn cubin_of(
    prog: nvrtc_sys::nvrtcProgram,
) -> std::result::Result<Vec<u8>, nvrtc::NvrtcError> {
    let mut size = 0usize;
    nvrtc_sys::nvrtcGetCUBINSize(prog, &mut size).result()?;
    let mut cubin = vec![0u8; size];
    nvrtc_sys::nvrtcGetCUBIN(prog, cubin.as_mut_ptr().cast()).result()?;
    Ok(cubin)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_changes_with_each_input() {
        let opts = compile_options("sm_90", &[]);
        let base = cache_key("src", &opts, "sm_90", "13.0");
        assert_eq!(base, cache_key("src", &opts, "sm_90", "13.0"));
        assert_ne!(base, cache_key("src2", &opts, "sm_90", "13.0"));
        assert_ne!(
            base,
            cache_key("src", &compile_options("sm_90", &["-DX"]), "sm_90", "13.0")
        );
        assert_ne!(base, cache_key("src", &opts, "sm_80", "13.0"));
        assert_ne!(base, cache_key("src", &opts, "sm_90", "13.1"));
    }

    #[test]
    fn fnv_separates_parts() {
        assert_ne!(fnv1a64(&[b"ab", b"c"]), fnv1a64(&[b"a", b"bc"]));
        // The published FNV-1a test vector for "a" (before our part separator).
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        h ^= b'a' as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
        assert_eq!(h, 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn one_dimensional_grids_cover_every_thread() {
        assert_eq!(grid_1d(0, 256).grid_dim, (1, 1, 1));
        assert_eq!(grid_1d(256, 256).grid_dim, (1, 1, 1));
        assert_eq!(grid_1d(257, 256).grid_dim, (2, 1, 1));
        assert_eq!(grid_1d(257, 256).block_dim, (256, 1, 1));
    }

    #[test]
    fn options_name_the_architecture() {
        let opts = compile_options("sm_90", &["--use_fast_math"]);
        assert_eq!(opts[0], "--gpu-architecture=sm_90");
        assert!(opts.contains(&"--use_fast_math".to_string()));
    }
}
