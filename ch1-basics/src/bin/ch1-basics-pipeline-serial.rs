//! The double-buffering baseline alone: one stream, chunk after chunk.
fn main() -> std::process::ExitCode {
    ch1_basics::cli::main(&["pipeline:serial"])
}
