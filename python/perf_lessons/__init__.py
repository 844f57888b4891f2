"""Report a training program's steps to perf-lessons' tuner (`tuner sweep | memory | autobatch
-- COMMAND`), which the same package puts on the PATH.

- A plain loop: `with perf_lessons.step(samples=B) as s:` around each optimizer step.
- PyTorch Lightning: `Trainer(callbacks=[perf_lessons.lightning.ReportCallback()])`.
- Hugging Face: `Trainer(callbacks=[perf_lessons.hf.ReportCallback()])`.
- A loop that times itself: `perf_lessons.Reporter().step(samples=..., step_s=...)`.

Outside the tuner (no PERF_LESSONS_REPORT in the environment) all of them do nothing. The
protocol and each field: the `report` module, which is also the one file to copy beside a
script where nothing can be installed.
"""

from . import hf, lightning
from .report import REPORT_ENV, Reporter, Step, StepClock, setting, step

__all__ = ["REPORT_ENV", "Reporter", "Step", "StepClock", "hf", "lightning", "setting", "step"]
