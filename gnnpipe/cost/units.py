"""Per-unit work of a model and its time on a profile.

**Time** of a unit (one forward plus backward over ``n`` rows, ``e`` edges)::

    gemm_flops / gemm_flops_s  +  spmm_edge_width / spmm_edge_width_s
      + elementwise_bytes / mem_bytes_s  +  passes · unit_overhead_s

GEMMs cost 3× their forward (input and weight gradients), except the unit reading the
constant input features (2×: no input gradient); an aggregation costs 2× (our symmetric
CSR backward is one more SpMM); sparse input features cost their non-zeros at the SpMM
rate. ``unit_overhead_s`` is the fixed cost of one pass of one unit over one chunk (kernel
launches, Python, autograd): it is what makes many small chunks expensive. On this
machine ``gnnpipe-plan calibrate`` (:mod:`gnnpipe.cost.calibrate`) fits the SpMM and
elementwise rates and the overhead to real units (the executors' code path), the GEMM
rate is a kernel micro-benchmark.
"""

from __future__ import annotations

from dataclasses import dataclass

from gnnpipe.config import FEATURE_FIRST_MODELS
from gnnpipe.cost.inputs import GraphStats, ModelSpec
from gnnpipe.cost.profile import HardwareProfile

#: Element passes (reads + writes, forward + backward) of the elementwise work per unit
#: and output element: bias, activation, dropout and their gradients.
ELEM_PASSES = 8.0


@dataclass(frozen=True)
class UnitWork:
    """Work of one unit, forward plus backward, over the whole graph.

    Args:
        gemm_flops: dense matrix-multiply FLOPs.
        spmm_ew: SpMM work in edges × width (aggregations, sparse feature products).
        elem_bytes: bytes moved by elementwise ops.
        params: parameter count.
        in_dim, out_dim: widths.
        aggregates: needs neighbour rows (history in the pipeline, halo in graph mode).
        reads_features: its input is the constant input features.
        gemm_on_src: its transform runs on the source rows (own + halo) in graph mode.
        src_gemm_share: with ``gemm_on_src``, the share of ``gemm_flops`` that runs on the
            source rows: 1, except sage's 1/2 (its neighbour transform ``W_l`` runs on every
            source row, its root transform ``W_r`` on the destination rows only:
            :class:`gnnpipe.models.pyg.SAGEConv`).
        agg_first: it aggregates at the input width before its transform, whose GEMM then
            keeps (and runs on) destination rows only (gcn / sage with dense input and
            ``in_dim <= out_dim``: :func:`gnnpipe.models.pyg.aggregate_first`).
        act: what its output's consumer keeps: ``"relu"`` (1 bit per value), ``"elu"``
            (4 bytes), ``"loss"`` (the last unit: the loss's log-softmax, 4 bytes), ``""``.
        heads: attention heads (gat).
        elem_src_bytes: the part of ``elem_bytes`` that runs over an aggregating unit's
            SOURCE rows (res+: its LayerNorm and ReLU before the aggregation): it grows
            with the halo in graph mode and with every chunk's neighbour rows in the
            pipeline.
        drop_values: values of the unit's input dropout (hashed: a counter-based hash per
            value, several times an elementwise pass); over source rows when the unit
            aggregates (it drops its whole ``h_src``), else over its rows.
    """

    gemm_flops: float
    spmm_ew: float
    elem_bytes: float
    params: int
    in_dim: int
    out_dim: int
    aggregates: bool
    reads_features: bool
    gemm_on_src: bool = False
    src_gemm_share: float = 1.0
    agg_first: bool = False
    act: str = ""
    heads: int = 1
    elem_src_bytes: float = 0.0
    drop_values: float = 0.0


def unit_works(stats: GraphStats, spec: ModelSpec) -> list[UnitWork]:
    """Per-unit work of the model on the whole graph, in execution order.

    Mirrors :mod:`gnnpipe.models` (units per model) and the FLOP conventions of
    :func:`gnnpipe.partition.layer_costs`, split by kind so each kind gets its own rate.

    Returns:
        one :class:`UnitWork` per unit (``len == len(layer_costs(...))``).
    """
    m, L, d, s = spec.model, spec.layers, spec.hidden, spec.bytes_per_value
    N, E, F, K = stats.num_nodes, stats.num_edges, stats.num_features, stats.num_classes
    nnz = stats.sparse_nnz

    def first_gemm(fout: int, times: int = 1) -> tuple[float, float]:
        # The constant input needs no gradient: forward + weight gradient only (2×). Sparse
        # input rows cost their non-zeros, at the SpMM rate.
        if nnz is not None:
            return 0.0, 2.0 * times * nnz * fout
        return 2.0 * 2.0 * times * N * F * fout, 0.0

    def elem(width_out: int) -> float:  # bias, activation and their gradients, per output value
        return ELEM_PASSES * s * N * width_out / 2.0

    def drop(width_in: int, dropped: bool = True) -> float:  # input dropout values
        return float(N * width_in) if dropped else 0.0

    out: list[UnitWork] = []
    if m in FEATURE_FIRST_MODELS:
        for i in range(L):
            fin = F if i == 0 else d
            fout = K if i == L - 1 else d
            first, last = i == 0, i == L - 1
            # gcn / sage aggregate first (SpMM at the input width, GEMM on dst rows) when the
            # input is dense and fin <= fout; else transform first (SpMM at the output width,
            # GEMM on src rows). A constant input's aggregate needs no backward SpMM.
            agg_first = m != "gat" and fin <= fout and not (first and nnz is not None)
            sp_in = (1.0 if first else 2.0) * E * fin
            heads = 1
            if m == "gcn":
                g, sp = first_gemm(fout) if first else (3.0 * 2.0 * N * fin * fout, 0.0)
                sp += sp_in if agg_first else 2.0 * E * fout
                params = fin * fout + fout
            elif m == "sage":
                # Self linear on dst rows; neighbour mean at the input width (aggregate first)
                # or of the transformed src rows (transform first: half the GEMM, the
                # neighbour transform's, on src rows; src_gemm_share below).
                g, sp = first_gemm(fout, 2) if first else (3.0 * 2.0 * 2.0 * N * fin * fout, 0.0)
                sp += sp_in if agg_first else 2.0 * E * fout
                params = 2 * fin * fout + fout
            else:  # gat: transform, per-edge scores and softmax, weighted sum
                heads = spec.heads if not last else 1
                g, sp = first_gemm(fout) if first else (3.0 * 2.0 * N * fin * fout, 0.0)
                sp += 2.0 * 3.0 * E * fout
                params = fin * fout + 2 * fout + fout
            act = "loss" if last else ("elu" if m == "gat" else "relu")
            dropped = not (first and nnz is not None)
            out.append(UnitWork(g, sp, elem(fout), params, fin, fout,
                                True, first, gemm_on_src=not agg_first, agg_first=agg_first, act=act,
                                heads=heads, drop_values=drop(fin, dropped),
                                src_gemm_share=0.5 if m == "sage" else 1.0))
        return out
    g, sp = first_gemm(d)
    out.append(UnitWork(g, sp, elem(d), F * d + d, F, d, False, True,
                        act="relu" if m == "gcnii" else "", drop_values=drop(F, nnz is None)))
    for _ in range(L):
        if m == "gcnii":
            # Aggregate, mix with h0, identity-mapped d×d weight (shared weights: one matrix).
            out.append(UnitWork(3.0 * 2.0 * N * d * d, 2.0 * E * d, elem(2 * d), d * d, d, d, True, False,
                                agg_first=True, act="relu", drop_values=drop(d)))
        else:  # resgcn+: LayerNorm → ReLU → dropout (all over src rows) → GCN (aggregate first) → +h
            out.append(UnitWork(3.0 * 2.0 * N * d * d, 2.0 * E * d, elem(3 * d), d * d + 3 * d, d, d, True, False,
                                agg_first=True, elem_src_bytes=elem(2 * d), drop_values=drop(d)))
    pre = 2 * d if m == "resgcn+" else 0
    out.append(UnitWork(3.0 * 2.0 * N * d * K, 0.0, elem(K), d * K + K + pre, d, K, False, False, act="loss",
                        drop_values=drop(d)))
    return out


def gemm_rows_frac(u: UnitWork, frac_rows: float, frac_src: float) -> float:
    """The fraction of the graph's rows ``u``'s GEMMs run on, for a part (or chunk) of
    ``frac_rows`` destination and ``frac_src`` source rows: its destination rows, or for a
    transform on the source rows, those for its :attr:`UnitWork.src_gemm_share` and the
    destination rows for the rest."""
    if not u.gemm_on_src:
        return frac_rows
    return u.src_gemm_share * frac_src + (1.0 - u.src_gemm_share) * frac_rows


def num_units(spec: ModelSpec) -> int:
    """Units an executor can place on stages: L, or L + 2 with input/output linears
    (:attr:`~gnnpipe.config.ModelShape.num_units`)."""
    return spec.num_units


def param_count(stats: GraphStats, spec: ModelSpec) -> int:
    """Trainable parameters of the whole model."""
    return sum(u.params for u in unit_works(stats, spec))


def unit_time(u: UnitWork, prof: HardwareProfile, frac: float, passes: int, gemm_frac: float | None = None) -> float:
    gf = frac if gemm_frac is None else gemm_frac
    return (u.gemm_flops * gf / prof.gemm_flops_s + u.spmm_ew * frac / prof.spmm_edge_width_s
            + elem_time(u, prof, frac, frac) + passes * prof.unit_overhead_s)


def dropout_elem_bytes(values: float, bytes_per_value: int = 4) -> float:
    """Hashed dropout over ``values`` values counted as elementwise passes (what a profile
    without ``dropout_values_s`` assumes)."""
    return values * ELEM_PASSES * bytes_per_value / 2.0


def dropout_time(values: float, prof: HardwareProfile, bytes_per_value: int = 4) -> float:
    """Seconds of hashed dropout (forward + backward) over ``values`` values: the profile's
    measured ``dropout_values_s``, or, when it has none, elementwise passes at ``mem_bytes_s``."""
    if prof.dropout_values_s > 0:
        return values / prof.dropout_values_s
    return dropout_elem_bytes(values, bytes_per_value) / prof.mem_bytes_s


def elem_time(u: UnitWork, prof: HardwareProfile, frac_rows: float, frac_src: float,
              frac_hashed: float | None = None) -> float:
    """Elementwise seconds of ``u`` (dropout included) when it runs on ``frac_rows`` of the
    graph's rows as destinations and ``frac_src`` as sources: an aggregating unit drops out
    its source rows; a transform on source rows takes all its elementwise work there, else
    only ``elem_src_bytes`` runs over them.

    ``frac_hashed``: the rows whose dropout masks are hashed, when that differs from the rows
    dropped out (a pipeline stage with several chunks hashes every node once per unit,
    :class:`gnnpipe.models.ops.KeepMaskCache`, and applies the masks to each chunk's source
    rows: an elementwise pass there)."""
    if not u.aggregates:
        return u.elem_bytes * frac_rows / prof.mem_bytes_s + dropout_time(u.drop_values * frac_rows, prof)
    src_bytes = u.elem_bytes if u.gemm_on_src else u.elem_src_bytes
    if frac_hashed is None:
        drop = dropout_time(u.drop_values * frac_src, prof)
    else:
        drop = (dropout_time(u.drop_values * frac_hashed, prof)
                + dropout_elem_bytes(u.drop_values * frac_src) / prof.mem_bytes_s)
    return ((u.elem_bytes - src_bytes) * frac_rows + src_bytes * frac_src) / prof.mem_bytes_s + drop


#: Encode + decode of one message by :mod:`gnnpipe.wire` on one CPU core, in
#: float32 input bytes per second (``4·values / rate`` seconds per message: the sender's
#: encode plus the receiver's decode; float32 is a zero-copy view, free). Measured here with
#: ``scripts/bench_wire.py --reps 7`` (one thread, best of 7) on [50000, 100], [100000, 128]
#: and [5201, 200] messages, 2026-12-03 16:37 UTC, load 1.0 on the 2-core machine; the
#: lowest of the three sizes, rounded down (docs/benchmarks.md, "Compressed messages").
#: No profile measures it yet, so every profile uses these CPU figures (a GPU encodes faster:
#: there the planner over-charges compression, never under-charges it).
WIRE_CODEC_BYTES_S = {"float32": float("inf"), "bfloat16": 3.9e9, "int8": 9.2e8, "int4": 7.8e8}


def codec_time(values: float, wire: str) -> float:
    """Seconds to encode and decode ``values`` float32 values in ``wire`` (0 for float32)."""
    return 4.0 * values / WIRE_CODEC_BYTES_S[wire]
