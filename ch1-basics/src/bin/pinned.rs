//! The pinned training variant alone: pinned.
fn main() -> std::process::ExitCode {
    ch1_basics::cli::main_training(ch1_basics::training::Variant::Pinned)
}
