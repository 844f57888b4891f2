//! The prealloc training variant alone: prealloc.
fn main() -> std::process::ExitCode {
    ch1_basics::cli::main_training(ch1_basics::training::Variant::Prealloc)
}
