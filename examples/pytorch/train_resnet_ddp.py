"""Train torchvision's ResNet-18 on synthetic images over several GPUs with PyTorch's
DistributedDataParallel (DDP): a data-parallel program for the tuner, one process per GPU.

    torchrun --nproc-per-node 2 train_resnet_ddp.py --batch-size 128 --steps 30 --warmup 5
    tuner autobatch --ranks 2 --devices 0,1 -- python3 train_resnet_ddp.py --batch-size {batch_size} ...

Each process reads its place from the variables torchrun sets (RANK, LOCAL_RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT), which the tuner sets too when it starts the group itself
(`--ranks N`): the process trains on GPU LOCAL_RANK of those it sees. `--batch-size` is per
GPU, as in any DDP program: the optimizer step consumes batch x WORLD_SIZE samples in all.
Every rank reports its own steps through perf_lessons (its own samples, its own peak memory),
each line with its rank; the tuner fits a batch only where every rank fits.

The model, the data and the optimizer are train_resnet.py's; each rank draws its own images
(the seed offset by the rank, as a distributed sampler would give each rank its own share).
Gradients are averaged across ranks in DDP's buckets (25 MiB, the first 1 MiB) during the
backward pass, over NCCL. Steps are timed as in train_resnet.py: each ends with a
synchronize, so step times add up to the loop's wall time. NCCL_NVLS_ENABLE=0 is set before
NCCL starts (NVLink multicast can put a shared host's GPUs out of service); the tuner sets it
for every process too.
"""

import time

STARTED = time.perf_counter()

import contextlib  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

import train_resnet as single  # noqa: E402  (beside this script)

try:
    from perf_lessons import Reporter  # noqa: E402  (installed: pip install . at the root)
except ImportError:
    from perf_lessons_report import Reporter  # noqa: E402  (the one-file copy beside it)


def main(argv=None):
    args = single.parse_args(argv)
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    if not torch.cuda.is_available():
        sys.exit("train_resnet_ddp.py: PyTorch sees no CUDA GPU (check CUDA_VISIBLE_DEVICES)")
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and "MASTER_ADDR" not in os.environ:
        sys.exit("train_resnet_ddp.py: WORLD_SIZE %d without MASTER_ADDR: start it with torchrun "
                 "or `tuner ... --ranks N`" % world)
    torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank)
    dist.init_process_group("nccl", device_id=device)
    try:
        return train(args, torch, dist, DistributedDataParallel, device, rank, world)
    finally:
        dist.destroy_process_group()


def train(args, torch, dist, ddp, device, rank, world):
    report = Reporter()
    free, total = single.limit_memory(torch, args.memory_limit, "train_resnet_ddp.py")
    report.device(name=torch.cuda.get_device_name(device), total_bytes=total, free_bytes=free)
    torch.manual_seed(args.seed)
    torch.backends.cudnn.benchmark = True
    model = ddp(single.resnet18().to(device), device_ids=[device.index])
    optimizer = single.sgd(model.parameters(), args.lr)
    loss_fn = torch.nn.CrossEntropyLoss()
    precision = single.resolve_amp(torch, args.amp)
    dtype = single.autocast_dtype(torch, precision)
    scaler = torch.amp.GradScaler("cuda", enabled=precision == "fp16")

    total_steps = args.warmup + args.steps
    samples_per_step = args.batch_size * args.accumulation
    dataset = single.synthetic_images(samples_per_step * total_steps, args.seed * 1009 + rank)
    loader = single.data_loader(dataset, args.batch_size, args.workers, args.pin_memory == "on")
    batches = iter(loader)

    model.train()
    peaks = single.Peaks(torch, device)
    torch.cuda.synchronize(device)
    last_end = time.perf_counter()
    measured_start = last_end if args.warmup == 0 else None
    loss_value = float("nan")
    for step in range(total_steps):
        wait_s = 0.0
        optimizer.zero_grad(set_to_none=True)
        for micro in range(args.accumulation):
            t0 = time.perf_counter()
            images, labels = next(batches)
            wait_s += time.perf_counter() - t0
            images = images.to(device, non_blocking=True)
            labels = labels.to(device, non_blocking=True)
            # Gradients are averaged across ranks on the last micro-batch only.
            sync = micro + 1 == args.accumulation
            with contextlib.nullcontext() if sync else model.no_sync():
                with torch.autocast("cuda", dtype=dtype, enabled=dtype is not None):
                    loss = loss_fn(model(images), labels) / args.accumulation
                scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        torch.cuda.synchronize(device)
        end = time.perf_counter()
        step_s, last_end = end - last_end, end
        loss_value = loss.item() * args.accumulation
        reserved, allocated = peaks.step()
        measured = step >= args.warmup
        report.step(
            samples=samples_per_step,
            step_s=step_s,
            data_s=wait_s,
            peak_memory_bytes=reserved if measured else None,
            peak_allocated_bytes=allocated if measured else None,
            metrics={"loss": loss_value},
        )
        if step == 0:
            report.model(model.module, optimizer)
        if step + 1 == args.warmup:
            peaks.restart()
            measured_start = time.perf_counter()
            last_end = measured_start

    samples_per_s = samples_per_step * args.steps / (last_end - measured_start)
    reserved = peaks.reserved
    report.end(samples_per_s=samples_per_s, peak_memory_bytes=reserved)
    report.close()
    # Every rank's figure, gathered on rank 0 for one line.
    figures = torch.tensor([samples_per_s, reserved / 1e9], device=device)
    gathered = [torch.zeros_like(figures) for _ in range(world)]
    dist.all_gather(gathered, figures)
    if rank == 0:
        each = ", ".join("%.1f" % g[0].item() for g in gathered)
        print("resnet18 DDP on %d GPU(s), batch %d per GPU x accumulation %d, amp %s: "
              "%.1f samples/s in all (per rank %s) over %d steps after %d warmup, largest "
              "steady peak %.2f GB reserved, last loss %.3f, %.1f s from the start"
              % (world, args.batch_size, args.accumulation, precision,
                 sum(g[0].item() for g in gathered), each, args.steps, args.warmup,
                 max(g[1].item() for g in gathered), loss_value,
                 time.perf_counter() - STARTED))
    return 0


if __name__ == "__main__":
    sys.exit(main())
