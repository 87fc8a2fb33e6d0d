#!/usr/bin/env bash
# Launch gnnpipe-train with MPICH/hydra's mpirun (the one in the venv, which mpi4py was
# built against): one rank per process, on this host or on the hosts of a hostfile.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_common.sh"

usage() {
  cat <<USAGE
usage: $(basename "$0") -n NP [-f HOSTFILE] [--ppn N] [--iface IF] [--] [gnnpipe-train args...]

Starts NP ranks of gnnpipe-train with $GNNPIPE_VENV/bin/mpirun (MPICH hydra). Every rank
runs the same command; --comm auto picks the MPI communicator under mpirun.

  -n, --np NP        number of ranks (world size)
  -f, --hostfile F   hydra hostfile, one "host[:slots]" per line (see hostfile.example);
                     every host needs the same venv at the same path and passwordless ssh
  --ppn N            ranks per host (default: fill each host's slots in order)
  --iface IF         network interface for MPI traffic between hosts (e.g. eth0, ib0)
  -h, --help         this text

Environment: OMP_NUM_THREADS (default: cores / ranks per host, at least 1),
GNNPIPE_VENV (default: <repo>/.venv), GNNPIPE_GRACE_S (seconds the ranks get after Ctrl-C
before SIGKILL, default 15). Ctrl-C stops every rank; the exit status is mpirun's (130
after Ctrl-C).

examples:
  $(basename "$0") -n 4 -- --mode pipeline --dataset sbm --epochs 50
  $(basename "$0") -n 8 -f hosts --ppn 4 -- --mode hybrid --ways 2 --stages 4 --timeout 60
USAGE
}

np="" hostfile="" ppn="" iface=""
while [ $# -gt 0 ]; do
  case "$1" in
    -n|--np) np=${2:?"$1 needs a value"}; shift 2 ;;
    -f|--hostfile) hostfile=${2:?"$1 needs a value"}; shift 2 ;;
    --ppn) ppn=${2:?"$1 needs a value"}; shift 2 ;;
    --iface) iface=${2:?"$1 needs a value"}; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    --) shift; break ;;
    *) break ;;  # the first unknown argument starts gnnpipe-train's
  esac
done
if ! [[ "$np" =~ ^[1-9][0-9]*$ ]]; then
  echo "$(basename "$0"): -n NP is required and must be a positive integer, got '${np}'" >&2
  usage >&2
  exit 2
fi
if [ -n "$hostfile" ] && [ ! -r "$hostfile" ]; then
  echo "$(basename "$0"): hostfile '$hostfile' is not readable" >&2
  exit 2
fi
mpirun="$GNNPIPE_VENV/bin/mpirun"
train="$GNNPIPE_VENV/bin/gnnpipe-train"
for exe in "$mpirun" "$train"; do
  if [ ! -x "$exe" ]; then
    echo "$(basename "$0"): $exe not found; install gnnpipe into $GNNPIPE_VENV or set GNNPIPE_VENV" >&2
    exit 2
  fi
done

# Ranks on this host share its cores; oversubscribed OpenMP threads are very slow.
local_ranks=${ppn:-$np}
[ -n "$hostfile" ] && [ -z "$ppn" ] && local_ranks=$np  # unknown split: be conservative
cores=$(nproc)
threads=$(( cores / local_ranks ))
[ "$threads" -ge 1 ] || threads=1
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$threads}
export MKL_NUM_THREADS=${MKL_NUM_THREADS:-$OMP_NUM_THREADS}

cmd=("$mpirun" -np "$np" -genv OMP_NUM_THREADS "$OMP_NUM_THREADS"
     -genv MKL_NUM_THREADS "$MKL_NUM_THREADS")
[ -n "$hostfile" ] && cmd+=(-f "$hostfile")
[ -n "$ppn" ] && cmd+=(-ppn "$ppn")
[ -n "$iface" ] && cmd+=(-iface "$iface")
cmd+=("$train" "$@")

rc=0
run_launcher "${cmd[@]}" || rc=$?
exit "$rc"
