"""Hugging Face Transformers: `Trainer(..., callbacks=[ReportCallback()])` reports every
optimizer step to the tuner. Transformers is imported when `ReportCallback` is first used, so
`import perf_lessons` never needs it.

Each step is timed from the end of the previous optimizer step to the end of this one (the
Trainer's `on_step_end`, after its gradient accumulation), the wait between steps reported as
`data_s`. Its samples are `train_batch_size x gradient_accumulation_steps` of the Trainer's
arguments (`samples_per_step=` where the batch differs). Where CUDA is in use the step waits for
the GPU and carries PyTorch's peak memory, a device line goes before the first step, and NVTX
ranges mark each step, its `optimizer` part (where the Trainer has the optimizer hooks) and the
wait between steps. Outside the tuner it does nothing.
"""

from ._callbacks import lazy_callback
from .report import StepClock


def step_samples(args):
    """Samples per optimizer step by the Trainer's arguments."""
    batch = getattr(args, "train_batch_size", None) or args.per_device_train_batch_size
    return int(batch) * int(getattr(args, "gradient_accumulation_steps", 1) or 1)


class _Report:
    """The callback's work, apart from Transformers' base class."""

    def __init__(self, samples_per_step=None, reporter=None):
        super().__init__()
        self.samples_per_step = samples_per_step
        self._clock = StepClock(reporter)

    def on_step_begin(self, args, state, control, **kwargs):
        self._clock.begin()

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        self._clock.phase("optimizer")

    def on_optimizer_step(self, args, state, control, **kwargs):
        self._clock.phase(None)

    def on_step_end(self, args, state, control, **kwargs):
        if self._clock.enabled:
            self._clock.end(self.samples_per_step or step_samples(args))

    def on_train_end(self, args, state, control, **kwargs):
        self._clock.finish()


def _callback_base():
    try:
        from transformers import TrainerCallback
    except ImportError:
        raise ImportError(
            "perf_lessons.hf needs Hugging Face Transformers: pip install transformers"
        ) from None
    return TrainerCallback


__getattr__ = lazy_callback(__name__, _Report, _callback_base, __doc__)
