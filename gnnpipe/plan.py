"""Cost model and planner: predict bytes, time and memory per epoch for every topology.

Floor 3: pure functions of graph statistics, a model shape, a topology and a hardware
profile; nothing here communicates or reads the clock. The pieces:

* :class:`GraphStats` — N, E, F, classes, sparse feature non-zeros and, per number of
  parts, the partition facts graph parallelism and the hybrid need (Σ M_p, the largest
  part's nodes, edges and halo). From a real METIS partition
  (:func:`graph_stats_from_graph`) or estimated from a synthetic graph of the same shape
  (:func:`estimate_part_info`).
* :class:`ModelSpec` — model, layers L, hidden d, heads, bytes per value.
* :class:`gnnpipe.dims.ParallelDims` — mode, ways D, stages S, chunks C (world = D·S).
* :class:`HardwareProfile` — throughputs, links, memory; TOML files in
  ``gnnpipe/profiles`` (:func:`load_profile`).
* :func:`predict` → :class:`Prediction`; :func:`rank_configs` ranks every feasible
  topology of a world size.

**Bytes** are exactly :mod:`gnnpipe.partition.volume`'s formulas (the ones the executors'
byte counters are tested against); the weight all-reduce adds the parameter bytes once
per rank in the group, as the communicator counts it.

**Time** of a unit (one forward plus backward over ``n`` rows, ``e`` edges)::

    gemm_flops / gemm_flops_s  +  spmm_edge_width / spmm_edge_width_s
      + elementwise_bytes / mem_bytes_s  +  passes · unit_overhead_s

GEMMs cost 3× their forward (input and weight gradients), except the unit reading the
constant input features (2×: no input gradient); an aggregation costs 2× (our symmetric
CSR backward is one more SpMM); sparse input features cost their non-zeros at the SpMM
rate. ``unit_overhead_s`` is the fixed cost of one pass of one unit over one chunk (kernel
launches, Python, autograd): it is what makes many small chunks expensive. On this
machine ``gnnpipe-plan calibrate`` fits the SpMM and elementwise rates and the overhead to
real units (the executors' code path), the GEMM rate is a kernel micro-benchmark.

**Ranks sharing cores**: every rank's compute is multiplied by
:meth:`HardwareProfile.slowdown`: ``shared_slowdown`` when every core of a node is busy,
and ``shared_slowdown · oversub_slowdown · ranks/cores`` when a node runs more ranks than
its ``cores_per_host`` (4 ranks on this 2-core machine: each gets half a core). A blocking
collective costs ``coll_overhead_s`` plus, when its group outnumbers the cores (some
member is always descheduled), ``oversub_wait_s`` (at most the compute between two
collectives).

**Graph parallelism**: the largest part computes every unit on its rows (transforms on
its rows plus halo rows for gcn/gat, which transform ``h_src``), gathers its send rows
and concatenates [own | halo] per exchanged layer (and scatters the halo's gradient back,
at ``gather_bytes_s``), then per exchanged layer
(:func:`gnnpipe.partition.volume.exchanged_layers`) one blocking all-to-all forward and
one backward; then the weight all-reduce (ring) and the optimizer step.

**Pipeline** (GNNPipe's schedule: every chunk forward, then every chunk backward, one
flush): stage ``s`` owns the units :func:`gnnpipe.partition.assign_layers` gives it from
:func:`gnnpipe.partition.layer_costs` (the executor's own assignment) and spends ``T_s``
per epoch; a chunk's forward takes ``T_s/3/C`` and its backward ``2·T_s/3/C``. ``T_s``
counts what the executor does per chunk: every unit pass (``2·C`` per unit), and per
aggregating unit the history path — write the chunk's rows, gather its out-of-chunk
neighbour rows, concatenate, scatter-add their gradients: ``s·d_in·(2·rows + 3·Σ_k
|N(k)|)`` bytes at ``gather_bytes_s`` plus ``chunk_overhead_s`` per chunk and pass, with
Σ_k |N(k)| (≈ 2–5·N) from the plan (:attr:`PartInfo.chunk_nbrs`); gcn/gat transform
their source rows, so their GEMMs run on ``rows + Σ_k |N(k)|`` rows. With
``t_b`` the per-chunk message time over boundary ``b`` (latency + bytes / bandwidth)::

    epoch = Σ_s T_s/C + 2·Σ_b t_b + (C−1)·(max(f_max, t_max) + max(b_max, t_max)) + opt

so with equal stages and free links the bubble is ``(S−1)/(C+S−1)`` of the epoch.
Reported: ``compute_s`` = the busiest stage's ``T_s``, ``comm_s`` = exposed transfers
(fill/drain messages, links slower than compute, hybrid halo exchanges, all-reduce),
``bubble_s`` = the rest (fill/drain and imbalance), so ``epoch_s`` is their sum plus the
optimizer step.

**Hybrid**: ``D`` pipelines over METIS ways; each stage also exchanges its layers' halo
rows with the same stage of the other ways (blocking, per chunk, ``C·(D−1)`` messages per
layer and direction, of the per-chunk halos :attr:`PartInfo.chunk_halo`) and all-reduces
its weights across ways.

**Memory** per rank, term by term what the executors hold: parameters, gradients and
Adam's two moments (4× parameter bytes); the dataset as the rank reads it (graph mode: its
own rows; pipeline: the whole structure, relabelling reads every row, and features only on
the first stage); the blocks with their cached normalised CSR and transpose (the pipeline:
every chunk's, whose source rows are the chunk's own plus its out-of-chunk neighbours,
Σ_k ≈ 2–5·N rows; evaluation runs over the same blocks); features (graph mode: own + halo
rows; pipeline: the first stage's gathered rows); what autograd saves for backward
(:func:`_saved_bytes`, per unit: bit-packed dropout and ReLU masks over source rows, the
transform's input over destination rows; the pipeline keeps every chunk's until the
flush); history buffers (pipeline: two ``R·d_in`` buffers per aggregating unit on the
stage — history and cross-chunk gradients, or history and snapshot — with ``R`` = N, or a
hybrid way's own rows, in ``ModelSpec.history_bytes`` per value); the gradient receives
from the next stage at the turn to backward, and halo buffers; and the profile's fixed
``base_mem_bytes``. A configuration whose busiest rank needs more
than ``mem_bytes`` is rejected, with why.
"""

from __future__ import annotations

import dataclasses

import logging
import math
import os
import tomllib
from dataclasses import asdict, dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from gnnpipe._base import GnnpipeError
from gnnpipe.config import FEATURE_FIRST_MODELS, MODELS
from gnnpipe.dims import ParallelDims
from gnnpipe.partition import volume
from gnnpipe.partition.layers import assign_layers, layer_costs

log = logging.getLogger(__name__)

#: Default chunk counts are these multiples of the number of stages (the paper used 4·S).
CHUNK_FACTORS = (1, 2, 4, 8)
#: Element passes (reads + writes, forward + backward) of the elementwise work per unit
#: and output element: bias, activation, dropout and their gradients.
ELEM_PASSES = 8.0
#: Without a real partition, the largest METIS part holds this many times the mean number
#: of nodes (METIS' default imbalance tolerance is 3 %).
DEFAULT_NODE_BALANCE = 1.03
#: Adam: parameter, gradient, two moments.
ADAM_COPIES = 4


# ----------------------------------------------------------------------------- inputs
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
            neighbours in other parts of each chunk, summed (what the hybrid executor sends
            per exchanged layer; :func:`gnnpipe.partition.volume.chunk_halo_sum`).
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
class ModelSpec:
    """The model to train (shapes only).

    Args:
        model: gcn, sage, gat, gcnii or resgcn+.
        layers: L, graph (aggregation) layers.
        hidden: d.
        heads: attention heads of gat's hidden layers (ignored otherwise).
        bytes_per_value: s (4 for float32).
        history_bytes: bytes per value of the pipeline's history, cross-chunk gradient and
            snapshot buffers (4: float32; 2: ``--history-dtype bfloat16``).
    """

    model: str = "gcn"
    layers: int = 32
    hidden: int = 100
    heads: int = 1
    bytes_per_value: int = 4
    history_bytes: int = 4

    def __post_init__(self) -> None:
        if self.model.lower() not in MODELS:
            raise GnnpipeError(f"model: expected one of {', '.join(MODELS)}, got {self.model!r}")
        object.__setattr__(self, "model", self.model.lower())
        for k in ("layers", "hidden", "heads", "bytes_per_value"):
            if getattr(self, k) < 1:
                raise GnnpipeError(f"{k}: expected an integer >= 1, got {getattr(self, k)}")
        if self.history_bytes not in (2, 4):
            raise GnnpipeError(f"history_bytes: expected 4 (float32) or 2 (bfloat16), got {self.history_bytes}")
        if self.model == "gat" and self.hidden % self.heads:
            raise GnnpipeError(f"hidden: {self.hidden} is not a multiple of heads={self.heads} (gat)")

    @property
    def h0(self) -> bool:
        """GCNII forwards its initial residual beside the activations."""
        return self.model == "gcnii"


PROFILE_FIELDS = {
    "gemm_flops_s": "achieved dense GEMM throughput, FLOP/s",
    "spmm_edge_width_s": "achieved CSR SpMM throughput, edges x width per second",
    "mem_bytes_s": "achieved memory bandwidth (elementwise ops), bytes/s",
    "unit_overhead_s": "fixed cost of one pass of one unit over one chunk, s",
    "intra_bw_bytes_s": "point-to-point bandwidth between devices of one node, bytes/s",
    "intra_latency_s": "point-to-point latency within a node, s",
    "inter_bw_bytes_s": "network bandwidth of one node (shared by its devices), bytes/s",
    "inter_latency_s": "latency between nodes, s",
    "devices_per_node": "devices (ranks) per node",
    "mem_bytes": "usable memory per device, bytes",
    "base_mem_bytes": "fixed memory per rank (runtime, context, allocator slack), bytes",
}
#: Optional fields (older profiles load without them) and their defaults: a field's
#: default is a number, or the name of the field whose value it copies.
PROFILE_OPTIONAL = {
    "cores_per_host": ("compute units of a node that ranks share; more ranks than this on a node "
                       "slow every rank's compute by ranks/cores", "devices_per_node"),
    "gather_bytes_s": ("row gathers and scatters (index_select, index_add_, cat), bytes/s", "mem_bytes_s"),
    "chunk_overhead_s": ("fixed cost of the pipeline's history path per chunk per aggregating unit "
                         "(forward write + gather, backward scatter), s", 0.0),
    "coll_overhead_s": ("fixed software cost of one blocking collective (all-to-all, all-reduce), s", 0.0),
    "oversub_wait_s": ("extra wait per blocking collective when a node runs more ranks than cores "
                       "(peers descheduled), s", 0.0),
    "shared_slowdown": ("compute slow-down when every core of a node runs a rank (shared memory "
                        "bandwidth and caches), >= 1", 1.0),
    "oversub_slowdown": ("further slow-down per rank beyond the fair share ranks/cores when ranks "
                         "outnumber cores (context switches, cache refills), >= 1", 1.0),
    "dropout_values_s": ("hashed dropout, forward + backward, values/s (0: as elementwise work at "
                         "mem_bytes_s)", 0.0),
}


@dataclass(frozen=True)
class HardwareProfile:
    """A machine, as the cost model sees it (see :data:`PROFILE_FIELDS`)."""

    name: str
    gemm_flops_s: float
    spmm_edge_width_s: float
    mem_bytes_s: float
    unit_overhead_s: float
    intra_bw_bytes_s: float
    intra_latency_s: float
    inter_bw_bytes_s: float
    inter_latency_s: float
    devices_per_node: int
    mem_bytes: float
    base_mem_bytes: float = 0.0
    description: str = ""
    source: str = ""
    cores_per_host: float = 0.0  # 0: devices_per_node (one core or GPU per rank)
    gather_bytes_s: float = 0.0  # 0: mem_bytes_s
    chunk_overhead_s: float = 0.0
    coll_overhead_s: float = 0.0
    oversub_wait_s: float = 0.0
    shared_slowdown: float = 1.0
    oversub_slowdown: float = 1.0
    dropout_values_s: float = 0.0  # 0: ELEM_PASSES·s/2 bytes per value at mem_bytes_s
    #: ``gnnpipe-train --device`` on this machine (``cpu`` or ``cuda``): the planner's
    #: recommended command carries it.
    device: str = "cpu"

    def __post_init__(self) -> None:
        if self.device not in ("cpu", "cuda"):
            raise GnnpipeError(f"profile {self.name!r}: device must be 'cpu' or 'cuda', got {self.device!r}")
        if not self.cores_per_host:
            object.__setattr__(self, "cores_per_host", float(self.devices_per_node))
        if not self.gather_bytes_s:
            object.__setattr__(self, "gather_bytes_s", float(self.mem_bytes_s))

    def ranks_on_host(self, world: int) -> int:
        """Ranks on the busiest node (consecutive ranks fill a node)."""
        return max(1, min(world, self.devices_per_node))

    def slowdown(self, world: int) -> float:
        """Factor on every rank's compute for ``world`` ranks.

        Up to one rank per core: ``shared_slowdown`` when every core is busy (linear in
        the busy cores before that); beyond, the ranks time-share the cores:
        ``shared_slowdown · oversub_slowdown · ranks / cores``.
        """
        r, c = self.ranks_on_host(world), self.cores_per_host
        if r <= 1:
            return 1.0
        if r <= c:
            return 1.0 + (self.shared_slowdown - 1.0) * (r - 1) / max(c - 1, 1)
        return self.shared_slowdown * self.oversub_slowdown * r / c

    def link(self, a: int, b: int) -> tuple[float, float]:
        """(bandwidth, latency) between ranks ``a`` and ``b`` (consecutive ranks per node)."""
        if a // self.devices_per_node == b // self.devices_per_node:
            return self.intra_bw_bytes_s, self.intra_latency_s
        return self.inter_bw_bytes_s, self.inter_latency_s


def profiles_dir() -> Path:
    """The folder of the shipped profiles (``gnnpipe/profiles``)."""
    return Path(str(resources.files("gnnpipe") / "profiles"))


#: Environment variable naming the user profile directory (``gnnpipe-plan calibrate``
#: writes there; :func:`load_profile` looks there before the shipped profiles).
PROFILE_DIR_ENV = "GNNPIPE_PROFILE_DIR"


def user_profiles_dir() -> Path:
    """The user profile directory: ``$GNNPIPE_PROFILE_DIR``, else ``./profiles``.

    Calibrated profiles live here, never in the package: the shipped files are tracked and
    hand-merged, and a measurement of one machine must not rewrite them.
    """
    return Path(os.environ.get(PROFILE_DIR_ENV) or "profiles")


def list_profiles() -> list[str]:
    """Names of the profiles :func:`load_profile` finds by name (user ones and shipped)."""
    names: set[str] = set()
    for d in (user_profiles_dir(), profiles_dir()):
        if d.is_dir():
            names.update(p.stem for p in d.glob("*.toml"))
    return sorted(names)


def load_profile(name_or_path: str | os.PathLike) -> HardwareProfile:
    """Read a hardware profile TOML: a path, or the name of a profile in
    :func:`user_profiles_dir` (first) or among the shipped ones.

    The file has a ``[profile]`` table with ``name``, ``description``, ``source`` and every
    field of :data:`PROFILE_FIELDS` (numbers).

    Raises:
        GnnpipeError: unknown name, unreadable file, or a missing / non-positive field
            (naming the file and the field).
    """
    p = Path(name_or_path)
    if not p.is_file():
        cands = [d / f"{name_or_path}.toml" for d in (user_profiles_dir(), profiles_dir())]
        found = [c for c in cands if c.is_file()]
        if not found:
            raise GnnpipeError(
                f"profile {str(name_or_path)!r}: not a file, not in {user_profiles_dir()}/ and not shipped "
                f"(known: {', '.join(list_profiles()) or 'none'})"
            )
        p = found[0]
    try:
        data = tomllib.loads(p.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise GnnpipeError(f"{p}: unreadable profile ({e})") from None
    tab = data.get("profile")
    if not isinstance(tab, dict):
        raise GnnpipeError(f"{p}: expected a [profile] table")
    kw: dict[str, Any] = {}
    for k in PROFILE_FIELDS:
        if k not in tab:
            raise GnnpipeError(f"{p}: field profile.{k} missing ({PROFILE_FIELDS[k]})")
        v = tab[k]
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v < 0 or (
            v == 0 and k not in ("unit_overhead_s", "intra_latency_s", "inter_latency_s", "base_mem_bytes")
        ):
            raise GnnpipeError(f"{p}: field profile.{k} must be a positive number, got {v!r}")
        kw[k] = v
    for k, (what, default) in PROFILE_OPTIONAL.items():
        if k not in tab:
            continue  # HardwareProfile fills the default
        v = tab[k]
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v < 0 or (
            v == 0 and k in ("cores_per_host", "gather_bytes_s")
        ) or (k.endswith("_slowdown") and v < 1):
            raise GnnpipeError(f"{p}: field profile.{k} must be a positive number, got {v!r} ({what})")
        kw[k] = float(v)
    kw["devices_per_node"] = int(kw["devices_per_node"])
    dev = tab.get("device", "cpu")
    if dev not in ("cpu", "cuda"):
        raise GnnpipeError(f"{p}: field profile.device must be 'cpu' or 'cuda', got {dev!r}")
    return HardwareProfile(
        name=str(tab.get("name", p.stem)), description=str(tab.get("description", "")),
        source=str(tab.get("source", "")), device=dev, **kw,
    )


def profile_toml(profile: HardwareProfile, comments: Sequence[str] = ()) -> str:
    """A profile as TOML text (what ``calibrate`` writes)."""
    lines = [f"# {c}" for c in comments]
    lines.append("[profile]")
    for k in ("name", "description", "source"):
        v = getattr(profile, k).replace("\\", "\\\\").replace('"', '\\"')
        lines.append(f'{k} = "{v}"')
    lines.append(f'device = "{profile.device}"  # gnnpipe-train --device')
    for k, what in PROFILE_FIELDS.items():
        v = getattr(profile, k)
        lines.append(f"{k} = {int(v) if k == 'devices_per_node' else float(v):.6g}  # {what}"
                     if k != "devices_per_node" else f"{k} = {int(v)}  # {what}")
    for k, (what, _) in PROFILE_OPTIONAL.items():
        lines.append(f"{k} = {float(getattr(profile, k)):.6g}  # {what}")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- units
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
                # or of the transformed src rows. (Transform first: half the GEMM is on dst
                # rows, modelled as all on src.)
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
                                heads=heads, drop_values=drop(fin, dropped)))
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


def num_units(spec: ModelSpec) -> int:
    """Units an executor can place on stages: L, or L + 2 with input/output linears."""
    return spec.layers + (0 if spec.model in FEATURE_FIRST_MODELS else 2)


def param_count(stats: GraphStats, spec: ModelSpec) -> int:
    """Trainable parameters of the whole model."""
    return sum(u.params for u in unit_works(stats, spec))


def _unit_time(u: UnitWork, prof: HardwareProfile, frac: float, passes: int, gemm_frac: float | None = None) -> float:
    gf = frac if gemm_frac is None else gemm_frac
    return (u.gemm_flops * gf / prof.gemm_flops_s + u.spmm_ew * frac / prof.spmm_edge_width_s
            + _elem_time(u, prof, frac, frac) + passes * prof.unit_overhead_s)


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


def _elem_time(u: UnitWork, prof: HardwareProfile, frac_rows: float, frac_src: float) -> float:
    """Elementwise seconds of ``u`` (dropout included) when it runs on ``frac_rows`` of the
    graph's rows as destinations and ``frac_src`` as sources: an aggregating unit drops out
    its source rows; a transform on source rows takes all its elementwise work there, else
    only ``elem_src_bytes`` runs over them."""
    if not u.aggregates:
        return u.elem_bytes * frac_rows / prof.mem_bytes_s + dropout_time(u.drop_values * frac_rows, prof)
    src_bytes = u.elem_bytes if u.gemm_on_src else u.elem_src_bytes
    return (((u.elem_bytes - src_bytes) * frac_rows + src_bytes * frac_src) / prof.mem_bytes_s
            + dropout_time(u.drop_values * frac_src, prof))


# ----------------------------------------------------------------------------- prediction
@dataclass
class StageDetail:
    """One rank's (graph mode) or one stage's (pipeline / hybrid, busiest way) share.

    Args:
        stage: stage index (graph mode: 0).
        units: half-open unit range ``(start, end)``.
        compute_s: compute per epoch, including per-pass overheads.
        halo_s: blocking halo exchanges per epoch (graph mode and hybrid).
        params: parameters owned.
        mem_bytes: predicted peak memory of the rank.
        mem: peak memory by category.
    """

    stage: int
    units: tuple[int, int]
    compute_s: float
    halo_s: float
    params: int
    mem_bytes: float
    mem: dict


@dataclass
class Prediction:
    """Predicted cost of one epoch of one configuration.

    Args:
        topology: the :class:`ParallelDims`.
        bytes: bytes per epoch by category (``halo``, ``pipe``, ``allreduce``) and ``total``;
            ``halo``/``pipe`` are exactly :mod:`gnnpipe.partition.volume`'s.
        compute_s: compute of the busiest rank.
        comm_s: exposed communication.
        bubble_s: pipeline fill/drain and stage imbalance.
        optimizer_s: the optimizer step.
        epoch_s: predicted epoch time (sum of the four).
        peak_mem_bytes: the largest rank's peak memory.
        fits: whether ``peak_mem_bytes`` fits the profile's ``mem_bytes``.
        reason: why it does not fit (empty when it does).
        per_stage: :class:`StageDetail` per stage (graph mode: one, the largest part).
        profile: the profile's name.
        notes: caveats (estimated Σ M_p, unimplemented hybrid ...).
    """

    topology: ParallelDims
    bytes: dict
    compute_s: float
    comm_s: float
    bubble_s: float
    optimizer_s: float
    epoch_s: float
    peak_mem_bytes: float
    fits: bool
    reason: str
    per_stage: list[StageDetail]
    profile: str
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        """JSON-ready form."""
        d = asdict(self)
        d["topology"]["world"] = self.topology.world
        d["topology"]["label"] = self.topology.label()
        return d


def _a2a_time(prof: HardwareProfile, ranks: Sequence[int], me: int, max_bytes: float,
              mean_bytes: float | None = None, messages: int = 1) -> float:
    """One all-to-all over ``ranks`` as seen by rank ``me``.

    Every rank receives its halo (the largest ``max_bytes``, on average ``mean_bytes``)
    spread evenly over its peers. Peer links inside a node carry the largest rank's share;
    the node's network link carries all of its ranks' inter-node shares at once (their
    sum, so the mean), and the two run concurrently. Each of ``messages`` rounds pays
    every peer's latency.
    """
    peers = [r for r in ranks if r != me]
    if not peers:
        return 0.0
    mean_bytes = max_bytes if mean_bytes is None else mean_bytes
    node = me // prof.devices_per_node
    n_intra = sum(1 for r in peers if r // prof.devices_per_node == node)
    n_inter = len(peers) - n_intra
    on_node = sum(1 for r in ranks if r // prof.devices_per_node == node)
    t_intra = max_bytes * n_intra / len(peers) / prof.intra_bw_bytes_s
    t_inter = mean_bytes * n_inter / len(peers) * on_node / prof.inter_bw_bytes_s
    lat = messages * (n_intra * prof.intra_latency_s + n_inter * prof.inter_latency_s)
    return max(t_intra, t_inter) + lat


def _allreduce_time(prof: HardwareProfile, ranks: Sequence[int], nbytes: float) -> float:
    """Ring all-reduce of ``nbytes`` over ``ranks``."""
    g = len(ranks)
    if g <= 1:
        return 0.0
    nodes: dict[int, int] = {}
    for r in ranks:
        nodes[r // prof.devices_per_node] = nodes.get(r // prof.devices_per_node, 0) + 1
    if len(nodes) > 1:
        bw = prof.inter_bw_bytes_s / max(nodes.values())
        lat = prof.inter_latency_s
    else:
        bw, lat = prof.intra_bw_bytes_s, prof.intra_latency_s
    return 2.0 * (g - 1) / g * nbytes / bw + 2.0 * (g - 1) * lat


def _feature_bytes(stats: GraphStats, rows: float) -> float:
    if stats.sparse_nnz is not None:
        return 12.0 * stats.sparse_nnz * rows / stats.num_nodes + 8.0 * rows
    return 4.0 * rows * stats.num_features


# Memory terms: what the executors hold, per rank (``s`` = 4-byte values throughout).
#: Bytes per value (of width ``d``) over SOURCE rows that a hidden aggregating unit
#: (``d → d``, dense input) keeps for backward: the bit-packed dropout mask (1/8); gat also
#: its dropped-out input and transformed rows (4 + 4); res+ also its LayerNorm input (4)
#: and ReLU sign bits (1/8), plus 8 bytes per row of LayerNorm statistics. gcn and sage
#: aggregate before their transform, so it keeps no source rows (:func:`_saved_bytes` has
#: the general per-unit formula; tests check it against ``saved_tensors_hooks``).
SAVED_SRC = {"gcn": 0.125, "sage": 0.125, "gat": 8.125, "gcnii": 0.125, "resgcn+": 4.25}
#: Bytes per value over DESTINATION rows of the same units: the aggregate its transform
#: keeps (4; sage also its root term's input, 4; gcnii the mixed input of its addmm) and
#: the ReLU's sign bits (1/8); gat its transformed dst rows and the ELU input (4 + 4),
#: plus ``4·heads·(4·(E/N + 1) + 1) + 8·(E/N + 1)`` bytes per row of per-edge scores.
SAVED_DST = {"gcn": 4.125, "sage": 8.125, "gat": 8.0, "gcnii": 4.125, "resgcn+": 4.0}
#: Bytes per value of a bit-packed mask (dropout keep-mask, ReLU sign).
_BIT = 0.125


def _dataset_bytes(stats: GraphStats, frac: float = 1.0, feature_rows: float | None = None) -> float:
    """The dataset as a rank holds it: int64 CSR, features, int64 labels, 3 bool masks, and
    the plan's int64 permutation and inverse. ``frac``: the share of its rows the rank
    touches (mapped pages count in RSS once read; a generated graph counts whole);
    ``feature_rows``: the feature rows it reads, when not that share (a pipeline stage
    after the first reads none)."""
    N, E = stats.num_nodes, stats.num_edges
    feats = _feature_bytes(stats, frac * N if feature_rows is None else feature_rows)
    return frac * (8.0 * (N + 1 + E) + 11.0 * N) + feats + 16.0 * N


def _block_bytes(dst: float, src: float, edges: float) -> float:
    """A :class:`gnnpipe.models.block.Block` with its cached normalised CSR and transpose:
    indptr/indices and the transpose's (8 per row/entry), values of both (4 per entry),
    int64 ids and float32 degrees of src (12) and dst rows (+ dst_in_src, self weight: 28)."""
    return 8.0 * (dst + 1) + 8.0 * (src + 1) + 24.0 * edges + 12.0 * src + 28.0 * dst


def _saved_bytes(stats: GraphStats, model: str, u, src: float, dst: float) -> float:
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
        return _feature_bytes(stats, rows) if u.reads_features else s * rows * i

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


def _sync_time(prof: HardwareProfile, world: int, between_s: float = math.inf) -> float:
    """Fixed cost of one blocking collective among ``world`` ranks: software overhead, plus,
    when a node runs more ranks than it has cores, the wait for peers the scheduler has
    descheduled: ``oversub_wait_s``, but never more than the (slowed) compute a rank does
    between two collectives (a peer cannot be further behind than that)."""
    oversub = prof.ranks_on_host(world) > prof.cores_per_host
    return prof.coll_overhead_s + (min(prof.oversub_wait_s, between_s) if oversub else 0.0)


def _group_sync(prof: HardwareProfile, world: int, group: int, between_s: float = math.inf) -> float:
    """:func:`_sync_time` of a collective among ``group`` of the ``world`` ranks: the wait
    for descheduled peers applies only when the group itself outnumbers the cores (then
    some member is always off a core when the others arrive); a group that fits the cores
    can run at once (the hybrid's per-stage exchanges between 2 ways on 2 cores)."""
    if group <= prof.cores_per_host:
        return prof.coll_overhead_s
    return _sync_time(prof, world, between_s)


def _chunk_nbrs(pi: PartInfo, C: int, notes: list[str]) -> float:
    """The largest part's Σ_k out-of-chunk neighbour rows (from the plan, else estimated)."""
    if C <= 1 and pi.parts == 1:
        return 0.0
    if C in pi.chunk_nbrs:
        return float(pi.chunk_nbrs[C])
    # Estimate: a chunk of n/C rows has at most every other row of the part, plus the part's
    # halo, as neighbours, and at most one per cut edge (about (1 - 1/C) of its edges).
    est = min(C * (pi.max_nodes + pi.max_halo) - pi.max_nodes,
              pi.max_edges * (1.0 - 1.0 / C) + C * pi.max_halo)
    notes.append(f"out-of-chunk neighbours for {pi.parts} part(s) x {C} chunks estimated ({est:,.0f} rows)")
    return max(est, 0.0)


def _chunk_halo(pi: PartInfo, C: int, notes: list[str]) -> int:
    """Σ_w Σ_k M_{w,k} for ``C`` chunks per way (from the plan; else Σ_w M_w, a lower bound)."""
    if C in pi.chunk_halo:
        return int(pi.chunk_halo[C])
    if C > 1:
        notes.append(f"per-chunk halo for {pi.parts} ways x {C} chunks unknown: bytes use sum M_w "
                     "(a lower bound; pass chunks= to graph_stats_from_graph)")
    return pi.sum_m


def _opt_time(prof: HardwareProfile, params: int) -> float:
    # Adam reads and writes parameter, gradient and two moments.
    return 8.0 * 4.0 * params / prof.mem_bytes_s


def predict(stats: GraphStats, spec: ModelSpec, topo: ParallelDims, profile: HardwareProfile) -> Prediction:
    """Predict one epoch of training ``spec`` on ``stats`` with ``topo`` on ``profile``.

    Args:
        stats: the graph (with :class:`PartInfo` for ``topo.ways`` parts when ways > 1).
        spec: the model.
        topo: the topology.
        profile: the hardware.

    Returns:
        :class:`Prediction`.

    Raises:
        GnnpipeError: an infeasible topology (fewer units than stages, more parts than
            nodes) or missing partition facts.
    """
    units = unit_works(stats, spec)
    if len(units) < topo.stages:
        raise GnnpipeError(
            f"{topo.label()}: {spec.model} with {spec.layers} layers has {len(units)} units, "
            f"fewer than {topo.stages} stages"
        )
    if topo.ways > stats.num_nodes or topo.ways * topo.chunks > stats.num_nodes:
        raise GnnpipeError(f"{topo.label()}: more parts or chunks than the {stats.num_nodes} nodes")
    if topo.mode == "graph":
        return _predict_graph(stats, spec, topo, profile, units)
    return _predict_pipeline(stats, spec, topo, profile, units)


def _notes(stats: GraphStats, topo: ParallelDims) -> list[str]:
    notes = []
    if topo.ways > 1:
        src = stats.part(topo.ways).source
        if src != "metis":
            notes.append(f"sum M_p for {topo.ways} parts {src}")
    return notes


def _fit(prof: HardwareProfile, peak: float, who: str, mem: dict) -> tuple[bool, str]:
    if peak <= prof.mem_bytes:
        return True, ""
    top = sorted(mem.items(), key=lambda kv: -kv[1])[:3]
    parts = ", ".join(f"{k} {v / 2**30:.2f}" for k, v in top)
    return False, (f"{who} needs {peak / 2**30:.2f} GiB > {prof.mem_bytes / 2**30:.2f} GiB per device "
                   f"({parts} GiB)")


def _predict_graph(stats, spec, topo, prof, units) -> Prediction:
    P = topo.ways
    pi = stats.part(P)
    s, d = spec.bytes_per_value, spec.hidden
    N = stats.num_nodes
    frac_rows = pi.max_nodes / N
    frac_src = (pi.max_nodes + pi.max_halo) / N
    frac_edges = pi.max_edges / max(stats.num_edges, 1)
    slow = prof.slowdown(P)
    compute = 0.0
    for u in units:
        # Aggregation work follows the part's edges; row work its rows (+ halo rows for
        # transforms on h_src).
        compute += (u.gemm_flops * (frac_src if u.gemm_on_src else frac_rows) / prof.gemm_flops_s
                    + u.spmm_ew * (frac_edges if u.aggregates else frac_rows) / prof.spmm_edge_width_s
                    + _elem_time(u, prof, frac_rows, frac_src)
                    + 2 * prof.unit_overhead_s)
    n_x = volume.exchanged_layers(spec.model, spec.layers)
    if P > 1:
        # Per exchanged layer: gather the send rows and concatenate [own | halo] forward;
        # scatter-add the halo's gradient home backward.
        compute += n_x * s * d * (2.0 * pi.max_halo + pi.max_nodes + 2.0 * pi.max_halo) / prof.gather_bytes_s
    compute *= slow
    ranks = list(range(P))
    # The busiest rank sends its halo-sized share; receive and send sizes are symmetric in
    # total, and the all-to-all waits for the slowest pair; each blocking collective also
    # pays its software cost and, with more ranks than cores, the wait for peers the
    # scheduler has descheduled.
    n_coll = 2 * n_x + 1 if P > 1 else 1  # halo exchanges both ways and the all-reduce
    sync = _group_sync(prof, P, P, compute / n_coll)
    per_exchange = _a2a_time(prof, ranks, 0, pi.max_halo * d * s, pi.sum_m / P * d * s) + sync if P > 1 else 0.0
    halo_s = 2 * n_x * per_exchange
    params = param_count(stats, spec)
    ar_s = _allreduce_time(prof, ranks, params * 4.0) + (sync if P > 1 else 0.0)
    halo_bytes = volume.graph_parallel_bytes(pi.sum_m, stats.num_features, spec.layers, d, s, spec.model, "ours")
    ar_bytes = params * 4 * P if P > 1 else 0
    opt = _opt_time(prof, params) * slow
    # Memory of the largest part.
    rows, src_rows = pi.max_nodes, pi.max_nodes + pi.max_halo
    act = sum(_saved_bytes(stats, spec.model, u, src_rows, rows) for u in units)
    mem = {
        "parameters+optimizer": ADAM_COPIES * 4.0 * params + 4.0 * params,  # + flat all-reduce buffer
        # the rank reads its own rows of the dataset (all of it when generated in memory)
        "dataset": _dataset_bytes(stats, rows / N),
        "structure": _block_bytes(rows, src_rows, pi.max_edges),
        "features": _feature_bytes(stats, src_rows),
        "activations": act,
        # backward's transient gradients of [own | halo] rows and of the transform
        "backward": 2.0 * s * src_rows * d,
        "halo buffers": 2.0 * 2.0 * pi.max_halo * d * s,
        "base": prof.base_mem_bytes,
    }
    peak = sum(mem.values())
    fits, reason = _fit(prof, peak, f"rank 0 of {P}", mem)
    epoch = compute + halo_s + ar_s + opt
    st = StageDetail(0, (0, len(units)), compute, halo_s, params, peak, mem)
    return Prediction(
        topology=topo,
        bytes={"halo": halo_bytes, "pipe": 0, "allreduce": ar_bytes, "total": halo_bytes + ar_bytes},
        compute_s=compute, comm_s=halo_s + ar_s, bubble_s=0.0, optimizer_s=opt, epoch_s=epoch,
        peak_mem_bytes=peak, fits=fits, reason=reason, per_stage=[st], profile=prof.name,
        notes=_notes(stats, topo),
    )


def stage_blocks(stats: GraphStats, spec: ModelSpec, stages: int) -> list[tuple[int, int]]:
    """The executor's layer assignment: :func:`assign_layers` over :func:`layer_costs`."""
    costs = layer_costs(spec.model, spec.layers, stats.num_features, spec.hidden, stats.num_nodes,
                        stats.num_edges, stats.num_classes, sparse_nnz=stats.sparse_nnz)
    return assign_layers(costs, stages)


def _predict_pipeline(stats, spec, topo, prof, units) -> Prediction:
    D, S, C = topo.ways, topo.stages, topo.chunks
    s, d = spec.bytes_per_value, spec.hidden
    N, E = stats.num_nodes, stats.num_edges
    pi = stats.part(D)
    # The busiest way: its nodes, its edges (with neighbours in other ways), its halo.
    rows = pi.max_nodes
    frac_rows = rows / N
    frac_edges = pi.max_edges / max(E, 1)
    blocks = stage_blocks(stats, spec, S)
    width = d * (2 if spec.h0 else 1)  # h0 travels beside the activations
    n_x_first = 0 if spec.model in FEATURE_FIRST_MODELS else 1  # unit 0 of gcn reads features
    stages: list[StageDetail] = []
    T, halo_T = [], []
    ranks_of_stage = lambda st: [w * S + st for w in range(D)]  # noqa: E731
    notes_v: list[str] = []
    slow = prof.slowdown(D * S)
    # Rows a stage touches per aggregating unit and epoch: every chunk's own rows plus its
    # out-of-chunk neighbours (history rows; in the hybrid also the other ways' rows).
    nbrs = _chunk_nbrs(pi, C, notes_v)
    frac_src = (rows + nbrs) / N
    chunk_halo = _chunk_halo(pi, C, notes_v) if D > 1 else 0
    for st, (a, b) in enumerate(blocks):
        comp = 0.0
        halo = 0.0
        n_coll = 0  # blocking collectives of this stage per epoch (hybrid halo exchanges)
        params = 0
        hist = act = 0.0
        for j in range(a, b):
            u = units[j]
            # Transforms on h_src (gcn, gat) run on every chunk's own + neighbour rows.
            on_src = u.gemm_on_src and u.aggregates
            comp += _unit_time(u, prof, 0.0, 2 * C) + (
                u.gemm_flops * (frac_src if on_src else frac_rows) / prof.gemm_flops_s
                + u.spmm_ew * (frac_edges if u.aggregates else frac_rows) / prof.spmm_edge_width_s
                + _elem_time(u, prof, frac_rows, frac_src))
            params += u.params
            if u.aggregates and not u.reads_features:
                # History path per chunk: write the chunk's rows, gather its neighbour rows,
                # concatenate; backward: scatter-add their gradients (and read the chunk's).
                comp += (2 * C * prof.chunk_overhead_s
                         + s * u.in_dim * (2.0 * rows + 3.0 * nbrs) / prof.gather_bytes_s)
                # Two buffers of the way's rows at any time: history + cross-chunk gradients
                # before the first snapshot, history (reused for the gradients in backward)
                # + snapshot after it; in ``history_bytes`` per value (bfloat16: 2).
                hist += (2.0 if C > 1 else 0.0) * spec.history_bytes * (N if D == 1 else rows) * u.in_dim
                if D > 1:
                    # Per chunk, forward rows and backward gradients with the other ways:
                    # 2·C blocking all-to-alls per unit, per-chunk halos (Σ_k M_{w,k}).
                    halo += 2 * _a2a_time(prof, ranks_of_stage(st), st, chunk_halo / D * u.in_dim * s,
                                          chunk_halo / D * u.in_dim * s, messages=C)
                    n_coll += 2 * C
                    comp += 4.0 * s * u.in_dim * chunk_halo / D / prof.gather_bytes_s
            # every chunk's saved tensors live until the flush: own + neighbour rows
            act += _saved_bytes(stats, spec.model, u, rows + nbrs if C > 1 else rows + pi.max_halo, rows)
        w_in = units[a].in_dim + (d if spec.h0 and a > 0 else 0)
        w_out = units[b - 1].out_dim + (d if spec.h0 and st < S - 1 else 0)
        # The first stage reads features: every row with one way, its part and its chunks'
        # neighbours in a hybrid way; the other stages none.
        x_rows = (N if D == 1 else min(N, rows + nbrs)) if a == 0 else 0.0
        mem = {
            "parameters+optimizer": ADAM_COPIES * 4.0 * params + (4.0 * params if D > 1 else 0.0),
            # relabelling reads the whole graph structure (mapped pages); features as read
            "dataset": _dataset_bytes(stats, 1.0, feature_rows=x_rows),
            # the way's chunk blocks (evaluation runs over them too)
            "structure": _block_bytes(rows, rows + nbrs, pi.max_edges) + 8.0 * nbrs,
            # the first stage's gathered feature rows (sparse: per-chunk copies)
            "features": (4.0 * x_rows * stats.num_features if stats.sparse_nnz is None
                         else _feature_bytes(stats, 2.0 * rows + nbrs)) if a == 0 else 0.0,
            "activations": act,
            "history": hist,
            # At the turn from forward to backward the forward receives are consumed and
            # freed, sends are freed as they complete, and the gradient receives from the
            # next stage (posted at the turn) hold the way's rows once.
            "pipe buffers": s * rows * (w_out if st < S - 1 else 0),
            "backward": 2.0 * s * (rows + nbrs) / C * d,
            "base": prof.base_mem_bytes,
        }
        comp *= slow
        if n_coll:
            halo += n_coll * _group_sync(prof, D * S, D, comp / n_coll)
        stages.append(StageDetail(st, (a, b), comp, halo, params, sum(mem.values()), mem))
        T.append(comp)
        halo_T.append(halo)
    _ = n_x_first
    r_host, c_host = prof.ranks_on_host(D * S), prof.cores_per_host
    if r_host > c_host and max(T) > 0:
        # Time-shared cores and unequal stages: a stage blocked on a receive gives its core
        # away, so the busiest stage gets more than the fair share c/r — the host's demand
        # (r ranks x the mean stage) over c cores, never less than its own work on one core.
        relief = max(c_host / r_host, sum(T) / len(T) / max(T))
        T = [t * relief for t in T]
        stages = [dataclasses.replace(x, compute_s=x.compute_s * relief) for x in stages]
    # Per-chunk message time over each boundary (the busiest way's, rank = way·S + stage).
    t_b = []
    for b in range(S - 1):
        bw, lat = prof.link(b, b + 1)
        # Boundaries of different ways run at once; those crossing nodes share the link.
        if prof.link(b, b + 1)[0] == prof.inter_bw_bytes_s and b // prof.devices_per_node != (b + 1) // prof.devices_per_node:
            sharing = sum(1 for w in range(D) if (w * S + b) // prof.devices_per_node != (w * S + b + 1) // prof.devices_per_node)
            bw = bw / max(sharing, 1)
        t_b.append(lat + prof.coll_overhead_s + (rows / C) * width * s / bw)
    busy = [t + h for t, h in zip(T, halo_T)]
    f = [x / 3.0 / C for x in busy]
    bk = [2.0 * x / 3.0 / C for x in busy]
    tmax = max(t_b) if t_b else 0.0
    fill = sum(busy) / C + 2.0 * sum(t_b)
    steady = (C - 1) * (max(max(f), tmax) + max(max(bk), tmax))
    pipe_epoch = fill + steady
    ranks_all = list(range(D * S))
    params_total = sum(x.params for x in stages)
    ar_s = max((_allreduce_time(prof, ranks_of_stage(st), x.params * 4.0) + _group_sync(prof, D * S, D, x.compute_s)
                for st, x in enumerate(stages)), default=0.0) if D > 1 else 0.0
    opt = max(_opt_time(prof, x.params) for x in stages) * slow
    i_max = max(range(S), key=lambda i: busy[i])
    compute = T[i_max]
    exposed_pipe = 2.0 * sum(t_b) + (C - 1) * (max(0.0, tmax - max(f)) + max(0.0, tmax - max(bk)))
    comm = exposed_pipe + halo_T[i_max] + ar_s
    bubble = max(0.0, pipe_epoch - compute - halo_T[i_max] - exposed_pipe)
    epoch = compute + comm + bubble + opt
    _ = ranks_all
    pipe_bytes = volume.pipeline_bytes(N, d, S, s, h0=spec.h0)
    halo_bytes = volume.hybrid_bytes(N, chunk_halo, stats.num_features, spec.layers, d, S, D, s,
                                     spec.model, h0=spec.h0) - pipe_bytes
    if C > 1:  # stale hybrid halo rows and their gradients travel in the history's dtype
        halo_bytes = halo_bytes * spec.history_bytes // s
    ar_bytes = params_total * 4 * D if D > 1 else 0
    worst = max(stages, key=lambda x: x.mem_bytes)
    fits, reason = _fit(prof, worst.mem_bytes, f"stage {worst.stage} of {S}", worst.mem)
    notes = _notes(stats, topo) + notes_v
    return Prediction(
        topology=topo,
        bytes={"halo": halo_bytes, "pipe": pipe_bytes, "allreduce": ar_bytes,
               "total": halo_bytes + pipe_bytes + ar_bytes},
        compute_s=compute, comm_s=comm, bubble_s=bubble, optimizer_s=opt, epoch_s=epoch,
        peak_mem_bytes=worst.mem_bytes, fits=fits, reason=reason, per_stage=stages, profile=prof.name,
        notes=notes,
    )


# ----------------------------------------------------------------------------- planner
def feasible_topologies(world: int, spec: ModelSpec, num_nodes: int,
                        chunk_factors: Sequence[int] = CHUNK_FACTORS) -> list[ParallelDims]:
    """Every feasible (mode, D, S, C) for ``world`` ranks.

    Graph: P = world. Pipeline: S = world, needs at least S units. Hybrid: D·S = world with
    D ≥ 2 and S ≥ 2 (S ≤ units). Chunks per way C = f·S for ``f`` in ``chunk_factors``,
    at most the nodes per way.
    """
    if world < 1:
        raise GnnpipeError(f"world: expected at least 1 rank, got {world}")
    n_units = num_units(spec)
    out: list[ParallelDims] = []
    if world <= num_nodes:
        out.append(ParallelDims("graph", ways=world))

    def chunked(mode: str, D: int, S: int) -> None:
        for c in sorted({f * S for f in chunk_factors}):
            if c * D <= num_nodes:
                out.append(ParallelDims(mode, ways=D, stages=S, chunks=c))

    if world >= 2 and n_units >= world:
        chunked("pipeline", 1, world)
    for D in range(2, world // 2 + 1):
        if world % D == 0:
            S = world // D
            if S >= 2 and S <= n_units:
                chunked("hybrid", D, S)
    return out


def rank_configs(stats: GraphStats, spec: ModelSpec, world: int, profile: HardwareProfile,
                 chunk_factors: Sequence[int] = CHUNK_FACTORS, estimate: bool = True,
                 estimate_nodes: int = 20000, seed: int = 0,
                 progress: Callable[[str], None] | None = None) -> list[Prediction]:
    """Predict every feasible configuration and rank them.

    Missing partition facts (Σ M_p for P = world parts or D ways) are estimated from a
    synthetic graph (:func:`estimate_part_info`) when ``estimate``; ``progress`` (if given)
    receives one line per partition estimated.

    Returns:
        predictions, those that fit memory first, each group by predicted epoch time.
    """
    topos = feasible_topologies(world, spec, stats.num_nodes, chunk_factors)
    need = sorted({t.ways for t in topos if t.ways > 1 and t.ways not in stats.parts})
    # Per-chunk facts (out-of-chunk neighbours, per-chunk halos) the stats lack.
    need_chunks: dict[int, list[int]] = {}
    for t in topos:
        if t.mode != "graph" and (t.ways not in stats.parts or t.chunks not in stats.parts[t.ways].chunk_nbrs):
            need_chunks.setdefault(t.ways, []).append(t.chunks)
    if need or need_chunks:
        if not estimate and need:
            raise GnnpipeError(f"graph stats for {stats.name!r}: no partition facts for {need} parts")
        if estimate:
            est = estimate_part_info(stats.num_nodes, stats.num_edges, need, sample_nodes=estimate_nodes,
                                     seed=seed, chunks=need_chunks, progress=progress)
            merged = []
            for e in est:
                have = stats.parts.get(e.parts) if e.parts > 1 or 1 in stats.parts else None
                if have is None:
                    merged.append(e)
                else:  # keep the real partition's facts, add the estimated chunk facts
                    merged.append(replace(have, chunk_halo={**e.chunk_halo, **have.chunk_halo},
                                          chunk_nbrs={**e.chunk_nbrs, **have.chunk_nbrs},
                                          source=have.source + " (chunk facts estimated)"))
            stats = stats.with_parts(merged)
    preds = [predict(stats, spec, t, profile) for t in topos]
    preds.sort(key=lambda p: (not p.fits, p.epoch_s))
    return preds


def train_command(pred: Prediction, dataset: str, spec: ModelSpec, device: str = "cpu",
                  synth: Mapping[str, Any] | None = None) -> str:
    """The ``gnnpipe-train`` command line for a prediction.

    Args:
        pred: the chosen configuration.
        dataset: ``--dataset`` (a prepared name, or ``sbm`` / ``rmat``).
        spec: the planned model.
        device: ``--device`` (the profile's; only ``cuda`` is written, ``cpu`` is the default).
        synth: ``TrainConfig`` ``synth_*`` fields of a built-in synthetic graph (e.g.
            ``{"synth_nodes": 1000000, "synth_degree": 20.0}``), so the command trains the
            graph that was planned and not the 20k-node default.

    Returns:
        one shell line.
    """
    t = pred.topology
    base = f"mpirun -np {t.world} gnnpipe-train --dataset {dataset}"
    for k, v in (synth or {}).items():
        base += f" --{k.replace('_', '-')} {v}"
    base += f" --model {spec.model} --layers {spec.layers} --hidden {spec.hidden}"
    if spec.model == "gat":
        base += f" --heads {spec.heads}"
    if device != "cpu":
        base += f" --device {device}"
    if t.mode == "graph":
        return f"{base} --mode graph --parts {t.ways}"
    dtype = " --history-dtype bfloat16" if spec.history_bytes == 2 else ""
    return f"{base} --mode {t.mode} --ways {t.ways} --stages {t.stages} --chunks {t.chunks}{dtype}"


# ----------------------------------------------------------------------------- Σ M_p
def chunk_facts(graph, parts: int, chunks: int, seed: int = 0, method: str = "metis") -> tuple[int, int]:
    """(Σ_w Σ_k M_{w,k}, the largest part's Σ_k |out-of-chunk neighbours of k|) of the plan
    ``gnnpipe-train`` builds for ``parts`` ways and ``chunks`` chunks per way (same method
    and seed): the hybrid's per-chunk halo and the rows a stage gathers from history."""
    from gnnpipe.partition.plan import build_plan

    return chunk_facts_of_plan(graph, build_plan(graph, parts, chunks, method=method, seed=seed))


def chunk_facts_of_plan(graph, plan) -> tuple[int, int]:
    """:func:`chunk_facts` of an existing plan of ``graph`` (e.g. one on disk)."""
    import numpy as np

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
    import numpy as np

    from gnnpipe.partition.plan import build_plan
    from gnnpipe.partition.stats import group_cut_and_halo

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
    from gnnpipe.data import synthetic
    from gnnpipe.data.graph import Graph  # noqa: F401  (the generators return Graphs)

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
