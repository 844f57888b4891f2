//! `cargo run --release -p ch1-data-parallel`: both sides on every GPU, checked against a
//! one-GPU run of the same global batch; `--allreduce` for the all-reduce's bus bandwidth.

fn main() -> std::process::ExitCode {
    common::cli::main_with(|startup| {
        ch1_data_parallel::cli::run(
            ch1_data_parallel::cli::Args::from_command_line(),
            &[],
            startup,
        )
    })
}
