#!/usr/bin/env bash
# Every GPU test and the compare and roofline runs whose results are committed, in one call.
# Results: $OUT/results.tgz (unpack under /tmp, then copy into results/).
set -uo pipefail
B=.bin
R=/tmp/res/h200
mkdir -p $R/roofline
exec > >(tee -a "$OUT/gpu-final.log") 2>&1
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv
export CH1_INTENSITY_BIN=$B/ch1-intensity CH1_GEMM_BIN=$B/ch1-gemm CH1_BASICS_BIN=$B/ch1-basics COMPARE_BIN=$B/compare
export PERF_LESSONS_CACHE=/tmp/plc-cold
rm -rf $PERF_LESSONS_CACHE
echo "== compare, cold cache (no compiled kernels, no ceilings), recording expectations"
/usr/bin/time -f "compare wall %e s" $B/compare --expectations $R/expectations.json --update-expectations --json $R/compare-first.json
echo "exit $?"
echo "== roofline (measures every ceiling into the same cache)"
$B/ch1-roofline --json $R/ch1-roofline.json --out $R/roofline; echo "exit $?"
echo "== compare again, warm cache, judged against the expectations just recorded"
/usr/bin/time -f "compare wall %e s" $B/compare --expectations $R/expectations.json --json $R/compare.json
echo "exit $?"
echo "== GPU tests"
for t in $B/test-*; do echo "-- $t"; timeout 300 "$t" --ignored --test-threads=1 2>&1 | grep -E "^test |test result|panicked|assert|left|right" ; done
tar czf "$OUT/results.tgz" -C /tmp/res h200
