//! The double-buffering baseline alone: one stream, chunk after chunk.
fn main() -> std::process::ExitCode {
    ch1_basics::cli::main_pipeline(ch1_basics::pipeline_lesson::Which::Serial)
}
