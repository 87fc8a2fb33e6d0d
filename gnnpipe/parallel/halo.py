"""Halo exchange: the rows a part's neighbours own, in one all-to-all per direction.

Used by graph parallelism before every aggregation and by the exact hybrid between ways.
Forward sends each peer the rows it needs and receives this part's halo rows; backward sends
the halo rows' gradients home, where they are added into the owners' rows.

:class:`gnnpipe.parallel.pipeline.waylink.WayLink`, the hybrid's link between ways, uses
the same exchanges (:class:`HaloExchanger` when exact, :func:`streamed_exchange` when stale).

Wire formats (``--wire``, :mod:`gnnpipe.wire`): every training message here
(forward rows and backward gradients) is encoded per peer with the run's
:class:`gnnpipe.wire.Wire` just before it is sent and decoded as it arrives
(:func:`streamed_exchange`: the codec overlaps the other peers' transfers). The rounding is
keyed by the seed, the epoch, the site ``message_site(kind, unit, backward)`` (kind
``KIND_HALO`` for :class:`HaloExchanger`, ``KIND_WAY`` for the stale ``WayLink``;
``unit`` the global index of the aggregating unit that reads the rows) and each row's
ORIGINAL node id. float32 keeps the plain path (rows sent as they are, no copy). Evaluation
exchanges (``epoch`` not given) are always float32: evaluation is exact full-graph inference.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from gnnpipe._base import GnnpipeError
from gnnpipe.partition.sampling import BoundarySample
from gnnpipe.wire import FLOAT32, KIND_HALO, Wire, message_site


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
        categories: the communicator's byte categories of the forward rows and of their
            gradients (graph parallelism's halo by default; the exact hybrid's way link
            books ``way_fwd`` / ``way_bwd``).
        sample: boundary sampling (``--boundary-sample``,
            :class:`gnnpipe.partition.sampling.BoundarySample`): each training exchange sends
            each peer the epoch's ``⌊P·n⌋`` of its ``n`` rows, scaled by ``n / k``, and their
            gradients back; None (the default) sends every row. The rank's part is
            ``comm.rank``.
    """

    def __init__(self, comm, num_local: int, send_idx: list, recv_counts,
                 categories: tuple[str, str] = ("halo_fwd", "halo_bwd"), *,
                 wire: Wire = FLOAT32, gid_local=None, gid_halo=None, device: torch.device | str = "cpu",
                 sample: BoundarySample | None = None) -> None:
        self.comm = comm
        # boundary sampling: training exchanges keep a seeded fraction of each peer's rows
        self.sample = sample if sample is not None and sample.fraction < 1.0 else None
        self._drawn: tuple | None = None  # (epoch, _Draw) of the last epoch drawn
        self.fwd_category, self.bwd_category = categories
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
            self.gid_local, self.gid_halo = gl, gh
            # per peer: the original ids of the rows sent forward and of the gradients sent back
            self.send_gid = [gl.index_select(0, idx) for idx in self.send_idx]
            self.recv_gid = [gh[self.recv_off[q] : self.recv_off[q + 1]] for q in range(len(self.recv_counts))]

    def _draw(self, epoch: int) -> "_Draw":
        """Epoch ``epoch``'s boundary sample (the same for every unit of the epoch)."""
        if self._drawn is not None and self._drawn[0] == epoch:
            return self._drawn[1]
        me = self.comm.rank
        sends, scales, recv_pos = [], [], []
        for q, idx in enumerate(self.send_idx):
            n = idx.numel()
            pos = torch.from_numpy(self.sample.positions(epoch, me, q, n)).to(self.device)
            sends.append(idx.index_select(0, pos))
            scales.append(self.sample.scale(n))
            m = self.recv_counts[q]
            rpos = self.sample.positions(epoch, q, me, m) + self.recv_off[q]
            recv_pos.append(torch.from_numpy(rpos).to(self.device))
        draw = _Draw(sends, scales, recv_pos)
        self._drawn = (epoch, draw)
        return draw

    def _wire_buffers(self, counts: list, like: torch.Tensor) -> list:
        return wire_buffers(self.wire, counts, like)

    def _sampled_exchange(self, h_local: torch.Tensor, category: str, epoch: int, unit: int) -> torch.Tensor:
        """:meth:`exchange` under boundary sampling: each peer's sampled rows, scaled; the
        halo rows no peer sent this epoch stay zero."""
        draw = self._draw(epoch)
        d, lossy = h_local.shape[1], self.wire.lossy
        site = message_site(KIND_HALO, unit, False)
        recv = self._wire_buffers([p.numel() for p in draw.recv_pos], h_local)
        out = torch.zeros((self.num_halo, d), dtype=torch.float32, device=h_local.device)

        def produce(q: int) -> torch.Tensor:
            rows = h_local.index_select(0, draw.sends[q]) * draw.scales[q]
            if lossy:
                return self.wire.encode(rows, epoch=epoch, site=site, gid=self.gid_local.index_select(0, draw.sends[q]))
            return rows

        def consume(q: int) -> None:
            if recv[q].shape[0]:
                out.index_copy_(0, draw.recv_pos[q], self.wire.decode(recv[q], d) if lossy else recv[q])

        streamed_exchange(self.comm, produce, recv, consume, category)
        return out

    def _sampled_return(self, grad_halo: torch.Tensor, grad_local: torch.Tensor, category: str, epoch: int,
                        unit: int) -> None:
        """:meth:`return_grads` under boundary sampling: only the gradients of the rows that
        came this epoch go home, where they are scaled as the rows were."""
        draw = self._draw(epoch)
        d, lossy = grad_halo.shape[1], self.wire.lossy
        site = message_site(KIND_HALO, unit, True)
        recv = self._wire_buffers([idx.numel() for idx in draw.sends], grad_halo)

        def produce(q: int) -> torch.Tensor:
            g = grad_halo.index_select(0, draw.recv_pos[q])
            if lossy:
                return self.wire.encode(g, epoch=epoch, site=site, gid=self.gid_halo.index_select(0, draw.recv_pos[q]))
            return g

        def add(q: int) -> None:  # ascending q: the same summation order on every run
            if draw.sends[q].numel():
                g = self.wire.decode(recv[q], d) if lossy else recv[q]
                grad_local.index_add_(0, draw.sends[q], g * draw.scales[q])

        streamed_exchange(self.comm, produce, recv, add, category)

    def exchange(self, h_local: torch.Tensor, category: str, epoch: int | None = None,
                 unit: int = 0) -> torch.Tensor:
        """Halo rows [num_halo, d] of ``h_local`` as owned by the peers.

        With ``epoch`` (a training message) the rows travel in the wire format, keyed by
        ``(seed, epoch, message_site(KIND_HALO, unit, False), original id)``, and under
        boundary sampling only the epoch's sample; without it every row in float32
        (evaluation).
        """
        d = h_local.shape[1]
        h_local = h_local.detach()
        if epoch is not None and self.sample is not None:
            return self._sampled_exchange(h_local, category, epoch, unit)
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
        if epoch is not None and self.sample is not None:
            self._sampled_return(grad_halo, grad_local, category, epoch, unit)
            return
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


@dataclass(frozen=True)
class _Draw:
    """One epoch's boundary sample of a part: per peer, the local rows it sends (``sends``)
    and their factor ``n / k`` (``scales``), and the halo positions it receives
    (``recv_pos``, offsets into the halo rows)."""

    sends: list
    scales: list
    recv_pos: list


def wire_buffers(wire: Wire, counts: list, like: torch.Tensor) -> list:
    """Per peer, a receive buffer of ``counts[q]`` rows of ``like``'s width as they travel in
    ``wire``: encoded bytes with a lossy format, ``like``'s dtype otherwise."""
    d = like.shape[1]
    width, dtype = (wire.row_bytes(d), torch.uint8) if wire.lossy else (d, like.dtype)
    return [torch.empty((n, width), dtype=dtype, device=like.device) for n in counts]


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
