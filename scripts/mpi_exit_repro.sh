#!/bin/bash
# Why gnnpipe.comm.launch.exit_process leaves through the C library's exit() after
# MPI_Finalize: N runs of a 4-rank MPICH job that only does Barrier and Finalize, then leaves
# through os._exit (hydra reported some as "Killed (signal 9)") or through exit() (none).
#
#   scripts/mpi_exit_repro.sh [N]        # default 10 runs of each
set -uo pipefail
bin="$(cd "$(dirname "$0")/.." && pwd)/.venv/bin"
n=${1:-10}
for how in "os._exit(0)" "ctypes.CDLL(None).exit(0)"; do
  failed=0
  for _ in $(seq 1 "$n"); do
    "$bin/mpirun" -np 4 "$bin/python" -c "
import ctypes, os
from mpi4py import MPI
MPI.COMM_WORLD.Barrier()
MPI.Finalize()
$how" > /dev/null 2>&1 || failed=$((failed + 1))
  done
  echo "Finalize then $how: $failed of $n jobs failed"
done
