#!/usr/bin/env bash
# Second GPU call of the profiling issue: which kernels ncu's NVTX filters select, and whether
# the trace's cost on ch1-intensity's baseline (+7% in the first call) repeats, in both orders.
set -uo pipefail
B=.bin-profiling
T=/tmp/prof
mkdir -p $T/profiles
export PERF_LESSONS_CACHE=/tmp/plc
exec > >(tee -a "$OUT/gpu-session-2.log") 2>&1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv
echo "== baseline alone at 64M: traced, plain, traced, plain (medians)"
for i in 1 2; do
  for mode in trace plain; do
    extra=""; [ $mode = trace ] && extra="--trace $T/b-$i.json"
    timeout 60 $B/intensity-baseline --n 64M --json $T/b-$mode-$i.json $extra > /dev/null
    python3 -c "import json,sys; r=json.load(open(sys.argv[1])); v=r['variants'][0]; m=v['measurement']; t=m.get('trace'); print(sys.argv[2], 'median %.2f us' % (v['time_ms']['median']*1e3), 'clock', m['before']['sm_clock_mhz'], m['after']['sm_clock_mhz'], ('kernels ' + ', '.join('%s %.2f us' % (k['name'], k['median_s']*1e6) for k in t['kernels'])) if t else '')" $T/b-$mode-$i.json $mode-$i
  done
done
echo "== ncu: NVTX filter and kernel filter together: the first 3 vec4 kernels inside ch1-intensity:more-flops"
timeout 100 $B/profiling ncu --nvtx-include "ch1-intensity:more-flops/" --kernel "regex:vec4" --launch-count 3 \
  --lesson ch1-intensity --variant more-flops-vec4 --out-dir $T/profiles -- $B/ch1-intensity --n 16M --quick 2>&1 \
  | grep -vE "^\| (baseline|unrolled|vectorized|more-flops|fused) |^## |^\|---|^\| variant|^measured|^timing"
echo "== control: the same kernel filter without NVTX (vectorized runs first and shares two kernels)"
timeout 100 $B/profiling ncu --kernel "regex:vec4" --launch-count 3 \
  --lesson ch1-intensity --variant vec4-unfiltered --out-dir $T/profiles -- $B/ch1-intensity --n 16M --quick 2>&1 \
  | grep -E "^\\$|^\| [0-9]|report:|WARN|ERR"
echo "== nested filter: first kernel in 'verify' inside ch1-intensity:more-flops"
timeout 100 $B/profiling ncu --nvtx-include "ch1-intensity:more-flops/verify/" \
  --lesson ch1-intensity --variant more-flops-verify --out-dir $T/profiles -- $B/ch1-intensity --n 16M --quick 2>&1 \
  | grep -E "^\\$|^\| [0-9]|report:|WARN|ERR"
for f in $T/profiles/*.headline.md; do cat "$f"; echo; done > $OUT/ncu-headline-2.md
ls -la $T/profiles
