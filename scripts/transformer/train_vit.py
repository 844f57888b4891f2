"""A vision transformer training program that the tuner does not ship as an example: timm's
ViT-B/16 with random weights, 1000 classes, AdamW, optional bf16 autocast, on seeded random
224-pixel images. It speaks the tuner's report protocol written out by hand (train_loop.py
beside it: plain `json`, no helper), as a user's own program would, and is what the tuner's
answers on a model it was not built around are measured with (scripts/tuner-vs-lightning).

    python3 scripts/transformer/train_vit.py --batch-size 64 --amp on --steps 20 --warmup 2

The loop and what it reports are train_loop.py's: per step the samples (images), the step time,
its forward/backward/optimizer parts and the peak memory reserved and allocated; after the first step the
bytes of the parameters, their gradients and AdamW's state.
"""

import time

STARTED = time.perf_counter()

import argparse  # noqa: E402
import sys  # noqa: E402

# limit_memory and loader are lightning_vit.py's too
from train_loop import (add_training_args, fork_here, limit_memory, loader,  # noqa: E402,F401
                        setup, train)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_training_args(p, batch_size=32)
    p.add_argument("--model", default="vit_base_patch16_224")
    return p.parse_args(argv)


def images(length, seed=0):
    """`length` seeded random images and labels; one image made per sample, as decoding would."""
    import torch
    from torch.utils.data import Dataset

    class Images(Dataset):
        def __len__(self):
            return length

        def __getitem__(self, i):
            g = torch.Generator().manual_seed(seed * 1_000_003 + i)
            return torch.randn(3, 224, 224, generator=g), int(torch.randint(1000, (1,), generator=g))

    return Images()


def model(name):
    """`name` from timm, randomly initialized (seeded) on the CPU."""
    import timm
    import torch

    torch.manual_seed(0)
    return timm.create_model(name, pretrained=False, num_classes=1000)


def main(argv=None):
    args = parse_args(argv)
    net = model(args.model)
    # Under the tuner each trial starts here, forked (the script must call fork_here itself):
    # the model above is built once.
    started = time.perf_counter() if fork_here() else STARTED
    args = parse_args(argv)  # the trial's own
    torch, report = setup("train_vit.py", args)
    loss_fn = torch.nn.CrossEntropyLoss()
    return train(args, torch, report, net, images,
                 lambda net, batch: loss_fn(net(batch[0]), batch[1]), args.model, started)


if __name__ == "__main__":
    sys.exit(main())
