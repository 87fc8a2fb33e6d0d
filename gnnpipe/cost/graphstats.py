"""Graph statistics measured from a graph or estimated from a sample: this part runs METIS.

:func:`graph_stats_from_graph` partitions a loaded graph the way ``gnnpipe-train`` would
(same method and seed) and counts Σ M_p, the largest part's nodes, edges and halo and the
per-chunk facts; :func:`estimate_part_info` does it on a scaled-down synthetic graph of the
same shape, for a graph that is not here. The prediction itself
(:mod:`gnnpipe.cost.predict`) is pure and takes these facts as input.
"""

from __future__ import annotations

import math
from typing import Callable, Mapping, Sequence

import numpy as np

from gnnpipe._base import GnnpipeError
from gnnpipe.cost.inputs import GraphStats, PartInfo
from gnnpipe.data import synthetic
from gnnpipe.dims import ParallelDims
from gnnpipe.partition import volume
from gnnpipe.partition.plan import build_plan
from gnnpipe.partition.stats import group_cut_and_halo


def chunk_facts(graph, parts: int, chunks: int, seed: int = 0, method: str = "metis") -> tuple[int, int]:
    """(Σ_w Σ_k M_{w,k}, the largest part's Σ_k |out-of-chunk neighbours of k|) of the plan
    ``gnnpipe-train`` builds for ``parts`` ways and ``chunks`` chunks per way (same method
    and seed): the hybrid's per-chunk halo and the rows a stage gathers from history."""
    return chunk_facts_of_plan(graph, build_plan(graph, parts, chunks, method=method, seed=seed))


def chunk_facts_of_plan(graph, plan) -> tuple[int, int]:
    """:func:`chunk_facts` of an existing plan of ``graph`` (e.g. one on disk)."""
    ip, ix = np.asarray(graph.indptr, dtype=np.int64), np.asarray(graph.indices, dtype=np.int64)
    n = ip.size - 1
    part, chunk = np.asarray(plan.part, dtype=np.int64), np.asarray(plan.chunk, dtype=np.int64)
    src = np.repeat(np.arange(n, dtype=np.int64), np.diff(ip))
    out = chunk[ix] != chunk[src]
    # Distinct (chunk, neighbour) pairs, counted per part (global chunk k = p·C + j).
    P = int(plan.num_parts)
    per_part = volume.count_distinct(chunk[src[out]] * n + ix[out], P * int(plan.num_chunks) * n, P)
    return volume.chunk_halo_sum(ip, ix, part, chunk), int(per_part.max())


def part_info_from_plan(graph, parts: int, seed: int = 0, method: str = "metis",
                        chunks: Sequence[int] = ()) -> PartInfo:
    """Partition facts of a real partition of ``graph`` (METIS by default).

    Uses :func:`gnnpipe.partition.build_plan` and the stats helper
    :func:`gnnpipe.partition.stats.group_cut_and_halo`, so Σ M_p is the plan's own; for
    every ``C`` in ``chunks`` also the per-chunk facts (:func:`chunk_facts`) of the
    ``parts`` × ``C`` plan.
    """
    cf = {c: chunk_facts(graph, parts, c, seed, method) for c in sorted(set(chunks))}
    ch = {c: v[0] for c, v in cf.items()}
    cn = {c: v[1] for c, v in cf.items()}
    if parts == 1:
        return PartInfo(1, 0, graph.num_nodes, graph.num_edges, 0, "whole graph", ch, cn)
    plan = build_plan(graph, parts, 1, method=method, seed=seed)
    _, halo = group_cut_and_halo(graph, plan, "part")
    deg = np.diff(np.asarray(graph.indptr))
    edges = np.bincount(plan.part, weights=deg, minlength=parts)
    sizes = np.diff(plan.part_ptr)
    return PartInfo(parts, int(halo.sum()), int(sizes.max()), int(edges.max()), int(halo.max()), method, ch, cn)


def graph_stats_from_graph(graph, parts: Sequence[int] = (), seed: int = 0,
                           chunks: Mapping[int, Sequence[int]] | None = None) -> GraphStats:
    """:class:`GraphStats` of a loaded :class:`gnnpipe.data.graph.Graph`, with METIS facts
    for every number of parts in ``parts`` and, for every ``parts → [C, ...]`` in ``chunks``
    (1 part = the pure pipeline), the per-chunk facts of those plans (:func:`chunk_facts`).
    :func:`chunk_counts` gives ``chunks`` for a list of topologies."""
    nnz = int(graph.features.nnz) if graph.sparse_features else None
    stats = GraphStats(int(graph.num_nodes), int(graph.num_edges), int(graph.num_features),
                       int(graph.num_classes), nnz, graph.name or "graph")
    chunks = dict(chunks or {})
    want = sorted({p for p in parts if p > 1} | {p for p in chunks if chunks[p]})
    return stats.with_parts([part_info_from_plan(graph, p, seed, chunks=chunks.get(p, ())) for p in want])


def chunk_counts(topologies: Sequence[ParallelDims]) -> dict[int, list[int]]:
    """``{ways: [chunks, ...]}`` of the pipeline and hybrid topologies (for
    :func:`graph_stats_from_graph`'s ``chunks``)."""
    out: dict[int, set[int]] = {}
    for t in topologies:
        if t.mode != "graph":
            out.setdefault(t.ways, set()).add(t.chunks)
    return {k: sorted(v) for k, v in out.items()}


def estimate_part_info(num_nodes: int, num_edges: int, parts: Sequence[int], sample_nodes: int = 20000,
                       generator: str = "rmat", seed: int = 0,
                       chunks: Mapping[int, Sequence[int]] | None = None,
                       progress: Callable[[str], None] | None = None) -> list[PartInfo]:
    """Estimate partition facts of a graph we do not have from a scaled-down synthetic one.

    Generates a graph of ``n' = min(N, sample_nodes)`` nodes with the same average degree
    (``E' = E·n'/N`` directed edges, capped at 40 % density), partitions it with METIS into
    each number of parts, and scales: ``Σ M_p ≈ Σ M'_p · N/n'``, the largest part's nodes,
    edges and halo likewise. The assumption is that, at a fixed number of parts and average
    degree, the halo is a fixed fraction of the nodes; it holds for graphs without
    geometry (R-MAT, SBM) and overestimates the halo of graphs with strong communities,
    which METIS cuts better (so the planner errs against graph parallelism there).

    Args:
        num_nodes, num_edges: N and directed E of the real graph.
        parts: numbers of parts to estimate (each ≥ 2 and ≤ n').
        sample_nodes: n'.
        generator: ``"rmat"`` (power-law degrees, the default) or ``"sbm"``.
        seed: generator and METIS seed.
        chunks: ``{parts: [C, ...]}``: also estimate the per-chunk facts of those plans
            (``1`` for the pure pipeline), scaled by ``N/n'`` like Σ M_p. A chunk of the
            sample has ``C`` times fewer nodes than the real one at the same C, so this
            assumes the out-of-chunk neighbours grow with the nodes, as the halo does.
        progress: called with one line before each number of parts is partitioned (one
            METIS run per plan: the cost grows with the sample's edges and the chunk counts).

    Returns:
        one :class:`PartInfo` per entry of ``parts`` (``source`` says how it was made).
    """
    if num_nodes < 2:
        raise GnnpipeError(f"num_nodes: expected at least 2, got {num_nodes}")
    n = int(min(num_nodes, sample_nodes))
    scale = num_nodes / n
    e = int(round(num_edges / scale))
    e = min(e, int(0.4 * n * (n - 1)))
    e -= e % 2
    if generator == "rmat":
        g = synthetic.rmat(n, e, num_classes=2, num_features=1, seed=seed, homophily=0.0)
    elif generator == "sbm":
        g = synthetic.sbm(n, num_classes=2, avg_degree=e / n, homophily=0.5, num_features=1, seed=seed)
    else:
        raise GnnpipeError(f"generator: expected 'rmat' or 'sbm', got {generator!r}")
    out = []
    chunks = dict(chunks or {})
    todo = sorted(set(parts) | set(chunks))
    for i, p in enumerate(todo, 1):
        if not (1 if p in chunks else 2) <= p <= n:
            raise GnnpipeError(f"parts: expected 2..{n} for the estimate, got {p}")
        cs = [c for c in chunks.get(p, ()) if c * p <= n]
        if progress is not None:
            progress(f"partitioning the {n:,}-node sample: {p} part(s)"
                     + (f" x chunks {cs}" if cs else "") + f" ({i}/{len(todo)})")
        pi = part_info_from_plan(g, p, seed, chunks=cs)
        out.append(PartInfo(
            p, int(round(pi.sum_m * scale)), int(math.ceil(pi.max_nodes * scale)),
            int(round(pi.max_edges * num_edges / max(g.num_edges, 1))), int(round(pi.max_halo * scale)),
            f"estimated from a {generator} graph of {n:,} nodes / {g.num_edges:,} edges (x{scale:.2f})",
            {c: int(round(v * scale)) for c, v in pi.chunk_halo.items()},
            {c: int(round(v * scale)) for c, v in pi.chunk_nbrs.items()},
        ))
    return out


def estimate_sum_m(num_nodes: int, num_edges: int, parts: int, sample_nodes: int = 20000,
                   generator: str = "rmat", seed: int = 0) -> int:
    """Σ M_p of a ``parts``-way METIS partition, estimated (see :func:`estimate_part_info`)."""
    return estimate_part_info(num_nodes, num_edges, [parts], sample_nodes, generator, seed)[0].sum_m
