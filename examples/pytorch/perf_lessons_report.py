"""Report training steps to perf-lessons' tuner (external mode). Standard library only.

Copy this file beside your training script, then:

    from perf_lessons_report import Reporter
    report = Reporter()
    ...
    for step in range(steps):          # warmup steps included: the tuner drops them
        ...                            # one optimizer step
        report.step(samples=batch_size * accumulation, forward_s=..., backward_s=...)
    report.end(samples_per_s=...)      # optional: your own count, shown beside the tuner's

Each call appends one JSON line to the file named by the PERF_LESSONS_REPORT environment
variable, which the tuner sets for every trial. Without that variable (a normal training run)
every call does nothing, so the lines can stay in the script.

Fields of a step: `samples` (what the optimizer step consumed: batch x accumulation) and the
step's time in seconds, `step_s`. Without `step_s`, the time since the previous `step()` call
(or since the Reporter was made) is used: call `step()` after something that waits for the GPU
(`loss.item()`, `torch.cuda.synchronize()`), or the host clock measures only the queuing of
work. Optional: `data_s`, `forward_s`, `backward_s`, `optimizer_s` (seconds) and
`peak_memory_bytes` (e.g. `torch.cuda.max_memory_allocated()`).

Metrics: `metrics={"loss": loss.item()}` on a step or on `end()` (a final evaluation) reports
the program's own figures by name; the tuner keeps the last value of each (the end line's where
there is one), shows a column per metric and picks by one with `--pick loss:min`. A value that
is not a finite number (a loss that diverged) is written as null, so the line stays valid JSON.

Optional, once the framework holds the GPU and before the model is built:
`report.device(name=..., total_bytes=..., free_bytes=...)` (in PyTorch
`torch.cuda.get_device_name()` and `torch.cuda.mem_get_info()`). With it and a
`peak_memory_bytes` per step, the batch finder fits memory against the batch and aims at the
limit instead of doubling its way there.

The tuner also puts the trial's settings in the environment (PERF_LESSONS_BATCH_SIZE,
PERF_LESSONS_WORKERS, PERF_LESSONS_AMP = on/off, PERF_LESSONS_ACCUMULATION, PERF_LESSONS_STEPS,
PERF_LESSONS_WARMUP_STEPS), and each of a sweep's own axes (`--axis lr=0.1,0.01` gives
PERF_LESSONS_LR); `setting("BATCH_SIZE", 64)` or `setting("LR", 0.1)` reads one with a default.
"""

import json
import math
import os
import time

REPORT_ENV = "PERF_LESSONS_REPORT"

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


def setting(name, default):
    """The tuner's PERF_LESSONS_<name> for this trial, as the type of `default`; `default`
    where it is not set (a run outside the tuner)."""
    raw = os.environ.get("PERF_LESSONS_" + name)
    if raw is None or raw == "":
        return default
    if isinstance(default, bool):
        return raw.strip().lower() in ("on", "1", "true", "yes")
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

    @property
    def enabled(self):
        return self._file is not None

    def step(self, samples, step_s=None, peak_memory_bytes=None, gpu_busy=None, metrics=None,
             **phases):
        """One optimizer step: `samples` consumed, its time `step_s` (default: since the last
        call), optional phase times in seconds, the framework's peak memory in bytes, the
        share of the step the GPU was working (0..1), where the program measures it, and
        `metrics`, the program's own figures by name ({"loss": 2.31})."""
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
        if gpu_busy is not None and 0.0 <= gpu_busy <= 1.0:
            line["gpu_busy"] = float(gpu_busy)
        if metrics:
            line["metrics"] = metrics
        self._write(line)

    def device(self, name=None, total_bytes=None, free_bytes=None):
        """The GPU as the framework sees it: its name, its memory and what is free for the
        training (call it before building the model)."""
        if self._file is None:
            return
        line = {"kind": "device"}
        if name is not None:
            line["name"] = str(name)
        if total_bytes is not None:
            line["total_bytes"] = int(total_bytes)
        if free_bytes is not None:
            line["free_bytes"] = int(free_bytes)
        self._write(line)

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
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def _write(self, line):
        self._file.write(json.dumps(line, separators=(",", ":")) + "\n")
        self._file.flush()
