#!/usr/bin/env bash
# Build the ch1-gemm release binaries and GPU test binaries here and stage them, with the
# session scripts, in $1 (default .bin-gemm, git-ignored) for the GPU machine, which has no Rust.
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=${1:-.bin-gemm}
cargo build --release -p ch1-gemm
rm -rf "$DEST" && mkdir -p "$DEST"
for b in ch1-gemm baseline optimized; do cp target/release/$b "$DEST/"; done
cargo test --release -p ch1-gemm --no-run --message-format=json 2>/dev/null \
  | python3 -c '
import json, shutil, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"] \
            and m["target"]["name"] == "gpu":
        shutil.copy(m["executable"], sys.argv[1] + "/test-ch1-gemm-gpu")
' "$DEST"
cp scripts/gemm-gpu-session.sh scripts/gemm_torch_crosscheck.py scripts/summarize_gemm.py "$DEST/"
ls -la "$DEST"
