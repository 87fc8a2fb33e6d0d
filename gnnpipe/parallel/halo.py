"""Halo exchange: the rows a part's neighbours own, in one all-to-all per direction.

Used by graph parallelism before every aggregation and by the exact hybrid between ways.
Forward sends each peer the rows it needs and receives this part's halo rows; backward sends
the halo rows' gradients home, where they are added into the owners' rows.

:class:`WayLink` is the hybrid's link between ways. Stale, it pushes each boundary row of
the ways' history buffers once per unit and epoch, at its owner's slot, into the readers'
remote-row buffers, and batches the gradients of those rows until their owner's backward
slot (its docstring states the semantics exactly).

Wire formats (``--wire``, :mod:`gnnpipe.parallel.wire`): every training message here
(forward rows and backward gradients) is encoded per peer with the run's
:class:`gnnpipe.parallel.wire.Wire` just before it is sent and decoded as it arrives
(:func:`streamed_exchange`: the codec overlaps the other peers' transfers). The rounding is
keyed by the seed, the epoch, the site ``message_site(kind, unit, backward)`` (kind
``KIND_HALO`` for :class:`HaloExchanger`, ``KIND_WAY`` for the stale :class:`WayLink`;
``unit`` the global index of the aggregating unit that reads the rows) and each row's
ORIGINAL node id. float32 keeps the plain path (rows sent as they are, no copy). Evaluation
exchanges (``epoch`` not given) are always float32: evaluation is exact full-graph inference.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from gnnpipe._base import GnnpipeError
from gnnpipe.parallel.wire import FLOAT32, KIND_HALO, KIND_WAY, Wire, message_site


def with_halo(h_local: torch.Tensor, ex: "HaloExchanger", epoch: int | None = None,
              unit: int = 0) -> torch.Tensor:
    """``[h_local; halo rows]`` inside autograd: the halo rows' gradients go home in backward.

    Args:
        h_local: [num_local, d] this part's rows.
        ex: the part's :class:`HaloExchanger`.
        epoch, unit: the training epoch and the global index of the unit that reads the
            rows (the rounding keys of a lossy wire format); without ``epoch`` both
            directions travel in float32.
    Returns:
        [num_local + num_halo, d].
    """
    return _HaloExchange.apply(h_local, ex, epoch, unit)


class _HaloExchange(torch.autograd.Function):
    """Forward: [local rows] → [local rows; halo rows]; backward: halo grads go home."""

    @staticmethod
    def forward(ctx, h_local: torch.Tensor, ex: "HaloExchanger", epoch, unit) -> torch.Tensor:
        ctx.ex = ex
        ctx.key = (epoch, unit)
        return torch.cat([h_local, ex.exchange(h_local, ex.fwd_category, epoch, unit)], dim=0)

    @staticmethod
    def backward(ctx, grad_src: torch.Tensor):
        ex: HaloExchanger = ctx.ex
        n = ex.num_local
        grad_local = grad_src[:n].clone()
        ex.return_grads(grad_src[n:].contiguous(), grad_local, ex.bwd_category, *ctx.key)
        return grad_local, None, None, None


class HaloExchanger:
    """The per-part send/recv lists and the two all-to-all directions.

    Args:
        comm: the communicator (any world size; world 1 exchanges nothing).
        num_local: rows this rank owns.
        send_idx: per peer, local row offsets to send (sorted as the peer's halo expects).
        recv_counts: per peer, halo rows received (halo rows are ordered by owner).
        wire: the wire format of training messages (float32 by default).
        gid_local, gid_halo: int64 ORIGINAL node ids of the local rows [num_local] and of the
            halo rows [num_halo] (the rounding keys; needed only by a lossy ``wire``).
        device: where the rows live (the index lists are kept there).
    """

    def __init__(self, comm, num_local: int, send_idx: list, recv_counts,
                 fwd_category: str = "halo_fwd", bwd_category: str = "halo_bwd", *,
                 wire: Wire = FLOAT32, gid_local=None, gid_halo=None, device: torch.device | str = "cpu") -> None:
        self.comm = comm
        self.fwd_category = fwd_category
        self.bwd_category = bwd_category
        self.num_local = int(num_local)
        self.device = torch.device(device)
        self.send_idx = [torch.as_tensor(np.asarray(s, dtype=np.int64)).to(self.device) for s in send_idx]
        self.recv_counts = [int(c) for c in recv_counts]
        self.num_halo = int(sum(self.recv_counts))
        self.recv_off = np.concatenate([[0], np.cumsum(self.recv_counts)]).astype(np.int64)
        self.wire = wire
        if wire.lossy:
            if gid_local is None or gid_halo is None:
                raise GnnpipeError(f"internal: a halo exchange in {wire.fmt} needs the rows' original ids")
            gl = torch.as_tensor(np.asarray(gid_local, dtype=np.int64)).to(self.device)
            gh = torch.as_tensor(np.asarray(gid_halo, dtype=np.int64)).to(self.device)
            if gl.shape != (self.num_local,) or gh.shape != (self.num_halo,):
                raise GnnpipeError(f"internal: original ids {tuple(gl.shape)} / {tuple(gh.shape)} for "
                                   f"{self.num_local} local and {self.num_halo} halo rows")
            # per peer: the original ids of the rows sent forward and of the gradients sent back
            self.send_gid = [gl.index_select(0, idx) for idx in self.send_idx]
            self.recv_gid = [gh[self.recv_off[q] : self.recv_off[q + 1]] for q in range(len(self.recv_counts))]

    def exchange(self, h_local: torch.Tensor, category: str, epoch: int | None = None,
                 unit: int = 0) -> torch.Tensor:
        """Halo rows [num_halo, d] of ``h_local`` as owned by the peers.

        With ``epoch`` (a training message) the rows travel in the wire format, keyed by
        ``(seed, epoch, message_site(KIND_HALO, unit, False), original id)``; without it in
        float32 (evaluation).
        """
        d = h_local.shape[1]
        h_local = h_local.detach()
        if epoch is not None and self.wire.lossy:
            site = message_site(KIND_HALO, unit, False)
            dev = h_local.device
            buf = torch.empty((self.num_halo, self.wire.row_bytes(d)), dtype=torch.uint8, device=dev)
            recv = [buf[self.recv_off[q] : self.recv_off[q + 1]] for q in range(len(self.recv_counts))]
            out = torch.empty((self.num_halo, d), dtype=torch.float32, device=dev)

            def encode(q: int) -> torch.Tensor:
                return self.wire.encode(h_local.index_select(0, self.send_idx[q]), epoch=epoch,
                                        site=site, gid=self.send_gid[q])

            def decode(q: int) -> None:
                a, b = self.recv_off[q], self.recv_off[q + 1]
                if b > a:
                    out[a:b] = self.wire.decode(recv[q], d)

            streamed_exchange(self.comm, encode, recv, decode, category)
            return out
        send = [h_local.index_select(0, idx) for idx in self.send_idx]
        out = h_local.new_empty((self.num_halo, d))
        recv = [out[self.recv_off[q] : self.recv_off[q + 1]] for q in range(len(self.recv_counts))]
        if self.comm.world_size > 1:
            self.comm.all_to_all(send, recv, category=category)
        return out

    def return_grads(self, grad_halo: torch.Tensor, grad_local: torch.Tensor, category: str,
                     epoch: int | None = None, unit: int = 0) -> None:
        """Send halo-row gradients to their owners; add what comes back into ``grad_local``.

        With ``epoch``, in the wire format at ``message_site(KIND_HALO, unit, True)``."""
        d = grad_halo.shape[1]
        send = [grad_halo[self.recv_off[q] : self.recv_off[q + 1]] for q in range(len(self.recv_counts))]
        if epoch is not None and self.wire.lossy:
            site = message_site(KIND_HALO, unit, True)
            rb = self.wire.row_bytes(d)
            recv = [torch.empty((idx.numel(), rb), dtype=torch.uint8, device=grad_halo.device)
                    for idx in self.send_idx]

            def encode(q: int) -> torch.Tensor:
                return self.wire.encode(send[q], epoch=epoch, site=site, gid=self.recv_gid[q])

            def add(q: int) -> None:  # ascending q: the same summation order on every run
                if self.send_idx[q].numel():
                    grad_local.index_add_(0, self.send_idx[q], self.wire.decode(recv[q], d))

            streamed_exchange(self.comm, encode, recv, add, category)
            return
        recv = [grad_local.new_empty((idx.numel(), d)) for idx in self.send_idx]
        if self.comm.world_size > 1:
            self.comm.all_to_all(send, recv, category=category)
        for idx, g in zip(self.send_idx, recv):
            if idx.numel():
                grad_local.index_add_(0, idx, g)


def streamed_exchange(comm, produce, recv: list, consume, category: str) -> None:
    """``comm.all_to_all_streamed`` (:meth:`gnnpipe.comm.Communicator.all_to_all_streamed`):
    each peer's message is encoded just before it is sent and decoded as it arrives, so the
    codec overlaps the transfers to and from the other peers. A world of one rank moves
    nothing and counts no call, as the plain exchanges here."""
    if comm.world_size > 1:
        comm.all_to_all_streamed(produce, recv, consume, category=category)
        return
    for q in range(len(recv)):
        t = produce(q)
        if recv[q].numel():
            recv[q].copy_(t)
        consume(q)


def acc_rows(buf: torch.Tensor, ids: torch.Tensor, rows: torch.Tensor) -> None:
    """``buf[ids] += rows`` (``ids`` unique); a low-precision ``buf`` adds in float32 and
    rounds once."""
    if buf.dtype == rows.dtype == torch.float32:
        buf.index_add_(0, ids, rows)
    elif ids.numel():
        buf.index_copy_(0, ids, buf.index_select(0, ids).float().add_(rows.float()).to(buf.dtype))


@dataclass(eq=False)
class WayLink:
    """How one stage of one way reaches the same stage of the other ways (hybrid mode).

    The hybrid's :class:`gnnpipe.parallel.pipeline.sources.NeighbourSource`. Every way processes its
    local chunk ``k`` at the same slot of the epoch (one chunk order for all ways).

    Exact hybrid (one chunk per way): :meth:`with_fresh` exchanges the whole part's halo
    inside autograd (:class:`HaloExchanger`), as graph parallelism does.

    Stale hybrid: the semantics of one aggregating unit ``u`` of a stage, per epoch.

    * **Buffers** (owned by the stage, handed in): ``H_u`` holds this way's own part's rows
      (row ``i - lo`` is node ``i``); ``R_u`` holds this way's *halo*, the rows of other
      ways that any of its chunks reads, ``M_w`` rows in ascending node order
      (:attr:`halo_ids`); ``G_u`` and ``GR_u`` are the cross-chunk gradient buffers of the
      same rows.
    * **Forward, slot of local chunk k** (:meth:`push`, then :meth:`read`): the stage writes
      chunk k's input rows into ``H_u``; then every way sends the rows of *its* chunk k that
      other ways' halos hold (each (row, needing way) pair once), and the receivers write
      them into ``R_u``. Chunk k then reads its own part's neighbour rows from ``H_u`` and
      the other ways' from ``R_u``. So a neighbour row is **fresh** (this epoch's) when its
      owner's chunk has run forward this epoch, this slot included, and **stale** otherwise:
      the value of the owner's last forward of it, or the snapshot's when the history is
      restored from a snapshot at the start of the epoch (the stage snapshots and restores
      ``R_u`` together with ``H_u``, so ``R_u`` always equals its owners' ``H_u`` rows).
    * **Backward** (:meth:`return_grads`, :meth:`before_backward`): the gradients of chunk
      k's neighbour rows go into ``G_u`` (own part) or accumulate locally in ``GR_u`` (other
      ways). At the backward slot of local chunk k, *before* its autograd backward, every
      way sends each owner the ``GR_u`` rows of the owner's chunk k (once) and zeroes them;
      the owner adds them into ``G_u``, from which chunk k's backward injects them (times
      ``grad_scale``). So a gradient counts exactly when it was produced at an earlier
      backward slot than its row's chunk's (its chunk was fresh for the reader); gradients
      for rows whose chunk already ran backward (same slot or earlier) stay in ``GR_u`` and
      are dropped when the stage zeroes it at the end of the epoch.
    * **Bytes**: per unit and epoch every (row, needing way) pair travels once forward and
      once backward: ``2·s·d·Σ_w M_w``, graph parallelism's halo volume over the same
      parts (float32 wire: ``s`` is the history's bytes per value, the rows are sent as
      stored; a lossy wire format: ``row_bytes(d, wire)`` per row instead of ``s·d``).
    * **Wire**: a lossy format encodes the pushed rows at ``message_site(KIND_WAY, unit,
      False)`` and the gradients at ``message_site(KIND_WAY, unit, True)``, keyed by the
      rows' original ids (:attr:`gid_own`, :attr:`gid_halo`); each receiver decodes into
      ``R_u`` (``G_u``). A row pushed to several ways rounds the same way for all of them.
    * **Evaluation**: :meth:`push` with ``k=None`` sends every halo row at once (current
      rows), then :meth:`read` per chunk.

    :mod:`gnnpipe.parallel.reference` implements the same rules independently (full
    ``[N, d]`` histories in one process, ``ways=``): these are equal to reading the owners'
    ``H_u`` at the moment of the read and sending gradients into ``G_u`` at once; only the
    bytes and the summation order differ.

    Attributes:
        comm: the stage communicator (rank = way).
        lo, hi: this way's part (relabelled id range).
        halo_ids: int64 [M_w] the other ways' ids this way's chunks read (sorted); row ``r``
            of ``R_u`` is node ``halo_ids[r]``.
        own_pos[k] / own_rows[k]: positions in chunk k's ``nbr_ids`` of this part's ids, and
            their rows in this way's ``H_u``.
        remote_pos[k] / remote_rows[k]: positions in chunk k's ``nbr_ids`` of other ways'
            ids, and their rows in ``R_u``.
        push_rows[k][q]: rows of ``H_u`` (this way's chunk k) that way q's halo holds
            (sorted; empty for q = this way).
        pull[k][q]: ``(a, b)``: the rows ``R_u[a:b]`` that hold way q's chunk k (empty for
            q = this way).
        exchanger: exact mode: the autograd halo exchange of the whole part.
        wire: the wire format of training messages.
        gid_own, gid_halo: int64 original node ids of ``H_u``'s rows (this part) and of
            ``R_u``'s rows (:attr:`halo_ids`): the rounding keys of a lossy ``wire``.
    """

    comm: object
    lo: int
    hi: int
    halo_ids: torch.Tensor
    own_pos: list
    own_rows: list
    remote_pos: list
    remote_rows: list
    push_rows: list
    pull: list
    exchanger: object = None
    wire: Wire = FLOAT32
    gid_own: torch.Tensor | None = None
    gid_halo: torch.Tensor | None = None

    collective = True

    @property
    def row0(self) -> int:
        """Node of the buffers' row 0: this part's first node (the exact way keeps none)."""
        return 0 if self.fresh else self.lo

    @property
    def rows(self) -> int | None:
        """A stale way's buffers hold its own part's rows; the exact way keeps none."""
        return None if self.fresh else self.hi - self.lo

    @property
    def halo_rows(self) -> int:
        """Rows of ``R_u``: ``M_w``."""
        return int(self.halo_ids.numel())

    @property
    def fresh(self) -> bool:
        return self.exchanger is not None

    def num_nbrs(self, k: int) -> int:
        """Rows in chunk k's ``nbr_ids``: this part's and every other way's."""
        return self.own_pos[k].numel() + self.remote_pos[k].numel()

    def with_fresh(self, h: torch.Tensor, epoch: int | None = None, unit: int = 0) -> torch.Tensor:
        """Exact hybrid: ``[h; halo rows]`` of the whole part, exchanged inside autograd
        (``epoch``, ``unit``: the wire keys, as :func:`with_halo`)."""
        return with_halo(h, self.exchanger, epoch, unit)

    def _sends(self, k: int | None) -> list:
        """Per way q: the rows of ``H_u`` it gets (chunk k's; every chunk's for None)."""
        if k is not None:
            return self.push_rows[k]
        return [torch.cat([p[q] for p in self.push_rows]) for q in range(len(self.push_rows[0]))]

    def _slices(self, k: int | None) -> list:
        """Per way q: ``(a, b)`` of the rows of ``R_u`` it owns (chunk k's; all for None)."""
        if k is not None:
            return self.pull[k]
        return [(self.pull[0][q][0], self.pull[-1][q][1]) for q in range(len(self.pull[0]))]

    def push(self, buf: torch.Tensor, rbuf: torch.Tensor, k: int | None, category: str = "halo_fwd",
             epoch: int | None = None, unit: int = 0) -> None:
        """Every way sends the rows of its chunk ``k`` (every chunk: None) of ``buf`` that
        the others' halos hold; this way's ``rbuf`` rows of the others' chunk ``k`` are
        overwritten with theirs (one all-to-all; every way takes part). With ``epoch`` (a
        training push) in the wire format, keyed by ``unit`` (the global unit index);
        without it as stored (evaluation)."""
        if epoch is not None and self.wire.lossy:
            d = buf.shape[1]
            site = message_site(KIND_WAY, unit, False)
            sends, sl = self._sends(k), self._slices(k)
            rb = self.wire.row_bytes(d)
            recv = [torch.empty((b - a, rb), dtype=torch.uint8, device=buf.device) for a, b in sl]

            def encode(q: int) -> torch.Tensor:
                return self.wire.encode(buf.index_select(0, sends[q]), epoch=epoch, site=site,
                                        gid=self.gid_own.index_select(0, sends[q]))

            def decode(q: int) -> None:
                a, b = sl[q]
                if b > a:
                    rbuf[a:b] = self.wire.decode(recv[q], d)

            streamed_exchange(self.comm, encode, recv, decode, category)
            return
        send = [buf.index_select(0, rows) for rows in self._sends(k)]
        recv = [rbuf[a:b] for a, b in self._slices(k)]
        if self.comm.world_size > 1:
            self.comm.all_to_all(send, recv, category=category)

    def read(self, buf: torch.Tensor, rbuf: torch.Tensor, k: int) -> torch.Tensor:
        """float32 [m_k, d] chunk k's neighbour rows, in its ``nbr_ids`` order: this part's
        from ``buf``, the other ways' from ``rbuf`` (no communication)."""
        out = torch.empty((self.num_nbrs(k), buf.shape[1]), dtype=torch.float32, device=buf.device)
        out.index_copy_(0, self.own_pos[k], buf.index_select(0, self.own_rows[k]).float())
        out.index_copy_(0, self.remote_pos[k], rbuf.index_select(0, self.remote_rows[k]).float())
        return out

    def return_grads(self, gacc: torch.Tensor, gremote: torch.Tensor | None, grad: torch.Tensor, k: int) -> None:
        """Chunk k's neighbour-row gradients: this part's into ``gacc``, the other ways'
        into ``gremote`` (sent later by :meth:`before_backward`; no communication)."""
        acc_rows(gacc, self.own_rows[k], grad.index_select(0, self.own_pos[k]))
        acc_rows(gremote, self.remote_rows[k], grad.index_select(0, self.remote_pos[k]))

    def before_backward(self, k: int, gacc: dict, gremote: dict, epoch: int | None = None,
                        unit0: int = 0) -> None:
        """The backward slot of local chunk ``k``, before its autograd backward: per unit
        (ascending position), every way sends each owner its ``gremote`` rows of the
        owner's chunk ``k`` and zeroes them; the owners add them into ``gacc`` (one
        all-to-all per unit; every way takes part). With ``epoch``, in the wire format,
        keyed by the global unit index ``unit0 + position``."""
        for pos in sorted(gacc):
            g, gr = gacc[pos], gremote[pos]
            d = g.shape[1]
            send = [gr[a:b] for a, b in self.pull[k]]
            if epoch is not None and self.wire.lossy:
                site = message_site(KIND_WAY, unit0 + pos, True)
                rb = self.wire.row_bytes(d)
                recv = [torch.empty((rows.numel(), rb), dtype=torch.uint8, device=g.device)
                        for rows in self.push_rows[k]]

                def encode(q: int, send=send, site=site) -> torch.Tensor:
                    a, b = self.pull[k][q]
                    return self.wire.encode(send[q], epoch=epoch, site=site, gid=self.gid_halo[a:b])

                def add(q: int, g=g, recv=recv, d=d) -> None:  # ascending q: a fixed summation order
                    rows = self.push_rows[k][q]
                    if rows.numel():
                        acc_rows(g, rows, self.wire.decode(recv[q], d))

                streamed_exchange(self.comm, encode, recv, add, "halo_bwd")
            else:
                recv = [g.new_empty((rows.numel(), d)) for rows in self.push_rows[k]]
                if self.comm.world_size > 1:
                    self.comm.all_to_all(send, recv, category="halo_bwd")
                for rows, got in zip(self.push_rows[k], recv):
                    if rows.numel():
                        acc_rows(g, rows, got)
            for t in send:
                t.zero_()


def build_way_link(cross, plan, chunks_all: list, way: int, chunks_per_way: int, exact: bool,
                   wire: Wire = FLOAT32, device: torch.device | str = "cpu") -> WayLink:
    """The :class:`WayLink` of ``way`` from every way's chunks (all ranks know the plan).

    ``chunks_all``: every chunk of every way (way-major, ``chunks_per_way`` each), with
    its ``lo``, ``hi`` and ``nbr_ids`` (a block only for this way's own chunks). ``wire``:
    the wire format of the training messages between ways (original ids from ``plan.perm``).
    ``device``: where the stage's buffers live (the link's index lists are kept there).
    """
    D, C = plan.num_parts, chunks_per_way
    part_ptr = np.asarray(plan.part_ptr, dtype=np.int64)
    lo, hi = int(part_ptr[way]), int(part_ptr[way + 1])

    def halo_of(q: int, a: int, b: int) -> np.ndarray:
        """Sorted ids in [a, b) that any chunk of way q reads."""
        ids = [ch.nbr_ids.numpy() for ch in chunks_all[q * C : (q + 1) * C]]
        ids = np.concatenate(ids) if ids else np.zeros(0, dtype=np.int64)
        return np.unique(ids[(ids >= a) & (ids < b)])

    mine_all = [chunks_all[way * C + k].nbr_ids.numpy() for k in range(C)]
    halo = np.unique(np.concatenate([m[(m < lo) | (m >= hi)] for m in mine_all] + [np.zeros(0, np.int64)]))
    needs = [halo_of(q, lo, hi) if q != way else np.zeros(0, np.int64) for q in range(D)]
    own_pos, own_rows, remote_pos, remote_rows, push_rows, pull = [], [], [], [], [], []
    for k in range(C):
        mine = mine_all[k]
        own = (mine >= lo) & (mine < hi)
        own_pos.append(torch.from_numpy(np.flatnonzero(own)))
        own_rows.append(torch.from_numpy(mine[own] - lo))
        remote_pos.append(torch.from_numpy(np.flatnonzero(~own)))
        remote_rows.append(torch.from_numpy(np.searchsorted(halo, mine[~own])))
        me = chunks_all[way * C + k]
        push_rows.append([torch.from_numpy(n[(n >= me.lo) & (n < me.hi)] - lo) for n in needs])
        sl = []
        for q in range(D):
            if q == way:
                sl.append((0, 0))
                continue
            theirs = chunks_all[q * C + k]
            sl.append((int(np.searchsorted(halo, theirs.lo)), int(np.searchsorted(halo, theirs.hi))))
        pull.append(sl)
    perm = np.asarray(plan.perm, dtype=np.int64)
    gid_own, gid_halo = perm[lo:hi].copy(), perm[halo]
    exchanger = None
    if exact:
        if C != 1:
            raise GnnpipeError("internal: exact hybrid runs one chunk per way")
        exchanger = HaloExchanger(cross, hi - lo, [r.numpy() for r in push_rows[0]],
                                  [b - a for a, b in pull[0]], wire=wire, gid_local=gid_own,
                                  gid_halo=gid_halo, device=device)

    def dev(x):
        return torch.as_tensor(x).to(device)

    return WayLink(cross, lo, hi, dev(halo), [dev(x) for x in own_pos], [dev(x) for x in own_rows],
                   [dev(x) for x in remote_pos], [dev(x) for x in remote_rows],
                   [[dev(x) for x in r] for r in push_rows], pull, exchanger=exchanger, wire=wire,
                   gid_own=dev(gid_own), gid_halo=dev(gid_halo))
