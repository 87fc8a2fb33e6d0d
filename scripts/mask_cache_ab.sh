#!/bin/bash
# What the pipeline stages' dropout-mask cache (gnnpipe.models.ops.KeepMaskCache) is worth:
# the same 4-rank run with the cache switched off and on, alternating, printing each run's
# "done:" line (mean epoch time; the losses must be identical). docs/benchmarks.md quotes it.
#
#   scripts/mask_cache_ab.sh                       # the README's main job
#   GNNPIPE_DATA_ROOT=<prepared> scripts/mask_cache_ab.sh --mode pipeline --chunks 16 \
#       --dataset squirrel --model gcn --layers 32 --hidden 100 --epochs 5 --eval-every 100 --threads 1
set -euo pipefail
bin="$(cd "$(dirname "$0")/.." && pwd)/.venv/bin"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for v in off on off on; do
  out=$(mktemp -d)
  "$bin/mpirun" -np 4 "$bin/python" -c "
import sys
if sys.argv[1] == 'off':
    import gnnpipe.models.ops as ops
    ops.KeepMaskCache.get = lambda self, *a, **k: None
sys.argv = ['gnnpipe-train'] + sys.argv[2:]
from gnnpipe.cli.train import entry
entry()" "$v" --no-progress "$@" --out "$out/run" 2>&1 | grep 'done:' | sed "s/^/cache $v: /"
  rm -rf "$out"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
