//! The optimized version alone: one graph per padded size bucket.
fn main() -> std::process::ExitCode {
    ch1_graph_shapes::cli::main(&["bucketed"])
}
