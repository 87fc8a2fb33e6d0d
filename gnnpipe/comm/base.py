"""The communicator interface: what every backend offers, its errors, and its byte counts.

Every executor receives a :class:`Communicator` and never learns which library moves its
bytes. The backends live beside this module (:mod:`.local`, :mod:`.torch_backend`,
:mod:`.mpi_backend`); :mod:`.launch` reads the launcher's environment and builds one.

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
A peer on the same host that is *stopped* (``kill -STOP``: it ignores SIGTERM until
continued, so a launcher would wait on it) is SIGKILLed as the survivor exits, and one still
running but silent a further timeout later is *hung* and killed the same way; only a
process proven to be that rank of this job (pid and start time registered in its store).

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
each rank has one total. The categories in use are :data:`CATEGORIES` (the ones the
trainer reports per epoch) and ``"metrics"`` (the trainer's reduction of its own figures,
not reported); any other string is accepted.
"""

from __future__ import annotations

import io
import logging
import time
from abc import ABC, abstractmethod
from collections import defaultdict, deque
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Sequence

import torch

from gnnpipe._base import GnnpipeError

log = logging.getLogger(__name__)

#: Traffic categories, in the fixed order every rank reduces them in: halo rows and their
#: gradients (graph mode), the hybrid's way link (boundary rows between ways and their
#: gradients), chunk activations and their gradients (between pipeline stages), the
#: weight-gradient all-reduce, control messages (agreement, accuracy counts) and evaluation
#: traffic. A record written before the way link had its own (``halo_*`` only) lacks
#: ``way_*``: readers take a missing category as 0.
CATEGORIES = ("halo_fwd", "halo_bwd", "way_fwd", "way_bwd", "pipe_act", "pipe_grad", "input_fwd", "input_bwd",
              "allreduce", "control", "eval")
#: User tags must lie in ``[0, MAX_TAG]``; the largest tag every backend here accepts
#: (MPICH's ``MPI_TAG_UB`` is 2**29 - 1) with room above it for internal traffic.
MAX_TAG = 2**28 - 1
# Gloo matches point-to-point messages per (peer, tag) in order, so all_to_all's internal
# messages get a tag no user message can carry.
_A2A_TAG = MAX_TAG + 1
# all_to_all_streamed's point-to-point messages: apart from the batched all_to_all's too.
_A2A_STREAM_TAG = MAX_TAG + 2
_REDUCE_OPS = ("sum", "avg", "max", "min", "prod")


class CommError(GnnpipeError):
    """Communication failed (or was misused); the message names the rank and operation."""


class CommUsageError(CommError, ValueError):
    """A communication call got arguments it cannot accept (bad peer, tag, shapes)."""


class CommTimeoutError(CommError, TimeoutError):
    """A communication call did not complete within the communicator's timeout."""


class PeerFailedError(CommError):
    """A peer closed its connection in the middle of an operation: it probably died."""


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
        # Where the rank computes (init_communicator sets it; the executor builder reads it):
        # the same device with NCCL, a GPU beside a host communicator when messages are
        # staged through the host (gnnpipe.device.choose).
        self.compute_device = self.device
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

    #: Whether :meth:`all_to_all_streamed` posts one point-to-point message per peer as soon
    #: as it is made (Gloo, MPI). NCCL keeps one batched exchange: its point-to-point calls
    #: outside a batch are ordered on the stream and could deadlock across ranks.
    streams_point_to_point = False

    def all_to_all_streamed(self, produce: Callable[[int], torch.Tensor], recv: Sequence[torch.Tensor],
                            consume: Callable[[int], None], category: str = "control") -> None:
        """:meth:`all_to_all` whose messages are made, and handled, one peer at a time.

        Every receive is posted first; then ``produce(j)`` makes the message for rank ``j``
        and it is sent at once, so making the next peer's message (a wire encode) overlaps
        the transfer of the ones before it. Peers are produced in the order ``rank + 1,
        rank + 2, ...`` (every rank starts with a different peer) and this rank's own entry
        last. ``consume(j)`` is called once per rank in ascending rank order, as soon as
        ``recv[j]`` holds rank ``j``'s message, so handling one arrival (a decode) overlaps
        the transfers still on the wire, and results that add up arrivals are summed in the
        same order on every run.

        Bytes and errors are those of :meth:`all_to_all` (one call of ``category``); time
        inside ``produce`` and ``consume`` is not counted as communication. Backends that
        cannot stream (:attr:`streams_point_to_point` false, or a world of one rank)
        produce every message, run one :meth:`all_to_all`, then consume.

        Args:
            produce: ``j -> send[j]``, the tensor for rank ``j`` (kept unchanged until this
                call returns).
            recv: ``world_size`` buffers, filled in place (shapes as for :meth:`all_to_all`).
            consume: ``j -> None``, called when ``recv[j]`` is complete.
            category: accounting category.
        """
        op = "all_to_all"
        n, me = self.world_size, self.rank
        if len(recv) != n:
            raise CommUsageError(f"{self._me()}: {op}: expected {n} recv tensors, got {len(recv)}")
        if n == 1 or not self.streams_point_to_point:
            order = [(me + i) % n for i in range(1, n)] + [me]
            made = {j: produce(j) for j in order}
            self.all_to_all([made[j] for j in range(n)], recv, category=category)
            for j in range(n):
                consume(j)
            return
        for j in range(n):
            self._check_tensor(recv[j], op, f"recv[{j}]")
        others = [j for j in range(n) if j != me]
        self.stats.calls[category] += 1
        what = f"all_to_all ({category})"
        recvs: dict[int, Work] = {}
        with self.stats.timed(category):
            for j in others:
                if recv[j].numel():
                    recvs[j] = self._irecv(recv[j], j, _A2A_STREAM_TAG, category,
                                           f"{what}: recv from {self._peer(j)}")
        sends, sent = [], 0
        for j in [(me + i) % n for i in range(1, n)] + [me]:
            t = produce(j)
            self._check_tensor(t, op, f"send[{j}]")
            if t.dtype != recv[j].dtype:
                raise CommUsageError(f"{self._me()}: {op}: send[{j}] is {t.dtype} but recv[{j}] "
                                     f"is {recv[j].dtype}")
            if j == me:
                if t.shape != recv[me].shape:
                    raise CommUsageError(
                        f"{self._me()}: {op}: recv[{me}] has shape {tuple(recv[me].shape)} but "
                        f"send[{me}] (the local copy) has {tuple(t.shape)}")
                if t.numel():
                    recv[me].copy_(t)
                continue
            sent += t.nbytes
            if t.numel():
                with self.stats.timed(category):
                    sends.append(self._isend(t, j, _A2A_STREAM_TAG, category,
                                             f"{what}: send to {self._peer(j)}"))
        self.stats.bytes_sent[category] += sent
        self.stats.bytes_recv[category] += sum(recv[j].nbytes for j in others)
        for j in range(n):
            if j in recvs:
                recvs[j].wait()
            consume(j)
        for w in sends:
            w.wait()

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

    def broadcast_object(self, obj: Any, src: int, category: str = "control") -> Any:
        """``obj`` from rank ``src`` on every rank (collective): saved with ``torch.save``, its
        length then its bytes broadcast (two collectives; bytes counted on ``src``). Loaded
        with ``weights_only=True``: tensors, numbers, strings and containers of them."""
        if self.world_size == 1:
            return obj
        size = torch.zeros(1, dtype=torch.int64)
        data = None
        if self.rank == src:
            buf = io.BytesIO()
            torch.save(obj, buf)
            data = torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8)
            size[0] = data.numel()
        self.broadcast(size, src, category=category)
        if data is None:
            data = torch.empty(int(size[0]), dtype=torch.uint8)
        self.broadcast(data, src, category=category)
        return obj if self.rank == src else torch.load(io.BytesIO(data.numpy().tobytes()), weights_only=True)

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
