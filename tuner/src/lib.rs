//! # tuner: training tools over any training program
//!
//! Before a long training run, people ask which batch size, how many loader workers and which
//! precision give the most samples per second, where the device memory goes, and which batch
//! really fits. The tuner answers by running the training program itself: every trial is the
//! user's command, a process of its own on one GPU, with that trial's values in placeholders and
//! the environment; the program reports its steps through a small JSON-lines protocol, and the
//! tuner reads that, the exit, the output and NVML. The tuner's own MLP is one such program
//! (`mlp-train` of the `mlp` crate). `docs/tuner.md` is the user's page.
//!
//! Modules in layers, each using only those above it:
//!
//! - [config], [granularity], [line], [named], [program], [protocol], [classify]: settings, the
//!   sizes an answer may take, the peak-memory line, values by name in their order, the command
//!   with its placeholders and the user's axes, the report protocol and its metrics, how a trial
//!   ended
//! - [nvml], [gpu], [launch]: NVML readings, the GPUs trials run on, how a trial's process
//!   starts (spawned, or forked from a Python parent that imported the program's modules once)
//! - [trial], [queue]: one trial watched to its end; trials over the GPUs from one queue
//! - [search], [recommend], [analysis]: the batch finder's logic, the one rule for
//!   "recommended" with the accumulation advice, a sweep's picks and diagnosis
//! - [run], [plot], [writeback]: what a command's trials share (GPUs, folder, progress, the
//!   results file, JSON), the sweep's figure, the answer written back
//! - [sweep], [memory], [autobatch]: the three commands, each one report type and schema;
//!   [profile]: the answer run once under a profiler; [slurm]: a sweep's trials as a Slurm
//!   array job, and its report gathered from their result files
//! - [cli]: the edge

pub mod classify;
pub mod config;
pub mod granularity;
pub mod line;
pub mod named;
pub mod program;
pub mod protocol;

pub mod gpu;
pub mod launch;
pub mod nvml;

pub mod queue;
pub mod trial;

pub mod analysis;
pub mod recommend;
pub mod search;

pub mod plot;
pub mod run;
pub mod writeback;

pub mod autobatch;
pub mod memory;
pub mod profile;
pub mod sweep;

pub mod slurm;

pub mod cli;
