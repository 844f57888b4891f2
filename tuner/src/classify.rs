//! What a trial ended as: out of memory is an answer (the batch does not fit), anything else
//! that is not a clean exit is a failure to show the user. The exit status alone cannot tell
//! them apart (every stack exits 1 on an uncaught exception), so the output is read for the
//! out-of-memory messages of the common stacks, one table row per message.

use serde::{Deserialize, Serialize};

use common::process::Exit;

/// A trial's outcome.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Status {
    /// Exited with status 0 after every step it was told to run (or reported none at all), or
    /// was stopped once it had shown what was asked.
    Ok,
    /// Exited with status 0 after fewer step lines than it was told to run.
    Incomplete,
    /// Ended with one of the out-of-memory messages below.
    Oom,
    /// Ran past the time limit, or went silent between its steps for longer than the stall
    /// limit allows; its process groups were killed.
    Hang,
    /// Any other ending: a crash, an exception, a bad argument.
    Failed,
    /// Not run (the queue's skip rule, e.g. a smaller batch of the same setting ran out of
    /// memory).
    #[default]
    Skipped,
    /// No result yet where the results were gathered: a cluster's task still queued or
    /// running, or one that ended without leaving its result (its reason says which).
    Unfinished,
}

impl Status {
    /// `OK`, `OOM`, `HANG`: as results files and reports write it.
    pub fn name(self) -> String {
        format!("{self:?}").to_uppercase()
    }
}

/// The stacks' own wordings, most specific first: (stack, needles). A line means the device ran
/// out of memory when every needle of a row is on it (compared without case); the first row
/// that matches names the stack.
/// Host memory is not in the table: "DefaultCPUAllocator: not enough memory", Python's
/// MemoryError, a data-loader worker killed by the kernel, TensorFlow's OOM on a CPU device are
/// failures of the machine, not a batch that is too large for the GPU.
const SIGNATURES: &[(&str, &[&str])] = &[
    // torch.OutOfMemoryError / torch.cuda.OutOfMemoryError (2.x), RuntimeError (1.x):
    // "CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of ..."
    ("PyTorch", &["CUDA out of memory"]),
    ("PyTorch", &["torch.OutOfMemoryError"]),
    ("PyTorch", &["torch.cuda.OutOfMemoryError"]),
    // JAX / XLA: "XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate
    // 7406166528 bytes." (also "Out of memory allocating", "Ran out of memory in memory space")
    ("XLA", &["RESOURCE_EXHAUSTED", "out of memory"]),
    // TensorFlow: "ResourceExhaustedError: OOM when allocating tensor with shape[...] ... on
    // /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc"
    ("TensorFlow", &["OOM when allocating", "GPU"]),
    // "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"
    ("cuBLAS", &["CUBLAS_STATUS_ALLOC_FAILED"]),
    // "RuntimeError: cuDNN error: CUDNN_STATUS_ALLOC_FAILED",
    // "Could not create cudnn handle: CUDNN_STATUS_ALLOC_FAILED"
    ("cuDNN", &["CUDNN_STATUS_ALLOC_FAILED"]),
    // cudaErrorMemoryAllocation, by name or by its string: "RuntimeError: CUDA error: out of
    // memory", "torch.AcceleratorError: CUDA error: out of memory"
    ("CUDA runtime", &["cudaErrorMemoryAllocation"]),
    ("CUDA runtime", &["CUDA error: out of memory"]),
    // The driver API: "CUDA_ERROR_OUT_OF_MEMORY: out of memory"
    ("CUDA driver", &["CUDA_ERROR_OUT_OF_MEMORY"]),
    // CuPy: "cupy.cuda.memory.OutOfMemoryError: Out of memory allocating 1,024 bytes"
    ("CuPy", &["cupy.cuda.memory.OutOfMemoryError"]),
    // Other CUDA libraries and NCCL ("NCCL WARN Cuda failure 'out of memory'"): the runtime's
    // string next to a CUDA or GPU word.
    ("CUDA", &["out of memory", "cuda"]),
    ("CUDA", &["out of memory", "gpu"]),
];

/// An out-of-memory message found in the output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OomMessage {
    /// Which stack's wording matched.
    pub stack: String,
    /// The line it was on.
    pub line: String,
}

/// The stack and line of the last out-of-memory message in `text`, if any.
pub fn find_oom(text: &str) -> Option<OomMessage> {
    text.lines().rev().find_map(|line| {
        let lower = line.to_lowercase();
        SIGNATURES
            .iter()
            .find(|(_, needles)| needles.iter().all(|n| lower.contains(&n.to_lowercase())))
            .map(|(stack, _)| OomMessage {
                stack: stack.to_string(),
                line: line.trim().chars().take(400).collect(),
            })
    })
}

/// The verdict on one ended trial.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Classified {
    pub status: Status,
    pub oom: Option<OomMessage>,
    /// In words: `exit status 0`, `out of memory (PyTorch)`, `ran past the time limit`.
    pub reason: String,
}

/// Exit 0 is OK whatever was printed (a program may catch an out-of-memory and go on), unless
/// it reported some steps but fewer than it was told (INCOMPLETE); a program stopped once it
/// had shown what was asked is OK, unless what stopped it was an out-of-memory message; a
/// non-zero exit with an out-of-memory message is OOM; a timeout or a stall (silent between
/// steps) is HANG, unless the program ran out of memory first and then hung (a collective
/// waiting for a rank that died); the rest is FAILED. Stderr is searched first, then stdout
/// (some programs log tracebacks there).
/// `steps`: how many step lines the trial reported, and how many steps it was told to run.
pub fn classify(exit: Exit, stderr: &str, stdout: &str, steps: (usize, usize)) -> Classified {
    let (reported, told) = steps;
    let plain = |status, reason| Classified {
        status,
        oom: None,
        reason,
    };
    let oom = |m: OomMessage, how: String| Classified {
        status: Status::Oom,
        reason: format!("out of memory ({}), {how}", m.stack),
        oom: Some(m),
    };
    match (exit, find_oom(stderr).or_else(|| find_oom(stdout))) {
        (Exit::Code(0), _) if reported > 0 && reported < told => plain(
            Status::Incomplete,
            format!("exit status 0 after {reported} of the {told} steps it was told to run"),
        ),
        (Exit::Code(0), _) | (Exit::Stopped, None) => plain(Status::Ok, exit.describe()),
        (Exit::Stopped, Some(m)) => oom(m, "stopped at the message".into()),
        (Exit::TimedOut, Some(m)) => oom(m, "then hung until the time limit".into()),
        (Exit::Stalled, Some(m)) => oom(m, "then went silent".into()),
        (Exit::Stalled, None) => plain(Status::Hang, "ended as hung".into()),
        (_, Some(m)) => oom(m, exit.describe()),
        (Exit::TimedOut, None) => plain(Status::Hang, exit.describe()),
        (_, None) => plain(Status::Failed, exit.describe()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every step it was told to run reported.
    const ALL: (usize, usize) = (4, 4);

    /// Real messages of each stack (as the stacks print them), after the stack that must be named
    /// and ` | `.
    const OOM_MESSAGES: &[&str] = &[
        "PyTorch | torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 22.00 MiB. GPU 0 has a total capacity of 23.65 GiB of which 11.06 MiB is free. Including non-PyTorch memory, this process has 23.60 GiB memory in use. Of the allocated memory 22.90 GiB is allocated by PyTorch, and 194.87 MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)",
        "PyTorch | torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.70 GiB. GPU 0 has a total capacty of 6.00 GiB of which 0 bytes is free.",
        "PyTorch | RuntimeError: CUDA out of memory. Tried to allocate 12.50 MiB (GPU 0; 10.92 GiB total capacity; 8.57 MiB already allocated; 9.28 GiB free; 4.68 MiB cached)",
        "XLA | jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 7406166528 bytes.",
        "XLA | RuntimeError: Bad StatusOr access: RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory in memory space vmem.",
        "TensorFlow | tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor with shape[64,256,56,56] and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc",
        "cuBLAS | RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
        "cuDNN | RuntimeError: cuDNN error: CUDNN_STATUS_ALLOC_FAILED",
        "cuDNN | E tensorflow/stream_executor/cuda/cuda_dnn.cc:329] Could not create cudnn handle: CUDNN_STATUS_ALLOC_FAILED",
        "CUDA runtime | RuntimeError: CUDA error: out of memory",
        "CUDA runtime | torch.AcceleratorError: CUDA error: out of memory",
        "CUDA runtime | CUDA error: out of memorySearch for `cudaErrorMemoryAllocation' in https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html for more information.",
        "CUDA driver | E external/org_tensorflow/tensorflow/stream_executor/cuda/cuda_driver.cc:764] failed to alloc 2740606464 bytes unified memory; result: CUDA_ERROR_OUT_OF_MEMORY: out of memory",
        "CuPy | cupy.cuda.memory.OutOfMemoryError: Out of memory allocating 1,073,741,824 bytes (allocated so far: 0 bytes).",
        "CUDA | node1:1234:1250 [0] include/alloc.h:103 NCCL WARN Cuda failure 'out of memory'",
    ];

    fn oom_messages() -> impl Iterator<Item = (&'static str, &'static str)> {
        OOM_MESSAGES
            .iter()
            .map(|m| m.split_once(" | ").expect("STACK | message"))
    }

    /// Failures that mention memory but are not the GPU's.
    const NOT_OOM: &[&str] = &[
        "RuntimeError: [enforce fail at alloc_cpu.cpp:114] data. DefaultCPUAllocator: not enough memory: you tried to allocate 4294967296 bytes.",
        "MemoryError: Unable to allocate 184. MiB for an array with shape (64, 26, 26, 3, 371) and data type float32",
        "RuntimeError: DataLoader worker (pid 4242) is killed by signal: Killed. ",
        "Resource exhausted: OOM when allocating tensor with shape[1,416,416,3] and type float on /job:localhost/replica:0/task:0/device:CPU:0 by allocator cpu",
        "java.lang.OutOfMemoryError: Java heap space",
        "RuntimeError: CUDA error: an illegal memory access was encountered",
        "ValueError: batch size must be positive",
    ];

    fn traceback(last: &str) -> String {
        format!(
            "Traceback (most recent call last):\n  File \"train.py\", line 88, in <module>\n    loss.backward()\n{last}\n"
        )
    }

    #[test]
    fn every_stack_s_message_is_out_of_memory_and_named() {
        for (stack, line) in oom_messages() {
            let c = classify(Exit::Code(1), &traceback(line), "", ALL);
            assert_eq!(c.status, Status::Oom, "{line}");
            let m = c.oom.expect("a message");
            assert_eq!(m.stack, stack, "{line}");
            // The line is kept, cut at 400 characters (PyTorch's runs to about 500).
            assert!(line.starts_with(&m.line) && m.line.chars().count() == line.len().min(400));
            assert!(c.reason.contains(stack) && c.reason.contains("exit status 1"));
        }
    }

    #[test]
    fn host_memory_and_other_errors_are_failures() {
        for line in NOT_OOM {
            let c = classify(Exit::Code(1), &traceback(line), "", ALL);
            assert_eq!(c.status, Status::Failed, "{line}");
            assert!(c.oom.is_none());
        }
        let c = classify(Exit::Signal(9), "", "", ALL);
        assert_eq!(c.status, Status::Failed);
        assert!(c.reason.contains("out-of-memory killer"), "{}", c.reason);
    }

    #[test]
    fn the_exit_status_decides_first() {
        let oom = traceback(oom_messages().next().unwrap().1);
        // A program that caught an out-of-memory and finished is fine.
        assert_eq!(classify(Exit::Code(0), &oom, "", ALL).status, Status::Ok);
        // Killed by a signal after the message: still the message's answer.
        assert_eq!(classify(Exit::Signal(6), &oom, "", ALL).status, Status::Oom);
        // A hang with no message is a hang; after an out-of-memory it is the out-of-memory.
        let hang = classify(Exit::TimedOut, "step 3\n", "", ALL);
        assert_eq!(hang.status, Status::Hang);
        let c = classify(Exit::TimedOut, &oom, "", ALL);
        assert_eq!(c.status, Status::Oom);
        assert!(c.reason.contains("then hung"));
        // Silent between steps: a hang, or the out-of-memory that came before the silence.
        let stalled = classify(Exit::Stalled, "step 3\n", "", (3, 4));
        assert_eq!(stalled.status, Status::Hang);
        assert_eq!(stalled.reason, "ended as hung");
        let c = classify(Exit::Stalled, &oom, "", (3, 4));
        assert_eq!(c.status, Status::Oom);
        assert!(c.reason.contains("then went silent"), "{}", c.reason);
        // A traceback logged to stdout counts too.
        assert_eq!(classify(Exit::Code(1), "", &oom, ALL).status, Status::Oom);
    }

    #[test]
    fn statuses_serialize_as_the_tables_print_them() {
        use Status::*;
        for (s, json) in [
            (Ok, "OK"),
            (Oom, "OOM"),
            (Hang, "HANG"),
            (Failed, "FAILED"),
            (Skipped, "SKIPPED"),
        ] {
            assert_eq!(serde_json::to_string(&s).unwrap(), format!("\"{json}\""));
        }
    }

    #[test]
    fn fewer_steps_than_told_is_incomplete_and_a_stop_at_the_message_is_oom() {
        let some = (1, 4);
        let c = classify(Exit::Code(0), "", "", some);
        assert_eq!(c.status, Status::Incomplete);
        assert!(c.reason.contains("1 of the 4"), "{}", c.reason);
        assert_eq!(classify(Exit::Code(0), "", "", (0, 4)).status, Status::Ok);
        let stopped = classify(Exit::Stopped, "step 3\n", "", some);
        assert_eq!(stopped.status, Status::Ok);
        let oom = traceback("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB");
        let c = classify(Exit::Stopped, &oom, "", some);
        assert_eq!(c.status, Status::Oom);
        assert!(c.reason.contains("stopped at the message"));
    }
}
