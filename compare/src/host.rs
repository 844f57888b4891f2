//! What paces a variant, and the machine a host-paced timing belongs to.
//!
//! A variant whose runs are queued behind the blocking kernel (`measurement.held` in its
//! report) is timed on the GPU alone: the GPU model decides its time, and one expectation per
//! model serves every machine with that GPU. A variant whose runs are issued as the host goes
//! (a naive training loop that waits after every operation, a sweep side with too many calls to
//! hold, a pair whose lesson is the host's own cost) is paced by the host's CPU, its scheduler
//! and its PCIe link as much as by the GPU: its time belongs to one machine.

use serde::{Deserialize, Serialize};

use common::report::VariantReport;

/// What sets a variant's time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Pacing {
    /// Runs held behind the blocking kernel: the GPU's time alone.
    Device,
    /// Runs issued as the host goes: the host's time is part of it.
    Host,
}

impl Pacing {
    /// From a variant's report: what its measurement says, or None when it was not timed.
    pub fn of(report: &VariantReport) -> Option<Pacing> {
        report
            .measurement
            .as_ref()
            .map(|m| if m.held { Pacing::Device } else { Pacing::Host })
    }

    pub fn label(self) -> &'static str {
        match self {
            Pacing::Device => "device",
            Pacing::Host => "host",
        }
    }
}

/// One machine, as far as a host-paced timing is concerned: its host name, its CPU model and
/// count, and the GPU it drove. Lent cloud machines often share a host name ("vm") and a CPU
/// model, so the GPU's UUID is what tells two of them apart; a GPU is fixed in its machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Host {
    pub name: String,
    pub cpu_model: String,
    /// Logical CPUs the kernel lists (not the ones this process may use).
    pub cpus: usize,
    pub gpu_uuid: String,
}

impl Host {
    /// This machine, driving the GPU with `gpu_uuid`.
    pub fn this(gpu_uuid: &str) -> Host {
        let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
        let cpuinfo = read("/proc/cpuinfo");
        Host {
            name: read("/proc/sys/kernel/hostname").trim().to_string(),
            cpu_model: cpu_model(&cpuinfo),
            cpus: cpu_count(&cpuinfo),
            gpu_uuid: gpu_uuid.to_string(),
        }
    }

    /// "vm (AMD EPYC 9454 48-Core Processor x 16, GPU-c33520c6)".
    pub fn label(&self) -> String {
        let uuid: String = self.gpu_uuid.chars().take(12).collect();
        format!(
            "{} ({} x {}, {uuid})",
            if self.name.is_empty() {
                "unnamed host"
            } else {
                &self.name
            },
            if self.cpu_model.is_empty() {
                "unknown CPU"
            } else {
                &self.cpu_model
            },
            self.cpus
        )
    }
}

/// The first "model name" of /proc/cpuinfo (x86), else its "Hardware" or "CPU part" line
/// (Arm), else empty.
pub fn cpu_model(cpuinfo: &str) -> String {
    ["model name", "Hardware", "CPU part"]
        .iter()
        .find_map(|key| {
            cpuinfo.lines().find_map(|line| {
                let (k, v) = line.split_once(':')?;
                (k.trim() == *key).then(|| v.split_whitespace().collect::<Vec<_>>().join(" "))
            })
        })
        .unwrap_or_default()
}

/// The number of "processor" entries of /proc/cpuinfo.
pub fn cpu_count(cpuinfo: &str) -> usize {
    cpuinfo
        .lines()
        .filter(|l| {
            l.split_once(':')
                .is_some_and(|(k, _)| k.trim() == "processor")
        })
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_model_and_count_from_proc_cpuinfo() {
        let x86 = "processor\t: 0\nmodel name\t: AMD EPYC  9454 48-Core Processor\n\n\
                   processor\t: 1\nmodel name\t: AMD EPYC  9454 48-Core Processor\n";
        assert_eq!(cpu_model(x86), "AMD EPYC 9454 48-Core Processor");
        assert_eq!(cpu_count(x86), 2);
        let arm = "processor\t: 0\nCPU part\t: 0xd4f\n";
        assert_eq!(cpu_model(arm), "0xd4f");
        assert_eq!((cpu_model(""), cpu_count("")), (String::new(), 0));
    }

    #[test]
    fn this_machine_is_read_and_labelled() {
        let h = Host::this("GPU-c33520c6-19ea-9c76");
        assert_eq!(h.gpu_uuid, "GPU-c33520c6-19ea-9c76");
        assert!(h.label().ends_with(", GPU-c33520c6)"), "{}", h.label());
        let unnamed = Host {
            name: String::new(),
            cpu_model: String::new(),
            cpus: 0,
            gpu_uuid: String::new(),
        };
        assert_eq!(unnamed.label(), "unnamed host (unknown CPU x 0, )");
    }
}
