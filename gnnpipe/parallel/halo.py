"""Halo exchange: the rows a part's neighbours own, in one all-to-all per direction.

Used by graph parallelism before every aggregation and by the exact hybrid between ways.
Forward sends each peer the rows it needs and receives this part's halo rows; backward sends
the halo rows' gradients home, where they are added into the owners' rows.
"""

from __future__ import annotations

import numpy as np
import torch


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
