"""What a plan is made for: the graph's statistics, its partition facts, the model's shape.

:class:`GraphStats` (N, E, F, classes, sparse feature non-zeros and, per number of parts, a
:class:`PartInfo`) and :class:`ModelSpec` (the model's :class:`~gnnpipe.config.ModelShape`
with the byte widths of the values, the history and the wire). Plain validated values: where
the statistics come from (a real METIS partition or an estimate from a synthetic sample) is
:mod:`gnnpipe.cost.graphstats`' job.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import ClassVar, Mapping, Sequence

from gnnpipe._base import GnnpipeError
from gnnpipe.config import MODELS, WIRE_FORMATS, ModelShape


@dataclass(frozen=True)
class PartInfo:
    """What a ``parts``-way partition means for one rank (or one hybrid way).

    Args:
        parts: number of parts.
        sum_m: Σ_p M_p, distinct remote neighbours summed over parts.
        max_nodes: nodes of the largest part.
        max_edges: directed edges (rows' neighbour entries) of the busiest part.
        max_halo: the largest M_p.
        source: ``"metis"`` (a real partition of the dataset) or ``"estimated ..."``.
        chunk_halo: per number of chunks per part ``C``: Σ_w Σ_k M_{w,k}, the distinct
            neighbours in other parts of each chunk, summed (the other ways' rows the hybrid
            executor reads per exchanged layer, from rows each sent once:
            :func:`gnnpipe.partition.volume.chunk_halo_sum`).
        chunk_nbrs: per ``C``: the largest part's Σ_k of chunk k's distinct out-of-chunk
            neighbours (own part or not): the rows a pipeline stage gathers from its history
            per aggregating unit per epoch.
    """

    parts: int
    sum_m: int
    max_nodes: int
    max_edges: int
    max_halo: int
    source: str = "metis"
    chunk_halo: Mapping[int, int] = field(default_factory=dict)
    chunk_nbrs: Mapping[int, int] = field(default_factory=dict)


@dataclass(frozen=True)
class GraphStats:
    """Statistics of the graph a plan is made for.

    Args:
        num_nodes: N.
        num_edges: directed edges (each undirected edge twice), E.
        num_features: input width F.
        num_classes: output width.
        sparse_nnz: non-zeros of sparse input features; None for dense features.
        name: for tables and the suggested command.
        parts: :class:`PartInfo` per number of parts (needed for graph parallelism with
            ``P`` parts and the hybrid with ``D`` ways); missing ones are estimated by
            :func:`rank_configs` when ``estimate`` is allowed.
    """

    num_nodes: int
    num_edges: int
    num_features: int
    num_classes: int
    sparse_nnz: int | None = None
    name: str = "graph"
    parts: Mapping[int, PartInfo] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for k in ("num_nodes", "num_edges", "num_features", "num_classes"):
            v = getattr(self, k)
            if not isinstance(v, int) or v < (1 if k != "num_edges" else 0):
                raise GnnpipeError(f"graph stats: {k} must be a positive integer, got {v!r}")
        if self.sparse_nnz is not None and self.sparse_nnz < 0:
            raise GnnpipeError(f"graph stats: sparse_nnz must be >= 0, got {self.sparse_nnz}")

    def part(self, parts: int) -> PartInfo:
        """The :class:`PartInfo` for ``parts`` parts (1 part: the whole graph, no halo)."""
        if parts == 1 and 1 not in self.parts:
            return PartInfo(1, 0, self.num_nodes, self.num_edges, 0, "whole graph")
        if parts not in self.parts:
            raise GnnpipeError(
                f"graph stats for {self.name!r}: no partition facts for {parts} parts "
                f"(have {sorted(self.parts) or 'none'}); pass them or let the planner estimate them"
            )
        return self.parts[parts]

    def with_parts(self, infos: Sequence[PartInfo]) -> "GraphStats":
        """A copy with these :class:`PartInfo` added (replacing same ``parts``)."""
        merged = dict(self.parts)
        merged.update({i.parts: i for i in infos})
        return replace(self, parts=merged)


@dataclass(frozen=True)
class ModelSpec(ModelShape):
    """The model to plan for: its :class:`~gnnpipe.config.ModelShape` (``model``, ``layers``,
    ``hidden``, ``heads``; built-in models only, named in any case) and the byte widths the
    cost model counts.

    Args:
        bytes_per_value: s (4 for float32).
        history_bytes: bytes per value of the pipeline's history, cross-chunk gradient and
            snapshot buffers (4: float32; 2: ``--history-dtype bfloat16``).
        wire: ``--wire``, the format of the training messages (halos, chunk rows, rows
            between ways): the predicted bytes count ``row_bytes(d, wire)`` per row
            (:mod:`gnnpipe.partition.volume`); the predicted times send those bytes and
            pay the codec (:mod:`gnnpipe.cost.predict`).
        boundary_sample: graph mode's ``--boundary-sample`` P: the fraction of the halo rows
            a training exchange sends (:mod:`gnnpipe.partition.sampling`); 1.0, every row.
        shared_input: pipeline and hybrid's ``--shared-input``: every stage of a way
            transforms a share of the first layer's input rows
            (:mod:`gnnpipe.parallel.pipeline.shared_input`).
        local_carry: pipeline and hybrid's ``--local-carry``: every stage that reads GCNII's
            ``h0`` computes it from the features (:mod:`gnnpipe.parallel.pipeline.local_carry`).
    """

    bytes_per_value: int = 4
    history_bytes: int = 4
    wire: str = "float32"
    boundary_sample: float = 1.0
    shared_input: bool = False
    local_carry: bool = False

    #: The cost model knows the built-in models only (a user's chain brings its own estimate).
    known_models: ClassVar[tuple[str, ...]] = MODELS

    @classmethod
    def of(cls, run, **overrides) -> "ModelSpec":
        """The spec a run's settings describe, so that every caller maps them the same way.

        ``run`` is anything with ``model``, ``layers``, ``hidden`` and ``heads`` (a
        ``TrainConfig``, the planner's arguments, a built ``ModelConfig``); where it has a
        ``history_dtype`` and a ``wire`` they set ``history_bytes`` and ``wire``.
        ``overrides`` replace any field.
        """
        kw = {}
        if getattr(run, "history_dtype", None) is not None:
            kw["history_bytes"] = 2 if run.history_dtype == "bfloat16" else 4
        if getattr(run, "wire", None) is not None:
            kw["wire"] = run.wire
        if getattr(run, "boundary_sample", None) is not None:
            kw["boundary_sample"] = float(run.boundary_sample)
        if getattr(run, "shared_input", None) is not None:
            kw["shared_input"] = bool(run.shared_input)
        if getattr(run, "local_carry", None) is not None:
            kw["local_carry"] = bool(run.local_carry)
        return super().of(run, **{**kw, **overrides})

    def __post_init__(self) -> None:
        if isinstance(self.model, str):  # the planner's --model in any case
            object.__setattr__(self, "model", self.model.lower())
        super().__post_init__()
        if self.bytes_per_value < 1:
            raise GnnpipeError(f"bytes_per_value: expected an integer >= 1, got {self.bytes_per_value}")
        if self.history_bytes not in (2, 4):
            raise GnnpipeError(f"history_bytes: expected 4 (float32) or 2 (bfloat16), got {self.history_bytes}")
        if self.wire not in WIRE_FORMATS:
            raise GnnpipeError(f"wire: expected one of {', '.join(WIRE_FORMATS)}, got {self.wire!r}")
        if not 0.0 < self.boundary_sample <= 1.0:
            raise GnnpipeError(f"boundary_sample: expected a fraction in (0, 1], got {self.boundary_sample!r}")
