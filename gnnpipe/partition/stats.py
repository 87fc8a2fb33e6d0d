"""Statistics of a partition plan (stats.json): sizes, balance, cut, halos, volumes."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from gnnpipe._base import GnnpipeError
from gnnpipe.data.graph import Graph
from gnnpipe.partition import volume
from gnnpipe.partition.plan import PartitionPlan, gather_rows


@dataclass(frozen=True)
class VolumeShape:
    """The model whose per-epoch communication the statistics predict: the volume
    formulas' inputs stats.json records (``volume.model_shape``), a model's ``model``,
    ``layers`` and ``hidden`` (as a :class:`gnnpipe.config.ModelShape`'s) with the plan's
    F, s and S. Not a model description: nothing is built from it.

    Args:
        layers: L, graph layers.
        hidden: d.
        features: F; None → the graph's feature width.
        bytes_per_value: s.
        stages: S for the pipeline prediction; None → the plan's number of parts (the
            same number of devices).
        model: gcn, sage, gat, gcnii or resgcn+ (``ours`` formula; gcnii forwards h0).
    """

    layers: int = 32
    hidden: int = 100
    features: int | None = None
    bytes_per_value: int = 4
    stages: int | None = None
    model: str = "gcn"


def _shape(model_shape: Any) -> VolumeShape:
    if model_shape is None:
        return VolumeShape()
    if isinstance(model_shape, VolumeShape):
        return model_shape
    if isinstance(model_shape, dict):
        try:
            return VolumeShape(**model_shape)
        except TypeError as e:
            raise GnnpipeError(f"model_shape: {e}") from None
    raise GnnpipeError(f"model_shape: expected VolumeShape, dict or None, got {type(model_shape).__name__}")


def _balance(sizes: np.ndarray) -> float:
    return float(sizes.max() / sizes.mean()) if sizes.size and sizes.mean() > 0 else 1.0


def group_cut_and_halo(graph: Graph, plan: PartitionPlan, level: str = "part") -> tuple[int, np.ndarray]:
    """Directed cut entries and distinct remote neighbours of every part (or chunk).

    Works on the graph in ORIGINAL ids, one group's rows at a time (memory O(E / groups)).

    Args:
        level: ``"part"`` or ``"chunk"``.

    Returns:
        (cut_directed, halo [groups]): directed edges leaving their group (twice the
        undirected cut) and, per group, the number of distinct outside neighbours.
    """
    if level == "part":
        owner, ptr = plan.part, plan.part_ptr
    elif level == "chunk":
        owner, ptr = plan.chunk, plan.chunk_ptr
    else:
        raise GnnpipeError(f"level: expected 'part' or 'chunk', got {level!r}")
    groups = ptr.size - 1
    halo = np.zeros(groups, dtype=np.int64)
    cut = 0
    for g in range(groups):
        _, nbr = gather_rows(graph.indptr, graph.indices, plan.perm[ptr[g] : ptr[g + 1]])
        out = nbr[owner[nbr] != g]
        cut += int(out.size)
        halo[g] = np.unique(out).size
    return cut, halo


def plan_stats(graph: Graph, plan: PartitionPlan, model_shape: Any = None) -> dict:
    """Everything stats.json records about a plan.

    Args:
        graph: the graph in ORIGINAL ids.
        plan: a plan for it.
        model_shape: :class:`VolumeShape`, a dict of its fields, or None (32 layers, d=100).

    Returns:
        JSON-ready dict: ``parts``/``chunks`` (sizes, balance, edges, cut, halo counts
        ``M_p`` and their sum) and ``volume`` (bytes per epoch: graph parallel by the
        paper's and by our formula, and pipeline with S stages; see
        :mod:`gnnpipe.partition.volume`).
    """
    ms = _shape(model_shape)
    P, C = plan.num_parts, plan.num_chunks
    N, E = graph.num_nodes, graph.num_edges
    F = ms.features if ms.features is not None else graph.num_features
    S = ms.stages if ms.stages is not None else P
    deg = np.diff(np.asarray(graph.indptr))
    part_sizes = np.diff(plan.part_ptr)
    chunk_sizes = np.diff(plan.chunk_ptr)
    part_edges = np.bincount(plan.part, weights=deg, minlength=P).astype(np.int64)
    pcut, m_p = group_cut_and_halo(graph, plan, "part")
    ccut, m_c = group_cut_and_halo(graph, plan, "chunk")
    sum_m = int(m_p.sum())
    h0 = ms.model == "gcnii"
    L, d, s = ms.layers, ms.hidden, ms.bytes_per_value
    vol = {
        "model_shape": {**asdict(ms), "features": F, "stages": S},
        "graph_parallel_paper": volume.graph_parallel_bytes(sum_m, F, L, d, s, ms.model, "paper"),
        "graph_parallel_ours": volume.graph_parallel_bytes(sum_m, F, L, d, s, ms.model, "ours"),
        "graph_parallel_ours_startup": volume.startup_bytes(sum_m, F, L, s, ms.model),
        "pipeline": volume.pipeline_bytes(N, d, S, s, h0=h0),
        "formulas": {
            "graph_parallel_paper": "2*s*sum_m*(F+(L-1)*d)",
            "graph_parallel_ours": "2*s*sum_m*n_x*d, n_x = L-1 (gcn/sage/gat) or L (gcnii/resgcn+)",
            "graph_parallel_ours_startup": "s*sum_m*F once (gcn/sage/gat)",
            "pipeline": "2*s*(S-1)*N*d (x2 with h0)",
        },
    }
    return {
        "num_nodes": N,
        "num_edges": E,
        "num_parts": P,
        "num_chunks": C,
        "parts": {
            "sizes": part_sizes.tolist(),
            "balance": _balance(part_sizes),
            "edges": part_edges.tolist(),
            "edge_balance": _balance(part_edges),
            "edge_cut": pcut // 2,
            "edge_cut_fraction": (pcut / E) if E else 0.0,
            "halo": m_p.tolist(),
            "halo_sum": sum_m,
        },
        "chunks": {
            "sizes": chunk_sizes.tolist(),
            "balance": _balance(chunk_sizes),
            "edge_cut": ccut // 2,
            "halo": m_c.tolist(),
            "halo_sum": int(m_c.sum()),
        },
        "volume": vol,
    }
