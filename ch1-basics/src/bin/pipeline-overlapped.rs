//! The double-buffering optimized alone: three streams, buffers in flight.
fn main() -> std::process::ExitCode {
    ch1_basics::cli::main_pipeline(ch1_basics::pipeline_lesson::Which::Overlapped)
}
