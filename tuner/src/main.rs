use std::process::ExitCode;

use clap::Parser;

use tuner::cli::{Cli, Command};

fn main() -> ExitCode {
    common::cli::main_with(|mut startup| {
        let cli = Cli::parse();
        match cli.command {
            Command::Sweep(args) => {
                let settings = args.settings.settings().map_err(common::Error::invalid)?;
                let gpu = common::Gpu::open(settings.device)?;
                startup.mark("GPU opened (context, stream, NVML)");
                let out = tuner::sweep::Output {
                    json: args.json.clone(),
                    plot: args.plot.clone(),
                    progress: !args.quiet,
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
                if args.watch {
                    let device = args.settings.device.unwrap_or(0) as u32;
                    tuner::commands::watch(
                        device,
                        std::time::Duration::from_secs(1),
                        args.watch_seconds,
                    )?;
                    return Ok(ExitCode::SUCCESS);
                }
                let settings = args.settings.settings().map_err(common::Error::invalid)?;
                let batches = match &args.batch_size {
                    Some(list) => list.0.clone(),
                    None => vec![settings.batch_size.unwrap_or(1024)],
                };
                let gpu = common::Gpu::open(settings.device)?;
                let r = tuner::commands::memory_report(
                    &gpu,
                    settings,
                    &batches,
                    args.multiple_of,
                    args.margin,
                )?;
                print!("{}", tuner::commands::render_memory(&r));
                write_json(&args.json, &r)?;
                Ok(ExitCode::SUCCESS)
            }
            Command::Autobatch(args) => {
                let settings = args.settings.settings().map_err(common::Error::invalid)?;
                let options = tuner::commands::AutobatchOptions {
                    start: args.start,
                    granularity: if args.pow2 {
                        tuner::search::Granularity::Pow2
                    } else {
                        tuner::search::Granularity::Multiple(args.multiple_of.unwrap_or(8))
                    },
                    margin: args.margin,
                    effective_batch: args.effective_batch,
                    config: args.settings.config.clone(),
                    test_only: args.test_only,
                    team: args.team.clone(),
                    progress: !args.quiet,
                };
                tuner::commands::check_autobatch_options(&options)
                    .map_err(common::Error::invalid)?;
                let gpu = common::Gpu::open(settings.device)?;
                let r = tuner::commands::autobatch(&gpu, settings, &options)?;
                print!("{}", tuner::commands::render_autobatch(&r));
                write_json(&args.json, &r)?;
                Ok(ExitCode::SUCCESS)
            }
            Command::Plot(args) => {
                tuner::sweep::replot(&args.from, &args.out).map_err(common::Error::invalid)?;
                Ok(ExitCode::SUCCESS)
            }
        }
    })
}

fn write_json<T: serde::Serialize>(
    path: &Option<std::path::PathBuf>,
    value: &T,
) -> anyhow::Result<()> {
    if let Some(path) = path {
        common::files::write_json_file(path, value, "the result")?;
    }
    Ok(())
}
