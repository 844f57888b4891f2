use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

use common::Error;
use tuner::cli::{Cli, Command, ProgramArgs, SettingsArgs};
use tuner::commands::AutobatchOptions;
use tuner::external::{visible_devices, Placeholder, Program};
use tuner::program::{self, ProgramSettings, Run, RunOptions};
use tuner::search::Granularity;

fn main() -> ExitCode {
    common::cli::main_with(|mut startup| {
        let cli = Cli::parse();
        match cli.command {
            Command::Sweep(args) => {
                if let Some(program) = program_of(&args.program)? {
                    let (settings, time_limit) = program_settings(&args.settings, &args.program)?;
                    let Some(run) =
                        start(program, &args.program, &args.json, !args.quiet, "sweep")?
                    else {
                        return Ok(ExitCode::from(2));
                    };
                    let report = program::sweep(
                        &run,
                        ProgramSettings::from(&settings, time_limit),
                        args.margin,
                        args.plot.as_deref(),
                    )?;
                    print!("{}", program::render_sweep(&report));
                    write_json(&args.json, &report)?;
                    return Ok(if report.best.highest_throughput.is_some() {
                        ExitCode::SUCCESS
                    } else {
                        ExitCode::FAILURE
                    });
                }
                let settings = args.settings.settings().map_err(Error::invalid)?;
                let gpu = common::Gpu::open(settings.device)?;
                startup.mark("GPU opened (context, stream, NVML)");
                let out = tuner::sweep::Output {
                    json: args.json.clone(),
                    plot: args.plot.clone(),
                    progress: !args.quiet,
                    margin: args.margin,
                };
                let (report, verified) = tuner::sweep::run(&gpu, settings, &out, startup)?;
                print!("{}", tuner::sweep::render_text(&report));
                if !verified {
                    eprintln!(
                        "error: the training step failed its check against the float64 reference"
                    );
                    return Ok(ExitCode::FAILURE);
                }
                Ok(ExitCode::SUCCESS)
            }
            Command::Memory(args) => {
                let granularity = match args.multiple_of {
                    Some(m) => Granularity::Multiple(m),
                    None => Granularity::Pow2,
                };
                if let Some(program) = program_of(&args.program)? {
                    if args.watch {
                        return Err(Error::invalid(
                            "--watch reads NVML on its own: use it without a command",
                        )
                        .into());
                    }
                    let (settings, time_limit) = program_settings(&args.settings, &args.program)?;
                    let batches = match (&args.batch_size, settings.batch_size) {
                        (Some(list), _) => list.0.clone(),
                        (None, Some(b)) => vec![b],
                        (None, None) => {
                            return Err(Error::invalid(
                                "which batch sizes? give --batch-size B[,B...] (or training.batch_size in --config)",
                            )
                            .into())
                        }
                    };
                    let settings = ProgramSettings::from(&settings, time_limit);
                    settings.one_workers()?;
                    let Some(run) =
                        start(program, &args.program, &args.json, !args.quiet, "memory")?
                    else {
                        return Ok(ExitCode::from(2));
                    };
                    let report =
                        program::memory(&run, settings, &batches, granularity, args.margin)?;
                    print!("{}", program::render_memory(&report));
                    write_json(&args.json, &report)?;
                    return Ok(ExitCode::SUCCESS);
                }
                if args.watch {
                    let device = args.settings.device.unwrap_or(0) as u32;
                    tuner::commands::watch(
                        device,
                        std::time::Duration::from_secs(1),
                        args.watch_seconds,
                    )?;
                    return Ok(ExitCode::SUCCESS);
                }
                let settings = args.settings.settings().map_err(Error::invalid)?;
                let batches = match &args.batch_size {
                    Some(list) => list.0.clone(),
                    None => vec![settings.batch_size.unwrap_or(1024)],
                };
                let gpu = common::Gpu::open(settings.device)?;
                let r = tuner::commands::memory_report(
                    &gpu,
                    settings,
                    &batches,
                    granularity,
                    args.margin,
                )?;
                print!("{}", tuner::commands::render_memory(&r));
                write_json(&args.json, &r)?;
                Ok(ExitCode::SUCCESS)
            }
            Command::Autobatch(args) => {
                let options = AutobatchOptions {
                    start: args.start,
                    granularity: if args.pow2 {
                        Granularity::Pow2
                    } else {
                        Granularity::Multiple(args.multiple_of.unwrap_or(8))
                    },
                    margin: args.margin,
                    effective_batch: args.effective_batch,
                    config: args.settings.config.clone(),
                    test_only: args.test_only,
                    team: args.team.clone(),
                    model_name: args.model_name.clone(),
                    progress: !args.quiet,
                };
                tuner::commands::check_autobatch_options(&options).map_err(Error::invalid)?;
                if let Some(program) = program_of(&args.program)? {
                    let (settings, time_limit) = program_settings(&args.settings, &args.program)?;
                    let settings = ProgramSettings::from(&settings, time_limit);
                    settings.check_single()?;
                    let Some(run) =
                        start(program, &args.program, &args.json, !args.quiet, "autobatch")?
                    else {
                        return Ok(ExitCode::from(2));
                    };
                    let report = program::autobatch(&run, settings, &options)?;
                    print!("{}", program::render_autobatch(&report));
                    write_json(&args.json, &report)?;
                    return Ok(if report.check.trained && report.next_fails {
                        ExitCode::SUCCESS
                    } else {
                        ExitCode::FAILURE
                    });
                }
                let settings = args.settings.settings().map_err(Error::invalid)?;
                let gpu = common::Gpu::open(settings.device)?;
                let r = tuner::commands::autobatch(&gpu, settings, &options)?;
                print!("{}", tuner::commands::render_autobatch(&r));
                write_json(&args.json, &r)?;
                Ok(ExitCode::SUCCESS)
            }
            Command::Team(args) => {
                print!(
                    "{}",
                    tuner::writeback::show_team(&args.file).map_err(Error::invalid)?
                );
                Ok(ExitCode::SUCCESS)
            }
            Command::Plot(args) => {
                tuner::sweep::replot(&args.from, &args.out).map_err(Error::invalid)?;
                Ok(ExitCode::SUCCESS)
            }
        }
    })
}

/// The program after `--`, checked before anything runs: None for the tuner's own MLP.
fn program_of(p: &ProgramArgs) -> anyhow::Result<Option<Program>> {
    if p.command.is_empty() {
        if std::env::args_os().any(|a| a == "--") {
            return Err(Error::invalid(
                "no command after --: put your training command there, e.g. `tuner autobatch -- python3 train.py --batch-size {batch_size}`",
            )
            .into());
        }
        let flags = p.program_only_flags();
        if !flags.is_empty() {
            return Err(Error::invalid(format!(
                "{}: only for a program's trials: put its command after --",
                flags.join(", ")
            ))
            .into());
        }
        return Ok(None);
    }
    let program = Program::new(p.command.clone()).map_err(Error::invalid)?;
    if let Some(word) = program.unknown_placeholders().first() {
        let known: Vec<String> = Placeholder::ALL
            .iter()
            .map(|p| format!("{{{}}}", p.name()))
            .collect();
        return Err(Error::invalid(format!(
            "{{{word}}} in the command is not a placeholder: use {}",
            known.join(", ")
        ))
        .into());
    }
    program.check_runnable().map_err(Error::invalid)?;
    Ok(Some(program))
}

/// The settings a program's trials take from the config and the flags (the MLP's refused), and
/// the time limit.
fn program_settings(
    s: &SettingsArgs,
    p: &ProgramArgs,
) -> anyhow::Result<(tuner::config::Settings, f64)> {
    let merged = s.merged().map_err(Error::invalid)?;
    program::refuse_mlp_settings(&merged).map_err(Error::invalid)?;
    let settings = merged.resolve().map_err(Error::invalid)?;
    Ok((
        settings,
        p.time_limit.unwrap_or(program::DEFAULT_TIME_LIMIT_S),
    ))
}

/// The GPUs `--devices` names and the trials' folder. None when there is no GPU to run on
/// (said on stderr; exit 2, as every binary without a GPU).
fn start(
    program: Program,
    p: &ProgramArgs,
    json: &Option<PathBuf>,
    progress: bool,
    what: &str,
) -> anyhow::Result<Option<Run>> {
    let devices = match visible_devices(p.devices.as_deref()) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(None);
        }
    };
    let run = Run::new(
        RunOptions {
            program,
            devices,
            time_limit_s: p.time_limit.unwrap_or(program::DEFAULT_TIME_LIMIT_S),
            trials_dir: p.trials_dir.clone(),
            json: json.clone(),
            progress,
        },
        what,
    )?;
    Ok(Some(run))
}

fn write_json<T: serde::Serialize>(path: &Option<PathBuf>, value: &T) -> anyhow::Result<()> {
    if let Some(path) = path {
        common::files::write_json_file(path, value, "the result")?;
    }
    Ok(())
}
