#!/usr/bin/env bash
# Everything the profiling issue asks to show, in one GPU call. Expects the staged binaries in
# .bin-profiling/ (scripts/stage-profiling.sh) and $OUT.
set -uo pipefail
B=.bin-profiling
T=/tmp/prof
mkdir -p $T/profiles
export PERF_LESSONS_CACHE=/tmp/plc
exec > >(tee -a "$OUT/gpu-session.log") 2>&1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv
echo "== libraries and tools"
ldconfig -p | grep -E "libcupti|libnvtx3interop|libnvToolsExt" || echo "(none of CUPTI/NVTX in ldconfig)"
echo "nsys on PATH: $(command -v nsys || echo no)"; echo "ncu on PATH: $(command -v ncu || echo no)"
ls -d /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys 2>&1
ncu --version 2>&1 | tail -1

echo "== GPU tests (CUPTI trace)"
timeout 120 $B/test-trace-gpu --ignored --test-threads=1 --nocapture

echo "== ch1-intensity --n 64M: plain, traced, plain again"
timeout 90 $B/ch1-intensity --n 64M --json $T/int-plain1.json > $T/int-plain1.txt; tail -3 $T/int-plain1.txt
timeout 90 $B/ch1-intensity --n 64M --json $OUT/ch1-intensity-64M-trace.json --trace $T/int-64M-trace.json
timeout 90 $B/ch1-intensity --n 64M --json $T/int-plain2.json > /dev/null

echo "== ch1-gemm (chapter shape): plain, traced, plain again"
timeout 60 $B/ch1-gemm --json $T/gemm-plain1.json > /dev/null
timeout 60 $B/ch1-gemm --json $OUT/ch1-gemm-trace.json --trace $T/gemm-trace.json
timeout 60 $B/ch1-gemm --json $T/gemm-plain2.json > /dev/null

echo "== a small example trace (short run)"
timeout 60 $B/ch1-intensity --n 4M --min-time 0 --min-samples 3 --max-noise 100 \
  --json $T/int-example.json --trace $OUT/ch1-intensity-trace-example.json | tail -12

echo "== checks: valid JSON, trace vs events, overhead"
python3 $B/check_trace.py $T $OUT > $OUT/trace-checks.json; cat $OUT/trace-checks.json

echo "== nsys through the wrapper (not on PATH here: the wrapper finds Nsight Compute's copy)"
timeout 90 $B/profiling nsys --out-dir $T/profiles -- $B/ch1-intensity --n 10M --quick; echo "wrapper exit: $?"

echo "== ncu through the wrapper: one ch1-intensity kernel (fused_vec4)"
timeout 120 $B/profiling ncu --kernel fused_vec4 --lesson ch1-intensity --variant fused \
  --out-dir $T/profiles -- $B/intensity-optimized --n 64M --quick; echo "wrapper exit: $?"
echo "== ncu NVTX filter: first kernel inside the range ch1-intensity:more-flops"
timeout 120 $B/profiling ncu --nvtx-include "ch1-intensity:more-flops/" --variant more-flops \
  --out-dir $T/profiles -- $B/ch1-intensity --n 16M --quick > $T/nvtx1.txt 2>&1; echo "wrapper exit: $?"; grep -E "^\\$|^\| [0-9]|report:|WARN|ERR" $T/nvtx1.txt
echo "== control: no filter, the first kernel of the process"
timeout 120 $B/profiling ncu --variant first-kernel \
  --out-dir $T/profiles -- $B/ch1-intensity --n 16M --quick > $T/nvtx0.txt 2>&1; echo "wrapper exit: $?"; grep -E "^\\$|^\| [0-9]|report:|WARN|ERR" $T/nvtx0.txt
echo "== nested filter: kernels in 'timed' inside ch1-intensity:fused"
timeout 120 $B/profiling ncu --nvtx-include "ch1-intensity:fused/timed/" --variant fused-timed \
  --out-dir $T/profiles -- $B/ch1-intensity --n 16M --quick > $T/nvtx2.txt 2>&1; echo "wrapper exit: $?"; grep -E "^\\$|^\| [0-9]|report:|WARN|ERR" $T/nvtx2.txt
for f in $T/profiles/*.headline.md; do cat "$f"; echo; done > $OUT/ncu-headline.md
echo "== ncu's own words on NVTX filters"
ncu --help 2>&1 | grep -B2 -A25 -- "--nvtx-include" | head -60
ls -la $T/profiles
