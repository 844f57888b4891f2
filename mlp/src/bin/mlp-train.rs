//! mlp-train: the MLP of ch1-basics as a training program that speaks the tuner's protocol.
//! `mlp-train --help` lists the flags; the [mlp::train] module page says what it reports.

use std::process::ExitCode;

use clap::{CommandFactory, Parser};

use mlp::train::{self, Args, Report};

fn main() -> ExitCode {
    let args = Args::parse();
    let opts = match args.options() {
        Ok(o) => o,
        Err(e) => Args::command()
            .error(clap::error::ErrorKind::ValueValidation, e)
            .exit(),
    };
    let outcome = Report::from_env().and_then(|mut report| train::run(&opts, &mut report));
    match outcome {
        Ok(summary) => {
            println!("mlp-train: {}", summary.describe());
            ExitCode::SUCCESS
        }
        Err(e) => {
            let estimated =
                train::memory::estimate(&opts.arch, &opts.optimizer, opts.amp, opts.batch).total;
            let (line, code) = train::failure(&e, estimated);
            eprintln!("{line}");
            ExitCode::from(code)
        }
    }
}
