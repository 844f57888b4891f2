//! `cargo run --release -p ch1-graph-shapes`: the three ways side by side.
fn main() -> std::process::ExitCode {
    ch1_graph_shapes::cli::main(&[])
}
