//! # Chapter 1: performance basics
//!
//! Three parts, one lesson of the runner ([cli]): the training loop taken from naive to busy
//! one change at a time ([training]), where each change starts to pay ([sweep], `--sweep`),
//! coalescing ([transpose]) and double buffering ([pipeline]). Each part's variants form a
//! group with its own baseline ("training:baseline", "transpose:naive", "pipeline:serial"):
//! one report, one JSON shape, whichever parts `--part` picks. The story and the results are
//! in the crate's README; each module says what its variants change and why.

pub mod cli;
pub mod pipeline;
pub mod sweep;
pub mod training;
pub mod transpose;
