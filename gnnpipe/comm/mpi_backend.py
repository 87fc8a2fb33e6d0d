"""The communicator over mpi4py: the tensors' own memory goes to MPI (no copies for
contiguous CPU tensors).

MPI has no timeouts of its own, so this communicator posts only non-blocking operations
and polls ``Test`` against a deadline. Importing this module initialises MPI: import it only
when an MPI communicator is wanted (:func:`gnnpipe.comm.launch.init_communicator` does).
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any, Callable, Sequence

import torch
from mpi4py import MPI

from gnnpipe.comm.base import CommError, CommStats, CommTimeoutError, CommUsageError, Communicator, Work
from gnnpipe.comm.launch_info import LaunchInfo

log = logging.getLogger(__name__)

def _poll(requests: list[Any], timeout_s: float, on_timeout: Callable[[], Exception]) -> None:
    """Waits for all MPI requests, polling so that a deadline can be enforced.

    MPI makes progress on non-blocking collectives only inside MPI calls, so the first
    10 ms poll continuously, yielding the core between tests (an oversubscribed core goes
    to whoever needs it); after that, sleeps with a doubling back-off capped at 1 ms keep
    a long wait from burning a core. Measured on 2 ranks: a 4 MB-per-peer Ialltoallv took
    3.6 ms with sleeps from the start and 0.2 ms when polled continuously.
    """
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

    streams_point_to_point = True

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
        buf, _ = self._staged(t)
        req = self._comm.Isend([_mem(buf), buf.nbytes, MPI.BYTE], dest=dst, tag=tag)
        return _MpiWork(self, [req], category, what, [dst], keep=buf)

    def _irecv(self, t, src, tag, category, what):
        buf, finish = self._staged(t)
        req = self._comm.Irecv([_mem(buf), buf.nbytes, MPI.BYTE], source=src, tag=tag)
        return _MpiWork(self, [req], category, what, [src], finish=finish, keep=buf)

    def _all_to_all(self, send, recv, category):
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
        for c in (self._coll, self._comm if self._owns else None):
            if c is not None and c != MPI.COMM_NULL and not MPI.Is_finalized():
                c.Free()


def init_mpi(launch: LaunchInfo, device: torch.device, timeout_s: float) -> "MpiCommunicator":
    """The world communicator over ``MPI.COMM_WORLD``, checked against the launcher's ranks."""
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
