//! Keeping the measuring thread on one CPU core while it times runs whose host work is part of
//! what is measured (runs not held behind the blocking kernel: a naive training loop, launches,
//! pageable copies). A thread the scheduler moves to another core mid-run goes on with cold
//! caches, and on a machine of several sockets it may land far from the GPU; either shows up as
//! noise in every step the host paces. The core is chosen among those the process may use,
//! preferring the ones NVML names as near the GPU, and the one the thread runs on already.
//!
//! Linux only (`sched_setaffinity` through `nix`); elsewhere, or where the OS refuses, nothing is
//! pinned and the measurement says so.

/// Words of a CPU mask as NVML passes it (1024 CPUs, as a Linux `cpu_set_t`).
pub const MASK_WORDS: usize = 16;

/// The CPUs set in a mask of 64-bit words (bit `i` of word `w` is CPU `64 w + i`), ascending.
pub fn cpus_of(words: &[u64]) -> Vec<usize> {
    words
        .iter()
        .enumerate()
        .flat_map(|(w, &bits)| {
            (0..64)
                .filter(move |i| bits >> i & 1 == 1)
                .map(move |i| 64 * w + i)
        })
        .collect()
}

/// The core to keep a measuring thread on: among the CPUs it may run on (`allowed`), those near
/// the GPU (`near`; all allowed ones when none of them is near or nothing is known); of those,
/// the one it runs on now (`current`), else the lowest-numbered. None when nothing is allowed.
pub fn choose(allowed: &[usize], near: &[usize], current: Option<usize>) -> Option<usize> {
    let near_and_allowed: Vec<usize> = allowed
        .iter()
        .copied()
        .filter(|c| near.contains(c))
        .collect();
    let candidates = if near_and_allowed.is_empty() {
        allowed
    } else {
        &near_and_allowed
    };
    current
        .filter(|c| candidates.contains(c))
        .or_else(|| candidates.iter().copied().min())
}

/// The CPUs the calling thread may run on (its affinity), ascending; None where the OS does not
/// say.
pub use os::thread_cpus;

/// The calling thread kept on one CPU core until this is dropped, which gives it back the CPUs
/// it had.
#[derive(Debug)]
pub struct Pin {
    /// The core the thread is kept on.
    pub cpu: usize,
    previous: Vec<usize>,
}

impl Pin {
    /// Keep the calling thread on one core (see [choose]; `near` are the GPU's nearby CPUs, empty
    /// when unknown). None where the OS does not say which CPUs the thread may use or refuses.
    pub fn current_thread(near: &[usize]) -> Option<Pin> {
        let previous = os::thread_cpus()?;
        let cpu = choose(&previous, near, os::current_cpu())?;
        os::set_thread_cpus(&[cpu]).then_some(Pin { cpu, previous })
    }
}

impl Drop for Pin {
    fn drop(&mut self) {
        // Nothing to do if this fails: the thread then stays on its core.
        let _ = os::set_thread_cpus(&self.previous);
    }
}

#[cfg(target_os = "linux")]
mod os {
    use nix::sched::{sched_getaffinity, sched_getcpu, sched_setaffinity, CpuSet};
    use nix::unistd::Pid;

    /// The calling thread (pid 0 to the kernel).
    fn this_thread() -> Pid {
        Pid::from_raw(0)
    }

    /// The CPUs the calling thread may run on, ascending.
    pub fn thread_cpus() -> Option<Vec<usize>> {
        let set = sched_getaffinity(this_thread()).ok()?;
        Some(
            (0..CpuSet::count())
                .filter(|&cpu| set.is_set(cpu).unwrap_or(false))
                .collect(),
        )
    }

    /// Let the calling thread run on `cpus` only; false where one is past the set or the OS
    /// refuses.
    pub fn set_thread_cpus(cpus: &[usize]) -> bool {
        let mut set = CpuSet::new();
        cpus.iter().all(|&cpu| set.set(cpu).is_ok())
            && sched_setaffinity(this_thread(), &set).is_ok()
    }

    pub fn current_cpu() -> Option<usize> {
        sched_getcpu().ok()
    }
}

#[cfg(not(target_os = "linux"))]
mod os {
    pub fn thread_cpus() -> Option<Vec<usize>> {
        None
    }

    pub fn set_thread_cpus(_cpus: &[usize]) -> bool {
        false
    }

    pub fn current_cpu() -> Option<usize> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_read_as_cpu_lists() {
        let mut mask = [0u64; MASK_WORDS];
        mask[0] = 1 | 1 << 3 | 1 << 63;
        mask[1] = 1;
        mask[2] = 1 << 2;
        mask[15] = 1 << 63;
        assert_eq!(cpus_of(&mask), vec![0, 3, 63, 64, 130, 1023]);
        assert!(cpus_of(&[0, 0]).is_empty());
    }

    #[test]
    fn the_core_near_the_gpu_and_already_running_wins() {
        let allowed = [0, 1, 2, 3, 8, 9];
        // Running on a near core: stay there.
        assert_eq!(choose(&allowed, &[8, 9, 10], Some(9)), Some(9));
        // Running far from the GPU: the first near core the process may use.
        assert_eq!(choose(&allowed, &[8, 9, 10], Some(2)), Some(8));
        // Nothing known about the GPU: stay where it runs.
        assert_eq!(choose(&allowed, &[], Some(2)), Some(2));
        // The near cores are all out of reach: the allowed ones decide.
        assert_eq!(choose(&allowed, &[20, 21], Some(3)), Some(3));
        assert_eq!(choose(&allowed, &[20, 21], None), Some(0));
        // Running on a core outside the allowed set (it just changed): the lowest allowed.
        assert_eq!(choose(&[4, 5], &[], Some(0)), Some(4));
        assert_eq!(choose(&[], &[1], Some(1)), None);
    }

    #[test]
    fn pinning_the_calling_thread_keeps_it_there_and_gives_the_cpus_back() {
        let Some(before) = os::thread_cpus() else {
            return; // not Linux: nothing to pin, nothing to check
        };
        // In a thread of its own, so the test runner's threads are untouched.
        std::thread::spawn(move || {
            let Some(pin) = Pin::current_thread(&[]) else {
                return; // the OS refused (a container may forbid it)
            };
            assert!(before.contains(&pin.cpu));
            assert_eq!(os::thread_cpus().unwrap(), vec![pin.cpu]);
            if let Some(now) = os::current_cpu() {
                assert_eq!(now, pin.cpu, "running on the pinned core");
            }
            drop(pin);
            assert_eq!(os::thread_cpus().unwrap(), before);
        })
        .join()
        .unwrap();
    }
}
