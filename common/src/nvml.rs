//! NVML, where present, for what the CUDA driver API does not say: current clocks, driver
//! version string, temperature and power. Everything here is optional; a missing NVML makes
//! each reading `None` and the run goes on.

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

pub struct Nvml(nvml_wrapper::Nvml);

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
        open_nvml().ok().map(Nvml)
    }

    /// The library itself, for readings this type does not wrap.
    pub fn library(&self) -> &nvml_wrapper::Nvml {
        &self.0
    }

    pub fn driver_version(&self) -> Option<String> {
        self.0.sys_driver_version().ok()
    }

    pub fn sm_clock_mhz(&self, uuid: &str) -> Option<u32> {
        self.0.device_by_uuid(uuid).ok()?.clock_info(Clock::SM).ok()
    }

    pub fn state(&self, uuid: &str) -> GpuState {
        let Ok(device) = self.0.device_by_uuid(uuid) else {
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
    pub fn cpus_near(&self, uuid: &str) -> Vec<usize> {
        let Ok(device) = self.0.device_by_uuid(uuid) else {
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

    /// (memory used, GPU utilization %) for watch-style sampling.
    pub fn usage(&self, uuid: &str) -> Option<(u64, u32)> {
        let device = self.0.device_by_uuid(uuid).ok()?;
        let memory = device.memory_info().ok()?;
        let util = device.utilization_rates().ok()?;
        Some((memory.used, util.gpu))
    }
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
