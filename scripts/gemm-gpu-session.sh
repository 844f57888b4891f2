#!/usr/bin/env bash
# Everything issue 4 (ch1-gemm) asks to measure, in one call on the GPU machine.
# Expects, in $B (default .bin-gemm): the release binaries ch1-gemm, baseline, optimized, the GPU
# test binaries test-*, and this folder's gemm_torch_crosscheck.py and summarize_gemm.py; $OUT.
set -uo pipefail
B=${B:-.bin-gemm}
export PERF_LESSONS_CACHE=/tmp/plc
R=/tmp/gemm-results
mkdir -p $R
LOG=$OUT/gpu-session.log
exec > >(tee -a "$LOG") 2>&1
# Pack what is there after every step, so a run cut short still brings its JSON back.
save() { tar czf $OUT/gemm-results.tgz -C $R .; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
ls /usr/local/cuda/lib64/libcublas.so* 2>/dev/null | head -3

echo "== GPU tests"
export CH1_GEMM_BIN=$B/ch1-gemm
for t in $B/test-*; do echo "-- $t"; timeout 120 "$t" --ignored --test-threads=1; done

echo "== chapter shape, fp32, hot"
$B/ch1-gemm --json $R/ch1-gemm.json
echo "== chapter shape, tf32, hot"
$B/ch1-gemm --tf32 --json $R/ch1-gemm-tf32.json
echo "== chapter shape, fp32 and tf32, cold"
$B/ch1-gemm --cold --json $R/ch1-gemm-cold.json
$B/ch1-gemm --tf32 --cold --json $R/ch1-gemm-tf32-cold.json
save

echo "== one side each, 3 processes each (run-to-run spread)"
for i in 1 2 3; do
  $B/optimized --json $R/spread-strided-$i.json | grep -E "^\| strided"
  $B/baseline --json $R/spread-baseline-$i.json | grep -E "^\| baseline"
done

echo "== torch.bmm cross-check"
timeout 90 python3 $B/gemm_torch_crosscheck.py $R/torch.json
save

echo "== sweep, fp32"
$B/ch1-gemm --sweep --json $R/ch1-gemm-sweep.json
save
echo "== sweep, tf32"
$B/ch1-gemm --sweep --tf32 --json $R/ch1-gemm-sweep-tf32.json

echo "== summary"
python3 $B/summarize_gemm.py $R | tee $R/summary.json
save
ls -la $R
