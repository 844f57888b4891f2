//! The GPUs trials run on. Each trial sees exactly one through `CUDA_VISIBLE_DEVICES`. The
//! tuner's own `CUDA_VISIBLE_DEVICES`, where set, is the list to choose from (so `--devices 0,1`
//! means the first two GPUs the tuner may use, as CUDA numbers them); otherwise every GPU NVML
//! sees, named to the child by UUID so that no ordering rule can mix them up.

use std::sync::{Arc, Mutex};

use crate::nvml::Capability;
use common::exit::{no_gpu, usage};
use common::gpu::DeviceList;
use common::nvml::{Nvml, NvmlDevice, NvmlKey};

/// One GPU a trial can run on.
#[derive(Clone, Debug, Default)]
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
    pub probe: Option<NvmlDevice>,
    /// Its compute capability, where NVML read it: what `--amp on` resolves by.
    pub capability: Option<Capability>,
    /// Its name, and the driver's version with the CUDA version it supports ("580.159.04",
    /// "13.0"), where NVML read them.
    pub name: Option<String>,
    pub driver: Option<(String, String)>,
    /// The CPU cores its trials are pinned to, where trials run on several GPUs at once.
    pub cpus: Option<Vec<usize>>,
    /// NVML's memory in use on it before the last trial started there: the next waits until
    /// the GPU holds no more ([crate::trial]'s `released`).
    pub idle: Arc<Mutex<Option<u64>>>,
}

impl Device {
    /// A device known only by what CUDA_VISIBLE_DEVICES will say: no memory readings. Tests
    /// run "GPUs" like these with no GPU at all.
    pub fn stand_in(label: &str, cuda_visible: &str) -> Device {
        Device {
            label: label.to_string(),
            cuda_visible: cuda_visible.to_string(),
            ..Device::default()
        }
    }
}

/// Give each device a disjoint share of the CPU cores the tuner may use (`allowed`, its own
/// affinity), in order, the shares as equal as they divide (the first ones a core more), so that
/// trials running side by side do not fight over cores for their data loaders. One device: no
/// pinning (the trial has every core). With fewer cores than devices, a core each, round the
/// list.
pub fn share_cpus(devices: &mut [Device], allowed: &[usize]) {
    let n = devices.len();
    if n < 2 || allowed.is_empty() {
        return;
    }
    let each = (allowed.len() / n).max(1);
    let extra = allowed.len().saturating_sub(each * n);
    let mut cores = allowed.iter().copied().cycle();
    for (i, d) in devices.iter_mut().enumerate() {
        d.cpus = Some(cores.by_ref().take(each + usize::from(i < extra)).collect());
    }
}

/// `0-7,16-23`: cores as ranges, as taskset and /proc write them.
pub fn cpu_list(cores: &[usize]) -> String {
    let runs = cores.chunk_by(|a, b| *b == a + 1).map(|run| match run {
        [first, .., last] => format!("{first}-{last}"),
        _ => run[0].to_string(),
    });
    runs.collect::<Vec<_>>().join(",")
}

/// A GPU the tuner may use, before `--devices` chooses: what the child's CUDA_VISIBLE_DEVICES
/// names it, and the key NVML reads it by, where NVML can.
pub type VisibleGpu = (String, Option<NvmlKey>);

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
            .map(|e| {
                let key = if e.starts_with("GPU-") || e.starts_with("MIG-") {
                    Some(NvmlKey::Uuid(e.to_string()))
                } else {
                    e.parse().ok().filter(|_| pci_order).map(NvmlKey::Index)
                };
                (e.to_string(), key)
            })
            .collect());
    }
    match nvml_uuids {
        Some(uuids) if !uuids.is_empty() => Ok(uuids
            .into_iter()
            .map(|u| (u.clone(), Some(NvmlKey::Uuid(u))))
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

/// Choose from the visible GPUs: `list` is all of them or positions in the visible list (`0,2`),
/// as CUDA numbers the tuner's GPUs.
pub fn select_devices(
    list: &DeviceList,
    visible: &[VisibleGpu],
    user_order: Option<&str>,
    nvml: Option<&Nvml>,
) -> Result<Vec<Device>, String> {
    let chosen = list.resolve(visible.len())?;
    let pci_bus_order = user_order.is_none();
    Ok(chosen
        .into_iter()
        .map(|i| {
            let (cuda_visible, key) = &visible[i];
            // What does not change is read once; the probe reads the rest as trials run.
            let nvml = nvml.zip(key.clone()).map(|(n, key)| n.device(key));
            Device {
                label: format!("GPU {i}"),
                cuda_visible: cuda_visible.clone(),
                pci_bus_order: pci_bus_order && cuda_visible.parse::<u32>().is_ok(),
                capability: nvml.as_ref().and_then(NvmlDevice::compute_capability),
                name: nvml.as_ref().and_then(NvmlDevice::name),
                driver: nvml.as_ref().and_then(NvmlDevice::driver),
                probe: nvml,
                ..Device::default()
            }
        })
        .collect())
}

/// The devices `--devices` names on this machine (None: all visible). The list's words are
/// checked before looking for GPUs and its positions against them after, both bad usage; a
/// machine without a GPU to see is no GPU.
pub fn visible_devices(spec: Option<&str>) -> anyhow::Result<Vec<Device>> {
    let list = spec
        .map_or(Ok(DeviceList::All), str::parse)
        .map_err(usage)?;
    let nvml = Nvml::open();
    let uuids = nvml.as_ref().and_then(Nvml::uuids);
    let visible_env = std::env::var("CUDA_VISIBLE_DEVICES").ok();
    let order = std::env::var("CUDA_DEVICE_ORDER").ok();
    let visible = visible_gpus(visible_env.as_deref(), order.as_deref(), uuids).map_err(no_gpu)?;
    select_devices(&list, &visible, order.as_deref(), nvml.as_ref()).map_err(usage)
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
            .map(|(visible, key)| (visible.as_str(), key.clone()))
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
        assert_eq!(v[0].1, None);
        assert!(visible_gpus(Some(" , "), None, None)
            .unwrap_err()
            .contains("empty"));
    }

    #[test]
    fn nvml_s_gpus_by_uuid_otherwise() {
        let v = visible_gpus(None, None, Some(vec!["GPU-a".into(), "GPU-b".into()])).unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!(v[1].0, "GPU-b");
        let e = visible_gpus(None, None, None).unwrap_err();
        assert!(
            e.contains("no GPU found") && e.contains("CUDA_VISIBLE_DEVICES"),
            "{e}"
        );
        assert!(visible_gpus(None, None, Some(vec![])).is_err());
    }

    #[test]
    fn each_device_gets_a_disjoint_share_of_the_cores() {
        let devices = |n: usize| -> Vec<Device> {
            (0..n)
                .map(|i| Device::stand_in(&format!("GPU {i}"), &i.to_string()))
                .collect()
        };
        let allowed: Vec<usize> = (0..16).chain(32..40).collect();
        let mut two = devices(2);
        share_cpus(&mut two, &allowed);
        let shares: Vec<String> = two
            .iter()
            .map(|d| cpu_list(d.cpus.as_ref().unwrap()))
            .collect();
        assert_eq!(shares, ["0-11", "12-15,32-39"]);
        // What does not divide evenly goes to the first shares, a core each.
        let mut three = devices(3);
        share_cpus(&mut three, &(0..11).collect::<Vec<_>>());
        let shares: Vec<String> = three
            .iter()
            .map(|d| cpu_list(d.cpus.as_ref().unwrap()))
            .collect();
        assert_eq!(shares, ["0-3", "4-7", "8-10"]);
        // One device keeps every core; more devices than cores share them round the list.
        let mut one = devices(1);
        share_cpus(&mut one, &allowed);
        assert_eq!(one[0].cpus, None);
        let mut four = devices(4);
        share_cpus(&mut four, &[0, 1]);
        let shares: Vec<Vec<usize>> = four.iter().map(|d| d.cpus.clone().unwrap()).collect();
        assert_eq!(shares, [[0], [1], [0], [1]]);
        assert_eq!(cpu_list(&[3]), "3");
        let mine = common::affinity::thread_cpus().expect("this process's affinity");
        assert!(!mine.is_empty());
    }

    #[test]
    fn devices_choose_by_position() {
        let visible = visible_gpus(Some("3,5,7"), None, None).unwrap();
        let all = select_devices(&DeviceList::All, &visible, None, None).unwrap();
        assert_eq!(all.len(), 3);
        assert_eq!(all[2].label, "GPU 2");
        assert_eq!(all[2].cuda_visible, "7");
        assert!(all[2].pci_bus_order && all[2].probe.is_none());
        let select = |spec: &str| {
            let list: DeviceList = spec.parse()?;
            select_devices(&list, &visible, None, None)
        };
        let two = select("2,0").unwrap();
        let chosen: Vec<&str> = two.iter().map(|d| d.cuda_visible.as_str()).collect();
        assert_eq!(chosen, ["7", "3"]);
        let refused: [(&str, &[&str]); 3] = [
            ("3", &["GPU 3 is not visible", "3 GPU(s)"]),
            ("0,0", &["twice"]),
            ("x", &["not a GPU number"]),
        ];
        for (spec, says) in refused {
            let e = select(spec).unwrap_err();
            assert!(says.iter().all(|s| e.contains(s)), "{spec}: {e}");
        }
        // The user's own order is left alone.
        let d = select_devices(&DeviceList::All, &visible, Some("PCI_BUS_ID"), None).unwrap();
        assert!(!d[0].pci_bus_order);
    }
}
