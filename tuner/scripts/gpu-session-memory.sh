#!/usr/bin/env bash
# What the memory/autobatch issue asks to measure, in one call on the GPU machine. Binaries
# staged by stage.sh in $B; everything lands in $OUT/tuner-memory-session.tgz.
set -uo pipefail
B=${B:-.bin-tuner}
export PERF_LESSONS_CACHE=/tmp/plc
R=$OUT/r && mkdir -p $R
exec > >(tee -a "$R/tuner-memory-session.log") 2>&1
T=$B/tuner
nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv
echo "== the tuner's GPU tests (each under a time limit)"
timeout 120 $B/test-gpu --ignored --test-threads=1 --nocapture the_chunked the_step
echo "== tuner autobatch, small preset, write-back and team file"
printf '# demo config\n[model]\npreset = "small" # the MLP\n[training]\nbatch_size = 256 # by hand\naccumulation_steps = 4\nlr = 0.05\n' > $R/run.toml
timeout 150 /usr/bin/time -f "autobatch process wall %e s" $T autobatch --config $R/run.toml --team $R/team.toml --json $R/tuner-autobatch.json
echo "--- run.toml after"; cat $R/run.toml; echo "--- run.toml.bak"; cat $R/run.toml.bak; echo "--- team.toml"; cat $R/team.toml
timeout 240 $B/test-gpu --ignored --test-threads=1 --nocapture --skip the_chunked --skip the_step
echo "== tuner memory, three presets, AdamW, batches 256,8192,262144"
for p in small medium large; do
  timeout 60 $T memory --preset $p --optimizer adamw --batch-size 256,8192,262144 --json $R/tuner-memory-$p.json
done
echo "== tuner memory, medium preset, AMP"
timeout 60 $T memory --preset medium --optimizer adamw --amp on --batch-size 256,8192,262144 --json $R/tuner-memory-medium-amp.json
echo "== tuner autobatch, large preset, AMP, powers of two, test only"
timeout 100 $T autobatch --preset large --amp on --pow2 --effective-batch 67108864 --test-only --team $R/team.toml --json $R/tuner-autobatch-large-amp.json
cat $R/team.toml
echo "== --watch beside a sweep"
$T memory --watch --watch-seconds 4 &
W=$!
sleep 1; $T sweep --preset large --batch-sizes 65536 --steps 400 --quiet > $R/watch-sweep.txt 2>&1; wait $W
python3 - "$R" <<'PY'
import json, sys
r = sys.argv[1]
reps = [json.load(open(f"{r}/tuner-memory-{p}.json")) for p in ["small", "medium", "large", "medium-amp"]]
json.dump(reps, open(f"{r}/tuner-memory.json", "w"), indent=1)
print("| preset | amp | batch | estimate MB | measured in use MB | error | taken from device MB |")
for rep in reps:
    for c in rep["batches"]:
        m = c["measured"] or {}
        print(f'| {rep["settings"]["preset"]} | {rep["amp"]} | {c["estimate"]["batch"]} | '
              f'{c["estimate"]["total"]/1e6:.2f} | {m.get("used", 0)/1e6:.2f} | {100*(c["estimate_error"] or 0):+.4f}% | {(m.get("reserved") or 0)/1e6:.2f} |')
a = json.load(open(f"{r}/tuner-autobatch.json"))
print("autobatch small:", len(a["found"]["trials"]), "trials, bound", a["trial_bound"], f'{a["search_wall_s"]:.1f} s',
      "max", a["tiers"]["maximum"], "estimate limit", a["estimate_limit"], "next fails", a["next_fails"], "100 steps", a["recommended_trains_100_steps"],
      "free", a["free_before_bytes"], "->", a["free_after_bytes"])
PY
rm -f $R/tuner-memory-small.json $R/tuner-memory-medium.json $R/tuner-memory-large.json $R/tuner-memory-medium-amp.json
tar czf $OUT/tuner-memory-session.tgz -C $R .
