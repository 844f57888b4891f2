"""PyTorch Lightning's batch finder on train_vit.py's model, data and optimizer, for comparison
with `tuner autobatch`: `Tuner.scale_batch_size(mode="binsearch")` doubles the batch from
`--init-val` until the first out-of-memory, then bisects, every trial `--steps-per-trial`
training steps inside this one process. It prints (and writes with --json) its answer, each
trial, and its wall time from the start of this script (imports included) and of the search.

    python3 scripts/transformer/lightning_vit.py --amp on --memory-limit 12 --json out.json
"""

import time

STARTED = time.perf_counter()

import os  # noqa: E402
import sys  # noqa: E402

from train_vit import images, limit_memory, loader, model  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "examples", "pytorch"))
from lightning_batch_finder import finder_parser, lightning_finder, write_result  # noqa: E402


def main():
    p = finder_parser(__doc__.split("\n\n")[0], workers=2, amp="on")
    p.add_argument("--model", default="vit_base_patch16_224")
    args = p.parse_args()
    import torch

    limit_memory(torch, args.memory_limit)
    torch.manual_seed(0)
    result = lightning_finder(
        args,
        make_model=lambda: model(args.model),
        make_optimizer=lambda parameters: torch.optim.AdamW(parameters, lr=1e-4),
        make_loader=lambda batch: loader(images(10_000_000), batch, args.workers),
        benchmark=None,
        started=STARTED,
    )
    write_result({"model": args.model, **result}, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
