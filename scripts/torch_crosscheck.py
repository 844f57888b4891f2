"""Independent timings of the operations the harness measures, for cross-checking it.

Run on the GPU machine: python3 scripts/torch_crosscheck.py OUT.json
triton.testing.do_bench times one call between CUDA events and clears L2 (by zeroing a
256 MB buffer, which leaves dirty lines) before every repetition. Two operations: torch.add
(PyTorch's own vectorized kernel) and our exact vector_add kernel launched through CuPy.
"""
import json
import pathlib
import sys

import cupy
import torch
import triton.testing

results = {"torch": torch.__version__, "triton": triton.__version__, "device": torch.cuda.get_device_name()}

n = 10 * 2**20
a = torch.randn(n, device="cuda")
b = torch.randn(n, device="cuda")
c = torch.empty_like(a)
bench = lambda f: triton.testing.do_bench(f, warmup=100, rep=2000, return_mode="median")
results["torch_add_10M_do_bench_median_us"] = 1e3 * bench(lambda: torch.add(a, b, out=c))
assert torch.allclose(c, a + b)

src = pathlib.Path(__file__).resolve().parent.parent / "ch1-intensity/kernels/intensity.cu"
module = cupy.RawModule(code=src.read_text(), options=("--std=c++17",))
kernel = module.get_function("vector_add")
ca, cb, cc = (cupy.from_dlpack(t) for t in (a, b, c))
grid = ((n + 255) // 256,)
launch = lambda: kernel(grid, (256,), (ca, cb, cc, cupy.uint64(n)))
results["our_vector_add_10M_do_bench_median_us"] = 1e3 * bench(launch)
torch.cuda.synchronize()
assert torch.allclose(c, a + b)
print(json.dumps(results, indent=1))
if len(sys.argv) > 1:
    with open(sys.argv[1], "w") as f:
        json.dump(results, f, indent=1)
