//! `cargo run --release -p profiling -- nsys|ncu [options] -- PROGRAM [ARGS]`.
fn main() -> std::process::ExitCode {
    profiling::cli::main()
}
