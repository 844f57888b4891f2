#!/usr/bin/env bash
# Everything the ch1-intensity issue asks to measure, in one call on the GPU machine.
# Expects release binaries and test binaries in .bin/ (see scripts/stage-bin.sh) and $OUT.
set -uo pipefail
B=.bin
export PERF_LESSONS_CACHE=/tmp/perf-lessons-cache
LOG=$OUT/gpu-session.log
exec > >(tee -a "$LOG") 2>&1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv

echo "== GPU tests"
export CH1_INTENSITY_BIN=$B/ch1-intensity
for t in $B/test-*; do echo "-- $t"; "$t" --ignored --test-threads=1; done

echo "== first run (empty compile cache), 10M"
/usr/bin/time -f "wall %e s" $B/ch1-intensity --json /tmp/first.json
echo "== second run (compile cache warm), 10M"
/usr/bin/time -f "wall %e s" $B/ch1-intensity --json $OUT/ch1-intensity-10M.json

echo "== 64M"
$B/ch1-intensity --n 64M --json $OUT/ch1-intensity.json

echo "== run-to-run spread: fused (optimized) and baseline at 64M, 5 processes each"
for i in 1 2 3 4 5; do
  $B/optimized --n 64M --json /tmp/spread-fused-$i.json > /dev/null
  $B/baseline --n 64M --json /tmp/spread-baseline-$i.json > /dev/null
done

echo "== vector add 10M, hot and cold"
$B/vector_add --n 10M --json $OUT/vector-add-hot.json
$B/vector_add --n 10M --cold --json $OUT/vector-add-cold.json

echo "== ncu on the same vector add kernel, clocks untouched: caches kept (hot) and flushed (cold)"
for cache in none all; do
  ncu --clock-control none --cache-control $cache --kernel-name vector_add --launch-skip 10 --launch-count 30 \
      --metrics gpu__time_duration.sum $B/vector_add --n 10M --quick > /tmp/ncu-$cache.txt 2>&1
  grep -E "gpu__time_duration" /tmp/ncu-$cache.txt > /tmp/ncu-vector-add-$cache.txt
  tail -3 /tmp/ncu-$cache.txt
done

echo "== torch / triton do_bench"
python3 scripts/torch_crosscheck.py /tmp/torch.json

echo "== summary"
python3 scripts/summarize_intensity.py "$OUT" /tmp | tee $OUT/summary.json
