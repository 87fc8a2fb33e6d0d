#!/bin/bash
# Bytes of one training epoch, summed over ranks, of float32 graph parallelism and of the
# pipeline in each --wire format, on N ranks (mpirun): issue 20's "pipeline in int8 against
# float32 graph parallelism" ratio at any rank count (gnnpipe-bench comm measures 4 ranks).
# Bytes do not depend on load. Prints one line per run and the ratios.
#
#   GNNPIPE_DATA_ROOT=<prepared> scripts/wire_bytes.sh 8 --dataset coauthor_physics --model gcnii \
#       --layers 32 --hidden 100
set -euo pipefail
n=$1; shift
repo="$(cd "$(dirname "$0")/.." && pwd)"
bin="$repo/.venv/bin"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run() {  # name, extra flags...
  local name=$1; shift
  "$bin/mpirun" -np "$n" "$bin/gnnpipe-train" --epochs 1 --eval-every 1000 --no-progress "$@" \
      --out "$tmp/$name" > "$tmp/$name.log" 2>&1 || { cat "$tmp/$name.log"; exit 1; }
  "$bin/python" - "$tmp/$name/metrics.jsonl" "$name" <<'PY'
import json, sys
rec = json.loads(open(sys.argv[1]).read().splitlines()[0])
b = rec["bytes_sent"]
boundary = sum(b.get(k, 0) for k in ("halo_fwd", "halo_bwd", "way_fwd", "way_bwd", "pipe_act", "pipe_grad"))
print(f"{sys.argv[2]:<16} boundary {boundary:>14,} B   all-reduce {b.get('allreduce', 0):>12,} B   {b}")
open(sys.argv[1] + ".boundary", "w").write(str(boundary))
PY
}
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg); $n ranks; flags: $*"
run graph-float32 --mode graph "$@"
for w in float32 bfloat16 int8 int4; do
  run "pipeline-$w" --mode pipeline --chunks $((4 * n)) --exact-every 0 --wire "$w" "$@"
done
g=$(cat "$tmp/graph-float32/metrics.jsonl.boundary")
for w in float32 bfloat16 int8 int4; do
  p=$(cat "$tmp/pipeline-$w/metrics.jsonl.boundary")
  echo "graph float32 / pipeline $w: $("$bin/python" -c "print(f'{$g / $p:.1f}x')")"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
