//! The batch training variant alone: batch.
fn main() -> std::process::ExitCode {
    ch1_basics::cli::main_training(ch1_basics::training::Variant::Batch)
}
