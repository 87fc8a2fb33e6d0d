#!/usr/bin/env bash
# Launch gnnpipe-train with Slurm's srun inside an allocation (salloc or an sbatch job):
# srun starts one task per rank; gnnpipe's communicator reads SLURM_PROCID / SLURM_NTASKS /
# SLURM_LOCALID itself.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_common.sh"

usage() {
  cat <<USAGE
usage: $(basename "$0") [--comm torch|mpi] [--port P] [--iface IF] [--] [gnnpipe-train args...]

Run inside a Slurm allocation (salloc -N 2 --ntasks-per-node 4, or from an sbatch script).
srun starts SLURM_NTASKS ranks (all the allocation's tasks) of gnnpipe-train.

  --comm torch   (default) Gloo/NCCL. The rendezvous is MASTER_ADDR = the first host of
                 SLURM_JOB_NODELIST (from 'scontrol show hostnames'), MASTER_PORT = P
                 (default 29500 + SLURM_JOB_ID % 1000, so jobs sharing a node differ).
  --comm mpi     mpi4py; needs an MPI that Slurm's PMI can start (srun --mpi=pmi2 or pmix,
                 an MPI built with Slurm support). The venv's MPICH wheel usually is not:
                 prefer scripts/launch/mpirun.sh with a hostfile made from the allocation.
  --iface IF     interface for Gloo/NCCL between nodes (GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME)
  -h, --help     this text

A rank that dies ends the step (srun --kill-on-bad-exit=1); the other ranks also fail on
their own within gnnpipe-train's --timeout. Ctrl-C cancels the step.

example:
  salloc -N 2 --ntasks-per-node 4 --cpus-per-task 4
  $(basename "$0") -- --mode pipeline --dataset squirrel --layers 32
USAGE
}

comm=torch port="" iface=""
while [ $# -gt 0 ]; do
  case "$1" in
    --comm) comm=${2:?"$1 needs a value"}; shift 2 ;;
    --port) port=${2:?"$1 needs a value"}; shift 2 ;;
    --iface) iface=${2:?"$1 needs a value"}; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    --) shift; break ;;
    *) break ;;
  esac
done
die() { echo "$(basename "$0"): $*" >&2; exit 2; }
[ -n "${SLURM_JOB_ID:-}" ] || die "not inside a Slurm allocation (SLURM_JOB_ID is unset); use salloc or sbatch"
command -v srun >/dev/null || die "srun not found on PATH"
train="$GNNPIPE_VENV/bin/gnnpipe-train"
[ -x "$train" ] || die "$train not found; set GNNPIPE_VENV to a venv with gnnpipe on every node"

extra=()
case "$comm" in
  torch)
    command -v scontrol >/dev/null || die "scontrol not found; set MASTER_ADDR yourself"
    # The first host of the allocation runs rank 0, which hosts the rendezvous store.
    MASTER_ADDR=${MASTER_ADDR:-$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)}
    MASTER_PORT=${MASTER_PORT:-${port:-$((29500 + SLURM_JOB_ID % 1000))}}
    export MASTER_ADDR MASTER_PORT
    ;;
  mpi) extra+=(--mpi=pmi2) ;;
  *) die "--comm must be torch or mpi, got '$comm'" ;;
esac
if [ -n "$iface" ]; then
  export GLOO_SOCKET_IFNAME="$iface" NCCL_SOCKET_IFNAME="$iface"
fi
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-${SLURM_CPUS_PER_TASK:-1}}

_second_int=1  # srun needs two Ctrl-C within a second to cancel the step
rc=0
run_launcher srun --kill-on-bad-exit=1 "${extra[@]}" "$train" --comm "$comm" "$@" || rc=$?
exit "$rc"
