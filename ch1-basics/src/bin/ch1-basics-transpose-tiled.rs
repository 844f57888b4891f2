//! The transpose optimized side alone: the padded shared-memory tiled kernels, every tile shape.
use ch1_basics::transpose::TransposeVariant;

fn main() -> std::process::ExitCode {
    let ids: Vec<String> = TransposeVariant::TILED
        .iter()
        .map(|v| format!("transpose:{}", v.name()))
        .collect();
    ch1_basics::cli::main(&ids.iter().map(String::as_str).collect::<Vec<_>>())
}
