#!/usr/bin/env bash
# compare and roofline on the GPU machine, in one call. Results: $OUT/results.tgz.
set -uo pipefail
B=.bin
R=/tmp/res/h200
mkdir -p $R/roofline
exec > >(tee -a "$OUT/gpu-compare.log") 2>&1
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
export COMPARE_BIN=$B/compare
for t in $B/test-*; do echo "-- $t"; "$t" --ignored --test-threads=1 2>&1 | grep -E "^test |test result|panicked|SLOWER|assert" ; done
echo "== torch copy_"
python3 scripts/roofline_crosscheck.py $R/torch-copy.json
tar czf "$OUT/results.tgz" -C /tmp/res h200
