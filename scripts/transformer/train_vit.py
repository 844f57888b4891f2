"""A vision transformer training program that the tuner does not ship as an example: timm's
ViT-B/16 with random weights, 1000 classes, AdamW, optional bf16 autocast, on seeded random
224-pixel images. It speaks the tuner's report protocol written out by hand (plain `json`, no
helper), as a user's own program would, and is what the tuner's answers on a model it was not
built around are measured with (scripts/tuner-vs-lightning).

    python3 scripts/transformer/train_vit.py --batch-size 64 --amp on --steps 20 --warmup 2

Each step: one batch from a DataLoader, forward and loss under autocast, backward, AdamW step,
synchronize. Reported per step: samples, step time (host clock between synchronized step ends),
forward/backward/optimizer times (CUDA events) and the peak memory PyTorch reserved so far.
After the first step, once AdamW has made its two moments, one model line: the bytes of the
parameters, of their gradients (each parameter that takes one, at its dtype: the gradients are
set to None after every step) and of the optimizer's state on the GPU.
"""

import argparse
import json
import os
import sys
import time

STARTED = time.perf_counter()


def positive(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1, got %s" % text)
    return value


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch-size", type=positive, default=32)
    p.add_argument("--workers", type=int, default=2)
    # on: bf16 where the GPU has it, else fp16 (with a gradient scaler); the tuner passes it
    # resolved.
    p.add_argument("--amp", choices=["off", "bf16", "fp16", "on"], default="on")
    p.add_argument("--steps", type=positive, default=20)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--model", default="vit_base_patch16_224")
    p.add_argument("--memory-limit", type=float, metavar="GIB",
                   help="use at most this much of the GPU's memory (a share of a shared GPU)")
    return p.parse_args(argv)


class Report:
    """The protocol's lines, appended to $PERF_LESSONS_REPORT (nothing outside the tuner)."""

    def __init__(self):
        path = os.environ.get("PERF_LESSONS_REPORT")
        self.file = open(path, "a", encoding="utf-8") if path else None

    def line(self, **fields):
        if self.file:
            self.file.write(json.dumps(fields) + "\n")
            self.file.flush()


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


def loader(dataset, batch_size, workers):
    from torch.utils.data import DataLoader

    return DataLoader(dataset, batch_size=batch_size, num_workers=workers, pin_memory=True,
                      drop_last=True, persistent_workers=workers > 0)


def model(name):
    import timm

    return timm.create_model(name, pretrained=False, num_classes=1000)


def model_bytes(torch, net, optimizer):
    """The model line's three counts: parameters, their gradients, the optimizer's state on
    the GPU (AdamW's step counts are host scalars)."""
    def size(t):
        return t.numel() * t.element_size()

    parameters = list(net.parameters())
    state = [t for s in optimizer.state.values() for t in s.values()
             if torch.is_tensor(t) and t.is_cuda]
    return {
        "parameter_bytes": sum(size(p) for p in parameters),
        "gradient_bytes": sum(size(p) for p in parameters if p.requires_grad),
        "optimizer_state_bytes": sum(size(t) for t in state),
    }


def limit_memory(torch, limit_gib):
    free, total = torch.cuda.mem_get_info()
    if limit_gib is None:
        return free, total
    limit = int(limit_gib * 2**30)
    torch.cuda.set_per_process_memory_fraction(min(1.0, limit / total))
    return min(free, limit), total


def main(argv=None):
    args = parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        sys.exit("train_vit.py: PyTorch sees no CUDA GPU")
    report = Report()
    free, total = limit_memory(torch, args.memory_limit)
    report.line(kind="device", name=torch.cuda.get_device_name(), total_bytes=total,
                free_bytes=free)
    torch.manual_seed(0)
    net = model(args.model).cuda().train()
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-4)
    loss_fn = torch.nn.CrossEntropyLoss()
    precision = args.amp
    if precision == "on":
        precision = "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    scaler = torch.amp.GradScaler("cuda", enabled=precision == "fp16")
    steps = args.warmup + args.steps
    batches = iter(loader(images(args.batch_size * steps), args.batch_size, args.workers))

    def event():
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        return e

    torch.cuda.synchronize()
    last = time.perf_counter()
    measured_from = last
    for step in range(steps):
        x, y = next(batches)
        x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
        e0 = event()
        with torch.autocast("cuda", dtype=dtype, enabled=dtype is not None):
            loss = loss_fn(net(x), y)
        e1 = event()
        scaler.scale(loss).backward()
        e2 = event()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        e3 = event()
        e3.synchronize()
        now = time.perf_counter()
        report.line(samples=args.batch_size, step_s=now - last,
                    forward_s=e0.elapsed_time(e1) / 1e3, backward_s=e1.elapsed_time(e2) / 1e3,
                    optimizer_s=e2.elapsed_time(e3) / 1e3,
                    peak_memory_bytes=torch.cuda.max_memory_reserved())
        last = now
        if step == 0:
            report.line(kind="model", **model_bytes(torch, net, optimizer))
        if step + 1 == args.warmup:
            measured_from = now
    rate = args.batch_size * args.steps / (last - measured_from)
    report.line(kind="end", samples_per_s=rate, peak_memory_bytes=torch.cuda.max_memory_reserved())
    print("%s batch %d amp %s: %.1f samples/s, peak %.2f GB reserved, %.1f s from the start"
          % (args.model, args.batch_size, precision, rate, torch.cuda.max_memory_reserved() / 1e9,
             time.perf_counter() - STARTED))
    return 0


if __name__ == "__main__":
    sys.exit(main())
