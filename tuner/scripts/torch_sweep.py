"""PyTorch eager cross-check of `tuner sweep`: the same MLP (input 256, depth x hidden, 10
classes, Linear+ReLU, cross-entropy), the same optimizer and precision (fp32 matmuls without
TF32, or bf16 autocast), timed per step with CUDA events after warmup. The batch is already on
the GPU, so this is PyTorch's compute step alone, with no data loading: a lower bound on its
step time against which the tuner's whole step (data phase included) is compared.

usage: torch_sweep.py OUT.json [--preset small] [--batch-sizes 1,2,...] [--amp off|on]
                      [--optimizer sgd|adamw] [--steps 30] [--warmup 5]
"""
import argparse
import json
import statistics
import sys

import torch

PRESETS = {"small": (3, 16), "medium": (6, 64), "large": (12, 128)}


def model(depth, hidden, input_dim=256, classes=10):
    layers, width = [], input_dim
    for _ in range(depth):
        layers += [torch.nn.Linear(width, hidden), torch.nn.ReLU()]
        width = hidden
    layers.append(torch.nn.Linear(width, classes))
    return torch.nn.Sequential(*layers).cuda()


def run(preset, batch, amp, optimizer, steps, warmup):
    depth, hidden = PRESETS[preset]
    torch.manual_seed(0)
    net = model(depth, hidden)
    if optimizer == "sgd":
        opt = torch.optim.SGD(net.parameters(), lr=0.05)
    else:
        opt = torch.optim.AdamW(net.parameters(), lr=1e-3, weight_decay=0.01)
    x = torch.randn(batch, 256, device="cuda")
    y = torch.randint(0, 10, (batch,), device="cuda")
    loss_fn = torch.nn.CrossEntropyLoss()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(steps + 1)]

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            loss = loss_fn(net(x), y)
        loss.backward()
        opt.step()

    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    for k in range(steps):
        starts[k].record()
        step()
    starts[steps].record()
    torch.cuda.synchronize()
    ms = [starts[k].elapsed_time(starts[k + 1]) for k in range(steps)]
    med = statistics.median(ms)
    return {"batch": batch, "median_ms": med, "min_ms": min(ms), "max_ms": max(ms),
            "samples_per_s": batch / (med / 1e3)}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--preset", default="small")
    p.add_argument("--batch-sizes", default=",".join(str(1 << k) for k in range(14)))
    p.add_argument("--amp", default="off")
    p.add_argument("--optimizer", default="sgd")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    a = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    rows = [run(a.preset, int(b), a.amp == "on", a.optimizer, a.steps, a.warmup)
            for b in a.batch_sizes.split(",")]
    try:
        doc = json.load(open(a.out))
    except (OSError, ValueError):
        doc = {"torch": torch.__version__, "device": torch.cuda.get_device_name(), "runs": []}
    doc["runs"].append({"preset": a.preset, "amp": a.amp, "optimizer": a.optimizer,
                        "steps": a.steps, "warmup": a.warmup, "timing":
                        "CUDA events per step, batch resident on the GPU (compute only)",
                        "rows": rows})
    json.dump(doc, open(a.out, "w"), indent=1)
    for r in rows:
        print(f"torch {a.preset} amp={a.amp} {a.optimizer} batch {r['batch']:>5}: "
              f"{r['median_ms']:.3f} ms/step, {r['samples_per_s']:.0f} samples/s")


if __name__ == "__main__":
    sys.exit(main())
