#!/bin/bash
# Boundary sampling in the hybrid, timed (docs/benchmarks.md, "boundary sampling"; issue 33).
#
#   bash scripts/bns_hybrid_timing.sh [OUT]      (root: it builds the emulated hosts; default OUT results-bns-hybrid)
#
# Squirrel SAGE-4 (d = 256) on 4 emulated hosts: the stale hybrid (2 x 2, 16 chunks) with and without
# --boundary-sample 0.1 at 50 Mbit/s and unshaped, and at 50 Mbit/s graph parallelism with and without
# sampling and the pipeline with 16 and 32 chunks; two alternated rounds, then a summary (epoch s is each
# run's median of epochs 1-3, as gnnpipe-bench cluster reports it). Run it with nothing else running:
# the 1-minute load before and after each run is printed beside it.
set -euo pipefail
OUT=$(realpath -m "${1:-results-bns-hybrid}")/cluster
BIN=$(dirname "$(command -v gnnpipe-bench || echo .venv/bin/gnnpipe-bench)")
F="--dataset squirrel --model sage --layers 4 --hidden 256 --dropout 0.5 --lr 0.005 --weight-decay 0 --epochs 4 --eval-every 100"
HYB="--mode hybrid --ways 2 --stages 2 --chunks 16 --exact-every 0"
for rep in 1 2; do
  for rate in 50mbit unshaped; do
    echo "round $rep $rate $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
    run() { "$BIN/gnnpipe-bench" cluster --rate "$rate" --no-predict --out "$OUT/r$rep-$rate-$1" -- $F "${@:2}" > /dev/null; }
    run hybrid $HYB
    run hybrid-bns $HYB --boundary-sample 0.1
    if [ "$rate" = 50mbit ]; then
      run graph --mode graph
      run graph-bns --mode graph --boundary-sample 0.1
      run pipe16 --mode pipeline --stages 4 --chunks 16 --exact-every 0
      run pipe32 --mode pipeline --stages 4 --chunks 32 --exact-every 0
    fi
  done
done
"$BIN/python" - "$OUT" <<'PY'
import json, statistics, sys
from pathlib import Path
cells = {}
for d in sorted(Path(sys.argv[1]).iterdir()):
    c = json.loads((d / "cell.json").read_text())
    _, rate, name = d.name.split("-", 2)
    cells.setdefault((rate, name), []).append(c)
print("rate      layout       epoch s (rounds)            mean   MiB/epoch  way MiB  load before/after")
for (rate, name), cs in sorted(cells.items()):
    way = (cs[0]["bytes"].get("way_fwd", 0) + cs[0]["bytes"].get("way_bwd", 0)) / 2**20
    print(f"{rate:9s} {name:12s} {str([round(c['epoch_s'], 3) for c in cs]):27s} {statistics.mean(c['epoch_s'] for c in cs):6.3f} "
          f"{cs[0]['bytes_train'] / 2**20:9.1f} {way:8.1f}  {[(round(c['load1_before'], 1), round(c['load1_after'], 1)) for c in cs]}")
PY
