//! The cross-lesson compare: how readers see the whole chapter at once, and how the project
//! catches regressions. Each variant runs in its own process (this binary re-run in child mode),
//! so a crash, a hang or a sticky CUDA error costs one variant, not the run.

pub mod child;
pub mod cli;
pub mod expectations;
pub mod lessons;
pub mod outcome;
pub mod rule;
