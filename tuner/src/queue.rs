//! Trials over several GPUs: one queue, one worker per device, one trial per device at a time
//! (two trials on one GPU would measure each other), as the grid search of a multi-GPU team
//! does. On one device this is the plain sequential run. Each result is appended to a
//! JSON-lines file the moment it is known, so an interrupted run keeps every finished trial.

use std::collections::VecDeque;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use common::{Error, Result};

use crate::classify::Status;
use crate::gpu::Device;
use crate::program::Params;
use crate::trial::TrialResult;

/// The results file: one [TrialResult] as JSON per line, flushed line by line.
pub struct ResultsFile {
    path: PathBuf,
    file: File,
}

impl ResultsFile {
    /// Start a new results file (an old one at `path` is replaced).
    pub fn create(path: &Path) -> Result<ResultsFile> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| file_error(path, e))?;
        }
        let file = File::create(path).map_err(|e| file_error(path, e))?;
        Ok(ResultsFile {
            path: path.to_path_buf(),
            file,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Append one result and flush it to the file.
    pub fn write(&mut self, r: &TrialResult) -> Result<()> {
        // The line and its newline in one write.
        let line = serde_json::to_string(r).map_err(|e| Error::File {
            path: self.path.display().to_string(),
            message: format!("could not serialize trial {}: {e}", r.index),
        })? + "\n";
        self.file
            .write_all(line.as_bytes())
            .and_then(|_| self.file.flush())
            .map_err(|e| file_error(&self.path, e))
    }

    /// Read a results file back: the results, and how many lines were not results (a line cut
    /// short when the machine went down).
    pub fn read(path: &Path) -> Result<(Vec<TrialResult>, usize)> {
        let text = std::fs::read_to_string(path).map_err(|e| file_error(path, e))?;
        let lines = text.lines().filter(|l| !l.trim().is_empty());
        let read: Vec<serde_json::Result<TrialResult>> = lines.map(serde_json::from_str).collect();
        let bad = read.iter().filter(|r| r.is_err()).count();
        Ok((read.into_iter().flatten().collect(), bad))
    }
}

fn file_error(path: &Path, e: std::io::Error) -> Error {
    Error::File {
        path: path.display().to_string(),
        message: format!("cannot write the trial results: {e}"),
    }
}

/// Where the queue stands, after a trial finished.
#[derive(Debug)]
pub struct Progress<'a> {
    pub done: usize,
    pub running: usize,
    pub left: usize,
    pub total: usize,
    pub last: &'a TrialResult,
}

impl Progress<'_> {
    /// `[ 3/12] GPU 1 batch 256, workers 4, amp off: OK 1234.5 samples/s (12.3 s); 2 running, 7 left`
    pub fn line(&self) -> String {
        let width = self.total.to_string().len();
        let r = self.last;
        let place = if r.device.is_empty() {
            String::new()
        } else {
            format!("{} ", r.device)
        };
        let time = if r.status == Status::Skipped {
            String::new()
        } else {
            format!(" ({:.1} s)", r.wall_s)
        };
        format!(
            "[{:>width$}/{}] {place}{}: {}{time}; {} running, {} left",
            self.done,
            self.total,
            r.params.describe(),
            r.verdict(),
            self.running,
            self.left,
        )
    }
}

/// A skip rule for sweeps: a batch at or above one that ran out of memory with the same other
/// settings (the user's axes among them, the precision as asked) would run out too.
pub fn larger_batch_after_oom(p: &Params, done: &[TrialResult]) -> Option<String> {
    done.iter()
        .filter(|r| r.status == Status::Oom)
        .filter(|r| {
            r.params.batch_size <= p.batch_size
                && Params {
                    batch_size: p.batch_size,
                    ..r.params.as_asked()
                } == p.as_asked()
        })
        .map(|r| r.params.batch_size)
        .min()
        .map(|b| format!("batch {b} of the same setting ran out of memory"))
}

struct State<'r, P> {
    pending: VecDeque<(usize, Params)>,
    running: usize,
    total: usize,
    done: Vec<TrialResult>,
    results: &'r mut ResultsFile,
    progress: P,
    error: Option<Error>,
}

impl<P: FnMut(&Progress)> State<'_, P> {
    fn record(&mut self, r: TrialResult) {
        if let Err(e) = self.results.write(&r) {
            // Without a place to keep results, running more trials would only lose them.
            self.pending.clear();
            self.error.get_or_insert(e);
        }
        self.done.push(r);
        let last = self.done.last().expect("just pushed");
        (self.progress)(&Progress {
            done: self.done.len(),
            running: self.running,
            left: self.pending.len(),
            total: self.total,
            last,
        });
    }
}

fn lock<'a, T>(m: &'a Mutex<T>) -> MutexGuard<'a, T> {
    // A panicking trial runner must not take the results of the others with it.
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Run `jobs` (trial numbers are their positions) over `devices`, one at a time per device.
/// `run` runs one trial (normally [super::trial::trial] with the trial's own folder); `skip`
/// is asked, just before a job starts, whether the results so far make it pointless. Every
/// result is written to `results` as it comes and reported to `progress`. Returns the results
/// in trial order; the error of a results file that could not be written stops the queue.
pub fn run_queue<R, S, P>(
    jobs: &[Params],
    devices: &[Device],
    run: R,
    skip: S,
    results: &mut ResultsFile,
    progress: P,
) -> Result<Vec<TrialResult>>
where
    R: Fn(usize, &Params, &Device) -> TrialResult + Sync,
    S: Fn(&Params, &[TrialResult]) -> Option<String> + Sync,
    P: FnMut(&Progress) + Send,
{
    if devices.is_empty() {
        return Err(Error::invalid("no device to run trials on"));
    }
    let state = Mutex::new(State {
        pending: jobs.iter().cloned().enumerate().collect(),
        running: 0,
        total: jobs.len(),
        done: Vec::with_capacity(jobs.len()),
        results,
        progress,
        error: None,
    });
    std::thread::scope(|scope| {
        for device in devices {
            let (state, run, skip) = (&state, &run, &skip);
            scope.spawn(move || loop {
                let (index, params) = {
                    let mut st = lock(state);
                    let next = loop {
                        let Some((i, p)) = st.pending.pop_front() else {
                            break None;
                        };
                        match skip(&p, &st.done) {
                            Some(why) => st.record(TrialResult::skipped(i, p, why)),
                            None => break Some((i, p)),
                        }
                    };
                    let Some(job) = next else { return };
                    st.running += 1;
                    job
                };
                let r = run(index, &params, device);
                let mut st = lock(state);
                st.running -= 1;
                st.record(r);
            });
        }
    });
    let st = state.into_inner().unwrap_or_else(|p| p.into_inner());
    if let Some(e) = st.error {
        return Err(e);
    }
    let mut done = st.done;
    done.sort_by_key(|r| r.index);
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(batch: usize, workers: usize) -> Params {
        Params {
            batch_size: batch,
            workers,
            accumulation: 1,
            steps: 1,
            ..Params::default()
        }
    }

    fn result(index: usize, p: Params, status: Status, device: &Device) -> TrialResult {
        TrialResult {
            status,
            device: device.label.clone(),
            reason: "exit status 0".into(),
            ..TrialResult::skipped(index, p, String::new())
        }
    }

    fn temp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("tuner-queue-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn one_device_runs_in_order_and_skips_after_oom() {
        let dir = temp("order");
        let mut file = ResultsFile::create(&dir.join("results.jsonl")).unwrap();
        let jobs: Vec<Params> = [8, 16, 32, 64]
            .iter()
            .flat_map(|&b| [params(b, 0), params(b, 4)])
            .collect();
        let devices = [Device::stand_in("GPU 0", "0")];
        let order = Mutex::new(Vec::new());
        let mut lines = Vec::new();
        let done = run_queue(
            &jobs,
            &devices,
            |i, p, d| {
                order.lock().unwrap().push(i);
                // With 4 workers batch 16 runs out of memory; with 0, batch 64.
                let limit = if p.workers == 4 { 8 } else { 32 };
                let s = if p.batch_size > limit {
                    Status::Oom
                } else {
                    Status::Ok
                };
                result(i, p.clone(), s, d)
            },
            larger_batch_after_oom,
            &mut file,
            |pr: &Progress| lines.push(pr.line()),
        )
        .unwrap();
        assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3, 4, 6]);
        let statuses: Vec<Status> = done.iter().map(|r| r.status).collect();
        use Status::*;
        assert_eq!(statuses, [Ok, Ok, Ok, Oom, Ok, Skipped, Oom, Skipped]);
        assert!(
            done[5].reason.contains("batch 16 of the same setting"),
            "{}",
            done[5].reason
        );
        assert_eq!(lines.len(), 8);
        assert!(
            lines[0].starts_with("[1/8] GPU 0 batch 8, workers 0, amp off: OK"),
            "{}",
            lines[0]
        );
        assert!(lines[7].ends_with("0 running, 0 left"), "{}", lines[7]);
        let (back, bad) = ResultsFile::read(file.path()).unwrap();
        assert_eq!((back.len(), bad), (8, 0));
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn an_out_of_memory_skips_larger_batches_of_its_own_axis_values_only() {
        let at = |batch: usize, model: &str| {
            let mut p = params(batch, 0);
            p.axes.set("model", model.into());
            p
        };
        let big_oom = TrialResult {
            status: Status::Oom,
            ..TrialResult::skipped(0, at(16, "big"), String::new())
        };
        let done = [big_oom];
        let skip = larger_batch_after_oom(&at(32, "big"), &done).unwrap();
        assert!(skip.contains("batch 16"), "{skip}");
        assert_eq!(larger_batch_after_oom(&at(32, "small"), &done), None);
        assert_eq!(larger_batch_after_oom(&at(8, "big"), &done), None);
    }

    #[test]
    fn no_devices_is_an_error_and_no_jobs_is_nothing() {
        let dir = temp("empty");
        let mut file = ResultsFile::create(&dir.join("r.jsonl")).unwrap();
        let run = |i: usize, p: &Params, d: &Device| result(i, p.clone(), Status::Ok, d);
        let none = |_: &Params, _: &[TrialResult]| None;
        let quiet = |_: &Progress| {};
        assert!(run_queue(&[params(1, 0)], &[], run, none, &mut file, quiet).is_err());
        let d = [Device::stand_in("GPU 0", "0")];
        let ran = run_queue(&[], &d, run, none, &mut file, quiet).unwrap();
        assert!(ran.is_empty());
        let _ = std::fs::remove_dir_all(dir);
    }
}
