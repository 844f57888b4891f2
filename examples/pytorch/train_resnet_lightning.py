"""train_resnet.py's model and data trained by PyTorch Lightning, every optimizer step reported
to the tuner by one callback of the installed package (`pip install .` at the repository root,
then `pip install lightning`):

    trainer = pl.Trainer(..., callbacks=[perf_lessons.lightning.ReportCallback()])

    tuner sweep --batch-sizes 64,128,256 --workers 4 -- python3 \
      examples/pytorch/train_resnet_lightning.py --batch-size {batch_size} --workers {workers} \
      --amp {amp} --accumulation {accumulation} --steps {steps} --warmup {warmup}

The callback times each step from the end of the previous one (waiting for the GPU), reports
the batch's first dimension times the micro-batches of the step, PyTorch's peak memory and,
before the first step, the GPU; outside the tuner it does nothing. `--amp` takes what
train_resnet.py takes: bf16 is Lightning's "bf16-mixed", fp16 its "16-mixed" (with a gradient
scaler), `on` the best the GPU has; accumulation is its `accumulate_grad_batches`.
"""

import argparse
import sys
import tempfile

import perf_lessons
from train_resnet import (
    add_amp, data_loader, lightning_precision, non_negative, positive, resnet18, sgd,
    synthetic_images)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch-size", type=positive, default=64, help="samples per micro-batch")
    p.add_argument("--workers", type=non_negative, default=4, help="data-loader worker processes")
    add_amp(p)
    p.add_argument("--accumulation", type=positive, default=1,
                   help="micro-batches per optimizer step (gradient accumulation)")
    p.add_argument("--steps", type=positive, default=30, help="measured optimizer steps")
    p.add_argument("--warmup", type=non_negative, default=5,
                   help="optimizer steps run before measuring")
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--seed", type=non_negative, default=0)
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    # The frameworks are imported after the arguments are read: a bad flag is answered at once.
    import torch

    try:
        import lightning.pytorch as pl
    except ImportError:
        import pytorch_lightning as pl

    if not torch.cuda.is_available():
        sys.exit("train_resnet_lightning.py: PyTorch sees no CUDA GPU (check CUDA_VISIBLE_DEVICES)")

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.model = resnet18()
            self.loss = torch.nn.CrossEntropyLoss()

        def training_step(self, batch, batch_idx):
            inputs, labels = batch
            return self.loss(self.model(inputs), labels)

        def configure_optimizers(self):
            return sgd(self.parameters(), args.lr)

    steps = args.warmup + args.steps
    dataset = synthetic_images(args.batch_size * args.accumulation * steps, args.seed)
    torch.manual_seed(args.seed)
    trainer = pl.Trainer(
        accelerator="gpu",
        devices=1,
        precision=lightning_precision(torch, args.amp),
        max_steps=steps,
        accumulate_grad_batches=args.accumulation,
        benchmark=True,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tempfile.mkdtemp(prefix="train-resnet-lightning-"),
        callbacks=[perf_lessons.lightning.ReportCallback()],
    )
    trainer.fit(Module(), data_loader(dataset, args.batch_size, args.workers, pin_memory=True))


if __name__ == "__main__":
    main()
