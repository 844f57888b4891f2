//! # ch1-data-parallel: gradients reduced while backward runs
//!
//! Data-parallel training splits each step's global batch over N GPUs (one thread and one NCCL
//! communicator per GPU); every rank runs forward and backward on its shard, and the ranks'
//! gradients are summed by an all-reduce before the same update runs everywhere.
//!
//! - baseline: backward, then ONE all-reduce of the whole gradient buffer, then the host waits
//!   for it before queuing the update. The GPUs compute, then talk, then idle while the host
//!   catches up: nothing overlaps.
//! - optimized: the gradient buffer is cut into buckets ([plan]) in backward order; as soon as
//!   backward has produced a bucket, a second stream waits on an event and all-reduces it while
//!   backward goes on with the layers below. The update waits on that stream through an event,
//!   not on the host. Communication hides behind the rest of backward.
//!
//! Both compute the same function: the loss is the mean over the global batch, so the sum of
//! the ranks' gradients is the one-GPU gradient of that batch, and both sides are checked
//! against a one-GPU run of it ([train]). `--allreduce` measures NCCL's all-reduce bus
//! bandwidth over message sizes ([allreduce], [busbw]). NCCL is found at run time
//! ([nccl_lib]) and driven through cudarc's NCCL bindings ([nccl]).

pub mod allreduce;
pub mod busbw;
pub mod checks;
pub mod cli;
pub mod nccl;
pub mod nccl_lib;
pub mod plan;
pub mod replica;
pub mod scaling;
pub mod train;
