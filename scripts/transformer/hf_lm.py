"""Hugging Face Trainer's batch finder on train_lm.py's model, data and optimizer, for comparison
with `tuner autobatch`: `TrainingArguments(auto_find_batch_size=True)` starts training at
`--init-val` and, at each out-of-memory, starts again at nine tenths of the batch (accelerate's
`find_executable_batch_size`; it never grows), inside this one process; the first batch that runs
`--steps-per-trial` steps is its answer. It prints (and writes with --json) the answer, each
trial (batch size, steps completed, whether it fit, seconds) and its wall time from the start of
this script (imports included) and of the search, in the shape of lightning_lm.py's.

    python3 scripts/transformer/hf_lm.py --amp on --memory-limit 16 --json out.json

The Trainer runs on one GPU, the first that CUDA_VISIBLE_DEVICES names (the first of the host
when it names none): in one process on several it would spread each batch over all of them.
Its optimizer is PyTorch's AdamW at train_lm.py's learning rate, its loss the model's own.
"""

import time

STARTED = time.perf_counter()

import argparse  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402

from train_lm import SHAPES, add_model_args, model, tokens  # noqa: E402
from train_loop import limit_memory, positive, precision_of  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "examples", "pytorch"))
from lightning_batch_finder import finder_result, trial_rows, write_result  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--amp", choices=["off", "bf16", "fp16", "on"], default="on")
    p.add_argument("--workers", type=int, default=2)
    add_model_args(p)
    p.add_argument("--init-val", type=positive, default=64,
                   help="the first batch tried (the answer is never above it)")
    p.add_argument("--steps-per-trial", type=positive, default=3)
    p.add_argument("--memory-limit", type=float, metavar="GIB")
    p.add_argument("--json", metavar="FILE")
    return p.parse_args(argv)


def sequences(length, seq_len, vocab_size):
    """train_lm.py's sequences as the Trainer takes them: each its own labels."""
    from torch.utils.data import Dataset

    ids = tokens(length, seq_len, vocab_size)

    class Sequences(Dataset):
        def __len__(self):
            return length

        def __getitem__(self, i):
            x = ids[i]
            return {"input_ids": x, "labels": x}

    return Sequences()


def training_arguments(transformers, precision, workers, **options):
    """The Trainer's arguments: train_lm.py's optimizer (PyTorch's AdamW at its learning rate)
    in `precision`, `workers` loader workers, nothing saved or logged; `options` on top."""
    return transformers.TrainingArguments(
        output_dir=tempfile.mkdtemp(prefix="hf-trainer-"),
        bf16=precision == "bf16", fp16=precision == "fp16",
        optim="adamw_torch", learning_rate=1e-4, weight_decay=0.01, lr_scheduler_type="constant",
        dataloader_num_workers=workers, dataloader_pin_memory=True,
        dataloader_drop_last=True, save_strategy="no", logging_strategy="no", report_to="none",
        disable_tqdm=True, seed=0, **options)


def recorder():
    """A TrainerCallback that records each of the finder's trials."""
    from transformers import TrainerCallback

    class Trials(TrainerCallback):
        def __init__(self):
            self.trials = []

        def on_train_begin(self, args, state, control, **kwargs):
            now = time.perf_counter()
            batch = getattr(state, "train_batch_size", None) or args.per_device_train_batch_size
            self.trials.append({"batch_size": batch, "steps": 0, "start": now, "end": now})

        def on_step_end(self, args, state, control, **kwargs):
            self.trials[-1]["steps"] += 1
            self.trials[-1]["end"] = time.perf_counter()

    return Trials()


def main(argv=None):
    args = parse_args(argv)
    os.environ["CUDA_VISIBLE_DEVICES"] = \
        (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0]
    import torch
    import transformers

    if not torch.cuda.is_available():
        sys.exit("hf_lm.py: PyTorch sees no CUDA GPU")
    limit_memory(torch, args.memory_limit)
    torch.manual_seed(0)
    precision, _ = precision_of(torch, args.amp, "cuda")
    options = dict(auto_find_batch_size=True, per_device_train_batch_size=args.init_val,
                   max_steps=args.steps_per_trial)
    training = training_arguments(transformers, precision, args.workers, **options)
    trials = recorder()
    data = sequences(10_000_000, args.seq_len, SHAPES[args.model]["vocab_size"])
    trainer = transformers.Trainer(model=model(args.model, args.seq_len), args=training,
                                   train_dataset=data, callbacks=[trials])
    search_started = time.perf_counter()
    trainer.train()
    finished = time.perf_counter()
    rows = trial_rows(trials.trials, args.steps_per_trial)
    fitting = [r["batch_size"] for r in rows if r["fits"]]
    result = finder_result("transformers Trainer(auto_find_batch_size=True)",
                           fitting[-1] if fitting else None, rows, args, torch, precision,
                           (STARTED, search_started, finished), options,
                           transformers_version=transformers.__version__)
    result.update(model=args.model, seq_len=args.seq_len)
    write_result(result, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
