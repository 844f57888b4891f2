#!/usr/bin/env bash
# Every GPU measurement of the lessons built so far, in one call on the GPU machine.
# Results go to $OUT/results.tgz (unpack into the repo root) plus the logs.
set -uo pipefail
FINAL_OUT=$OUT
B=.bin
export PERF_LESSONS_CACHE=/tmp/perf-lessons-cache
mkdir -p /tmp/res/h200 /tmp/res/h200/roofline
exec > >(tee -a "$FINAL_OUT/gpu-all.log") 2>&1

echo "== ch1-intensity session"
OUT=/tmp/res/h200 bash scripts/gpu-session.sh > /dev/null 2>&1; echo "exit $?"
cat /tmp/res/h200/summary.json | head -30

echo "== roofline GPU tests"
$B/test-ch1-roofline-gpu --ignored --test-threads=1 --nocapture 2>&1 | grep -v "^$"

echo "== roofline"
$B/ch1-roofline --intensity-json /tmp/res/h200/ch1-intensity.json --json /tmp/res/h200/ch1-roofline.json --out /tmp/res/h200/roofline
echo "exit $?"

echo "== torch copy_ of 2 GiB"
python3 scripts/roofline_crosscheck.py /tmp/res/h200/torch-copy.json

tar czf "$FINAL_OUT/results.tgz" -C /tmp/res h200
ls -la /tmp/res/h200 /tmp/res/h200/roofline
