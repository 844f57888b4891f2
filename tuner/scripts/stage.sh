#!/usr/bin/env bash
# Build the tuner's release binary and GPU test binary and copy them, with the session and
# cross-check scripts, into $1 (default /work/main/.bin-tuner) for the GPU machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
DEST=${1:-.bin-tuner}
cargo build --release -p tuner
rm -rf "$DEST" && mkdir -p "$DEST"
cp target/release/tuner "$DEST"/
cargo test --release -p tuner --no-run --message-format=json 2>/dev/null \
  | python3 -c '
import json, sys, shutil
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"] \
            and m["target"]["name"] == "gpu":
        shutil.copy(m["executable"], sys.argv[1] + "/test-gpu")
' "$DEST"
cp tuner/scripts/gpu-session.sh tuner/scripts/gpu-session-memory.sh tuner/scripts/torch_sweep.py "$DEST"/
ls -la "$DEST"
