"""The memory model: what the executors hold per rank, term by term.

Parameters, gradients and Adam's two moments (:data:`ADAM_COPIES` × parameter bytes); the
dataset as the rank reads it (graph mode: its own rows; pipeline: the whole structure,
relabelling reads every row, and features only on the first stage: :func:`dataset_bytes`);
the blocks with their cached normalised CSR and transpose (:func:`block_bytes`; the
pipeline: every chunk's, whose source rows are the chunk's own plus its out-of-chunk
neighbours, Σ_k ≈ 2–5·N rows; evaluation runs over the same blocks); features (graph mode:
own + halo rows; pipeline: the first stage's gathered rows: :func:`feature_bytes`); what
autograd saves for backward (:func:`saved_bytes`, per unit: bit-packed dropout and ReLU
masks over source rows, the transform's input over destination rows; the pipeline keeps
every chunk's until the flush). :mod:`gnnpipe.cost.predict` adds the history buffers
(pipeline: two ``R·d_in`` buffers per aggregating unit on the stage — history and
cross-chunk gradients, or history and snapshot — with ``R`` = N, or a hybrid way's own
rows, in ``ModelSpec.history_bytes`` per value), the gradient receives from the next stage
at the turn to backward, the halo buffers, and the profile's fixed ``base_mem_bytes``; a
configuration whose busiest rank needs more than ``mem_bytes`` is rejected, with why.
"""

from __future__ import annotations

from gnnpipe.cost.inputs import GraphStats

#: Adam: parameter, gradient, two moments.
ADAM_COPIES = 4


def feature_bytes(stats: GraphStats, rows: float) -> float:
    if stats.sparse_nnz is not None:
        return 12.0 * stats.sparse_nnz * rows / stats.num_nodes + 8.0 * rows
    return 4.0 * rows * stats.num_features


#: Bytes per value (of width ``d``) over SOURCE rows that a hidden aggregating unit
#: (``d → d``, dense input) keeps for backward: the bit-packed dropout mask (1/8); gat also
#: its dropped-out input and transformed rows (4 + 4); res+ also its LayerNorm input (4)
#: and ReLU sign bits (1/8), plus 8 bytes per row of LayerNorm statistics. gcn and sage
#: aggregate before their transform, so it keeps no source rows (:func:`saved_bytes` has
#: the general per-unit formula; tests check it against ``saved_tensors_hooks``).
SAVED_SRC = {"gcn": 0.125, "sage": 0.125, "gat": 8.125, "gcnii": 0.125, "resgcn+": 4.25}
#: Bytes per value over DESTINATION rows of the same units: the aggregate its transform
#: keeps (4; sage also its root term's input, 4; gcnii the mixed input of its addmm) and
#: the ReLU's sign bits (1/8); gat its transformed dst rows and the ELU input (4 + 4),
#: plus ``4·heads·(4·(E/N + 1) + 1) + 8·(E/N + 1)`` bytes per row of per-edge scores.
SAVED_DST = {"gcn": 4.125, "sage": 8.125, "gat": 8.0, "gcnii": 4.125, "resgcn+": 4.0}
#: Bytes per value of a bit-packed mask (dropout keep-mask, ReLU sign).
_BIT = 0.125


def dataset_bytes(stats: GraphStats, frac: float = 1.0, feature_rows: float | None = None) -> float:
    """The dataset as a rank holds it: int64 CSR, features, int64 labels, 3 bool masks, and
    the plan's int64 permutation and inverse. ``frac``: the share of its rows the rank
    touches (mapped pages count in RSS once read; a generated graph counts whole);
    ``feature_rows``: the feature rows it reads, when not that share (a pipeline stage
    after the first reads none)."""
    N, E = stats.num_nodes, stats.num_edges
    feats = feature_bytes(stats, frac * N if feature_rows is None else feature_rows)
    return frac * (8.0 * (N + 1 + E) + 11.0 * N) + feats + 16.0 * N


def block_bytes(dst: float, src: float, edges: float) -> float:
    """A :class:`gnnpipe.models.block.Block` with its cached normalised CSR and transpose:
    indptr/indices and the transpose's (8 per row/entry), values of both (4 per entry),
    int64 ids and float32 degrees of src (12) and dst rows (+ dst_in_src, self weight: 28)."""
    return 8.0 * (dst + 1) + 8.0 * (src + 1) + 24.0 * edges + 12.0 * src + 28.0 * dst


def saved_bytes(stats: GraphStats, model: str, u, src: float, dst: float) -> float:
    """Bytes a unit's autograd graph keeps from forward to backward for ``src`` source and
    ``dst`` destination rows (a pipeline stage: summed over every chunk until the flush).

    Per unit, what :mod:`gnnpipe.models` keeps (block tensors and parameters are counted
    elsewhere): dropout keep-masks and ReLU signs bit-packed (1/8 byte per value); a GEMM's
    input (4 bytes per value; a constant input: the dropped-out features); gcn / sage
    aggregating first keep their transform's input over dst rows only. For hidden units
    this is ``SAVED_SRC·src·d + SAVED_DST·dst·d`` (+ gat's per-edge and res+'s per-row
    terms)."""
    i, o = u.in_dim, u.out_dim
    s = 4.0

    def x(rows: float) -> float:  # a GEMM's input over ``rows`` rows
        return feature_bytes(stats, rows) if u.reads_features else s * rows * i

    out = {"relu": _BIT, "elu": s, "loss": s}.get(getattr(u, "act", ""), 0.0) * dst * o
    if not u.aggregates:
        if u.reads_features:  # input linear: the dropped-out features
            return x(dst) + out
        b = (s + _BIT) * dst * i  # output linear: mask bits and the GEMM's input
        if model == "resgcn+":  # LayerNorm input, its mean / rstd per row, ReLU bits
            b += (s + _BIT) * dst * i + 2.0 * s * dst
        return b + out
    # a constant input has no dropout graph; a trainable one keeps its mask bits
    b = 0.0 if u.reads_features else _BIT * src * i
    agg_first = getattr(u, "agg_first", False)
    if model == "gcn":
        b += x(dst if agg_first else src)
    elif model == "sage":
        if u.reads_features and stats.sparse_nnz is not None:
            b += x(src)  # both linears on the (one) sparse dropped-out input
        else:  # root term on dst rows; neighbour term on the aggregate or on src rows
            b += x(dst) + x(dst if agg_first else src)
    elif model == "gat":
        h = getattr(u, "heads", 1)
        e = dst * (stats.num_edges / stats.num_nodes + 1.0)  # edges incl. self-loops
        b += x(src) + s * src * o + s * dst * o + s * h * (4.0 * e + dst) + 8.0 * e
    elif model == "gcnii":
        b += s * dst * i  # the mixed input of its addmm
    else:  # resgcn+: LayerNorm input and statistics, ReLU bits; the conv's aggregate
        b += (s + _BIT) * src * i + 2.0 * s * src + s * dst * i
    return b + out
