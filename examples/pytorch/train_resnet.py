"""Train torchvision's ResNet-18 on synthetic 224-pixel images: a real training program for the
tuner (the model, the data loader and its worker processes are PyTorch's own).

    python3 train_resnet.py --batch-size 128 --workers 8 --amp on --steps 30 --warmup 5

`--amp` is the precision: `off` (fp32), `bf16` (bf16 autocast), `fp16` (fp16 autocast with a
gradient scaler, which keeps small fp16 gradients from flushing to zero), or `on`: the best the
GPU has, bf16 where it supports it (compute capability 8.0 and later) and fp16 before. Under the
tuner, `{amp}` is already resolved for the trial's GPU (bf16, fp16 or off).

The images are seeded random tensors made in the data loader's workers, one per sample, so the
loader does real work per sample (as decoding would) and `--workers` and `--pin-memory` matter,
without a dataset on disk.

How the step is timed (every step ends with a synchronize, as `loss.item()` in a training loop
would, so step times are contiguous and add up to the loop's wall time):
  - step: the host clock from the end of one synchronized step to the end of the next;
  - data: the host's wait for the loader (host clock) plus the host-to-device copies (CUDA
    events on the training stream);
  - forward, backward, optimizer: CUDA events on the training stream around each phase; with
    accumulation, forward and backward are summed over the micro-batches.
Each step reports two peaks (the warmup steps none): the most PyTorch's caching allocator has
reserved from the device since the warmup (`torch.cuda.max_memory_reserved()`, cached blocks
included, which is what runs out), and the most the step's own tensors held
(`torch.cuda.max_memory_allocated()`, the counters reset after every step). After the warmup
the cache is emptied, so the autotuner's trial workspaces are not counted. The reserved peak
still holds the cached workspaces of the algorithms cuDNN chose, and it chose them by the room
there was, so under a memory cap it climbs towards the cap well before the batch that runs out
(the tuner's trials on an H200 with a 16 GiB share, fp32: 2.70 GB at batch 8, 14.94 GB at
352, the cap at 736, 752 out of memory). The allocated peak grows with the batch as the
activations do (0.39 GB at 8, 8.11 GB at 352, 16.74 GB at 736, 16.82 GB at 744, the largest
that fits): the tuner's batch finder aims by it.
After the first optimizer step it reports where the memory goes (`report.model`: the
bytes of parameters, gradients and SGD's momentum), which `tuner memory` sets against each
batch's peak. Before the model is built the script reports the GPU's name and the memory free once the CUDA
context exists (`torch.cuda.mem_get_info()`): the limit the finder holds the peaks against. At
the end the script prints, and reports, its own samples/s over the steps after warmup.

Every step is reported through the installed perf_lessons package, or without it through the
one-file copy beside this script, perf_lessons_report.py (a no-op outside the tuner), with its
loss as a metric (`tuner sweep --axis lr=0.01,0.1 --pick loss:min -- ... --lr {lr}`). The model,
the data and the optimizer are made by the functions below, which
lightning_batch_finder.py uses too, so both train the same thing.
"""

import time

STARTED = time.perf_counter()

import argparse  # noqa: E402
import sys  # noqa: E402

try:
    from perf_lessons import Reporter  # noqa: E402  (installed: pip install . at the root)
except ImportError:
    from perf_lessons_report import Reporter  # noqa: E402  (the one-file copy beside it)


def positive(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1, got %s" % text)
    return value


def non_negative(text):
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be 0 or more, got %s" % text)
    return value


def gibibytes(text):
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError("must be more than 0 GiB, got %s" % text)
    return value


PRECISIONS = ("off", "bf16", "fp16", "on")


def add_amp(parser):
    parser.add_argument("--amp", choices=PRECISIONS, default="off",
                        help="precision: off (fp32), bf16 or fp16 autocast (fp16 with a gradient "
                             "scaler), or on: the best the GPU has (bf16 where supported, else "
                             "fp16)")


def resolve_amp(torch, amp):
    """The precision `--amp` means on this GPU: `on` is bf16 where the GPU supports it, else
    fp16; any other value is itself."""
    if amp == "on":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    return amp


def autocast_dtype(torch, precision):
    """The autocast dtype of a resolved precision (None: fp32, no autocast)."""
    return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)


def lightning_precision(torch, amp):
    """Lightning's name for `--amp` on this GPU; its "16-mixed" brings the gradient scaler."""
    return {"bf16": "bf16-mixed", "fp16": "16-mixed"}.get(resolve_amp(torch, amp), "32-true")


def add_memory_limit(parser):
    parser.add_argument("--memory-limit", type=gibibytes, metavar="GIB",
                        help="use at most this much of the GPU's memory (PyTorch's per-process "
                             "memory fraction), as on a GPU shared with others")


def limit_memory(torch, limit_gib, program):
    """Cap PyTorch's allocator at `limit_gib` GiB (None: no cap) and return (free, total) bytes
    as this program may use them: the free memory, no more than the cap."""
    free, total = torch.cuda.mem_get_info()
    if limit_gib is None:
        return free, total
    limit = int(limit_gib * 2**30)
    if limit > total:
        sys.exit("%s: --memory-limit %g GiB is more than the GPU's %.1f GiB"
                 % (program, limit_gib, total / 2**30))
    torch.cuda.set_per_process_memory_fraction(limit / total)
    return min(free, limit), total


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch-size", type=positive, default=64, help="samples per micro-batch")
    p.add_argument("--workers", type=non_negative, default=4, help="data-loader worker processes")
    add_amp(p)
    p.add_argument("--pin-memory", choices=["on", "off"], default="on",
                   help="page-locked batches (faster, asynchronous host-to-device copies)")
    p.add_argument("--accumulation", type=positive, default=1,
                   help="micro-batches per optimizer step (gradient accumulation)")
    p.add_argument("--steps", type=positive, default=30, help="measured optimizer steps")
    p.add_argument("--warmup", type=non_negative, default=5,
                   help="optimizer steps run before measuring (cuDNN autotuning, allocator)")
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--seed", type=non_negative, default=0)
    p.add_argument("--deterministic", action="store_true",
                   help="cuDNN's deterministic algorithms, not the fastest it times: the same "
                        "losses on every run, as a grid picked by the loss needs")
    add_memory_limit(p)
    return p.parse_args(argv)


CLASSES = 1000
IMAGE_SIZE = 224


def synthetic_images(length, seed):
    """A dataset of `length` seeded random 224-pixel images and labels, made on demand in the
    loader's workers: sample i is the same in every run."""
    import torch
    from torch.utils.data import Dataset

    class SyntheticImages(Dataset):
        def __len__(self):
            return length

        def __getitem__(self, i):
            g = torch.Generator().manual_seed(seed * 1_000_003 + i)
            image = torch.randn(3, IMAGE_SIZE, IMAGE_SIZE, generator=g)
            label = int(torch.randint(CLASSES, (1,), generator=g))
            return image, label

    return SyntheticImages()


def data_loader(dataset, batch_size, workers, pin_memory):
    from torch.utils.data import DataLoader

    return DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=False,
        num_workers=workers,
        pin_memory=pin_memory,
        drop_last=True,
        persistent_workers=workers > 0,
    )


def resnet18():
    import torchvision

    return torchvision.models.resnet18(num_classes=CLASSES)


def sgd(parameters, lr):
    import torch

    return torch.optim.SGD(parameters, lr=lr, momentum=0.9, weight_decay=1e-4)


class Peaks:
    """A step's two peaks: the most PyTorch's allocator has reserved since the start or the last
    `restart()`, and the most the step's own tensors held (PyTorch's peak counters are reset
    after each step)."""

    def __init__(self, torch, device=None):
        self.cuda, self.device = torch.cuda, device
        self.reserved = 0

    def step(self):
        self.reserved = max(self.reserved, self.cuda.max_memory_reserved(self.device))
        allocated = self.cuda.max_memory_allocated(self.device)
        self.cuda.reset_peak_memory_stats(self.device)
        return self.reserved, allocated

    def restart(self):
        """After the warmup: the autotuner's cached trial workspaces go, the counts start again."""
        self.cuda.empty_cache()
        self.cuda.reset_peak_memory_stats(self.device)
        self.reserved = 0


def main(argv=None):
    args = parse_args(argv)
    # PyTorch is imported after the arguments are read: a bad flag is answered at once.
    import torch

    if not torch.cuda.is_available():
        sys.exit("train_resnet.py: PyTorch sees no CUDA GPU (check CUDA_VISIBLE_DEVICES)")

    report = Reporter()
    device = torch.device("cuda")
    free, total = limit_memory(torch, args.memory_limit, "train_resnet.py")
    report.device(name=torch.cuda.get_device_name(), total_bytes=total, free_bytes=free)
    torch.manual_seed(args.seed)
    # cuDNN times its algorithms and keeps the fastest, which may sum in another order from one
    # run to the next; --deterministic asks for the same algorithm and order every time.
    torch.backends.cudnn.benchmark = not args.deterministic
    torch.backends.cudnn.deterministic = args.deterministic
    model = resnet18().to(device)
    optimizer = sgd(model.parameters(), args.lr)
    loss_fn = torch.nn.CrossEntropyLoss()
    precision = resolve_amp(torch, args.amp)
    dtype = autocast_dtype(torch, precision)
    # fp16's narrow range flushes small gradients to zero: the scaler multiplies the loss before
    # backward and divides the gradients before the step (skipping a step that overflowed).
    scaler = torch.amp.GradScaler("cuda", enabled=precision == "fp16")

    total_steps = args.warmup + args.steps
    samples_per_step = args.batch_size * args.accumulation
    dataset = synthetic_images(samples_per_step * total_steps, args.seed)
    loader = data_loader(dataset, args.batch_size, args.workers, args.pin_memory == "on")
    batches = iter(loader)

    def event():
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        return e

    def seconds(pairs):
        return sum(a.elapsed_time(b) for a, b in pairs) / 1e3

    ready_s = time.perf_counter() - STARTED
    model.train()
    peaks = Peaks(torch)
    allocated_peak = 0
    torch.cuda.synchronize()
    last_end = time.perf_counter()
    measured_start = last_end if args.warmup == 0 else None
    loss_value = float("nan")
    for step in range(total_steps):
        wait_s = 0.0
        copies, forwards, backwards = [], [], []
        optimizer.zero_grad(set_to_none=True)
        for _ in range(args.accumulation):
            t0 = time.perf_counter()
            images, labels = next(batches)
            wait_s += time.perf_counter() - t0
            e0 = event()
            images = images.to(device, non_blocking=True)
            labels = labels.to(device, non_blocking=True)
            e1 = event()
            with torch.autocast("cuda", dtype=dtype, enabled=dtype is not None):
                loss = loss_fn(model(images), labels) / args.accumulation
            e2 = event()
            scaler.scale(loss).backward()
            e3 = event()
            copies.append((e0, e1))
            forwards.append((e1, e2))
            backwards.append((e2, e3))
        o0 = event()
        scaler.step(optimizer)
        scaler.update()
        o1 = event()
        o1.synchronize()
        end = time.perf_counter()
        step_s, last_end = end - last_end, end
        if step == 0:
            first_step_s = end - STARTED
        loss_value = loss.item() * args.accumulation
        reserved, allocated = peaks.step()
        measured = step >= args.warmup
        allocated_peak = max(allocated_peak, allocated if measured else 0)
        report.step(
            samples=samples_per_step,
            step_s=step_s,
            data_s=wait_s + seconds(copies),
            forward_s=seconds(forwards),
            backward_s=seconds(backwards),
            optimizer_s=seconds([(o0, o1)]),
            peak_memory_bytes=reserved if measured else None,
            peak_allocated_bytes=allocated if measured else None,
            metrics={"loss": loss_value},
        )
        if step == 0:
            # Where the memory goes, once SGD has made its momentum buffers.
            report.model(model, optimizer)
        if step + 1 == args.warmup:
            # The steady step's memory from here: the autotuner's trial workspaces go.
            peaks.restart()
            measured_start = time.perf_counter()
            last_end = measured_start

    samples_per_s = samples_per_step * args.steps / (last_end - measured_start)
    reserved = peaks.reserved
    report.end(samples_per_s=samples_per_s, peak_memory_bytes=reserved)
    report.close()
    print(
        "resnet18 batch %d x accumulation %d, workers %d, amp %s, pin_memory %s: "
        "%.1f samples/s over %d steps after %d warmup, steady peak %.2f GB reserved (%.2f GB "
        "allocated) of %.2f GB free at the start, last loss %.3f; from the start %.1f s to "
        "the model and loader ready, %.1f s to the end of the first step"
        % (args.batch_size, args.accumulation, args.workers,
           precision + (" (on)" if args.amp == "on" else ""), args.pin_memory,
           samples_per_s, args.steps, args.warmup, reserved / 1e9,
           allocated_peak / 1e9, free / 1e9, loss_value, ready_s,
           first_step_s)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
