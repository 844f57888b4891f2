//! `cargo run --release -p ch1-intensity`: all five variants side by side.
fn main() -> std::process::ExitCode {
    ch1_intensity::cli::main(&[])
}
