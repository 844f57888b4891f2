//! The transpose optimized alone: through padded shared-memory tiles.
fn main() -> std::process::ExitCode {
    ch1_basics::cli::main_transpose(ch1_basics::transpose::TransposeVariant::OPTIMIZED)
}
