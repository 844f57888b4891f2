"""Report a training program's steps to perf-lessons' tuner (`tuner sweep | memory | autobatch
-- COMMAND`), which the same package puts on the PATH.

- A plain loop: `with perf_lessons.step(samples=B) as s:` around each optimizer step.
- PyTorch Lightning: `Trainer(callbacks=[perf_lessons.lightning.ReportCallback()])`.
- Hugging Face: `Trainer(callbacks=[perf_lessons.hf.ReportCallback()])`.
- A loop that times itself: `perf_lessons.Reporter().step(samples=..., step_s=...)`.
- Where the memory goes: `perf_lessons.model(model, optimizer)` once, after the first optimizer
  step: the bytes of parameters, gradients and optimizer state, for `tuner memory`.
- What every trial builds alike, built once: `perf_lessons.fork_here()` after it (on the CPU),
  before the arguments are parsed and the GPU is touched.

Outside the tuner (no PERF_LESSONS_REPORT in the environment) all of them do nothing. The
protocol and each field: the `report` module, which is also the one file to copy beside a
script where nothing can be installed.
"""

from . import hf, lightning
from .report import (REPORT_ENV, Reporter, Step, StepClock, fork_here, model, model_bytes, rank,
                     setting, step)

__all__ = ["REPORT_ENV", "Reporter", "Step", "StepClock", "fork_here", "hf", "lightning", "model",
           "model_bytes", "rank", "setting", "step"]
