//! The baseline alone: one cublasSgemm call per product.
fn main() -> std::process::ExitCode {
    ch1_gemm::cli::main(&["baseline"])
}
