#!/bin/bash
# The planner's boundary-sampling choice scored on a cluster sweep (docs/benchmarks.md, "boundary
# sampling"; issue 33).
#
#   bash scripts/bns_sweep.sh [OUT]      (root: it builds the emulated hosts; default OUT results-bns-sweep)
#
# Squirrel on 4 emulated hosts, 50 Mbit/s, 200 Mbit/s and unshaped links, graph parallelism, the
# pipeline (4 stages x 16 chunks) and the hybrid (2 x 2 x 8), graph and hybrid with every boundary row
# and with --boundary-sample 0.1: a shallow wide model (SAGE-4, d = 256), where sampling is measured to
# cost no accuracy, and a deep one (GCNII-32, d = 100), where it costs 13.67 points and the planner
# must not offer it. Each sweep's planner.md scores the planner's (mode, fraction) under
# --accuracy-budget 0.5 against the measured epochs. Run it with nothing else running (every row
# records the 1-minute load before and after it).
set -euo pipefail
OUT=$(realpath -m "${1:-results-bns-sweep}")
BIN=$(dirname "$(command -v gnnpipe-bench || echo .venv/bin/gnnpipe-bench)")
S="--sweep --rates 50mbit,200mbit,unshaped --graphs squirrel --modes graph,pipeline,hybrid --samples 1,0.1
   --accuracy-budget 0.5 --epochs 4 --network quick"
F="--dropout 0.5 --lr 0.005 --weight-decay 0"
"$BIN/gnnpipe-bench" cluster $S --out "$OUT/sage4" --models sage --layers 4 --hidden 256 -- $F
"$BIN/gnnpipe-bench" cluster $S --out "$OUT/gcnii32" --models gcnii --layers 32 --hidden 100 -- $F
for p in "$OUT"/*/sweep-*/planner.md; do echo "== $p"; cat "$p"; done
