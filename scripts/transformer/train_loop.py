"""The training loop of the transformer programs beside this file (train_vit.py, train_lm.py),
and the tuner's report protocol written out by hand (plain `json`, no helper), as a user's own
program would speak it. Each program brings its model, its data and its loss; the rest is here
once: the flags, the memory share, the loader, the loop and what it reports.

Each step: one batch from a DataLoader, forward and loss under autocast, backward, AdamW step,
synchronize. Reported per step: samples, step time (host clock between synchronized step ends),
forward/backward/optimizer times (CUDA events), the peak memory PyTorch reserved so far and the
most the step's tensors held (allocated; PyTorch's peak counters are reset after each step).
After the first step, once AdamW has made its two moments, one model line: the bytes of the
parameters, of their gradients (each parameter that takes one, at its dtype: the gradients are
set to None after every step) and of the optimizer's state on the GPU. An out-of-memory error
is not caught: it ends the program with PyTorch's own message on stderr and a non-zero exit.

`--device cpu` runs the same loop without a GPU (host clocks, no memory figures, no report
lines), to check a program on a machine that has none.
"""

import argparse
import json
import os
import sys
import time


def positive(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1, got %s" % text)
    return value


def add_training_args(p, batch_size):
    """The flags every program here takes (the tuner passes the first five)."""
    p.add_argument("--batch-size", type=positive, default=batch_size)
    p.add_argument("--workers", type=int, default=2)
    # on: bf16 where the GPU has it, else fp16 (with a gradient scaler); the tuner passes it
    # resolved.
    p.add_argument("--amp", choices=["off", "bf16", "fp16", "on"], default="on")
    p.add_argument("--steps", type=positive, default=20)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--memory-limit", type=float, metavar="GIB",
                   help="use at most this much of the GPU's memory (a share of a shared GPU)")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                   help="cpu: check the program where there is no GPU (nothing reported)")


class Report:
    """The protocol's lines, appended to $PERF_LESSONS_REPORT (nothing outside the tuner)."""

    def __init__(self):
        path = os.environ.get("PERF_LESSONS_REPORT")
        self.file = open(path, "a", encoding="utf-8") if path else None

    def line(self, **fields):
        if self.file:
            self.file.write(json.dumps(fields) + "\n")
            self.file.flush()


def loader(dataset, batch_size, workers, pin_memory=True):
    from torch.utils.data import DataLoader

    return DataLoader(dataset, batch_size=batch_size, num_workers=workers, pin_memory=pin_memory,
                      drop_last=True, persistent_workers=workers > 0)


def model_bytes(torch, net, optimizer):
    """The model line's three counts: parameters, their gradients, the optimizer's state on
    the GPU (AdamW's step counts are host scalars)."""
    def size(t):
        return t.numel() * t.element_size()

    parameters = list(net.parameters())
    state = [t for s in optimizer.state.values() for t in s.values()
             if torch.is_tensor(t) and t.is_cuda]
    return {
        "parameter_bytes": sum(size(p) for p in parameters),
        "gradient_bytes": sum(size(p) for p in parameters if p.requires_grad),
        "optimizer_state_bytes": sum(size(t) for t in state),
    }


def limit_memory(torch, limit_gib):
    free, total = torch.cuda.mem_get_info()
    if limit_gib is None:
        return free, total
    limit = int(limit_gib * 2**30)
    torch.cuda.set_per_process_memory_fraction(min(1.0, limit / total))
    return min(free, limit), total


def precision_of(torch, amp, device):
    """`--amp` resolved on this device: its name and the autocast dtype (None for fp32)."""
    precision = amp
    if precision == "on":
        precision = "bf16" if device == "cpu" or torch.cuda.is_bf16_supported() else "fp16"
    return precision, {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)


class HostEvent:
    """A CUDA event's three calls on the host clock, for `--device cpu`."""

    def __init__(self):
        self.at = time.perf_counter()

    def elapsed_time(self, later):
        return (later.at - self.at) * 1e3

    def synchronize(self):
        pass


def data_parallel_rank(torch, program, args):
    """For a program that trains with DDP under its framework (torchrun, or the tuner's
    `--ranks`): GPU LOCAL_RANK made this process's, its share set; `--amp` resolved on it."""
    if args.device != "cuda":
        sys.exit("%s: trains on CUDA GPUs only (--device cpu is for the programs that run this "
                 "file's loop)" % program)
    if not torch.cuda.is_available():
        sys.exit("%s: PyTorch sees no CUDA GPU (check CUDA_VISIBLE_DEVICES)" % program)
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    limit_memory(torch, args.memory_limit)
    return precision_of(torch, args.amp, "cuda")[0]


def fork_here():
    """perf_lessons.fork_here(), written out: under the tuner, whose fork server ran the program
    up to here once, each trial is forked from this point (what was built above it, built once),
    with its own arguments and environment; anywhere else nothing. Whether this process is a
    trial forked here."""
    server = sys.modules.get("_perf_lessons_fork_server")
    if server is None:
        return False
    server.serve()
    return True


def setup(program, args):
    """After the model is built on the CPU: torch imported and seeded, the GPU's share set and
    the device line reported. Returns (torch, report)."""
    import torch

    report = Report()
    if args.device == "cuda":
        if not torch.cuda.is_available():
            sys.exit("%s: PyTorch sees no CUDA GPU (--device cpu checks the program without one)"
                     % program)
        free, total = limit_memory(torch, args.memory_limit)
        report.line(kind="device", name=torch.cuda.get_device_name(), total_bytes=total,
                    free_bytes=free)
    else:
        report.file = None
    torch.manual_seed(0)
    return torch, report


def train(args, torch, report, net, dataset, loss_of, name, started):
    """`args.warmup + args.steps` steps of `net` under AdamW on batches of `dataset`, the loss
    of a batch (its tensors on the device) being `loss_of(net, batch)`. Reports each step and
    the end, prints one line, returns 0."""
    device = args.device
    net = net.to(device).train()
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-4)
    precision, dtype = precision_of(torch, args.amp, device)
    scaler = torch.amp.GradScaler(device, enabled=precision == "fp16")
    steps = args.warmup + args.steps
    batches = iter(loader(dataset(args.batch_size * steps), args.batch_size, args.workers,
                          pin_memory=device == "cuda"))

    def event():
        if device == "cpu":
            return HostEvent()
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        return e

    reserved = 0

    def peaks():
        """The most reserved so far and the step's own allocated peak: the counters start again."""
        nonlocal reserved
        if device != "cuda":
            return 0, 0
        reserved = max(reserved, torch.cuda.max_memory_reserved())
        allocated = torch.cuda.max_memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        return reserved, allocated

    def to_device(batch):
        if isinstance(batch, (list, tuple)):
            return [t.to(device, non_blocking=True) for t in batch]
        return batch.to(device, non_blocking=True)

    if device == "cuda":
        torch.cuda.synchronize()
    last = time.perf_counter()
    measured_from = last
    for step in range(steps):
        batch = to_device(next(batches))
        e0 = event()
        with torch.autocast(device, dtype=dtype, enabled=dtype is not None):
            loss = loss_of(net, batch)
        e1 = event()
        scaler.scale(loss).backward()
        e2 = event()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        e3 = event()
        e3.synchronize()
        now = time.perf_counter()
        peak, allocated = peaks()
        report.line(samples=args.batch_size, step_s=now - last,
                    forward_s=e0.elapsed_time(e1) / 1e3, backward_s=e1.elapsed_time(e2) / 1e3,
                    optimizer_s=e2.elapsed_time(e3) / 1e3, peak_memory_bytes=peak,
                    peak_allocated_bytes=allocated)
        last = now
        if step == 0:
            report.line(kind="model", **model_bytes(torch, net, optimizer))
        if step + 1 == args.warmup:
            measured_from = now
    rate = args.batch_size * args.steps / (last - measured_from)
    report.line(kind="end", samples_per_s=rate, peak_memory_bytes=reserved)
    print("%s batch %d amp %s on %s: %.1f samples/s, peak %.2f GB reserved, loss %.3f, "
          "%.1f s from the start" % (name, args.batch_size, precision, device, rate, reserved / 1e9,
                                     loss.item(), time.perf_counter() - started))
    return 0
