//! The double-buffering optimized side alone: three streams, buffers in flight.
fn main() -> std::process::ExitCode {
    ch1_basics::cli::main(&["pipeline:overlapped"])
}
