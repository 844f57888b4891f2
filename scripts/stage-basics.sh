#!/usr/bin/env bash
# Build ch1-basics's release binaries and its GPU test binary and copy them into $1 (default
# .bin-basics) for the GPU machine, which has no Rust toolchain. Built per package: `baseline` and
# `optimized` share their file names with ch1-intensity's in the workspace's target folder.
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=${1:-.bin-basics}
cargo build --release -p ch1-basics
rm -rf "$DEST" && mkdir -p "$DEST"
for b in ch1-basics baseline optimized transpose-tiled pipeline-overlapped; do cp target/release/$b "$DEST"/; done
cargo test --release -p ch1-basics --no-run --message-format=json 2>/dev/null \
  | python3 -c '
import json, sys, shutil
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"] \
            and m["target"]["name"] == "gpu":
        shutil.copy(m["executable"], sys.argv[1] + "/test-gpu")
' "$DEST"
cp scripts/gpu-session-basics.sh "$DEST"/gpu.sh
ls -la "$DEST"
