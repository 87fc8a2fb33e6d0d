#!/usr/bin/env bash
# The device check of issue 19 (one H200, under 6 minutes): exactness on CUDA against the CPU,
# ranks sharing the GPU, speed against PyG's fastest path and the roofline, peak GPU memory.
# Runs the package from this tree (PYTHONPATH): the device machine has its own CUDA torch and
# PyG, no pymetis and no MPI runtime (reported, not fatal). Results: $OUT/gpu_check.{json,md,log}.
#
#   bash scripts/gpu_check.sh                         # on the GPU machine
#   OUT=/tmp/dry bash scripts/gpu_check.sh --device cpu --small   # the dry run, on a CPU
set -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-results/gpu_check}
mkdir -p "$OUT"
export PYTHONPATH="$(pwd)${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] && [ -z "${PYTHON:-}" ] && PY=.venv/bin/python
timeout 345 "$PY" scripts/gpu_check.py --out "$OUT" "$@" 2>&1 | tee "$OUT/gpu_check.log"
