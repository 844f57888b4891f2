"""train_vit.py's model and data trained by PyTorch Lightning with DDP on every GPU the process
sees (`Trainer(strategy="ddp", devices="auto")`), each optimizer step reported by the package's
Lightning callback and by nothing else of the tuner's: a data-parallel program as a team writes
it with Lightning, for `tuner autobatch --ranks N` (scripts/tuner-multi-gpu).

    torchrun --nproc-per-node 2 scripts/transformer/lightning_vit_ddp.py --batch-size 128 --amp bf16
    tuner autobatch --ranks 2 --devices 0,1 --amp bf16 -- python3 \
      scripts/transformer/lightning_vit_ddp.py --batch-size {batch_size} --workers {workers} \
      --amp {amp} --steps {steps} --warmup {warmup} --memory-limit 16

Started by torchrun, or by the tuner, which starts the ranks as torchrun does, Lightning reads
each process's place from the environment (LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)
and trains on GPU LOCAL_RANK of those it sees. `--batch-size` is per GPU. Each rank draws its
own images (the seed offset by the rank). `--memory-limit` is each rank's share of its GPU.
"""

import argparse
import os
import sys
import tempfile

import lightning
import torch

from train_loop import add_training_args, data_parallel_rank, loader, positive
from train_vit import images, model

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import perf_lessons.lightning  # noqa: E402  (the repository's package, where it is not installed)


class Classifier(lightning.LightningModule):
    def __init__(self, name):
        super().__init__()
        self.net = model(name)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-4)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_training_args(p, batch_size=64)
    p.add_argument("--accumulation", type=positive, default=1,
                   help="micro-batches per optimizer step (Lightning's accumulate_grad_batches)")
    p.add_argument("--model", default="vit_base_patch16_224")
    args = p.parse_args(argv)
    precision = data_parallel_rank(torch, "lightning_vit_ddp.py", args)
    steps = args.warmup + args.steps
    data = images(args.batch_size * args.accumulation * steps,
                  seed=int(os.environ.get("RANK", "0")))
    trainer = lightning.Trainer(
        accelerator="gpu", devices="auto", strategy="ddp",
        precision={"bf16": "bf16-mixed", "fp16": "16-mixed"}.get(precision, "32-true"),
        max_steps=steps, accumulate_grad_batches=args.accumulation, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        use_distributed_sampler=False,
        default_root_dir=tempfile.mkdtemp(prefix="lightning-vit-ddp-"),
        callbacks=[perf_lessons.lightning.ReportCallback()])
    trainer.fit(Classifier(args.model), loader(data, args.batch_size, args.workers))
    return 0


if __name__ == "__main__":
    sys.exit(main())
