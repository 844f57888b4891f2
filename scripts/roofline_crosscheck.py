"""PyTorch's device-to-device copy on a 2 GiB tensor, the figure the roofline's copy ceiling is
held to (at least 95% of it). Bytes read + written, median of CUDA-event timings.

python3 scripts/roofline_crosscheck.py OUT.json
"""
import json
import statistics
import sys

import torch

n = (2 << 30) // 4
x = torch.randn(n, device="cuda")
y = torch.empty_like(x)
for _ in range(10):
    y.copy_(x)
times = []
for _ in range(100):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    y.copy_(x)
    e.record()
    e.synchronize()
    times.append(s.elapsed_time(e) / 1e3)
med = statistics.median(times)
res = {"torch": torch.__version__, "device": torch.cuda.get_device_name(), "bytes": 2 * x.numel() * 4,
       "median_s": med, "copy_gbps": 2 * x.numel() * 4 / med / 1e9}
assert torch.equal(x, y)
print(json.dumps(res, indent=1))
if len(sys.argv) > 1:
    json.dump(res, open(sys.argv[1], "w"), indent=1)
