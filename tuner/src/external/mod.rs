//! # External mode: tuning the user's own training program
//!
//! The tuner's own MLP says nothing about a ResNet with its own data loader. In external mode
//! each trial runs the user's command as a fresh process on one GPU and learns what happened
//! from three things only: its exit status, its output, and a small report file.
//!
//! ## A trial ([trial()])
//!
//! The command's arguments may hold placeholders, replaced by the trial's values; the same
//! values are always in the environment too, so a program may read either:
//!
//! | placeholder | environment variable | value |
//! |---|---|---|
//! | `{batch_size}` | `PERF_LESSONS_BATCH_SIZE` | samples per micro-batch |
//! | `{workers}` | `PERF_LESSONS_WORKERS` | data-loader worker processes |
//! | `{amp}` | `PERF_LESSONS_AMP` | `on` (bf16 autocast) or `off` |
//! | `{accumulation}` | `PERF_LESSONS_ACCUMULATION` | micro-batches per optimizer step |
//! | `{steps}` | `PERF_LESSONS_STEPS` | measured optimizer steps |
//! | `{warmup}` | `PERF_LESSONS_WARMUP_STEPS` | optimizer steps run before measuring |
//!
//! Besides: `PERF_LESSONS_REPORT` (the report file, below), `PERF_LESSONS_TRIAL` (the trial's
//! number), `CUDA_VISIBLE_DEVICES` (the trial's one GPU), `CUDA_DEVICE_ORDER=PCI_BUS_ID` where
//! the GPU is named by ordinal and the user set no order (so the ordinal means the same GPU to
//! CUDA and to NVML), `NCCL_NVLS_ENABLE=0` (NVLink multicast can take a shared host's GPUs out
//! of service) and `PYTHONUNBUFFERED=1` (so a hung or killed program's last words are in its
//! log). The child runs in a process group of its own with stdin closed, stdout and stderr
//! going to files in the trial's folder; after the time limit the whole group (data-loader
//! workers included) is killed and the trial is a HANG. Whatever the program leaves running
//! when it exits is killed too, so the next trial finds the GPU free.
//!
//! ## The report protocol ([protocol])
//!
//! The program appends one JSON object per line to the file named by `PERF_LESSONS_REPORT`
//! (not stdout, so its own output stays as it is), one line per optimizer step, warmup steps
//! included; the tuner drops the first `{warmup}` of them:
//!
//! ```text
//! {"kind": "device", "name": "NVIDIA H100 80GB HBM3", "total_bytes": 85017755648, "free_bytes": 84340310016}
//! {"samples": 256, "step_s": 0.0412}
//! {"samples": 256, "step_s": 0.0409, "data_s": 0.0011, "forward_s": 0.0120, "backward_s": 0.0240, "optimizer_s": 0.0030, "peak_memory_bytes": 9876543210}
//! {"samples": 256, "start_s": 12.000, "end_s": 12.041}
//! {"kind": "end", "samples_per_s": 6231.5}
//! ```
//!
//! `samples` is what the step consumed (batch x accumulation); the step's time is `step_s` or
//! `end_s - start_s` (any clock, in seconds). The phase times and the framework's peak memory
//! are optional, and so is the `"kind": "device"` line (the GPU's name, its memory and what was
//! free once the framework held it, before the model was built): with it and the peaks, the
//! batch finder fits memory to the batch and aims at the limit ([crate::search]). A last line of `"kind": "end"` may carry the program's own throughput, shown
//! beside the tuner's. Unknown fields and kinds are ignored; a line that is not valid (a
//! truncated last line of a killed program, stray text) is counted and reported, never fatal.
//! `examples/pytorch/perf_lessons_report.py` is a one-file helper that writes this protocol.
//!
//! A program that reports nothing is still measured: samples/s from the wall time of the
//! whole process over the steps it was told to run (start-up included, and said so), and GPU
//! memory from NVML.
//!
//! ## What a trial ended as ([classify()])
//!
//! OK (exit 0), OOM (non-zero exit with an out-of-memory message of one of the common stacks:
//! PyTorch, XLA, TensorFlow, cuBLAS, cuDNN, the CUDA runtime or driver), HANG (killed at the
//! time limit) or FAILED (anything else, with the last lines of stderr).
//!
//! ## Memory ([memory])
//!
//! Sampled on a thread while the trial runs: NVML's per-process accounting, summed over the
//! processes of the trial's group; where that is missing (inside some virtual machines, or
//! when NVML reports process ids of another namespace) the device's memory in use above what it
//! was before the trial (exact enough with one trial per GPU at a time). The result says which.
//! The framework's own peak (from the report) is kept beside it.
//!
//! ## Several GPUs ([queue]) and the batch finder ([oracle])
//!
//! Trials come from one queue, one at a time per GPU, as many at once as there are devices;
//! each result is appended to a JSON-lines file as it comes, so an interrupted run loses
//! nothing. The autobatch oracle answers "does batch B fit?" with a trial (stopped as soon as
//! it has reported every step it was told to run: the answer is known then), with the trial's
//! peak and limit in one set of terms ([TrialResult::memory_terms]), and plugs into
//! [crate::search::find]. The subcommands on a program are [crate::program].

pub mod classify;
pub mod command;
pub mod device;
pub mod memory;
pub mod oracle;
pub mod process;
pub mod protocol;
pub mod queue;
pub mod trial;

pub use classify::{classify, Classified, Status};
pub use command::{Params, Placeholder, Program};
pub use device::{select_devices, visible_devices, Device};
pub use memory::{MemoryReading, MemorySource};
pub use oracle::{find_batch, fits, BatchSearch, Bounds, Stopped};
pub use protocol::{Measured, ReportFile, ThroughputSource};
pub use queue::{larger_batch_after_oom, run_queue, Progress, ResultsFile};
pub use trial::{trial, Limits, TrialResult};
