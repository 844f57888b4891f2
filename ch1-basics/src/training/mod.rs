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
//! - [baseline]: what a first training loop often does (8 x 32 accumulated, `cuMemAlloc` per
//!   microbatch, pageable copies, a wait after every operation): the GPU mostly waits;
//! - [pinned], [prealloc], [batch]: the baseline with one change each (page-locked data, buffers
//!   allocated once, one batch of 256 per step); [graphs]: prealloc with each step one CUDA
//!   graph; [optimized]: all of them, and no wait per step (well over 20x the baseline).
//!
//! Each file's header says what its change removes and what to expect.
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

    #[test]
    fn sizes_that_do_not_divide_say_what_to_change() {
        // The chapter's training with one setting changed.
        let with = |change: fn(&mut TrainConfig)| {
            let mut c = TrainConfig::chapter();
            change(&mut c);
            c
        };
        assert!(with(|_| ()).validate().is_ok());
        for (bad, expect) in [
            (with(|c| c.samples = 1000), "does not divide the samples"),
            (with(|c| c.microbatch = 48), "does not divide the batch"),
            (with(|c| c.lr = -1.0), "--lr must be a positive number"),
            (with(|c| c.lr = f32::NAN), "--lr"),
            (with(|c| c.hidden = 0), "hidden must be at least 1"),
            (with(|c| c.microbatch = 0), "at least 1"),
        ] {
            let e = bad.validate().unwrap_err();
            assert!(e.contains(expect), "{bad:?}: {e}");
        }
    }

    #[test]
    fn the_default_learning_rate_shrinks_with_width() {
        assert_eq!(TrainConfig::default_lr(256), 0.05);
        assert_eq!(TrainConfig::default_lr(100), 0.05);
        assert_eq!(TrainConfig::default_lr(4096), 0.003125);
    }

    #[test]
    fn passes_and_samples() {
        let c = TrainConfig::chapter();
        assert_eq!(c.steps(), 64);
        assert_eq!(c.samples_of(2, 32, 32), 544..576);
        assert_eq!(Variant::Baseline.pass_batch(&c), 32);
        assert_eq!(Variant::Optimized.pass_batch(&c), 256);
        let names = Variant::ALL.map(|v| v.name());
        let expect = [
            "baseline",
            "pinned",
            "prealloc",
            "batch",
            "graphs",
            "optimized",
        ];
        assert_eq!(names, expect);
    }
}
