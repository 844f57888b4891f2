//! A trial's GPU memory, read from outside the program: NVML's per-process accounting summed
//! over the trial's processes, sampled on a thread while it runs. Inside some virtual machines
//! NVML lists processes without their memory, and in a container it may list them under the
//! host's process ids; then the device's memory in use above what it was before the trial
//! stands in (one trial per GPU at a time makes that exact enough), and the reading says so.
//! Sampling misses peaks shorter than its period; the framework's own peak, where the program
//! reports one, is kept beside this reading.

use std::sync::mpsc::{RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use common::par::lock;

/// A GPU's compute capability, (major, minor).
pub type Capability = (u32, u32);

/// One look at a GPU while a trial runs: the compute processes on the device with the bytes each
/// uses, where accounted (None when the query itself failed); the bytes in use on the whole
/// device; NVML's GPU utilization, the percent of its last sample period (1/6 s to 1 s, by
/// product) in which a kernel ran. The facts that do not change are read once, into
/// [crate::gpu::Device].
pub type Look = (Option<Vec<(u32, Option<u64>)>>, Option<u64>, Option<u32>);

/// Where a trial's memory figure came from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MemorySource {
    /// NVML's per-process accounting, summed over the trial's processes.
    NvmlProcess,
    /// The device's memory in use above its level before the trial.
    NvmlDeviceDelta,
    /// No NVML reading for this device.
    #[default]
    None,
}

/// A trial's peak GPU memory as seen from outside.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MemoryReading {
    pub source: MemorySource,
    pub peak_bytes: Option<u64>,
    /// The device's memory in use just before the trial started.
    pub device_before_bytes: Option<u64>,
    /// The device's memory.
    pub device_total_bytes: Option<u64>,
    pub samples: usize,
    /// Why the per-process figure was not used, where it was not.
    pub note: Option<String>,
}

impl MemoryReading {
    pub fn unmeasured(note: &str) -> MemoryReading {
        MemoryReading {
            note: Some(note.to_string()),
            ..MemoryReading::default()
        }
    }
}

/// What the samples so far say.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Watch {
    pub samples: usize,
    /// Highest sum over the trial's processes of their accounted memory.
    pub group_peak: Option<u64>,
    /// A process of the trial was listed without its memory.
    pub unaccounted: bool,
    /// NVML listed processes, none of them the trial's.
    pub only_strangers: bool,
    pub device_peak: Option<u64>,
    /// NVML's utilization samples: (seconds since the sampler started, percent).
    pub utilization: Vec<(f64, u32)>,
}

impl Watch {
    /// One sample: NVML's process list (None if the query failed) and the device's use.
    pub fn add(
        &mut self,
        processes: Option<&[(u32, Option<u64>)]>,
        device_used: Option<u64>,
        is_trials: &dyn Fn(u32) -> bool,
    ) {
        self.samples += 1;
        if let Some(list) = processes {
            let ours: Vec<Option<u64>> = list
                .iter()
                .filter(|(pid, _)| is_trials(*pid))
                .map(|(_, used)| *used)
                .collect();
            self.only_strangers |= ours.is_empty() && !list.is_empty() && self.group_peak.is_none();
            self.unaccounted |= ours.contains(&None);
            if ours.iter().any(Option::is_some) {
                self.group_peak = self.group_peak.max(Some(ours.iter().flatten().sum()));
            }
        }
        // None is below every reading.
        self.device_peak = self.device_peak.max(device_used);
    }

    /// The reading: per-process where NVML accounted the trial's processes, else the device's
    /// rise over `before`.
    pub fn reading(&self, before: Option<u64>) -> MemoryReading {
        let why = if self.unaccounted {
            "NVML lists the trial's processes without their memory (no per-process accounting \
             here, as in some virtual machines)"
        } else if self.only_strangers {
            "NVML lists no process of the trial (process ids of another namespace, as in a \
             container)"
        } else {
            "NVML listed no compute process (no per-process accounting here)"
        };
        let listed_nothing = !self.unaccounted && !self.only_strangers;
        let (source, peak_bytes, note) = match (self.group_peak, self.device_peak, before) {
            (Some(peak), _, _) => (
                MemorySource::NvmlProcess,
                Some(peak),
                self.unaccounted
                    .then(|| "some of the trial's processes were listed without memory".into()),
            ),
            // Nothing listed and nothing risen: a trial too short for the sampling period, or
            // one that never used the GPU. A zero would read as a measurement.
            (None, Some(peak), Some(before)) if listed_nothing && peak <= before => (
                MemorySource::None,
                None,
                Some(
                    "NVML saw no compute process of the trial and no rise in the device's \
                     memory in use (a trial shorter than the sampling period, or no GPU use)"
                        .into(),
                ),
            ),
            (None, Some(peak), Some(before)) => (
                MemorySource::NvmlDeviceDelta,
                Some(peak.saturating_sub(before)),
                Some(format!(
                    "{why}: the device's memory in use above its level before the trial"
                )),
            ),
            _ => (
                MemorySource::None,
                None,
                Some("NVML gave no memory reading for this device".into()),
            ),
        };
        MemoryReading {
            source,
            peak_bytes,
            device_before_bytes: before,
            device_total_bytes: None,
            samples: self.samples,
            note,
        }
    }
}

/// Samples a GPU every `period` on a thread of its own until finished; what it saw so far can
/// be read while it runs.
pub struct Sampler {
    /// Told, or dropped, it takes one last sample and ends.
    stop: Sender<()>,
    watch: Arc<Mutex<Watch>>,
    thread: Option<JoinHandle<()>>,
    before: Option<u64>,
    /// Samples taken when the peak was last read.
    read_at: usize,
}

impl Sampler {
    /// Start sampling the processes of group `pgid` (and their descendants), each sample taken
    /// by `look`. `before` is the device's use read just before the trial started; `start` the
    /// trial's clock.
    pub fn start(
        mut look: impl FnMut() -> Look + Send + 'static,
        pgid: u32,
        period: Duration,
        before: Option<u64>,
        start: Instant,
    ) -> Sampler {
        let (stop, stopped) = std::sync::mpsc::channel();
        let watch = Arc::new(Mutex::new(Watch::default()));
        let shared = watch.clone();
        let thread = std::thread::Builder::new()
            .name("trial-memory".into())
            .spawn(move || {
                let is_trials = |pid: u32| belongs_to(pid, pgid);
                // One last sample after the stop, so a short trial is sampled at least once.
                let mut stopping = false;
                loop {
                    let (list, used, util) = look();
                    let mut w = lock(&shared);
                    w.add(list.as_deref(), used, &is_trials);
                    if let Some(u) = util {
                        w.utilization.push((start.elapsed().as_secs_f64(), u));
                    }
                    drop(w);
                    if stopping {
                        return;
                    }
                    let waited = stopped.recv_timeout(period);
                    stopping = !matches!(waited, Err(RecvTimeoutError::Timeout));
                }
            })
            .ok();
        Sampler {
            stop,
            watch,
            thread,
            before,
            read_at: 0,
        }
    }

    /// The peak so far, where a sample was taken since it was last read (a reading counts for
    /// a step only if one was).
    pub fn fresh_peak(&mut self) -> Option<u64> {
        let w = lock(&self.watch);
        let fresh = w.samples > std::mem::replace(&mut self.read_at, w.samples);
        // In the reading's terms: per-process where accounted, else the device's rise.
        let rise = || Some(w.device_peak?.saturating_sub(self.before?)).filter(|&p| p > 0);
        w.group_peak.or_else(rise).filter(|_| fresh)
    }

    /// Stop and read: the memory reading and the utilization samples. Call right after the
    /// trial's leader exited, before its group is gone from NVML's list for long.
    pub fn finish(self) -> (MemoryReading, Vec<(f64, u32)>) {
        let _ = self.stop.send(());
        let why = match self.thread.map(JoinHandle::join) {
            None => "the memory sampler could not start",
            Some(Err(_)) => "the memory sampler failed",
            Some(Ok(())) => {
                let mut w = lock(&self.watch);
                return (w.reading(self.before), std::mem::take(&mut w.utilization));
            }
        };
        (MemoryReading::unmeasured(why), Vec::new())
    }
}

/// Whether `pid` is in process group `pgid` or descends from its leader (a child that moved
/// to a group of its own still counts).
pub fn belongs_to(pid: u32, pgid: u32) -> bool {
    let mut current = pid;
    for _ in 0..64 {
        match stat_of(current) {
            Some((_, group)) if group == pgid || current == pgid => return true,
            Some((parent, _)) if parent > 1 => current = parent,
            _ => return false,
        }
    }
    false
}

/// (parent pid, process group) from /proc/PID/stat.
fn stat_of(pid: u32) -> Option<(u32, u32)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text)
}

/// `pid (comm) state ppid pgrp ...`; comm may hold spaces and parentheses, so read after the
/// last ')'.
pub fn parse_stat(text: &str) -> Option<(u32, u32)> {
    let rest = &text[text.rfind(')')? + 1..];
    // After the state.
    let mut fields = rest.split_whitespace().skip(1);
    let ppid = fields.next()?.parse().ok()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some((ppid, pgrp))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    #[test]
    fn per_process_accounting_sums_the_trial_s_processes() {
        let ours = |pid: u32| pid == 100 || pid == 101;
        let mut w = Watch::default();
        w.add(
            Some(&[(100, Some(2 * GIB)), (7, Some(30 * GIB))]),
            Some(40 * GIB),
            &ours,
        );
        w.add(
            Some(&[(100, Some(3 * GIB)), (101, Some(GIB)), (7, Some(30 * GIB))]),
            Some(41 * GIB),
            &ours,
        );
        w.add(Some(&[(7, Some(30 * GIB))]), Some(37 * GIB), &ours);
        let r = w.reading(Some(35 * GIB));
        assert_eq!(r.source, MemorySource::NvmlProcess);
        assert_eq!(r.peak_bytes, Some(4 * GIB), "3 + 1 at the second sample");
        assert_eq!(r.samples, 3);
        assert!(r.note.is_none());
    }

    #[test]
    fn without_accounting_the_device_delta_stands_in_and_says_why() {
        let ours = |pid: u32| pid == 100;
        let mut w = Watch::default();
        w.add(Some(&[(100, None)]), Some(10 * GIB), &ours);
        w.add(Some(&[(100, None)]), Some(14 * GIB), &ours);
        let r = w.reading(Some(GIB));
        assert_eq!(r.source, MemorySource::NvmlDeviceDelta);
        assert_eq!(r.peak_bytes, Some(13 * GIB));
        assert!(r.note.unwrap().contains("virtual machines"));
        // Another PID namespace: processes listed, none of ours.
        let mut w = Watch::default();
        w.add(Some(&[(999_999, Some(5 * GIB))]), Some(6 * GIB), &ours);
        let r = w.reading(Some(GIB));
        assert_eq!(r.source, MemorySource::NvmlDeviceDelta);
        assert_eq!(r.peak_bytes, Some(5 * GIB));
        assert!(r.note.unwrap().contains("namespace"));
        // Nothing listed at all (some virtual GPUs): the device's rise, if there was one.
        let mut w = Watch::default();
        w.add(Some(&[]), Some(3 * GIB), &ours);
        w.add(Some(&[]), Some(5 * GIB), &ours);
        let r = w.reading(Some(3 * GIB));
        assert_eq!(
            (r.source, r.peak_bytes),
            (MemorySource::NvmlDeviceDelta, Some(2 * GIB))
        );
        assert!(r.note.unwrap().contains("no compute process"));
        let mut w = Watch::default();
        w.add(Some(&[]), Some(3 * GIB), &ours);
        let r = w.reading(Some(3 * GIB));
        assert_eq!((r.source, r.peak_bytes), (MemorySource::None, None));
        assert!(r.note.unwrap().contains("shorter than the sampling period"));
        // No NVML readings at all.
        let mut w = Watch::default();
        w.add(None, None, &ours);
        let r = w.reading(None);
        assert_eq!((r.source, r.peak_bytes), (MemorySource::None, None));
    }

    #[test]
    fn the_sampler_thread_samples_until_finished() {
        // This process stands in for the trial: its group is whatever ours is.
        let me = std::process::id();
        let (_, group) = stat_of(me).expect("/proc is readable");
        // This process, using 5, then 9, then 7 from then on; no device figures.
        let mut used = vec![5, 9, 7];
        let scripted = move || {
            let now = if used.len() > 1 {
                used.remove(0)
            } else {
                used[0]
            };
            (Some(vec![(me, Some(now))]), None, None)
        };
        let mut s = Sampler::start(
            scripted,
            group,
            Duration::from_millis(5),
            Some(0),
            Instant::now(),
        );
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(s.fresh_peak(), Some(9));
        let (r, utilization) = s.finish();
        assert!(utilization.is_empty(), "the probe reads no utilization");
        assert_eq!(r.source, MemorySource::NvmlProcess);
        assert_eq!(r.peak_bytes, Some(9));
        assert!(r.samples >= 3, "{}", r.samples);
    }

    #[test]
    fn proc_stat_is_read_after_the_command_name() {
        assert_eq!(
            parse_stat("4242 (python3 (worker) x) S 4200 4100 4100 0 -1 4194560"),
            Some((4200, 4100))
        );
        assert_eq!(parse_stat("garbage"), None);
        let me = std::process::id();
        assert!(belongs_to(me, stat_of(me).unwrap().1));
        assert!(!belongs_to(me, u32::MAX - 1));
        assert!(!belongs_to(u32::MAX - 1, 1), "a pid that does not exist");
    }
}
