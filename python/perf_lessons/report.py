"""Report training steps to perf-lessons' tuner. Standard library only.

Installed (`pip install .` at the repository root puts `tuner` on the PATH beside this module):

    import perf_lessons
    for inputs, labels in loader:      # warmup steps included: the tuner drops them
        with perf_lessons.step(samples=len(inputs)) as s:
            ...                        # one optimizer step; optionally s.forward_s = ...

Or copy this file beside your training script as perf_lessons_report.py (no install), and use
`from perf_lessons_report import Reporter, step`.

Each step appends one JSON line to the file named by the PERF_LESSONS_REPORT environment
variable, which the tuner sets for every trial. Without that variable (a normal training run)
every call does nothing, so the lines can stay in the script.

`step(samples=...)` times a block as one optimizer step: from the end of the previous step to
the end of this block, so the wait for the next batch (the time outside the blocks) is part of
the step, and is also reported as `data_s`. Where the program has imported PyTorch and
initialized CUDA, the block's end waits for the GPU (the host clock then measures the work, not
its queuing) and the step carries two peaks: the most PyTorch's allocator has reserved so far
(`torch.cuda.max_memory_reserved()`, what runs out) and the most its tensors held in this step
(`torch.cuda.max_memory_allocated()`, after which it resets PyTorch's peak counters); before
the first step a device line gives the GPU's name and the memory the training can have (free
now plus what PyTorch already holds). Set `s.forward_s`, `s.backward_s`, `s.optimizer_s`,
`s.data_s`, `s.peak_memory_bytes`, `s.peak_allocated_bytes`, `s.gpu_busy`, `s.metrics`
(`{"loss": loss.item()}`) or `s.samples` inside the block to report your own figures. A block left by an exception (out of
memory, say) reports nothing.

The lower level, for a loop that times itself:

    report = Reporter()
    report.step(samples=batch_size * accumulation, step_s=..., forward_s=..., backward_s=...)
    report.end(samples_per_s=...)      # optional: your own count, shown beside the tuner's

Fields of a step: `samples` (what the optimizer step consumed: batch x accumulation) and the
step's time in seconds, `step_s`. Without `step_s`, the time since the previous `step()` call
(or since the Reporter was made) is used: call `step()` after something that waits for the GPU
(`loss.item()`, `torch.cuda.synchronize()`), or the host clock measures only the queuing of
work. Optional: `data_s`, `forward_s`, `backward_s`, `optimizer_s` (seconds),
`peak_memory_bytes` (e.g. `torch.cuda.max_memory_reserved()`), `peak_allocated_bytes` (the
step's own `torch.cuda.max_memory_allocated()`: read it, then `torch.cuda.reset_peak_memory_stats()`)
and `gpu_busy` (0..1).

Metrics: `metrics={"loss": loss.item()}` on a step or on `end()` (a final evaluation) reports
the program's own figures by name; the tuner keeps the last value of each (the end line's where
there is one), shows a column per metric and picks by one with `--pick loss:min`. A value that
is not a finite number (a loss that diverged) is written as null, so the line stays valid JSON.

Where the memory goes: after the first optimizer step (the optimizer makes its state then),
`report.model(model, optimizer)`, or `perf_lessons.model(model, optimizer)` beside `step()`,
reports once the bytes of the model's parameters, of its gradients and of the optimizer's
state, which `tuner memory` sets against each batch's peak (the rest is activations and
workspace). Parameters: every `p.numel() * p.element_size()` of `model.parameters()`.
Gradients: for each parameter that requires one, its `.grad` where it holds one, else the
parameter's own size (a gradient has its parameter's shape and dtype), so the count is the
same before `backward()` and after `zero_grad(set_to_none=True)`. Optimizer state: every
tensor in `optimizer.state` (momentum, Adam's two moments) that lives on the model's device;
`optimizer=None` is a loop without one (no state). The objects are only asked for those
methods and attributes: nothing here imports PyTorch.

Optional, once the framework holds the GPU and before the model is built:
`report.device(name=..., total_bytes=..., free_bytes=..., framework=...)` (in PyTorch
`torch.cuda.get_device_name()`, `torch.cuda.mem_get_info()` and `torch_version()`). With it and a
peak per step, the batch finder fits memory against the batch and aims at the limit instead of
doubling its way there. Where the steps give `peak_allocated_bytes` too, it aims by those when
the cache the reserved peak holds above them is no steady share of them: cuDNN's autotuner
(`torch.backends.cudnn.benchmark`) caches the workspaces it tried and takes what room there is,
so the reserved peak meets the limit long before the batch that runs out.

A data-parallel program (DDP) reports from every rank: the tuner starts each rank itself, as
torchrun would (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), with a report file
of its own, and every line a rank writes carries its `rank` (`rank()` reads it from the
environment; None outside a group of more than one). Report the rank's own samples: the
batch is per GPU.

The tuner also puts the trial's settings in the environment (PERF_LESSONS_BATCH_SIZE,
PERF_LESSONS_WORKERS, PERF_LESSONS_AMP = on/off, PERF_LESSONS_ACCUMULATION, PERF_LESSONS_STEPS,
PERF_LESSONS_WARMUP_STEPS), and each of a sweep's own axes (`--axis lr=0.1,0.01` gives
PERF_LESSONS_LR); `setting("BATCH_SIZE", 64)` or `setting("LR", 0.1)` reads one with a default.

Profiling. Where the program has imported PyTorch and initialized CUDA, the context manager and
the callbacks mark every step with an NVTX range (`step 7`), the wait for the next batch
(`data`) and, where the framework shows them (Lightning's hooks), `forward`, `backward` and
`optimizer` inside it; Nsight Systems shows them on the timeline. `tuner profile` sets
PERF_LESSONS_PROFILE for its trial: `cuda-api` starts the CUDA profiler
(`torch.cuda.profiler.start()`, nsys's `--capture-range=cudaProfilerApi`) once the warmup steps
are reported and stops it after the last measured step; `torch` records those same steps with
PyTorch's profiler and writes a Chrome trace to PERF_LESSONS_PROFILE_OUT (open it at
https://ui.perfetto.dev). Either way the window follows the steps the Reporter writes, so a
loop that times itself gets it too.
"""

import json
import math
import os
import sys
import time

REPORT_ENV = "PERF_LESSONS_REPORT"
PROFILE_ENV = "PERF_LESSONS_PROFILE"
PROFILE_OUT_ENV = "PERF_LESSONS_PROFILE_OUT"

_PHASES = ("data_s", "forward_s", "backward_s", "optimizer_s")


def _metrics(metrics):
    """`{"loss": 2.31}` as the protocol takes it: names to numbers, null for a value that is
    not a finite number (JSON has no NaN)."""
    out = {}
    for name, value in dict(metrics).items():
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise TypeError("metric %r must be a number, got %r" % (name, value)) from None
        out[str(name)] = number if math.isfinite(number) else None
    return out


def rank():
    """This process's rank in a data-parallel group (RANK, as torchrun and the tuner set it for
    each process; LOCAL_RANK where only that is set); None outside a group of more than one."""
    try:
        if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
            return None
        return int(os.environ.get("RANK", os.environ.get("LOCAL_RANK", "")))
    except ValueError:
        return None


def fork_here():
    """Where a Python program's trials may start under the tuner: all above it is the same in
    every trial and has not touched CUDA (imports, a model built on the CPU, a dataset read), so
    the tuner runs it once and forks each trial from here, which then returns in the trial's own
    process, with its own arguments and environment. Parse the arguments, make the Reporter and
    move to the GPU below it. Anywhere else (a normal run, or trials spawned) it does nothing.
    Returns whether this process is a trial forked here. A program that does not import this
    module calls it with the same lines."""
    server = sys.modules.get("_perf_lessons_fork_server")
    if server is None:
        return False
    server.serve()
    return True


def setting(name, default):
    """The tuner's PERF_LESSONS_<name> for this trial, as the type of `default`; `default`
    where it is not set (a run outside the tuner). As a bool, AMP's bf16 and fp16 are on:
    `setting("AMP", "off")` gives the precision itself."""
    raw = os.environ.get("PERF_LESSONS_" + name)
    if raw is None or raw == "":
        return default
    if isinstance(default, bool):
        return raw.strip().lower() in ("on", "1", "true", "yes", "bf16", "fp16")
    if default is None:
        return raw
    return type(default)(raw)


class Reporter:
    """Appends the tuner's JSON lines; does nothing when PERF_LESSONS_REPORT is not set."""

    def __init__(self, path=None):
        path = path if path is not None else os.environ.get(REPORT_ENV)
        # Line-buffered: every step reaches the file as it happens, so a killed trial keeps
        # the steps it ran.
        self._file = open(path, "a", buffering=1, encoding="utf-8") if path else None
        self._last = time.perf_counter()
        self._steps = 0
        self._rank = rank()
        self._profile = ProfileWindow.from_env() if self._file is not None else None

    @property
    def enabled(self):
        return self._file is not None

    @property
    def steps(self):
        """Steps reported so far."""
        return self._steps

    def step(self, samples, step_s=None, peak_memory_bytes=None, gpu_busy=None, metrics=None,
             peak_allocated_bytes=None, **phases):
        """One optimizer step: `samples` consumed, its time `step_s` (default: since the last
        call), optional phase times in seconds, the framework's peak memory in bytes, the
        share of the step the GPU was working (0..1), where the program measures it,
        `metrics`, the program's own figures by name ({"loss": 2.31}), and the most the
        step's tensors held, in bytes."""
        unknown = set(phases) - set(_PHASES)
        if unknown:
            raise TypeError("unknown phase(s) %s; use %s" % (sorted(unknown), ", ".join(_PHASES)))
        metrics = _metrics(metrics or {})
        now = time.perf_counter()
        if step_s is None:
            step_s = now - self._last
        self._last = now
        self._steps += 1
        if self._file is None:
            return
        line = {"step": self._steps, "samples": int(samples), "step_s": float(step_s)}
        for name in _PHASES:
            value = phases.get(name)
            if value is not None and math.isfinite(value):
                line[name] = float(value)
        if peak_memory_bytes is not None:
            line["peak_memory_bytes"] = int(peak_memory_bytes)
        if peak_allocated_bytes is not None:
            line["peak_allocated_bytes"] = int(peak_allocated_bytes)
        if gpu_busy is not None and 0.0 <= gpu_busy <= 1.0:
            line["gpu_busy"] = float(gpu_busy)
        if metrics:
            line["metrics"] = metrics
        self._write(line)
        if self._profile is not None:
            self._profile.after_step(self._steps)

    def device(self, name=None, total_bytes=None, free_bytes=None, framework=None):
        """The GPU as the framework sees it: its name, its memory and what is free for the
        training (call it before building the model); `framework` names the framework and its
        version ("torch 2.11.0+cu130, CUDA 13.0")."""
        if self._file is None:
            return
        line = {"kind": "device"}
        if name is not None:
            line["name"] = str(name)
        if total_bytes is not None:
            line["total_bytes"] = int(total_bytes)
        if free_bytes is not None:
            line["free_bytes"] = int(free_bytes)
        if framework is not None:
            line["framework"] = str(framework)
        self._write(line)

    def model(self, model, optimizer):
        """Where the model's memory goes: its parameters, their gradients and `optimizer`'s
        state, in bytes, as one line (see the top of this file; call it after the first
        optimizer step). Returns the three counts, also outside the tuner."""
        parts = model_bytes(model, optimizer)
        if self._file is not None:
            self._write(dict({"kind": "model"}, **parts))
        return parts

    def end(self, samples_per_s=None, peak_memory_bytes=None, metrics=None):
        """The closing line: the program's own samples/s, shown beside the tuner's count, and
        `metrics` of the whole run (a final evaluation's loss), which stand over the steps'."""
        metrics = _metrics(metrics or {})
        if self._file is None:
            return
        line = {"kind": "end"}
        if samples_per_s is not None:
            line["samples_per_s"] = float(samples_per_s)
        if peak_memory_bytes is not None:
            line["peak_memory_bytes"] = int(peak_memory_bytes)
        if metrics:
            line["metrics"] = metrics
        self._write(line)

    def close(self):
        if self._profile is not None:
            self._profile.close()
            self._profile = None
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def _write(self, line):
        if self._rank is not None:
            line = dict(line, rank=self._rank)
        self._file.write(json.dumps(line, separators=(",", ":")) + "\n")
        self._file.flush()


def _tensor_bytes(tensor):
    return int(tensor.numel()) * int(tensor.element_size())


def _is_tensor(value):
    return callable(getattr(value, "numel", None)) and callable(getattr(value, "element_size", None))


def _device_type(tensor):
    return getattr(getattr(tensor, "device", None), "type", None)


def model_bytes(model, optimizer):
    """`{"parameter_bytes", "gradient_bytes", "optimizer_state_bytes"}` of a PyTorch-like
    model and optimizer (see the top of this file for what each counts)."""
    parameters = list(model.parameters())
    gradients = 0
    for p in parameters:
        if getattr(p, "requires_grad", True):
            grad = getattr(p, "grad", None)
            gradients += _tensor_bytes(grad if grad is not None else p)
    # Adam keeps its step counts as host scalars beside moments on the GPU: only the state on
    # the model's device takes its memory.
    devices = {_device_type(p) for p in parameters}
    state = 0
    seen = set()
    for per_parameter in getattr(optimizer, "state", {}).values():
        for value in dict(per_parameter).values():
            if not _is_tensor(value) or id(value) in seen:
                continue
            seen.add(id(value))
            if _device_type(value) == "cpu" and "cpu" not in devices:
                continue
            state += _tensor_bytes(value)
    return {
        "parameter_bytes": sum(_tensor_bytes(p) for p in parameters),
        "gradient_bytes": gradients,
        "optimizer_state_bytes": state,
    }


def torch_cuda():
    """PyTorch's `torch.cuda` where the program has imported PyTorch and initialized CUDA in
    this process, else None. Nothing here imports PyTorch or touches the GPU first: a program
    without them, or on the CPU, is left alone."""
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    try:
        return cuda if cuda is not None and cuda.is_initialized() else None
    except Exception:
        return None


def torch_version():
    """`torch 2.11.0+cu130, CUDA 13.0`: the PyTorch the program imported and the CUDA it was
    built with, where they say; None without them."""
    torch = sys.modules.get("torch")
    version = getattr(torch, "__version__", None)
    if version is None:
        return None
    cuda = getattr(getattr(torch, "version", None), "cuda", None)
    return "torch %s%s" % (version, ", CUDA %s" % cuda if cuda else "")


def _say(text):
    print("perf_lessons: " + text, file=sys.stderr, flush=True)


class ProfileWindow:
    """The measured steps under a profiler, as PERF_LESSONS_PROFILE asks (`tuner profile` sets
    it): it opens once the warmup steps (PERF_LESSONS_WARMUP_STEPS) are reported and closes
    after the last measured one (PERF_LESSONS_STEPS more). `cuda-api` brackets them with
    cudaProfilerStart/Stop for nsys; `torch` records them with PyTorch's profiler into the
    Chrome trace PERF_LESSONS_PROFILE_OUT names. What goes wrong is said on stderr and leaves
    the training alone: the tuner finds no report and says so."""

    MODES = ("cuda-api", "torch")

    def __init__(self, mode, out, warmup, steps):
        self.mode = mode
        self.out = out
        self.first = warmup
        self.last = warmup + steps
        self._recording = None

    @classmethod
    def from_env(cls):
        mode = os.environ.get(PROFILE_ENV, "")
        if not mode:
            return None
        if mode not in cls.MODES:
            _say("%s=%s is not one of %s: not profiling" % (PROFILE_ENV, mode, ", ".join(cls.MODES)))
            return None
        out = os.environ.get(PROFILE_OUT_ENV) or None
        if mode == "torch" and out is None:
            _say("%s=torch needs %s, the trace's path: not profiling" % (PROFILE_ENV, PROFILE_OUT_ENV))
            return None
        warmup = setting("WARMUP_STEPS", 0)
        if warmup < 1:
            # The window opens when a step ends: there is no step before the first.
            _say("profiling needs at least one warmup step (PERF_LESSONS_WARMUP_STEPS): not profiling")
            return None
        return cls(mode, out, warmup, setting("STEPS", 0))

    @property
    def recording(self):
        return self._recording is not None

    def after_step(self, steps):
        """Step `steps` (counted from 1) was reported."""
        if steps == self.first and self._recording is None:
            self._start()
        elif steps == self.last:
            self.close()

    def close(self):
        """Stop recording (and write the trace) if it is on; nothing is recorded after."""
        recording, self._recording = self._recording, None
        if recording is None:
            return
        cuda = torch_cuda()
        if cuda is not None:
            cuda.synchronize()
        try:
            if self.mode == "cuda-api":
                cuda.profiler.stop()
                return
            recording.stop()
            recording.export_chrome_trace(self.out)
            _say("steps %d to %d recorded by PyTorch's profiler: %s"
                 % (self.first + 1, self.last, self.out))
        except Exception as e:  # the profiler's own failure, not the training's
            _say("the profiler could not finish: %s" % e)

    def _start(self):
        cuda = torch_cuda()
        torch = sys.modules.get("torch")
        try:
            if self.mode == "cuda-api":
                if cuda is None:
                    _say("no CUDA in use by PyTorch in this process: nothing for nsys to record")
                    return
                cuda.profiler.start()
                self._recording = True
                return
            if torch is None:
                _say("PyTorch is not imported by this program: no trace to record")
                return
            activities = [torch.profiler.ProfilerActivity.CPU]
            if cuda is not None:
                activities.append(torch.profiler.ProfilerActivity.CUDA)
            recording = torch.profiler.profile(activities=activities)
            recording.start()
            self._recording = recording
        except Exception as e:
            _say("the profiler could not start: %s" % e)


class Marks:
    """NVTX ranges, nested as a stack, through `torch.cuda.nvtx` where the program has PyTorch
    with CUDA initialized; nothing otherwise."""

    def __init__(self):
        self._open = []

    @property
    def depth(self):
        return len(self._open)

    def enter(self, depth, name):
        """Close the ranges above `depth` open ones, then open `name` inside them."""
        self.close(depth)
        cuda = torch_cuda()
        nvtx = getattr(cuda, "nvtx", None)
        if nvtx is not None:
            nvtx.range_push(name)
            self._open.append(nvtx)

    def close(self, depth=0):
        """Close the ranges above `depth` open ones."""
        while len(self._open) > depth:
            self._open.pop().range_pop()


class StepClock:
    """Times optimizer steps from the end of one to the end of the next and reports each one;
    the context manager and the Lightning and Hugging Face callbacks share it. `begin()` marks
    where a batch's own work starts (the time before it since the last step is the wait for
    data), `end()` where it ends; a step of several micro-batches reports at its last one."""

    def __init__(self, reporter=None):
        self.reporter = reporter if reporter is not None else Reporter()
        self._step_start = None
        self._last_end = None
        self._wait = None
        self._samples = 0
        self._device_sent = False
        # The most PyTorch has reserved so far: its peak counters are reset every step.
        self._reserved = 0
        self._marks = Marks()
        self._in_step = False

    @property
    def enabled(self):
        return self.reporter.enabled

    def begin(self):
        now = time.perf_counter()
        if self._step_start is None:
            self._step_start = now
        if self._last_end is not None:
            self._wait = (self._wait or 0.0) + (now - self._last_end)
            self._last_end = None
        if not self.enabled:
            return
        if self._in_step:
            self._marks.close(1)  # the wait between micro-batches
        else:
            self._in_step = True
            self._marks.enter(0, "step %d" % (self.reporter.steps + 1))

    def phase(self, name):
        """`forward`, `backward`, `optimizer`: a part of the step, for the NVTX ranges, up to
        the next phase or the end of the batch; None closes the current one."""
        if not self.enabled or not self._in_step:
            return
        if name is None:
            self._marks.close(1)
        else:
            self._marks.enter(1, name)

    def end(self, samples, optimizer_stepped=True, **fields):
        """A batch of `samples` ended; with `optimizer_stepped` it closed an optimizer step,
        which is then reported with `fields` (the Reporter's step fields) over what PyTorch
        can tell where the caller gave none."""
        if not self.enabled:
            return
        self._samples += int(samples)
        if not optimizer_stepped:
            self._last_end = time.perf_counter()
            self._marks.enter(1, "data")
            return
        cuda = torch_cuda()
        if cuda is not None:
            cuda.synchronize()
        now = time.perf_counter()
        self._in_step = False
        self._marks.close()
        if not self._device_sent:
            self._device_sent = True
            self._send_device(cuda)
        start = self._step_start if self._step_start is not None else now
        if fields.get("data_s") is None and self._wait is not None:
            fields["data_s"] = self._wait
        if cuda is not None:
            self._reserved = max(self._reserved, cuda.max_memory_reserved())
            if fields.get("peak_memory_bytes") is None:
                fields["peak_memory_bytes"] = self._reserved
            if fields.get("peak_allocated_bytes") is None:
                # The step's own: the counters start again for the next one.
                fields["peak_allocated_bytes"] = cuda.max_memory_allocated()
                cuda.reset_peak_memory_stats()
        fields = {k: v for k, v in fields.items() if v is not None}
        # The protocol refuses a step of no time; a clock that did not move is not one.
        self.reporter.step(samples=self._samples, step_s=max(now - start, 1e-9), **fields)
        # After the step's line, which may have started the profiler: the wait is in its window.
        self._marks.enter(0, "data")
        self._samples = 0
        self._wait = None
        self._step_start = now
        self._last_end = now

    def finish(self, samples_per_s=None, metrics=None):
        """The closing line, with PyTorch's peak where it is known; nothing is reported after
        it."""
        if not self.enabled:
            return
        self._marks.close()
        self._in_step = False
        cuda = torch_cuda()
        peak = max(self._reserved, cuda.max_memory_reserved()) if cuda is not None else None
        self.reporter.end(samples_per_s=samples_per_s, peak_memory_bytes=peak, metrics=metrics)
        self.reporter.close()

    def _send_device(self, cuda):
        if cuda is None:
            return
        free, total = cuda.mem_get_info()
        # What is free now plus what PyTorch already holds is what the training could have
        # had before it built its model, the limit its peaks (max_memory_reserved) meet. A
        # program that caps its share (torch.cuda.set_per_process_memory_fraction) has at most
        # that share of the GPU's memory: PyTorch's allocator refuses more.
        could_have = free + cuda.memory_reserved()
        share = getattr(cuda, "get_per_process_memory_fraction", None)
        if share is not None:
            could_have = min(could_have, int(share() * total))
        self.reporter.device(name=cuda.get_device_name(), total_bytes=total,
                             free_bytes=could_have, framework=torch_version())


class Step:
    """One block of `step()`: set its fields inside the block to report your own figures."""

    _FIELDS = ("samples", "peak_memory_bytes", "peak_allocated_bytes", "gpu_busy",
               "metrics") + _PHASES

    def __init__(self, clock, samples, fields):
        self._clock = clock
        self.samples = samples
        for name in self._FIELDS[1:]:
            setattr(self, name, fields.pop(name, None))
        self.metrics = dict(self.metrics or {})
        if fields:
            raise TypeError("unknown step field(s) %s; use %s"
                            % (sorted(fields), ", ".join(self._FIELDS)))

    def __enter__(self):
        self._clock.begin()
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            fields = {name: getattr(self, name) for name in self._FIELDS[1:]}
            self._clock.end(self.samples, **fields)
        return False


_clock = None


def _module_clock():
    global _clock
    if _clock is None:
        _clock = StepClock()
    return _clock


def model(model, optimizer):
    """Report where the model's memory goes (`Reporter.model`), into the same report as
    `step()`: call it once, after the first optimizer step."""
    return _module_clock().reporter.model(model, optimizer)


def step(samples, **fields):
    """`with step(samples=B) as s:` around one optimizer step of a plain loop (see the top of
    this file). Outside the tuner the block runs as it is and nothing is measured."""
    return Step(_module_clock(), samples, fields)
