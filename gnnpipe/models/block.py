"""A bipartite CSR block of the graph: the unit of work every layer runs on.

Row ``v`` of a block lists the source rows that destination node ``v`` aggregates from.
The square block of a whole graph (:meth:`Block.full`), one graph partition with its halo
(dst = owned nodes, src = owned + remote neighbours), and one pipeline chunk (dst = a range
of nodes, src = every node) are all blocks. Normalisation always uses the GLOBAL degrees
stored on the block, so any split of the graph reproduces the one-process numbers exactly.

Derived structures (normalised CSR matrices and their transposes, edge lists, DGL graphs)
are built on first use and cached on the block, so an executor that keeps its blocks pays
for them once per run, not once per layer or epoch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

from gnnpipe._base import GnnpipeError
from gnnpipe.models.ops import CsrTranspose


class BlockError(GnnpipeError, ValueError):
    """A block's arrays are inconsistent; the message names the field."""


def _t(x: Any, dtype: torch.dtype) -> Tensor:
    t = torch.as_tensor(np.asarray(x) if not isinstance(x, Tensor) else x)
    return t if t.dtype == dtype else t.to(dtype)


@dataclass(eq=False)
class Block:
    """dst rows aggregate from src rows (a bipartite CSR block of the graph).

    Args:
        indptr: int64 [num_dst+1] CSR row pointers (one row per dst node).
        indices: int64 [nnz] src positions in ``[0, num_src)``; no self-loops.
        num_src: number of src rows.
        src_deg: float32 [num_src] global degree (self-loops excluded) of each src node.
        dst_deg: float32 [num_dst] global degree of each dst node.
        dst_gid: int64 [num_dst] global node ids (dropout masks are keyed by them).
        src_gid: int64 [num_src] global node ids.
        dst_in_src: int64 [num_dst] position of each dst node among the src rows.
        symmetric: the CSR equals its transpose (square block of an undirected graph
            with src == dst order); lets GCN reuse one matrix for forward and backward.
    """

    indptr: Tensor
    indices: Tensor
    num_src: int
    src_deg: Tensor
    dst_deg: Tensor
    dst_gid: Tensor
    src_gid: Tensor
    dst_in_src: Tensor
    symmetric: bool = False
    _cache: dict = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        self.indptr = _t(self.indptr, torch.int64)
        self.indices = _t(self.indices, torch.int64)
        self.src_deg = _t(self.src_deg, torch.float32)
        self.dst_deg = _t(self.dst_deg, torch.float32)
        self.dst_gid = _t(self.dst_gid, torch.int64)
        self.src_gid = _t(self.src_gid, torch.int64)
        self.dst_in_src = _t(self.dst_in_src, torch.int64)
        self.num_src = int(self.num_src)
        nd = self.indptr.numel() - 1
        if nd < 0:
            raise BlockError("indptr: expected length num_dst+1 >= 1, got an empty array")
        if int(self.indptr[-1]) != self.indices.numel():
            raise BlockError(
                f"indptr: last entry {int(self.indptr[-1])} must equal len(indices) = {self.indices.numel()}"
            )
        for name, n in (("dst_deg", nd), ("dst_gid", nd), ("dst_in_src", nd),
                        ("src_deg", self.num_src), ("src_gid", self.num_src)):
            got = getattr(self, name).shape
            if got != (n,):
                raise BlockError(f"{name}: expected shape ({n},), got {tuple(got)}")
        if self.indices.numel() and (int(self.indices.min()) < 0 or int(self.indices.max()) >= self.num_src):
            raise BlockError(
                f"indices: values must lie in [0, num_src={self.num_src}), got "
                f"[{int(self.indices.min())}, {int(self.indices.max())}]"
            )

    # ------------------------------------------------------------------ construction
    @classmethod
    def full(cls, indptr: Any, indices: Any, degrees: Any = None, gid: Any = None) -> "Block":
        """Square block of a whole (sub)graph: src = dst = every node, in order.

        Args:
            indptr: int64 [N+1]; indices: int64 [nnz] (symmetric adjacency, no self-loops).
            degrees: global degrees [N] (default: the row lengths, i.e. the graph is whole).
            gid: global ids [N] (default: ``arange(N)``).

        Returns:
            :class:`Block` with ``symmetric`` set when the pattern and the degrees make the
            normalised matrix its own transpose.
        """
        indptr = _t(indptr, torch.int64)
        indices = _t(indices, torch.int64)
        n = indptr.numel() - 1
        deg = (indptr[1:] - indptr[:-1]).to(torch.float32) if degrees is None else _t(degrees, torch.float32)
        dev = indptr.device
        gid = torch.arange(n, device=dev) if gid is None else _t(gid, torch.int64)
        rows = torch.repeat_interleave(torch.arange(n, device=dev), indptr[1:] - indptr[:-1])
        key = rows * n + indices
        tkey = torch.sort(indices * n + rows).values
        symmetric = bool(torch.equal(torch.sort(key).values, tkey))
        return cls(indptr, indices, n, deg, deg, gid, gid, torch.arange(n, device=dev), symmetric=symmetric)

    @classmethod
    def from_edge_index(cls, edge_index: Any, num_nodes: int) -> "Block":
        """Square block of a graph given as an ``edge_index`` [2, E] (PyG's layout, on any
        device): symmetrised, self-loops and duplicate edges dropped, rows sorted, the layout
        of :func:`gnnpipe.data.graph.symmetric_csr` (made with torch ops, on the edges' device).

        Raises:
            BlockError: not [2, E], or a node id outside ``[0, num_nodes)`` (the message names it).
        """
        ei = torch.as_tensor(edge_index).detach()
        if ei.dim() != 2 or ei.shape[0] != 2:
            raise BlockError(f"edge_index: expected shape [2, E], got {list(ei.shape)}")
        n = int(num_nodes)
        src, dst = ei[0].long(), ei[1].long()
        if src.numel() and (int(ei.min()) < 0 or int(ei.max()) >= n):
            bad = int(ei.min()) if int(ei.min()) < 0 else int(ei.max())
            raise BlockError(f"edge_index: node id {bad} outside [0, {n}) (the graph has {n} nodes)")
        keep = src != dst
        src, dst = torch.cat([src[keep], dst[keep]]), torch.cat([dst[keep], src[keep]])
        key = torch.unique(dst * n + src)  # sorted by dst, then src; duplicates dropped
        dst, src = key // n, key % n
        indptr = torch.zeros(n + 1, dtype=torch.int64, device=key.device)
        torch.cumsum(torch.bincount(dst, minlength=n), 0, out=indptr[1:])
        return cls.full(indptr, src)

    @classmethod
    def from_rows(cls, indptr: Any, indices: Any, dst: Any, degrees: Any = None) -> "Block":
        """Block for dst = ``dst`` nodes of a graph, src = the dst nodes then their remote neighbours.

        A convenience for tests and small executors (the partitioner builds blocks from
        its halo lists directly). src rows are ordered: the dst nodes first (so
        ``dst_in_src = arange``), then remote neighbours by increasing global id.

        Args:
            indptr, indices: the whole graph's symmetric CSR (numpy or tensors).
            dst: int64 [m] global ids of the destination nodes.
            degrees: global degrees [N] (default: row lengths).
        """
        indptr = np.asarray(indptr, dtype=np.int64)
        indices = np.asarray(indices, dtype=np.int64)
        dst = np.asarray(dst, dtype=np.int64)
        n = indptr.size - 1
        deg = np.diff(indptr).astype(np.float32) if degrees is None else np.asarray(degrees, np.float32)
        starts, ends = indptr[dst], indptr[dst + 1]
        lens = ends - starts
        sel = np.concatenate([np.arange(s, e) for s, e in zip(starts, ends)]) if dst.size else np.empty(0, np.int64)
        nbr = indices[sel].astype(np.int64)
        in_dst = np.zeros(n, bool)
        in_dst[dst] = True
        remote = np.unique(nbr[~in_dst[nbr]])
        src_gid = np.concatenate([dst, remote])
        pos = np.full(n, -1, np.int64)
        pos[src_gid] = np.arange(src_gid.size)
        bptr = np.zeros(dst.size + 1, np.int64)
        np.cumsum(lens, out=bptr[1:])
        return cls(bptr, pos[nbr], src_gid.size, deg[src_gid], deg[dst], dst, src_gid,
                   np.arange(dst.size))

    def to(self, device: torch.device | str) -> "Block":
        """This block on ``device`` (itself when it is there already). Derived matrices are
        not carried over: they are rebuilt on the device at first use."""
        device = torch.device(device)
        if self.indptr.device == device:
            return self
        names = ("indptr", "indices", "src_deg", "dst_deg", "dst_gid", "src_gid", "dst_in_src")
        return Block(**{n: getattr(self, n).to(device) for n in names}, num_src=self.num_src,
                     symmetric=self.symmetric)

    @property
    def device(self) -> torch.device:
        return self.indptr.device

    # ------------------------------------------------------------------ shape facts
    @property
    def num_dst(self) -> int:
        return int(self.indptr.numel() - 1)

    @property
    def nnz(self) -> int:
        return int(self.indices.numel())

    def drop_cache(self) -> None:
        """Forget every derived matrix (normalised CSR, transpose, row ids); they are rebuilt
        on next use. For blocks used rarely, e.g. the evaluation block between evaluations."""
        self._cache.clear()

    def _cached(self, key: str, make):
        v = self._cache.get(key)
        if v is None:
            v = self._cache[key] = make()
        return v

    def rows(self) -> Tensor:
        """int64 [nnz] the dst row of each CSR entry."""
        return self._cached("rows", lambda: torch.repeat_interleave(
            torch.arange(self.num_dst, device=self.device), self.indptr[1:] - self.indptr[:-1]))

    def transpose_pattern(self) -> tuple[Tensor, Tensor, Tensor]:
        """(tcrow int64 [num_src+1], tcol int64 [nnz], perm int64 [nnz]) of the transposed CSR.

        ``values[perm]`` are the transposed matrix's values in its CSR order.
        """
        def make():
            perm = torch.argsort(self.indices, stable=True)
            tcrow = torch.zeros(self.num_src + 1, dtype=torch.int64, device=self.device)
            torch.cumsum(torch.bincount(self.indices, minlength=self.num_src), 0, out=tcrow[1:])
            return tcrow, self.rows()[perm], perm
        return self._cached("tpattern", make)

    def _csr_pair(self, key: str, values: Tensor, symmetric: bool) -> tuple[Tensor, Tensor]:
        def make():
            a = torch.sparse_csr_tensor(self.indptr, self.indices, values, (self.num_dst, self.num_src))
            if symmetric:
                return a, a
            tcrow, tcol, perm = self.transpose_pattern()
            at = torch.sparse_csr_tensor(tcrow, tcol, values[perm], (self.num_src, self.num_dst))
            return a, at

        have = key in self._cache
        pair = self._cached(key, make)
        if not have:
            # The per-entry row ids and the transpose's permutation (8 bytes per entry each)
            # only served to build this pair; an executor keeps its blocks for the whole run,
            # so drop them (they are rebuilt if another path asks).
            self._cache.pop("rows", None)
            self._cache.pop("tpattern", None)
        return pair

    def gcn_norm(self) -> Tensor:
        """float32 [nnz] 1/sqrt((d_u+1)(d_v+1)) per edge (u src, v dst), global degrees."""
        def make():
            return torch.rsqrt((self.src_deg[self.indices] + 1.0) * (self.dst_deg[self.rows()] + 1.0))
        return self._cached("gcn_norm", make)

    def gcn_self_weight(self) -> Tensor:
        """float32 [num_dst, 1] the self-loop weight 1/(d_v+1)."""
        return self._cached("gcn_self", lambda: (1.0 / (self.dst_deg + 1.0)).unsqueeze(1))

    def gcn_adj(self) -> tuple[Tensor, Tensor]:
        """(A, A^T): CSR of the GCN-normalised adjacency without the self-loop term."""
        return self._csr_pair("gcn_adj", self.gcn_norm(), self.symmetric)

    def mean_norm(self) -> Tensor:
        """float32 [nnz] 1/d_v per edge (global degree of the dst node)."""
        return self._cached("mean_norm", lambda: 1.0 / self.dst_deg.clamp(min=1.0)[self.rows()])

    def mean_adj(self) -> tuple[Tensor, Tensor]:
        """(A, A^T): CSR of the mean aggregator (rows of isolated nodes are empty: 0)."""
        return self._csr_pair("mean_adj", self.mean_norm(), False)

    def csr_with_self_loops(self) -> tuple[Tensor, ...]:
        """CSR pattern of N(v) ∪ {v} (the self entry placed last in each row).

        Returns:
            ``(crow, col, rows, tcrow, tcol, perm)``: the pattern, the dst row of each entry,
            and the transposed pattern with its value permutation.
        """
        def make():
            nd = self.num_dst
            counts = self.indptr[1:] - self.indptr[:-1] + 1
            dev = self.device
            crow = torch.zeros(nd + 1, dtype=torch.int64, device=dev)
            torch.cumsum(counts, 0, out=crow[1:])
            col = torch.empty(self.nnz + nd, dtype=torch.int64, device=dev)
            self_pos = crow[1:] - 1
            is_self = torch.zeros(col.numel(), dtype=torch.bool, device=dev)
            is_self[self_pos] = True
            col[is_self] = self.dst_in_src
            col[~is_self] = self.indices
            rows = torch.repeat_interleave(torch.arange(nd, device=dev), counts)
            perm = torch.argsort(col, stable=True)
            tcrow = torch.zeros(self.num_src + 1, dtype=torch.int64, device=dev)
            torch.cumsum(torch.bincount(col, minlength=self.num_src), 0, out=tcrow[1:])
            return crow, col, rows, tcrow, rows[perm], perm
        return self._cached("sl_pattern", make)

    def edge_index(self) -> Tensor:
        """int64 [2, nnz] (src, dst) pairs, PyG convention."""
        return self._cached("edge_index", lambda: torch.stack([self.indices, self.rows()]))

    def square_edge_index(self) -> Tensor:
        """int64 [2, nnz] (src, dst) pairs with BOTH ends in src-row space (the dst end is
        ``dst_in_src[row]``): the edges of a square graph over the src rows, for layers that
        take one node set (user layers, :mod:`gnnpipe.models.user`)."""
        return self._cached("square_edge_index", lambda: torch.stack([self.indices, self.dst_in_src[self.rows()]]))

    def dst_is_prefix(self) -> bool:
        """Whether the dst nodes are the first ``num_dst`` src rows in order
        (``dst_in_src == arange(num_dst)``), as in every block the executors build."""
        return self._cached("dst_prefix", lambda: bool(torch.equal(self.dst_in_src, torch.arange(self.num_dst, device=self.device))))

    def dgl_square(self):
        """A cached ``dgl.graph`` over the src rows with the block's edges
        (:meth:`square_edge_index`): for DGL layers that take one node set."""
        def make():
            import dgl  # optional backend, imported only when used

            src, dst = self.square_edge_index()
            return dgl.graph((src, dst), num_nodes=self.num_src)
        return self._cached("dgl_square", make)

    def dgl_block(self, self_loops: bool):
        """A cached ``dgl.create_block`` of this block (edges src -> dst).

        Args:
            self_loops: append one edge ``dst_in_src[v] -> v`` per dst node, after the
                CSR edges (edge order: the block's CSR order, then the self-loops).
        """
        def make():
            import dgl  # optional backend, imported only when used

            src, dst = self.indices, self.rows()
            if self_loops:
                src = torch.cat([src, self.dst_in_src])
                dst = torch.cat([dst, torch.arange(self.num_dst, device=self.device)])
            return dgl.create_block((src, dst), num_src_nodes=self.num_src, num_dst_nodes=self.num_dst)
        return self._cached(f"dgl_{self_loops}", make)

    def sparse_transpose_for(self, x: Tensor) -> Tensor:
        """Transposed CSR of a sparse input ``x`` (rows = this block's src), its pattern cached
        per (block, feature matrix) (:class:`gnnpipe.models.ops.CsrTranspose`)."""
        return self._cached("xT", CsrTranspose)(x)
