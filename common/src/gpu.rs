//! Opening a GPU: probe for the driver (cudarc panics when a library is missing, so we look
//! first), create the context and the lesson's stream, and read what the device is.

use std::sync::Arc;

use cudarc::driver::sys::{
    self, CUdevice_attribute as Attr, CUgraphInstantiate_flags, CUstreamCaptureMode,
};
use cudarc::driver::{
    CudaContext, CudaGraph, CudaSlice, CudaStream, DevicePtrMut, DeviceRepr, ValidAsZeroBits,
};
use serde::{Deserialize, Serialize};

use crate::error::{CudaContext as _, Error, Result};
pub use crate::nvml::cuda_version;
use crate::nvml::Nvml;
use plotting::format::human_bytes;

/// What a result needs to say about the device it was measured on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceInfo {
    pub ordinal: usize,
    pub name: String,
    pub uuid: String,
    pub compute_capability: (i32, i32),
    pub sm_count: u32,
    pub total_memory_bytes: u64,
    pub l2_bytes: u64,
    /// Boost clock the driver reports as the maximum (MHz).
    pub max_sm_clock_mhz: u32,
    pub memory_clock_mhz: u32,
    pub memory_bus_width_bits: u32,
    /// Driver version as NVML prints it (e.g. 580.159.04), or the CUDA API number without NVML.
    pub driver_version: String,
    /// CUDA version the driver supports (e.g. 13.0).
    pub cuda_driver_version: String,
    /// NVRTC's version (e.g. 13.0).
    pub nvrtc_version: String,
}

impl DeviceInfo {
    /// "sm_90" for compute capability 9.0.
    pub fn arch(&self) -> String {
        format!(
            "sm_{}{}",
            self.compute_capability.0, self.compute_capability.1
        )
    }

    /// A short folder name for results of this GPU model: "h100", "h200", "a100", ...
    pub fn model_slug(&self) -> String {
        model_slug(&self.name)
    }
}

/// "NVIDIA H100 80GB HBM3" -> "h100"; "NVIDIA GeForce RTX 4090" -> "rtx-4090".
pub fn model_slug(name: &str) -> String {
    let cleaned = name
        .replace("NVIDIA", "")
        .replace("GeForce", "")
        .replace("Tesla", "");
    let words: Vec<String> = cleaned
        .split_whitespace()
        .map(|w| w.split('-').next().unwrap_or("").to_ascii_lowercase())
        .filter(|w| !w.is_empty())
        .filter(|w| {
            !w.ends_with("gb")
                && !w.starts_with("hbm")
                && !w.starts_with("pcie")
                && !w.starts_with("sxm")
        })
        .collect();
    if words.is_empty() {
        "unknown-gpu".into()
    } else {
        words.join("-")
    }
}

/// Bytes of host memory available now (MemAvailable), where the system says.
pub fn host_available_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    parse_mem_available(&text)
}

pub fn parse_mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Fail with a clear message, before allocating, when host memory cannot hold `bytes`.
pub fn check_host_fits(what: &str, bytes: u64) -> Result<()> {
    match host_available_bytes() {
        Some(available) if bytes > available => Err(Error::invalid(format!(
            "out of host memory: {what} needs {}, the system has {} available",
            human_bytes(bytes),
            human_bytes(available)
        ))),
        _ => Ok(()),
    }
}

/// An out-of-memory error that says what wanted how much, of how much free and in all.
pub fn out_of_memory(what: &str, needed: u64, free: u64, total: u64) -> Error {
    Error::OutOfMemory {
        what: what.to_string(),
        needed: human_bytes(needed),
        free: human_bytes(free),
        total: human_bytes(total),
    }
}

/// The device-memory check without a device: `needed` bytes against `free` (of `total`).
pub fn check_fits_in(what: &str, needed: u64, free: u64, total: u64) -> Result<()> {
    if needed > free {
        return Err(out_of_memory(what, needed, free, total));
    }
    Ok(())
}

/// What a `--devices` flag says, checked as written (no GPU needed): every GPU, or a list of
/// ordinals (`0,2`), each at most once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceList {
    All,
    These(Vec<usize>),
}

impl std::str::FromStr for DeviceList {
    type Err = String;

    /// A bad word is one line saying what to write.
    fn from_str(spec: &str) -> std::result::Result<DeviceList, String> {
        let spec = spec.trim();
        if spec == "all" {
            return Ok(DeviceList::All);
        }
        let mut out = Vec::new();
        for word in spec.split(',').map(str::trim) {
            let i: usize = word.parse().map_err(|_| {
                format!("--devices: '{word}' is not a GPU number (use 0,1,... or all)")
            })?;
            if out.contains(&i) {
                return Err(format!("--devices: GPU {i} is named twice"));
            }
            out.push(i);
        }
        Ok(DeviceList::These(out))
    }
}

impl DeviceList {
    /// The first GPU named that is not among `count` visible ones.
    pub fn missing(&self, count: usize) -> Option<usize> {
        match self {
            DeviceList::All => None,
            DeviceList::These(list) => list.iter().copied().find(|&i| i >= count),
        }
    }

    /// The ordinals among `count` visible GPUs; one that is not there is one line.
    pub fn resolve(&self, count: usize) -> std::result::Result<Vec<usize>, String> {
        if let Some(i) = self.missing(count) {
            return Err(format!(
                "--devices: GPU {i} is not visible; {count} GPU(s) are, numbered from 0"
            ));
        }
        Ok(match self {
            DeviceList::All => (0..count).collect(),
            DeviceList::These(list) => list.clone(),
        })
    }
}

/// An open GPU: context, the stream every lesson works on, and its description.
pub struct Gpu {
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
    pub info: DeviceInfo,
    pub nvml: Option<Nvml>,
}

/// Fails with a one-line error, never a panic, when the driver library or a GPU is missing.
pub fn probe_driver() -> Result<usize> {
    // SAFETY: only tries to dlopen the driver library by its usual names.
    if !unsafe { sys::is_culib_present() } {
        return Err(Error::NoDriver);
    }
    if let Err(e) = cudarc::driver::result::init() {
        return Err(match e.0 {
            sys::cudaError_enum::CUDA_ERROR_NO_DEVICE => Error::NoDevice(String::new()),
            _ => Error::NoDevice(format!(" (the driver said: {e})")),
        });
    }
    let count = CudaContext::device_count().cuda("counting devices")? as usize;
    if count == 0 {
        return Err(Error::NoDevice(String::new()));
    }
    Ok(count)
}

/// Make sure a CUDA library cudarc will load is there, so that its absence is an error, not a
/// panic. Looks on the loader path first, then in the usual toolkit folders.
pub fn ensure_library(
    present: unsafe fn() -> bool,
    file_stem: &'static str,
    what: &'static str,
) -> Result<()> {
    // SAFETY: only tries to dlopen the library by its usual names.
    if unsafe { present() } {
        return Ok(());
    }
    for dir in crate::libraries::toolkit_dirs() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().to_string();
            if name.starts_with(&format!("{file_stem}.so")) {
                // Loaded by full path and never closed, so cudarc's later dlopen by soname
                // finds it already in the process.
                if pin_library(&entry.path()) && unsafe { present() } {
                    return Ok(());
                }
            }
        }
    }
    Err(Error::MissingLibrary(what, crate::libraries::CUDA_MAJOR))
}

/// Load a library by path, RTLD_GLOBAL, and keep it loaded for the life of the process.
fn pin_library(path: &std::path::Path) -> bool {
    use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_NOW};
    // SAFETY: loading a CUDA library; its initialisers are CUDA's own.
    match unsafe { Library::open(Some(path), RTLD_NOW | RTLD_GLOBAL) } {
        Ok(library) => {
            // Never closed, as the caller needs.
            std::mem::forget(library);
            true
        }
        Err(_) => false,
    }
}

impl Gpu {
    /// Open GPU `ordinal`, with cudarc's per-buffer event tracking off: lessons order their own
    /// streams, and tracking would add event records to every launch and break stream capture.
    pub fn open(ordinal: usize) -> Result<Gpu> {
        let count = probe_driver()?;
        if ordinal >= count {
            return Err(Error::BadDevice {
                requested: ordinal,
                count,
            });
        }
        ensure_library(
            cudarc::nvrtc::sys::is_culib_present,
            "libnvrtc",
            "NVRTC (libnvrtc)",
        )?;
        let ctx = CudaContext::new(ordinal).cuda("creating the CUDA context")?;
        // SAFETY: called before any buffer exists; every lesson orders its streams itself.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.new_stream().cuda("creating a stream")?;
        let nvml = Nvml::open();
        let info = read_info(&ctx, ordinal, nvml.as_ref())?;
        Ok(Gpu {
            ctx,
            stream,
            info,
            nvml,
        })
    }

    /// (free, total) device memory in bytes.
    pub fn memory(&self) -> Result<(u64, u64)> {
        let (free, total) = self.ctx.mem_get_info().cuda("reading free memory")?;
        Ok((free as u64, total as u64))
    }

    /// An out-of-memory error that says what wanted how much.
    pub fn out_of_memory(&self, what: &str, needed: u64) -> Error {
        let (free, total) = self.memory().unwrap_or((0, self.info.total_memory_bytes));
        out_of_memory(what, needed, free, total)
    }

    /// Fail early, with a clear message, when `bytes` cannot fit in what is free now.
    pub fn check_fits(&self, what: &str, bytes: u64) -> Result<()> {
        let (free, total) = self.memory()?;
        check_fits_in(what, bytes, free, total)
    }

    /// Allocate `len` elements on the lesson's stream (contents undefined).
    pub fn alloc<T: DeviceRepr>(&self, len: usize, what: &str) -> Result<CudaSlice<T>> {
        let bytes = (len as u64).saturating_mul(std::mem::size_of::<T>() as u64);
        // SAFETY: the contents are undefined until written; callers write (or poison) before reading.
        unsafe { self.stream.alloc::<T>(len) }.map_err(|e| self.map_alloc_error(e, what, bytes))
    }

    /// Allocate and zero `len` elements.
    pub fn alloc_zeros<T: DeviceRepr + ValidAsZeroBits>(
        &self,
        len: usize,
        what: &str,
    ) -> Result<CudaSlice<T>> {
        let bytes = (len as u64).saturating_mul(std::mem::size_of::<T>() as u64);
        self.stream
            .alloc_zeros::<T>(len)
            .map_err(|e| self.map_alloc_error(e, what, bytes))
    }

    /// Copy a host slice into a new device buffer.
    pub fn upload<T: DeviceRepr>(&self, host: &[T], what: &str) -> Result<CudaSlice<T>> {
        let mut buf = self.alloc::<T>(host.len(), what)?;
        self.stream
            .memcpy_htod(host, &mut buf)
            .cuda(&format!("copying {what} to the GPU"))?;
        Ok(buf)
    }

    /// Copy a device buffer back to a new host vector (synchronizes the stream).
    pub fn download<T: DeviceRepr + Clone + Default>(&self, buf: &CudaSlice<T>) -> Result<Vec<T>> {
        self.stream
            .clone_dtoh(buf)
            .cuda("copying a result back from the GPU")
    }

    /// Fill an f32 buffer with quiet NaN on the device (cuMemsetD32), so that any element a
    /// variant fails to write cannot pass verification.
    pub fn poison(&self, buf: &mut CudaSlice<f32>) -> Result<()> {
        const QUIET_NAN_BITS: u32 = 0x7fc0_0000;
        let len = buf.len();
        let (ptr, _record) = buf.device_ptr_mut(&self.stream);
        // SAFETY: writes exactly len 4-byte words of a live allocation, on its stream.
        unsafe { sys::cuMemsetD32Async(ptr, QUIET_NAN_BITS, len, self.stream.cu_stream()) }
            .result()
            .cuda("poisoning a buffer with NaN")
    }

    pub fn sync(&self) -> Result<()> {
        self.stream.synchronize().cuda("synchronizing the stream")
    }

    /// Capture what `queue` puts on the lesson's stream as a CUDA graph, instantiated and ready
    /// to launch there. Nothing queued is run while capturing; a failure inside `queue` still
    /// ends the capture, so the stream is usable afterwards.
    pub fn capture(&self, queue: impl FnOnce() -> Result<()>) -> Result<CudaGraph> {
        self.stream
            .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .cuda("beginning a stream capture")?;
        let queued = queue();
        let graph = self.stream.end_capture(CUgraphInstantiate_flags(0));
        queued?;
        graph
            .cuda("ending a stream capture")?
            .ok_or_else(|| Error::invalid("the stream capture produced no graph"))
    }

    fn map_alloc_error(&self, e: cudarc::driver::DriverError, what: &str, bytes: u64) -> Error {
        if e.0 == sys::cudaError_enum::CUDA_ERROR_OUT_OF_MEMORY {
            // The context survives an allocation failure; make sure nothing is left pending.
            let _ = self.stream.synchronize();
            self.out_of_memory(what, bytes)
        } else {
            Error::Cuda {
                what: format!("allocating {what}"),
                source: e,
            }
        }
    }

    /// Current SM clock in MHz, where NVML is available.
    pub fn sm_clock_mhz(&self) -> Option<u32> {
        self.nvml.as_ref()?.sm_clock_mhz(&self.info.uuid)
    }
}

fn read_info(ctx: &Arc<CudaContext>, ordinal: usize, nvml: Option<&Nvml>) -> Result<DeviceInfo> {
    let attr = |a: Attr| ctx.attribute(a).cuda("reading a device attribute");
    let uuid = ctx.uuid().cuda("reading the device UUID")?;
    let mut driver_api = 0i32;
    // SAFETY: writes one int.
    unsafe { sys::cuDriverGetVersion(&mut driver_api) }
        .result()
        .cuda("reading the driver version")?;
    let cuda_driver_version = cuda_version(driver_api);
    let (mut major, mut minor) = (0i32, 0i32);
    // SAFETY: writes two ints.
    let nvrtc_version = match unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) } {
        cudarc::nvrtc::sys::nvrtcResult::NVRTC_SUCCESS => format!("{major}.{minor}"),
        _ => "unknown".to_string(),
    };
    let driver_version = nvml
        .and_then(|n| n.driver_version())
        .unwrap_or_else(|| format!("CUDA API {driver_api}"));
    Ok(DeviceInfo {
        ordinal,
        name: ctx.name().cuda("reading the device name")?,
        uuid: format_uuid(&uuid.bytes),
        compute_capability: ctx
            .compute_capability()
            .cuda("reading the compute capability")?,
        sm_count: attr(Attr::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32,
        total_memory_bytes: ctx.total_mem().cuda("reading total memory")? as u64,
        l2_bytes: attr(Attr::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)? as u64,
        max_sm_clock_mhz: (attr(Attr::CU_DEVICE_ATTRIBUTE_CLOCK_RATE)? / 1000) as u32,
        memory_clock_mhz: (attr(Attr::CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE)? / 1000) as u32,
        memory_bus_width_bits: attr(Attr::CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH)? as u32,
        driver_version,
        cuda_driver_version,
        nvrtc_version,
    })
}

/// The "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" form NVML and nvidia-smi use.
pub fn format_uuid(bytes: &[std::ffi::c_char; 16]) -> String {
    let hex: Vec<String> = bytes.iter().map(|b| format!("{:02x}", *b as u8)).collect();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        hex[0..4].concat(),
        hex[4..6].concat(),
        hex[6..8].concat(),
        hex[8..10].concat(),
        hex[10..16].concat()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuda_versions_read_as_major_and_minor() {
        assert_eq!(cuda_version(13000), "13.0");
        assert_eq!(cuda_version(12080), "12.8");
        assert_eq!(cuda_version(11040), "11.4");
    }

    /// The GPUs a `--devices` flag names among `count` (no flag: all of them).
    fn parse_device_list(
        spec: Option<&str>,
        count: usize,
    ) -> std::result::Result<Vec<usize>, String> {
        spec.map_or(Ok(DeviceList::All), str::parse)?.resolve(count)
    }

    #[test]
    fn device_lists_name_gpus_once_each() {
        assert_eq!(parse_device_list(None, 3), Ok(vec![0, 1, 2]));
        assert_eq!(parse_device_list(Some(" all "), 2), Ok(vec![0, 1]));
        assert_eq!(parse_device_list(Some("2, 0"), 3), Ok(vec![2, 0]));
        assert!(parse_device_list(Some("x"), 3)
            .unwrap_err()
            .contains("not a GPU number"));
        assert!(parse_device_list(Some("3"), 3)
            .unwrap_err()
            .contains("3 GPU(s)"));
        assert!(parse_device_list(Some("1,1"), 3)
            .unwrap_err()
            .contains("twice"));
        assert!(parse_device_list(Some(""), 3).is_err());
        // As written, before any GPU is asked for; then against the GPUs there are.
        let list: DeviceList = "0, 4".parse().unwrap();
        assert_eq!(list.missing(4), Some(4));
        assert_eq!(list.missing(5), None);
        assert_eq!(DeviceList::All.missing(0), None);
        assert!("1,1".parse::<DeviceList>().unwrap_err().contains("twice"));
    }

    #[test]
    fn model_slugs_name_the_model() {
        assert_eq!(model_slug("NVIDIA H100 80GB HBM3"), "h100");
        assert_eq!(model_slug("NVIDIA H200"), "h200");
        assert_eq!(model_slug("NVIDIA A100-SXM4-80GB"), "a100");
        assert_eq!(model_slug("NVIDIA GeForce RTX 4090"), "rtx-4090");
        assert_eq!(model_slug(""), "unknown-gpu");
    }

    #[test]
    fn mem_available_is_read_in_bytes() {
        let text = "MemTotal:       24000000 kB\nMemAvailable:    1000 kB\n";
        assert_eq!(parse_mem_available(text), Some(1_024_000));
        assert_eq!(parse_mem_available("MemTotal: 1 kB\n"), None);
    }

    #[test]
    fn host_checks_refuse_the_absurd() {
        assert!(check_host_fits("test", 1).is_ok());
        assert!(check_host_fits("test", u64::MAX)
            .unwrap_err()
            .to_string()
            .contains("out of host memory"));
    }

    #[test]
    fn device_checks_name_what_and_how_much() {
        assert!(check_fits_in("x", 10, 10, 20).is_ok());
        let err = check_fits_in("the buffers", 3 << 30, 1 << 30, 2 << 30).unwrap_err();
        assert!(err.is_out_of_memory());
        assert_eq!(
            err.to_string(),
            "out of device memory: the buffers needs 3 GiB, the GPU has 1 GiB free of 2 GiB"
        );
    }

    #[test]
    fn uuid_is_formatted_like_nvidia_smi() {
        let mut bytes = [0 as std::ffi::c_char; 16];
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = (i * 17) as u8 as std::ffi::c_char;
        }
        assert_eq!(
            format_uuid(&bytes),
            "GPU-00112233-4455-6677-8899-aabbccddeeff"
        );
    }
}
