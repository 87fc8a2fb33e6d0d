"""Halo exchange: the rows a part's neighbours own, in one all-to-all per direction.

Used by graph parallelism before every aggregation and by the exact hybrid between ways.
Forward sends each peer the rows it needs and receives this part's halo rows; backward sends
the halo rows' gradients home, where they are added into the owners' rows.

:class:`WayLink` is the stale hybrid's version: per chunk, the boundary rows of the ways'
history buffers, and their gradients into the owners' cross-chunk gradient buffers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from gnnpipe._base import GnnpipeError


def with_halo(h_local: torch.Tensor, ex: "HaloExchanger") -> torch.Tensor:
    """``[h_local; halo rows]`` inside autograd: the halo rows' gradients go home in backward.

    Args:
        h_local: [num_local, d] this part's rows.
        ex: the part's :class:`HaloExchanger`.
    Returns:
        [num_local + num_halo, d].
    """
    return _HaloExchange.apply(h_local, ex)


class _HaloExchange(torch.autograd.Function):
    """Forward: [local rows] → [local rows; halo rows]; backward: halo grads go home."""

    @staticmethod
    def forward(ctx, h_local: torch.Tensor, ex: "HaloExchanger") -> torch.Tensor:
        ctx.ex = ex
        return torch.cat([h_local, ex.exchange(h_local, ex.fwd_category)], dim=0)

    @staticmethod
    def backward(ctx, grad_src: torch.Tensor):
        ex: HaloExchanger = ctx.ex
        n = ex.num_local
        grad_local = grad_src[:n].clone()
        ex.return_grads(grad_src[n:].contiguous(), grad_local, ex.bwd_category)
        return grad_local, None


class HaloExchanger:
    """The per-part send/recv lists and the two all-to-all directions.

    Args:
        comm: the communicator (any world size; world 1 exchanges nothing).
        num_local: rows this rank owns.
        send_idx: per peer, local row offsets to send (sorted as the peer's halo expects).
        recv_counts: per peer, halo rows received (halo rows are ordered by owner).
    """

    def __init__(self, comm, num_local: int, send_idx: list, recv_counts,
                 fwd_category: str = "halo_fwd", bwd_category: str = "halo_bwd") -> None:
        self.comm = comm
        self.fwd_category = fwd_category
        self.bwd_category = bwd_category
        self.num_local = int(num_local)
        self.send_idx = [torch.as_tensor(np.asarray(s, dtype=np.int64)) for s in send_idx]
        self.recv_counts = [int(c) for c in recv_counts]
        self.num_halo = int(sum(self.recv_counts))
        self.recv_off = np.concatenate([[0], np.cumsum(self.recv_counts)]).astype(np.int64)

    def exchange(self, h_local: torch.Tensor, category: str) -> torch.Tensor:
        """Halo rows [num_halo, d] of ``h_local`` as owned by the peers."""
        d = h_local.shape[1]
        h_local = h_local.detach()
        send = [h_local.index_select(0, idx) for idx in self.send_idx]
        out = h_local.new_empty((self.num_halo, d))
        recv = [out[self.recv_off[q] : self.recv_off[q + 1]] for q in range(len(self.recv_counts))]
        if self.comm.world_size > 1:
            self.comm.all_to_all(send, recv, category=category)
        return out

    def return_grads(self, grad_halo: torch.Tensor, grad_local: torch.Tensor, category: str) -> None:
        """Send halo-row gradients to their owners; add what comes back into ``grad_local``."""
        d = grad_halo.shape[1]
        send = [grad_halo[self.recv_off[q] : self.recv_off[q + 1]] for q in range(len(self.recv_counts))]
        recv = [grad_local.new_empty((idx.numel(), d)) for idx in self.send_idx]
        if self.comm.world_size > 1:
            self.comm.all_to_all(send, recv, category=category)
        for idx, g in zip(self.send_idx, recv):
            if idx.numel():
                grad_local.index_add_(0, idx, g)


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

    The hybrid's :class:`gnnpipe.parallel.stage.NeighbourSource`. Every way processes its
    local chunk ``k`` at the same slot of the epoch (one chunk order for all), so at each aggregating unit the ways exchange, for chunk ``k``, the boundary rows
    of their history buffers (fresh for chunks already processed this epoch, this slot
    included, stale otherwise), and in backward the gradients of those rows go back to their
    owners' cross-chunk gradient buffers (visible from the next slot on, like every other
    cross-chunk gradient).

    A way's history and gradient buffers hold only its own part's rows (row ``i - lo`` is
    node ``i``): it writes no other rows, and the other ways' rows it reads are received
    for the chunk that reads them, so they need not persist.

    Attributes:
        comm: the stage communicator (rank = way).
        lo, hi: this way's part (relabelled id range).
        recv_ids[k][q]: ids of way q's part that local chunk k of this way needs (sorted).
        recv_pos[k][q]: their positions in chunk k's ``nbr_ids``.
        send_ids[k][q]: ids of this way's part that chunk k of way q needs (sorted).
        own_pos[k] / own_rows[k]: positions in chunk k's ``nbr_ids`` of this part's ids, and
            their rows in this way's buffers.
        exchanger: exact mode: the autograd halo exchange of the whole part.
    """

    comm: object
    lo: int
    hi: int
    recv_ids: list
    recv_pos: list
    send_ids: list
    own_pos: list = field(default_factory=list)
    own_rows: list = field(default_factory=list)
    exchanger: object = None

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
    def fresh(self) -> bool:
        return self.exchanger is not None

    def num_nbrs(self, k: int) -> int:
        """Rows in chunk k's ``nbr_ids``: this part's and every other way's."""
        return self.own_pos[k].numel() + sum(int(p.numel()) for p in self.recv_pos[k])

    def with_fresh(self, h: torch.Tensor) -> torch.Tensor:
        """Exact hybrid: ``[h; halo rows]`` of the whole part, exchanged inside autograd."""
        return with_halo(h, self.exchanger)

    def gather(self, hist: torch.Tensor, k: int, category: str = "halo_fwd") -> torch.Tensor:
        """float32 [m, d] chunk k's neighbour rows: this part's from ``hist``, the others'
        from their owners' buffers (one all-to-all)."""
        d = hist.shape[1]
        m = self.num_nbrs(k)
        send = [hist.index_select(0, ids - self.lo) for ids in self.send_ids[k]]
        recv = [hist.new_empty((ids.numel(), d)) for ids in self.recv_ids[k]]
        self.comm.all_to_all(send, recv, category=category)
        out = torch.empty((m, d), dtype=torch.float32)
        out.index_copy_(0, self.own_pos[k], hist.index_select(0, self.own_rows[k]).float())
        for pos, rows in zip(self.recv_pos[k], recv):
            if pos.numel():
                out.index_copy_(0, pos, rows.float())
        return out

    def return_grads(self, gacc: torch.Tensor, grad: torch.Tensor | None, k: int) -> None:
        """This part's rows of ``grad`` (chunk k's neighbour rows; None: zeros) into
        ``gacc``; the others to their owners' ``gacc`` (every way takes part)."""
        if grad is None:
            grad = torch.zeros(self.num_nbrs(k), gacc.shape[1])
        acc_rows(gacc, self.own_rows[k], grad.index_select(0, self.own_pos[k]))
        d = gacc.shape[1]
        send = [grad.index_select(0, pos).to(gacc.dtype) for pos in self.recv_pos[k]]
        recv = [gacc.new_empty((ids.numel(), d)) for ids in self.send_ids[k]]
        self.comm.all_to_all(send, recv, category="halo_bwd")
        for ids, rows in zip(self.send_ids[k], recv):
            if ids.numel():
                acc_rows(gacc, ids - self.lo, rows)


def build_way_link(cross, plan, chunks_all: list, way: int, chunks_per_way: int, exact: bool) -> WayLink:
    """The :class:`WayLink` of ``way`` from every way's chunks (all ranks know the plan)."""
    D, C = plan.num_parts, chunks_per_way
    part_ptr = np.asarray(plan.part_ptr, dtype=np.int64)
    lo, hi = int(part_ptr[way]), int(part_ptr[way + 1])

    def by_owner(ids: np.ndarray) -> list[np.ndarray]:
        owner = np.searchsorted(part_ptr, ids, side="right") - 1
        return [ids[owner == q] for q in range(D)]

    recv_ids, recv_pos, send_ids, own_pos, own_rows = [], [], [], [], []
    for k in range(C):
        mine = chunks_all[way * C + k].nbr_ids.numpy()
        groups = by_owner(mine)
        own = np.flatnonzero((mine >= lo) & (mine < hi))
        own_pos.append(torch.from_numpy(own))
        own_rows.append(torch.from_numpy(mine[own] - lo))
        groups[way] = groups[way][:0]
        recv_ids.append([torch.from_numpy(g) for g in groups])
        recv_pos.append([torch.from_numpy(np.searchsorted(mine, g)) for g in groups])
        sends = []
        for q in range(D):
            theirs = chunks_all[q * C + k].nbr_ids.numpy()
            sends.append(torch.from_numpy(theirs[(theirs >= lo) & (theirs < hi)] if q != way else theirs[:0]))
        send_ids.append(sends)
    link = WayLink(cross, lo, hi, recv_ids, recv_pos, send_ids, own_pos, own_rows)
    if exact:
        if C != 1:
            raise GnnpipeError("internal: exact hybrid runs one chunk per way")
        link.exchanger = HaloExchanger(cross, hi - lo, [(ids - lo).numpy() for ids in send_ids[0]],
                                       [ids.numel() for ids in recv_ids[0]])
    return link
