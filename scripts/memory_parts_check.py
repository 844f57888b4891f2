"""Where the memory goes, checked against PyTorch's own counts on a GPU.

    python3 scripts/memory_parts_check.py [--json FILE] [--tuner MODEL=FILE ...]

For ResNet-18 (examples/pytorch/train_resnet.py's model and SGD with momentum, fp32) and
ViT-B/16 (scripts/transformer/train_vit.py's timm model and AdamW, bf16 autocast), each built in
this process on the GPU and counted the way its training program counts it for its model line:

- parameters: the count against `torch.cuda.memory_allocated()` after the model is moved to the
  GPU, less the model's buffers (batch-norm statistics);
- gradients and optimizer state: their sum against `memory_allocated()` after the first optimizer
  step less before it. A forward and backward at a small batch ran first, and their gradients
  were set to None, so the libraries' workspaces already existed before; the step's inputs
  exist on both sides;
- with `--tuner resnet=FILE` or `--tuner vit=FILE` (the JSON of `tuner memory` on that training
  program): every trial's model line equals the count here, and every batch's activations and
  workspace (its peak less the three parts) is above zero.

Each side is read from the allocator's snapshot (`torch.cuda.memory_snapshot()`): the blocks that
appeared, each matched to the tensor whose storage it holds, and the bytes each block was asked
for (`requested_size`; a block itself is rounded up to 512 bytes, and a large one may keep up to
1 MB more when the rest of a cached segment is too small to split off). A count may sit under
what its tensors asked for by at most 512 bytes per tensor: that is the tolerance. Blocks that
appeared but hold none of the counted tensors (a library's workspace, a buffer's statistics) are
not the parts the model line counts; they are listed with their sizes beside the check, not in
it. Prints a table; exit 0 when every check holds, 1 when one does not, 2 without PyTorch, timm
or a GPU.
"""

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "python"), str(ROOT / "examples" / "pytorch"),
                str(ROOT / "scripts" / "transformer")]

ROUNDING = 512


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", metavar="FILE", help="write the counts and the checks here")
    p.add_argument("--tuner", action="append", default=[], metavar="MODEL=FILE",
                   help="`tuner memory` JSON of resnet's or vit's training program")
    args = p.parse_args(argv)
    tuner = {}
    for item in args.tuner:
        model, _, path = item.partition("=")
        if model not in ("resnet", "vit") or not path:
            p.error("--tuner takes resnet=FILE or vit=FILE, not %r" % item)
        tuner[model] = path
    args.tuner = tuner
    return args


def resnet(torch):
    import train_resnet
    from perf_lessons.report import model_bytes

    net = train_resnet.resnet18().cuda().train()
    return net, train_resnet.sgd(net.parameters(), 0.1), False, model_bytes


def vit(torch):
    import train_loop
    import train_vit

    net = train_vit.model("vit_base_patch16_224").cuda().train()
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-4)
    return net, optimizer, True, lambda n, o: train_loop.model_bytes(torch, n, o)


def step(torch, net, optimizer, batch, amp, with_optimizer):
    x = torch.randn(batch, 3, 224, 224, device="cuda")
    y = torch.randint(1000, (batch,), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        loss = torch.nn.functional.cross_entropy(net(x), y)
    loss.backward()
    if with_optimizer:
        optimizer.step()
    del loss, x, y
    torch.cuda.synchronize()


def blocks(torch):
    """The allocator's live blocks, as (address, size, bytes requested) triples."""
    live = set()
    for segment in torch.cuda.memory_snapshot():
        address = segment["address"]
        for block in segment["blocks"]:
            if block["state"] == "active_allocated":
                live.add((block.get("address", address), block["size"],
                          block.get("requested_size", block["size"])))
            address += block["size"]
    return live


def attribute(new, tensors):
    """The bytes requested by the new blocks that hold `tensors`, and the sizes of the other new
    blocks."""
    starts = {t.untyped_storage().data_ptr() for t in tensors}
    held, others = 0, []
    for address, size, requested in new:
        if any(address <= s < address + size for s in starts):
            held += requested
        else:
            others.append(size)
    return held, sorted(others, reverse=True)


def measure(torch, name, build):
    """Build `name` on the GPU and count it both ways."""
    torch.cuda.empty_cache()
    torch.cuda.synchronize()
    start = blocks(torch)
    net, optimizer, amp, count = build(torch)
    torch.cuda.synchronize()
    parameters = list(net.parameters())
    parameters_allocated, moved_others = attribute(blocks(torch) - start, parameters)

    step(torch, net, optimizer, 2, amp, with_optimizer=False)
    net.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    before = blocks(torch)
    step(torch, net, optimizer, 8, amp, with_optimizer=True)
    counted = count(net, optimizer)
    grads = [p.grad for p in parameters if p.grad is not None]
    states = [t for s in optimizer.state.values() for t in s.values()
              if torch.is_tensor(t) and t.is_cuda]
    gradients_and_state_allocated, step_others = attribute(blocks(torch) - before, grads + states)
    result = {
        "model": name,
        "counted": counted,
        "parameters_allocated": parameters_allocated,
        "parameter_tensors": len(parameters),
        "other_blocks_of_the_move": moved_others,
        "gradients_and_state_allocated": gradients_and_state_allocated,
        "gradient_and_state_tensors": len(grads) + len(states),
        "other_blocks_of_the_first_step": step_others,
    }
    del net, optimizer, parameters, grads, states
    torch.cuda.synchronize()
    return result


def within(counted, allocated, tensors):
    return 0 <= allocated - counted <= ROUNDING * tensors


def others(sizes):
    """Blocks that hold none of the counted tensors, in words."""
    if not sizes:
        return "none"
    return "%d blocks, %d bytes (largest %d)" % (len(sizes), sum(sizes), sizes[0])


def check_tuner(result, path):
    """The trials' model lines against the count, and the rest of each peak above zero."""
    with open(path, encoding="utf-8") as f:
        report = json.load(f)
    problems = []
    lines = [t["measured"].get("model") for t in report.get("trials", [])
             if t.get("measured", {}).get("model") is not None]
    if not lines:
        problems.append("%s: no trial sent a model line" % path)
    for line in lines:
        if any(line.get(k) != v for k, v in result["counted"].items()):
            problems.append("%s: a trial's model line %s is not the count %s"
                            % (path, line, result["counted"]))
            break
    for precision in report.get("precisions", []):
        for part in precision.get("parts", []):
            if not part.get("activations_bytes"):
                problems.append("%s: batch %s has no activations above its parts"
                                % (path, part.get("batch_size")))
    return problems


def main(argv=None):
    args = parse_args(argv)
    try:
        import torch
    except ImportError:
        print("memory_parts_check.py: PyTorch is not installed", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("memory_parts_check.py: PyTorch sees no CUDA GPU", file=sys.stderr)
        return 2
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)
    results, problems = [], []
    for name, build in (("resnet", resnet), ("vit", vit)):
        try:
            result = measure(torch, name, build)
        except ImportError as e:
            print("memory_parts_check.py: %s needs %s" % (name, e.name), file=sys.stderr)
            return 2
        c = result["counted"]
        result["parameters_hold"] = within(c["parameter_bytes"], result["parameters_allocated"],
                                           result["parameter_tensors"])
        result["gradients_and_state_hold"] = within(
            c["gradient_bytes"] + c["optimizer_state_bytes"],
            result["gradients_and_state_allocated"],
            result["gradient_and_state_tensors"])
        if not result["parameters_hold"]:
            problems.append("%s: parameters counted %d, allocated %d"
                            % (name, c["parameter_bytes"], result["parameters_allocated"]))
        if not result["gradients_and_state_hold"]:
            problems.append("%s: gradients and optimizer state counted %d, allocated %d"
                            % (name, c["gradient_bytes"] + c["optimizer_state_bytes"],
                               result["gradients_and_state_allocated"]))
        if name in args.tuner:
            found = check_tuner(result, args.tuner[name])
            result["tuner"] = {"file": args.tuner[name], "holds": not found}
            problems += found
        results.append(result)

    print("| model | parameters counted | their blocks asked for | gradients + optimizer state "
          "counted | their blocks asked for | holds | other blocks: of the move, of the first step |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        c = r["counted"]
        print("| %s | %d | %d | %d | %d | %s | %s; %s |" % (
            r["model"], c["parameter_bytes"], r["parameters_allocated"],
            c["gradient_bytes"] + c["optimizer_state_bytes"], r["gradients_and_state_allocated"],
            "yes" if r["parameters_hold"] and r["gradients_and_state_hold"] else "NO",
            others(r["other_blocks_of_the_move"]), others(r["other_blocks_of_the_first_step"])))
    for p in problems:
        print("FAILED: " + p)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "tolerance_bytes_per_tensor": ROUNDING, "models": results,
                       "problems": problems}, f, indent=2)
            f.write("\n")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
