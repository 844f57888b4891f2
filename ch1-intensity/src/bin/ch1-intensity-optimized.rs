//! The optimized version alone: one fused, vectorized kernel.
fn main() -> std::process::ExitCode {
    ch1_intensity::cli::main(&["fused"])
}
