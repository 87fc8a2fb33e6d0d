#!/bin/bash
# Stale and exact epochs against graph parallelism for several chunk counts, on 4 emulated hosts
# (docs/benchmarks.md, `tta` "Four chunks" and "shared input layer" "Physics GCNII-32 with fewer
# chunks"; issues 29 and 33). Root: it builds the emulated hosts. Run with nothing else running;
# every cell prints the 1-minute load before it.
#
#   bash scripts/chunk_probe.sh squirrel [OUT]   # GCNII-32, --exact-every 2 --wire int8, C = 2, 4, 16
#   bash scripts/chunk_probe.sh physics  [OUT]   # GCNII-32, C = 16, 8, 4 with/without --shared-input
#
# Two rounds, the cells alternated; per cell the median stale and exact epoch after the first
# (gnnpipe.bench.tta.epoch_times).
set -euo pipefail
WHICH=${1:?squirrel or physics}
OUT=$(realpath -m "${2:-results-chunk-probe}/$WHICH")
BIN=$(dirname "$(command -v gnnpipe-bench || echo .venv/bin/gnnpipe-bench)")
M="--model gcnii --layers 32 --hidden 100 --dropout 0.5 --lr 0.005 --weight-decay 0 --eval-every 1000000"
case $WHICH in
  squirrel) F="--dataset squirrel $M --epochs 7"; P="--mode pipeline --stages 4 --exact-every 2 --wire int8"
            CELLS=("g|--mode graph" "p2|$P --chunks 2" "p4|$P --chunks 4" "p16|$P --chunks 16") ;;
  physics)  F="--dataset coauthor_physics $M --epochs 5"; P="--mode pipeline --stages 4 --exact-every 0"
            CELLS=("g|--mode graph" "p16s|$P --chunks 16 --shared-input" "p8s|$P --chunks 8 --shared-input"
                   "p8|$P --chunks 8" "p4s|$P --chunks 4 --shared-input") ;;
  *) echo "chunk_probe.sh: expected squirrel or physics, got $WHICH" >&2; exit 2 ;;
esac
for rep in 0 1; do
  for cell in "${CELLS[@]}"; do
    name=${cell%%|*}; flags=${cell#*|}
    echo "== $name$rep load $(cut -d' ' -f1 /proc/loadavg) $(date +%T)"
    # shellcheck disable=SC2086
    "$BIN/gnnpipe-bench" cluster --rate unshaped --out "$OUT/$name$rep" -- $F $flags > /dev/null
  done
done
"$BIN/python" - "$OUT" <<'PY'
import sys
from pathlib import Path
from gnnpipe.bench.common import read_metrics
from gnnpipe.bench.tta import epoch_times
for d in sorted(Path(sys.argv[1]).iterdir()):
    t = epoch_times(read_metrics(d), 0)
    print(f"{d.name:8s} stale {t['epoch_s']:.3f}" + (f"  exact {t['exact_epoch_s']:.3f}" if "exact_epoch_s" in t else ""))
PY
