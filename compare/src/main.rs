//! `cargo run --release -p compare`: the whole chapter, pair by pair.
fn main() -> std::process::ExitCode {
    compare::cli::main()
}
