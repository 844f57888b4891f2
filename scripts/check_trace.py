#!/usr/bin/env python3
"""Checks of the built-in trace after a GPU session:
1. each trace file is valid trace-event JSON (every event complete or metadata, times numeric);
2. trace durations agree with the harness's CUDA-event timings: per run, the lesson kernels'
   summed time against the event mean; single-kernel variants also median against median;
3. the cost: medians without --trace (two runs, before and after) and with it.
Prints one JSON document. Usage: check_trace.py TMP_DIR OUT_DIR"""
import json, os, sys
from collections import Counter

tmp, out = sys.argv[1], sys.argv[2]
res = {"valid_traces": {}, "agreement": {}, "overhead": {}}


def load(p):
    with open(p) as f:
        return json.load(f)


for name, path in [("ch1-intensity --n 64M", f"{tmp}/int-64M-trace.json"),
                   ("ch1-gemm", f"{tmp}/gemm-trace.json"),
                   ("example (ch1-intensity --n 4M, short)", f"{out}/ch1-intensity-trace-example.json")]:
    try:
        d = load(path)
        ev = d["traceEvents"]
        num = (int, float)
        bad = [e for e in ev if e.get("ph") not in ("X", "M") or (e["ph"] == "X" and not (
            isinstance(e.get("ts"), num) and isinstance(e.get("dur"), num) and e["dur"] >= 0
            and "pid" in e and "tid" in e and "name" in e))]
        res["valid_traces"][name] = {
            "bytes": os.path.getsize(path), "events": len(ev), "malformed": len(bad),
            "by_category": dict(Counter(e.get("cat") for e in ev if e["ph"] == "X")),
            "source": d.get("otherData", {}).get("source"),
            "nvtx_library": d.get("otherData", {}).get("nvtx_library"),
        }
    except Exception as ex:  # report, do not hide
        res["valid_traces"][name] = {"error": repr(ex)}

for name, path in [("ch1-intensity --n 64M", f"{out}/ch1-intensity-64M-trace.json"),
                   ("ch1-gemm", f"{out}/ch1-gemm-trace.json")]:
    rows = []
    try:
        r = load(path)
        for v in r["variants"]:
            m = v.get("measurement") or {}
            t = m.get("trace")
            if not t:
                continue
            s = m["samples_s"]
            mean, med = sum(s) / len(s), v["time_ms"]["median"] / 1e3
            per_run = t["kernel_time_per_run_s"]
            row = {
                "variant": v["name"],
                "event_median_us": round(med * 1e6, 3),
                "event_mean_us": round(mean * 1e6, 3),
                "trace_kernel_time_per_run_us": round(per_run * 1e6, 3),
                "per_run_trace_over_event_mean": round(per_run / mean, 4),
                "gpu_busy_pct": round(100 * t["gpu_busy_fraction"], 1),
                "runs": t["runs"],
                "kernels": [{"name": k["name"][:80], "calls": k["calls"],
                             "median_us": round(k["median_s"] * 1e6, 3)} for k in t["kernels"]],
            }
            long = [k for k in t["kernels"] if k["median_s"] > 50e-6]
            row["kernels_over_50us"] = len(long)
            if len(t["kernels"]) == 1 and t["kernels"][0]["calls"] == t["runs"]:
                k = t["kernels"][0]
                row["single_kernel_median_over_event_median"] = round(k["median_s"] / med, 4)
            ratios = [row["per_run_trace_over_event_mean"]] + (
                [row["single_kernel_median_over_event_median"]]
                if "single_kernel_median_over_event_median" in row else [])
            row["within_5pct"] = all(abs(x - 1) < 0.05 for x in ratios) if long else None
            rows.append(row)
    except Exception as ex:
        rows = [{"error": repr(ex)}]
    res["agreement"][name] = rows

for name, files in [("ch1-intensity --n 64M", ("int-plain1.json", "ch1-intensity-64M-trace.json", "int-plain2.json")),
                    ("ch1-gemm", ("gemm-plain1.json", "ch1-gemm-trace.json", "gemm-plain2.json"))]:
    rows = []
    try:
        p1 = load(f"{tmp}/{files[0]}")
        tr = load(f"{out}/{files[1]}")
        p2 = load(f"{tmp}/{files[2]}")
        for a in p1["variants"]:
            b = next(v for v in tr["variants"] if v["name"] == a["name"])
            c = next(v for v in p2["variants"] if v["name"] == a["name"])
            m1, mt, m2 = (x["time_ms"]["median"] * 1e3 for x in (a, b, c))
            rows.append({"variant": a["name"], "plain_us": round(m1, 3), "traced_us": round(mt, 3),
                         "plain_again_us": round(m2, 3),
                         "overhead_pct": round(100 * (mt / ((m1 + m2) / 2) - 1), 2),
                         "run_to_run_pct": round(100 * (m2 / m1 - 1), 2)})
    except Exception as ex:
        rows = [{"error": repr(ex)}]
    res["overhead"][name] = rows

print(json.dumps(res, indent=1))
