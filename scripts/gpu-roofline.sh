#!/usr/bin/env bash
# The roofline's GPU work in one call: GPU tests, the lesson itself, PyTorch's copy_ cross-check.
# Uses the committed results/h200/ch1-intensity.json for the ch1-intensity points.
set -uo pipefail
B=.bin
export PERF_LESSONS_CACHE=/tmp/perf-lessons-cache
mkdir -p /tmp/res/h200/roofline
exec > >(tee -a "$OUT/gpu-roofline.log") 2>&1
echo "== roofline GPU tests"
$B/test-ch1-roofline-gpu --ignored --test-threads=1 --nocapture 2>&1 | grep -v "^$"
echo "== roofline"
$B/ch1-roofline --json /tmp/res/h200/ch1-roofline.json --out /tmp/res/h200/roofline
echo "exit $?"
echo "== torch copy_ of 2 GiB"
python3 scripts/roofline_crosscheck.py /tmp/res/h200/torch-copy.json
tar czf "$OUT/results.tgz" -C /tmp/res h200
