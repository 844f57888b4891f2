//! `cargo run --release -p ch1-basics`: every part of the lesson (`--part` picks one).
fn main() -> std::process::ExitCode {
    ch1_basics::cli::main(&[])
}
