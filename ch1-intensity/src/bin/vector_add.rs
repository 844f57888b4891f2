//! c = a + b through the harness, to compare its timing with independent timers.
use clap::Parser;

fn main() -> std::process::ExitCode {
    common::cli::main_with(|startup| {
        ch1_intensity::cli::run_vector_add(&ch1_intensity::cli::Args::parse(), startup)
    })
}
