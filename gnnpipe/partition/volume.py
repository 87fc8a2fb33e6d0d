"""Predicted communication volume per epoch: the paper's formulas and our executors'.

Pure functions of the model shape and of the halo counts of a partition plan; the
executors' byte counters are tested against them, so every formula here states exactly
what travels. Every result is in bytes, forward plus backward, per epoch.

Notation (as in GNNPIPE.md §3): ``s`` bytes per value, ``F`` input feature width, ``d``
hidden width, ``L`` graph (aggregation) layers, ``M_p`` the distinct remote neighbours of
part ``p`` (``sum_m`` = Σ_p M_p), ``N`` = |V|, ``S`` pipeline stages, ``D`` hybrid ways.

Two graph-parallel formulas live side by side:

* ``paper``: ``V_G = 2·s·Σ_p M_p·(F + (L−1)·d)``: every aggregation layer exchanges its
  input halo forward and its gradient backward, the first layer F wide, the others d wide.
* ``ours``: the first layer's input halo (the constant input features) never travels per
  epoch, nor its gradient (features are not trained): our graph-parallel executor reads
  its halo rows straight from the (memory-mapped) dataset at start-up, so per epoch only
  the layers whose inputs depend on the weights travel:
  ``2·s·Σ_p M_p·n_x·d`` with ``n_x = L−1`` for models whose first graph layer reads the raw
  features (gcn, sage, gat) and ``n_x = L`` for models that start with an input linear
  layer (gcnii, resgcn+: their first aggregation already reads trained d-wide values).
  Where ranks cannot read the dataset, exchanging that halo once at start-up would cost
  ``s·Σ_p M_p·F`` (:func:`startup_bytes`) for the former and nothing for the latter; our
  executor sends zero bytes there.

Wire formats (``--wire``, :mod:`gnnpipe.wire`): every formula takes ``wire``; a row
of width ``w`` costs ``s·w`` bytes in float32 (``s`` stays a parameter: the stale hybrid
sends its history's dtype) and ``row_bytes(w, wire)`` otherwise: ``2·w`` (bfloat16),
``8 + w`` (int8), ``8 + ceil(w / 2)`` (int4), the 8 bytes being each row's float32 scale
and offset. A pipeline row ``[h | h0]`` is ONE wire row of width ``2·d`` (one header).
"""

from __future__ import annotations

import numpy as np

from gnnpipe._base import GnnpipeError
from gnnpipe.config import FEATURE_FIRST_MODELS, MODELS
from gnnpipe.partition.sampling import sampled_count
from gnnpipe.wire import check_format, row_bytes

FORMULAS = ("ours", "paper")


def wire_row_bytes(w: int, s: int = 4, wire: str = "float32") -> int:
    """Bytes of one message row of width ``w``: ``s·w`` in float32, else ``row_bytes(w, wire)``."""
    if check_format(wire) == "float32":
        return s * w
    return row_bytes(w, wire)


def _check_model(model: str) -> str:
    m = model.lower()
    if m not in MODELS:
        raise GnnpipeError(f"model: expected one of {', '.join(MODELS)}, got {model!r}")
    return m


def _check_nonneg(**kw: int) -> None:
    for k, v in kw.items():
        if v < 0:
            raise GnnpipeError(f"{k}: expected a non-negative number, got {v}")


def exchanged_layers(model: str, L: int) -> int:
    """Aggregation layers whose input halo our executor exchanges every epoch.

    Args:
        model: one of :data:`gnnpipe.config.MODELS`.
        L: graph (aggregation) layers.

    Returns:
        ``L − 1`` for gcn/sage/gat (the first layer reads constant features, sent once),
        ``L`` for gcnii/resgcn+ (the input linear layer makes every aggregation input
        trained), never below 0.
    """
    m = _check_model(model)
    _check_nonneg(L=L)
    return max(L - 1, 0) if m in FEATURE_FIRST_MODELS else L


def graph_parallel_bytes(
    sum_m: int,
    F: int,
    L: int,
    d: int,
    s: int = 4,
    model: str = "gcn",
    formula: str = "ours",
    include_startup: bool = False,
    wire: str = "float32",
) -> int:
    """Bytes per epoch that graph parallelism moves in halo exchanges (both directions).

    Args:
        sum_m: Σ_p M_p, distinct remote neighbours summed over parts.
        F: input feature width.
        L: graph layers.
        d: hidden width.
        s: bytes per value (4 for float32).
        model: gcn, sage, gat, gcnii or resgcn+ (only ``formula="ours"`` depends on it).
        formula: ``"paper"`` for ``2·s·ΣM·(F + (L−1)·d)``, ``"ours"`` for
            ``2·s·ΣM·n_x·d`` with ``n_x`` from :func:`exchanged_layers`.
        include_startup: with ``"ours"``, add the one-off start-up exchange of the input
            feature halo (``s·ΣM·F`` for gcn/sage/gat), e.g. to count a one-epoch run.
        wire: the wire format of the halo rows and gradients: ``s·d`` per row in float32,
            ``row_bytes(d, wire)`` otherwise (``2·ΣM·n_x·row_bytes(d, wire)``).

    Returns:
        int bytes. The weight all-reduce is not included.
    """
    _check_nonneg(sum_m=sum_m, F=F, L=L, d=d, s=s)
    if formula == "paper":
        _check_model(model)
        if L == 0:
            return 0
        return 2 * sum_m * (wire_row_bytes(F, s, wire) + (L - 1) * wire_row_bytes(d, s, wire))
    if formula != "ours":
        raise GnnpipeError(f"formula: expected one of {', '.join(FORMULAS)}, got {formula!r}")
    per_epoch = 2 * sum_m * exchanged_layers(model, L) * wire_row_bytes(d, s, wire)
    if include_startup:
        per_epoch += startup_bytes(sum_m, F, L, s=s, model=model)
    return per_epoch


def sampled_halo_rows(pair_rows, p: float) -> int:
    """Boundary rows one training exchange sends under boundary sampling
    (``--boundary-sample p``, :mod:`gnnpipe.partition.sampling`): ``Σ ⌊p·n⌋`` over the
    ordered pairs of parts, ``n`` each pair's rows (``pair_rows``). It stands for ``sum_m``
    in :func:`graph_parallel_bytes`; at ``p = 1`` it is ``Σ n = Σ_p M_p``."""
    return int(sum(sampled_count(int(n), p) for n in pair_rows))


def startup_bytes(sum_m: int, F: int, L: int, s: int = 4, model: str = "gcn") -> int:
    """One-off bytes a start-up exchange of the input-feature halo would cost.

    Our executor reads those rows from the dataset instead and sends nothing; this is the
    figure for deployments where ranks do not share the dataset.

    The input-feature halo (forward only: features get no gradient) for models whose first
    graph layer reads the raw features; zero for models with an input linear layer or
    ``L = 0``.
    """
    m = _check_model(model)
    _check_nonneg(sum_m=sum_m, F=F, L=L, s=s)
    return s * sum_m * F if (m in FEATURE_FIRST_MODELS and L > 0) else 0


def pipeline_bytes(N: int, d: int, S: int, s: int = 4, h0: bool = False, wire: str = "float32",
                   carry_apart: bool = False) -> int:
    """Bytes per epoch that a pure pipeline moves between consecutive stages.

    Every vertex's d-wide activation crosses each of the ``S − 1`` stage boundaries once
    forward and its gradient once backward: ``V_P = 2·s·(S−1)·N·d``, independent of depth.
    Models with a cross-layer tensor (GCNII's initial residual ``h0``) forward it too,
    which doubles the volume (``h0=True``).

    Args:
        N: vertices.
        d: hidden width (the width at stage boundaries).
        S: stages.
        s: bytes per value.
        h0: whether ``h0`` travels beside the activations.
        wire: the wire format: one row ``[h | h0]`` per vertex and boundary,
            ``2·(S−1)·N·row_bytes(d·(2 if h0 else 1), wire)`` (float32: ``s`` per value).
        carry_apart: a one-chunk epoch (``--exact``, an exact epoch of ``--exact-every``),
            whose ``h0`` travels as a message of its own (:mod:`gnnpipe.parallel.pipeline.carry`):
            two wire rows per vertex and boundary, ``2·(S−1)·N·2·row_bytes(d, wire)``
            (the same bytes in float32; one header more per row in int8 and int4).
    """
    _check_nonneg(N=N, d=d, s=s)
    if S < 1:
        raise GnnpipeError(f"stages: expected at least 1, got {S}")
    if h0 and carry_apart:
        return 2 * (S - 1) * N * 2 * wire_row_bytes(d, s, wire)
    return 2 * (S - 1) * N * wire_row_bytes(d * (2 if h0 else 1), s, wire)


def local_carry_bytes(readers: int, weights: int, s: int = 4) -> int:
    """``--local-carry`` (:mod:`gnnpipe.parallel.pipeline.local_carry`), one way and stale
    epoch: stage 0 sends the input layer's ``weights`` values to each of the ``readers``
    stages that compute the carry themselves, and each sends its weight-gradient share back;
    float32 (``s``) whatever ``--wire`` says: ``2·s·readers·weights`` (half in ``input_fwd``,
    half in ``input_bwd``). The chunk messages then hold the rows alone:
    :func:`pipeline_bytes` with ``h0=False``."""
    _check_nonneg(readers=readers, weights=weights, s=s)
    return 2 * s * readers * weights


def shared_input_bytes(rows: int, S: int, width: int, weights: int, s: int = 4) -> int:
    """``--shared-input`` (:mod:`gnnpipe.parallel.pipeline.shared_input`), one way of ``S``
    stages whose first stage reads ``rows`` feature rows: stage 0 sends the first unit's
    ``weights`` values to every other stage and each other stage sends back its share of
    the transformed rows (``width`` wide; stage ``k`` of ``S`` transforms rows
    ``[rows·k/S, rows·(k+1)/S)``, so the others send ``rows − ⌊rows/S⌋``); backward the same
    again, row gradients out and weight-gradient shares back. Always float32 (``s``), whatever
    ``--wire`` says:

        ``2·s·((S − 1)·weights + (rows − ⌊rows/S⌋)·width)``

    (forward and backward alike: half of it in each of ``input_fwd`` and ``input_bwd``).
    """
    _check_nonneg(rows=rows, S=S, width=width, weights=weights)
    if S < 2:
        return 0
    return 2 * s * ((S - 1) * weights + (rows - rows // S) * width)


def way_link_bytes(
    sum_m: int,
    F: int,
    L: int,
    d: int,
    D: int,
    s: int = 4,
    model: str = "gcn",
    formula: str = "ours",
    wire: str = "float32",
) -> int:
    """Bytes per epoch of the hybrid's way link (the communicator's ``way_fwd`` + ``way_bwd``).

    At every exchanged aggregation layer (:func:`exchanged_layers`), whichever stage runs
    it, each boundary vertex travels once forward to each way that needs it and its gradient
    once back, per epoch, however many chunks of that way read it
    (``gnnpipe.parallel.pipeline.waylink.WayLink``: pushed at its owner's slot into the
    reader's remote-row buffer, gradients batched until the owner's backward slot; the exact
    hybrid exchanges the same rows inside autograd). So it equals
    :func:`graph_parallel_bytes` of the same ``D`` parts, ``2·s·d·n_x·Σ_w M_w``, counted
    apart from graph parallelism's halo; 0 for one way.

    Under boundary sampling (``--boundary-sample p``) a stale epoch moves
    :func:`sampled_halo_rows` of the pairs of ways instead: pass it as ``sum_m`` (an exact
    epoch moves every row).

    Args:
        sum_m: Σ_w M_w, the distinct remote neighbours of each way's part, summed over the
            ``D`` ways (graph parallelism's Σ_p M_p for the same parts).
        F, L, d, s, model, formula, wire: as in :func:`graph_parallel_bytes`.
        D: ways.
    """
    if D < 1:
        raise GnnpipeError(f"ways: expected at least 1, got {D}")
    return graph_parallel_bytes(sum_m, F, L, d, s=s, model=model, formula=formula, wire=wire) if D > 1 else 0


def hybrid_bytes(
    N: int,
    sum_m: int,
    F: int,
    L: int,
    d: int,
    S: int,
    D: int,
    s: int = 4,
    model: str = "gcn",
    h0: bool = False,
    formula: str = "ours",
    wire: str = "float32",
) -> int:
    """Bytes per epoch of the hybrid: ``D`` pipelines of ``S`` stages and the way link.

    Each way pipelines its own vertices, so the stage-boundary traffic (``pipe_act`` +
    ``pipe_grad``) sums to :func:`pipeline_bytes` ``(N, d, S)`` over all ways; between ways
    travel :func:`way_link_bytes` (``way_fwd`` + ``way_bwd``). The weight all-reduce across
    ways is not included. ``D = 1`` is the pure pipeline.

    Args:
        N: vertices.
        sum_m: Σ_w M_w, the distinct remote neighbours of each way's part, summed over the
            ``D`` ways (graph parallelism's Σ_p M_p for the same parts).
        F, L, d, s, model, formula: as in :func:`graph_parallel_bytes`.
        S: stages per way.
        D: ways.
        h0: as in :func:`pipeline_bytes`.
        wire: the wire format of both terms (chunk rows and rows between ways).
    """
    way = way_link_bytes(sum_m, F, L, d, D, s=s, model=model, formula=formula, wire=wire)
    return pipeline_bytes(N, d, S, s=s, h0=h0, wire=wire) + way


def chunk_halo_sum(indptr, indices, part, chunk) -> int:
    """Σ over ways w and their chunks k of M_{w,k}.

    ``M_{w,k}`` is the number of distinct vertices of OTHER ways that are neighbours of
    chunk k of way w: the rows of other ways that the hybrid executor reads for that chunk
    at each exchanged layer (from its remote-row buffer; they travel once per way, so the
    bytes follow Σ_w M_w, see :func:`hybrid_bytes`). It is never below Σ_w M_w.

    Args:
        indptr, indices: CSR of the graph (any node order; ``part``/``chunk`` index it).
        part: int [N] way (part) of each node.
        chunk: int [N] chunk of each node (any numbering unique within a part, e.g. the
            global chunk id of a plan).

    Returns:
        int.
    """
    ip, ix = np.asarray(indptr, dtype=np.int64), np.asarray(indices, dtype=np.int64)
    part, chunk = np.asarray(part, dtype=np.int64), np.asarray(chunk, dtype=np.int64)
    n = ip.size - 1
    if part.shape != (n,) or chunk.shape != (n,):
        raise GnnpipeError(f"chunk_halo_sum: part and chunk must have one entry per node ({n}), "
                           f"got {part.shape} and {chunk.shape}")
    src = np.repeat(np.arange(n, dtype=np.int64), np.diff(ip))
    remote = part[ix] != part[src]
    # Key (chunk, neighbour): chunk ids are made unique across parts.
    n_ck = (int(part.max(initial=0)) + 1) * (int(chunk.max(initial=0)) + 1)
    ck = part[src[remote]] * (int(chunk.max(initial=0)) + 1) + chunk[src[remote]]
    return int(count_distinct(ck * n + ix[remote], n_ck * n).sum())


def count_distinct(keys, size: int, groups: int = 1):
    """Distinct values of int64 ``keys`` in ``[0, size)``, counted per group of
    ``size // groups`` consecutive values (a bitmap when it is small enough, else a sort).

    Returns:
        int64 array [groups].
    """
    keys = np.asarray(keys, dtype=np.int64)
    if size <= 400_000_000:
        seen = np.zeros(size, dtype=bool)
        seen[keys] = True
        return seen.reshape(groups, size // groups).sum(axis=1).astype(np.int64)
    u = np.unique(keys)
    return np.bincount(u // (size // groups), minlength=groups).astype(np.int64)
