"""Where a pipeline stage's chunks read their out-of-chunk neighbour rows.

:class:`NeighbourSource` is the protocol; :class:`LocalHistory` is one way's source (every
row in the stage's own history buffers); the hybrid's is
:class:`gnnpipe.parallel.pipeline.waylink.WayLink`, which moves the other ways' rows. The stage never
communicates: whoever builds it chooses its source.
"""

from __future__ import annotations

from typing import Protocol

import torch

from gnnpipe.parallel.chunks import ChunkInfo
from gnnpipe.parallel.halo import acc_rows


class NeighbourSource(Protocol):
    """Where a stage's chunks read their out-of-chunk neighbour rows, and where those rows'
    gradients go.

    Row ``r`` of the history buffers handed in (``buf``, ``gacc``) is node ``row0 + r``. A
    source may also need a *remote* buffer per aggregating unit (``rbuf``, ``R_u``, with
    its gradient twin ``gremote``, ``GR_u``): rows that other processes own, which it keeps
    up to date through :meth:`push`. The stage allocates, snapshots and restores these
    buffers exactly as it does the history (so a checkpoint holds them); the source only
    fills them.

    Attributes:
        row0: the first node of the history buffers' rows.
        rows: rows of the history buffers (None: every node of the graph).
        halo_rows: rows of the remote buffers (None: the source needs none).
        fresh: the rows are exchanged fresh inside autograd (:meth:`with_fresh`; exact
            hybrid), so the stage keeps no history.
        collective: :meth:`push` and :meth:`before_backward` are collectives every way
            must enter in the same order, even with no rows to move: :meth:`push` at every
            aggregating unit whose input is trained, in every chunk's forward and once per
            such unit in evaluation; :meth:`before_backward` at every chunk's backward (so
            such a source needs history buffers on every such unit).
    """

    row0: int
    rows: int | None
    halo_rows: int | None
    fresh: bool
    collective: bool

    def push(self, buf: torch.Tensor, rbuf: torch.Tensor | None, k: int | None,
             category: str = "way_fwd", epoch: int | None = None, unit: int = 0) -> None:
        """Bring ``rbuf`` up to date with chunk ``k``'s rows of ``buf`` (every chunk's: None,
        evaluation), just written; called before :meth:`read` of the same unit. ``epoch``
        (training only) and ``unit`` (the global unit index) key a lossy wire format."""

    def read(self, buf: torch.Tensor, rbuf: torch.Tensor | None, k: int, epoch: int | None = None) -> torch.Tensor:
        """float32 [m_k, d]: chunk k's neighbour rows, in its ``nbr_ids`` order (no
        communication); ``epoch``: a training read (a sampling source scales its rows)."""

    def return_grads(self, gacc: torch.Tensor, gremote: torch.Tensor | None, grad: torch.Tensor, k: int,
                     epoch: int | None = None) -> None:
        """Add chunk k's neighbour-row gradients into ``gacc`` (rows of ``buf``) or
        ``gremote`` (rows of ``rbuf``) (no communication); ``epoch`` as in :meth:`read`."""

    def before_backward(self, k: int, gacc: dict, gremote: dict, epoch: int | None = None,
                        unit0: int = 0) -> None:
        """At chunk k's backward, before its autograd backward: deliver what ``gremote``
        (per unit position) holds for chunk k's rows into their owners' ``gacc``
        (``unit0``: the global index of position 0, a wire key with ``epoch``)."""

    def with_fresh(self, h: torch.Tensor, epoch: int | None = None, unit: int = 0) -> torch.Tensor:
        """``[h; neighbour rows]`` exchanged inside autograd (fresh sources only)."""


class LocalHistory:
    """One way: every neighbour row lives in this stage's own buffers (row = node id); no
    remote buffers, nothing to push or deliver."""

    row0 = 0
    rows = None
    halo_rows = None
    fresh = False
    collective = False

    def __init__(self, chunks: list[ChunkInfo]) -> None:
        self.chunks = chunks

    def push(self, buf, rbuf, k, category: str = "way_fwd", epoch=None, unit: int = 0) -> None:
        pass

    def read(self, buf: torch.Tensor, rbuf, k: int, epoch=None) -> torch.Tensor:
        return buf.index_select(0, self.chunks[k].nbr_ids).float()

    def return_grads(self, gacc: torch.Tensor, gremote, grad: torch.Tensor, k: int, epoch=None) -> None:
        acc_rows(gacc, self.chunks[k].nbr_ids, grad)

    def before_backward(self, k: int, gacc: dict, gremote: dict, epoch=None, unit0: int = 0) -> None:
        pass

    def with_fresh(self, h: torch.Tensor, epoch=None, unit: int = 0) -> torch.Tensor:  # pragma: no cover
        raise NotImplementedError("a stage's own history is never fresh")
