#!/usr/bin/env python3
"""How many CPU threads a forked trial's PyTorch runs, and what that costs when trials build
their models side by side. A parent imports torch and timm on every core, as the tuner's fork
server does; its children, each pinned to 4 cores, build ViT-B/16 on the CPU (timm initialises
the weights there): one alone on every core, then four at once on cores 0-3, 4-7, 8-11 and
12-15, first with the thread count they inherit, then with torch.set_num_threads(4), as the
fork server now sets it. Prints one JSON line; needs 16 cores:

    python3 scripts/transformer/forked_threads.py
    taskset -c 0-3 python3 -c "import torch; print(torch.get_num_threads())"  # a spawned one
"""
import json
import os
import tempfile
import time

import timm
import torch


def child(cores, fix, path):
    os.sched_setaffinity(0, cores)
    inherited = torch.get_num_threads()
    if fix:
        torch.set_num_threads(len(cores))
    start = time.time()
    timm.create_model("vit_base_patch16_224")
    with open(path, "w") as f:
        json.dump({"threads_inherited": inherited, "threads": torch.get_num_threads(),
                   "build_s": round(time.time() - start, 2)}, f)
    os._exit(0)


def main():
    out = {"unpinned_threads": torch.get_num_threads(), "cores": len(os.sched_getaffinity(0))}
    folder = tempfile.mkdtemp()
    for fix in (False, True):
        for n in (1, 4):
            paths = [os.path.join(folder, "%d-%d-%d.json" % (fix, n, i)) for i in range(n)]
            pids = []
            for i, path in enumerate(paths):
                cores = list(range(4 * i, 4 * i + 4)) if n > 1 else sorted(os.sched_getaffinity(0))
                pid = os.fork()
                if pid == 0:
                    child(cores, fix, path)
                pids.append(pid)
            for pid in pids:
                os.waitpid(pid, 0)
            out["fix=%s,n=%d" % (fix, n)] = [json.load(open(p)) for p in paths]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
