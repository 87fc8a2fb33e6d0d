#!/bin/bash
# How the pipeline's stages share this machine's cores (the cost model's "time-shared cores,
# unequal stages"; docs/benchmarks.md, "How unequal stages share the cores"; issue 33).
#
#   bash scripts/stage_share.sh [OUT] [EPOCHS]     (root: it builds the emulated hosts; default OUT results-share)
#
# Pipelines whose stages carry unequal work (Squirrel SAGE-4 d = 256 and GCN-16 d = 100, whose
# stage 0 holds the 2,089-wide input layer) and one with equal stages (Physics GCNII-32), 4 stages x
# 16 chunks, each on 4 emulated hosts with unshaped links and under a local `mpirun`, with
# --profile-actions: per stage its wall compute, its waits and the CPU seconds its process got
# (cpu_s). Then the cost model's per-stage compute and epoch for the same layouts. Run it with
# nothing else running: every line records the 1-minute load.
set -euo pipefail
OUT=$(realpath -m "${1:-results-share}")
EPOCHS=${2:-6}
REPO=$(cd "$(dirname "$0")/.." && pwd)
BIN=$(dirname "$(command -v gnnpipe-bench || echo "$REPO/.venv/bin/gnnpipe-bench")")
F="--dropout 0.5 --lr 0.005 --weight-decay 0 --epochs $EPOCHS --eval-every 1000000 --profile-actions"
P="--mode pipeline --stages 4 --chunks 16 --exact-every 0"
declare -A CFG=(
  [sage4]="--dataset squirrel --model sage --layers 4 --hidden 256"
  [gcn16]="--dataset squirrel --model gcn --layers 16 --hidden 100"
  [physics-gcnii32]="--dataset coauthor_physics --model gcnii --layers 32 --hidden 100"
)
mkdir -p "$OUT"
for name in sage4 gcn16 physics-gcnii32; do
  echo "== $name cluster unshaped, load $(cut -d' ' -f1 /proc/loadavg)"
  "$BIN/gnnpipe-bench" cluster --rate unshaped --no-predict --out "$OUT/$name-cluster" -- ${CFG[$name]} $F $P
  echo "== $name local mpirun, load $(cut -d' ' -f1 /proc/loadavg)"
  "$BIN/mpirun" -np 4 "$BIN/gnnpipe-train" ${CFG[$name]} $F $P --out "$OUT/$name-local" --overwrite --no-progress \
    > "$OUT/$name-local.log" 2>&1
  echo "   load after $(cut -d' ' -f1 /proc/loadavg)"
done
for name in sage4 gcn16 physics-gcnii32; do
  run=$(dirname "$(find "$OUT/$name-cluster" -name metrics.jsonl | head -1)")
  "$BIN/python" "$REPO/scripts/action_profile.py" "$run" "$OUT/$name-local"
done | tee "$OUT/stages.md"
# The cost model's per-stage compute for the same layouts: as `gnnpipe-bench cluster` predicts an
# unshaped cell (every rank shares this machine's cores), and for the local run (the profile as is).
for name in sage4 gcn16 physics-gcnii32; do
  "$BIN/python" - ${CFG[$name]} $P <<'PY'
import sys
from dataclasses import replace
from gnnpipe.config import parse_config
from gnnpipe.cost import load_profile, predict, with_link
from gnnpipe.cost.graphstats import graph_stats_from_graph
from gnnpipe.cost.inputs import ModelSpec
from gnnpipe.bench.cluster import chunk_counts, load_graph_for
from gnnpipe.dims import ParallelDims
cfg, _ = parse_config(sys.argv[1:])
topo = ParallelDims.from_config(cfg, 4)
stats = graph_stats_from_graph(load_graph_for(cfg), [2, 4], seed=cfg.seed, chunks=chunk_counts([topo]))
base = load_profile("cpu-this-machine")
for where, prof in (("cluster", replace(with_link(base, None, 1), cpu_share_ranks=4)), ("local", base)):
    p = predict(stats, ModelSpec.of(cfg), topo, prof)
    print(f"model {cfg.dataset} {cfg.model}-{cfg.layers} {where}: epoch {p.epoch_s:.3f} s, stage compute "
          + " / ".join(f"{s.compute_s:.3f}" for s in p.per_stage))
PY
done | tee -a "$OUT/stages.md"
