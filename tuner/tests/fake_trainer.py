"""A stand-in training program for the tuner's tests (no GPU, no PyTorch).

It takes the flags a real script would (--batch-size, --workers, --amp off|bf16|fp16 (what the
tuner resolves `on` to), --accumulation,
--steps, --warmup, and --lr or PERF_LESSONS_LR, a sweep's axis), reports every step through
the repository's perf_lessons package, and misbehaves on request through its environment.

Given a learning rate it reports a loss on every step and, at the end, a final one of
(log10(lr) + 2)^2 + 8 / batch: lowest at lr 0.01 and the largest batch; NaN (diverged) from
lr 1 up. Beside it `accuracy`, 1 / (1 + loss).

  FAKE_NO_LOSS_BATCH=B   the batch B reports no metrics

  FAKE_OOM_ABOVE=N   batches above N run out of memory: PyTorch's message, exit 1; N0,N1,...
                     gives each rank of a group its own limit
  FAKE_MODE=ok       (default) run the steps and exit 0
            hang     start a child process, write both pids to FAKE_PID_FILE, sleep forever
            fail     raise an ordinary exception (exit 1, a traceback on stderr)
            crash_at_exit  report every step, then abort (SIGABRT)
            hang_after_steps  report every step, then go on forever (a script that
                     ignores --steps)
            silent   run the steps without reporting anything
            garbage  report, with stray text and a cut-off last line in the report
            short    report the first step only, then exit 0
            oom_then_linger  print PyTorch's out-of-memory message, then take 600 s to exit
            stall    start a child process (a data-loader worker, its pid in FAKE_PIDS), report
                     FAKE_STALL_AFTER steps (default 3), then sleep forever, saying nothing (a
                     data-parallel group stuck in a collective)
  FAKE_STALL_ABOVE=B   batches above B run as FAKE_MODE=stall (a size at which the group gets
                     stuck: its first steps run, then it waits forever)
  FAKE_START_S=S     sleep S seconds before the first step (a start-up: imports, compiling)
  FAKE_EVAL_AFTER=N,S   after step N, spend S seconds redrawing a progress bar on stderr with
                     carriage returns and no newline (an evaluation between steps)
  FAKE_RANK_MODE=R:MODE   in a group of ranks (RANK, as the tuner and torchrun set it), rank R
                     runs as FAKE_MODE=MODE and every other rank as FAKE_OTHERS (default ok);
                     besides the modes above: oom (runs out of memory at once, exit 1) and
                     wait (reports its first step, then waits for a collective forever, as a
                     rank of a data-parallel program does when another rank is gone)
  FAKE_PIDS=FILE     append this process's pid (and a hanging one's child's) to FILE, then
                     wait until WORLD_SIZE pids are there (a group's rendezvous)
  FAKE_PAUSE_AFTER_WARMUP=S   sleep S seconds after the last warmup step's line, in no step
                     (a loop that empties its allocator's cache before measuring)
  FAKE_LATE_OOM=B,S  batches above B run out of memory at step S (a loop whose steady step
                     needs more memory than its first steps show)
  FAKE_FLAKY_ABOVE=B,DIR   batches above B hold in their first run of 10 steps or more (a
                     confirmation) and run out of memory in every later one (on rank 0 of a
                     group): a size at the edge that holds once and not again; DIR keeps count
  FAKE_PEAK_GROWS=K  the reported peak grows over the first K steps, then stays
  FAKE_STEP_S=S      seconds per step (default 0.01)
  FAKE_SAMPLES=N     report N samples a step, whatever the batch (a program that ran another
                     batch than the one it was given)
  FAKE_STEP_REPORTED=F   report F x the step's time (a program whose step time leaves out
                     part of its loop)
  FAKE_STEP_MEASURED=1   the step's time as measured, from the end of the previous step, as
                     a real loop's (default: FAKE_STEP_S as given)
  FAKE_LOG=FILE      append one JSON line about this run (its settings, environment, CPU
                     affinity, the threads a stand-in torch module was given, times)
  FAKE_MEMORY=FIXED,PER_SAMPLE,FREE   a GPU with FREE bytes free: the peak is FIXED +
                     PER_SAMPLE x batch, reported with every step beside a device line
                     (FAKE_GPU_NAME, default "Fake GPU"); past FREE it runs out of memory
                     and, after the first step, a model line whose parameters, gradients
                     and optimizer state (1 : 1 : 2, counted by perf_lessons from stand-in
                     tensors) make up FIXED (a multiple of 16), so activations are the rest
  FAKE_NO_MODEL=1    no model line
  FAKE_MEMORY_REAL_FREE=BYTES   run out of memory past this instead of FREE (the report and
                     the truth disagree, as an allocator's slack makes them)
  FAKE_WATCH_FILE=FILE   log how many lines FILE had when the run started

Under `tuner profile` (PERF_LESSONS_PROFILE set) a stand-in PyTorch stands in sys.modules, as
a real program would have imported it: its CUDA profiler's start and stop are logged with the
step they came after, and its profiler writes a tiny Chrome trace. FAKE_PROFILE_NO_TORCH=1
leaves it out (a program that does not use PyTorch).
"""

import argparse
import json
import math
import os
import subprocess
import sys
import time
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
from perf_lessons import Reporter, setting  # noqa: E402


def wind_down():
    """Exit status 1 after a second, as a real program winds down after its out-of-memory
    message (the tuner stops it at the message: without the pause a loaded machine decides
    whether the exit or the message is seen first)."""
    time.sleep(1.0)
    return 1


PYTORCH_OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
    "capacity of 79.19 GiB of which 1.12 GiB is free. Including non-PyTorch memory, this process "
    "has 78.06 GiB memory in use. Of the allocated memory 76.50 GiB is allocated by PyTorch, and "
    "1.02 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large "
    "try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
    "documentation for Memory Management  "
    "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
)


def log(entry):
    path = os.environ.get("FAKE_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")


class Tensor:
    """A stand-in fp32 tensor of `numel` elements on the GPU, as perf_lessons counts one."""

    device = type("Device", (), {"type": "cuda"})()
    requires_grad = True
    grad = None

    def __init__(self, numel):
        self._numel = numel

    def numel(self):
        return self._numel

    def element_size(self):
        return 4


class Model:
    """A model of one fp32 parameter and an optimizer with two moments of it: parameters,
    gradients and state of 4, 4 and 8 bytes an element, `fixed_bytes` in all."""

    def __init__(self, fixed_bytes):
        weight = Tensor(fixed_bytes // 16)
        self.weight = weight
        self.state = {weight: {"step": 1, "exp_avg": Tensor(weight.numel()),
                               "exp_avg_sq": Tensor(weight.numel())}}

    def parameters(self):
        return iter([self.weight])


def stand_in_torch(entry, state):
    """torch as perf_lessons' profiling uses it, with CUDA in use."""
    events = entry.setdefault("profiler", [])

    def mark(what):
        return lambda *args: events.append([what, state["step"]])

    class Profile:
        def __init__(self, activities):
            self.activities = activities

        start = mark("torch start")
        stop = mark("torch stop")

        def export_chrome_trace(self, path):
            with open(path, "w", encoding="utf-8") as f:
                json.dump({"traceEvents": [{"name": "step", "ph": "X", "ts": 0, "dur": 1,
                                            "pid": 1, "tid": 1}]}, f)

    cuda = types.SimpleNamespace(
        is_initialized=lambda: True, synchronize=lambda: None,
        profiler=types.SimpleNamespace(start=mark("start"), stop=mark("stop")),
        nvtx=types.SimpleNamespace(range_push=lambda name: None, range_pop=lambda: None))
    profiler = types.SimpleNamespace(
        ProfilerActivity=types.SimpleNamespace(CPU="CPU", CUDA="CUDA"), profile=Profile)
    sys.modules["torch"] = types.SimpleNamespace(cuda=cuda, profiler=profiler)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch-size", type=int, default=setting("BATCH_SIZE", 32))
    p.add_argument("--workers", type=int, default=setting("WORKERS", 0))
    # The precision as the tuner resolves it: never `on`, which the tuner turns into what the
    # trial's GPU has.
    p.add_argument("--amp", choices=["off", "bf16", "fp16"], default=setting("AMP", "off"))
    p.add_argument("--accumulation", type=int, default=setting("ACCUMULATION", 1))
    p.add_argument("--steps", type=int, default=setting("STEPS", 5))
    p.add_argument("--warmup", type=int, default=setting("WARMUP_STEPS", 1))
    p.add_argument("--lr", type=float, default=setting("LR", 0.0) or None)
    args = p.parse_args()

    mode = os.environ.get("FAKE_MODE", "ok")
    rank = int(os.environ.get("RANK", "0"))
    ranked = os.environ.get("FAKE_RANK_MODE")
    if ranked:
        target, target_mode = ranked.split(":")
        mode = target_mode if rank == int(target) else os.environ.get("FAKE_OTHERS", "ok")
    stall_above = os.environ.get("FAKE_STALL_ABOVE")
    if stall_above is not None and args.batch_size > int(stall_above):
        mode = "stall"
    pids = os.environ.get("FAKE_PIDS")
    if pids:
        with open(pids, "a", encoding="utf-8") as f:
            f.write("%d\n" % os.getpid())
        # The group's rendezvous, as a data-parallel program's start waits for every rank.
        world = int(os.environ.get("WORLD_SIZE", "1"))
        until = time.time() + 10
        while time.time() < until and len(Path(pids).read_text().split()) < world:
            time.sleep(0.01)
    step_s = float(os.environ.get("FAKE_STEP_S", "0.01"))
    reported_s = step_s * float(os.environ.get("FAKE_STEP_REPORTED", "1"))
    start = time.time()
    entry = {
        "args": vars(args),
        "env": {k: v for k, v in os.environ.items() if k.startswith("PERF_LESSONS_")},
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "nccl_nvls_enable": os.environ.get("NCCL_NVLS_ENABLE"),
        "torchrun": {k: os.environ.get(k) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE",
                                                    "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                                                    "MASTER_PORT") if k in os.environ},
        "pid": os.getpid(),
        "pgid": os.getpgid(0),
        "cpus": sorted(os.sched_getaffinity(0)),
        "threads": getattr(sys.modules.get("torch"), "threads", None),
        "start": start,
    }

    watch = os.environ.get("FAKE_WATCH_FILE")
    if watch:
        try:
            with open(watch, encoding="utf-8") as f:
                entry["watched_lines"] = sum(1 for line in f if line.strip())
        except FileNotFoundError:
            entry["watched_lines"] = None

    if mode == "hang":
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        if os.environ.get("FAKE_PID_FILE"):
            Path(os.environ["FAKE_PID_FILE"]).write_text("%d %d\n" % (os.getpid(), child.pid))
        if pids:
            with open(pids, "a", encoding="utf-8") as f:
                f.write("%d\n" % child.pid)
        print("waiting for a collective that never comes", file=sys.stderr, flush=True)
        time.sleep(600)
        return 0
    if mode == "oom_then_linger":
        print(PYTORCH_OOM, file=sys.stderr, flush=True)
        time.sleep(600)
        return 1
    if mode == "fail":
        print("loading the dataset", flush=True)
        raise ValueError("the dataset has no split called 'trian'")

    if mode == "stall":
        worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        if pids:
            with open(pids, "a", encoding="utf-8") as f:
                f.write("%d\n" % worker.pid)
    stall_after = int(os.environ.get("FAKE_STALL_AFTER", "3"))

    time.sleep(float(os.environ.get("FAKE_START_S", "0")))

    state = {"step": 0}
    if os.environ.get("PERF_LESSONS_PROFILE") and not os.environ.get("FAKE_PROFILE_NO_TORCH"):
        stand_in_torch(entry, state)
    report = Reporter() if mode != "silent" else Reporter(path="")
    peak = args.batch_size * 1_000_000
    too_big = False
    model = None
    memory = os.environ.get("FAKE_MEMORY")
    if memory:
        fixed, per_sample, free = (int(v) for v in memory.split(","))
        real_free = int(os.environ.get("FAKE_MEMORY_REAL_FREE", free))
        report.device(name=os.environ.get("FAKE_GPU_NAME", "Fake GPU"),
                      total_bytes=free + 1_000_000_000, free_bytes=free)
        peak = fixed + per_sample * args.batch_size
        too_big = peak > real_free
        if os.environ.get("FAKE_NO_MODEL") != "1":
            model = Model(fixed)
    oom_above = os.environ.get("FAKE_OOM_ABOVE")
    if oom_above is not None:
        # One limit, or one per rank (the last for the ranks past the list).
        limits = [int(v) for v in oom_above.split(",")]
        oom_above = limits[min(rank, len(limits) - 1)]
    if oom_above is not None and args.batch_size > oom_above:
        too_big = True
    if mode == "oom":
        too_big = True
    flaky = os.environ.get("FAKE_FLAKY_ABOVE")
    if flaky and rank == 0 and args.steps >= 10 and args.batch_size > int(flaky.split(",")[0]):
        ran = Path(flaky.split(",", 1)[1]) / ("batch-%d" % args.batch_size)
        too_big = too_big or ran.exists()
        ran.touch()
    if too_big:
        # Logged before the message: the tuner ends the trial as soon as it sees the message.
        entry["end"] = time.time()
        entry["outcome"] = "oom"
        log(entry)
        report.close()
        print("Traceback (most recent call last):", file=sys.stderr)
        print('  File "train.py", line 120, in <module>', file=sys.stderr)
        print("    loss.backward()", file=sys.stderr)
        print(PYTORCH_OOM, file=sys.stderr, flush=True)
        return wind_down()

    samples = int(os.environ.get("FAKE_SAMPLES", args.batch_size * args.accumulation))
    measured_start = None
    no_loss = os.environ.get("FAKE_NO_LOSS_BATCH")
    reports_loss = args.lr is not None and str(args.batch_size) != no_loss

    def metrics(extra):
        if not reports_loss:
            return None
        loss = (math.log10(args.lr) + 2) ** 2 + 8 / args.batch_size + extra
        if args.lr >= 1:
            loss = float("nan")
        return {"loss": loss, "accuracy": 1 / (1 + loss)}

    late = os.environ.get("FAKE_LATE_OOM")
    grows = int(os.environ.get("FAKE_PEAK_GROWS", "1"))
    steps = 1 if mode == "short" else args.warmup + args.steps
    full_peak = peak
    pause = float(os.environ.get("FAKE_PAUSE_AFTER_WARMUP", "0"))
    measured = os.environ.get("FAKE_STEP_MEASURED") == "1"
    factor = float(os.environ.get("FAKE_STEP_REPORTED", "1"))
    last_end = time.perf_counter()
    reported_total = 0.0
    for step in range(steps):
        if step == stall_after and mode == "stall":
            time.sleep(600)
        evaluation = os.environ.get("FAKE_EVAL_AFTER")
        if evaluation and step == int(evaluation.split(",")[0]):
            until = time.time() + float(evaluation.split(",")[1])
            batches = 0
            while time.time() < until:
                batches += 1
                sys.stderr.write("\revaluating: batch %d" % batches)
                sys.stderr.flush()
                time.sleep(0.1)
        if step == 1 and mode == "wait":
            print("waiting for a collective that never comes", file=sys.stderr, flush=True)
            time.sleep(600)
        if step == args.warmup:
            time.sleep(pause if step > 0 else 0)
            measured_start = time.perf_counter()
            last_end = measured_start
        if late:
            above, at = (int(v) for v in late.split(","))
            if args.batch_size > above and step + 1 >= at:
                print(PYTORCH_OOM, file=sys.stderr, flush=True)
                report.close()
                return wind_down()
        time.sleep(step_s)
        if measured:
            now = time.perf_counter()
            reported_s, last_end = (now - last_end) * factor, now
        if step >= args.warmup:
            reported_total += reported_s
        peak = full_peak * min(step + 1, grows) // grows
        state["step"] = step + 1
        report.step(
            samples=samples,
            step_s=reported_s,
            data_s=reported_s * 0.1,
            forward_s=reported_s * 0.3,
            backward_s=reported_s * 0.5,
            optimizer_s=reported_s * 0.1,
            peak_memory_bytes=peak,
            metrics=metrics(1 / (step + 1)),
        )
        if step == 0 and model is not None:
            # As a training loop would: once the optimizer has made its state.
            report.model(model, model)
    if measured_start is not None and args.steps > 0 and mode != "short":
        report.end(samples_per_s=samples * args.steps / reported_total, metrics=metrics(0))
    if mode == "garbage" and report.enabled:
        with open(os.environ["PERF_LESSONS_REPORT"], "a", encoding="utf-8") as f:
            f.write("epoch 1 done, loss 0.42\n")
            f.write('{"samples": %d, "step' % samples)
    entry["end"] = time.time()
    entry["outcome"] = "ok"
    log(entry)
    report.close()
    if mode == "crash_at_exit":
        os.abort()
    if mode == "hang_after_steps":
        time.sleep(600)
    return 0


if __name__ == "__main__":
    sys.exit(main())
