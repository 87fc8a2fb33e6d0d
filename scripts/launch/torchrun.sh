#!/usr/bin/env bash
# Launch gnnpipe-train with torchrun (Gloo on CPU, NCCL on GPU), on one host or many.
# Run this script once per host: every host gets the same --nnodes and rendezvous address.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_common.sh"

usage() {
  cat <<USAGE
usage: $(basename "$0") --nproc-per-node N [--nnodes M --node-rank K --master-addr HOST
                    [--master-port P] | --nnodes M --rdzv-endpoint HOST:PORT [--rdzv-id ID]]
                    [--iface IF] [--] [gnnpipe-train args...]

Starts N ranks of gnnpipe-train on this host with $GNNPIPE_VENV/bin/torchrun; run it on
each of M hosts. Two ways to meet:

  static:  --nnodes M --node-rank K --master-addr HOST [--master-port P]
           K is 0..M-1, different on every host; HOST is node 0's address (reachable by
           all), P a free TCP port there (default 29500).
  c10d:    --nnodes M --rdzv-endpoint HOST:PORT [--rdzv-id ID]
           node ranks are assigned by the rendezvous; HOST runs the c10d store.

  --iface IF   interface Gloo uses between hosts (sets GLOO_SOCKET_IFNAME; NCCL_SOCKET_IFNAME
               too); needed when the hostname resolves to a loopback or wrong address
  -h, --help   this text

Environment: OMP_NUM_THREADS (default: cores / N), GNNPIPE_VENV (default <repo>/.venv),
GNNPIPE_GRACE_S (seconds after Ctrl-C before SIGKILL, default 15).
A dead rank makes the others fail within gnnpipe-train's --timeout (default 60 s); torchrun
then stops the rest of this host's ranks. Ctrl-C stops every rank on this host.

examples:
  $(basename "$0") --nproc-per-node 4 -- --mode graph --dataset sbm
  # host A (10.0.0.1) and host B:
  $(basename "$0") --nproc-per-node 4 --nnodes 2 --node-rank 0 --master-addr 10.0.0.1 -- --mode pipeline
  $(basename "$0") --nproc-per-node 4 --nnodes 2 --node-rank 1 --master-addr 10.0.0.1 -- --mode pipeline
USAGE
}

nproc="" nnodes=1 node_rank="" master_addr="" master_port=29500 rdzv="" rdzv_id="gnnpipe" iface=""
while [ $# -gt 0 ]; do
  case "$1" in
    --nproc-per-node) nproc=${2:?"$1 needs a value"}; shift 2 ;;
    --nnodes) nnodes=${2:?"$1 needs a value"}; shift 2 ;;
    --node-rank) node_rank=${2:?"$1 needs a value"}; shift 2 ;;
    --master-addr) master_addr=${2:?"$1 needs a value"}; shift 2 ;;
    --master-port) master_port=${2:?"$1 needs a value"}; shift 2 ;;
    --rdzv-endpoint) rdzv=${2:?"$1 needs a value"}; shift 2 ;;
    --rdzv-id) rdzv_id=${2:?"$1 needs a value"}; shift 2 ;;
    --iface) iface=${2:?"$1 needs a value"}; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    --) shift; break ;;
    *) break ;;
  esac
done
die() { echo "$(basename "$0"): $*" >&2; exit 2; }
[[ "$nproc" =~ ^[1-9][0-9]*$ ]] || die "--nproc-per-node must be a positive integer, got '$nproc'"
[[ "$nnodes" =~ ^[1-9][0-9]*$ ]] || die "--nnodes must be a positive integer, got '$nnodes'"
torchrun="$GNNPIPE_VENV/bin/torchrun"
[ -x "$torchrun" ] || die "$torchrun not found; install gnnpipe into $GNNPIPE_VENV or set GNNPIPE_VENV"

cmd=("$torchrun" --nproc-per-node "$nproc" --nnodes "$nnodes")
if [ -n "$rdzv" ]; then
  [ -z "$node_rank$master_addr" ] || die "give either --rdzv-endpoint or --node-rank/--master-addr, not both"
  cmd+=(--rdzv-backend c10d --rdzv-endpoint "$rdzv" --rdzv-id "$rdzv_id")
elif [ "$nnodes" -gt 1 ]; then
  [[ "$node_rank" =~ ^[0-9]+$ ]] && [ "$node_rank" -lt "$nnodes" ] \
    || die "--node-rank must be an integer in [0, --nnodes=$nnodes), got '$node_rank'"
  [ -n "$master_addr" ] || die "--master-addr (node 0's address) is required with --nnodes $nnodes"
  cmd+=(--node-rank "$node_rank" --master-addr "$master_addr" --master-port "$master_port")
else
  # One host: a fresh port each time, so two jobs on one machine never collide.
  cmd+=(--rdzv-backend c10d --rdzv-endpoint "127.0.0.1:0" --rdzv-id "$rdzv_id")
fi
if [ -n "$iface" ]; then
  export GLOO_SOCKET_IFNAME="$iface" NCCL_SOCKET_IFNAME="$iface"
fi
threads=$(( $(nproc) / nproc ))
[ "$threads" -ge 1 ] || threads=1
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$threads}
# torchrun's -m runs the trainer module; --comm auto picks the torch communicator here.
cmd+=(-m gnnpipe.train "$@")

# torchrun answers Ctrl-C, and a failed rank, with a Python traceback of its own agent;
# this wrapper turns Ctrl-C into a one-line exit (the ranks print their own "interrupted"
# line), a refused input (the first rank to fail exited 2: gnnpipe-train printed its one
# line; its other ranks wait a moment so that rank 0 is that one; the rest exited 2 or were
# stopped by torchrun) into exit 2 with nothing added, and any other failure into torchrun's table of failures
# alone (the ranks print why).
quiet_torchrun='
import logging, sys
from torch.distributed.run import main
from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
sys.argv[0] = "torchrun"
# its per-rank "failed (exitcode: N)" log line repeats what the ranks or the table say
logging.getLogger("torch.distributed.elastic.multiprocessing.api").setLevel(logging.CRITICAL)
try:
    main()
except SignalException as e:
    sys.exit(128 + int(e.sigval))
except ChildFailedError as e:
    codes = [f.exitcode for f in e.failures.values()]
    if e.failures and e.get_first_failure()[1].exitcode == 2 and all(c in (2, -15) for c in codes):
        sys.exit(2)  # (the others exited 2 too, or torchrun stopped them after it: SIGTERM)
    print(e, file=sys.stderr)
    sys.exit(1)
'
cmd[0]="$GNNPIPE_VENV/bin/python"
cmd=("${cmd[0]}" -c "$quiet_torchrun" "${cmd[@]:1}")

rc=0
run_launcher "${cmd[@]}" || rc=$?
exit "$rc"
