"""Halo structure of a plan: what each part receives and sends, what each chunk reads.

All ids here are NEW ids (the plan's relabelled space). For part ``p`` owning new ids
``[lo, hi)``:

* ``recv_ids``: its remote neighbours, sorted, hence grouped by owner part;
* ``send_idx[q]``: local offsets (in ``[0, n_p)``) of p's nodes that part ``q`` needs,
  sorted; because the graph is symmetric this is exactly q's ``recv_ids`` slice owned by p.

:func:`load_local_part` builds one rank's view straight from the graph in ORIGINAL ids
(possibly memory-mapped), reading only its own rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from gnnpipe.data.graph import Graph
from gnnpipe.partition.plan import PartitionPlan, check_plan_matches, gather_rows


@dataclass(eq=False)
class HaloInfo:
    """Halo-exchange index lists of one part.

    Args:
        part: p.
        recv_ids: int64 [M_p], sorted new ids of the remote neighbours of part p.
        recv_counts: int64 [P], how many of them each part owns (0 for p itself).
        send_idx: list of P int64 arrays; ``send_idx[q]`` are the local offsets of p's
            nodes that part q needs, sorted (empty for q = p).
        send_counts: int64 [P], their lengths.
    """

    part: int
    recv_ids: np.ndarray
    recv_counts: np.ndarray
    send_idx: list
    send_counts: np.ndarray

    @property
    def num_halo(self) -> int:
        """M_p."""
        return int(self.recv_ids.size)

    @property
    def recv_ptr(self) -> np.ndarray:
        """int64 [P+1] offsets of each owner's slice in ``recv_ids``."""
        ptr = np.zeros(self.recv_counts.size + 1, dtype=np.int64)
        np.cumsum(self.recv_counts, out=ptr[1:])
        return ptr


def _halo(plan: PartitionPlan, p: int, src_local: np.ndarray, nbr_new: np.ndarray) -> HaloInfo:
    P = plan.num_parts
    lo, hi = plan.part_range(p)
    n_p = hi - lo
    remote = (nbr_new < lo) | (nbr_new >= hi)
    rn = nbr_new[remote]
    recv_ids = np.unique(rn)
    recv_counts = np.bincount(plan.part_of_new(recv_ids), minlength=P).astype(np.int64)
    # Local node u is sent to q when some edge (u, v) has v in q; unique (q, u) pairs,
    # sorted by q then u.
    key = np.unique(plan.part_of_new(rn) * n_p + src_local[remote])
    owner = key // n_p
    local = key - owner * n_p
    send_counts = np.bincount(owner, minlength=P).astype(np.int64)
    ptr = np.zeros(P + 1, dtype=np.int64)
    np.cumsum(send_counts, out=ptr[1:])
    send_idx = [local[ptr[q] : ptr[q + 1]].copy() for q in range(P)]
    return HaloInfo(p, recv_ids, recv_counts, send_idx, send_counts)


def part_halo(relabelled: Graph, plan: PartitionPlan, p: int) -> HaloInfo:
    """Halo lists of part ``p``, from the graph already in new ids.

    Args:
        relabelled: :func:`~gnnpipe.partition.plan.relabel_graph` output.
        plan: the plan.
        p: part id.

    Returns:
        :class:`HaloInfo` (new ids, see the module docstring).
    """
    lo, hi = plan.part_range(p)
    a, b = int(relabelled.indptr[lo]), int(relabelled.indptr[hi])
    nbr = np.asarray(relabelled.indices[a:b], dtype=np.int64)
    src = np.repeat(np.arange(hi - lo, dtype=np.int64), np.diff(relabelled.indptr[lo : hi + 1]))
    return _halo(plan, p, src, nbr)


@dataclass(eq=False)
class LocalPart:
    """What a rank that owns part ``p`` needs, in local offsets.

    Local node ``i`` is new id ``lo + i``; column ``j < num_local`` of the local CSR is a
    local node, column ``num_local + h`` is halo node ``halo.recv_ids[h]``.

    Shapes:
        indptr: [n_p+1]; indices: [nnz] into ``[0, n_p + M_p)``, sorted within rows.
        deg_local: [n_p], deg_halo: [M_p]: GLOBAL degrees (no self-loops), for GCN
        normalisation. features: [n_p, F] (dense ndarray or scipy CSR). labels: [n_p]
        or [n_p, C]. masks: [n_p]. orig_ids: [n_p]; halo_orig_ids: [M_p].
        chunk_ptr: [C+1] chunk boundaries in local offsets.
    """

    part: int
    lo: int
    hi: int
    halo: HaloInfo
    indptr: np.ndarray
    indices: np.ndarray
    deg_local: np.ndarray
    deg_halo: np.ndarray
    features: Any
    labels: np.ndarray
    train_mask: np.ndarray
    val_mask: np.ndarray
    test_mask: np.ndarray
    orig_ids: np.ndarray
    halo_orig_ids: np.ndarray
    chunk_ptr: np.ndarray

    @property
    def num_local(self) -> int:
        return self.hi - self.lo

    @property
    def num_halo(self) -> int:
        return self.halo.num_halo


def load_local_part(graph: Graph, plan: PartitionPlan, p: int) -> LocalPart:
    """One rank's part, gathered from the graph in ORIGINAL ids (no global relabelling).

    Only part p's rows (via ``plan.perm``) and its halo's degrees are read, so the graph
    can stay memory-mapped.

    Args:
        graph: the graph the plan was built for (hash checked).
        plan: the plan.
        p: part id.

    Returns:
        :class:`LocalPart`.
    """
    check_plan_matches(plan, graph)
    lo, hi = plan.part_range(p)
    n_p = hi - lo
    orig = plan.perm[lo:hi]
    ip, nbr_old = gather_rows(graph.indptr, graph.indices, orig)
    nbr = plan.inv[nbr_old]
    del nbr_old
    src = np.repeat(np.arange(n_p, dtype=np.int64), np.diff(ip))
    halo = _halo(plan, p, src, nbr)
    inside = (nbr >= lo) & (nbr < hi)
    col = np.where(inside, nbr - lo, n_p + np.searchsorted(halo.recv_ids, nbr))
    # Sort each row by local column (local nodes first, then halo in recv order).
    key = src * (n_p + halo.num_halo) + col
    key.sort()
    col = key - (key // (n_p + halo.num_halo)) * (n_p + halo.num_halo) if key.size else col
    del key
    deg = np.diff(ip)
    halo_orig = plan.perm[halo.recv_ids]
    hstart = np.asarray(graph.indptr[halo_orig], dtype=np.int64)
    deg_halo = np.asarray(graph.indptr[halo_orig + 1], dtype=np.int64) - hstart
    f = graph.features
    feats = f[orig] if sp.issparse(f) else np.asarray(f[orig])
    C = plan.num_chunks
    return LocalPart(
        part=p,
        lo=lo,
        hi=hi,
        halo=halo,
        indptr=ip,
        indices=col.astype(np.int64, copy=False),
        deg_local=deg,
        deg_halo=deg_halo,
        features=feats,
        labels=np.asarray(graph.labels[orig]),
        train_mask=np.asarray(graph.train_mask[orig]),
        val_mask=np.asarray(graph.val_mask[orig]),
        test_mask=np.asarray(graph.test_mask[orig]),
        orig_ids=orig.copy(),
        halo_orig_ids=halo_orig,
        chunk_ptr=plan.chunk_ptr[p * C : (p + 1) * C + 1] - lo,
    )


def chunk_neighbours(relabelled: Graph, plan: PartitionPlan, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Neighbours of global chunk ``k``, split by whether they lie in the chunk.

    The out-of-chunk ones are what a pipeline stage reads from its historical embeddings
    (fresh or stale) when it aggregates chunk ``k``.

    Returns:
        (in_chunk_ids, out_of_chunk_ids): sorted unique new ids.
    """
    lo, hi = plan.chunk_range(k)
    nbr = np.asarray(relabelled.indices[int(relabelled.indptr[lo]) : int(relabelled.indptr[hi])])
    inside = (nbr >= lo) & (nbr < hi)
    return np.unique(nbr[inside]), np.unique(nbr[~inside])
