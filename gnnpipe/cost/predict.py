"""The pure prediction: bytes, time and memory of one epoch of one layout.

:func:`predict` (graph statistics, a model shape, a :class:`gnnpipe.dims.ParallelDims` and
a hardware profile) → :class:`Prediction`. Nothing here communicates, reads the clock or
partitions a graph: the partition facts come in :class:`gnnpipe.cost.inputs.PartInfo`
(measured or estimated by :mod:`gnnpipe.cost.graphstats`).

**Bytes** are exactly :mod:`gnnpipe.partition.volume`'s formulas (the ones the executors'
byte counters are tested against); the weight all-reduce adds the parameter bytes once
per rank in the group, as the communicator counts it.

**Time**: per unit :mod:`gnnpipe.cost.units`. **Ranks sharing cores**: every rank's
compute is multiplied by :meth:`HardwareProfile.slowdown`: ``shared_slowdown`` when every
core of a node is busy, and ``shared_slowdown · oversub_slowdown · ranks/cores`` when a
node runs more ranks than its ``cores_per_host`` (4 ranks on this 2-core machine: each gets
half a core). A blocking collective costs ``coll_overhead_s`` plus, when its group
outnumbers the cores (some member is always descheduled), ``oversub_wait_s`` (at most the
compute between two collectives).

**Graph parallelism**: the largest part computes every unit on its rows (transforms on
its rows plus halo rows for gcn/gat, which transform ``h_src``; sage transforming first
runs its neighbour transform there and its root transform on its rows), gathers its send rows
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
their source rows, so their GEMMs run on ``rows + Σ_k |N(k)|`` rows, except the first
unit's on dense features, which the stage transforms once per epoch over its feature rows
(:func:`epoch_input_transform`) and whose rows each chunk gathers. With
``t_b`` the per-chunk message time over boundary ``b`` (latency + bytes / bandwidth,
:func:`boundary_times`), :func:`pipeline_span` gives::

    epoch = Σ_s T_s/C + 2·Σ_b t_b + (C−1)·(max(f_max, t_max) + max(b_max, t_max)) + opt

so with equal stages and free links the bubble is ``(S−1)/(C+S−1)`` of the epoch. This is
the makespan of the lowered GNNPipe schedule (:func:`gnnpipe.schedule.simulate`) with the
same per-action costs, exactly: forwards and backwards are each a flow shop of ``C``
identical jobs over the stages and the links between them, whose makespan is the sum of
the machines' times plus ``C−1`` times the slowest (``tests/test_plan_time.py`` checks it).
Reported: ``compute_s`` = the busiest stage's ``T_s``, ``comm_s`` = exposed transfers
(fill/drain messages, links slower than compute, hybrid halo exchanges, all-reduce),
``bubble_s`` = the rest (fill/drain and imbalance), so ``epoch_s`` is their sum plus the
optimizer step.

**Hybrid**: ``D`` pipelines over METIS ways; each stage also exchanges its layers' halo
rows with the same stage of the other ways (blocking, per chunk, ``C·(D−1)`` messages per
layer and direction; each boundary row once per layer and direction, so Σ_w M_w rows in
all, graph parallelism's halo) and all-reduces its weights across ways.

**Wire format** (``ModelSpec.wire``, ``--wire``): every message time counts the wire's
bytes per row (:func:`gnnpipe.partition.volume.wire_row_bytes`: ``s·w`` in float32,
``row_bytes(w, wire)`` otherwise, header included), and the ranks' compute includes the
codec: encode on the sender plus decode on the receiver at
:data:`gnnpipe.cost.units.WIRE_CODEC_BYTES_S` (measured on this CPU; ``Prediction.codec_s``
says how much of ``compute_s`` it is). Graph mode: per exchanged layer and direction, the
busiest part's halo rows; pipeline: per boundary next to a stage, the way's rows once each
way; hybrid: also the stage's rows between ways, per aggregating unit and direction. In
float32 the codec is free and every figure is what it was before the wire existed.

**Memory**: :mod:`gnnpipe.cost.memory`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import asdict, dataclass, field, replace
from typing import Sequence

from gnnpipe._base import GnnpipeError
from gnnpipe.cost.inputs import GraphStats, ModelSpec, PartInfo
from gnnpipe.cost.memory import ADAM_COPIES, block_bytes, dataset_bytes, feature_bytes, saved_bytes
from gnnpipe.cost.profile import HardwareProfile, load_profile, profiles_dir
from gnnpipe.cost.units import (codec_time, dropout_time, elem_time, gemm_rows_frac, param_count, unit_time,
                                unit_works)
from gnnpipe.dims import ParallelDims
from gnnpipe.partition import volume
from gnnpipe.partition.layers import assign_layers, layer_costs


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
        bytes: bytes per epoch by category and ``total``: ``halo`` (graph parallelism's,
            the communicator's ``halo_fwd`` + ``halo_bwd``), ``way`` (the hybrid's way link,
            ``way_fwd`` + ``way_bwd``), ``pipe`` (``pipe_act`` + ``pipe_grad``),
            ``input`` (``--shared-input``: ``input_fwd`` + ``input_bwd``), ``allreduce``;
            ``halo``/``way``/``pipe``/``input`` are exactly
            :mod:`gnnpipe.partition.volume`'s.
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
        wire: the wire format of the training messages (``ModelSpec.wire``).
        codec_s: the busiest rank's (stage's) encode + decode time per epoch, included in
            ``compute_s`` (0 in float32).
        boundary_sample: the fraction of boundary rows sent (``ModelSpec.boundary_sample``):
            graph mode's halo, the stale hybrid's rows between ways.
        shared_input: the first layer's transform shared by every stage of a way
            (``ModelSpec.shared_input`` where :func:`shares_input`; its bytes are ``input``).
        local_carry: GCNII's ``h0`` computed on every stage (``ModelSpec.local_carry`` where
            :func:`carries_locally`; the input layer's weights and gradient shares are ``input``).
        exact_every: ``N`` of ``--exact-every``: the figures are the mean epoch of a cycle of
            ``N − 1`` stale epochs and one exact (:func:`with_exact_epochs`); 0: every epoch
            as the topology says.
        exact_epoch_s: with ``exact_every``, the predicted exact epoch alone.
        accuracy_cost: expected accuracy loss of ``wire`` in points, as the planner's table
            gives it (:mod:`gnnpipe.cost.wire_accuracy`); 0 from :func:`predict`.
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
    wire: str = "float32"
    codec_s: float = 0.0
    accuracy_cost: float = 0.0
    boundary_sample: float = 1.0
    shared_input: bool = False
    local_carry: bool = False
    exact_every: int = 0
    exact_epoch_s: float = 0.0

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
    sum, so the mean), and the two run concurrently, the network's at ``a2a_factor`` times
    point-to-point's time (measured by ``gnnpipe-plan calibrate --network``; 1 by default).
    Each of ``messages`` rounds pays every peer's latency.
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
    t_inter = mean_bytes * n_inter / len(peers) * on_node / prof.inter_bw_bytes_s * prof.a2a_factor
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
        notes.append(f"per-chunk halo for {pi.parts} ways x {C} chunks unknown: its gather time uses sum M_w "
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


def with_exact_epochs(stale: Prediction, exact: Prediction, every: int, profile: HardwareProfile) -> Prediction:
    """``--exact-every N``: the mean epoch of ``N − 1`` epochs as ``stale`` predicts and one as
    ``exact`` does (the same layout over one chunk per way: stage.py rule 8), for times and
    bytes. Memory: an exact epoch runs a second stage over the same units, so during it a
    stage holds the exact stage's peak plus the stale stage's history and chunk blocks,
    which live for the whole run; the peak is the larger of that and the stale epoch's.

    Raises:
        GnnpipeError: ``every`` < 2 (1 is ``--exact``), or predictions of different layouts.
    """
    if every < 2:
        raise GnnpipeError(f"--exact-every {every}: the blend needs N >= 2 (every epoch exact is --exact)")
    a, b = stale.topology, exact.topology
    if (a.mode, a.ways, a.stages) != (b.mode, b.ways, b.stages) or b.chunks != 1 or a.mode == "graph":
        raise GnnpipeError(f"internal: exact epochs of {a.label()} predicted as {b.label()}")
    k = (every - 1) / every

    def mean(x: float, y: float) -> float:
        return k * x + (1 - k) * y

    peak, fits, reason = stale.peak_mem_bytes, stale.fits, stale.reason
    for st, ex in zip(stale.per_stage, exact.per_stage):
        kept = {k: st.mem.get(k, 0.0) for k in ("history", "structure")}
        during = ex.mem_bytes + sum(kept.values())
        if during > peak:
            peak = during
            ok, why = _fit(profile, during, f"stage {st.stage}'s exact epoch",
                           {**ex.mem, **{f"stale {k}": v for k, v in kept.items()}})
            fits, reason = fits and ok, reason or why
    return replace(
        stale, bytes={c: mean(v, exact.bytes.get(c, 0)) for c, v in stale.bytes.items()},
        compute_s=mean(stale.compute_s, exact.compute_s), comm_s=mean(stale.comm_s, exact.comm_s),
        bubble_s=mean(stale.bubble_s, exact.bubble_s), optimizer_s=mean(stale.optimizer_s, exact.optimizer_s),
        epoch_s=mean(stale.epoch_s, exact.epoch_s), codec_s=mean(stale.codec_s, exact.codec_s),
        peak_mem_bytes=peak, fits=fits, reason=reason,
        notes=[*stale.notes, f"exact every {every}: a pipeline or hybrid row is the mean epoch of {every - 1} stale "
               "epoch(s) and one exact (one chunk per way; exact_epoch_s in --json)"],
        exact_every=every, exact_epoch_s=exact.epoch_s)


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
        compute += (u.gemm_flops * gemm_rows_frac(u, frac_rows, frac_src) / prof.gemm_flops_s
                    + u.spmm_ew * (frac_edges if u.aggregates else frac_rows) / prof.spmm_edge_width_s
                    + elem_time(u, prof, frac_rows, frac_src)
                    + 2 * prof.unit_overhead_s)
    n_x = volume.exchanged_layers(spec.model, spec.layers)
    rb = volume.wire_row_bytes(d, s, spec.wire)  # bytes of one halo row on the wire
    # Boundary sampling sends a fraction p of every pair's rows: Σ ⌊p·n⌋ over the pairs,
    # which the statistics (Σ M_p, the largest M_p) give as p times theirs, up to the
    # rounding of each pair (the volume formula's exact count needs the pairs).
    p = spec.boundary_sample
    sent_max, sent_sum = pi.max_halo * p, pi.sum_m * p
    codec = 0.0
    if P > 1:
        # Per exchanged layer: gather the send rows and concatenate [own | halo] forward;
        # scatter-add the halo's gradient home backward.
        compute += n_x * s * d * (2.0 * sent_max + pi.max_nodes + 2.0 * pi.max_halo) / prof.gather_bytes_s
        # A lossy wire encodes what the rank sends and decodes what it receives, forward
        # and backward: about its halo's rows each way.
        codec = 2 * n_x * codec_time(sent_max * d, spec.wire) * slow
    compute = compute * slow + codec
    ranks = list(range(P))
    # The busiest rank sends its halo-sized share; receive and send sizes are symmetric in
    # total, and the all-to-all waits for the slowest pair; each blocking collective also
    # pays its software cost and, with more ranks than cores, the wait for peers the
    # scheduler has descheduled.
    n_coll = 2 * n_x + 1 if P > 1 else 1  # halo exchanges both ways and the all-reduce
    sync = _group_sync(prof, P, P, compute / n_coll)
    per_exchange = _a2a_time(prof, ranks, 0, sent_max * rb, sent_sum / P * rb) + sync if P > 1 else 0.0
    halo_s = 2 * n_x * per_exchange
    params = param_count(stats, spec)
    ar_s = _allreduce_time(prof, ranks, params * 4.0) + (sync if P > 1 else 0.0)
    halo_bytes = volume.graph_parallel_bytes(round(sent_sum), stats.num_features, spec.layers, d, s, spec.model,
                                             "ours", wire=spec.wire)
    ar_bytes = params * 4 * P if P > 1 else 0
    opt = _opt_time(prof, params) * slow
    # Memory of the largest part.
    rows, src_rows = pi.max_nodes, pi.max_nodes + pi.max_halo
    act = sum(saved_bytes(stats, spec.model, u, src_rows, rows) for u in units)
    mem = {
        "parameters+optimizer": ADAM_COPIES * 4.0 * params + 4.0 * params,  # + flat all-reduce buffer
        # the rank reads its own rows of the dataset (all of it when generated in memory)
        "dataset": dataset_bytes(stats, rows / N),
        "structure": block_bytes(rows, src_rows, pi.max_edges),
        "features": feature_bytes(stats, src_rows),
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
        bytes={"halo": halo_bytes, "way": 0, "pipe": 0, "input": 0, "allreduce": ar_bytes,
               "total": halo_bytes + ar_bytes},
        compute_s=compute, comm_s=halo_s + ar_s, bubble_s=0.0, optimizer_s=opt, epoch_s=epoch,
        peak_mem_bytes=peak, fits=fits, reason=reason, per_stage=[st], profile=prof.name,
        notes=_notes(stats, topo) + ([f"boundary sampling {p:g}: halo rows predicted as {p:g} x sum M_p"]
                                     if p < 1.0 else []),
        wire=spec.wire, codec_s=codec, boundary_sample=p,
    )


#: The profile whose unit times balance a one-way pipeline's stages (:func:`stage_blocks`):
#: always the shipped one, never a user's, so that every rank of a job computes the same split.
BALANCE_PROFILE = "cpu-this-machine"


@functools.lru_cache(maxsize=1)
def balance_profile() -> HardwareProfile:
    """:data:`BALANCE_PROFILE` as shipped (``gnnpipe/profiles``), not from the user's directory."""
    return load_profile(profiles_dir() / f"{BALANCE_PROFILE}.toml")


def stage_blocks(stats: GraphStats, spec: ModelSpec, stages: int, ways: int = 1,
                 chunks: int = 1) -> list[tuple[int, int]]:
    """The executor's layer assignment. One way: :func:`assign_layers` over
    :func:`pipeline_unit_seconds` on :func:`balance_profile` (needs the plan's Σ_k |N(k)|
    for ``chunks``: ``stats.part(1).chunk_nbrs``), so the stages are balanced by measured
    unit costs, the wide input layer's, the history path's and the per-pass overheads
    included (a FLOP count makes Squirrel's 2,089-wide input layer weigh as 12 hidden
    layers; here it costs about 3). Several ways must agree on one split while their chunks
    differ: :func:`layer_costs` (FLOPs of the whole graph)."""
    if ways == 1:
        costs = pipeline_unit_seconds(stats, spec, 1, chunks, balance_profile())
    else:
        costs = layer_costs(spec.model, spec.layers, stats.num_features, spec.hidden, stats.num_nodes,
                            stats.num_edges, stats.num_classes, sparse_nnz=stats.sparse_nnz)
    return assign_layers(costs, stages)


def boundary_times(prof: HardwareProfile, D: int, S: int, chunk_bytes: float) -> list[float]:
    """Per-chunk message time over each stage boundary ``b`` (stage ``b`` to ``b + 1``) of
    the busiest way (rank = way·S + stage): latency, the collective software cost, and
    ``chunk_bytes`` at the link's bandwidth; boundaries of different ways run at once, and
    those crossing nodes share the node's network link.

    Returns:
        ``S − 1`` seconds, one per boundary, the same in both directions.
    """
    t_b = []
    for b in range(S - 1):
        bw, lat = prof.link(b, b + 1)
        if prof.link(b, b + 1)[0] == prof.inter_bw_bytes_s and b // prof.devices_per_node != (b + 1) // prof.devices_per_node:
            sharing = sum(1 for w in range(D) if (w * S + b) // prof.devices_per_node != (w * S + b + 1) // prof.devices_per_node)
            bw = bw / max(sharing, 1)
        t_b.append(lat + prof.coll_overhead_s + chunk_bytes / bw)
    return t_b


def pipeline_span(busy: Sequence, t_b: Sequence, C: int) -> tuple:
    """The GNNPipe schedule's epoch (all forwards, then all backwards, one flush), closed form.

    A chunk's forward on stage ``s`` takes ``f_s = busy_s/3/C``, its backward ``2·f_s``;
    each message over boundary ``b`` takes ``t_b`` (links are full duplex, messages on one
    link go in order). Forwards are a flow shop of ``C`` identical jobs over the machines
    stage 0, link 0, stage 1, …, and backwards the same in reverse (it starts when the last
    stage's forwards end, after every other stage's): the makespan of each is the sum of
    the machines' times plus ``(C − 1)`` times the slowest. This equals
    :func:`gnnpipe.schedule.simulate` of the lowered schedule with these costs
    (``tests/test_plan_time.py``); it works on any numbers (Fractions stay exact).

    Args:
        busy: per stage, its compute (and blocking halo exchanges) per epoch.
        t_b: per boundary, one message's time.
        C: chunks.

    Returns:
        ``(span, exposed)``: the time from the first forward to the end of the last
        backward, and the part of it spent on transfers no compute hides (fill/drain
        messages, links slower than the stages).
    """
    f = [x / 3 / C for x in busy]
    bk = [2 * x / 3 / C for x in busy]
    tmax = max(t_b) if t_b else 0
    fill = sum(busy) / C + 2 * sum(t_b)
    steady = (C - 1) * (max(max(f), tmax) + max(max(bk), tmax))
    exposed = 2 * sum(t_b) + (C - 1) * (max(0, tmax - max(f)) + max(0, tmax - max(bk)))
    return fill + steady, exposed


def epoch_input_transform(model: str, u, stats: GraphStats, chunks: int) -> bool:
    """Whether a pipeline stage transforms unit ``u``'s input once per epoch instead of per
    chunk (:class:`gnnpipe.parallel.pipeline.stage.PipelineStage`): the model's first unit, gcn,
    sage or gat transforming first, on dense features, with more than one chunk."""
    return (u.reads_features and u.aggregates and u.gemm_on_src and model in ("gcn", "sage", "gat")
            and stats.sparse_nnz is None and chunks > 1)


def transformed_width(model: str, u) -> int:
    """The width of unit ``u``'s input transform (sage: the neighbour and root transforms side
    by side)."""
    return 2 * u.out_dim if model == "sage" else u.out_dim


def shares_input(stats: GraphStats, spec: ModelSpec, topo: ParallelDims) -> bool:
    """Whether ``--shared-input`` applies to this layout (what
    :func:`gnnpipe.parallel.build.check_shared_input` accepts for a built-in model): a
    pipelined layout of several stages and chunks whose first unit is row-wise (dense or
    sparse features) or takes the epoch input transform (dense)."""
    if topo.mode == "graph" or topo.stages < 2 or topo.chunks < 2:
        return False
    u = unit_works(stats, spec)[0]  # a row-wise input layer (gcnii, resgcn+) is its own transform
    return not u.aggregates or epoch_input_transform(spec.model, u, stats, topo.chunks)


def carries_locally(spec: ModelSpec, topo: ParallelDims) -> bool:
    """Whether ``--local-carry`` applies (what :func:`gnnpipe.parallel.build.check_local_carry`
    accepts for a built-in model): a pipelined layout of several stages and chunks, a model
    whose input layer writes a carry (gcnii's ``h0``), no ``--shared-input`` beside it."""
    return topo.mode != "graph" and topo.stages > 1 and topo.chunks > 1 and spec.h0 and not spec.shared_input


def input_transform_seconds(u, stats: GraphStats, spec: ModelSpec, ways: int, prof: HardwareProfile) -> float:
    """Seconds per epoch of the first unit's input transform over a way's
    :func:`transform_rows` (its GEMM, forward and backward, and the dropout of its input):
    the work ``--shared-input`` splits over the stages."""
    frac = transform_rows(u, stats, ways) / stats.num_nodes
    return u.gemm_flops * frac / prof.gemm_flops_s + dropout_time(u.drop_values * frac, prof)


def transform_rows(u, stats: GraphStats, ways: int) -> int:
    """The rows a way's shared input layer transforms: a convolution's, every feature row its
    first stage holds (:func:`x_rows_of`); a row-wise unit's, the way's own nodes."""
    pi = stats.part(ways)
    if not u.aggregates:
        return int(pi.max_nodes)
    return int(x_rows_of(stats.num_nodes, pi.max_nodes, pi.max_halo, ways))


def x_rows_of(N: int, rows: float, halo: float, ways: int) -> float:
    """Feature rows a pipeline way's first stage holds: every node with one way; its part
    and the part's halo in a hybrid way."""
    return float(N) if ways == 1 else float(min(N, rows + halo))


def pipeline_unit_seconds(stats: GraphStats, spec: ModelSpec, ways: int, chunks: int, prof: HardwareProfile,
                          units: Sequence | None = None, notes: list[str] | None = None) -> list[float]:
    """Compute seconds per epoch of each unit on a pipeline stage of the busiest way, on
    ``prof`` alone (before ranks share cores; lossy wire codecs and the hybrid's exchanges
    are the stage's, not the unit's): every unit pass (``2·C``), its GEMMs, SpMMs and
    elementwise work, and per aggregating unit whose input is trained the history path (write
    the chunk's rows, gather its out-of-chunk neighbour rows, concatenate; backward:
    scatter-add their gradients) and, in a hybrid way, the other ways' rows.

    Transforms on ``h_src`` (gcn, gat) run on every chunk's own + neighbour rows, except the
    first unit's on dense features, which the stage runs once per epoch over the feature rows
    it holds (:func:`epoch_input_transform`); each chunk gathers its rows of the result and
    scatter-adds their gradients. With ``spec.shared_input`` that transform is no unit's: every
    stage does a share of it (:func:`input_transform_seconds`, counted by the prediction).
    """
    D, C = ways, chunks
    s = spec.bytes_per_value
    N, E = stats.num_nodes, stats.num_edges
    pi = stats.part(D)
    rows = pi.max_nodes
    frac_rows = rows / N
    frac_edges = pi.max_edges / max(E, 1)
    notes = [] if notes is None else notes
    nbrs = _chunk_nbrs(pi, C, notes)
    frac_src = (rows + nbrs) / N
    # With several chunks whose source rows outnumber the nodes, a stage hashes each node's
    # dropout masks once per unit (PipelineStage.keep_masks) instead of per chunk.
    frac_hashed = 1.0 if C > 1 and rows + nbrs > N else None
    chunk_halo = _chunk_halo(pi, C, notes) if D > 1 else 0
    out = []
    for u in (unit_works(stats, spec) if units is None else units):
        on_src = u.gemm_on_src and u.aggregates
        epoch_x = on_src and epoch_input_transform(spec.model, u, stats, C)
        # (the epoch input transform runs both of sage's transforms on every feature row)
        frac_gemm = (x_rows_of(N, rows, pi.max_halo, D) / N) if epoch_x else gemm_rows_frac(u, frac_rows, frac_src)
        t = unit_time(u, prof, 0.0, 2 * C) + (
            u.gemm_flops * frac_gemm / prof.gemm_flops_s
            + u.spmm_ew * (frac_edges if u.aggregates else frac_rows) / prof.spmm_edge_width_s
            + (elem_time(u, prof, frac_rows, frac_gemm) if epoch_x
               else elem_time(u, prof, frac_rows, frac_src, frac_hashed)))
        if epoch_x:
            t += 2.0 * s * transformed_width(spec.model, u) * (rows + nbrs) / prof.gather_bytes_s
        if spec.shared_input and u.reads_features and (epoch_x or not u.aggregates):
            t -= input_transform_seconds(u, stats, spec, D, prof)  # (spread over the stages: _predict_pipeline)
        if u.aggregates and not u.reads_features:
            t += 2 * C * prof.chunk_overhead_s + s * u.in_dim * (2.0 * rows + 3.0 * nbrs) / prof.gather_bytes_s
            if D > 1:
                t += 4.0 * s * u.in_dim * chunk_halo / D / prof.gather_bytes_s
        out.append(t)
    return out


def _predict_pipeline(stats, spec, topo, prof, units) -> Prediction:
    D, S, C = topo.ways, topo.stages, topo.chunks
    s, d = spec.bytes_per_value, spec.hidden
    N = stats.num_nodes
    pi = stats.part(D)
    if spec.shared_input and not shares_input(stats, spec, topo):
        spec = dataclasses.replace(spec, shared_input=False)
    if spec.local_carry and not carries_locally(spec, topo):
        spec = dataclasses.replace(spec, local_carry=False)
    # --local-carry: h0 leaves the chunk messages; every later stage computes it itself
    carry_h0 = spec.h0 and not spec.local_carry
    # The busiest way: its nodes, its edges (with neighbours in other ways), its halo.
    rows = pi.max_nodes
    notes_v: list[str] = []
    unit_secs = pipeline_unit_seconds(stats, spec, D, C, prof, units, notes_v)
    blocks = stage_blocks(stats, spec, S, D, C)
    width = d * (2 if carry_h0 else 1)  # h0 travels beside the activations
    codecs: list[float] = []  # per stage, encode + decode per epoch (before the slow-down)
    stages: list[StageDetail] = []
    T, halo_T = [], []
    ranks_of_stage = lambda st: [w * S + st for w in range(D)]  # noqa: E731
    slow = prof.slowdown(D * S)
    # Rows a stage touches per aggregating unit and epoch: every chunk's own rows plus its
    # out-of-chunk neighbours (history rows; in the hybrid also the other ways' rows).
    nbrs = _chunk_nbrs(pi, C, [])  # (noted by pipeline_unit_seconds when estimated)
    # Rows between ways per layer and direction: Σ_w M_w; under boundary sampling (stale
    # epochs) p times that, up to the rounding of each pair, as graph mode's halo.
    p = spec.boundary_sample if C > 1 else 1.0
    halo_m = pi.sum_m * p if D > 1 else 0
    for st, (a, b) in enumerate(blocks):
        comp = 0.0
        halo = 0.0
        # A lossy wire: per boundary next to the stage, every row of the way once per
        # epoch each way (forward rows, backward gradients): one encode and one decode.
        codec = ((st > 0) + (st < S - 1)) * codec_time(rows * width, spec.wire)
        n_coll = 0  # blocking collectives of this stage per epoch (hybrid halo exchanges)
        params = 0
        hist = act = 0.0
        for j in range(a, b):
            u = units[j]
            epoch_x = u.gemm_on_src and u.aggregates and epoch_input_transform(spec.model, u, stats, C)
            comp += unit_secs[j]
            params += u.params
            if u.aggregates and not u.reads_features:
                # Two buffers of the way's rows at any time: history + cross-chunk gradients
                # before the first snapshot, history (reused for the gradients in backward)
                # + snapshot after it; in ``history_bytes`` per value (bfloat16: 2).
                # (a hybrid way: its own rows and its halo's, R_u beside H_u)
                hist += (2.0 if C > 1 else 0.0) * spec.history_bytes * (N if D == 1 else rows + pi.max_halo) * u.in_dim
                if D > 1:
                    # Per chunk, forward rows and backward gradients with the other ways:
                    # 2·C blocking all-to-alls per unit, each row once (Σ_w M_w in all).
                    hb = halo_m / D * volume.wire_row_bytes(u.in_dim, s, spec.wire)
                    halo += 2 * _a2a_time(prof, ranks_of_stage(st), st, hb, hb, messages=C)
                    codec += 2 * codec_time(halo_m / D * u.in_dim, spec.wire)
                    n_coll += 2 * C
            # every chunk's saved tensors live until the flush: own + neighbour rows (the epoch
            # input transform: its input rows once, and the transform with its gradient)
            if epoch_x:
                xr = x_rows_of(N, rows, pi.max_halo, D)
                act += saved_bytes(stats, spec.model, u, xr, rows) + 2.0 * s * xr * transformed_width(spec.model, u)
            else:
                act += saved_bytes(stats, spec.model, u, rows + nbrs if C > 1 else rows + pi.max_halo, rows)
        if spec.local_carry and st > 0:  # the input layer over the way's rows, forward and backward
            comp += input_transform_seconds(units[0], stats, spec, D, prof)
        w_out = units[b - 1].out_dim + (d if carry_h0 and st < S - 1 else 0)
        # The first stage reads features: every row with one way, its part and its chunks'
        # neighbours in a hybrid way; the other stages none.
        x_rows = (N if D == 1 else min(N, rows + nbrs)) if a == 0 else 0.0
        mem = {
            "parameters+optimizer": ADAM_COPIES * 4.0 * params + (4.0 * params if D > 1 else 0.0),
            # relabelling reads the whole graph structure (mapped pages); features as read
            "dataset": dataset_bytes(stats, 1.0, feature_rows=x_rows),
            # the way's chunk blocks (evaluation runs over them too)
            "structure": block_bytes(rows, rows + nbrs, pi.max_edges) + 8.0 * nbrs,
            # the first stage's gathered feature rows (sparse: per-chunk copies)
            "features": (4.0 * x_rows * stats.num_features if stats.sparse_nnz is None
                         else feature_bytes(stats, 2.0 * rows + nbrs)) if a == 0 else 0.0,
            "activations": act,
            "history": hist,
            # At the turn from forward to backward the forward receives are consumed and
            # freed, sends are freed as they complete, and the gradient receives from the
            # next stage (posted at the turn) hold the way's rows once.
            "pipe buffers": s * rows * (w_out if st < S - 1 else 0),
            "backward": 2.0 * s * (rows + nbrs) / C * d,
            "base": prof.base_mem_bytes,
        }
        comp += codec
        comp *= slow
        codecs.append(codec * slow)
        if n_coll:
            halo += n_coll * _group_sync(prof, D * S, D, comp / n_coll)
        stages.append(StageDetail(st, (a, b), comp, halo, params, sum(mem.values()), mem))
        T.append(comp)
        halo_T.append(halo)
    r_host, c_host = prof.ranks_on_host(D * S), prof.cores_per_host
    relief = 1.0
    if r_host > c_host and max(T) > 0:
        # Time-shared cores and unequal stages: a stage blocked on a receive gives its core
        # away, so the busiest stage gets more than the fair share c/r — the host's demand
        # (r ranks x the mean stage) over c cores, never less than its own work on one core.
        relief = max(c_host / r_host, sum(T) / len(T) / max(T))
        T = [t * relief for t in T]
        stages = [dataclasses.replace(x, compute_s=x.compute_s * relief) for x in stages]
    # One chunk (``--exact``): the carry travels ahead of the rows (parallel/pipeline/carry.py),
    # so only the rows lie on the path from stage to stage.
    path_width = d if C == 1 else width
    t_b = boundary_times(prof, D, S, (rows / C) * volume.wire_row_bytes(path_width, s, spec.wire))
    busy = [t + h for t, h in zip(T, halo_T)]
    pipe_epoch, exposed_pipe = pipeline_span(busy, t_b, C)
    params_total = sum(x.params for x in stages)
    ar_s = max((_allreduce_time(prof, ranks_of_stage(st), x.params * 4.0) + _group_sync(prof, D * S, D, x.compute_s)
                for st, x in enumerate(stages)), default=0.0) if D > 1 else 0.0
    opt = max(_opt_time(prof, x.params) for x in stages) * slow
    i_max = max(range(S), key=lambda i: busy[i])
    compute = T[i_max]
    comm = exposed_pipe + halo_T[i_max] + ar_s
    bubble = max(0.0, pipe_epoch - compute - halo_T[i_max] - exposed_pipe)
    in_s, in_comm, in_bytes = _shared_input_cost(stats, spec, topo, prof, units[0]) if spec.shared_input else (0, 0, 0)
    if spec.local_carry:
        in_s, in_comm, in_bytes = _local_carry_cost(spec, topo, prof, units[0])
    compute += in_s
    comm += in_comm
    epoch = compute + comm + bubble + opt
    pipe_bytes = volume.pipeline_bytes(N, d, S, s, h0=carry_h0, wire=spec.wire, carry_apart=C == 1)
    way_bytes = volume.way_link_bytes(round(halo_m), stats.num_features, spec.layers, d, D, s, spec.model,
                                      wire=spec.wire)
    if C > 1 and spec.wire == "float32":  # stale hybrid, float32 wire: rows travel in the history's dtype
        way_bytes = way_bytes * spec.history_bytes // s
    ar_bytes = params_total * 4 * D if D > 1 else 0
    worst = max(stages, key=lambda x: x.mem_bytes)
    fits, reason = _fit(prof, worst.mem_bytes, f"stage {worst.stage} of {S}", worst.mem)
    notes = _notes(stats, topo) + notes_v
    if p < 1.0 and D > 1:
        notes.append(f"boundary sampling {p:g}: rows between ways predicted as {p:g} x sum M_w")
    return Prediction(
        topology=topo,
        bytes={"halo": 0, "way": way_bytes, "pipe": pipe_bytes, "input": in_bytes, "allreduce": ar_bytes,
               "total": way_bytes + pipe_bytes + in_bytes + ar_bytes},
        compute_s=compute, comm_s=comm, bubble_s=bubble, optimizer_s=opt, epoch_s=epoch,
        peak_mem_bytes=worst.mem_bytes, fits=fits, reason=reason, per_stage=stages, profile=prof.name,
        notes=notes, wire=spec.wire, codec_s=codecs[i_max] * relief, shared_input=spec.shared_input,
        local_carry=spec.local_carry,
        boundary_sample=p if D > 1 else 1.0,
    )


def _local_carry_cost(spec, topo, prof, u) -> tuple[float, float, int]:
    """``--local-carry``: (compute s, exposed transfer s, bytes) per epoch. The reading
    stages' transform is their stage compute (counted per stage); here the transfers, in
    pieces along the chain of stages: the first reader's chunks wait for one transfer of the
    weights at the epoch's start, and stage 0 waits for one transfer of the summed gradient
    shares at its end (each reader hands a piece on as it arrives, so the later hops add a
    piece each, not a transfer)."""
    D, S = topo.ways, topo.stages
    bw, lat = prof.link(0, 1)
    comm = 2.0 * (4.0 * u.params / bw + (S - 1) * lat + prof.coll_overhead_s)
    return 0.0, comm, D * volume.local_carry_bytes(S - 1, u.params)


def _shared_input_cost(stats, spec, topo, prof, u) -> tuple[float, float, int]:
    """``--shared-input``: (compute s, exposed transfer s, bytes) per epoch. Every stage of
    every way transforms its share of the way's feature rows before the first chunk, and
    back-propagates it after the last (the ranks share the host's cores as any compute);
    stage 0's link sends the weights to the ``S − 1`` other stages while it receives their
    rows (full duplex: the larger of the two), then the same backward. Nothing overlaps the
    pipeline: the executor runs both around the epoch's schedule."""
    D, S = topo.ways, topo.stages
    xr = transform_rows(u, stats, D)
    width = transformed_width(spec.model, u)
    comp = input_transform_seconds(u, stats, spec, D, prof) / S * prof.slowdown(D * S)
    bw, lat = prof.link(0, 1)
    out_b, in_b = 4.0 * (S - 1) * u.params, 4.0 * (xr - xr // S) * width
    comm = 2.0 * (max(out_b, in_b) / bw + (S - 1) * lat + prof.coll_overhead_s)
    return comp, comm, D * volume.shared_input_bytes(xr, S, width, u.params)
