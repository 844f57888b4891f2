#!/usr/bin/env bash
# Build every lesson's main binary and GPU test binary here and copy them into .bin/ (ignored)
# for the GPU machine, which has no Rust toolchain. Lessons share bin names (baseline,
# optimized), so only each crate's uniquely named main binary travels.
set -euo pipefail
cd "$(dirname "$0")/.."
crates="ch1-intensity ch1-gemm ch1-basics ch1-roofline compare"
cargo build --release $(for c in $crates; do echo -p $c; done)
rm -rf .bin && mkdir -p .bin
for c in $crates; do cp target/release/$c .bin/; done
cargo test --release --no-run --message-format=json $(for c in $crates; do echo -p $c; done) 2>/dev/null \
  | python3 -c '
import json, sys, shutil
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"] \
            and m["target"]["name"] == "gpu":
        crate = m["manifest_path"].split("/")[-2]
        shutil.copy(m["executable"], ".bin/test-" + crate + "-gpu")
'
ls -la .bin
