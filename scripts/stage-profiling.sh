#!/usr/bin/env bash
# Build the profiling issue's binaries here and copy them, with the GPU script and the trace
# checker, into the main checkout's .bin-profiling/ (ignored there), which the GPU call carries.
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=${1:-/work/main/.bin-profiling}
rm -rf "$DEST" && mkdir -p "$DEST"
# Each lesson's baseline/optimized share file names in target/: build and copy per package.
cargo build --release -p ch1-intensity -p profiling
cp target/release/ch1-intensity target/release/profiling "$DEST/"
cp target/release/optimized "$DEST/intensity-optimized"
cp target/release/baseline "$DEST/intensity-baseline"
cargo build --release -p ch1-gemm
cp target/release/ch1-gemm "$DEST/"
cargo test --release -p common --test trace_gpu --no-run --message-format=json 2>/dev/null \
  | python3 -c '
import json, sys, shutil
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "trace_gpu":
        shutil.copy(m["executable"], sys.argv[1] + "/test-trace-gpu")
' "$DEST"
cp scripts/profiling-gpu.sh scripts/profiling-gpu-2.sh scripts/check_trace.py "$DEST/"
ls -la "$DEST"
du -sh "$DEST"
