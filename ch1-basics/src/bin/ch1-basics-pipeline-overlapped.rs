fn main() -> std::process::ExitCode {
    ch1_basics::cli::main(&["pipeline:overlapped"])
}
