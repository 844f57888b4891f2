use std::process::ExitCode;

use clap::Parser;

use tuner::cli::{Cli, Command};

fn main() -> ExitCode {
    common::cli::main_with(|| {
        let cli = Cli::parse();
        match cli.command {
            Command::Sweep(args) => {
                let settings = args.settings.settings().map_err(common::Error::invalid)?;
                let gpu = common::Gpu::open(settings.device)?;
                let out = tuner::sweep::Output {
                    json: args.json.clone(),
                    plot: args.plot.clone(),
                    progress: !args.quiet,
                };
                let (report, verified) = tuner::sweep::run(&gpu, settings, &out)?;
                print!("{}", tuner::sweep::render_text(&report));
                if !verified {
                    eprintln!(
                        "error: the training step failed its check against the float64 reference"
                    );
                    return Ok(ExitCode::FAILURE);
                }
                Ok(ExitCode::SUCCESS)
            }
            Command::Plot(args) => {
                tuner::sweep::replot(&args.from, &args.out).map_err(common::Error::invalid)?;
                Ok(ExitCode::SUCCESS)
            }
        }
    })
}
