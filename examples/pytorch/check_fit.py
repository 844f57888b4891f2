"""Whether batch B fits and B + STEP does not, each in a fresh process of the training script:
the check of a batch finder's answer that does not trust the finder (its own search, its own
reading of the program's end). A run fits when it exits 0; it ran out of memory when it exits
otherwise with "out of memory" in its stderr (any stack's wording of it); anything else is a
failure, which says nothing about memory.

    python3 examples/pytorch/check_fit.py 1896 --amp off --workers 4
    python3 examples/pytorch/check_fit.py 1903 --step 1      # a finder exact to one sample
    python3 examples/pytorch/check_fit.py 336 --repeat 3 --steps 20 --warmup 0 \
        --script scripts/transformer/train_vit.py -- --memory-limit 12

It prints JSON (the batch, whether it fit, the next, whether it fit, each run's exit, seconds and
last line of stderr) and exits 0 when B fits and B + STEP does not, 1 when either answer is the
other way, 2 when a run failed otherwise. Arguments after `--` go to the training script.
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from train_resnet import PRECISIONS, non_negative, positive

HERE = Path(__file__).resolve().parent


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("batch", type=positive, help="the batch to check (a finder's answer)")
    p.add_argument("--step", type=positive, default=8, help="the granularity: B + STEP must fail")
    p.add_argument("--repeat", type=positive, default=1,
                   help="fresh runs at B (each must fit); B + STEP runs once")
    p.add_argument("--parallel", action="store_true",
                   help="start every run at once (each within its own --memory-limit share of "
                        "a GPU large enough for all of them)")
    p.add_argument("--amp", choices=PRECISIONS, default="off",
                   help="the training script's --amp: off, bf16, fp16 or on")
    p.add_argument("--workers", type=non_negative, default=4)
    p.add_argument("--steps", type=positive, default=5, help="measured steps of each run")
    p.add_argument("--warmup", type=non_negative, default=1)
    p.add_argument("--script", default=str(HERE / "train_resnet.py"),
                   help="the training script (default: train_resnet.py beside this one)")
    p.add_argument("--json", metavar="FILE", help="also write the result here")
    argv = list(sys.argv[1:] if argv is None else argv)
    rest = []
    if "--" in argv:
        cut = argv.index("--")
        argv, rest = argv[:cut], argv[cut + 1:]
    args = p.parse_args(argv)
    args.rest = rest
    return args


def start(args, batch):
    """One fresh process of the script at `batch`, started: (batch, process, start time)."""
    command = [sys.executable, args.script, "--batch-size", str(batch), "--workers",
               str(args.workers), "--amp", args.amp, "--steps", str(args.steps),
               "--warmup", str(args.warmup)] + args.rest
    # Outside the tuner: no report file, no trial settings.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PERF_LESSONS_")}
    started = time.perf_counter()
    process = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               errors="replace")
    return batch, process, started


def finish(running):
    """Wait for a started run: (verdict, the run's record)."""
    batch, process, started = running
    _, stderr = process.communicate()
    seconds = time.perf_counter() - started
    lines = [line for line in stderr.splitlines() if line.strip()]
    if process.returncode == 0:
        verdict = "fits"
    elif any("out of memory" in line.lower() for line in lines):
        verdict = "out of memory"
    else:
        verdict = "failed"
    record = {
        "batch": batch,
        "verdict": verdict,
        "exit": process.returncode,
        "seconds": round(seconds, 3),
        "stderr_last_line": lines[-1][:400] if lines else "",
    }
    return verdict, record


def main(argv=None):
    args = parse_args(argv)
    batches = [args.batch] * args.repeat + [args.batch + args.step]
    if args.parallel:
        done = [finish(r) for r in [start(args, b) for b in batches]]
    else:
        done = [finish(start(args, b)) for b in batches]
    at, (second, second_run) = done[:-1], done[-1]
    verdicts = [verdict for verdict, _ in at]
    first = "fits" if all(v == "fits" for v in verdicts) else (
        "failed" if "failed" in verdicts else "out of memory")
    result = {
        "script": args.script,
        "parallel": args.parallel,
        "batch": args.batch,
        "steps": args.steps + args.warmup,
        "fits": first == "fits",
        "fits_runs": sum(v == "fits" for v in verdicts),
        "runs_at_batch": args.repeat,
        "next": args.batch + args.step,
        "next_fits": second == "fits",
        "exact": first == "fits" and second == "out of memory",
        "runs": [record for _, record in at] + [second_run],
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    if "failed" in (first, second):
        return 2
    return 0 if result["exact"] else 1


if __name__ == "__main__":
    sys.exit(main())
