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
//! Modules in layers, each using only those below it, no chain of imports more than six
//! modules deep (`tests/imports.rs`), the binary at the top:
//!
//! - the commands: [sweep], [memory], [autobatch] and [profile] plan trials and make their
//!   reports from the results; [cli] is the edge, where flags become one settings value
//! - where trials run, behind one shape of result ([run::Ran], [trial::TrialResult]): [run],
//!   this host's GPUs from one queue (a trial on one GPU, or a group of ranks on several), and
//!   [slurm], a sweep's trials as a Slurm array job, its results gathered from their files;
//!   beside them the rules over results: [analysis], [recommend], [search], [plot], [writeback]
//! - [trial]: one trial watched to its end, and the rule that skips a batch above one that ran
//!   out of memory
//! - [gpu], [launch], [protocol], [classify], [config]: the GPUs, how a trial's process starts
//!   (spawned, or forked from a Python parent that imported the program's modules once), the
//!   report protocol and its metrics, how a trial ended, the settings
//! - [program], [nvml], [granularity], [line], [margin], [text]: the command with its
//!   placeholders and the user's axes, NVML readings, the sizes an answer may take, the
//!   peak-memory line, the margin an answer leaves, a file's text and the line of a place in it

pub mod classify;
pub mod config;
pub mod granularity;
pub mod line;
pub mod margin;
pub mod program;
pub mod protocol;
pub mod text;

pub mod gpu;
pub mod launch;
pub mod nvml;

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
