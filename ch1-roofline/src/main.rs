//! `cargo run --release -p ch1-roofline`: ceilings, points, table and plot.
fn main() -> std::process::ExitCode {
    ch1_roofline::cli::main()
}
