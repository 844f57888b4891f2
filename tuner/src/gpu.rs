//! The GPUs trials run on. Each trial sees exactly one through `CUDA_VISIBLE_DEVICES`. The
//! tuner's own `CUDA_VISIBLE_DEVICES`, where set, is the list to choose from (so `--devices 0,1`
//! means the first two GPUs the tuner may use, as CUDA numbers them); otherwise every GPU NVML
//! sees, named to the child by UUID so that no ordering rule can mix them up.

use std::sync::Arc;

use serde::Serialize;

use crate::nvml::{MemoryProbe, NvmlKey, NvmlProbe};

/// One GPU a trial can run on.
#[derive(Clone, Debug, Serialize)]
pub struct Device {
    /// How progress lines and results name it: `GPU 0`.
    pub label: String,
    /// The child's CUDA_VISIBLE_DEVICES: an ordinal, a GPU UUID or a MIG UUID.
    pub cuda_visible: String,
    /// Set CUDA_DEVICE_ORDER=PCI_BUS_ID for the child, so that an ordinal means the GPU NVML
    /// reads (done only where the user has not chosen an order).
    pub pci_bus_order: bool,
    /// NVML's view of it, for the trial's memory; None where NVML is missing (and for the
    /// stand-in devices of tests).
    #[serde(skip)]
    pub probe: Option<Arc<dyn MemoryProbe>>,
}

impl Device {
    /// A device known only by what CUDA_VISIBLE_DEVICES will say: no memory readings. Tests
    /// run "GPUs" like these with no GPU at all.
    pub fn stand_in(label: &str, cuda_visible: &str) -> Device {
        Device {
            label: label.to_string(),
            cuda_visible: cuda_visible.to_string(),
            pci_bus_order: false,
            probe: None,
        }
    }
}

/// A GPU the tuner may use, before `--devices` chooses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VisibleGpu {
    pub cuda_visible: String,
    pub nvml: Option<NvmlKey>,
}

/// The visible GPUs: the entries of the tuner's own CUDA_VISIBLE_DEVICES where set (`visible`),
/// else NVML's GPUs by UUID (`nvml_uuids`). An ordinal entry is read by NVML in PCI bus order,
/// which is the order the child is given unless `user_order` (CUDA_DEVICE_ORDER) says another.
pub fn visible_gpus(
    visible: Option<&str>,
    user_order: Option<&str>,
    nvml_uuids: Option<Vec<String>>,
) -> Result<Vec<VisibleGpu>, String> {
    if let Some(list) = visible {
        let entries: Vec<&str> = list
            .split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .collect();
        if entries.is_empty() {
            return Err(
                "CUDA_VISIBLE_DEVICES is set but empty: no GPU is visible to the tuner".into(),
            );
        }
        let pci_order = user_order.is_none_or(|o| o.trim() == "PCI_BUS_ID");
        return Ok(entries
            .into_iter()
            .map(|e| VisibleGpu {
                cuda_visible: e.to_string(),
                nvml: if e.starts_with("GPU-") || e.starts_with("MIG-") {
                    Some(NvmlKey::Uuid(e.to_string()))
                } else {
                    e.parse().ok().filter(|_| pci_order).map(NvmlKey::Index)
                },
            })
            .collect());
    }
    match nvml_uuids {
        Some(uuids) if !uuids.is_empty() => Ok(uuids
            .into_iter()
            .map(|u| VisibleGpu {
                cuda_visible: u.clone(),
                nvml: Some(NvmlKey::Uuid(u)),
            })
            .collect()),
        Some(_) => Err("NVML sees no GPU: check `nvidia-smi`".into()),
        None => Err(
            "no GPU found: NVML (libnvidia-ml.so.1) could not be loaded and \
             CUDA_VISIBLE_DEVICES is not set; install the NVIDIA driver, or set \
             CUDA_VISIBLE_DEVICES to the GPUs to use"
                .into(),
        ),
    }
}

/// Choose from the visible GPUs: `spec` is `all` (or None) or a list of positions in the
/// visible list (`0,2`), as CUDA numbers the tuner's GPUs.
pub fn select_devices(
    spec: Option<&str>,
    visible: &[VisibleGpu],
    user_order: Option<&str>,
    nvml: Option<&Arc<nvml_wrapper::Nvml>>,
) -> Result<Vec<Device>, String> {
    let chosen = common::gpu::parse_device_list(spec, visible.len())?;
    let pci_bus_order = user_order.is_none();
    Ok(chosen
        .into_iter()
        .map(|i| {
            let gpu = &visible[i];
            let probe = nvml.zip(gpu.nvml.as_ref()).map(|(n, key)| {
                Arc::new(NvmlProbe::new(n.clone(), key.clone())) as Arc<dyn MemoryProbe>
            });
            Device {
                label: format!("GPU {i}"),
                cuda_visible: gpu.cuda_visible.clone(),
                pci_bus_order: pci_bus_order && gpu.cuda_visible.parse::<u32>().is_ok(),
                probe,
            }
        })
        .collect())
}

/// The devices `--devices` names on this machine (None: all visible).
pub fn visible_devices(spec: Option<&str>) -> Result<Vec<Device>, String> {
    let nvml = common::nvml::open_nvml().ok().map(Arc::new);
    let uuids = nvml.as_ref().and_then(|n| {
        let count = n.device_count().ok()?;
        (0..count)
            .map(|i| n.device_by_index(i).and_then(|d| d.uuid()).ok())
            .collect::<Option<Vec<String>>>()
    });
    let visible_env = std::env::var("CUDA_VISIBLE_DEVICES").ok();
    let order = std::env::var("CUDA_DEVICE_ORDER").ok();
    let visible = visible_gpus(visible_env.as_deref(), order.as_deref(), uuids)?;
    select_devices(spec, &visible, order.as_deref(), nvml.as_ref())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tuner_s_own_visible_list_comes_first() {
        let v = visible_gpus(
            Some("4, GPU-abc,MIG-def,"),
            None,
            Some(vec!["GPU-x".into()]),
        )
        .unwrap();
        let keys: Vec<(&str, Option<NvmlKey>)> = v
            .iter()
            .map(|g| (g.cuda_visible.as_str(), g.nvml.clone()))
            .collect();
        let uuid = |u: &str| Some(NvmlKey::Uuid(u.into()));
        assert_eq!(
            keys,
            [
                ("4", Some(NvmlKey::Index(4))),
                ("GPU-abc", uuid("GPU-abc")),
                ("MIG-def", uuid("MIG-def"))
            ]
        );
        // Under another order an ordinal may not be NVML's index: no per-GPU reading then.
        let v = visible_gpus(Some("1"), Some("FASTEST_FIRST"), None).unwrap();
        assert_eq!(v[0].nvml, None);
        assert!(visible_gpus(Some(" , "), None, None)
            .unwrap_err()
            .contains("empty"));
    }

    #[test]
    fn nvml_s_gpus_by_uuid_otherwise() {
        let v = visible_gpus(None, None, Some(vec!["GPU-a".into(), "GPU-b".into()])).unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!(v[1].cuda_visible, "GPU-b");
        let e = visible_gpus(None, None, None).unwrap_err();
        assert!(
            e.contains("no GPU found") && e.contains("CUDA_VISIBLE_DEVICES"),
            "{e}"
        );
        assert!(visible_gpus(None, None, Some(vec![])).is_err());
    }

    #[test]
    fn devices_choose_by_position() {
        let visible = visible_gpus(Some("3,5,7"), None, None).unwrap();
        let all = select_devices(None, &visible, None, None).unwrap();
        assert_eq!(all.len(), 3);
        assert_eq!(all[2].label, "GPU 2");
        assert_eq!(all[2].cuda_visible, "7");
        assert!(all[2].pci_bus_order && all[2].probe.is_none());
        let two = select_devices(Some("2,0"), &visible, None, None).unwrap();
        let chosen: Vec<&str> = two.iter().map(|d| d.cuda_visible.as_str()).collect();
        assert_eq!(chosen, ["7", "3"]);
        let refused: [(&str, &[&str]); 3] = [
            ("3", &["GPU 3 is not visible", "3 GPU(s)"]),
            ("0,0", &["twice"]),
            ("x", &["not a GPU number"]),
        ];
        for (spec, says) in refused {
            let e = select_devices(Some(spec), &visible, None, None).unwrap_err();
            assert!(says.iter().all(|s| e.contains(s)), "{spec}: {e}");
        }
        // The user's own order is left alone.
        let d = select_devices(None, &visible, Some("PCI_BUS_ID"), None).unwrap();
        assert!(!d[0].pci_bus_order);
    }
}
