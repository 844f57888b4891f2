//! ## The training loop: six variants of one SGD run
//!
//! Every variant trains the same samples with the same math from the same weights, checked
//! against a float64 CPU reference and the baseline's run ([lesson]). Each is its own short loop
//! in its own file, to be read as a diff from the one before (`diff baseline.rs pinned.rs`, ...,
//! `graphs.rs optimized.rs`; the README has the story); what they share is the [engine].

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
    fn sizes_that_do_not_divide_say_what_to_change_and_the_rate_shrinks_with_width() {
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
        assert_eq!(TrainConfig::default_lr(256), 0.05);
        assert_eq!(TrainConfig::default_lr(100), 0.05);
        assert_eq!(TrainConfig::default_lr(4096), 0.003125);
        let c = TrainConfig::chapter();
        assert_eq!(c.steps(), 64);
        assert_eq!(c.samples_of(2, 32, 32), 544..576);
        assert_eq!(Variant::Baseline.pass_batch(&c), 32);
        assert_eq!(Variant::Optimized.pass_batch(&c), 256);
        let names = Variant::ALL.map(|v| v.name()).join(" ");
        assert_eq!(names, "baseline pinned prealloc batch graphs optimized");
    }
}
