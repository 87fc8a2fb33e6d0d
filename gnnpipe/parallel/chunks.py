"""Chunk blocks: the graph seen by one pipeline chunk (pure, no communication).

A chunk is a contiguous range ``[lo, hi)`` of relabelled node ids. Its block has the chunk's
nodes as destinations and, as sources, the chunk's nodes first (so ``dst_in_src`` is
``0..n-1``) followed by its out-of-chunk neighbours in increasing id order. Those neighbour
rows come from a stage's historical-embedding buffer; gradients that reach them are the
"cross-chunk" gradients of GNNPipe's gradient handling.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from gnnpipe.models.block import Block


@dataclass(eq=False)
class ChunkInfo:
    """One chunk's block and the ids its sources refer to.

    Attributes:
        index: chunk id.
        lo, hi: its relabelled node range.
        nbr_ids: int64 tensor [m], out-of-chunk neighbour ids (relabelled), sorted.
        block: dst = the chunk's nodes, src = chunk nodes then ``nbr_ids``.
    """

    index: int
    lo: int
    hi: int
    nbr_ids: torch.Tensor
    block: Block

    @property
    def size(self) -> int:
        return self.hi - self.lo

    def src_ids(self) -> torch.Tensor:
        """int64 [num_src] the relabelled id of each src row: the chunk's nodes, then ``nbr_ids``."""
        return torch.cat([torch.arange(self.lo, self.hi, dtype=torch.int64, device=self.nbr_ids.device), self.nbr_ids])

    @property
    def device(self) -> torch.device:
        """Where the chunk's block and neighbour ids are."""
        return self.nbr_ids.device

    def to(self, device: torch.device | str) -> "ChunkInfo":
        """This chunk with its block and neighbour ids on ``device``."""
        return ChunkInfo(self.index, self.lo, self.hi, self.nbr_ids.to(device), self.block.to(device))


@dataclass(eq=False)
class ChunkNeighbours:
    """Only the out-of-chunk neighbour ids of a chunk (what another hybrid way needs to know
    of it; its block is never built on this rank)."""

    lo: int
    hi: int
    nbr_ids: torch.Tensor


def chunk_neighbours(indptr: np.ndarray, indices: np.ndarray, lo: int, hi: int) -> ChunkNeighbours:
    """The sorted out-of-chunk neighbours of rows ``[lo, hi)`` (:attr:`ChunkInfo.nbr_ids`)."""
    rows_ptr = np.asarray(indptr[lo : hi + 1], dtype=np.int64)
    cols = np.asarray(indices[rows_ptr[0] : rows_ptr[-1]], dtype=np.int64)
    nbr = np.unique(cols[(cols < lo) | (cols >= hi)])
    return ChunkNeighbours(int(lo), int(hi), torch.from_numpy(nbr))


def build_chunk(indptr: np.ndarray, indices: np.ndarray, deg: np.ndarray, lo: int, hi: int,
                index: int = 0, orig: np.ndarray | None = None) -> ChunkInfo:
    """The :class:`ChunkInfo` of rows ``[lo, hi)`` of a relabelled symmetric CSR graph.

    Args:
        indptr, indices: CSR of the whole graph in relabelled ids.
        deg: float32 [N] global degrees (no self-loops).
        orig: int64 [N] original id of each relabelled id (``plan.perm``); the block's
            global ids (which key dropout masks) are original ids, so masks do not depend
            on the plan. Identity when None.
    """
    rows_ptr = np.asarray(indptr[lo : hi + 1], dtype=np.int64)
    cols = np.asarray(indices[rows_ptr[0] : rows_ptr[-1]], dtype=np.int64)
    local_ptr = rows_ptr - rows_ptr[0]
    outside = (cols < lo) | (cols >= hi)
    nbr = np.unique(cols[outside])
    n = hi - lo
    mapped = np.empty_like(cols)
    mapped[~outside] = cols[~outside] - lo
    mapped[outside] = n + np.searchsorted(nbr, cols[outside])
    src_new = np.concatenate([np.arange(lo, hi, dtype=np.int64), nbr])
    src_gid = src_new if orig is None else np.asarray(orig, dtype=np.int64)[src_new]
    block = Block(
        indptr=torch.from_numpy(local_ptr),
        indices=torch.from_numpy(mapped),
        num_src=int(src_gid.size),
        src_deg=torch.from_numpy(np.asarray(deg, dtype=np.float32)[src_new]),
        dst_deg=torch.from_numpy(np.asarray(deg[lo:hi], dtype=np.float32)),
        dst_gid=torch.from_numpy(src_gid[:n].copy()),
        src_gid=torch.from_numpy(src_gid),
        dst_in_src=torch.arange(n, dtype=torch.int64),
    )
    return ChunkInfo(index=index, lo=int(lo), hi=int(hi), nbr_ids=torch.from_numpy(nbr), block=block)


def build_chunks(indptr: np.ndarray, indices: np.ndarray, chunk_ptr, deg=None,
                 orig: np.ndarray | None = None, only=None) -> list:
    """Every chunk of ``chunk_ptr`` (boundaries in relabelled ids); see :func:`build_chunk`.

    ``only``: a range of chunk indices whose blocks to build; the others get only their
    neighbour ids (:class:`ChunkNeighbours`): a hybrid way needs the blocks of its own
    chunks and just the neighbour lists of the other ways' chunks.
    """
    if deg is None:
        deg = np.diff(np.asarray(indptr)).astype(np.float32)
    cp = [int(x) for x in chunk_ptr]
    keep = range(len(cp) - 1) if only is None else only
    return [build_chunk(indptr, indices, deg, cp[k], cp[k + 1], k, orig) if k in keep
            else chunk_neighbours(indptr, indices, cp[k], cp[k + 1]) for k in range(len(cp) - 1)]
