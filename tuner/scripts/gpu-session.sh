#!/usr/bin/env bash
# Everything the tuner issue asks to measure, in one call on the GPU machine. Expects the
# binaries staged by tuner/scripts/stage.sh in $B (default .bin-tuner) and $OUT.
set -uo pipefail
B=${B:-.bin-tuner}
export PERF_LESSONS_CACHE=/tmp/plc
LOG=$OUT/gpu-session.log
exec > >(tee -a "$LOG") 2>&1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,memory.total,driver_version --format=csv
nproc
T=$B/tuner
echo "== GPU tests"
timeout 90 $B/test-gpu --ignored --test-threads=1 --nocapture
echo "== default sweep (small preset, batch 1..8192, workers 4, fp32, pinned)"
/usr/bin/time -f "sweep wall %e s" $T sweep --quiet --json $OUT/tuner-sweep.json --plot $OUT/tuner-sweep
echo "== small preset, AMP"
$T sweep --quiet --amp on --json $OUT/tuner-sweep-amp.json
echo "== large preset, batch 8192 (busy fraction), workers 4 and 8"
$T sweep --quiet --preset large --batch-sizes 1024,8192 --workers 4,8 --json $OUT/tuner-sweep-large.json
echo "== loader axes: workers 0,1,4 x pin on/off, small preset"
$T sweep --quiet --batch-sizes 256,2048,8192 --workers 0,1,4 --pin both --json $OUT/tuner-sweep-loader.json
echo "== PyTorch eager cross-check"
export PYTHONUNBUFFERED=1
python3 $B/torch_sweep.py $OUT/torch-sweep.json --preset small --amp off
python3 $B/torch_sweep.py $OUT/torch-sweep.json --preset small --amp on
python3 $B/torch_sweep.py $OUT/torch-sweep.json --preset large --amp off --batch-sizes 1024,8192
echo "== done"
