//! # mlp: the model ch1-basics trains, and mlp-train
//!
//! A real, small training step with no framework: an MLP of `depth` hidden layers
//! (`Linear -> ReLU`) and an output `Linear`, softmax cross-entropy, and an optimizer (plain or
//! momentum SGD, AdamW), built from cuBLAS GEMMs and NVRTC kernels. ch1-basics trains the depth-1
//! MLP `Linear(256, hidden) -> ReLU -> Linear(hidden, 10)` six ways; `mlp-train` trains deeper
//! ones as a program the tuner runs. Both use the pieces here, so there is one step to get right:
//!
//! - [arch]: layer widths, depth and the flat parameter layout `[W0 | b0 | W1 | b1 | ...]`,
//!   every matrix row-major `[out][in]`;
//! - [data]: seeded initial parameters and a synthetic dataset with something to learn;
//! - [buffers]: device buffers from either allocator (`cuMemAlloc` for the naive loop);
//! - [optimizer]: the optimizers and their settings;
//! - [device]: the model, a batch's activations, its input and the loss slots on the device;
//! - [exec]: queue the operations back to back, or wait after each (the naive loop);
//! - [step]: forward and loss, backward (with gradient accumulation), update: fp32 (plain SGEMM
//!   math, no TF32) or bf16 mixed precision with fp32 master weights;
//! - [reference]: the float64 reference of one step at any depth and of a whole SGD run;
//! - [train]: `mlp-train`, the training program: flags, loader, loop, report lines.

pub mod arch;
pub mod buffers;
pub mod data;
pub mod device;
pub mod exec;
pub mod optimizer;
pub mod reference;
pub mod step;
pub mod train;

pub use arch::{Arch, Layer, CLASSES, INPUT};
pub use buffers::{Allocator, DeviceBuf};
pub use data::{initial_params, Init, Samples};
pub use device::{
    bias_chunks, bias_scratch_len, gradient_buffers, Activations, Input, LossSlot, Losses, Model,
};
pub use exec::Exec;
pub use optimizer::Optimizer;
pub use step::{Blas, Mlp, BLAS_WORKSPACE_BYTES};
