//! The baseline alone: a graph captured for every new shape.
fn main() -> std::process::ExitCode {
    ch1_graph_shapes::cli::main(&["per-shape"])
}
