"""PyTorch Lightning's batch finder on the model and data of train_resnet.py, for comparison with
`tuner autobatch`: `Tuner.scale_batch_size(mode="binsearch")` doubles the batch from
`--init-val` until the first out-of-memory, then bisects to a granularity of one sample, every
trial `--steps-per-trial` training steps inside this one process.

    python3 examples/pytorch/lightning_batch_finder.py --amp off --workers 4 --json lightning.json

It prints (and writes with --json) its answer, each trial (batch size, steps completed, whether
it fit, seconds) and its wall time: from the start of this script (Python, PyTorch and Lightning
imports included, as a run of the tuner counts its programs' start-ups) and of the search alone.
Where the installed Lightning takes a `margin` (a share taken off the answer) it is set to 0 and
`max_val` is raised, so the answer is the largest batch it saw fit. The model, the images, the
loader and the optimizer are train_resnet.py's own (ResNet-18, 1000 classes, seeded random
224-pixel images made in the loader's workers, SGD with momentum 0.9); `--amp` takes what
train_resnet.py takes (bf16 is Lightning's "bf16-mixed", fp16 its "16-mixed" with a gradient
scaler, `on` the best the GPU has), cuDNN autotuning is on as there.
"""

import time

STARTED = time.perf_counter()

import argparse  # noqa: E402
import inspect  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402

from train_resnet import (  # noqa: E402
    add_amp, add_memory_limit, data_loader, lightning_precision, limit_memory, non_negative,
    positive, resnet18, sgd, synthetic_images)

# Images on demand: the dataset is far longer than any batch times the steps of a trial.
DATASET_LENGTH = 10_000_000


def finder_parser(description, workers=4, amp="off"):
    """The flags every script of Lightning's finder here takes: the precision, the loader's
    workers, the search's own (first batch, steps per trial, trials, largest batch), the share
    of the GPU and where the JSON goes."""
    p = argparse.ArgumentParser(description=description)
    add_amp(p)
    p.set_defaults(amp=amp)
    p.add_argument("--workers", type=non_negative, default=workers,
                   help="data-loader worker processes")
    p.add_argument("--init-val", type=positive, default=2, help="the first batch tried")
    p.add_argument("--steps-per-trial", type=positive, default=3)
    p.add_argument("--max-trials", type=positive, default=25)
    p.add_argument("--max-val", type=positive, default=1 << 20,
                   help="the largest batch tried, where the installed Lightning takes one")
    add_memory_limit(p)
    p.add_argument("--json", metavar="FILE", help="also write the result here")
    return p


def parse_args(argv=None):
    p = finder_parser(__doc__.split("\n\n")[0])
    p.add_argument("--pin-memory", choices=["on", "off"], default="on")
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--seed", type=non_negative, default=0)
    return p.parse_args(argv)


def lightning_finder(args, make_model, make_optimizer, make_loader, benchmark, started,
                     loss_of=None):
    """Lightning's binsearch over a module made of `make_model()`, `make_optimizer(parameters)`
    and `make_loader(batch_size)`, from `args.init_val`, `args.steps_per_trial` steps a trial:
    the answer, each trial and the wall times (from `started`, the script's start, and of the
    search alone) as a dict. The loss of a batch is `loss_of(model, batch)`, by default the
    cross-entropy of the model's output on a batch's inputs against its labels. `args.amp` and
    `args.max_val` as this script takes them."""
    import torch

    try:
        import lightning.pytorch as pl
        from lightning.pytorch.tuner import Tuner
    except ImportError:
        import pytorch_lightning as pl
        from pytorch_lightning.tuner import Tuner

    if loss_of is None:
        cross_entropy = torch.nn.CrossEntropyLoss()

        def loss_of(model, batch):
            inputs, labels = batch
            return cross_entropy(model(inputs), labels)

    class Module(pl.LightningModule):
        """The training step as a LightningModule; records each of the finder's trials."""

        def __init__(self, batch_size):
            super().__init__()
            self.batch_size = batch_size
            self.model = make_model()
            self.trials = []

        def on_train_start(self):
            now = time.perf_counter()
            self.trials.append({"batch_size": self.batch_size, "steps": 0, "start": now, "end": now})

        def training_step(self, batch, batch_idx):
            return loss_of(self.model, batch)

        def on_train_batch_end(self, outputs, batch, batch_idx):
            self.trials[-1]["steps"] += 1
            self.trials[-1]["end"] = time.perf_counter()

        def configure_optimizers(self):
            return make_optimizer(self.parameters())

        def train_dataloader(self):
            return make_loader(self.batch_size)

    module = Module(args.init_val)
    trainer = pl.Trainer(
        accelerator="gpu",
        devices=1,
        precision=lightning_precision(torch, args.amp),
        max_epochs=1,
        benchmark=benchmark,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tempfile.mkdtemp(prefix="lightning-batch-finder-"),
    )
    options = dict(mode="binsearch", init_val=args.init_val,
                   steps_per_trial=args.steps_per_trial, max_trials=args.max_trials)
    accepted = inspect.signature(Tuner(trainer).scale_batch_size).parameters
    if "margin" in accepted:
        options["margin"] = 0.0
    if "max_val" in accepted:
        options["max_val"] = args.max_val
    search_started = time.perf_counter()
    answer = Tuner(trainer).scale_batch_size(module, **options)
    finished = time.perf_counter()
    trials = trial_rows(module.trials, args.steps_per_trial)
    return finder_result("lightning Tuner.scale_batch_size(mode=binsearch)", answer, trials, args,
                         torch, lightning_precision(torch, args.amp),
                         (started, search_started, finished), options,
                         lightning_version=pl.__version__)


def trial_rows(recorded, steps_per_trial):
    """Each trial an in-process finder ran, as the results keep it: its batch, the steps it
    completed, whether it fit (every step a trial takes) and its seconds."""
    return [{"batch_size": t["batch_size"], "steps": t["steps"],
             "fits": t["steps"] >= steps_per_trial, "seconds": round(t["end"] - t["start"], 4)}
            for t in recorded]


def finder_result(finder, answer, trials, args, torch, precision, times, options, **versions):
    """An in-process finder's result: its answer and trials (trial_rows), the wall time from the
    script's start and of the search (`times`: the script's start, the search's, its end), its
    options and settings, the GPU, and the versions of the framework (`versions`) and PyTorch."""
    started, search_started, finished = times
    return {
        "finder": finder,
        "answer": answer,
        "trials": trials,
        "trial_count": len(trials),
        "wall_s": round(finished - started, 3),
        "search_s": round(finished - search_started, 3),
        "options": options,
        "amp": args.amp,
        "precision": precision,
        "workers": args.workers,
        "gpu": torch.cuda.get_device_name(),
        **versions,
        "torch_version": torch.__version__,
    }


def write_result(result, path):
    """Print the result as JSON, and write it to `path` too when there is one."""
    text = json.dumps(result, indent=2)
    print(text)
    if path:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text + "\n")


def main(argv=None):
    args = parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        sys.exit("lightning_batch_finder.py: PyTorch sees no CUDA GPU")
    limit_memory(torch, args.memory_limit, "lightning_batch_finder.py")
    torch.manual_seed(args.seed)
    result = lightning_finder(
        args,
        make_model=resnet18,
        make_optimizer=lambda parameters: sgd(parameters, args.lr),
        make_loader=lambda batch: data_loader(synthetic_images(DATASET_LENGTH, args.seed), batch,
                                              args.workers, args.pin_memory == "on"),
        benchmark=True,
        started=STARTED,
    )
    write_result(result, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
