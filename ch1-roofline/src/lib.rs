//! # Chapter 1: the roofline
//!
//! Every operation has an arithmetic intensity, FLOPs per byte of DRAM traffic. Below the
//! ridge point (peak FLOP/s over bandwidth) its speed is bandwidth x intensity at best: it is
//! memory-bound, and only moving fewer bytes helps. Above it, the compute ceiling binds. This
//! lesson measures the ceilings of the GPU in hand (never a datasheet's), places real
//! operations against them, and draws the picture:
//!
//! - vector add and multiply (1 FLOP per 12 bytes) and SAXPY (2 per 12): far left, on the slope;
//! - one fused expression, a degree-D polynomial by Horner's rule (2D FLOPs per 8 bytes),
//!   walked from D = 1 to 1024 so that the same kernel crosses the ridge;
//! - cuBLAS SGEMM from 256 to 8192 and bf16 GEMM from 1024 to 8192: small ones sit left and
//!   low, large ones run into their ceilings;
//! - the five ch1-intensity variants, read from their result file.
//!
//! The operations are the variants of one lesson ([lesson::Roofline]) that the harness's runner
//! checks against float64 references and times with L2 flushed (cold); the ceilings, roofs and
//! placed points are the report's sections. A point above its roof beyond the noise is a
//! counting error and fails the run.

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
