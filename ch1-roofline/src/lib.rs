//! # Chapter 1: the roofline
//!
//! The ceilings of the GPU in hand, measured, and real operations placed against them: the
//! operations are the variants of one lesson ([lesson::Roofline]) that the harness's runner checks
//! against float64 references and times with L2 flushed (cold); the ceilings, roofs and placed
//! points are the report's sections. The lesson's page is `ch1-roofline/README.md`.

pub mod cli;
pub mod lesson;
pub mod model;
pub mod ops;
pub mod plot;
pub mod report;

use common::ceilings::DeviceCeilings;

use report::{ComputeRoof, Roofs};

/// The roofs to draw from the measured ceilings: the best DRAM bandwidth as the slope, and the
/// FP32 FMA, TF32 and BF16 tensor ceilings.
pub fn roofs_from(c: &DeviceCeilings) -> Option<Roofs> {
    let (mem_name, mem) = c.memory_roof()?;
    let bw = mem.value;
    let mut compute = Vec::new();
    for (key, name, ceiling) in [
        ("fp32", "FP32 FMA, CUDA cores", &c.fp32_fma),
        ("tf32", "TF32 tensor cores (cuBLAS)", &c.gemm_tf32),
        ("bf16", "BF16 tensor cores (cuBLAS)", &c.gemm_bf16),
    ] {
        if let Some(ceiling) = ceiling {
            compute.push(ComputeRoof {
                key: key.into(),
                name: name.into(),
                gflops: ceiling.value,
                ridge_flop_per_byte: model::ridge(ceiling.value, bw),
            });
        }
    }
    Some(Roofs {
        memory_name: format!("DRAM {mem_name} bandwidth"),
        memory_gbps: bw,
        compute,
    })
}
