//! ## The training loop: six variants of one SGD run
//!
//! The workload is a real, small training step with no framework: the MLP
//! `Linear(256, hidden) -> ReLU -> Linear(hidden, 10)`, softmax cross-entropy and plain SGD, from
//! cuBLAS SGEMMs and NVRTC kernels (the `mlp` crate). A run trains S samples (16384) in steps of
//! an effective batch of 256 from the same initial weights; every variant trains the same
//! samples with the same math and is checked against a float64 CPU reference of the run and
//! against the baseline's run ([lesson]).
//!
//! Each variant is its own short loop over the MLP's operations, in its own file; what they
//! share (the dataset, pinned staging, device buffers, cuBLAS with its workspace, graph capture,
//! the copy stream and its events) is the [engine]. Read them as diffs:
//! `diff baseline.rs pinned.rs`, `baseline.rs prealloc.rs`, `baseline.rs batch.rs`,
//! `prealloc.rs graphs.rs`, `graphs.rs optimized.rs`.
//!
//! - **baseline** ([baseline]) does what a first training loop often does: 8 microbatches of 32
//!   per step with gradient accumulation; for every microbatch it allocates its device buffers
//!   with `cuMemAlloc` and frees them with `cuMemFree` (what `cudaMalloc`/`cudaFree` do; the free
//!   waits for the device), copies its input from pageable host memory (the driver stages it
//!   through a bounce buffer, and the host waits), and synchronizes after every operation (as
//!   code that checks each launch, or reads the loss, does). Most of its time the GPU is idle,
//!   waiting for the host.
//! - **pinned** ([pinned]): the data sits in page-locked host memory (pinned once, when it is
//!   loaded, as a data loader with pinned memory does), so each copy is one asynchronous DMA
//!   the host does not wait for, instead of the driver's copy through a bounce buffer that it
//!   does wait for. Expect a small gain: the copies are small (latency-bound) and the other
//!   syncs remain.
//! - **prealloc** ([prealloc]): device buffers allocated once and reused. Removes two driver
//!   calls per buffer and the device-wide wait in each free.
//! - **batch** ([batch]): one batch of 256 per step instead of 8 x 32: 8x fewer launches and
//!   syncs, and GEMMs large enough to use the GPU. Same samples, same steps, same gradient (up
//!   to summation order). Expect the largest single gain.
//! - **graphs** ([graphs]): the whole step (copies in, forward, backward, update) captured once
//!   as a CUDA graph and replayed: one launch and one sync per step instead of ~100 launches and
//!   syncs. A graph needs fixed addresses and a page-locked copy source, so it starts from
//!   prealloc and brings pinned staging with it.
//! - **optimized** ([optimized]): all of the above, and the step no longer waits for the host:
//!   the next batch is copied on a second stream while this one computes, and the host stages
//!   step k+1 while the GPU runs step k. Expect well over 20x the baseline at the default size,
//!   with the GPU busy computing most of the time (goodput).
//!
//! At `--hidden 4096` the step's GEMMs are 16x larger, so compute takes a larger share of
//! every variant's time and the speedups shrink: overhead only matters next to small work.

pub mod baseline;
pub mod batch;
mod config;
pub mod engine;
pub mod graphs;
pub mod host;
pub mod lesson;
pub mod optimized;
pub mod pinned;
pub mod prealloc;
mod variant;

pub use config::TrainConfig;
pub use engine::{Engine, RunOutput};
pub use lesson::{TrainingLesson, LOSS_CURVE_TOLERANCE, WEIGHT_CHANGE_TOLERANCE};
pub use variant::Variant;

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> TrainConfig {
        TrainConfig::chapter()
    }

    #[test]
    fn sizes_that_do_not_divide_say_what_to_change() {
        assert!(cfg().validate().is_ok());
        let e = TrainConfig {
            samples: 1000,
            ..cfg()
        }
        .validate()
        .unwrap_err();
        assert!(e.contains("does not divide the samples"), "{e}");
        let e = TrainConfig {
            microbatch: 48,
            ..cfg()
        }
        .validate()
        .unwrap_err();
        assert!(e.contains("does not divide the batch"), "{e}");
        let e = TrainConfig { lr: -1.0, ..cfg() }.validate().unwrap_err();
        assert!(e.contains("--lr must be a positive number"), "{e}");
        let e = TrainConfig {
            lr: f32::NAN,
            ..cfg()
        }
        .validate()
        .unwrap_err();
        assert!(e.contains("--lr"), "{e}");
        let e = TrainConfig { hidden: 0, ..cfg() }.validate().unwrap_err();
        assert!(e.contains("hidden must be at least 1"), "{e}");
        let e = TrainConfig {
            microbatch: 0,
            ..cfg()
        }
        .validate()
        .unwrap_err();
        assert!(e.contains("at least 1"), "{e}");
    }

    #[test]
    fn the_default_learning_rate_shrinks_with_width() {
        assert_eq!(TrainConfig::default_lr(256), 0.05);
        assert_eq!(TrainConfig::default_lr(100), 0.05);
        assert_eq!(TrainConfig::default_lr(4096), 0.003125);
    }

    #[test]
    fn passes_and_samples() {
        let c = cfg();
        assert_eq!(c.steps(), 64);
        assert_eq!(c.samples_of(2, 32, 32), 544..576);
        assert_eq!(Variant::Baseline.pass_batch(&c), 32);
        assert_eq!(Variant::Optimized.pass_batch(&c), 256);
        let names: Vec<_> = Variant::ALL.iter().map(|v| v.name()).collect();
        assert_eq!(
            names,
            [
                "baseline",
                "pinned",
                "prealloc",
                "batch",
                "graphs",
                "optimized"
            ]
        );
    }
}
