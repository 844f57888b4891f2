#!/usr/bin/env bash
# Build release binaries and GPU test binaries here and copy them into .bin/ (ignored) for
# the GPU machine, which has no Rust toolchain.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --workspace
rm -rf .bin && mkdir -p .bin
for b in ch1-intensity baseline optimized vector_add ch1-roofline; do cp target/release/$b .bin/; done
cargo test --release --workspace --no-run --message-format=json 2>/dev/null \
  | python3 -c '
import json, sys, shutil
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"] \
            and m["target"]["name"] == "gpu":
        name = m["target"]["name"]
        if m["target"]["kind"] == ["lib"]:
            name = "unit-" + name
        shutil.copy(m["executable"], ".bin/test-" + m["manifest_path"].split("/")[-2] + "-" + name)
'
ls -la .bin
