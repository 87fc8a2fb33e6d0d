"""The hybrid's link between ways: how one stage of one way reaches the same stage of the
other ways.

Stale, it pushes each boundary row of the ways' history buffers once per unit and epoch,
at its owner's slot, into the readers' remote-row buffers, and batches the gradients of
those rows until their owner's backward slot (:class:`WayLink`'s docstring states the
semantics exactly); exact, it exchanges current rows inside autograd as graph parallelism's
halo does (:class:`gnnpipe.parallel.halo.HaloExchanger`). Wire formats as in
:mod:`gnnpipe.parallel.halo` (kind ``KIND_WAY`` for the stale link's messages). Its bytes
are counted as ``way_fwd`` (rows) and ``way_bwd`` (their gradients), apart from graph
parallelism's ``halo_fwd``/``halo_bwd``, exact or stale.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from gnnpipe._base import GnnpipeError
from gnnpipe.parallel.halo import HaloExchanger, acc_rows, streamed_exchange, wire_buffers, with_halo
from gnnpipe.partition.sampling import BoundarySample
from gnnpipe.wire import FLOAT32, KIND_WAY, Wire, message_site


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
      stored; a lossy wire format: ``row_bytes(d, wire)`` per row instead of ``s·d``),
      counted as ``way_fwd`` and ``way_bwd``
      (:func:`gnnpipe.partition.volume.way_link_bytes`).
    * **Wire**: a lossy format encodes the pushed rows at ``message_site(KIND_WAY, unit,
      False)`` and the gradients at ``message_site(KIND_WAY, unit, True)``, keyed by the
      rows' original ids (:attr:`gid_own`, :attr:`gid_halo`); each receiver decodes into
      ``R_u`` (``G_u``). A row pushed to several ways rounds the same way for all of them.
    * **Evaluation**: :meth:`push` with ``k=None`` sends every halo row at once (current
      rows), then :meth:`read` per chunk.
    * **Boundary sampling** (``sample``, ``--boundary-sample P``, stale training epochs
      only): per epoch and ordered pair of ways (owner ``q``, reader ``w``), the owner keeps
      ``⌊P·n⌋`` of the ``n`` rows of its part that ``w`` reads
      (:func:`gnnpipe.partition.sampling.sampled_positions`, the same draw for every unit of
      the epoch; both sides compute it). Only those rows are pushed (at their chunk's slot,
      as above) and written into ``R_u``; :meth:`read` scales each remote row by ``n / k``
      when it is in the epoch's sample and by 0 otherwise, so a sampled row whose chunk has
      not run yet reads the value of the last push that carried it (its last sampled epoch,
      or an exact epoch's); :meth:`return_grads` scales the gradients alike (the chain rule
      of the read), and :meth:`before_backward` sends only the sampled rows' gradients.
      ``⌊P·n⌋`` rows per pair, unit and direction travel, instead of ``n``. Evaluation
      (``k=None``) and the exact hybrid's exchange send every row.

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
        sample: boundary sampling of the stale epochs' rows (None: every row).
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
    sample: BoundarySample | None = None

    collective = True

    def __post_init__(self) -> None:
        self._drawn: tuple | None = None  # (epoch, _WayDraw) of the last epoch drawn

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

    def _draw(self, epoch: int | None) -> "_WayDraw | None":
        """Epoch ``epoch``'s boundary sample (None: no sampling, or not a training epoch).

        The owner's list for reader ``q`` is the sorted rows of ``H_u`` that ``q`` reads:
        chunk by chunk, ``push_rows[k][q]``, consecutive because chunks are id ranges; the
        reader's list for owner ``q`` is ``R_u``'s rows of way ``q``, the same ids."""
        if self.sample is None or epoch is None:
            return None
        if self._drawn is not None and self._drawn[0] == epoch:
            return self._drawn[1]
        me, C, D = self.comm.rank, len(self.push_rows), len(self.pull[0])
        dev = self.halo_ids.device
        send = [[None] * D for _ in range(C)]
        recv = [[None] * D for _ in range(C)]
        scale = torch.zeros(self.halo_rows, dtype=torch.float32, device=dev)
        for q in range(D):
            sizes = [int(self.push_rows[k][q].numel()) for k in range(C)]
            pos = torch.from_numpy(self.sample.positions(epoch, me, q, sum(sizes))).to(dev)
            off = 0
            for k in range(C):  # the owner's side: which of chunk k's rows for q travel
                mine = pos[(pos >= off) & (pos < off + sizes[k])] - off
                send[k][q] = self.push_rows[k][q].index_select(0, mine)
                off += sizes[k]
            a, b = self.pull[0][q][0], self.pull[-1][q][1]  # the reader's side: R_u's rows of way q
            rows = torch.from_numpy(self.sample.positions(epoch, q, me, b - a)).to(dev) + a
            scale[rows] = self.sample.scale(b - a)
            for k in range(C):
                lo, hi = self.pull[k][q]
                recv[k][q] = rows[(rows >= lo) & (rows < hi)]
        # each chunk's remote rows' factors, once per epoch (every unit's read and gradient uses them)
        draw = _WayDraw(send, recv, [scale.index_select(0, r).unsqueeze(1) for r in self.remote_rows])
        self._drawn = (epoch, draw)
        return draw

    def _rows_out(self, src: torch.Tensor, idx: torch.Tensor, gid: torch.Tensor, epoch: int, site) -> torch.Tensor:
        """Rows ``idx`` of ``src`` as they travel: encoded at ``site`` (keyed by ``gid``'s
        rows ``idx``) with a lossy wire, as stored otherwise."""
        rows = src.index_select(0, idx)
        if self.wire.lossy:
            return self.wire.encode(rows, epoch=epoch, site=site, gid=gid.index_select(0, idx))
        return rows

    def _sampled_push(self, buf: torch.Tensor, rbuf: torch.Tensor, k: int, draw: "_WayDraw", category: str,
                      epoch: int, unit: int) -> None:
        """:meth:`push` under boundary sampling: the epoch's sample of chunk ``k``'s rows,
        as stored (unscaled: :meth:`read` scales), into those rows of ``rbuf``."""
        d, lossy = buf.shape[1], self.wire.lossy
        site = message_site(KIND_WAY, unit, False)
        recv = wire_buffers(self.wire, [r.numel() for r in draw.recv[k]], buf)

        def produce(q: int) -> torch.Tensor:
            return self._rows_out(buf, draw.send[k][q], self.gid_own, epoch, site)

        def consume(q: int) -> None:
            if recv[q].shape[0]:
                got = self.wire.decode(recv[q], d) if lossy else recv[q]
                rbuf.index_copy_(0, draw.recv[k][q], got.to(rbuf.dtype))

        streamed_exchange(self.comm, produce, recv, consume, category)

    def push(self, buf: torch.Tensor, rbuf: torch.Tensor, k: int | None, category: str = "way_fwd",
             epoch: int | None = None, unit: int = 0) -> None:
        """Every way sends the rows of its chunk ``k`` (every chunk: None) of ``buf`` that
        the others' halos hold; this way's ``rbuf`` rows of the others' chunk ``k`` are
        overwritten with theirs (one all-to-all; every way takes part). With ``epoch`` (a
        training push) in the wire format, keyed by ``unit`` (the global unit index);
        without it as stored (evaluation). Under boundary sampling, a training push of one
        chunk sends the epoch's sample only."""
        draw = self._draw(epoch) if k is not None else None
        if draw is not None:
            self._sampled_push(buf, rbuf, k, draw, category, epoch, unit)
            return
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

    def _remote_scale(self, k: int, epoch: int | None) -> torch.Tensor | None:
        """[m, 1] the factors of chunk k's remote rows in training epoch ``epoch`` under
        boundary sampling (``n / k`` sampled, 0 not); None: every row as it is."""
        draw = self._draw(epoch)
        return None if draw is None else draw.scale[k]

    def read(self, buf: torch.Tensor, rbuf: torch.Tensor, k: int, epoch: int | None = None) -> torch.Tensor:
        """float32 [m_k, d] chunk k's neighbour rows, in its ``nbr_ids`` order: this part's
        from ``buf``, the other ways' from ``rbuf`` (no communication); in a training
        ``epoch`` under boundary sampling, the other ways' scaled by the epoch's sample."""
        out = torch.empty((self.num_nbrs(k), buf.shape[1]), dtype=torch.float32, device=buf.device)
        out.index_copy_(0, self.own_pos[k], buf.index_select(0, self.own_rows[k]).float())
        remote = rbuf.index_select(0, self.remote_rows[k]).float()
        scale = self._remote_scale(k, epoch)
        out.index_copy_(0, self.remote_pos[k], remote if scale is None else remote * scale)
        return out

    def return_grads(self, gacc: torch.Tensor, gremote: torch.Tensor | None, grad: torch.Tensor, k: int,
                     epoch: int | None = None) -> None:
        """Chunk k's neighbour-row gradients: this part's into ``gacc``, the other ways'
        into ``gremote`` (sent later by :meth:`before_backward`; no communication), scaled
        as :meth:`read` scaled their rows."""
        acc_rows(gacc, self.own_rows[k], grad.index_select(0, self.own_pos[k]))
        g = grad.index_select(0, self.remote_pos[k])
        scale = self._remote_scale(k, epoch)
        acc_rows(gremote, self.remote_rows[k], g if scale is None else g * scale)

    def before_backward(self, k: int, gacc: dict, gremote: dict, epoch: int | None = None,
                        unit0: int = 0) -> None:
        """The backward slot of local chunk ``k``, before its autograd backward: per unit
        (ascending position), every way sends each owner its ``gremote`` rows of the
        owner's chunk ``k`` and zeroes them; the owners add them into ``gacc`` (one
        all-to-all per unit; every way takes part). With ``epoch``, in the wire format,
        keyed by the global unit index ``unit0 + position``. Under boundary sampling only
        the epoch's sampled rows' gradients travel (the others are zero)."""
        draw = self._draw(epoch)
        for pos in sorted(gacc):
            g, gr = gacc[pos], gremote[pos]
            if draw is not None:
                self._sampled_grads(g, gr, k, draw, epoch, unit0 + pos)
                continue
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

                streamed_exchange(self.comm, encode, recv, add, "way_bwd")
            else:
                recv = [g.new_empty((rows.numel(), d)) for rows in self.push_rows[k]]
                if self.comm.world_size > 1:
                    self.comm.all_to_all(send, recv, category="way_bwd")
                for rows, got in zip(self.push_rows[k], recv):
                    if rows.numel():
                        acc_rows(g, rows, got)
            for t in send:
                t.zero_()

    def _sampled_grads(self, g: torch.Tensor, gr: torch.Tensor, k: int, draw: "_WayDraw", epoch: int,
                       unit: int) -> None:
        """:meth:`before_backward` of one unit under boundary sampling: each owner gets the
        ``gr`` rows of its chunk ``k`` that the epoch sampled, into ``g``; every row of
        those chunks in ``gr`` is zeroed."""
        d, lossy = g.shape[1], self.wire.lossy
        site = message_site(KIND_WAY, unit, True)
        recv = wire_buffers(self.wire, [r.numel() for r in draw.send[k]], gr)

        def produce(q: int) -> torch.Tensor:
            return self._rows_out(gr, draw.recv[k][q], self.gid_halo, epoch, site)

        def add(q: int) -> None:  # ascending q: a fixed summation order
            rows = draw.send[k][q]
            if rows.numel():
                acc_rows(g, rows, self.wire.decode(recv[q], d) if lossy else recv[q])

        streamed_exchange(self.comm, produce, recv, add, "way_bwd")
        for a, b in self.pull[k]:
            gr[a:b].zero_()


@dataclass(frozen=True)
class _WayDraw:
    """One epoch's boundary sample of a way's link: per chunk ``k`` and way ``q``, the rows
    of ``H_u`` pushed to ``q`` (``send[k][q]``) and the rows of ``R_u`` that ``q``'s chunk
    ``k`` fills (``recv[k][q]``); per chunk ``k``, the ``[m, 1]`` factors of its remote rows
    (``scale[k]``: ``n / k`` in the sample, 0 out of it)."""

    send: list
    recv: list
    scale: list


def build_way_link(cross, plan, chunks_all: list, way: int, chunks_per_way: int, exact: bool,
                   wire: Wire = FLOAT32, device: torch.device | str = "cpu",
                   sample: BoundarySample | None = None) -> WayLink:
    """The :class:`WayLink` of ``way`` from every way's chunks (all ranks know the plan).

    ``chunks_all``: every chunk of every way (way-major, ``chunks_per_way`` each), with
    its ``lo``, ``hi`` and ``nbr_ids`` (a block only for this way's own chunks). ``wire``:
    the wire format of the training messages between ways (original ids from ``plan.perm``).
    ``device``: where the stage's buffers live (the link's index lists are kept there).
    ``sample``: boundary sampling of the stale epochs (a stale link only).
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
        if sample is not None and sample.fraction < 1.0:
            raise GnnpipeError("internal: the exact hybrid's exchange sends every row (no boundary sample)")
        if C != 1:
            raise GnnpipeError("internal: exact hybrid runs one chunk per way")
        exchanger = HaloExchanger(cross, hi - lo, [r.numpy() for r in push_rows[0]],
                                  [b - a for a, b in pull[0]], ("way_fwd", "way_bwd"), wire=wire, gid_local=gid_own,
                                  gid_halo=gid_halo, device=device)

    def dev(x):
        return torch.as_tensor(x).to(device)

    return WayLink(cross, lo, hi, dev(halo), [dev(x) for x in own_pos], [dev(x) for x in own_rows],
                   [dev(x) for x in remote_pos], [dev(x) for x in remote_rows],
                   [[dev(x) for x in r] for r in push_rows], pull, exchanger=exchanger, wire=wire,
                   gid_own=dev(gid_own), gid_halo=dev(gid_halo),
                   sample=sample if sample is not None and sample.fraction < 1.0 else None)
