"""Communicators over ``torch.distributed``: Gloo on CPU, NCCL on CUDA (the same code).

The backend follows the communicator's device (:func:`gnnpipe.device.choose`): NCCL when it
is a GPU, Gloo when it is the CPU, also for ranks computing on a GPU (their messages are
copied through host memory, :meth:`Communicator._staged`). NCCL ignores tags and matches a
pair's point-to-point messages in the order they were posted; gnnpipe's pipeline needs no
more: between two neighbouring stages each direction carries one kind of message
(activations forward, gradients backward), posted in the schedule's chunk order on both
sides, and evaluation's messages follow the epoch's, whose sends are complete by then. A
group's first NCCL call is a barrier (:meth:`TorchCommunicator._nccl_first_collective`).

A peer that dies mid-operation makes Gloo report a closed connection; that becomes
:class:`~gnnpipe.comm.base.PeerFailedError`. The peer a rank loses is not always the one that
died, so every lost-peer or timeout error carries a *failure census* (:class:`_FailureCensus`)
read from the rendezvous store.
"""

from __future__ import annotations

import inspect
import logging
import os
import re
import signal
import socket
import sys
import threading
import time
from datetime import timedelta
from typing import Any, Callable, Mapping, Sequence

import torch
import torch.distributed as dist

from gnnpipe.comm.base import (_A2A_TAG, CommError, CommStats, CommTimeoutError, CommUsageError, Communicator,
                               PeerFailedError, Work)
from gnnpipe.comm.launch_info import LaunchInfo

log = logging.getLogger(__name__)

_PEER_GONE = re.compile(
    r"connection (closed|reset)|broken pipe|ECONNRESET|EPIPE|Connection refused|"
    r"Socket closed|peer", re.IGNORECASE)
_TIMED_OUT = re.compile(r"timed? ?out|timeout", re.IGNORECASE)


class _TorchWork(Work):
    def __init__(self, comm: "TorchCommunicator", works: list[Any], category: str, what: str,
                 peers: Sequence[int], finish: Callable[[], None] | None = None,
                 keep: Any = None) -> None:
        super().__init__(comm, category, what, peers, finish)
        self._works = works
        self._keep = keep  # staged send buffers must outlive the operation

    def _test(self) -> bool:
        return all(w.is_completed() for w in self._works)

    def _wait(self, timeout_s: float) -> None:
        comm: TorchCommunicator = self._comm  # type: ignore[assignment]
        deadline = time.perf_counter() + timeout_s  # one limit for all the pieces
        for w in self._works:
            try:
                left = max(deadline - time.perf_counter(), 1e-3)
                w.wait(timedelta(seconds=left))
            except RuntimeError as e:  # DistBackendError and friends
                raise comm._translate(e, self._what, timeout_s, self._peers) from e
        self._keep = None


def _proc_stat(pid: int) -> tuple[str, str] | None:
    """``(state letter, start time in clock ticks)`` from ``/proc/<pid>/stat``, None if gone.

    The start time tells a process from a later one that got the same pid."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return fields[0], fields[19]


# Peers to SIGKILL when this process exits: (census, rank, pid, start time, hung_after),
# hung_after None for a stopped peer, else the monotonic time after which a running,
# silent peer counts as hung.
_TO_KILL: list[tuple["_FailureCensus", int, int, str, float | None]] = []


def kill_stopped_peers() -> None:
    """SIGKILLs the stopped or hung peers a failure census found (see :class:`_FailureCensus`).

    Each is checked again first: still that process (same start time), and still stopped,
    or still running without having reported a failure of its own by its deadline (this
    waits for that, at most one ``--timeout`` after the census). Called by
    :func:`gnnpipe.comm.launch.exit_process` when a rank exits with an error, after the
    error is printed. Not at interpreter exit: a library caller may catch the error and go
    on, and its peers are then none of its business."""
    while _TO_KILL:
        census, rank, pid, start, hung_after = _TO_KILL.pop(0)
        try:
            if hung_after is None:
                if _proc_stat(pid) == ("T", start):
                    os.kill(pid, signal.SIGKILL)
                continue
            while True:
                stat = _proc_stat(pid)
                if stat is None or stat[1] != start or stat[0] in ("Z", "X", "t") or \
                        census._reported(rank):
                    break  # gone, reporting its own failure, or under a debugger
                if time.monotonic() > hung_after:
                    os.kill(pid, signal.SIGKILL)
                    print(f"gnnpipe-train: rank {rank} (pid {pid}) neither reported a failure "
                          "nor exited within the timeout after this rank's failure: hung; "
                          "killed it with SIGKILL so that the job can end",
                          file=sys.stderr, flush=True)
                    break
                time.sleep(0.1)
        except OSError:  # gone meanwhile, or not ours to kill
            pass


def _rank_list(ranks: Sequence[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


class _FailureCensus:
    """Finds out which rank died when an operation fails, through the rendezvous store.

    A failed operation only tells a rank which peer *it* lost, and in a pipeline that is
    often a survivor that has just exited because of its own failure (stage 3 loses stage
    2, which lost stage 1, which died). So every rank registers ``host pid`` in the store at
    start-up; on its first failure it records that it failed, and waits a short window for
    the others' records. A peer on this host whose process is gone is dead, for certain;
    otherwise the peers that never reported are the suspects (dead, hung or cut off). If the
    store itself cannot be reached, its host is the suspect: rank 0 (or torchrun's agent).
    The verdict is computed once per process and appended to every later error.

    A *stopped* peer (``kill -STOP``, Ctrl-Z of one rank) would otherwise outlive the job:
    the survivors time out and exit, but a stopped process does not act on SIGTERM until it
    is continued, so a launcher that waits for every rank (hydra's mpirun with the torch
    communicator; torchrun, for its 30 s grace) waits on it, forever under hydra. So a
    survivor that finds a silent peer on this host in job-control stop (``/proc`` state
    ``T``) for the whole census window ends it with SIGKILL, which works on stopped
    processes, and says so in its verdict. The kill waits until this rank exits with the
    error (:func:`kill_stopped_peers`, from ``exit_process``): hydra SIGKILLs every other
    rank the moment one dies of a signal, which would otherwise take this rank down before
    it has printed the error that names the stopped rank. This is the smallest mechanism
    that works with every launcher, needs nothing from the launcher, and acts only once
    this rank has already failed (the job is over either way). It only ever kills a rank of this job:
    the pid must be the one that rank registered in this job's store, with the same start
    time (so a reused pid is never hit), on this host. A process stopped under a debugger
    (state ``t``) is left alone. A peer on this host that is running but silent is given one
    more timeout (time enough to fail on its own inside any operation) and then, still
    silent and running, is hung: killed the same way as this rank exits.
    """

    def __init__(self, store: Any, rank: int, world_size: int, timeout_s: float,
                 hosts_store: bool = False) -> None:
        self._store = store
        # The store lives in this process (rank 0 after a tcp:// or env:// rendezvous
        # without torchrun's agent): exiting at once would take it away from the ranks
        # that fail later, so this rank lingers until they have reported or are gone
        # (at most one more timeout: only ranks cut off or hung keep it that long).
        self._hosts_store = hosts_store
        # A survivor notices a failure within timeout_s at most, then asks within the
        # census's window and its hard deadline.
        self._linger_s = timeout_s + min(2.0, timeout_s / 4) + 2.0
        self._rank = rank
        self._world = world_size
        self._timeout_s = timeout_s
        # Short enough to keep the failure bound close to --timeout even when stages fail
        # one after another, long enough for ranks that fail together to report.
        self.window_s = min(2.0, timeout_s / 4)
        attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        self._prefix = f"gnnpipe/census/{attempt}/"
        self._host = socket.gethostname()
        self._verdict: str | None = None
        # rank -> "host pid start" as registered; read once at start-up (learn_peers) so
        # that a stopped rank 0, whose process holds the store, can still be found.
        self._who: dict[int, str] = {}

    def register(self) -> None:
        start = _proc_stat(os.getpid())
        self._store.set(f"{self._prefix}who/{self._rank}",
                        f"{self._host} {os.getpid()}" + (f" {start[1]}" if start else ""))

    def learn_peers(self, timeout_s: float) -> None:
        """Reads every rank's registration (they register right after the rendezvous)."""
        keys = [f"{self._prefix}who/{r}" for r in range(self._world) if r != self._rank]
        self._store.wait(keys, timedelta(seconds=timeout_s))
        for r in range(self._world):
            if r != self._rank:
                self._who[r] = self._store.get(f"{self._prefix}who/{r}").decode()

    def _local(self, r: int) -> tuple[int, str | None] | None:
        """``(pid, start time or None)`` of rank r if it runs on this host, else None."""
        who = self._who.get(r)
        if who is None:
            key = f"{self._prefix}who/{r}"
            if not self._store.check([key]):
                return None
            who = self._store.get(key).decode()
        host, pid, *start = who.split()
        if host != self._host or not pid.isdigit():
            return None  # another machine: only its silence can tell
        return int(pid), (start[0] if start else None)

    def _state(self, r: int) -> str | None:
        """Rank r's process state letter on this host ("X": gone), None if unknown."""
        local = self._local(r)
        if local is None:
            return None
        pid, start = local
        try:
            stat = _proc_stat(pid)
        except OSError:
            return None
        if stat is None or (start is not None and stat[1] != start):
            return "X"  # gone (its pid may even belong to another process by now)
        return stat[0]

    def _process_gone(self, r: int) -> bool:
        # A killed child its launcher has not reaped yet is a zombie: dead too.
        return self._state(r) in ("Z", "X")

    def _kill_stopped(self, ranks: Sequence[int]) -> list[int]:
        """Schedules a SIGKILL, at this rank's exit, for the ranks among ``ranks`` still in
        job-control stop (see the class)."""
        killed = []
        for r in ranks:
            local = self._local(r)
            # Only a pid registered with its start time: proof it is still that rank.
            if local is None or local[1] is None or self._state(r) != "T":
                continue
            self._schedule(r, local[0], local[1], None)
            killed.append(r)
        return killed

    def _schedule(self, r: int, pid: int, start: str, hung_after: float | None) -> None:
        _TO_KILL.append((self, r, pid, start, hung_after))

    def _reported(self, r: int) -> bool:
        try:
            return bool(self._store.check([f"{self._prefix}failed/{r}"]))
        except Exception:  # the store is gone: only the process can tell
            return False

    def _stopped_note(self, killed: Sequence[int]) -> str:
        return (f"{_rank_list(killed)} {'is' if len(killed) == 1 else 'are'} stopped "
                "(SIGSTOP or Ctrl-Z, state T); killing it with SIGKILL as this rank exits, "
                "so that the job can end")

    def verdict(self) -> str:
        """One sentence naming the dead or silent ranks (computed on the first failure)."""
        if self._verdict is None:
            # The store client's socket calls are not all bounded by the store's timeout
            # (over a cut link they block for minutes), so the census runs in a daemon
            # thread that is abandoned after a hard deadline.
            result: list[str] = []
            failure: list[BaseException] = []

            def ask() -> None:
                try:
                    result.append(self._ask())
                except BaseException as e:
                    failure.append(e)

            worker = threading.Thread(target=ask, name="gnnpipe-census", daemon=True)
            worker.start()
            worker.join(self.window_s + 2.0)
            if result:
                self._verdict = result[0]
                if self._hosts_store:
                    self._linger()
            else:
                why = (f"no answer within {self.window_s + 2.0:.0f} s" if not failure else
                       (str(failure[0]).strip().splitlines() or [type(failure[0]).__name__])[0])
                # A stopped rank 0 holds the store without answering: found from the
                # registrations read at start-up. Still stopped after a second look (the
                # wait above was the first): not a process just being continued.
                others = [r for r in range(self._world) if r != self._rank]
                stopped = [r for r in others if r in self._who and self._state(r) == "T"]
                if stopped:
                    time.sleep(min(1.0, self.window_s))
                killed = self._kill_stopped(stopped)
                self._verdict = (
                    "the rendezvous store cannot be reached either, and it lives in rank 0's "
                    "process (or torchrun's agent on the first host): "
                    + (self._stopped_note(killed) if killed else
                       "rank 0 or its host is probably dead or cut off") + f" ({why})")
        return self._verdict

    def _linger(self) -> None:
        others = [r for r in range(self._world) if r != self._rank]
        deadline = time.monotonic() + self._linger_s
        while time.monotonic() < deadline:
            try:
                if all(self._store.check([f"{self._prefix}failed/{r}"]) or
                       self._process_gone(r) or self._state(r) == "T" for r in others):
                    return
            except Exception:
                return
            time.sleep(0.05)

    def _ask(self) -> str:
        self._store.set_timeout(timedelta(seconds=max(self.window_s, 1.0)))
        self._store.set(f"{self._prefix}failed/{self._rank}", "1")
        others = [r for r in range(self._world) if r != self._rank]
        deadline = time.monotonic() + self.window_s
        stopped: set[int] | None = None  # silent and stopped at every look so far
        while True:
            reported = [r for r in others if self._store.check([f"{self._prefix}failed/{r}"])]
            states = {r: self._state(r) for r in others if r not in reported}
            gone = [r for r, st in states.items() if st in ("Z", "X")]
            silent = [r for r in states if r not in gone]
            now_stopped = {r for r in silent if states[r] == "T"}
            stopped = now_stopped if stopped is None else stopped & now_stopped
            # A stopped rank is only killed after the whole window (a Ctrl-Z of the whole
            # job, then fg, continues every rank at once: none stays stopped that long).
            if (gone and not stopped) or not silent or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        killed = self._kill_stopped(sorted(stopped or ())) if time.monotonic() > deadline else []
        silent = [r for r in silent if r not in killed]
        parts = []
        if killed:
            parts.append(self._stopped_note(killed))
        if gone:
            parts.append(f"{_rank_list(gone)} died (process gone)")
        if parts:
            return "; ".join(parts)
        if silent:
            # Running here but silent: hung, or still inside an operation of its own that
            # will time out. Any rank inside a communication call reports or exits within
            # one more timeout, so one still running and silent after that is hung (e.g.
            # in a computation that never ends) and would hold the launcher: killed then.
            here = []
            for r in silent:
                local = self._local(r)
                if local is not None and local[1] is not None and states[r] in ("R", "S", "D"):
                    self._schedule(r, local[0], local[1],
                                   time.monotonic() + self._timeout_s + self.window_s)
                    here.append(r)
            note = (f" ({_rank_list(here)} on this host: killed with SIGKILL as this rank "
                    f"exits if still silent {self._timeout_s + self.window_s:.0f} s from now)"
                    if here else "")
            return (f"no failure report within {self.window_s:.0f} s from "
                    f"{_rank_list(silent)}: dead, hung or cut off{note}")
        return ("every other rank reported a failure of its own, none died: mismatched "
                "operations, or a --timeout too short for this work")


class TorchCommunicator(Communicator):
    """``torch.distributed``: Gloo for CPU tensors, NCCL for CUDA tensors.

    Build it with :func:`init_communicator` (which sets up the process group), or wrap an
    existing group. Point-to-point messages use group ranks (``group_dst``/``group_src``),
    so sub-communicators number their members in the order they were given.

    After a timeout Gloo closes the group's connections: later operations on it fail at
    once (reported as such). Treat any :class:`CommError` as fatal for the run.
    """

    kind = "torch"

    @property
    def streams_point_to_point(self) -> bool:
        """Gloo streams :meth:`all_to_all_streamed` per peer; NCCL keeps it batched."""
        return self.device.type != "cuda"

    def __init__(self, rank: int, world_size: int, global_ranks: Sequence[int],
                 stats: CommStats, timeout_s: float, device: torch.device,
                 group: Any = None, is_world: bool = True,
                 census: _FailureCensus | None = None) -> None:
        super().__init__(rank, world_size, global_ranks, stats, timeout_s, device)
        self._group = group  # None: the default (world) group
        self._is_world = is_world
        self._census = census  # shared with sub-communicators; None: no diagnosis

    def _translate(self, e: Exception, what: str, timeout_s: float,
                   peers: Sequence[int]) -> CommError:
        err = self._classify(e, what, timeout_s, peers)
        # Only a lost or silent peer calls for the census; a failure of this rank's own
        # (e.g. an exception raised while it waited) makes it the culprit, not a witness.
        lost_peer = isinstance(err, (PeerFailedError, CommTimeoutError)) or \
            "caused pair closure" in str(e)
        if self._census is not None and lost_peer:
            err = type(err)(f"{err} — failure census: {self._census.verdict()}")
        return err

    def _classify(self, e: Exception, what: str, timeout_s: float,
                  peers: Sequence[int]) -> CommError:
        text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if "caused pair closure" in text:
            # Gloo closes every connection of a group after a timeout: the group is dead.
            return CommError(f"{self._me()}: {what} failed: an earlier operation on this "
                             "communicator timed out and Gloo closed its connections; a "
                             f"communicator cannot be used after a timeout ({text})")
        if _TIMED_OUT.search(str(e)):
            return CommTimeoutError(f"{self._timeout_msg(what, timeout_s, peers)} ({text})")
        if _PEER_GONE.search(str(e)):
            who = (self._peer(peers[0]) if len(peers) == 1 else
                   "one of " + ", ".join(self._peer(p) for p in peers))
            return PeerFailedError(f"{self._me()}: {what} failed: {who} closed its connection "
                                   f"— {'it' if len(peers) == 1 else 'a rank'} probably "
                                   f"died ({text})")
        return CommError(f"{self._me()}: {what} failed: {text}")

    def _run(self, what: str, peers: Sequence[int], fn: Callable[[], Any], category: str) -> None:
        """Runs an async torch.distributed call and waits for it with the timeout."""
        try:
            work = fn()
        except (RuntimeError, dist.DistError) as e:
            raise self._translate(e, what, self.timeout_s, peers) from e
        _TorchWork(self, [work], category, what, peers)._wait(self.timeout_s)

    def _others(self) -> list[int]:
        return [r for r in range(self.world_size) if r != self.rank]

    def _isend(self, t, dst, tag, category, what):
        buf, _ = self._staged(t)
        try:
            w = dist.isend(buf, group=self._group, tag=tag, group_dst=dst)
        except RuntimeError as e:
            raise self._translate(e, what, self.timeout_s, [dst]) from e
        return _TorchWork(self, [w], category, what, [dst], keep=buf)

    def _irecv(self, t, src, tag, category, what):
        buf, finish = self._staged(t)
        try:
            w = dist.irecv(buf, group=self._group, tag=tag, group_src=src)
        except RuntimeError as e:
            raise self._translate(e, what, self.timeout_s, [src]) from e
        return _TorchWork(self, [w], category, what, [src], finish=finish)

    def _all_to_all(self, send, recv, category):
        # Gloo has no variable-size all_to_all of separate tensors; point-to-point pairs
        # work on both backends, and batch_isend_irecv groups them so NCCL cannot deadlock.
        ops, finishes, keep, peers = [], [], [], []
        for j in self._others():
            if recv[j].numel():
                buf, fin = self._staged(recv[j])
                ops.append(dist.P2POp(dist.irecv, buf, group=self._group, tag=_A2A_TAG,
                                      group_peer=j))
                finishes.append(fin)
                peers.append(j)
            if send[j].numel():
                buf, _ = self._staged(send[j])
                keep.append(buf)
                ops.append(dist.P2POp(dist.isend, buf, group=self._group, tag=_A2A_TAG,
                                      group_peer=j))
                peers.append(j)
        if not ops:
            return
        what = f"all_to_all ({category})"
        peers = sorted(set(peers))
        try:
            works = dist.batch_isend_irecv(ops)
        except RuntimeError as e:
            raise self._translate(e, what, self.timeout_s, peers) from e
        _TorchWork(self, works, category, what, peers, keep=keep)._wait(self.timeout_s)
        for fin in finishes:
            if fin is not None:
                fin()

    def _all_reduce(self, t, op, category):
        rop = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN,
               "prod": dist.ReduceOp.PRODUCT}[op]
        buf, finish = self._staged(t)
        self._run(f"all_reduce ({category})", self._others(),
                  lambda: dist.all_reduce(buf, op=rop, group=self._group, async_op=True),
                  category)
        if finish is not None:
            finish()

    def _broadcast(self, t, src, category):
        buf, finish = self._staged(t)
        peers = self._others() if self.rank == src else [src]
        self._run(f"broadcast from {self._peer(src)} ({category})", peers,
                  lambda: dist.broadcast(buf, group=self._group, group_src=src, async_op=True),
                  category)
        if finish is not None and self.rank != src:
            finish()

    def _barrier(self, category):
        self._run(f"barrier ({category})", self._others(),
                  lambda: dist.barrier(group=self._group, async_op=True), category)

    def _split_groups(self, groups, mine):
        if not self._is_world:
            # new_group needs every process of the job to enter it; a sub-communicator's
            # non-members would not, so the groups must be built from the world.
            raise CommUsageError(
                f"{self._me()}: split_groups of a sub-communicator is not supported by the "
                "torch backend; split the world communicator into the final groups instead"
            )
        result = None
        order = new_group_order_kwargs([[self.global_ranks[r] for r in g] for g in groups],
                                       "sort_ranks" in inspect.signature(dist.new_group).parameters)
        for gi, g in enumerate(groups):
            # Every process enters new_group for every group, in the same order: that is
            # what torch.distributed requires.
            pg = dist.new_group(ranks=[self.global_ranks[r] for r in g],
                                timeout=timedelta(seconds=self.timeout_s), **order)
            if gi == mine:
                result = TorchCommunicator(g.index(self.rank), len(g),
                                           [self.global_ranks[r] for r in g], self.stats,
                                           self.timeout_s, self.device, group=pg,
                                           is_world=False, census=self._census)
                result._nccl_first_collective()
        return result

    def _nccl_first_collective(self) -> None:
        """NCCL builds a group's communicator lazily, at the group's first collective, and
        needs every member there; a batched point-to-point exchange that a rank with nothing
        to send skips would hang it. One barrier as the group's first call settles that
        (Gloo needs nothing)."""
        if self.device.type == "cuda":
            self._barrier("control")

    def _close(self):
        if not dist.is_initialized():
            return
        if self._is_world:
            dist.destroy_process_group()
        elif self._group is not None:
            dist.destroy_process_group(self._group)


def new_group_order_kwargs(groups: Sequence[Sequence[int]], has_sort_ranks: bool) -> dict:
    """``dist.new_group``'s keywords that keep each group's ranks in the caller's order.

    ``sort_ranks=False`` does that where torch has it (2.13 does; 2.11, the device
    machine's, does not and always sorts). Without it a group must already be in ascending
    global-rank order (gnnpipe's own hybrid groups are), or its ranks would be numbered
    differently by torch and by the sub-communicator: refused, naming the group.
    """
    if has_sort_ranks:
        return {"sort_ranks": False}
    for g in groups:
        if list(g) != sorted(g):
            raise CommUsageError(
                f"split_groups: group {list(g)} is not in ascending rank order, and this torch "
                f"({torch.__version__}) numbers a group's ranks in ascending order only "
                "(its new_group has no sort_ranks); list each group's ranks in ascending order "
                "or use torch >= 2.13")
    return {}


def init_torch(launch: LaunchInfo, device: torch.device, timeout_s: float, init_method: str | None,
               env: Mapping[str, str]) -> "TorchCommunicator":
    """The world communicator over ``torch.distributed`` (rendezvous order: see
    :func:`gnnpipe.comm.launch.init_communicator`)."""
    backend = "nccl" if device.type == "cuda" else "gloo"
    kwargs: dict[str, Any] = dict(backend=backend, rank=launch.rank,
                                  world_size=launch.world_size,
                                  timeout=timedelta(seconds=timeout_s))
    if init_method is not None:
        kwargs["init_method"] = init_method
    elif "MASTER_ADDR" in env and "MASTER_PORT" in env:
        if env is os.environ:
            # env:// also honours torchrun's agent store (TORCHELASTIC_USE_AGENT_STORE),
            # where rank 0 must not open a second store on MASTER_PORT.
            kwargs["init_method"] = "env://"
        else:
            addr = env["MASTER_ADDR"]
            addr = f"[{addr}]" if ":" in addr else addr  # IPv6
            kwargs["init_method"] = f"tcp://{addr}:{env['MASTER_PORT']}"
    elif env.get("GNNPIPE_RENDEZVOUS"):
        kwargs["init_method"] = "file://" + os.path.abspath(env["GNNPIPE_RENDEZVOUS"])
    elif launch.world_size == 1:
        kwargs["store"] = dist.HashStore()
    else:
        raise CommError(
            f"rank {launch.rank} of {launch.world_size} ({launch.launcher}): the torch "
            "communicator needs a rendezvous: set MASTER_ADDR and MASTER_PORT, or "
            "GNNPIPE_RENDEZVOUS=/path/on/a/shared/filesystem, or use --comm mpi"
        )
    if device.type == "cuda":
        kwargs["device_id"] = device
        # A failed or timed-out NCCL operation raises on the host (instead of hanging in a
        # CUDA stream): the --timeout promise and the failure census then hold as with Gloo.
        os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")
    try:
        dist.init_process_group(**kwargs)
    except (RuntimeError, ValueError) as e:
        raise CommError(f"rank {launch.rank}: {backend} rendezvous "
                        f"({kwargs.get('init_method', 'in-memory store')}) failed within "
                        f"{timeout_s:.0f} s: {e}") from e
    log.debug("rank %d: torch communicator (%s), %d ranks (%s)", launch.rank, backend,
              launch.world_size, launch.launcher)
    census = None
    if launch.world_size > 1:
        try:
            url = str(kwargs.get("init_method", ""))
            hosts_store = (launch.rank == 0 and url.startswith(("tcp://", "env://"))
                           and env.get("TORCHELASTIC_USE_AGENT_STORE") != "True")
            census = _FailureCensus(dist.distributed_c10d._get_default_store(), launch.rank,
                                    launch.world_size, timeout_s, hosts_store=hosts_store)
            census.register()
        except Exception as e:  # a private API of torch: diagnosis is a bonus, not a need
            log.debug("rank %d: no failure census (%s)", launch.rank, e)
            census = None
        if census is not None:
            try:  # every rank registers right after the rendezvous: a short wait
                census.learn_peers(timeout_s)
            except Exception as e:  # then the census reads the store when it is asked
                log.debug("rank %d: census registrations not read (%s)", launch.rank, e)
    comm = TorchCommunicator(launch.rank, launch.world_size, range(launch.world_size),
                             CommStats(), timeout_s, device, census=census)
    comm._nccl_first_collective()
    return comm
