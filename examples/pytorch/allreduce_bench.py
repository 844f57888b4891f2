#!/usr/bin/env python3
"""All-reduce bus bandwidth with torch.distributed over NCCL, the sizes ch1-data-parallel's
--allreduce measures (1 MiB to 4 GiB by powers of four), fp32 sum: a cross-check of its table on
the same GPUs. torch.distributed reduces in place; ch1-data-parallel times NCCL out of place.

One process per GPU, started by torchrun or by this script itself:

    torchrun --nproc-per-node 2 examples/pytorch/allreduce_bench.py --json torch-allreduce.json
    python3 examples/pytorch/allreduce_bench.py --gpus 2

Each size: warmup calls, then timed samples of several calls each between CUDA events on
rank 0's stream (every rank synchronizes first, so a sample spans the collective); the median
per call is reported as algbw = bytes / time and busbw = algbw * 2(n-1)/n (nccl-tests), which
is undefined for one rank. NCCL_NVLS_ENABLE=0 is set before NCCL starts. Standard library and
torch only; rank 0 prints JSON (and writes it with --json).
"""

import argparse
import json
import os
import statistics
import sys

os.environ["NCCL_NVLS_ENABLE"] = "0"

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

MIN_BYTES = 1 << 20
MAX_BYTES = 4 << 30


def sizes(max_bytes):
    s = MIN_BYTES
    while s <= max_bytes:
        yield s
        s *= 4


def bus_factor(ranks):
    return 2.0 * (ranks - 1) / ranks if ranks >= 2 else None


def measure(args, rank, world):
    torch.cuda.set_device(rank if args.local_rank is None else args.local_rank)
    dist.init_process_group("nccl", rank=rank, world_size=world)
    device = torch.cuda.current_device()
    results = []
    for size in sizes(args.max_size):
        count = size // 4
        gen = torch.Generator(device="cuda").manual_seed(7 + rank)
        send = torch.rand(count, device="cuda", generator=gen) * 2 - 1
        recv = torch.empty_like(send)
        # Checked once: the sum of every rank's input, at sampled elements.
        recv.copy_(send)
        dist.all_reduce(recv)
        idx = torch.arange(0, count, max(1, count // 4096), device="cuda")
        gathered = [torch.empty_like(idx, dtype=torch.float32) for _ in range(world)]
        dist.all_gather(gathered, send[idx].contiguous())
        want = torch.stack(gathered).double().sum(0)
        err = ((recv[idx].double() - want).norm() / want.norm()).item()
        for _ in range(args.warmup):
            recv.copy_(send)
            dist.all_reduce(recv)
        torch.cuda.synchronize()
        samples = []
        for _ in range(args.samples):
            dist.barrier()
            torch.cuda.synchronize()
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(args.calls):
                dist.all_reduce(recv)
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) / 1e3 / args.calls)
        median = statistics.median(samples)
        algbw = size / median
        factor = bus_factor(world)
        results.append(
            {
                "bytes": size,
                "median_s": median,
                "algbw_bytes_per_s": algbw,
                "busbw_bytes_per_s": algbw * factor if factor else None,
                "rel_l2_error": err,
                "verified": err <= 1e-6,
                "samples_s": samples,
            }
        )
    if rank == 0:
        report = {
            "tool": "torch.distributed all_reduce",
            "ranks": world,
            "device": torch.cuda.get_device_name(device),
            "torch": torch.__version__,
            "nccl_version": ".".join(map(str, torch.cuda.nccl.version())),
            "nccl_nvls_enable": os.environ.get("NCCL_NVLS_ENABLE"),
            "op": "fp32 sum, in place (torch.distributed has no out-of-place all_reduce; values may overflow over the timed calls, which does not change the time)",
            "busbw_convention": "nccl-tests: algbw * 2(n-1)/n, undefined for one rank",
            "sizes": results,
        }
        text = json.dumps(report, indent=2)
        print(text)
        if args.json:
            with open(args.json, "w") as f:
                f.write(text + "\n")
    dist.destroy_process_group()
    return all(r["verified"] for r in results)


def spawned(rank, world, args):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(args.port))
    if not measure(args, rank, world):
        sys.exit(1)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gpus", type=int, default=None, help="processes to start (default: every GPU); not with torchrun")
    p.add_argument("--max-size", type=int, default=MAX_BYTES, help="largest message in bytes (4 GiB)")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--samples", type=int, default=20)
    p.add_argument("--calls", type=int, default=5, help="all-reduces per timed sample")
    p.add_argument("--port", type=int, default=29517)
    p.add_argument("--json", default=None)
    args = p.parse_args()
    args.local_rank = None
    if not torch.cuda.is_available():
        print("error: PyTorch sees no CUDA GPU", file=sys.stderr)
        sys.exit(2)
    if "RANK" in os.environ:  # torchrun
        args.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        ok = measure(args, int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]))
        sys.exit(0 if ok else 1)
    world = args.gpus or torch.cuda.device_count()
    if world < 1 or world > torch.cuda.device_count():
        print(f"error: --gpus {world}: {torch.cuda.device_count()} GPU(s) are visible", file=sys.stderr)
        sys.exit(2)
    mp.spawn(spawned, args=(world, args), nprocs=world, join=True)


if __name__ == "__main__":
    main()
