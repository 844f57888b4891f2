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
