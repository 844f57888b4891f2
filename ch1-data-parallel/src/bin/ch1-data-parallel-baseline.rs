//! One side of the pair: `cargo run --release -p ch1-data-parallel --bin ch1-data-parallel-baseline`.

fn main() -> std::process::ExitCode {
    common::cli::main_with(|startup| {
        ch1_data_parallel::cli::run(
            ch1_data_parallel::cli::Args::from_command_line(),
            &["baseline"],
            startup,
        )
    })
}
