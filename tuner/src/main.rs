use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::SystemTime;

use clap::Parser;
use serde_json::json;

use common::exit::usage;
use profiling::discover::{Places, NSYS};
use tuner::autobatch::{self, Options};
use tuner::cli::{AutobatchArgs, Cli, Command, ProfileArgs, RunArgs};
use tuner::config::{plan, Choice, Settings, SlurmArgs};
use tuner::gpu::visible_devices;
use tuner::profile::{team_answer, Answer, Profiler};
use tuner::program::{placeholders, Axis, Params, Program};
use tuner::run::{emit, Run, RunOptions};
use tuner::slurm::Plan;
use tuner::sweep::SweepReport;
use tuner::trial::Limits;
use tuner::writeback;

fn main() -> ExitCode {
    common::process::kill_groups_when_interrupted(
        "the trials still running were killed; each trial that ended was written as it ended (the run's .trials.jsonl)",
    );
    common::cli::main_with(|_| match Cli::parse().command {
        Command::Sweep(a) => {
            let mut settings = a.run.settings().map_err(usage)?;
            if let Some(b) = &a.batch_sizes {
                settings.batch_sizes = b.clone();
            }
            Axis::check_distinct(&a.axes).map_err(usage)?;
            settings.axes = a.axes.clone();
            if let Some(dir) = &a.slurm.dir {
                let plot = a.plot.as_deref();
                return on_slurm(&a.run, &a.slurm, dir, settings, plot, |p| Plan {
                    margin: a.margin,
                    pick: a.pick.clone(),
                    ..p
                });
            }
            let run = start(&a.run, &settings, "sweep")?;
            let ran = run.ran("sweep", &plan(&settings), settings, a.margin)?;
            let report = tuner::sweep::report(ran, a.pick.as_ref(), a.plot.as_deref())?;
            sweep_done(&a.run.json, &report)
        }
        Command::Memory(a) => {
            let mut settings = a.run.settings().map_err(usage)?;
            settings.batch_sizes = match (&a.batch_sizes, settings.batch_size) {
                (Some(list), _) => list.clone(),
                (None, Some(b)) => vec![b],
                (None, None) => return Err(usage(
                    "which batch sizes? give --batch-sizes B[,B...] (or training.batch_size in --config)",
                )),
            };
            tuner::config::one_of(&settings.workers, "worker count here: --workers N")
                .map_err(usage)?;
            let run = start(&a.run, &settings, "memory")?;
            let ran = run.ran("memory", &plan(&settings), settings, a.sizes.margin)?;
            let report = tuner::memory::report(ran, a.sizes.granularity());
            emit(&a.run.json, &report, &tuner::memory::render(&report))?;
            Ok(code(
                report.precisions.iter().any(|p| p.largest_fitting > 0),
            ))
        }
        Command::Autobatch(a) => {
            if a.slurm.max_parallel.is_some() {
                return Err(usage(
                    "--max-parallel is a sweep's: the batch finder runs as one job, its trials one after another",
                ));
            }
            let (settings, options) = autobatch_checked(&a)?;
            if let Some(dir) = &a.slurm.dir {
                // The node reads the finder's options as they were resolved and checked here.
                let saved = json!({"options": options, "no_fork": a.run.no_fork});
                return on_slurm(&a.run, &a.slurm, dir, settings, None, |p| Plan {
                    trials: Vec::new(),
                    autobatch: Some(saved),
                    ..p
                });
            }
            let run = start(&a.run, &settings, "autobatch")?;
            let report = autobatch::autobatch(&run, settings, &options)?;
            emit(&a.run.json, &report, &autobatch::render(&report))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Profile(a) => profile(&a),
        // A file named on the command line that cannot be read is bad usage, as gather's
        // folder is.
        Command::Team { file } => {
            print!("{}", tuner::writeback::show_team(&file).map_err(usage)?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Gather { dir, json, plot } => gathered(&dir, &Plan::read(&dir)?, json, plot),
        Command::Task { dir, index } => {
            let plan = Plan::read_in_job(&dir)?;
            if let Some(options) = &plan.autobatch {
                return autobatch_task(&dir, &plan, options);
            }
            let r = tuner::slurm::task(&dir, &plan, index)?;
            println!(
                "trial {}: {}: {}",
                r.index,
                r.params.describe(),
                r.verdict()
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Plot { from, out } => {
            tuner::sweep::replot(&from, &out).map_err(usage)?;
            Ok(ExitCode::SUCCESS)
        }
    })
}

/// The batch finder's settings and options (its flags), checked before anything runs.
fn autobatch_checked(a: &AutobatchArgs) -> anyhow::Result<(Settings, Options)> {
    let settings = a.run.settings().map_err(usage)?;
    let options = Options {
        start: a.start,
        granularity: a.sizes.granularity(),
        margin: a.sizes.margin,
        confirm_steps: a.confirm_steps,
        // One run, two for a group of ranks (at least one rank each).
        confirm_runs: a.confirm_runs.unwrap_or(settings.ranks.min(2)),
        effective_batch: a.effective_batch,
        write: a.write_target().map_err(usage)?,
        keys: a.keys(),
        team: a.team.clone(),
        model_name: a.model_name.clone(),
    };
    autobatch::check(&options, &settings).map_err(usage)?;
    Ok((settings, options))
}

/// What the job of `autobatch --slurm DIR` runs: the finder with the plan's settings and
/// options, here, its answer left in DIR.
fn autobatch_task(dir: &Path, plan: &Plan, saved: &serde_json::Value) -> anyhow::Result<ExitCode> {
    tuner::slurm::enter(plan)?;
    let options = serde_json::from_value(saved["options"].clone()).map_err(|e| {
        usage(format!(
            "{}: the plan's batch finder is not one this tuner reads (the finder's options: {e}): run it again with this tuner",
            dir.display()
        ))
    })?;
    let run_args = RunArgs {
        command: plan.command.clone(),
        no_fork: saved["no_fork"].as_bool().unwrap_or(false),
        quiet: true,
        ..RunArgs::default()
    };
    let run = start(&run_args, &plan.settings, "autobatch")?;
    let report = autobatch::autobatch(&run, plan.settings.clone(), &options)?;
    let text = autobatch::render(&report);
    tuner::slurm::write_answer(dir, &report, &text)?;
    print!("{text}");
    Ok(ExitCode::SUCCESS)
}

/// A sweep's report printed and written, and its exit code.
fn sweep_done(json: &Option<PathBuf>, report: &SweepReport) -> anyhow::Result<ExitCode> {
    emit(json, report, &tuner::sweep::render(report))?;
    // Known only once the trials reported: their results are kept, the pick is refused.
    if let Some(e) = &report.pick_error {
        return Err(usage(e));
    }
    Ok(code(report.best.highest_throughput.is_some()))
}

/// `--slurm DIR`: the command checked as a local run's is (no GPU is needed where it is given,
/// a cluster's login node), planned into DIR with `settings` (`plan` makes a sweep's plan the
/// command's) and submitted: a sweep as a Slurm array job, the batch finder as one job; once
/// the job is over, its report, as `tuner gather DIR` makes it.
fn on_slurm(
    a: &RunArgs,
    slurm: &SlurmArgs,
    dir: &Path,
    settings: Settings,
    plot: Option<&Path>,
    plan: impl FnOnce(Plan) -> Plan,
) -> anyhow::Result<ExitCode> {
    let program = checked_program(a, &settings)?;
    let cwd = std::env::current_dir()
        .map_err(|e| usage(format!("cannot read the current folder: {e}")))?;
    let plan = plan(Plan::new(
        program.argv,
        cwd,
        settings,
        a.json.as_deref(),
        plot,
    ));
    if !tuner::slurm::submit(&plan, dir, slurm)? {
        return Ok(ExitCode::SUCCESS);
    }
    gathered(dir, &plan, None, None)
}

/// `tuner gather DIR`: the report of the plan in DIR from what its job left there so far,
/// written to `json` and drawn into `plot` (default: the plan's).
fn gathered(
    dir: &Path,
    plan: &Plan,
    json: Option<PathBuf>,
    plot: Option<PathBuf>,
) -> anyhow::Result<ExitCode> {
    let json = json.or(plan.json.clone());
    if plan.autobatch.is_some() {
        let (text, report) = tuner::slurm::gather_autobatch(dir)?;
        emit(&json, &report, &text)?;
        return Ok(ExitCode::SUCCESS);
    }
    let ran = tuner::slurm::gather(dir, plan)?;
    let plot = plot.as_deref().or(plan.plot.as_deref());
    let report = tuner::sweep::report(ran, plan.pick.as_ref(), plot)?;
    sweep_done(&json, &report)
}

/// 0 when the command found what it looks for, 1 when its trials gave no answer. Bad input is
/// refused before anything runs (2), no GPU is 3, as for every binary of the workspace.
fn code(answered: bool) -> ExitCode {
    ExitCode::from(u8::from(!answered))
}

/// The command after `--` and the GPUs, checked before anything runs; the run's folder and how
/// its trials start.
fn start(a: &RunArgs, settings: &Settings, what: &str) -> anyhow::Result<Run> {
    let program = checked_program(a, settings)?;
    let devices = visible_devices(settings.devices.as_deref())?;
    if devices.len() < settings.ranks {
        return Err(usage(format!(
            "--ranks {} runs each trial on {0} GPUs, and there are {} to run on: give --devices {0} or more of them",
            settings.ranks,
            devices.len()
        )));
    }
    run_on(a, settings, what, program, devices, !a.no_fork)
}

/// The command after `--`, its placeholders and its program checked.
fn checked_program(a: &RunArgs, settings: &Settings) -> anyhow::Result<Program> {
    let program = Program::new(a.command.clone()).map_err(usage)?;
    if let Some(word) = program.unknown_placeholders(&settings.axes).first() {
        let ours = placeholders(&Params::default());
        let names = ours.iter().map(|(n, ..)| *n);
        let axes = settings.axes.iter().map(|a| a.name.as_str());
        let known: Vec<String> = names.chain(axes).map(|n| format!("{{{n}}}")).collect();
        return Err(usage(format!(
            "{{{word}}} in the command is not a placeholder: use {}, or give it values with a sweep's --axis {word}=V1,V2,...",
            known.join(", ")
        )));
    }
    program.check_runnable().map_err(usage)?;
    Ok(program)
}

/// The run's folder and how its trials start (forked where `fork` and the program allow).
fn run_on(
    a: &RunArgs,
    settings: &Settings,
    what: &str,
    program: Program,
    devices: Vec<tuner::gpu::Device>,
    fork: bool,
) -> anyhow::Result<Run> {
    Ok(Run::new(
        RunOptions {
            program,
            devices,
            limits: Limits::of(settings),
            trials_dir: a.trials_dir.clone(),
            json: a.json.clone(),
            progress: !a.quiet,
            fork,
            ranks: settings.ranks,
        },
        what,
    )?)
}

/// `tuner profile`: the answer's trial under nsys or PyTorch's profiler.
fn profile(a: &ProfileArgs) -> anyhow::Result<ExitCode> {
    let settings = a.run.settings().map_err(usage)?;
    if settings.warmup_steps == 0 {
        return Err(usage(
            "profile needs at least one warmup step (--warmup 1 or more): the profiler starts as the last one is reported",
        ));
    }
    if settings.ranks > 1 {
        return Err(usage(
            "profile runs the answer as one process under the profiler: leave out --ranks (it is sweep's, memory's and autobatch's)",
        ));
    }
    if a.nsys.is_some() && a.profiler == Choice::Torch {
        return Err(usage("--nsys and --profiler torch: choose one"));
    }
    let (amp, workers) = autobatch::choices(&settings).map_err(usage)?;
    let program = checked_program(&a.run, &settings)?;
    let mut devices = visible_devices(settings.devices.as_deref())?;
    devices.truncate(1);
    let model = (a.model_name.clone()).unwrap_or_else(|| writeback::model_name(&program.argv));
    let answer = match (a.batch_size, &a.team, settings.batch_size) {
        (Some(b), _, _) => Answer::given(b, "--batch-size"),
        (None, Some(team), _) => {
            let entries = writeback::read_team(team).map_err(usage)?;
            team_answer(&entries, devices[0].name.as_deref(), &model, team).map_err(usage)?
        }
        (None, None, Some(b)) => Answer::given(b, "the config's training.batch_size"),
        (None, None, None) => {
            return Err(usage(
                "which batch? give --batch-size N, --team FILE (written by `tuner autobatch --team`), or training.batch_size in --config",
            ))
        }
    };
    let flags = &a.run.flags;
    let params = Params {
        batch_size: answer.batch_size,
        workers,
        // The flags win over the team's entry, which wins over the config.
        amp: answer.amp.filter(|_| flags.amp.is_none()).unwrap_or(amp),
        accumulation: (answer.accumulation)
            .filter(|_| flags.accumulation_steps.is_none())
            .unwrap_or(settings.accumulation_steps),
        steps: settings.steps,
        warmup_steps: settings.warmup_steps,
        ..Params::default()
    };
    let chosen = tuner::profile::choose(a.profiler, Places::from_env(&NSYS, a.nsys.clone()))
        .map_err(usage)?;
    std::fs::create_dir_all(&a.out_dir).map_err(|e| {
        usage(format!(
            "cannot create the folder for the profile {}: {e}",
            a.out_dir.display()
        ))
    })?;
    let base = tuner::profile::base(&a.out_dir, &model, params.batch_size, SystemTime::now());
    let wrapped =
        Program::new(tuner::profile::command(&chosen.0, &program.argv, &base)).map_err(usage)?;
    // A trial under nsys must be nsys's child: spawned, never forked from a Python parent.
    let fork = !a.run.no_fork && !matches!(chosen.0, Profiler::Nsys(_));
    let mut run = run_on(&a.run, &settings, "profile", wrapped, devices, fork)?;
    run.env = tuner::profile::environment(&chosen.0, &base);
    let report = tuner::profile::profile(&run, &params, answer, chosen, &base)?;
    emit(&a.run.json, &report, &tuner::profile::render(&report))?;
    Ok(ExitCode::SUCCESS)
}
