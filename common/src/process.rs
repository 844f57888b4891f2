//! Child processes in a process group of their own, with a time limit after which the whole
//! group is killed. A training program or a lesson's variant is rarely one process for long:
//! data-loader workers, compile workers and launchers are its children, and a hung run must take
//! all of them with it, or they keep the GPU's memory for the next one. The compare runner and
//! the tuner's trials both run their children through here.

use std::io::{Read, Seek, SeekFrom};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Child, Command, ExitStatus};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, SigSet, Signal};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};

use crate::par::lock;

/// How a child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Exit {
    /// It exited with this status.
    Code(i32),
    /// A signal ended it (9 from the host's out-of-memory killer, 11 a crash, ...).
    Signal(i32),
    /// It ran past the time limit and its group was killed.
    TimedOut,
    /// It had shown progress, then went silent for longer than its watcher allows, and its
    /// group was killed (a hang well before the time limit).
    Stalled,
    /// The watcher had seen all it needed (see [watch]) and killed its group without waiting
    /// for it to wind down.
    Stopped,
}

impl Exit {
    pub fn of(status: ExitStatus) -> Exit {
        match (status.code(), status.signal()) {
            (Some(c), _) => Exit::Code(c),
            (None, Some(s)) => Exit::Signal(s),
            (None, None) => Exit::Code(-1),
        }
    }

    /// `exit status 1`, `killed by signal 9 (...)`, `ran past the time limit`.
    pub fn describe(self) -> String {
        match self {
            Exit::Code(c) => format!("exit status {c}"),
            Exit::Signal(9) => {
                "killed by signal 9 (SIGKILL: the host's out-of-memory killer, or someone)".into()
            }
            Exit::Signal(11) => "killed by signal 11 (SIGSEGV: a crash)".into(),
            Exit::Signal(s) => format!("killed by signal {s}"),
            Exit::TimedOut => "ran past the time limit".into(),
            Exit::Stalled => "went silent".into(),
            Exit::Stopped => "stopped once it had shown what was asked".into(),
        }
    }
}

/// Spawn `cmd` leading a new process group of its own, which [kill_groups_when_interrupted]
/// kills. On Linux its leader also dies with the thread that started it (the parent-death
/// signal): its group does not get the terminal's Ctrl-C.
pub fn spawn_in_group(mut cmd: Command) -> std::io::Result<Child> {
    cmd.process_group(0);
    #[cfg(target_os = "linux")]
    // SAFETY: prctl is async-signal-safe and touches nothing of the parent's.
    unsafe {
        cmd.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)
        });
    }
    let child = cmd.spawn()?;
    started_group(child.id());
    Ok(child)
}

/// The process groups this process started and has not killed yet.
static GROUPS: Mutex<Vec<u32>> = Mutex::new(Vec::new());

/// A process group this process started (a child that called `setsid`, say), to be killed
/// where the process is interrupted before [kill_group] ends it.
pub fn started_group(pgid: u32) {
    lock(&GROUPS).push(pgid);
}

/// From here on SIGINT, SIGTERM and SIGHUP end this process only once every process group it
/// started and has not killed yet is killed: the parent-death signal reaches a group's leader
/// alone, and a trial's data-loader workers, or the trials a fork server started, would run on
/// with the GPU. `said` goes to stderr after the signal's name; the exit code is the shell's
/// for the signal (130 for Ctrl-C). Call it before any thread starts: threads inherit the mask
/// that leaves these signals to the one thread that waits for them (a child does not: Rust
/// clears the mask before it runs a program).
pub fn kill_groups_when_interrupted(said: &'static str) {
    let mut set = SigSet::empty();
    for s in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        set.add(s);
    }
    if set.thread_block().is_err() {
        return;
    }
    std::thread::spawn(move || {
        let Ok(signal) = set.wait() else {
            return;
        };
        let groups = lock(&GROUPS).clone();
        for g in groups {
            kill_group(g);
        }
        eprintln!("error: interrupted by {signal}: {said}");
        std::process::exit(128 + signal as i32);
    });
}

/// SIGKILL to every process of the group `pgid`; none left is fine.
pub fn kill_group(pgid: u32) {
    lock(&GROUPS).retain(|&g| g != pgid);
    let Ok(pgid) = i32::try_from(pgid) else {
        return;
    };
    if pgid <= 1 {
        return; // never "every process" or our own group
    }
    let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
}

/// How often a running child is looked at at most (its exit, and the watcher's `enough`).
pub const POLL: Duration = Duration::from_millis(2);

/// Watch a running group led by `pgid` until it exits, runs past `limit` (counted from
/// `start`), or `enough` says the watcher has seen all it needs; in the last two cases the group
/// is killed. `exited` reports the exit of the process that leads the group once there is one.
/// After any ending, whatever that process left in its group is killed too.
pub fn watch(
    pgid: u32,
    start: Instant,
    limit: Duration,
    mut exited: impl FnMut() -> std::io::Result<Option<Exit>>,
    mut enough: impl FnMut() -> bool,
) -> std::io::Result<Exit> {
    let mut pause = Duration::from_micros(250);
    let exit = loop {
        if let Some(exit) = exited()? {
            break exit;
        }
        let elapsed = start.elapsed();
        let stop = if elapsed >= limit {
            Some(Exit::TimedOut)
        } else if enough() {
            Some(Exit::Stopped)
        } else {
            None
        };
        if let Some(exit) = stop {
            kill_group(pgid);
            // Reap the group's first process; a stopped child ended the way the watcher said.
            let wait_from = Instant::now();
            while exited()?.is_none() && wait_from.elapsed() < Duration::from_secs(10) {
                std::thread::sleep(POLL);
            }
            break exit;
        }
        std::thread::sleep(pause.min(limit - elapsed));
        pause = (pause * 2).min(POLL);
    };
    kill_group(pgid);
    Ok(exit)
}

/// [watch] for a child this process spawned with [spawn_in_group].
pub fn wait_child(
    child: &mut Child,
    start: Instant,
    limit: Duration,
    enough: impl FnMut() -> bool,
) -> std::io::Result<Exit> {
    let pgid = child.id();
    watch(
        pgid,
        start,
        limit,
        || Ok(child.try_wait()?.map(Exit::of)),
        enough,
    )
}

/// The last `lines` non-empty lines of a log file, reading at most its last 64 KiB.
pub fn tail_lines(path: &Path, lines: usize) -> Vec<String> {
    let text = read_tail(path, 64 * 1024);
    let mut out: Vec<String> = text
        .lines()
        .rev()
        .filter(|l| !l.trim().is_empty())
        .take(lines)
        .map(|l| l.trim_end().to_string())
        .collect();
    out.reverse();
    out
}

/// The last `bytes` of a file as text (lossy); empty when the file is missing.
pub fn read_tail(path: &Path, bytes: u64) -> String {
    read_from(path, None, bytes).0
}

/// The text of a file from byte `from` (None: its last `bytes`), at most `bytes` of it, and
/// the file's length: a growing log read piece by piece.
pub fn read_from(path: &Path, from: Option<u64>, bytes: u64) -> (String, u64) {
    let Ok(mut f) = std::fs::File::open(path) else {
        return (String::new(), 0);
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let start = from.unwrap_or(len.saturating_sub(bytes)).min(len);
    if f.seek(SeekFrom::Start(start)).is_err() {
        return (String::new(), len);
    }
    let mut buf = Vec::new();
    let _ = f.take(bytes).read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf).into_owned();
    let cut = from.is_none() && start > 0;
    let text = if cut {
        // The first line is cut; drop it.
        text.split_once('\n')
            .map(|(_, rest)| rest.to_string())
            .unwrap_or_default()
    } else {
        text
    };
    (text, len)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Child {
        let mut c = Command::new("sh");
        c.args(["-c", script]);
        spawn_in_group(c).unwrap()
    }

    fn run(script: &str, limit: Duration, enough: impl FnMut() -> bool) -> (Exit, Duration) {
        let start = Instant::now();
        let mut child = sh(script);
        let exit = wait_child(&mut child, start, limit, enough).unwrap();
        (exit, start.elapsed())
    }

    #[test]
    fn exit_codes_and_signals_are_told_apart() {
        let long = Duration::from_secs(20);
        assert_eq!(run("exit 3", long, || false).0, Exit::Code(3));
        assert_eq!(run("exit 0", long, || false).0, Exit::Code(0));
        let (exit, _) = run("kill -SEGV $$", long, || false);
        assert_eq!(exit, Exit::Signal(11));
        assert!(exit.describe().contains("crash"));
    }

    #[test]
    fn the_time_limit_kills_the_group_with_its_children() {
        let dir = std::env::temp_dir().join(format!("common-process-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let marker = dir.join("child-pid");
        // The leader starts a child that would outlive it, then hangs.
        let script = format!("sleep 30 & echo $! > {}; sleep 30", marker.display());
        let (exit, wall) = run(&script, Duration::from_millis(500), || false);
        assert_eq!(exit, Exit::TimedOut);
        assert!(wall < Duration::from_secs(10), "{wall:?}");
        let pid: i32 = std::fs::read_to_string(&marker)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        assert!(
            stat.is_empty() || stat.contains(") Z"),
            "the group's other process lives on: {stat}"
        );
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn enough_stops_the_group_early() {
        let start = Instant::now();
        let (exit, wall) = run("sleep 30", Duration::from_secs(60), || {
            start.elapsed() > Duration::from_millis(200)
        });
        assert_eq!(exit, Exit::Stopped);
        assert!(wall < Duration::from_secs(10), "{wall:?}");
    }

    #[test]
    fn tails_skip_blank_lines_and_cut_partial_first_lines() {
        let dir = std::env::temp_dir().join(format!("common-tail-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("log");
        std::fs::write(&p, "one\ntwo\n\nthree\nfour\n\n").unwrap();
        assert_eq!(tail_lines(&p, 3), vec!["two", "three", "four"]);
        assert_eq!(
            read_from(&p, Some(4), 1000),
            ("two\n\nthree\nfour\n\n".into(), 21)
        );
        assert_eq!(read_from(&p, Some(4), 3).0, "two");
        let long = format!("{}\nlast\n", "x".repeat(100_000));
        std::fs::write(&p, long).unwrap();
        assert_eq!(tail_lines(&p, 5), vec!["last"]);
        assert!(tail_lines(&dir.join("missing"), 5).is_empty());
        let _ = std::fs::remove_dir_all(dir);
    }
}
