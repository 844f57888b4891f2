"""PyTorch Lightning's batch finder on train_vit.py's model, data and optimizer, for comparison
with `tuner autobatch`: `Tuner.scale_batch_size(mode="binsearch")` doubles the batch from
`--init-val` until the first out-of-memory, then bisects, every trial `--steps-per-trial`
training steps inside this one process. It prints (and writes with --json) its answer, each
trial, and its wall time from the start of this script (imports included) and of the search.

    python3 scripts/transformer/lightning_vit.py --amp on --memory-limit 12 --json out.json
"""

import time

STARTED = time.perf_counter()

import argparse  # noqa: E402
import inspect  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402

from train_vit import images, limit_memory, loader, model  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--amp", choices=["on", "off"], default="on")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--model", default="vit_base_patch16_224")
    p.add_argument("--init-val", type=int, default=2)
    p.add_argument("--steps-per-trial", type=int, default=3)
    p.add_argument("--max-trials", type=int, default=25)
    p.add_argument("--memory-limit", type=float, metavar="GIB")
    p.add_argument("--json", metavar="FILE")
    args = p.parse_args()
    import torch

    try:
        import lightning.pytorch as pl
        from lightning.pytorch.tuner import Tuner
    except ImportError:
        import pytorch_lightning as pl
        from pytorch_lightning.tuner import Tuner

    limit_memory(torch, args.memory_limit)

    class Module(pl.LightningModule):
        def __init__(self, batch_size):
            super().__init__()
            self.batch_size = batch_size
            self.net = model(args.model)
            self.loss = torch.nn.CrossEntropyLoss()
            self.trials = []

        def on_train_start(self):
            now = time.perf_counter()
            self.trials.append({"batch_size": self.batch_size, "steps": 0, "start": now, "end": now})

        def training_step(self, batch, batch_idx):
            x, y = batch
            return self.loss(self.net(x), y)

        def on_train_batch_end(self, outputs, batch, batch_idx):
            self.trials[-1]["steps"] += 1
            self.trials[-1]["end"] = time.perf_counter()

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-4)

        def train_dataloader(self):
            return loader(images(10_000_000), self.batch_size, args.workers)

    torch.manual_seed(0)
    module = Module(args.init_val)
    trainer = pl.Trainer(accelerator="gpu", devices=1,
                         precision="bf16-mixed" if args.amp == "on" else "32-true",
                         max_epochs=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False,
                         default_root_dir=tempfile.mkdtemp(prefix="lightning-vit-"))
    options = dict(mode="binsearch", init_val=args.init_val, steps_per_trial=args.steps_per_trial,
                   max_trials=args.max_trials)
    accepted = inspect.signature(Tuner(trainer).scale_batch_size).parameters
    if "margin" in accepted:
        options["margin"] = 0.0
    if "max_val" in accepted:
        options["max_val"] = 1 << 20
    search_started = time.perf_counter()
    answer = Tuner(trainer).scale_batch_size(module, **options)
    finished = time.perf_counter()
    result = {
        "finder": "lightning Tuner.scale_batch_size(mode=binsearch)",
        "model": args.model,
        "answer": answer,
        "trials": [{"batch_size": t["batch_size"], "steps": t["steps"],
                    "fits": t["steps"] >= args.steps_per_trial,
                    "seconds": round(t["end"] - t["start"], 4)} for t in module.trials],
        "wall_s": round(finished - STARTED, 3),
        "search_s": round(finished - search_started, 3),
        "options": options,
        "amp": args.amp,
        "gpu": torch.cuda.get_device_name(),
        "lightning_version": pl.__version__,
        "torch_version": torch.__version__,
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
