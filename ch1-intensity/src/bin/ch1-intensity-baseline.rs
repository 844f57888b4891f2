//! The baseline alone: three one-op kernels, one element per thread.
fn main() -> std::process::ExitCode {
    ch1_intensity::cli::main(&["baseline"])
}
