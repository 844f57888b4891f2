"""train_lm.py's model and data trained by Hugging Face's Trainer, with DDP when started as a
group (hf_lm.py's Trainer arguments, without its batch finder), each optimizer step reported by
the package's Transformers callback and by nothing else of the tuner's: a data-parallel program
as a team writes it with the Trainer, for `tuner autobatch --ranks N` (scripts/tuner-multi-gpu).

    torchrun --nproc-per-node 2 scripts/transformer/hf_lm_ddp.py --batch-size 16 --amp bf16
    tuner autobatch --ranks 2 --devices 0,1 --amp bf16 -- python3 \
      scripts/transformer/hf_lm_ddp.py --batch-size {batch_size} --workers {workers} \
      --amp {amp} --steps {steps} --warmup {warmup} --memory-limit 16

Started by torchrun, or by the tuner, which starts the ranks as torchrun does, the Trainer reads
each process's place from the environment and trains on GPU LOCAL_RANK of those it sees, the
data split among the ranks by its distributed sampler. `--batch-size` is per GPU.
`--memory-limit` is each rank's share of its GPU.
"""

import argparse
import os
import sys

import torch
import transformers

from hf_lm import sequences, training_arguments
from train_lm import SHAPES, add_model_args, model
from train_loop import add_training_args, data_parallel_rank, positive

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import perf_lessons.hf  # noqa: E402  (the repository's package, where it is not installed)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_training_args(p, batch_size=16)
    p.add_argument("--accumulation", type=positive, default=1,
                   help="micro-batches per optimizer step (the Trainer's gradient_accumulation_steps)")
    add_model_args(p)
    args = p.parse_args(argv)
    precision = data_parallel_rank(torch, "hf_lm_ddp.py", args)
    steps = args.warmup + args.steps
    world = int(os.environ.get("WORLD_SIZE", "1"))
    training = training_arguments(transformers, precision, args.workers,
                                  per_device_train_batch_size=args.batch_size, max_steps=steps,
                                  gradient_accumulation_steps=args.accumulation)
    samples = args.batch_size * args.accumulation * world * steps
    data = sequences(samples, args.seq_len, SHAPES[args.model]["vocab_size"])
    transformers.Trainer(model=model(args.model, args.seq_len), args=training, train_dataset=data,
                         callbacks=[perf_lessons.hf.ReportCallback()]).train()
    return 0


if __name__ == "__main__":
    sys.exit(main())
