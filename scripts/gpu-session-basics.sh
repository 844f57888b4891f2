#!/usr/bin/env bash
# Everything the ch1-basics issue asks to measure, in one call on the GPU machine.
# Expects the binaries staged by scripts/stage-bin.sh (binaries as ch1-basics, test-ch1-basics-gpu) in $B (default .bin-basics) and $OUT.
set -uo pipefail
B=${B:-.bin-basics}
export PERF_LESSONS_CACHE=/tmp/plc
LOG=$OUT/gpu-session.log
exec > >(tee -a "$LOG") 2>&1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,pcie.link.gen.current,pcie.link.width.current --format=csv
nproc; free -g | head -2

echo "== GPU tests"
CH1_BASICS_BIN=$B/ch1-basics $B/test-gpu --ignored --test-threads=1 --nocapture

echo "== training, defaults (hidden 256)"
/usr/bin/time -f "wall %e s" $B/ch1-basics --part training --min-samples 40 --json $OUT/ch1-basics.json
echo "== training, hidden 4096"
$B/ch1-basics --part training --hidden 4096 --min-samples 30 --max-time 3 --json $OUT/ch1-basics-hidden4096.json
echo "== transpose 8192"
$B/ch1-basics --part transpose --json $OUT/ch1-basics-transpose.json
echo "== double buffering, 1 GiB"
$B/ch1-basics --part pipeline --json $OUT/ch1-basics-pipeline.json
echo "== single-variant binaries"
$B/optimized --quick
$B/transpose-tiled --quick
echo "== done"
