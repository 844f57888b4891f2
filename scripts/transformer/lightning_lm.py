"""PyTorch Lightning's batch finder on train_lm.py's model, data and optimizer, for comparison
with `tuner autobatch`: `Tuner.scale_batch_size(mode="binsearch")` doubles the batch from
`--init-val` until the first out-of-memory, then bisects, every trial `--steps-per-trial`
training steps inside this one process, each step's loss the model's own next-token loss as in
train_lm.py. It prints (and writes with --json) its answer, each trial, and its wall time from
the start of this script (imports included) and of the search.

    python3 scripts/transformer/lightning_lm.py --amp on --memory-limit 12 --json out.json
"""

import time

STARTED = time.perf_counter()

import os  # noqa: E402
import sys  # noqa: E402

from train_lm import SHAPES, add_model_args, loss_of, model, tokens  # noqa: E402
from train_loop import limit_memory, loader  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "examples", "pytorch"))
from lightning_batch_finder import finder_parser, lightning_finder, write_result  # noqa: E402


def main():
    p = finder_parser(__doc__.split("\n\n")[0], workers=2, amp="on")
    add_model_args(p)
    args = p.parse_args()
    import torch

    if not torch.cuda.is_available():
        sys.exit("lightning_lm.py: PyTorch sees no CUDA GPU")
    limit_memory(torch, args.memory_limit)
    torch.manual_seed(0)
    vocab_size = SHAPES[args.model]["vocab_size"]
    result = lightning_finder(
        args,
        make_model=lambda: model(args.model, args.seq_len),
        make_optimizer=lambda parameters: torch.optim.AdamW(parameters, lr=1e-4),
        make_loader=lambda batch: loader(tokens(10_000_000, args.seq_len, vocab_size), batch,
                                         args.workers),
        benchmark=None,
        started=STARTED,
        loss_of=loss_of,
    )
    write_result({"model": args.model, "seq_len": args.seq_len, **result}, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
