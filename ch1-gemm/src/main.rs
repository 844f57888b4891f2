//! `cargo run --release -p ch1-gemm`: the three variants side by side (`--sweep` for the grid).
fn main() -> std::process::ExitCode {
    ch1_gemm::cli::main(&[])
}
