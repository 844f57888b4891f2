//! NVML, where present, for what the CUDA driver API does not say: current clocks, driver
//! version string, temperature and power, and, for the tuner, a GPU's processes with their
//! memory, its memory in use and its utilization. The one wrapper of NVML in the workspace:
//! [Nvml] opens it, [NvmlDevice] is one GPU of it. Everything here is optional; a missing NVML
//! makes each reading `None` and the run goes on.

use std::sync::Arc;

use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};
use serde::{Deserialize, Serialize};

/// NVML's library as drivers ship it: often only the soname, with no development symlink.
const LIBRARY: &str = "libnvidia-ml.so.1";

/// Open NVML: by its soname first, then by the name nvml-wrapper looks for. The error is one
/// line saying what is missing, for a caller that cannot go on without NVML.
pub fn open_nvml() -> crate::Result<nvml_wrapper::Nvml> {
    nvml_wrapper::Nvml::builder()
        .lib_path(std::ffi::OsStr::new(LIBRARY))
        .init()
        .or_else(|_| nvml_wrapper::Nvml::init())
        .map_err(|e| {
            crate::Error::invalid(format!(
                "NVML could not be opened ({e}): it is {LIBRARY}, part of the NVIDIA driver"
            ))
        })
}

pub struct Nvml(Arc<nvml_wrapper::Nvml>);

/// One reading of the GPU's state, taken before or after a timed region.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuState {
    pub sm_clock_mhz: Option<u32>,
    pub memory_clock_mhz: Option<u32>,
    pub temperature_c: Option<u32>,
    pub power_w: Option<f64>,
}

impl Nvml {
    /// NVML where present; its readings are optional, so a missing library is None.
    pub fn open() -> Option<Nvml> {
        open_nvml().ok().map(|n| Nvml(Arc::new(n)))
    }

    /// The library itself, for readings this type does not wrap.
    pub fn library(&self) -> &nvml_wrapper::Nvml {
        &self.0
    }

    /// The GPU NVML knows by `key`.
    pub fn device(&self, key: NvmlKey) -> NvmlDevice {
        NvmlDevice {
            nvml: self.0.clone(),
            key,
        }
    }

    /// The GPUs' UUIDs in NVML's order; None where one cannot be read.
    pub fn uuids(&self) -> Option<Vec<String>> {
        let count = self.0.device_count().ok()?;
        (0..count)
            .map(|i| self.0.device_by_index(i).and_then(|d| d.uuid()).ok())
            .collect()
    }

    pub fn driver_version(&self) -> Option<String> {
        self.0.sys_driver_version().ok()
    }

    pub fn sm_clock_mhz(&self, uuid: &str) -> Option<u32> {
        self.by_uuid(uuid).device()?.clock_info(Clock::SM).ok()
    }

    pub fn state(&self, uuid: &str) -> GpuState {
        self.by_uuid(uuid).state()
    }

    /// The CPUs NVML names as near the GPU (its ideal affinity); empty when it does not say.
    pub fn cpus_near(&self, uuid: &str) -> Vec<usize> {
        self.by_uuid(uuid).cpus_near()
    }

    /// (memory used, GPU utilization %) for watch-style sampling.
    pub fn usage(&self, uuid: &str) -> Option<(u64, u32)> {
        let d = self.by_uuid(uuid);
        Some((d.memory()?.0, d.utilization()?))
    }

    fn by_uuid(&self, uuid: &str) -> NvmlDevice {
        self.device(NvmlKey::Uuid(uuid.to_string()))
    }
}

/// Which GPU NVML means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NvmlKey {
    Uuid(String),
    /// NVML's index (PCI bus order).
    Index(u32),
}

/// NVML's view of one GPU: each reading asks NVML afresh, None where it does not answer.
#[derive(Debug, Clone)]
pub struct NvmlDevice {
    nvml: Arc<nvml_wrapper::Nvml>,
    key: NvmlKey,
}

impl NvmlDevice {
    fn device(&self) -> Option<nvml_wrapper::Device<'_>> {
        match &self.key {
            NvmlKey::Uuid(u) => self.nvml.device_by_uuid(u.as_str()).ok(),
            NvmlKey::Index(i) => self.nvml.device_by_index(*i).ok(),
        }
    }

    /// Compute processes on the GPU with the bytes each uses, where accounted (inside some
    /// virtual machines it is not); None when the query failed.
    pub fn processes(&self) -> Option<Vec<(u32, Option<u64>)>> {
        use nvml_wrapper::enums::device::UsedGpuMemory;
        let list = self.device()?.running_compute_processes().ok()?;
        let used = |m: UsedGpuMemory| match m {
            UsedGpuMemory::Used(b) => Some(b),
            UsedGpuMemory::Unavailable => None,
        };
        Some(
            list.into_iter()
                .map(|p| (p.pid, used(p.used_gpu_memory)))
                .collect(),
        )
    }

    /// (bytes in use, bytes in all).
    pub fn memory(&self) -> Option<(u64, u64)> {
        let m = self.device()?.memory_info().ok()?;
        Some((m.used, m.total))
    }

    pub fn name(&self) -> Option<String> {
        self.device()?.name().ok()
    }

    /// The percent of NVML's last sample period (1/6 s to 1 s, by product) in which a kernel
    /// ran.
    pub fn utilization(&self) -> Option<u32> {
        self.device()?.utilization_rates().ok().map(|u| u.gpu)
    }

    /// The CUDA compute capability (major, minor).
    pub fn compute_capability(&self) -> Option<(u32, u32)> {
        let c = self.device()?.cuda_compute_capability().ok()?;
        Some((u32::try_from(c.major).ok()?, u32::try_from(c.minor).ok()?))
    }

    /// The driver's version and the CUDA version it supports ("580.159.04", "13.0").
    pub fn driver(&self) -> Option<(String, String)> {
        let cuda = self.nvml.sys_cuda_driver_version().ok()?;
        Some((self.nvml.sys_driver_version().ok()?, cuda_version(cuda)))
    }

    pub fn state(&self) -> GpuState {
        let Some(device) = self.device() else {
            return GpuState::default();
        };
        GpuState {
            sm_clock_mhz: device.clock_info(Clock::SM).ok(),
            memory_clock_mhz: device.clock_info(Clock::Memory).ok(),
            temperature_c: device.temperature(TemperatureSensor::Gpu).ok(),
            power_w: device.power_usage().ok().map(|mw| mw as f64 / 1000.0),
        }
    }

    /// The CPUs NVML names as near the GPU (its ideal affinity); empty when it does not say.
    pub fn cpus_near(&self) -> Vec<usize> {
        let Some(device) = self.device() else {
            return Vec::new();
        };
        let words = device
            .cpu_affinity(crate::affinity::MASK_WORDS)
            .unwrap_or_default();
        // c_ulong is 64 bits on Linux, where affinity is applied, but not everywhere.
        #[allow(clippy::useless_conversion)]
        let words: Vec<u64> = words.into_iter().map(u64::from).collect();
        crate::affinity::cpus_of(&words)
    }
}

/// A CUDA version as the driver API and NVML give it (1000 x major + 10 x minor), as text:
/// 13000 is "13.0", 12080 is "12.8".
pub fn cuda_version(encoded: i32) -> String {
    format!("{}.{}", encoded / 1000, (encoded % 1000) / 10)
}

/// A clock that fell by more than `tolerance` (a fraction) between two readings was throttled
/// during the run, and the numbers measured across it are suspect.
pub fn clock_dropped(before: Option<u32>, after: Option<u32>, tolerance: f64) -> bool {
    match (before, after) {
        (Some(b), Some(a)) if b > 0 => (a as f64) < (b as f64) * (1.0 - tolerance),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_is_one_line_naming_it() {
        // Where NVML is installed this opens it; elsewhere the error names the library.
        if let Err(e) = open_nvml() {
            let line = e.to_string();
            assert!(line.contains(LIBRARY), "{line}");
            assert_eq!(line.lines().count(), 1, "{line}");
        }
    }

    #[test]
    fn a_drop_beyond_tolerance_is_flagged() {
        assert!(clock_dropped(Some(1980), Some(1700), 0.05));
        assert!(!clock_dropped(Some(1980), Some(1965), 0.05));
        assert!(!clock_dropped(Some(1700), Some(1980), 0.05));
        assert!(!clock_dropped(None, Some(1980), 0.05));
        assert!(!clock_dropped(Some(0), Some(0), 0.05));
    }
}
