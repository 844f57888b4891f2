"""torch.bmm on the ch1-gemm shapes, to cross-check the strided-batched figure.

Run on the GPU machine: python3 scripts/gemm_torch_crosscheck.py OUT.json [M N K COUNT]
(default: the chapter's 32 256 256 40).

For fp32 (allow_tf32 off) and tf32 (allow_tf32 on), on row-major float32 operands like the
lesson's, it reports per batch of products:
- hot: median over samples of back-to-back calls queued behind torch.cuda._sleep, so the host's
  launch cost stays out (as the harness's blocking kernel does), timed by CUDA events;
- do_bench: triton.testing.do_bench's median, which clears L2 before every repetition (cold:
  compare with the lesson's --cold figures);
- the same products as a Python loop of torch.mm calls (hot), beside the lesson's baseline;
- the relative L2 error against float64, and the kernels the profiler saw for one bmm.
"""
import json
import statistics
import sys

import torch
import triton.testing

out_path = sys.argv[1] if len(sys.argv) > 1 else None
m, n, k, count = (int(v) for v in sys.argv[2:6]) if len(sys.argv) >= 6 else (32, 256, 256, 40)

torch.manual_seed(0)
a = torch.randn(count, m, k, device="cuda")
b = torch.randn(count, k, n, device="cuda")
c = torch.empty(count, m, n, device="cuda")
ref = torch.bmm(a.double(), b.double())


def rel_l2(x):
    return ((x.double() - ref).norm() / ref.norm()).item()


def hot_median_ms(fn, reps, samples=30):
    """Median ms per call of `reps` back-to-back calls queued behind a GPU sleep."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(3):
        fn()
    times = []
    for _ in range(samples):
        torch.cuda.synchronize()
        torch.cuda._sleep(20_000_000)  # ~10 ms at ~2 GHz: longer than queuing the calls
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / reps)
    return statistics.median(times), times


def bmm():
    torch.bmm(a, b, out=c)


def mm_loop():
    for i in range(count):
        torch.mm(a[i], b[i], out=c[i])


def kernels_of(fn):
    try:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        return sorted({e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA})
    except Exception as e:  # report, don't hide
        return [f"profiler failed: {e!r}"]


results = {
    "torch": torch.__version__,
    "triton": triton.__version__,
    "cuda": torch.version.cuda,
    "device": torch.cuda.get_device_name(),
    "shape": {"m": m, "n": n, "k": k, "count": count},
    "layout": "row-major float32, torch.bmm(a[count,m,k], b[count,k,n], out=c)",
    "flops_per_batch": 2 * m * n * k * count,
}
for precision in ["fp32", "tf32"]:
    torch.set_float32_matmul_precision("high" if precision == "tf32" else "highest")
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    c.fill_(float("nan"))
    bmm()
    torch.cuda.synchronize()
    err_bmm = rel_l2(c)
    c.fill_(float("nan"))
    mm_loop()
    torch.cuda.synchronize()
    err_loop = rel_l2(c)
    hot_bmm, hot_bmm_samples = hot_median_ms(bmm, reps=50)
    hot_loop, hot_loop_samples = hot_median_ms(mm_loop, reps=5)
    cold_bmm = triton.testing.do_bench(bmm, warmup=25, rep=200, return_mode="median")
    results[precision] = {
        "allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "bmm_rel_l2_error": err_bmm,
        "mm_loop_rel_l2_error": err_loop,
        "bmm_hot_median_us": hot_bmm * 1e3,
        "bmm_hot_samples_us": [t * 1e3 for t in hot_bmm_samples],
        "bmm_do_bench_median_us": cold_bmm * 1e3,
        "mm_loop_hot_median_us": hot_loop * 1e3,
        "mm_loop_hot_samples_us": [t * 1e3 for t in hot_loop_samples],
        "bmm_hot_tflops": 2 * m * n * k * count / (hot_bmm * 1e-3) / 1e12,
        "bmm_kernels": kernels_of(bmm),
    }
    print(
        f"{precision}: torch.bmm hot {hot_bmm * 1e3:.2f} us, do_bench (cold) {cold_bmm * 1e3:.2f} us, "
        f"torch.mm loop hot {hot_loop * 1e3:.1f} us; rel. error {err_bmm:.1e}; kernels {results[precision]['bmm_kernels']}"
    )
if out_path:
    with open(out_path, "w") as f:
        json.dump(results, f, indent=1)
