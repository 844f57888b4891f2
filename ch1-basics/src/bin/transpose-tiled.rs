//! The transpose optimized side alone: the padded shared-memory tiled kernels, every tile shape.
fn main() -> std::process::ExitCode {
    ch1_basics::cli::main_transpose(&ch1_basics::transpose::TransposeVariant::TILED)
}
