"""PyTorch Lightning: `Trainer(callbacks=[ReportCallback()])` reports every optimizer step to
the tuner. Lightning is imported when `ReportCallback` is first used, so `import perf_lessons`
never needs it.

Each step is timed from the end of the previous optimizer step to the end of the batch that
closes this one (with `accumulate_grad_batches`, the last of its micro-batches: an optimizer
step is seen by `trainer.global_step` moving), the wait between batches reported as `data_s`.
Its samples are the micro-batches' sizes: `samples_per_batch=` where given, else the first
dimension of the batch (a tensor, or the first tensor of a tuple, list or dict), else the
tuner's batch size. The loss `training_step` returned is the step's `loss` metric (a sweep's
`--pick loss:min`), the last micro-batch's where there are several. Where CUDA is in use the
step waits for the GPU and carries PyTorch's peak memory, and a device line goes before the
first step, and NVTX ranges mark each step, its `forward`, `backward` and `optimizer` (by
Lightning's hooks) and the wait for data. Outside the tuner it does nothing.
"""

from ._callbacks import lazy_callback
from .report import StepClock, setting


def batch_samples(batch):
    """The number of samples in a batch: the first dimension of its first tensor, or None."""
    shape = getattr(batch, "shape", None)
    if shape is not None:
        return int(shape[0]) if len(shape) > 0 else None
    if isinstance(batch, dict):
        batch = list(batch.values())
    if isinstance(batch, (list, tuple)):
        for item in batch:
            samples = batch_samples(item)
            if samples is not None:
                return samples
    return None


def step_loss(outputs):
    """The loss `training_step` returned (a tensor, or a dict's "loss") as a metric, or None."""
    if isinstance(outputs, dict):
        outputs = outputs.get("loss")
    item = getattr(outputs, "item", None)
    if item is None:
        return None
    try:
        return {"loss": float(item())}
    except (TypeError, ValueError, RuntimeError):
        return None


class _Report:
    """The callback's work, apart from Lightning's base class."""

    def __init__(self, samples_per_batch=None, reporter=None):
        super().__init__()
        self.samples_per_batch = samples_per_batch
        self._clock = StepClock(reporter)
        self._global_step = None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if self._clock.enabled:
            if self._global_step is None:
                self._global_step = getattr(trainer, "global_step", None)
            self._clock.begin()
            self._clock.phase("forward")

    def on_before_backward(self, trainer, pl_module, loss):
        self._clock.phase("backward")

    def on_after_backward(self, trainer, pl_module):
        self._clock.phase(None)

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        self._clock.phase("optimizer")

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if not self._clock.enabled:
            return
        samples = self.samples_per_batch or batch_samples(batch) or setting("BATCH_SIZE", 0)
        global_step = getattr(trainer, "global_step", None)
        stepped = global_step is None or global_step != self._global_step
        self._global_step = global_step
        self._clock.end(samples, optimizer_stepped=stepped,
                        metrics=step_loss(outputs) if stepped else None)

    def on_train_end(self, trainer, pl_module):
        self._clock.finish()


def _callback_base():
    try:
        from lightning.pytorch import Callback
    except ImportError:
        try:
            from pytorch_lightning import Callback
        except ImportError:
            raise ImportError(
                "perf_lessons.lightning needs PyTorch Lightning: pip install lightning"
            ) from None
    return Callback


__getattr__ = lazy_callback(__name__, _Report, _callback_base, __doc__)
