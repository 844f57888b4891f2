//! Running a child in a process group of its own, with a time limit after which the whole
//! group is killed. A training program is rarely one process: data-loader workers, compile
//! workers and launchers are its children, and a hung trial must take all of them with it, or
//! they keep the GPU's memory for the next trial.

use std::io::{Read, Seek, SeekFrom};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

mod sys {
    extern "C" {
        /// POSIX kill(2); a negative pid names a process group.
        pub fn kill(pid: i32, sig: i32) -> i32;
    }
    #[cfg(target_os = "linux")]
    extern "C" {
        /// Linux prctl(2), here only PR_SET_PDEATHSIG.
        pub fn prctl(option: i32, ...) -> i32;
    }
    pub const SIGKILL: i32 = 9;
    #[cfg(target_os = "linux")]
    pub const PR_SET_PDEATHSIG: i32 = 1;
}

/// How the child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Exit {
    /// It exited with this status.
    Code(i32),
    /// A signal ended it (9 from the host's out-of-memory killer, 11 a crash, ...).
    Signal(i32),
    /// It ran past the time limit and its group was killed.
    TimedOut,
    /// It had done all that was asked (the `enough` check of [run_in_group]) and its group was
    /// killed without waiting for it to wind down.
    Stopped,
}

impl Exit {
    fn of(status: ExitStatus) -> Exit {
        match (status.code(), status.signal()) {
            (Some(c), _) => Exit::Code(c),
            (None, Some(s)) => Exit::Signal(s),
            (None, None) => Exit::Code(-1),
        }
    }

    /// Exit 0, or stopped once it had done all that was asked.
    pub fn success(self) -> bool {
        matches!(self, Exit::Code(0) | Exit::Stopped)
    }

    /// `exit status 1`, `killed by signal 9`, `timed out`.
    pub fn describe(self) -> String {
        match self {
            Exit::Code(c) => format!("exit status {c}"),
            Exit::Signal(9) => {
                "killed by signal 9 (SIGKILL: the host's out-of-memory killer, or someone)".into()
            }
            Exit::Signal(11) => "killed by signal 11 (SIGSEGV: a crash)".into(),
            Exit::Signal(s) => format!("killed by signal {s}"),
            Exit::TimedOut => "ran past the time limit".into(),
            Exit::Stopped => "stopped after its last step".into(),
        }
    }
}

/// How often a running program is looked at: its exit, and `enough` (for a trial, whether its
/// report grew, which times its steps on the tuner's own clock to this resolution).
pub const POLL: Duration = Duration::from_millis(2);

/// What [run_in_group] saw.
#[derive(Debug, Clone, Copy)]
pub struct Finished {
    pub exit: Exit,
    pub wall: Duration,
    pub pid: u32,
}

/// Spawn `cmd` in a new process group of its own and wait at most `limit`. `started` is
/// called with the child's pid (the group's id) as soon as it runs, e.g. to start sampling
/// its memory; `enough` is asked while it runs (every [POLL] at most) whether it has done all
/// that was asked, and if so the group is killed at once. Past the limit the group is killed
/// with SIGKILL; after a normal exit, whatever the program left behind in its group is killed
/// too.
pub fn run_in_group(
    mut cmd: Command,
    limit: Duration,
    started: impl FnOnce(u32),
    enough: impl FnMut() -> bool,
) -> std::io::Result<Finished> {
    cmd.process_group(0);
    #[cfg(target_os = "linux")]
    // SAFETY: prctl is async-signal-safe and touches nothing of the parent's. With it the child
    // dies with the thread that started it, so an interrupted tuner leaves no trial running
    // (its own group does not get the terminal's Ctrl-C).
    unsafe {
        cmd.pre_exec(|| {
            sys::prctl(sys::PR_SET_PDEATHSIG, sys::SIGKILL as std::ffi::c_ulong);
            Ok(())
        });
    }
    let start = Instant::now();
    let mut child = cmd.spawn()?;
    let pid = child.id();
    started(pid);
    let exit = wait_with_limit(&mut child, start, limit, enough)?;
    // The leader is gone; its group may not be (orphaned workers). Harmless when empty.
    kill_group(pid);
    Ok(Finished {
        exit,
        wall: start.elapsed(),
        pid,
    })
}

fn wait_with_limit(
    child: &mut Child,
    start: Instant,
    limit: Duration,
    mut enough: impl FnMut() -> bool,
) -> std::io::Result<Exit> {
    let mut pause = Duration::from_micros(250);
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Exit::of(status));
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
            kill_group(child.id());
            child.wait()?;
            return Ok(exit);
        }
        std::thread::sleep(pause.min(limit - elapsed));
        pause = (pause * 2).min(POLL);
    }
}

/// SIGKILL to every process of the group `pgid`.
pub fn kill_group(pgid: u32) {
    let Ok(pgid) = i32::try_from(pgid) else {
        return;
    };
    if pgid <= 1 {
        return; // never signal "every process" (-1) or our own group (0)
    }
    // SAFETY: kill(2) with a negative pid signals that group only; ESRCH (none left) is fine.
    unsafe {
        sys::kill(-pgid, sys::SIGKILL);
    }
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
    let Ok(mut f) = std::fs::File::open(path) else {
        return String::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let from = len.saturating_sub(bytes);
    if f.seek(SeekFrom::Start(from)).is_err() {
        return String::new();
    }
    let mut buf = Vec::new();
    let _ = f.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf).into_owned();
    if from > 0 {
        // The first line is cut; drop it.
        text.split_once('\n')
            .map(|(_, rest)| rest.to_string())
            .unwrap_or_default()
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        let mut c = Command::new("sh");
        c.args(["-c", script]);
        c
    }

    #[test]
    fn exit_codes_and_signals_are_told_apart() {
        let f = run_in_group(sh("exit 3"), Duration::from_secs(20), |_| {}, || false).unwrap();
        assert_eq!(f.exit, Exit::Code(3));
        let f = run_in_group(sh("exit 0"), Duration::from_secs(20), |_| {}, || false).unwrap();
        assert!(f.exit.success());
        let f = run_in_group(
            sh("kill -SEGV $$"),
            Duration::from_secs(20),
            |_| {},
            || false,
        )
        .unwrap();
        assert_eq!(f.exit, Exit::Signal(11));
        assert!(f.exit.describe().contains("crash"));
    }

    #[test]
    fn the_time_limit_kills_the_group() {
        let mut pid = 0;
        let f = run_in_group(
            sh("sleep 30"),
            Duration::from_millis(300),
            |p| pid = p,
            || false,
        )
        .unwrap();
        assert_eq!(f.exit, Exit::TimedOut);
        assert!(f.wall < Duration::from_secs(10), "{:?}", f.wall);
        assert!(pid > 0 && pid == f.pid);
    }

    #[test]
    fn enough_stops_the_group_early() {
        let start = Instant::now();
        let f = run_in_group(
            sh("sleep 30"),
            Duration::from_secs(60),
            |_| {},
            || start.elapsed() > Duration::from_millis(200),
        )
        .unwrap();
        assert_eq!(f.exit, Exit::Stopped);
        assert!(f.exit.success());
        assert!(f.wall < Duration::from_secs(10), "{:?}", f.wall);
    }

    #[test]
    fn tails_skip_blank_lines_and_cut_partial_first_lines() {
        let dir = std::env::temp_dir().join(format!("tuner-tail-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("log");
        std::fs::write(&p, "one\ntwo\n\nthree\nfour\n\n").unwrap();
        assert_eq!(tail_lines(&p, 3), vec!["two", "three", "four"]);
        let long = format!("{}\nlast\n", "x".repeat(100_000));
        std::fs::write(&p, long).unwrap();
        assert_eq!(tail_lines(&p, 5), vec!["last"]);
        assert!(tail_lines(&dir.join("missing"), 5).is_empty());
        let _ = std::fs::remove_dir_all(dir);
    }
}
