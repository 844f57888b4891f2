"""Independent timings of the operations the harness measures, for cross-checking it.

Run on the GPU machine: python3 scripts/torch_crosscheck.py OUT.json
triton.testing.do_bench times with CUDA events and flushes L2 before every repetition (cold),
so compare with the harness's --cold figures.
"""
import json
import sys

import torch
import triton.testing

results = {"torch": torch.__version__, "triton": triton.__version__, "device": torch.cuda.get_device_name()}

n = 10 * 2**20
a = torch.randn(n, device="cuda")
b = torch.randn(n, device="cuda")
c = torch.empty_like(a)
ms = triton.testing.do_bench(lambda: torch.add(a, b, out=c), warmup=100, rep=2000, return_mode="median")
results["vector_add_10M_do_bench_median_ms"] = ms
assert torch.allclose(c, a + b)
print(json.dumps(results, indent=1))
if len(sys.argv) > 1:
    with open(sys.argv[1], "w") as f:
        json.dump(results, f, indent=1)
