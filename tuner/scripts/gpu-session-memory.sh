#!/usr/bin/env bash
# What the memory/autobatch issue asks to measure, in one call on the GPU machine (not run yet:
# the session that wrote it had no device time left). Binaries staged by stage.sh in $B.
set -uo pipefail
B=${B:-.bin-tuner}
export PERF_LESSONS_CACHE=/tmp/plc
exec > >(tee -a "$OUT/gpu-session-memory.log") 2>&1
T=$B/tuner
echo "== GPU tests (memory estimate vs measured peaks, finder)"
timeout 200 $B/test-gpu --ignored --test-threads=1 --nocapture the_memory_estimate the_finder
echo "== tuner memory, three presets"
for p in small medium large; do $T memory --preset $p --batch-size 4096 --json $OUT/tuner-memory-$p.json; done
echo "== tuner autobatch, small preset"
printf '# demo config\n[model]\npreset = "small"\n[training]\nbatch_size = 256 # by hand\naccumulation_steps = 4\n' > /tmp/run.toml
/usr/bin/time -f "autobatch wall %e s" $T autobatch --config /tmp/run.toml --team $OUT/team.toml --json $OUT/tuner-autobatch.json
cat /tmp/run.toml /tmp/run.toml.bak $OUT/team.toml
$T memory --watch --watch-seconds 3
