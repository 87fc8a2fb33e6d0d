# Shared by the launch scripts (sourced, not run): find the venv, run a launcher as a
# child in its own process group, forward Ctrl-C/SIGTERM to that group, and kill whatever
# is left after a grace period, so that no rank outlives the script.

GNNPIPE_REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# The venv whose gnnpipe-train, mpirun and torchrun are used; override with GNNPIPE_VENV.
GNNPIPE_VENV=${GNNPIPE_VENV:-$GNNPIPE_REPO/.venv}
# Seconds the ranks get to stop after Ctrl-C before they are SIGKILLed.
GNNPIPE_GRACE_S=${GNNPIPE_GRACE_S:-15}

_child=""

# Prints the pids of every descendant of $1 (children first found, depth first).
_descendants() {
  local c
  for c in $(pgrep -P "$1" 2>/dev/null || true); do
    echo "$c"
    _descendants "$c"
  done
}

# Forwards a signal to the launcher's process group, waits up to GNNPIPE_GRACE_S for it to
# stop, then SIGKILLs the group and every descendant (hydra's proxies leave the group).
_stop_child() {
  local sig=$1
  [ -n "$_child" ] || return 0
  local tree
  tree=$(_descendants "$_child")
  kill "-$sig" -- "-$_child" 2>/dev/null || true
  if [ "$sig" = INT ] && [ "${_second_int:-0}" = 1 ]; then
    # srun wants two Ctrl-C within a second to cancel the step instead of reporting status.
    sleep 0.3
    kill -INT -- "-$_child" 2>/dev/null || true
  fi
  local waited=0
  while kill -0 "$_child" 2>/dev/null && [ "$waited" -lt $((GNNPIPE_GRACE_S * 10)) ]; do
    sleep 0.1
    waited=$((waited + 1))
  done
  kill -KILL -- "-$_child" 2>/dev/null || true
  local p
  for p in $tree; do kill -KILL "$p" 2>/dev/null || true; done
  wait "$_child" 2>/dev/null || true
}

_on_signal() {
  local sig=$1 code=$2
  trap - INT TERM HUP
  echo "$(basename "$0"): got SIG$sig, stopping all ranks" >&2
  _stop_child "$sig"
  exit "$code"
}

# Runs "$@" in its own process group (so the signal reaches the launcher and all its
# children, and nothing else) and returns its exit status.
run_launcher() {
  trap '_on_signal INT 130' INT
  trap '_on_signal TERM 143' TERM
  trap '_on_signal HUP 129' HUP
  set -m  # a process group of its own; also keeps SIGINT from being ignored in the child
  "$@" &
  _child=$!
  set +m
  local rc=0
  wait "$_child" || rc=$?
  # wait returns early (>128) when a trapped signal arrives; the trap exits the script.
  _child=""
  trap - INT TERM HUP
  return "$rc"
}
