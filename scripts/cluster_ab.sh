#!/bin/bash
# One gnnpipe-train job on the emulated cluster under two or more code revisions, in turn, so
# that a change is measured as a ratio inside one run (the machine is shared: see the load
# lines). Each revision is checked out into a temporary git worktree and its ranks import
# it (PYTHONPATH); the job runs `reps` times per revision (default 2), A B A B ...; each run
# prints its median epoch and its compute / comm / bubble. Root (network namespaces).
#
#   scripts/cluster_ab.sh REV_A REV_B [REV_C ...] [--rate 500mbit] [--hosts 4] [--reps 2] -- <gnnpipe-train args>
#   GNNPIPE_DATA_ROOT=<prepared> scripts/cluster_ab.sh c0ecab0 HEAD -- --dataset squirrel \
#       --model gcn --layers 32 --hidden 100 --epochs 4 --eval-every 1000000 --mode pipeline --chunks 16
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
py="$repo/.venv/bin/python"
revs=()
while [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; do revs+=("$1"); shift; done
[ ${#revs[@]} -ge 2 ] || { echo "usage: $0 REV_A REV_B [REV ...] [--rate R] [--hosts N] [--reps K] -- <gnnpipe-train args>" >&2; exit 2; }
rate=unshaped hosts=4 reps=2
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  case "$1" in
    --rate) rate=$2; shift 2 ;;
    --hosts) hosts=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    *) echo "$0: unknown option $1 (train args go after --)" >&2; exit 2 ;;
  esac
done
[ "${1:-}" = "--" ] && shift
tmp=$(mktemp -d /tmp/gnnpipe-ab-XXXXXX)
cleanup() {
  for d in "$tmp"/tree-*; do [ -d "$d" ] && git -C "$repo" worktree remove --force "$d" >/dev/null 2>&1 || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
tags=(A B C D E F G H)
for i in "${!revs[@]}"; do
  git -C "$repo" worktree add --detach -q "$tmp/tree-$i" "${revs[$i]}"
  echo "${tags[$i]} = ${revs[$i]} ($(git -C "$repo" rev-parse --short "${revs[$i]}"))"
done
echo "$hosts hosts at $rate; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "columns: hosts x ranks | link | epoch s (median) | compute s | comm s | bubble s | MiB/epoch | load/cores"
for k in $(seq "$reps"); do
  for i in "${!revs[@]}"; do
    tree="$tmp/tree-$i"
    (cd "$tree" && PYTHONPATH="$tree" "$py" -m gnnpipe.bench cluster --hosts "$hosts" --rate "$rate" \
        --out "$tmp/run-$i-$k" -- "$@" 2>/dev/null | grep -E '^\| [0-9]' | sed "s/^/${tags[$i]} run $k: /")
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
