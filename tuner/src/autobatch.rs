//! `tuner autobatch -- COMMAND`: the largest batch that holds in a real run.
//!
//! 1. **Search** ([crate::search]): on GPUs of one model, a round of as many sizes as there are
//!    GPUs runs side by side (one GPU: one size a round). Each trial asks "does batch B fit?"
//!    and runs only until the program's memory is steady (the optimizer's state exists and two
//!    consecutive steps' peaks agree, [crate::trial::steady]) or until it runs out of memory,
//!    which ends it at the message. The largest size seen to fit is the candidate.
//! 2. **Confirmation**: an answer trains `--confirm-steps` steps (20 by default) in a process
//!    of its own, start to end. A step that needs more memory than the first ones showed (an
//!    allocator that fragments, a workspace chosen late) shows here. A round of the search
//!    likely to hold the answer ([crate::search::Search::confirming]) runs its trials so: the
//!    largest size that held there is confirmed, and a size that did not hold does not fit.
//!    Otherwise the candidate runs so after the search; when it fails, the answer steps down,
//!    one size, then two, four..., until a size holds, and is then pinned between the largest
//!    size that held and the smallest that failed.
//!    `--confirm-runs N` asks for N such runs, one after another, before a size counts as held
//!    (2 by default for a group of ranks, which at the edge of its memory may hold once and
//!    hang the next time); any that fails counts the size as not fitting.
//! 3. **Answer**: the largest size confirmed, with the next size seen to fail; the tiers of the
//!    one rule under it ([crate::recommend]); the split with gradient accumulation for a target
//!    effective batch. Printed; written into the config (`--write`) and the team file
//!    (`--team`) only when asked.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use common::report::Provenance;
use common::{Error, Result};

use crate::classify::Status;
use crate::config::{one_of, Settings, MAX_BATCH};
use crate::granularity::{first_index, index_below, size_at, Granularity};
use crate::program::{Params, Precision, Program};
use crate::recommend::{self, Accumulation, MemoryFit, Tiers};
use crate::run::{default_margin, kept_at, DeviceSummary, Run};
use crate::search::{Found, Probe, Search};
use crate::trial::{gpu_name, Stop, TrialResult};
use crate::writeback::{self, KeyPath, Keys, Overrides, TeamEntry, Written};

pub const SCHEMA: &str = "tuner-autobatch/2";

/// Optimizer steps a search trial may run: no warmup (nothing is timed), then until memory is
/// steady (the third step at the earliest) or this many. Few to spare: a program that sizes its
/// data by the steps it is told has its loader prepare (and pin) batches ahead, as many as
/// there are up to the loader's prefetch, while the first step autotunes.
pub const SEARCH_WARMUP: usize = 0;
pub const SEARCH_STEPS: usize = 6;

/// What the user asks of the finder; a Slurm plan keeps them as resolved and checked where the
/// finder was asked for, and reads them back on the node that runs it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Options {
    pub start: usize,
    pub granularity: Granularity,
    pub margin: Option<f64>,
    pub confirm_steps: usize,
    /// Fresh runs the answer must hold in, one after the other (a failed one counts the size
    /// as not fitting).
    #[serde(default = "crate::config::one")]
    pub confirm_runs: usize,
    pub effective_batch: Option<usize>,
    /// Write the answer into this config.
    pub write: Option<PathBuf>,
    /// The answer's key paths, in the written file and in the printed overrides.
    #[serde(flatten, with = "SavedKeys")]
    pub keys: Keys,
    pub team: Option<PathBuf>,
    /// The team entry's model (default: the script's name).
    pub model_name: Option<String>,
}

/// [Keys] as a plan keeps them, beside the other options.
#[derive(Serialize, Deserialize)]
#[serde(remote = "Keys")]
struct SavedKeys {
    #[serde(rename = "batch_key")]
    batch_size: KeyPath,
    #[serde(rename = "accumulation_key")]
    accumulation: Option<KeyPath>,
    #[serde(default)]
    new_keys: bool,
}

impl Options {
    /// The effective batch the answer keeps: the one asked for, else the settings' batch times
    /// their accumulation steps, where they give a batch.
    fn effective_batch(&self, settings: &Settings) -> Option<usize> {
        (self.effective_batch).or(settings.batch_size.map(|b| b * settings.accumulation_steps))
    }
}

/// The one precision and worker count the finder runs with.
pub fn choices(settings: &Settings) -> std::result::Result<(Precision, usize), String> {
    Ok((
        one_of(&settings.amp, "here: --amp off, bf16, fp16 or on")?,
        one_of(&settings.workers, "here: --workers N")?,
    ))
}

/// Check what can be checked before any GPU time; the one precision and worker count the
/// finder runs with ([choices]).
pub fn check(o: &Options, settings: &Settings) -> std::result::Result<(Precision, usize), String> {
    if o.start == 0 {
        return Err("--start must be at least 1".into());
    }
    if o.granularity == Granularity::Multiple(0) {
        return Err("--multiple-of must be at least 1".into());
    }
    if o.confirm_steps == 0 {
        return Err("--confirm-steps must be at least 1".into());
    }
    if o.confirm_runs == 0 {
        return Err("--confirm-runs must be at least 1".into());
    }
    if let Some(path) = &o.write {
        writeback::check_writable(path, &o.keys)?;
        if let (Some(effective), None) = (o.effective_batch(settings), &o.keys.accumulation) {
            return Err(format!(
                "the answer keeps an effective batch of {effective} and may split it into accumulation steps: give --accumulation-key DOTTED.PATH, where {} keeps them",
                path.display()
            ));
        }
    }
    choices(settings)
}

/// Why the finder stops without an answer: a trial that says nothing about memory.
fn stopped(r: &TrialResult) -> Error {
    let mut why = format!(
        "batch {} {}, which says nothing about memory: the search stops here",
        r.params.batch_size,
        r.verdict()
    );
    if !r.stderr_tail.is_empty() {
        why.push_str("; its stderr ended with:");
        why.extend(r.stderr_tail.iter().map(|line| format!("\n    {line}")));
    }
    if let Some(folder) = &r.folder {
        why.push_str(&format!("\n(its output is kept in {})", folder.display()));
    }
    Error::invalid(why)
}

/// One confirmation run: a fresh process of the confirmation's steps, run to the end.
#[derive(Debug, Clone, Serialize)]
pub struct Confirmation {
    pub batch_size: usize,
    pub steps: usize,
    pub held: bool,
    /// The search's round it held in, where a round ran as confirmations
    /// ([Search::confirming]); None for a run after the search.
    pub round: Option<usize>,
    pub trial: TrialResult,
}

impl Confirmation {
    /// The confirmation `trial` ran as, in the search's round `round` where it ran in one.
    fn of(trial: TrialResult, round: Option<usize>) -> Result<Confirmation> {
        Ok(Confirmation {
            batch_size: trial.params.batch_size,
            steps: trial.params.steps,
            held: fits(&trial, true)?,
            round,
            trial,
        })
    }
}

#[derive(Debug, Serialize)]
pub struct AutobatchReport {
    pub schema: &'static str,
    pub command: Vec<String>,
    pub device: DeviceSummary,
    pub gpu_name: String,
    /// How the trials started.
    pub launch: String,
    pub provenance: Provenance,
    pub settings: Settings,
    /// The precision as asked.
    pub amp: Precision,
    /// The precision the trials ran in (`on` resolved by the GPU).
    pub precision: Precision,
    pub workers: usize,
    pub start: usize,
    pub granularity: Granularity,
    /// The search: every trial as (batch, fitted), its largest fit.
    pub found: Found,
    /// The search's trials (as `found.trials`), those of its rounds run as confirmations that
    /// did not hold among them.
    pub search: Vec<TrialResult>,
    /// The confirmations: the sizes that held in the search's rounds run as confirmations,
    /// then every run after the search, in order, the one that held the answer last.
    pub confirmations: Vec<Confirmation>,
    /// Fresh runs the answer had to hold in (`--confirm-runs`).
    pub confirm_runs: usize,
    /// The answer: the largest size that held for the confirmation's steps.
    pub maximum: usize,
    /// The smallest size above it seen to fail (in the search or a confirmation).
    pub next_failing: Option<usize>,
    pub memory: MemoryFit,
    pub margin: f64,
    pub tiers: Tiers,
    pub accumulation: Option<Accumulation>,
    /// What the config gets (or would): batch size and accumulation steps.
    pub batch_size: usize,
    pub accumulation_steps: usize,
    pub search_wall_s: f64,
    pub confirm_wall_s: f64,
    pub total_wall_s: f64,
    /// The key paths of the answer, and the answer as overrides on them.
    pub keys: Keys,
    pub overrides: Overrides,
    #[serde(serialize_with = "common::files::serialize_recorded")]
    pub written_config: Option<PathBuf>,
    /// What `--write` set in it, and its backup.
    pub written: Option<Written>,
    pub team_entry: TeamEntry,
    #[serde(serialize_with = "common::files::serialize_recorded")]
    pub team_file: Option<PathBuf>,
    #[serde(serialize_with = "common::files::serialize_recorded")]
    pub trials_file: Option<PathBuf>,
    #[serde(skip)]
    pub kept: Option<String>,
}

/// Whether a trial's size fits; one run as a confirmation fits where it held: it fit, and
/// reported every step it was told to run. A program that reports no step fits by its exit
/// alone, which says neither that it ran the batch nor for how many steps: it could only climb
/// to the largest batch there is and confirm none, so it stops the search at once.
fn fits(r: &TrialResult, confirmation: bool) -> Result<bool> {
    let fits = r.fits().ok_or_else(|| stopped(r))?;
    if fits && r.measured.reported_steps == 0 {
        return Err(Error::invalid(format!(
            "batch {} exited 0 without a step line, and the finder needs them: an exit says neither which batch ran nor how many steps held (report each optimizer step, with perf_lessons.step() or a line of the protocol in PERF_LESSONS_REPORT)",
            r.params.batch_size
        )));
    }
    Ok(fits && (r.reached_steps || !confirmation))
}

/// What a search trial tells the search.
fn probe(r: &TrialResult, confirmation: bool) -> Result<Probe> {
    let fits = fits(r, confirmation)?;
    let (peak, limit) = r.memory_terms();
    Ok(Probe {
        fits,
        peak_bytes: peak.filter(|_| fits),
        limit_bytes: limit,
        model_bytes: r.measured.model.and_then(|m| m.total_bytes()),
        allocated_bytes: r.allocated_peak().filter(|_| fits),
    })
}

pub fn autobatch(run: &Run, settings: Settings, o: &Options) -> Result<AutobatchReport> {
    let (amp, workers) = check(o, &settings).map_err(Error::invalid)?;
    let groups = run.groups(1);
    let group = &groups[0];
    let device = &group[0];
    // GPUs of one model search side by side, a size per group of them; of several models,
    // on the first group.
    let one_model = run.devices.iter().all(|d| d.name == device.name);
    if run.devices.len() > group.len() && !one_model {
        let on = match group.len() {
            1 => "one GPU",
            _ => "one group of GPUs",
        };
        let labels: Vec<&str> = group.iter().map(|d| d.label.as_str()).collect();
        run.progress.line(&format!(
            "autobatch searches on {on}: {} (the answer is per GPU model)",
            labels.join(", ")
        ));
    }
    let params = |batch_size, steps| Params {
        batch_size,
        workers,
        amp,
        accumulation: 1,
        steps,
        warmup_steps: SEARCH_WARMUP,
        ..Params::default()
    };
    let mut results = run.begin("autobatch", None)?;
    // A round of sizes, from trial number `first`, as the search's trials or (`confirming`)
    // as confirmations; in the round's order, whichever ended first, so that the search goes
    // the same way each time.
    let mut run_round = |sizes: &[usize], first: usize, confirming: bool| {
        let (steps, stop) = match confirming {
            true => (o.confirm_steps, Stop::AfterSteps),
            false => (SEARCH_STEPS, Stop::WhenSteady),
        };
        let jobs: Vec<Params> = sizes.iter().map(|&b| params(b, steps)).collect();
        match jobs.as_slice() {
            [one] => Ok(vec![run.one(group, one, first, stop, &mut results)]),
            several => run.several(several, first, stop, &mut results),
        }
    };
    let mut trials: Vec<TrialResult> = Vec::new();
    let mut confirmations: Vec<Confirmation> = Vec::new();
    let search_started = run.elapsed_s();
    let width = one_model
        .then(|| run.devices.len() / run.ranks)
        .map_or(1, |w| w.max(1));
    let mut search = Search::new(o.start, o.granularity, MAX_BATCH).map_err(Error::invalid)?;
    for number in 1.. {
        let round = search.next(width);
        if round.is_empty() {
            break;
        }
        // A round likely to hold the answer runs as confirmations: its largest size that
        // held needs no run of its own.
        let confirming = search.confirming();
        for r in run_round(&round, trials.len() + confirmations.len(), confirming)? {
            let answer = probe(&r, confirming)?;
            match search.record(r.params.batch_size, answer) {
                true => confirmations.push(Confirmation::of(r, Some(number))?),
                false => trials.push(r),
            }
        }
    }
    let found = search.found().map_err(Error::invalid)?;
    let search_wall_s = run.elapsed_s() - search_started;

    // Confirm the candidate, unless a round of the search did, as many times as asked; step
    // down until a size holds that often.
    let (g, need) = (o.granularity, o.confirm_runs);
    let floor = first_index(g);
    let mut failed: Vec<usize> = found.tried.iter().filter(|t| !t.1).map(|t| t.0).collect();
    // How often each size (its index) held, from once for each that held in the search's
    // rounds run as confirmations (the search tries a size once).
    let mut runs_held: BTreeMap<usize, usize> = (found.confirmations.iter())
        .filter(|&&(b, _)| size_at(g, index_below(g, b)) == b)
        .map(|&(b, _)| (index_below(g, b), 1))
        .collect();
    // The index of the last size confirmed after the search, and how far the next steps down.
    let (mut last, mut step) = (None, 1);
    let held = loop {
        // The largest size that held and never failed, and how often it held.
        let largest = (runs_held.iter().rev())
            .find(|&(&at, _)| !failed.contains(&size_at(g, at)))
            .map(|(&at, &n)| (at, n));
        let at = match (largest, last) {
            // Held, not yet as often as asked: again.
            (Some((p, n)), _) if n < need => p,
            (_, None) if !found.confirmed() => index_below(g, found.maximum),
            // Held as often as asked: the answer, unless sizes lie open between it and the
            // smallest size above it that failed (never where the search's rounds alone
            // confirmed it: the search ends with no size open).
            (Some((h, _)), _) => match (failed.iter())
                .filter(|&&b| b > size_at(g, h))
                .map(|&b| index_below(g, b).max(floor))
                .min()
            {
                Some(f) if f > h + 1 => h + (f - h) / 2,
                _ => break h,
            },
            (None, None) => unreachable!("a size held in a round of the search"),
            (None, Some(at)) if at <= floor => {
                return Err(Error::invalid(format!(
                    "no batch held for {} steps{}: even {} {} in its confirmation run",
                    o.confirm_steps,
                    match need {
                        1 => String::new(),
                        n => format!(" in {n} runs"),
                    },
                    size_at(g, at),
                    confirmations
                        .last()
                        .map_or("ran out of memory", |c| c.trial.misfit())
                )))
            }
            (None, Some(at)) => {
                let next = at.saturating_sub(step).max(floor);
                step *= 2;
                next
            }
        };
        let batch = size_at(g, at);
        let first = trials.len() + confirmations.len();
        let c = Confirmation::of(run_round(&[batch], first, true)?.remove(0), None)?;
        match c.held {
            true => *runs_held.entry(at).or_default() += 1,
            false => failed.push(batch),
        }
        confirmations.push(c);
        last = Some(at);
    };
    let maximum = size_at(g, held);
    let next_failing = failed.iter().copied().filter(|&b| b > maximum).min();
    // The confirmation that held the answer last, the others in the order they ran.
    if let Some(i) = (confirmations.iter()).rposition(|c| c.held && c.batch_size == maximum) {
        confirmations[i..].rotate_left(1);
    }
    let confirm_wall_s = run.elapsed_s() - search_started - search_wall_s;

    let all: Vec<&TrialResult> = trials
        .iter()
        .chain(confirmations.iter().map(|c| &c.trial))
        .collect();
    let memory = MemoryFit::of(&all);
    let margin = o
        .margin
        .unwrap_or_else(|| default_margin(&[DeviceSummary::of(device)], &trials));
    let tiers = memory.tiers(maximum, o.granularity, margin);
    let accumulation = o
        .effective_batch(&settings)
        .map(|t| recommend::accumulation(t, tiers.recommended.max(1), settings.adam_like));
    let (batch_size, accumulation_steps) =
        (accumulation.as_ref()).map_or((tiers.recommended.max(1), 1), |a| (a.batch, a.steps));
    let gpu_name = gpu_name(device.name.as_deref(), &trials);
    let precision = params(1, 1).on_gpu(device.capability).amp;
    let team_entry = TeamEntry {
        gpu: gpu_name.clone(),
        model: o
            .model_name
            .clone()
            .unwrap_or_else(|| writeback::model_name(&run.program.argv)),
        batch_size,
        accumulation_steps,
        precision: precision.label().into(),
    };
    let written = o
        .write
        .as_ref()
        .map(|path| writeback::write_config(path, &o.keys, batch_size, accumulation_steps))
        .transpose()
        .map_err(Error::invalid)?;
    if let Some(team) = &o.team {
        writeback::write_team(team, &team_entry).map_err(Error::invalid)?;
    }
    let (kept, trials_file) = run.finish(all);
    Ok(AutobatchReport {
        schema: SCHEMA,
        command: run.program.argv.clone(),
        device: DeviceSummary::of(device),
        gpu_name,
        launch: run.launch.clone(),
        provenance: Provenance::now(),
        settings,
        amp,
        precision,
        workers,
        start: o.start,
        granularity: o.granularity,
        confirm_runs: o.confirm_runs,
        found,
        search: trials,
        confirmations,
        maximum,
        next_failing,
        memory,
        margin,
        tiers,
        accumulation,
        batch_size,
        accumulation_steps,
        search_wall_s,
        confirm_wall_s,
        total_wall_s: run.elapsed_s(),
        overrides: writeback::overrides(&o.keys, batch_size, accumulation_steps),
        keys: o.keys.clone(),
        written_config: o.write.clone(),
        written,
        team_entry,
        team_file: o.team.clone(),
        trials_file,
        kept,
    })
}

/// How size `batch` failed in the search or a confirmation ([TrialResult::misfit]), out of
/// memory where it ever did.
fn misfit_at(r: &AutobatchReport, batch: usize) -> &'static str {
    let trials = (r.search.iter()).chain(r.confirmations.iter().map(|c| &c.trial));
    (trials.filter(|t| t.params.batch_size == batch && t.fits() == Some(false)))
        .min_by_key(|t| t.status != Status::Oom)
        .map_or("ran out of memory", TrialResult::misfit)
}

pub fn render(r: &AutobatchReport) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "## tuner autobatch: `{}` on {}\n",
        Program::display(&r.command),
        r.gpu_name
    );
    if r.amp == Precision::On {
        let _ = writeln!(o, "--amp on is {}\n", r.device.amp_on);
    }
    let sizes = match r.granularity {
        Granularity::Multiple(m) => format!("multiples of {m}"),
        Granularity::Pow2 => "powers of two".into(),
    };
    // The search's trials in the order they ran, with the sizes that held in its rounds run
    // as confirmations.
    let mut ran: Vec<(&TrialResult, Option<bool>)> = (r.search.iter().zip(&r.found.trials))
        .map(|(t, &(_, fits))| (t, Some(fits)))
        .chain(
            (r.confirmations.iter())
                .filter(|c| c.round.is_some())
                .map(|c| (&c.trial, None)),
        )
        .collect();
    ran.sort_by_key(|(t, _)| t.index);
    let tried: Vec<String> = ran
        .iter()
        .map(|&(t, fits)| {
            // None: a size that held in a round run as confirmations.
            let how = match (fits, t.steady_at) {
                (None, _) => format!("held for {} steps", t.params.steps),
                (Some(true), Some(at)) => format!("fits, steady at step {at}"),
                (Some(true), None) => "fits".into(),
                _ if t.status == Status::Hang => t.misfit().into(),
                _ if t.fits() == Some(true) => t.verdict(),
                _ => "out of memory".into(),
            };
            format!("{} {how} ({:.1} s)", t.params.batch_size, t.wall_s)
        })
        .collect();
    let as_confirmations = match ran.len() - r.search.len() {
        0 => String::new(),
        n => format!(", {n} held as confirmations"),
    };
    let _ = writeln!(
        o,
        "search from {} ({sizes}), each trial until its memory is steady, a round likely to hold the answer for the confirmation's {} steps: {} trials{}{as_confirmations} in {:.1} s: {}",
        r.start,
        r.confirmations.last().map_or(0, |c| c.steps),
        ran.len(),
        match r.found.rounds {
            n if n < ran.len() => format!(" in {n} rounds side by side"),
            _ => String::new(),
        },
        r.search_wall_s,
        tried.join(", ")
    );
    for c in r.confirmations.iter().filter(|c| c.round.is_none()) {
        let own = match c.trial.ranks {
            1 => "a process of its own".to_string(),
            n => format!("a group of its own ({n} processes, batch per GPU)"),
        };
        let _ = writeln!(
            o,
            "confirmation: batch {} for {} steps in {own}: {} ({:.1} s)",
            c.batch_size,
            c.steps,
            if c.held {
                "held".to_string()
            } else {
                c.trial.verdict()
            },
            c.trial.wall_s
        );
    }
    let answer = r.confirmations.last();
    let runs = (r.confirmations.iter())
        .filter(|c| c.held && c.batch_size == r.maximum)
        .count();
    let _ = writeln!(
        o,
        "\n**maximum {}**: held for {} steps{}{}; {}",
        r.maximum,
        answer.map_or(0, |c| c.steps),
        match runs {
            0 | 1 => String::new(),
            n => format!(" in each of {n} runs"),
        },
        (answer.and_then(|c| c.round))
            .map(|n| format!(", its trial in round {n} of the search"))
            .unwrap_or_default(),
        match r.next_failing {
            Some(n) => format!("{n} {}", misfit_at(r, n)),
            None => "no larger size was seen to fail (the search reached its cap)".into(),
        }
    );
    let _ = writeln!(o, "memory: {}", r.memory.describe());
    let every = (r.search.iter()).chain(r.confirmations.iter().map(|c| &c.trial));
    o.extend(crate::run::shared(every).map(|s| s + "\n"));
    let _ = writeln!(o, "{}", recommend::describe(&r.tiers, r.margin));
    if let Some(a) = &r.accumulation {
        let _ = writeln!(o, "gradient accumulation: {}", a.advice);
    }
    let _ = match (&r.written_config, &r.written) {
        (Some(c), Some(w)) => {
            let set: Vec<String> = w.values.iter().map(|(k, v)| format!("{k} = {v}")).collect();
            let backup = w
                .backup
                .as_ref()
                .map_or_else(String::new, |b| format!(" (backup {})", b.display()));
            writeln!(o, "wrote {} into {}{backup}", set.join(" and "), c.display())
        }
        _ => writeln!(
            o,
            "for the config: batch size {}, accumulation steps {} (--write FILE --key DOTTED.PATH puts them into a TOML, YAML or JSON file)",
            r.batch_size, r.accumulation_steps
        ),
    };
    let unkeyed = match (&r.keys.accumulation, r.accumulation_steps) {
        (None, steps) if steps > 1 => {
            format!(" (and {steps} accumulation steps: --accumulation-key names their key)")
        }
        _ => String::new(),
    };
    let _ = writeln!(o, "Hydra: {}{unkeyed}", r.overrides.hydra);
    let _ = writeln!(o, "LightningCLI: {}{unkeyed}", r.overrides.lightning);
    let e = &r.team_entry;
    let what = format!(
        "[gpus.\"{}\".\"{}\"] batch_size = {}, accumulation_steps = {}, precision = \"{}\"",
        e.gpu, e.model, e.batch_size, e.accumulation_steps, e.precision
    );
    let _ = match &r.team_file {
        Some(t) => writeln!(o, "team settings updated: {}: {what}", t.display()),
        None => writeln!(o, "team entry (--team FILE writes it): {what}"),
    };
    let _ = writeln!(
        o,
        "\nautobatch: {:.1} s in all (search {:.1} s, confirmation {:.1} s; {}){}",
        r.total_wall_s,
        r.search_wall_s,
        r.confirm_wall_s,
        r.launch,
        kept_at(&r.trials_file)
    );
    if let Some(k) = &r.kept {
        let _ = writeln!(o, "{k}");
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_keeps_the_options_and_reads_them_back() {
        let o = Options {
            start: 8,
            granularity: Granularity::Pow2,
            margin: Some(0.1),
            confirm_steps: 20,
            confirm_runs: 2,
            effective_batch: Some(512),
            write: Some(PathBuf::from("conf.yaml")),
            keys: Keys {
                batch_size: KeyPath::parse("data.batch_size").unwrap(),
                accumulation: None,
                new_keys: true,
            },
            team: None,
            model_name: Some("vit".into()),
        };
        let saved = serde_json::to_value(&o).unwrap();
        let want = serde_json::json!({
            "start": 8, "granularity": "pow2", "margin": 0.1, "confirm_steps": 20,
            "confirm_runs": 2, "effective_batch": 512, "write": "conf.yaml",
            "batch_key": "data.batch_size", "accumulation_key": null, "new_keys": true,
            "team": null, "model_name": "vit",
        });
        assert_eq!(saved, want);
        let read: Options = serde_json::from_value(saved.clone()).unwrap();
        assert_eq!(serde_json::to_value(&read).unwrap(), saved);
        // A plan from before --confirm-runs and --new-key: one run, no new keys.
        let mut older = saved.clone();
        older.as_object_mut().unwrap().remove("confirm_runs");
        older.as_object_mut().unwrap().remove("new_keys");
        let read: Options = serde_json::from_value(older).unwrap();
        assert_eq!((read.confirm_runs, read.keys.new_keys), (1, false));
        let mut bad = saved;
        bad["batch_key"] = "a..b".into();
        let e = serde_json::from_value::<Options>(bad)
            .unwrap_err()
            .to_string();
        assert!(e.contains("'a..b' is not a key path"), "{e}");
    }
}
