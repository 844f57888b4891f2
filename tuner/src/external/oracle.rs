//! The batch finder over the user's command: "does batch B fit?" is a trial. One that ends
//! OK, or that reported every step it was told to run (a program may crash on its way out),
//! fits; one that runs out of memory does not. A hang or any other failure is no answer about
//! memory: the search stops there and says why, with the program's last words.

use std::path::Path;

use crate::search::{self, Found, Granularity, Probe};

use super::classify::Status;
use super::command::{Params, Program};
use super::device::Device;
use super::queue::ResultsFile;
use super::trial::{trial, Limits, TrialResult};

/// Why the search stopped without an answer.
#[derive(Debug)]
pub enum Stopped {
    /// A trial hung or failed other than by running out of memory.
    Trial(Box<TrialResult>),
    /// The results file could not be written.
    Results(common::Error),
}

impl std::fmt::Display for Stopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stopped::Results(e) => write!(f, "{e}"),
            Stopped::Trial(r) => {
                let what = match r.status {
                    Status::Hang => "hung",
                    _ => "failed",
                };
                write!(
                    f,
                    "batch {} {what} ({}), which says nothing about memory: the search stops here",
                    r.params.batch_size, r.reason
                )?;
                if !r.stderr_tail.is_empty() {
                    write!(f, "; its stderr ended with:")?;
                    for line in &r.stderr_tail {
                        write!(f, "\n    {line}")?;
                    }
                }
                if let Some(folder) = &r.folder {
                    write!(f, "\n(its output is kept in {})", folder.display())?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for Stopped {}

/// Whether a trial's batch fits, or why that cannot be said.
pub fn fits(r: &TrialResult) -> Result<bool, Stopped> {
    if r.reached_steps {
        return Ok(true);
    }
    match r.status {
        Status::Ok => Ok(true),
        Status::Oom => Ok(false),
        _ => Err(Stopped::Trial(Box::new(r.clone()))),
    }
}

/// What a trial tells the finder: whether it fit, and its memory in the terms of
/// [TrialResult::memory_terms], so the search can aim by the memory line.
pub fn probe(r: &TrialResult) -> Result<Probe, Stopped> {
    let fits = fits(r)?;
    let (peak, limit) = r.memory_terms();
    Ok(Probe {
        fits,
        peak_bytes: peak.filter(|_| fits),
        limit_bytes: limit,
    })
}

/// The finder's answer and every trial it ran.
#[derive(Debug)]
pub struct BatchSearch {
    /// [search::find]'s answer (its error is a plain message: the start already fails, ...).
    pub found: Result<Found, String>,
    pub trials: Vec<TrialResult>,
}

/// Where the search is and what it may do.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    pub start: usize,
    pub granularity: Granularity,
    /// No batch above this is tried.
    pub cap: usize,
}

/// Find the largest batch of `program` that fits on `device`, the other settings as in `base`.
/// Each trial keeps its files in `run_dir/trial-NNN-bB`, is written to `results` as it ends,
/// and is shown to `on_trial`. A trial is stopped as soon as it has reported all its steps
/// (the answer is known then; winding down would only cost time).
#[allow(clippy::too_many_arguments)]
pub fn find_batch(
    program: &Program,
    base: &Params,
    device: &Device,
    run_dir: &Path,
    limits: &Limits,
    bounds: Bounds,
    results: &mut ResultsFile,
    mut on_trial: impl FnMut(&TrialResult),
) -> Result<BatchSearch, Stopped> {
    let limits = Limits {
        stop_after_steps: true,
        ..*limits
    };
    let mut trials: Vec<TrialResult> = Vec::new();
    let found = search::find(bounds.start, bounds.granularity, bounds.cap, |batch| {
        let params = Params {
            batch_size: batch,
            ..*base
        };
        let index = trials.len();
        let folder = run_dir.join(format!("trial-{index:03}-b{batch}"));
        let r = trial(program, &params, index, device, &folder, &limits);
        results.write(&r).map_err(Stopped::Results)?;
        on_trial(&r);
        let answer = probe(&r);
        trials.push(r);
        answer
    })?;
    Ok(BatchSearch { found, trials })
}
