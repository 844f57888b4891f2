"""Summarize the ch1-intensity GPU session: the figures the issue asks for, from the JSON files."""
import glob
import json
import re
import statistics
import sys

out, tmp = sys.argv[1], sys.argv[2]
load = lambda p: json.load(open(p))
res = {}

r = load(f"{out}/ch1-intensity.json")
copy = r["ceilings"][0]["value"]
res["gpu"] = r["device"]["name"]
res["copy_bandwidth_gbps"] = copy
res["variants_64M"] = {
    v["name"]: {
        "status": v["status"],
        "median_us": v["time_ms"]["median"] * 1e3 if v["time_ms"] else None,
        "gbps": v["throughput"]["gb_per_s"] if v["throughput"] else None,
        "pct_copy": 100 * v["fraction_of_copy_bandwidth"] if v["fraction_of_copy_bandwidth"] else None,
        "speedup": v["speedup"],
        "rel_err": v["verification"]["rel_l2_error"],
    }
    for v in r["variants"]
}
res["startup_to_first_sample_s_second_run"] = load(f"{out}/ch1-intensity-10M.json")["provenance"]["startup_to_first_sample_s"]
res["startup_to_first_sample_s_first_run"] = load(f"{tmp}/first.json")["provenance"]["startup_to_first_sample_s"]
res["startup_phases_second_run"] = load(f"{out}/ch1-intensity-10M.json")["provenance"]["startup_phases"]
for name in ["fused", "baseline"]:
    meds = [load(p)["variants"][0]["time_ms"]["median"] for p in sorted(glob.glob(f"{tmp}/spread-{name}-*.json"))]
    m = statistics.mean(meds)
    res[f"spread_{name}_64M"] = {
        "medians_us": [x * 1e3 for x in meds],
        "range_over_mean_pct": 100 * (max(meds) - min(meds)) / m,
    }
for mode in ["hot", "cold"]:
    v = load(f"{out}/vector-add-{mode}.json")["variants"][0]
    res[f"vector_add_10M_{mode}_median_us"] = v["time_ms"]["median"] * 1e3
def ncu_median_us(path):
    text = open(path).read().replace(",", "")
    rows = re.findall(r"gpu__time_duration.sum\s+(\S+)\s+([\d.]+)", text)
    scale = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}
    vals = [float(v) * scale[u] for u, v in rows]
    return statistics.median(vals), len(vals)


for cache, mode in [("none", "hot"), ("all", "cold")]:
    try:
        med, count = ncu_median_us(f"{tmp}/ncu-vector-add-{cache}.txt")
        ours = res[f"vector_add_10M_{mode}_median_us"]
        res[f"vector_add_10M_ncu_cache_{cache}"] = {
            "ncu_median_us": med,
            "kernels": count,
            f"harness_{mode}_median_us": ours,
            "harness_over_ncu_pct": 100 * (ours / med - 1),
        }
    except Exception as e:  # report, don't hide
        res[f"ncu_{cache}_error"] = repr(e)
try:
    res["do_bench"] = load(f"{tmp}/torch.json")
except Exception as e:
    res["torch_error"] = repr(e)
print(json.dumps(res, indent=1))
