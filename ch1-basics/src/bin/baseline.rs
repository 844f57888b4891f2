//! The baseline training variant alone: baseline.
fn main() -> std::process::ExitCode {
    ch1_basics::cli::main_training(ch1_basics::training::Variant::Baseline)
}
