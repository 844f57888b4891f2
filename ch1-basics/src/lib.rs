//! # Chapter 1: performance basics
//!
//! Three parts, one lesson of the runner ([cli]), each part's variants a group with its own
//! baseline: the training loop ([training]) and where each of its changes starts to pay
//! ([sweep]), coalescing ([transpose]), double buffering ([pipeline]). The story and the
//! results are in the crate's README.

pub mod cli;
pub mod pipeline;
pub mod sweep;
pub mod training;
pub mod transpose;
