"""Summary statistics of a :class:`~gnnpipe.data.graph.Graph` (what ``gnnpipe-data info`` shows)."""

from __future__ import annotations

from typing import Any

import numpy as np

from gnnpipe.data.graph import Graph


def edge_homophily(graph: Graph, block: int = 1 << 22) -> float | None:
    """Fraction of (directed) edges whose two ends share a label.

    For multi-label graphs: the mean Jaccard similarity of the two ends' label sets over
    the edges where at least one end has a label (``None`` if there is none). ``None`` for
    a graph without edges. Streams over rows in blocks of about ``block`` edges, so a
    memory-mapped graph is never materialised whole.

    Returns:
        A value in [0, 1], or ``None``.
    """
    if graph.num_edges == 0:
        return None
    ip, ix, y = graph.indptr, graph.indices, graph.labels
    n = graph.num_nodes
    total = 0.0
    count = 0
    row = 0
    while row < n:
        # Rows [row, end) holding about `block` edges (at least one row).
        end = int(np.searchsorted(ip, ip[row] + block, side="right")) - 1
        end = min(max(end, row + 1), n)
        lo, hi = int(ip[row]), int(ip[end])
        if hi > lo:
            src = np.repeat(np.arange(row, end, dtype=np.int64), np.diff(ip[row : end + 1]))
            dst = np.asarray(ix[lo:hi])
            if y.ndim == 1:
                total += float(np.count_nonzero(y[src] == y[dst]))
                count += hi - lo
            else:
                a, b = np.asarray(y[src]) > 0.5, np.asarray(y[dst]) > 0.5
                inter = np.count_nonzero(a & b, axis=1)
                union = np.count_nonzero(a | b, axis=1)
                has = union > 0
                total += float(np.sum(inter[has] / union[has]))
                count += int(has.sum())
        row = end
    return total / count if count else None


def graph_info(graph: Graph) -> dict[str, Any]:
    """Counts and statistics of a graph, JSON-serialisable.

    Returns:
        A dict with ``name``, ``nodes``, ``edges`` (directed: each undirected edge twice),
        ``features``, ``classes``, ``multilabel``, ``sparse_features``, ``degree_min``,
        ``degree_mean``, ``degree_max``, ``isolated_nodes``, ``edge_homophily`` (see
        :func:`edge_homophily`), ``train``/``val``/``test`` (split sizes) and
        ``content_hash``.
    """
    deg = graph.degrees()
    n = graph.num_nodes
    return {
        "name": graph.name,
        "nodes": n,
        "edges": graph.num_edges,
        "features": graph.num_features,
        "classes": graph.num_classes,
        "multilabel": graph.multilabel,
        "sparse_features": graph.sparse_features,
        "degree_min": int(deg.min()) if n else 0,
        "degree_mean": float(graph.num_edges / n) if n else 0.0,
        "degree_max": int(deg.max()) if n else 0,
        "isolated_nodes": int(np.count_nonzero(deg == 0)),
        "edge_homophily": edge_homophily(graph),
        "train": int(np.count_nonzero(graph.train_mask)),
        "val": int(np.count_nonzero(graph.val_mask)),
        "test": int(np.count_nonzero(graph.test_mask)),
        "content_hash": graph.content_hash,
    }
