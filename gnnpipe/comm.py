"""The one door to the network: communicators over torch.distributed and MPI.

This is the only module of gnnpipe that imports ``torch.distributed`` or ``mpi4py``. Every
executor receives a :class:`Communicator` and never learns which library moves its bytes.

One interface, three implementations:

* :class:`TorchCommunicator` — ``torch.distributed`` with Gloo on CPU and NCCL on CUDA (the
  same code; the backend follows the device).
* :class:`MpiCommunicator` — mpi4py, passing the tensors' own memory to MPI (no copies for
  contiguous CPU tensors).
* :class:`SingleProcessCommunicator` — world size 1, every operation local, so executors
  run unchanged in one process.

Ranks come from whichever launcher started the process (:func:`detect_launch`): torchrun,
MPICH/hydra or Open MPI ``mpirun``, or Slurm ``srun``.

**Timeouts.** Every blocking call and every :meth:`Work.wait` gives up after ``timeout_s``
and raises :class:`CommTimeoutError` naming this rank, the peer rank(s), the operation, the
category and the tag. MPI has no timeouts of its own, so the MPI communicator posts only
non-blocking operations (``Isend``/``Irecv``/``Iallreduce``/``Ialltoallv``/``Ibcast``/
``Ibarrier``) and polls ``Test`` against a deadline. A peer that dies mid-operation makes
Gloo report a closed connection; that becomes :class:`PeerFailedError`, naming the peer
when the operation has one (point-to-point). The peer a rank loses is not always the one
that died (in a pipeline, stage 3 loses stage 2, which exited because stage 1 died), so the
torch communicator appends a *failure census* to every lost-peer or timeout error: it asks
the rendezvous store which ranks reported failures of their own and, on this host, whose
process is gone, within a few seconds ("failure census: rank 1 died (process gone)").

**Byte accounting.** ``stats.bytes_sent[category]`` counts the *payload bytes this rank
hands to the communicator for other ranks*:

* ``send``/``isend``: ``t.nbytes``;
* ``all_to_all``: ``sum(send[j].nbytes for j != rank)`` (the entry for this rank is a local
  copy);
* ``all_reduce``: ``t.nbytes`` of the reduced tensor, on every rank (not the algorithm's
  wire traffic, which depends on the library's reduction algorithm);
* ``broadcast``: ``t.nbytes`` on the source rank only;
* ``barrier``, receives: nothing.

A communicator of world size 1 counts nothing: no byte leaves the process.
``stats.bytes_recv`` mirrors this for the receiving side (``recv``/``irecv``: ``nbytes``;
``all_to_all``: ``sum(recv[j].nbytes for j != rank)``; ``all_reduce``: ``nbytes``;
``broadcast``: ``nbytes`` on every rank except the source). ``stats.wait_s`` is the wall
time spent inside communication calls (posting and waiting), in total and per category.
Sub-communicators made by :meth:`Communicator.split_groups` share their parent's stats, so
each rank has one total. Categories in use: ``"halo_fwd"``, ``"halo_bwd"``, ``"pipe_act"``,
``"pipe_grad"``, ``"allreduce"``, ``"control"``; any other string is accepted.
"""

from __future__ import annotations

import logging
import os
import sys
import re
import socket
import threading
import time
from abc import ABC, abstractmethod
from collections import defaultdict, deque
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable, Iterator, Mapping, Sequence

import torch

from gnnpipe import GnnpipeError

log = logging.getLogger(__name__)

CATEGORIES = ("halo_fwd", "halo_bwd", "pipe_act", "pipe_grad", "allreduce", "control")
#: User tags must lie in ``[0, MAX_TAG]``; the largest tag every backend here accepts
#: (MPICH's ``MPI_TAG_UB`` is 2**29 - 1) with room above it for internal traffic.
MAX_TAG = 2**28 - 1
# Gloo matches point-to-point messages per (peer, tag) in order, so all_to_all's internal
# messages get a tag no user message can carry.
_A2A_TAG = MAX_TAG + 1
_REDUCE_OPS = ("sum", "avg", "max", "min", "prod")


# --------------------------------------------------------------------------- errors


class CommError(GnnpipeError):
    """Communication failed (or was misused); the message names the rank and operation."""


class CommUsageError(CommError, ValueError):
    """A communication call got arguments it cannot accept (bad peer, tag, shapes)."""


class CommTimeoutError(CommError, TimeoutError):
    """A communication call did not complete within the communicator's timeout."""


class PeerFailedError(CommError):
    """A peer closed its connection in the middle of an operation: it probably died."""


# --------------------------------------------------------------------------- launch


@dataclass(frozen=True)
class LaunchInfo:
    """Where this process sits in the job, as the launcher told it.

    Args:
        rank: global rank of this process, ``0 <= rank < world_size``.
        world_size: number of processes in the job.
        local_rank: rank among the processes on this host (selects the GPU).
        local_world_size: processes on this host (divides the cores).
        launcher: ``"torchrun"``, ``"mpich"``, ``"openmpi"``, ``"slurm"`` or ``"single"``.
    """

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    launcher: str


def _env_int(env: Mapping[str, str], name: str, launcher: str) -> int:
    value = env[name]
    try:
        return int(value)
    except ValueError:
        raise GnnpipeError(
            f"environment variable {name}={value!r} (set by {launcher}) is not an integer"
        ) from None


def _slurm_tasks_on_node(env: Mapping[str, str]) -> int | None:
    """Tasks on this node from ``SLURM_TASKS_PER_NODE`` (e.g. ``"2(x3),1"``) and NODEID."""
    spec = env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE")
    if not spec or "SLURM_NODEID" not in env:
        return None
    counts: list[int] = []
    for item in spec.split(","):
        m = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", item.strip())
        if m is None:
            return None
        counts.extend([int(m.group(1))] * int(m.group(2) or 1))
    node = _env_int(env, "SLURM_NODEID", "slurm")
    return counts[node] if 0 <= node < len(counts) else None


def detect_launch(env: Mapping[str, str] | None = None) -> LaunchInfo:
    """Reads rank and world size from the launcher's environment variables.

    Checked in order (the first launcher whose variables are present wins, so torchrun or
    mpirun inside a Slurm allocation is recognised as itself):

    * torchrun: ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``;
    * Open MPI: ``OMPI_COMM_WORLD_RANK``, ``OMPI_COMM_WORLD_SIZE``,
      ``OMPI_COMM_WORLD_LOCAL_RANK``, ``OMPI_COMM_WORLD_LOCAL_SIZE``;
    * MPICH/hydra: ``PMI_RANK``, ``PMI_SIZE``, ``MPI_LOCALRANKID``, ``MPI_LOCALNRANKS``;
    * Slurm srun: ``SLURM_PROCID``, ``SLURM_STEP_NUM_TASKS`` (or ``SLURM_NTASKS``),
      ``SLURM_LOCALID``, and the tasks on this node from ``SLURM_NTASKS_PER_NODE`` or
      ``SLURM_TASKS_PER_NODE`` + ``SLURM_NODEID``;
    * otherwise a single process.

    Where a launcher gives no local information, all ranks are assumed to share this host
    (the safe assumption for dividing cores).

    Args:
        env: the environment to read; ``os.environ`` by default.

    Returns:
        The :class:`LaunchInfo`.

    Raises:
        GnnpipeError: a variable is not an integer, or a rank lies outside its world.
    """
    env = os.environ if env is None else env
    if "RANK" in env and "WORLD_SIZE" in env:
        launcher, keys = "torchrun", ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")
    elif "OMPI_COMM_WORLD_RANK" in env and "OMPI_COMM_WORLD_SIZE" in env:
        launcher, keys = "openmpi", (
            "OMPI_COMM_WORLD_RANK",
            "OMPI_COMM_WORLD_SIZE",
            "OMPI_COMM_WORLD_LOCAL_RANK",
            "OMPI_COMM_WORLD_LOCAL_SIZE",
        )
    elif "PMI_RANK" in env and "PMI_SIZE" in env:
        launcher, keys = "mpich", ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS")
    elif "SLURM_PROCID" in env and ("SLURM_STEP_NUM_TASKS" in env or "SLURM_NTASKS" in env):
        size_key = "SLURM_STEP_NUM_TASKS" if "SLURM_STEP_NUM_TASKS" in env else "SLURM_NTASKS"
        launcher, keys = "slurm", ("SLURM_PROCID", size_key, "SLURM_LOCALID", "")
    else:
        return LaunchInfo(0, 1, 0, 1, "single")

    rank = _env_int(env, keys[0], launcher)
    world = _env_int(env, keys[1], launcher)
    local_rank = _env_int(env, keys[2], launcher) if keys[2] in env else None
    if launcher == "slurm":
        per_node = env.get("SLURM_NTASKS_PER_NODE", "")
        local_world = int(per_node) if per_node.isdigit() else _slurm_tasks_on_node(env)
    else:
        local_world = _env_int(env, keys[3], launcher) if keys[3] in env else None
    if local_rank is None or local_world is None:
        local_rank, local_world = rank, world
    if world < 1 or not 0 <= rank < world:
        raise GnnpipeError(
            f"{launcher} environment: {keys[0]}={rank} must lie in [0, {keys[1]}={world})"
        )
    if local_world < 1 or not 0 <= local_rank < local_world:
        raise GnnpipeError(
            f"{launcher} environment: local rank {local_rank} must lie in "
            f"[0, local world size {local_world})"
        )
    return LaunchInfo(rank, world, local_rank, local_world, launcher)


def threads_per_rank(launch: LaunchInfo | None = None) -> int:
    """Intra-op threads this process should use: its cores divided by the ranks on its host.

    Oversubscription is expensive here (two OpenMP threads competing with another process
    for a core made a sparse aggregation 10x slower), so every rank takes an equal share.

    Args:
        launch: the job layout; :func:`detect_launch` by default.

    Returns:
        ``max(1, len(os.sched_getaffinity(0)) // launch.local_world_size)``.
    """
    launch = detect_launch() if launch is None else launch
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, cores // launch.local_world_size)


# --------------------------------------------------------------------------- stats


class CommStats:
    """Bytes handed to the communicator and time spent in it, per category.

    Attributes:
        bytes_sent: category -> payload bytes this rank handed over for other ranks (see
            the module docstring for the exact definition per operation).
        bytes_recv: category -> payload bytes this rank received from other ranks.
        wait_s_by_category: category -> seconds spent inside communication calls.
        calls: category -> number of operations.
    """

    def __init__(self) -> None:
        self.bytes_sent: defaultdict[str, int] = defaultdict(int)
        self.bytes_recv: defaultdict[str, int] = defaultdict(int)
        self.wait_s_by_category: defaultdict[str, float] = defaultdict(float)
        self.calls: defaultdict[str, int] = defaultdict(int)

    @property
    def wait_s(self) -> float:
        """Total seconds spent inside communication calls, all categories."""
        return sum(self.wait_s_by_category.values())

    @property
    def total_bytes_sent(self) -> int:
        """Bytes sent over all categories."""
        return sum(self.bytes_sent.values())

    def reset(self) -> None:
        """Sets every counter back to zero (e.g. at the start of an epoch)."""
        self.bytes_sent.clear()
        self.bytes_recv.clear()
        self.wait_s_by_category.clear()
        self.calls.clear()

    def snapshot(self) -> dict[str, Any]:
        """A plain, JSON-serialisable copy of the counters."""
        return {
            "bytes_sent": dict(self.bytes_sent),
            "bytes_recv": dict(self.bytes_recv),
            "total_bytes_sent": self.total_bytes_sent,
            "wait_s": self.wait_s,
            "wait_s_by_category": dict(self.wait_s_by_category),
            "calls": dict(self.calls),
        }

    @contextmanager
    def timed(self, category: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.wait_s_by_category[category] += time.perf_counter() - start


# --------------------------------------------------------------------------- base


class Work(ABC):
    """A pending non-blocking operation.

    :meth:`wait` blocks until the operation completes, honouring the communicator's
    timeout, and counts the time as waiting in the operation's category.
    """

    def __init__(self, comm: "Communicator", category: str, what: str, peers: Sequence[int],
                 finish: Callable[[], None] | None = None) -> None:
        self._comm = comm
        self._category = category
        self._what = what  # e.g. "recv from rank 3 (pipe_act, tag 7)"
        self._peers = list(peers)
        self._finish = finish
        self._done = False

    def wait(self, timeout_s: float | None = None) -> None:
        """Blocks until done.

        Args:
            timeout_s: overrides the communicator's timeout for this wait.

        Raises:
            CommTimeoutError: not complete within the timeout.
            PeerFailedError: a peer closed its connection.
        """
        if self._done:
            return
        timeout = self._comm.timeout_s if timeout_s is None else timeout_s
        with self._comm.stats.timed(self._category):
            self._wait(timeout)
            if self._finish is not None:
                self._finish()
        self._done = True

    def is_completed(self) -> bool:
        """Whether the operation has finished (never blocks)."""
        return self._done or self._test()

    @abstractmethod
    def _wait(self, timeout_s: float) -> None: ...

    @abstractmethod
    def _test(self) -> bool: ...


class _DoneWork(Work):
    def _wait(self, timeout_s: float) -> None:
        pass

    def _test(self) -> bool:
        return True


class Communicator(ABC):
    """A group of ranks that exchange tensors; see the module docstring for semantics.

    Attributes:
        rank: this process's rank in this communicator.
        world_size: ranks in this communicator.
        global_ranks: global rank of each member, in communicator rank order (used in
            error messages, which always name global ranks).
        stats: the byte and time counters, shared with every sub-communicator.
        timeout_s: seconds any blocking call or wait may take.
        device: where tensors handed to this communicator live.
    """

    kind = "abstract"

    def __init__(self, rank: int, world_size: int, global_ranks: Sequence[int],
                 stats: CommStats, timeout_s: float, device: torch.device) -> None:
        self.rank = rank
        self.world_size = world_size
        self.global_ranks = list(global_ranks)
        self.stats = stats
        self.timeout_s = float(timeout_s)
        self.device = torch.device(device)
        self._closed = False
        # Sends to self in a world of one rank queue here for the matching receive.
        self._mailbox: defaultdict[int, deque[torch.Tensor]] = defaultdict(deque)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(rank={self.rank}, world_size={self.world_size}, "
                f"global_ranks={self.global_ranks}, timeout_s={self.timeout_s})")

    # -- naming, validation, accounting

    @property
    def global_rank(self) -> int:
        return self.global_ranks[self.rank]

    def _me(self) -> str:
        return f"rank {self.global_rank}"

    def _peer(self, r: int) -> str:
        return f"rank {self.global_ranks[r]}"

    def _check_peer(self, peer: int, op: str) -> None:
        if not isinstance(peer, int) or not 0 <= peer < self.world_size:
            raise CommUsageError(
                f"{self._me()}: {op}: peer {peer!r} outside this communicator's ranks "
                f"[0, {self.world_size})"
            )
        if peer == self.rank and self.world_size > 1:
            raise CommUsageError(f"{self._me()}: {op} to itself; copy the tensor instead")

    def _check_tag(self, tag: int, op: str) -> None:
        if not isinstance(tag, int) or not 0 <= tag <= MAX_TAG:
            raise CommUsageError(f"{self._me()}: {op}: tag {tag!r} outside [0, {MAX_TAG}]")

    def _check_tensor(self, t: Any, op: str, name: str = "tensor") -> None:
        if not isinstance(t, torch.Tensor):
            raise CommUsageError(f"{self._me()}: {op}: {name} is a {type(t).__name__}, "
                                 "expected a torch.Tensor")

    def _count(self, category: str, sent: int = 0, recv: int = 0) -> None:
        self.stats.calls[category] += 1
        if self.world_size > 1:
            self.stats.bytes_sent[category] += sent
            self.stats.bytes_recv[category] += recv

    # -- point to point

    def send(self, t: torch.Tensor, dst: int, tag: int = 0, category: str = "control") -> None:
        """Sends ``t`` to rank ``dst`` and returns when the buffer may be reused.

        Args:
            t: any tensor (made contiguous on this communicator's device if it is not).
            dst: destination rank in this communicator.
            tag: matches the receiver's tag, ``0 <= tag <= MAX_TAG``.
            category: accounting category.
        """
        self.isend(t, dst, tag, category).wait()

    def recv(self, t: torch.Tensor, src: int, tag: int = 0,
             category: str = "control") -> torch.Tensor:
        """Receives into ``t`` (whose shape and dtype must match what ``src`` sent).

        Args:
            t: preallocated buffer, filled in place.
            src: source rank in this communicator.
            tag: the sender's tag.
            category: accounting category (and the name used in error messages).

        Returns:
            ``t``.
        """
        self.irecv(t, src, tag, category).wait()
        return t

    def isend(self, t: torch.Tensor, dst: int, tag: int = 0, category: str = "control") -> Work:
        """Starts sending ``t`` to ``dst``; ``t`` must stay unchanged until ``wait()``."""
        self._check_tensor(t, "isend")
        self._check_peer(dst, "isend")
        self._check_tag(tag, "isend")
        self._count(category, sent=t.nbytes)
        what = f"send to {self._peer(dst)} ({category}, tag {tag})"
        with self.stats.timed(category):
            if self.world_size == 1:
                return self._local_isend(t, tag, category, what)
            return self._isend(t, dst, tag, category, what)

    def irecv(self, t: torch.Tensor, src: int, tag: int = 0, category: str = "control") -> Work:
        """Starts receiving into ``t`` from ``src``; ``t`` is valid after ``wait()``."""
        self._check_tensor(t, "irecv")
        self._check_peer(src, "irecv")
        self._check_tag(tag, "irecv")
        self._count(category, recv=t.nbytes)
        what = f"recv from {self._peer(src)} ({category}, tag {tag})"
        with self.stats.timed(category):
            if self.world_size == 1:
                return self._local_irecv(t, tag, category, what)
            return self._irecv(t, src, tag, category, what)

    # -- collectives

    def all_to_all(self, send: Sequence[torch.Tensor], recv: Sequence[torch.Tensor],
                   category: str = "control") -> None:
        """Every rank sends ``send[j]`` to rank ``j`` and receives rank ``j``'s into ``recv[j]``.

        Sizes may differ per peer, and may be zero (nothing travels). The caller must know
        what each peer sends: ``recv[j]`` is preallocated with exactly the shape of rank
        ``j``'s ``send[rank]``. The entry for this rank is a local copy.

        When the tensors of ``send`` (and of ``recv``) are consecutive views of one
        contiguous buffer in peer order (e.g. ``buf.split(sizes)``), the MPI communicator
        hands that buffer to ``Alltoallv`` directly; otherwise each entry travels on its
        own. Neither path copies.

        Args:
            send: ``world_size`` tensors, ``send[j]`` for rank ``j``.
            recv: ``world_size`` buffers, filled in place.
            category: accounting category.

        Shapes:
            send[j]: ``[n_j, d]`` or ``[n_j]``; recv[j]: ``[m_j, d]`` or ``[m_j]``, with
            ``recv[rank].shape == send[rank].shape`` and one dtype throughout.
        """
        op = "all_to_all"
        if len(send) != self.world_size or len(recv) != self.world_size:
            raise CommUsageError(
                f"{self._me()}: {op}: expected {self.world_size} send and recv tensors, "
                f"got {len(send)} and {len(recv)}"
            )
        for j in range(self.world_size):
            self._check_tensor(send[j], op, f"send[{j}]")
            self._check_tensor(recv[j], op, f"recv[{j}]")
            if send[j].dtype != send[0].dtype or recv[j].dtype != send[0].dtype:
                raise CommUsageError(
                    f"{self._me()}: {op}: dtypes differ: send[0] is {send[0].dtype}, "
                    f"send[{j}] {send[j].dtype}, recv[{j}] {recv[j].dtype}"
                )
        me = self.rank
        if send[me].shape != recv[me].shape:
            raise CommUsageError(
                f"{self._me()}: {op}: recv[{me}] has shape {tuple(recv[me].shape)} but "
                f"send[{me}] (the local copy) has {tuple(send[me].shape)}"
            )
        others = [j for j in range(self.world_size) if j != me]
        self._count(category, sent=sum(send[j].nbytes for j in others),
                    recv=sum(recv[j].nbytes for j in others))
        with self.stats.timed(category):
            if recv[me].numel():
                recv[me].copy_(send[me])
            if self.world_size > 1:
                self._all_to_all(send, recv, category)

    def all_reduce(self, t: torch.Tensor, op: str = "sum", category: str = "allreduce") -> None:
        """Reduces ``t`` over all ranks, in place.

        Args:
            t: the tensor; every rank passes the same shape and dtype.
            op: ``"sum"``, ``"avg"`` (sum divided by world size), ``"max"``, ``"min"`` or
                ``"prod"``.
            category: accounting category.
        """
        self._check_tensor(t, "all_reduce")
        if op not in _REDUCE_OPS:
            raise CommUsageError(f"{self._me()}: all_reduce: op {op!r} is not one of "
                                 f"{', '.join(_REDUCE_OPS)}")
        self._count(category, sent=t.nbytes, recv=t.nbytes)
        with self.stats.timed(category):
            if self.world_size > 1:
                self._all_reduce(t, "sum" if op == "avg" else op, category)
                if op == "avg":
                    t.div_(self.world_size)

    def broadcast(self, t: torch.Tensor, src: int = 0, category: str = "control") -> None:
        """Copies ``t`` from rank ``src`` into ``t`` on every other rank, in place."""
        self._check_tensor(t, "broadcast")
        if not isinstance(src, int) or not 0 <= src < self.world_size:
            raise CommUsageError(f"{self._me()}: broadcast: src {src!r} outside "
                                 f"[0, {self.world_size})")
        mine = self.rank == src
        self._count(category, sent=t.nbytes if mine else 0, recv=0 if mine else t.nbytes)
        with self.stats.timed(category):
            if self.world_size > 1:
                self._broadcast(t, src, category)

    def barrier(self, category: str = "control") -> None:
        """Returns when every rank of this communicator has entered the barrier."""
        self._count(category)
        with self.stats.timed(category):
            if self.world_size > 1:
                self._barrier(category)

    def split_groups(self, groups: Sequence[Sequence[int]]) -> "Communicator | None":
        """Splits into disjoint sub-communicators; collective over this communicator.

        Every rank must call it with the same ``groups``. Ranks inside a group are numbered
        in the order the group lists them. Sub-communicators share this one's stats and
        timeout. For hybrid parallelism, call it twice on the world: once with the
        pipeline of each way, once with the ranks of each stage across ways.

        Args:
            groups: disjoint lists of this communicator's ranks; ranks in no group get
                ``None``.

        Returns:
            The sub-communicator of the group containing this rank, or ``None``.
        """
        seen: dict[int, int] = {}
        groups = [list(g) for g in groups]
        for gi, g in enumerate(groups):
            if not g:
                raise CommUsageError(f"{self._me()}: split_groups: group {gi} is empty")
            for r in g:
                if not isinstance(r, int) or not 0 <= r < self.world_size:
                    raise CommUsageError(f"{self._me()}: split_groups: group {gi} names "
                                         f"rank {r!r}, outside [0, {self.world_size})")
                if r in seen:
                    raise CommUsageError(f"{self._me()}: split_groups: rank {r} is in "
                                         f"group {seen[r]} and group {gi}; groups must be "
                                         "disjoint")
                seen[r] = gi
        with self.stats.timed("control"):
            return self._split_groups(groups, seen.get(self.rank))

    def split(self, ranks: Sequence[int]) -> "Communicator | None":
        """One sub-communicator over ``ranks`` (numbered in that order); others get ``None``.

        Collective: every rank of this communicator calls it with the same ``ranks``.
        Shorthand for ``split_groups([ranks])``.
        """
        return self.split_groups([list(ranks)])

    def close(self) -> None:
        """Releases the communicator; safe to call twice."""
        if not self._closed:
            self._closed = True
            self._close()

    def __enter__(self) -> "Communicator":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- what implementations provide

    @abstractmethod
    def _isend(self, t: torch.Tensor, dst: int, tag: int, category: str, what: str) -> Work: ...

    @abstractmethod
    def _irecv(self, t: torch.Tensor, src: int, tag: int, category: str, what: str) -> Work: ...

    @abstractmethod
    def _all_to_all(self, send: Sequence[torch.Tensor], recv: Sequence[torch.Tensor],
                    category: str) -> None: ...

    @abstractmethod
    def _all_reduce(self, t: torch.Tensor, op: str, category: str) -> None: ...

    @abstractmethod
    def _broadcast(self, t: torch.Tensor, src: int, category: str) -> None: ...

    @abstractmethod
    def _barrier(self, category: str) -> None: ...

    @abstractmethod
    def _split_groups(self, groups: list[list[int]], mine: int | None) -> "Communicator | None": ...

    @abstractmethod
    def _close(self) -> None: ...

    # -- shared helpers

    def _staged(self, t: torch.Tensor) -> tuple[torch.Tensor, Callable[[], None] | None]:
        """A contiguous buffer on this device for ``t``, and how to copy a result back."""
        if t.is_contiguous() and t.device == self.device:
            return t, None
        buf = t.detach().to(self.device).contiguous()
        return buf, lambda: t.copy_(buf)

    def _local_isend(self, t: torch.Tensor, tag: int, category: str, what: str) -> Work:
        self._mailbox[tag].append(t.detach().clone())
        return _DoneWork(self, category, what, [])

    def _local_irecv(self, t: torch.Tensor, tag: int, category: str, what: str) -> Work:
        box = self._mailbox[tag]
        me = self._me()

        class _LocalRecv(Work):
            def _test(self) -> bool:
                return bool(box)

            def _wait(self, timeout_s: float) -> None:
                if not box:
                    # Nothing can arrive later: this process is the only sender.
                    raise CommTimeoutError(f"{me}: {what}: nothing was sent to self with "
                                           f"tag {tag} (world of one rank)")
                t.copy_(box.popleft())

        return _LocalRecv(self, category, what, [])

    def _timeout_msg(self, what: str, timeout_s: float, peers: Sequence[int]) -> str:
        names = ", ".join(self._peer(p) for p in peers) or "a peer"
        verb = "may have died" if len(peers) == 1 else "one of them may have died"
        return (f"{self._me()}: {what} timed out after {timeout_s:.1f} s — {names} {verb} "
                "or never posted the matching operation")


# --------------------------------------------------------------------------- single process


class SingleProcessCommunicator(Communicator):
    """World size 1: collectives are local, sends to self queue up for receives from self.

    Counts calls and time but no bytes: nothing leaves the process.
    """

    kind = "single"

    def __init__(self, timeout_s: float = 60.0, device: str | torch.device = "cpu",
                 stats: CommStats | None = None) -> None:
        super().__init__(0, 1, [0], stats or CommStats(), timeout_s, torch.device(device))

    def _isend(self, t, dst, tag, category, what):
        return self._local_isend(t, tag, category, what)

    def _irecv(self, t, src, tag, category, what):
        return self._local_irecv(t, tag, category, what)

    def _all_to_all(self, send, recv, category):
        pass  # world size 1: the base class already made the local copy

    def _all_reduce(self, t, op, category):
        pass

    def _broadcast(self, t, src, category):
        pass

    def _barrier(self, category):
        pass

    def _split_groups(self, groups, mine):
        if mine is None:
            return None
        return SingleProcessCommunicator(self.timeout_s, self.device, self.stats)

    def _close(self):
        pass


# --------------------------------------------------------------------------- torch.distributed

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
        # Short enough to keep the failure bound close to --timeout even when stages fail
        # one after another, long enough for ranks that fail together to report.
        self.window_s = min(2.0, timeout_s / 4)
        attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        self._prefix = f"gnnpipe/census/{attempt}/"
        self._host = socket.gethostname()
        self._verdict: str | None = None

    def register(self) -> None:
        self._store.set(f"{self._prefix}who/{self._rank}", f"{self._host} {os.getpid()}")

    def _process_gone(self, r: int) -> bool:
        key = f"{self._prefix}who/{r}"
        if not self._store.check([key]):
            return False
        host, _, pid = self._store.get(key).decode().partition(" ")
        if host != self._host or not pid.isdigit():
            return False  # another machine: only its silence can tell
        try:
            with open(f"/proc/{pid}/stat") as f:
                # A killed child its launcher has not reaped yet is a zombie: dead too.
                return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
        except (FileNotFoundError, ProcessLookupError):
            return True
        except OSError:
            return False

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
                self._verdict = (
                    "the rendezvous store cannot be reached either, and it lives in rank 0's "
                    "process (or torchrun's agent on the first host): rank 0 or its host is "
                    f"probably dead or cut off ({why})")
        return self._verdict

    def _linger(self) -> None:
        others = [r for r in range(self._world) if r != self._rank]
        deadline = time.monotonic() + self._linger_s
        while time.monotonic() < deadline:
            try:
                if all(self._store.check([f"{self._prefix}failed/{r}"]) or
                       self._process_gone(r) for r in others):
                    return
            except Exception:
                return
            time.sleep(0.05)

    def _ask(self) -> str:
        self._store.set_timeout(timedelta(seconds=max(self.window_s, 1.0)))
        self._store.set(f"{self._prefix}failed/{self._rank}", "1")
        others = [r for r in range(self._world) if r != self._rank]
        deadline = time.monotonic() + self.window_s
        while True:
            reported = [r for r in others if self._store.check([f"{self._prefix}failed/{r}"])]
            gone = [r for r in others if r not in reported and self._process_gone(r)]
            silent = [r for r in others if r not in reported and r not in gone]
            if gone or not silent or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        if gone:
            return f"{_rank_list(gone)} died (process gone)"
        if silent:
            return (f"no failure report within {self.window_s:.0f} s from "
                    f"{_rank_list(silent)}: dead, hung or cut off")
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
        import torch.distributed as dist

        try:
            work = fn()
        except (RuntimeError, dist.DistError) as e:
            raise self._translate(e, what, self.timeout_s, peers) from e
        _TorchWork(self, [work], category, what, peers)._wait(self.timeout_s)

    def _others(self) -> list[int]:
        return [r for r in range(self.world_size) if r != self.rank]

    def _isend(self, t, dst, tag, category, what):
        import torch.distributed as dist

        buf, _ = self._staged(t)
        try:
            w = dist.isend(buf, group=self._group, tag=tag, group_dst=dst)
        except RuntimeError as e:
            raise self._translate(e, what, self.timeout_s, [dst]) from e
        return _TorchWork(self, [w], category, what, [dst], keep=buf)

    def _irecv(self, t, src, tag, category, what):
        import torch.distributed as dist

        buf, finish = self._staged(t)
        try:
            w = dist.irecv(buf, group=self._group, tag=tag, group_src=src)
        except RuntimeError as e:
            raise self._translate(e, what, self.timeout_s, [src]) from e
        return _TorchWork(self, [w], category, what, [src], finish=finish)

    def _all_to_all(self, send, recv, category):
        # Gloo has no variable-size all_to_all of separate tensors; point-to-point pairs
        # work on both backends, and batch_isend_irecv groups them so NCCL cannot deadlock.
        import torch.distributed as dist

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
        import torch.distributed as dist

        rop = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN,
               "prod": dist.ReduceOp.PRODUCT}[op]
        buf, finish = self._staged(t)
        self._run(f"all_reduce ({category})", self._others(),
                  lambda: dist.all_reduce(buf, op=rop, group=self._group, async_op=True),
                  category)
        if finish is not None:
            finish()

    def _broadcast(self, t, src, category):
        import torch.distributed as dist

        buf, finish = self._staged(t)
        peers = self._others() if self.rank == src else [src]
        self._run(f"broadcast from {self._peer(src)} ({category})", peers,
                  lambda: dist.broadcast(buf, group=self._group, group_src=src, async_op=True),
                  category)
        if finish is not None and self.rank != src:
            finish()

    def _barrier(self, category):
        import torch.distributed as dist

        self._run(f"barrier ({category})", self._others(),
                  lambda: dist.barrier(group=self._group, async_op=True), category)

    def _split_groups(self, groups, mine):
        import torch.distributed as dist

        if not self._is_world:
            # new_group needs every process of the job to enter it; a sub-communicator's
            # non-members would not, so the groups must be built from the world.
            raise CommUsageError(
                f"{self._me()}: split_groups of a sub-communicator is not supported by the "
                "torch backend; split the world communicator into the final groups instead"
            )
        result = None
        for gi, g in enumerate(groups):
            # Every process enters new_group for every group, in the same order: that is
            # what torch.distributed requires. sort_ranks=False keeps the caller's order.
            pg = dist.new_group(ranks=[self.global_ranks[r] for r in g],
                                timeout=timedelta(seconds=self.timeout_s),
                                sort_ranks=False)
            if gi == mine:
                result = TorchCommunicator(g.index(self.rank), len(g),
                                           [self.global_ranks[r] for r in g], self.stats,
                                           self.timeout_s, self.device, group=pg,
                                           is_world=False, census=self._census)
        return result

    def _close(self):
        import torch.distributed as dist

        if not dist.is_initialized():
            return
        if self._is_world:
            dist.destroy_process_group()
        elif self._group is not None:
            dist.destroy_process_group(self._group)


# --------------------------------------------------------------------------- MPI


def _poll(requests: list[Any], timeout_s: float, on_timeout: Callable[[], Exception]) -> None:
    """Waits for all MPI requests, polling so that a deadline can be enforced.

    MPI makes progress on non-blocking collectives only inside MPI calls, so the first
    10 ms poll continuously, yielding the core between tests (an oversubscribed core goes
    to whoever needs it); after that, sleeps with a doubling back-off capped at 1 ms keep
    a long wait from burning a core. Measured on 2 ranks: a 4 MB-per-peer Ialltoallv took
    3.6 ms with sleeps from the start and 0.2 ms when polled continuously.
    """
    from mpi4py import MPI

    if not requests:
        return
    start = time.perf_counter()
    deadline = start + timeout_s
    nap = 0.0
    while not MPI.Request.Testall(requests):
        now = time.perf_counter()
        if now > deadline:
            raise on_timeout()
        if now - start < 0.01:
            os.sched_yield()
        else:
            nap = min(max(2 * nap, 1e-5), 1e-3)
            time.sleep(nap)


class _MpiWork(Work):
    def __init__(self, comm: "MpiCommunicator", requests: list[Any], category: str, what: str,
                 peers: Sequence[int], finish: Callable[[], None] | None = None,
                 keep: Any = None) -> None:
        super().__init__(comm, category, what, peers, finish)
        self._requests = requests
        self._keep = keep  # buffers MPI reads or writes must outlive the request

    def _test(self) -> bool:
        from mpi4py import MPI

        return MPI.Request.Testall(self._requests)

    def _wait(self, timeout_s: float) -> None:
        comm: MpiCommunicator = self._comm  # type: ignore[assignment]
        try:
            _poll(self._requests, timeout_s,
                  lambda: CommTimeoutError(comm._timeout_msg(self._what, timeout_s,
                                                             self._peers)))
        except CommError:
            raise
        except Exception as e:  # MPI.Exception
            raise CommError(f"{comm._me()}: {self._what} failed: {e}") from e
        self._keep = None


def _mem(t: torch.Tensor) -> Any:
    """The tensor's own memory as an MPI buffer (no copy); ``t`` must be contiguous CPU."""
    from mpi4py import MPI

    return MPI.memory.fromaddress(t.data_ptr() if t.nbytes else 0, t.nbytes)


def _packed(ts: Sequence[torch.Tensor]) -> tuple[int, list[int], list[int], int] | None:
    """If ``ts`` are consecutive pieces of one contiguous CPU buffer, in order.

    Returns:
        ``(base address, byte counts, byte displacements, total bytes)``, or ``None``.
    """
    if any(t.device.type != "cpu" or not t.is_contiguous() for t in ts):
        return None
    base, off, found = 0, 0, False
    counts, displs = [], []
    for t in ts:
        if t.nbytes:  # empty pieces may point anywhere (a fresh empty tensor points at 0)
            if not found:
                base, found = t.data_ptr() - off, True
            if t.data_ptr() != base + off:
                return None
        counts.append(t.nbytes)
        displs.append(off)
        off += t.nbytes
    return base, counts, displs, off


_MPI_REDUCE_TYPES = {
    torch.float32: "FLOAT", torch.float64: "DOUBLE", torch.int32: "INT32_T",
    torch.int64: "INT64_T", torch.int16: "INT16_T", torch.int8: "INT8_T",
    torch.uint8: "UINT8_T", torch.bool: "C_BOOL",
}


class MpiCommunicator(Communicator):
    """mpi4py on an ``MPI.Comm``; tensors' memory goes to MPI without copies.

    Contiguous CPU tensors are passed as ``MPI.memory`` views of their storage; others
    (non-contiguous, or CUDA when the device is cuda) are staged through a contiguous host
    copy. Point-to-point traffic and the internal traffic of collectives use separate
    duplicated communicators, so user tags can never match internal messages.
    """

    kind = "mpi"

    def __init__(self, mpi_comm: Any, stats: CommStats, timeout_s: float,
                 device: torch.device, global_ranks: Sequence[int] | None = None,
                 owns: bool = False) -> None:
        rank, size = mpi_comm.Get_rank(), mpi_comm.Get_size()
        super().__init__(rank, size, global_ranks or list(range(size)), stats, timeout_s,
                         torch.device("cpu"))
        self.device = torch.device(device)
        self._comm = mpi_comm
        self._coll = mpi_comm.Dup()  # all_to_all's point-to-point pairs
        self._owns = owns

    def _staged(self, t):
        if t.is_contiguous() and t.device.type == "cpu":
            return t, None
        buf = t.detach().to("cpu").contiguous()
        return buf, lambda: t.copy_(buf)

    def _poll_or_raise(self, reqs, what, peers, category, keep=None, finish=None) -> None:
        _MpiWork(self, reqs, category, what, peers, finish, keep)._wait(self.timeout_s)
        if finish is not None:
            finish()

    def _isend(self, t, dst, tag, category, what):
        from mpi4py import MPI

        buf, _ = self._staged(t)
        req = self._comm.Isend([_mem(buf), buf.nbytes, MPI.BYTE], dest=dst, tag=tag)
        return _MpiWork(self, [req], category, what, [dst], keep=buf)

    def _irecv(self, t, src, tag, category, what):
        from mpi4py import MPI

        buf, finish = self._staged(t)
        req = self._comm.Irecv([_mem(buf), buf.nbytes, MPI.BYTE], source=src, tag=tag)
        return _MpiWork(self, [req], category, what, [src], finish=finish, keep=buf)

    def _all_to_all(self, send, recv, category):
        from mpi4py import MPI

        what = f"all_to_all ({category})"
        others = [j for j in range(self.world_size) if j != self.rank]
        ps, pr = _packed(send), _packed(recv)
        if ps is not None and pr is not None:
            # One contiguous buffer each way: Alltoallv straight on it. This rank's own
            # entry was already copied, so it travels as zero bytes.
            (sb, sc, sd, stot), (rb, rc, rd, rtot) = ps, pr
            sc[self.rank] = rc[self.rank] = 0
            smem = MPI.memory.fromaddress(sb, stot) if stot else MPI.memory.fromaddress(0, 0)
            rmem = MPI.memory.fromaddress(rb, rtot) if rtot else MPI.memory.fromaddress(0, 0)
            req = self._coll.Ialltoallv([smem, (sc, sd), MPI.BYTE], [rmem, (rc, rd), MPI.BYTE])
            self._poll_or_raise([req], what, others, category, keep=(send, recv))
            return
        reqs, keep, finishes = [], [], []
        for j in others:
            if recv[j].numel():
                buf, fin = self._staged(recv[j])
                reqs.append(self._coll.Irecv([_mem(buf), buf.nbytes, MPI.BYTE], source=j, tag=0))
                keep.append(buf)
                finishes.append(fin)
        for j in others:
            if send[j].numel():
                buf, _ = self._staged(send[j])
                reqs.append(self._coll.Isend([_mem(buf), buf.nbytes, MPI.BYTE], dest=j, tag=0))
                keep.append(buf)
        self._poll_or_raise(reqs, what, others, category, keep=keep)
        for fin in finishes:
            if fin is not None:
                fin()

    def _all_reduce(self, t, op, category):
        from mpi4py import MPI

        if t.dtype not in _MPI_REDUCE_TYPES:
            raise CommUsageError(f"{self._me()}: all_reduce: dtype {t.dtype} has no MPI "
                                 f"type; use one of {sorted(map(str, _MPI_REDUCE_TYPES))}")
        mop = {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN, "prod": MPI.PROD}[op]
        if t.dtype == torch.bool:
            mop = {"sum": MPI.LOR, "max": MPI.LOR, "min": MPI.LAND, "prod": MPI.LAND}[op]
        buf, finish = self._staged(t)
        mtype = getattr(MPI, _MPI_REDUCE_TYPES[t.dtype])
        req = self._comm.Iallreduce(MPI.IN_PLACE, [_mem(buf), buf.numel(), mtype], mop)
        others = [j for j in range(self.world_size) if j != self.rank]
        self._poll_or_raise([req], f"all_reduce ({category})", others, category, keep=buf,
                            finish=finish)

    def _broadcast(self, t, src, category):
        from mpi4py import MPI

        buf, finish = self._staged(t)
        req = self._comm.Ibcast([_mem(buf), buf.nbytes, MPI.BYTE], root=src)
        peers = [j for j in range(self.world_size) if j != self.rank] if self.rank == src else [src]
        self._poll_or_raise([req], f"broadcast from {self._peer(src)} ({category})", peers,
                            category, keep=buf, finish=finish if self.rank != src else None)

    def _barrier(self, category):
        req = self._comm.Ibarrier()
        others = [j for j in range(self.world_size) if j != self.rank]
        self._poll_or_raise([req], f"barrier ({category})", others, category)

    def _split_groups(self, groups, mine):
        from mpi4py import MPI

        # Split is collective over this communicator; color = group index, key = position
        # in the group, so ranks inside are numbered in the order the caller gave.
        # (MPI has no non-blocking split, so unlike every other call this one cannot time
        # out; hydra's mpirun ends the job when a rank dies, which unblocks it.)
        color = MPI.UNDEFINED if mine is None else mine
        key = 0 if mine is None else groups[mine].index(self.rank)
        sub = self._comm.Split(color, key)
        if mine is None:
            return None
        return MpiCommunicator(sub, self.stats, self.timeout_s, self.device,
                               [self.global_ranks[r] for r in groups[mine]], owns=True)

    def _close(self):
        from mpi4py import MPI

        for c in (self._coll, self._comm if self._owns else None):
            if c is not None and c != MPI.COMM_NULL and not MPI.Is_finalized():
                c.Free()


# --------------------------------------------------------------------------- construction


def init_communicator(kind: str = "torch", device: str | torch.device = "cpu",
                      timeout_s: float = 60.0, init_method: str | None = None,
                      env: Mapping[str, str] | None = None) -> Communicator:
    """Builds the world communicator for this process.

    Rendezvous for ``kind="torch"`` (first that applies): ``init_method`` if given
    (``"file:///shared/path"`` or ``"tcp://host:port"``); ``MASTER_ADDR``/``MASTER_PORT``
    from the environment (torchrun sets them; set them yourself under mpirun or srun);
    the file named by ``GNNPIPE_RENDEZVOUS`` (on a filesystem every rank sees, and not left
    over from an earlier run); an in-memory store when the world has one rank.

    Args:
        kind: ``"torch"``, ``"mpi"`` or ``"single"`` (one process, all ops local).
        device: ``"cpu"`` (Gloo) or ``"cuda"`` (NCCL; this rank uses GPU ``local_rank``).
        timeout_s: seconds any operation may block before :class:`CommTimeoutError`.
        init_method: torch rendezvous URL, overriding the environment.
        env: environment to read; ``os.environ`` by default.

    Returns:
        The world :class:`Communicator`.

    Raises:
        CommError: unknown kind, no rendezvous, or the launcher and MPI disagree.
    """
    env = os.environ if env is None else env
    if timeout_s <= 0:
        raise CommUsageError(f"timeout_s must be positive, got {timeout_s}")
    device = torch.device(device)
    if device.type not in ("cpu", "cuda"):
        raise CommUsageError(f"device must be cpu or cuda, got {device}")
    launch = detect_launch(env)
    if kind == "single":
        if launch.world_size != 1:
            raise CommError(f"the single-process communicator was asked for, but "
                            f"{launch.launcher} started {launch.world_size} ranks; use "
                            "--comm torch or --comm mpi")
        return SingleProcessCommunicator(timeout_s, device)
    if device.type == "cuda":
        device = torch.device("cuda", launch.local_rank % max(1, torch.cuda.device_count()))
        torch.cuda.set_device(device)
    if kind == "mpi":
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
        if launch.launcher != "single" and (comm.Get_rank(), comm.Get_size()) != (
                launch.rank, launch.world_size):
            raise CommError(
                f"MPI says rank {comm.Get_rank()} of {comm.Get_size()} but {launch.launcher} "
                f"says rank {launch.rank} of {launch.world_size}: start MPI ranks with the "
                "mpirun of the MPI that mpi4py was built against"
            )
        log.debug("rank %d: MPI communicator, %d ranks (%s)", comm.Get_rank(),
                  comm.Get_size(), launch.launcher)
        return MpiCommunicator(comm, CommStats(), timeout_s, device)
    if kind != "torch":
        raise CommUsageError(f"communicator kind must be 'torch', 'mpi' or 'single', "
                             f"got {kind!r}")

    import torch.distributed as dist

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
    return TorchCommunicator(launch.rank, launch.world_size, range(launch.world_size),
                             CommStats(), timeout_s, device, census=census)


def exit_process(rc: int) -> None:
    """End this rank now: flush output, finalize MPI on success, skip interpreter teardown.

    Python's teardown destroys torch.distributed's C++ objects (Gloo pairs, the store's
    threads) in an unspecified order; measured here, about one clean 2-rank run in five then
    aborted *after* finishing ("terminate called without an active exception", exit 134).
    Every result is written and every communicator closed before this is called, so the
    rest of teardown only risks turning a success into a crash. MPI is finalized first on
    success (hydra reports ranks that exit without it); after a failure it is skipped, as
    finalizing can block on a dead peer and the launcher ends the job anyway.
    """
    import logging

    try:
        sys.stdout.flush()
        sys.stderr.flush()
        logging.shutdown()
    except Exception:
        pass
    if rc == 0 and "mpi4py.MPI" in sys.modules:
        from mpi4py import MPI

        if MPI.Is_initialized() and not MPI.Is_finalized():
            MPI.Finalize()
    os._exit(rc)
