"""Summarize a ch1-gemm GPU session: the figures issue 4 asks for, from the JSON files.

python3 scripts/summarize_gemm.py DIR   (DIR holds ch1-gemm*.json, torch.json, spread-*.json)
"""
import glob
import json
import os
import statistics
import sys

d = sys.argv[1]


def load(name):
    with open(os.path.join(d, name)) as f:
        return json.load(f)


def variants(report):
    return {
        v["name"]: {
            "status": v["status"],
            "precision": v["precision"],
            "median_us": v["time_ms"]["median"] * 1e3 if v["time_ms"] else None,
            "per_product_us": v["time_ms"]["median"] * 1e3 / report["parameters"]["count"] if v["time_ms"] else None,
            "noise_pct": v["time_ms"]["rel_stddev"] * 100 if v["time_ms"] else None,
            "gflops": v["throughput"]["gflop_per_s"] if v["throughput"] else None,
            "speedup": v["speedup"],
            "rel_l2_error": v["verification"]["rel_l2_error"],
            "tolerance": v["verification"]["tolerance"],
            "hold_timeouts": v["measurement"]["hold_timeouts"] if v["measurement"] else None,
            "mode": "cold" if v["measurement"] and v["measurement"]["cold"] else "hot",
        }
        for v in report["variants"]
    }


res = {}
torch = None
try:
    torch = load("torch.json")
    res["torch"] = {k: v for k, v in torch.items() if k not in ("fp32", "tf32")}
except Exception as e:  # report, don't hide
    res["torch_error"] = repr(e)

for precision, suffix in [("fp32", ""), ("tf32", "-tf32")]:
    for mode, extra in [("hot", ""), ("cold", "-cold")]:
        name = f"ch1-gemm{suffix}{extra}.json"
        try:
            r = load(name)
        except Exception as e:
            res[f"{precision}_{mode}_error"] = repr(e)
            continue
        v = variants(r)
        entry = {"file": name, "gpu": r["device"]["name"], "variants": v}
        for side in ["batched", "strided"]:
            s = v.get(side, {}).get("speedup")
            entry[f"{side}_speedup_at_least_20x"] = s is not None and s >= 20
        if torch and precision in torch:
            t = torch[precision]
            ours = v["strided"]["median_us"]
            theirs = t["bmm_hot_median_us"] if mode == "hot" else t["bmm_do_bench_median_us"]
            entry["torch_bmm_us"] = theirs
            entry["torch_bmm_method"] = "CUDA events, back-to-back behind torch.cuda._sleep (hot)" if mode == "hot" else "triton.testing.do_bench median (L2 cleared)"
            entry["strided_over_torch_bmm"] = ours / theirs
            entry["strided_within_1_25x_of_torch_bmm"] = ours / theirs <= 1.25
            if mode == "hot":
                entry["torch_mm_loop_us"] = t["mm_loop_hot_median_us"]
                entry["baseline_over_torch_mm_loop"] = v["baseline"]["median_us"] / t["mm_loop_hot_median_us"]
        res[f"{precision}_{mode}"] = entry

for side in ["strided", "baseline"]:
    meds = []
    for p in sorted(glob.glob(os.path.join(d, f"spread-{side}-*.json"))):
        with open(p) as f:
            meds.append(json.load(f)["variants"][0]["time_ms"]["median"] * 1e3)
    if meds:
        m = statistics.mean(meds)
        res[f"spread_{side}_fp32"] = {"medians_us": meds, "range_over_mean_pct": 100 * (max(meds) - min(meds)) / m}

for precision, name in [("fp32", "ch1-gemm-sweep.json"), ("tf32", "ch1-gemm-sweep-tf32.json")]:
    try:
        s = load(name)
    except Exception as e:
        res[f"sweep_{precision}_error"] = repr(e)
        continue
    pts = s["points"]
    res[f"sweep_{precision}"] = {
        "wall_s": s["wall_s"],
        "measured": sum(1 for p in pts if not p["skipped"]),
        "skipped": [f'{p["size"]}x{p["count"]}: {p["skipped"]}' for p in pts if p["skipped"]],
        "failed": [f'{p["size"]}x{p["count"]}' for p in pts if any(t and not t["passed"] for t in (p["one_by_one"], p["strided"]))],
        "crossover": s["crossover"],
    }
print(json.dumps(res, indent=1))
