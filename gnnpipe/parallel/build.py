"""Build this rank's executor from the parallel layout, a model config and a partition plan.

The caller (the trainer, or a user's script) resolves the layout
(:class:`gnnpipe.dims.ParallelDims`) and the plan itself; this module only turns them into
an :class:`gnnpipe.parallel.executor.Executor`:

* graph mode: this rank's part with its halo (:class:`GraphParallelExecutor`);
* pipeline and hybrid: this rank's block of units, chosen by the layer cost model, over
  its way's chunks (:class:`PipelineExecutor` around a :class:`PipelineStage`), with the
  cross-way link in hybrid mode.
"""

from __future__ import annotations

import dataclasses
import logging
from functools import partial
from typing import Callable

import numpy as np
import scipy.sparse as sp
import torch

from gnnpipe._base import GnnpipeError
from gnnpipe.dims import ParallelDims
from gnnpipe.models import GNN, USER_MODEL, ModelConfig, build_model
from gnnpipe.parallel.chunks import build_chunks
from gnnpipe.parallel.executor import Executor, StaleOptions
from gnnpipe.parallel.features import feature_rows, gather_feature_rows
from gnnpipe.parallel.graph import GraphParallelExecutor, part_exchanger
from gnnpipe.parallel.groups import build_groups
from gnnpipe.parallel.pipeline.inputs import StageFeatures, StageTargets
from gnnpipe.parallel.pipeline.local_carry import LocalCarry, local_keys
from gnnpipe.parallel.pipeline.runtime import InputLayerParts, PipelineExecutor
from gnnpipe.parallel.pipeline.shared_input import SharedInput, share_bounds
from gnnpipe.parallel.pipeline.sources import LocalHistory
from gnnpipe.parallel.pipeline.stage import PipelineStage, StageUnits, carry_keys_after
from gnnpipe.parallel.pipeline.waylink import build_way_link
from gnnpipe.wire import FLOAT32, Wire
from gnnpipe.cost.inputs import GraphStats, ModelSpec, PartInfo
from gnnpipe.cost.predict import stage_blocks
from gnnpipe.partition import assign_layers, load_local_part, relabel_graph
from gnnpipe.partition.sampling import BoundarySample

log = logging.getLogger(__name__)

#: ``params -> optimizer``; each rank builds one over the parameters it owns.
OptimizerFactory = Callable[[list], torch.optim.Optimizer]


def adam(lr: float, weight_decay: float = 0.0) -> OptimizerFactory:
    """The trainer's optimizer: Adam with these settings."""
    return partial(torch.optim.Adam, lr=lr, weight_decay=weight_decay)


def check_layout(dims: ParallelDims, mcfg: ModelConfig) -> None:
    """Refuse a layout the model cannot fill (before any partitioning work is done).

    Raises:
        GnnpipeError: fewer layer units than pipeline stages.
    """
    if dims.pipelined and mcfg.num_units < dims.stages:
        what = (f"layers= holds {mcfg.num_units} layers," if mcfg.model == USER_MODEL
                else f"{mcfg.model} with --layers {mcfg.layers} has {mcfg.num_units} layer units,")
        raise GnnpipeError(
            f"{what} fewer than "
            f"{dims.stages} stages; use fewer stages or --mode hybrid (ways x stages)"
        )


def build_executor(comm, graph, plan, dims: ParallelDims, mcfg: ModelConfig, opts: StaleOptions, *,
                   seed: int, optimizer: OptimizerFactory, history_dtype: str = "float32",
                   device: str = "cpu", wire: Wire = FLOAT32, model: GNN | None = None,
                   boundary_sample: float = 1.0, shared_input: bool = False, local_carry: bool = False) -> Executor:
    """This rank's executor.

    Args:
        comm: the world communicator (``comm.world_size == dims.world``).
        graph: the loaded :class:`gnnpipe.data.Graph` (original node ids).
        plan: a :class:`gnnpipe.partition.PartitionPlan` with ``dims.parts`` parts (and
            ``dims.chunks`` chunks per part when pipelined).
        dims: the resolved layout.
        mcfg: the model; every rank builds it from ``seed`` (identical initial weights).
        opts: staleness options (pipeline and hybrid).
        optimizer: builds this rank's optimizer over the parameters it owns.
        history_dtype: storage dtype name of the pipeline's history buffers.
        device: where this rank computes: the model, the blocks, features, labels, masks,
            history and every buffer are put there (:mod:`gnnpipe.device`); the communicator
            may live elsewhere (Gloo and MPI stage a GPU's messages through the host).
        wire: the wire format of every training message that carries embeddings or their
            gradients (halos, chunk activations, rows between ways); evaluation and the
            weight all-reduce stay float32. The trainer's config refuses ``--exact`` with a
            lossy format (exact mode equals the one-process run); this layer builds what it
            is given, so the exact hybrid's exchanger can be measured in every format.
        model: the model to run instead of ``build_model(mcfg, seed)`` (a chain of user layers,
            :class:`gnnpipe.models.user.UserGNN`; identical initial weights on every rank are
            the caller's job); ``mcfg`` must describe it.
        boundary_sample: graph and hybrid mode: the fraction of each part's boundary rows a
            training exchange sends per epoch (:mod:`gnnpipe.partition.sampling`; the hybrid:
            the rows between ways in stale epochs); 1.0 sends all.
        shared_input: pipeline and hybrid: every stage of a way transforms a share of the
            first layer's input rows (:mod:`gnnpipe.parallel.pipeline.shared_input`).
        local_carry: pipeline and hybrid: every stage that reads the carry the input layer
            writes (GCNII's ``h0``) computes it from the features instead of receiving it
            (:mod:`gnnpipe.parallel.pipeline.local_carry`).

    Raises:
        GnnpipeError: the layout does not fit the world, the plan or the model.
    """
    if dims.world != comm.world_size:
        raise GnnpipeError(f"{dims.label()} needs {dims.world} ranks, the world has {comm.world_size}")
    if plan.num_parts != dims.parts:
        raise GnnpipeError(f"internal: a plan of {plan.num_parts} parts for {dims.label()}")
    check_layout(dims, mcfg)
    num_train = int(np.count_nonzero(np.asarray(graph.train_mask)))
    device = torch.device(device)
    if dims.mode == "graph":
        return _build_graph(comm, graph, plan, mcfg, num_train, seed, optimizer, device, wire, model,
                            boundary_sample)
    return _build_pipeline(comm, graph, plan, dims, mcfg, opts, num_train, seed, optimizer, history_dtype, wire,
                           model, device, shared_input, boundary_sample, local_carry)


def _build_graph(comm, graph, plan, mcfg, num_train, seed, optimizer, device, wire, model,
                 boundary_sample) -> GraphParallelExecutor:
    local = load_local_part(graph, plan, comm.rank)
    halo_rows = plan.perm[np.asarray(local.halo.recv_ids, dtype=np.int64)]
    halo_x = gather_feature_rows(graph.features, halo_rows)
    if model is None:
        model = build_model(mcfg, seed=seed)
    model.to(device)  # before the optimizer is built over its parameters
    opt = optimizer(list(model.parameters()))
    sample = BoundarySample(boundary_sample, seed) if boundary_sample < 1.0 else None
    return GraphParallelExecutor(comm, local, halo_x, model, opt, num_train, seed=seed,
                                 multilabel=graph.multilabel, device=device,
                                 exchanger=part_exchanger(comm, local, device, wire, sample))


def _build_pipeline(comm, graph, plan, dims, mcfg, opts, num_train, seed, optimizer, history_dtype,
                    wire, model, device, shared_input, boundary_sample=1.0, local_carry=False) -> PipelineExecutor:
    """Pipeline mode is one way of ``S`` stages; hybrid mode is ``D`` ways (the plan's
    parts) of ``S`` stages, ``rank = way·S + stage``."""
    D, S, C = dims.ways, dims.stages, dims.chunks
    way, s_idx = dims.coords(comm.rank)
    if model is None:
        model = build_model(mcfg, seed=seed)
    units = list(model.units)
    if len(units) != mcfg.num_units:
        raise GnnpipeError(f"internal: {mcfg.model} built {len(units)} units, expected {mcfg.num_units}")
    if shared_input:
        check_shared_input(units[0], graph, dims, opts)
    if local_carry:
        check_local_carry(units[0], dims, opts, shared_input)
    # Only the first stage reads features, and gathers them itself below: relabelling gets a
    # zero-width placeholder instead of building an [N, F] copy on every rank (the loaded,
    # memory-mapped features stay unread elsewhere).
    graph.content_hash  # noqa: B018  (cached, so the placeholder graph carries the dataset's)
    features = graph.features
    rg = relabel_graph(dataclasses.replace(graph, features=np.empty((graph.num_nodes, 0), np.float32),
                                           validate=False), plan)
    deg = rg.degrees().astype(np.float32)
    chunks_all = build_chunks(rg.indptr, rg.indices, plan.chunk_ptr, deg, orig=plan.perm,
                              only=range(way * C, (way + 1) * C))
    chunks = [ch.to(device) for ch in chunks_all[way * C : (way + 1) * C]]
    if mcfg.model == USER_MODEL:  # the chain's own estimate (the cost model knows built-ins only)
        costs = model.unit_costs(graph.num_nodes, graph.num_edges)
        if len(costs) != len(units):
            raise GnnpipeError(f"internal: {len(costs)} layer costs for {len(units)} units")
        blocks = assign_layers(costs, S)
    else:
        # The cost model's split (gnnpipe.cost.stage_blocks, which its predictions use too):
        # one way balances measured unit costs over this plan's chunks (every rank sees the
        # same chunks, so every rank computes the same split); several ways, FLOPs.
        nnz = graph.features.nnz if graph.sparse_features else None
        nbrs = sum(int(ch.nbr_ids.numel()) for ch in chunks_all[:C]) if D == 1 else 0
        parts = {1: PartInfo(1, 0, graph.num_nodes, graph.num_edges, 0, chunk_nbrs={C: nbrs})} if D == 1 else {}
        stats = GraphStats(graph.num_nodes, graph.num_edges, graph.num_features, graph.num_classes, nnz, parts=parts)
        blocks = stage_blocks(stats, ModelSpec.of(mcfg, shared_input=shared_input), S, D, C)
    a, b = blocks[s_idx]
    pipe, cross = build_groups(comm, dims)
    # the stage's neighbour rows: its own history, or the other ways' through the link
    # (boundary sampling: the stale epochs' rows between ways; an exact epoch's link sends all)
    sample = BoundarySample(boundary_sample, seed) if boundary_sample < 1.0 and not opts.exact else None
    source = (build_way_link(cross, plan, chunks_all, way, C, opts.exact, wire, device, sample) if D > 1
              else LocalHistory(chunks))
    block = StageUnits.of(units, a, b)
    host_chunks = chunks_all[way * C : (way + 1) * C]  # (the ids, read on the host)
    x, x_rows = first_stage_features(features, plan, host_chunks, whole=D == 1) if a == 0 else (None, None)
    if x is not None and not sp.issparse(x):
        x = torch.from_numpy(x).to(device)  # (one copy, shared by the exact stage below)
    targets = None
    if s_idx == S - 1:
        masks = {"train": rg.train_mask, "val": rg.val_mask, "test": rg.test_mask}
        targets = StageTargets(rg.labels, masks, num_train, graph.multilabel, device)
    feats = StageFeatures(x, chunks, units[0], device, x_rows, shared=shared_input) if a == 0 else None
    stage = PipelineStage(block, chunks, rg.num_nodes, opts, seed, features=feats, targets=targets,
                          source=source, hist_dtype=getattr(torch, history_dtype))
    exact_stage = None
    if opts.has_exact_epochs:  # stage.py rules 8, 9: the same units over one chunk, writing this history
        exact_stage = _exact_epoch_stage(rg, plan, deg, way, block, stage, x, x_rows, targets, cross, wire,
                                         seed, device)
    for u in units[a:b]:
        u.to(device)  # (before the optimizer is built over the parameters)
    params = [p for u in units[a:b] for p in u.parameters()]
    opt = optimizer(params) if params else _NoOpt()
    shared = None
    if shared_input:
        shared = _shared_input(pipe, features, plan, host_chunks, units[0], D == 1, feats, seed, device)
    local = _local_carry(pipe, features, plan, host_chunks, units, blocks, seed, device) if local_carry else None
    ex = PipelineExecutor(pipe, stage, opt, dims, mcfg.hidden, cross=cross, world=comm, wire=wire,
                          exact_stage=exact_stage, input_layer=InputLayerParts(shared, local))
    log.info("way %d stage %d: units [%d, %d) of %d, %d chunks, carry in %s out %s",
             way, s_idx, a, b, len(units), len(chunks), block.carry_in, block.carry_out)
    return ex


def _exact_epoch_stage(rg, plan, deg, way: int, block: StageUnits, stage: PipelineStage, x, x_rows, targets,
                       cross, wire: Wire, seed: int, device) -> PipelineStage:
    """Rule 8's stage of the exact epochs: ``stage``'s units over one chunk spanning the
    whole graph (pipeline) or this way's whole part, exchanging the other ways' rows fresh
    inside autograd as the exact hybrid does (hybrid); it writes ``stage``'s history."""
    # one chunk per way: its part (one way: the whole graph); only this way's gets a block
    whole_all = build_chunks(rg.indptr, rg.indices, plan.part_ptr, deg, orig=plan.perm, only=range(way, way + 1))
    whole = [whole_all[way].to(device)]
    source = (build_way_link(cross, plan, whole_all, way, 1, True, wire, device) if plan.num_parts > 1
              else LocalHistory(whole))
    feats = StageFeatures(x, whole, block.units[0], device, x_rows) if block.first == 0 else None
    return PipelineStage(block, whole, rg.num_nodes, StaleOptions.resolve(True), seed, features=feats,
                         targets=targets, source=source, history=stage.history)


def check_shared_input(unit, graph, dims: ParallelDims, opts: StaleOptions) -> None:
    """Refuse ``shared_input`` where it cannot run (every rank decides alike, before any
    message: a refusal on one rank only would leave the others waiting).

    Raises:
        GnnpipeError: exact mode, one stage or one chunk, a convolution on sparse
            features, or a first layer that is neither row-wise nor transforms its input row
            by row before it aggregates.
    """
    why = None
    if opts.exact:
        why = "sums the first layer's weight gradient in per-stage shares, which --exact forbids (it equals one process)"
    elif dims.stages < 2 or dims.chunks < 2:
        why = f"shares the first layer between stages over chunks; {dims.label()} has one stage or one chunk per way"
    elif graph.sparse_features and unit.aggregates:
        why = ("shares a convolution's transform of dense feature rows; this dataset's features are sparse "
               "(a row-wise input layer, gcnii's or resgcn+'s, takes them)")
    else:
        probe = torch.zeros(1, graph.num_features)
        ok = callable(getattr(unit, "can_transform_input", None)) and unit.can_transform_input(probe)
        if not ok:
            why = (f"shares a first layer that is row-wise (gcnii's and resgcn+'s input layer) or transforms its "
                   f"input row by row before it aggregates (gcn or sage with more features than --hidden, gat); "
                   f"this model's first unit ({type(unit).__name__}, {graph.num_features} features in, "
                   f"{unit.out_dim} out) is neither")
    if why:
        raise GnnpipeError(f"--shared-input {why} (drop --shared-input)")


def check_local_carry(unit, dims: ParallelDims, opts: StaleOptions, shared_input: bool) -> None:
    """Refuse ``local_carry`` where it cannot run (every rank decides alike, before any
    message).

    Raises:
        GnnpipeError: exact mode, one stage or one chunk, ``--shared-input`` beside it, or a
            first unit that writes no carry computed from the features alone.
    """
    why = None
    if opts.exact:
        why = ("sums the input layer's weight gradient in per-stage shares, which --exact forbids "
               "(it equals one process)")
    elif dims.stages < 2 or dims.chunks < 2:
        why = (f"computes a carry on every stage of a pipeline over chunks; {dims.label()} has one stage or one "
               "chunk per way (a one-chunk epoch sends the carry ahead of the rows already)")
    elif shared_input:
        why = "computes the input layer on every reading stage already; --shared-input beside it would split it again"
    elif not local_keys(unit):
        why = (f"computes on every stage a carry that the input layer writes from the features alone (gcnii's "
               f"h0); this model's first unit ({type(unit).__name__}) writes none")
    if why:
        raise GnnpipeError(f"--local-carry {why} (drop --local-carry)")


def _local_carry(pipe, features, plan, host_chunks: list, units: list, blocks: list, seed: int,
                 device) -> LocalCarry:
    """This stage's part of the locally computed carry: the stages that read it, and on
    such a stage its way's feature rows and a copy of the first unit."""
    keys = local_keys(units[0])
    readers = [s for s, (a, _) in enumerate(blocks)
               if a > 0 and set(keys) & set(carry_keys_after(units, a))]
    x = gid = None
    lo, hi = host_chunks[0].lo, host_chunks[-1].hi
    if pipe.rank in readers:
        x, gid = _rows_with_ids(features, plan, np.arange(lo, hi, dtype=np.int64), device)
    units[0].to(device)
    return LocalCarry(pipe, units[0], keys, readers, x, gid, lo, seed)


def _rows_with_ids(features, plan, ids: np.ndarray, device) -> tuple:
    """The feature rows of relabelled nodes ``ids`` (dense, or sparse CSR) and their
    original ids (the dropout masks' key), on ``device``."""
    orig = np.asarray(plan.perm, dtype=np.int64)[ids]
    return feature_rows(features, orig).to(device), torch.from_numpy(orig).to(device)


def _shared_input(pipe, features, plan, host_chunks: list, unit, whole: bool, feats: StageFeatures | None, seed: int,
                  device) -> SharedInput:
    """This stage's part of the shared input layer: its share of the rows the first unit
    transforms, a convolution's over the feature rows a first stage reads
    (:func:`first_stage_features`), a row-wise unit's over the way's own nodes."""
    if unit.aggregates:
        rows = way_feature_rows(host_chunks, whole)
        ids = np.arange(int(plan.perm.shape[0]), dtype=np.int64) if rows is None else rows
    else:
        ids = np.arange(host_chunks[0].lo, host_chunks[-1].hi, dtype=np.int64)
    bounds = share_bounds(len(ids), pipe.world_size)
    a, b = int(bounds[pipe.rank]), int(bounds[pipe.rank + 1])
    if feats is not None and not feats.transforms:
        raise GnnpipeError("internal: a first stage without the epoch input transform shares it")
    x, gid = _rows_with_ids(features, plan, ids[a:b], device)
    unit.to(device)
    return SharedInput(pipe, unit, x, gid, bounds, seed, features=feats)


def way_feature_rows(chunks: list, whole: bool) -> np.ndarray | None:
    """The sorted relabelled ids of the feature rows a way's first stage reads: its part's
    rows and its chunks' neighbours' (None when ``whole``: every row)."""
    if whole:
        return None
    return np.unique(np.concatenate([np.arange(chunks[0].lo, chunks[-1].hi, dtype=np.int64)]
                                    + [ch.nbr_ids.numpy() for ch in chunks]))


def first_stage_features(features, plan, chunks: list, whole: bool) -> tuple:
    """The feature rows a first stage reads, gathered from the dataset's (original-id) rows.

    Args:
        features: the dataset's [N, F] features (dense, memory-mapped or scipy CSR).
        plan: the partition plan (``plan.perm[new] = old``).
        chunks: this way's chunks (relabelled ids).
        whole: one way: every row; otherwise (a hybrid way) only its part's rows and its
            chunks' neighbours'.

    Returns:
        ``(x, x_rows)``: the rows in relabelled-id order (float32 ndarray or scipy CSR) and
        their sorted relabelled ids (None when ``whole``).
    """
    perm = np.asarray(plan.perm, dtype=np.int64)
    x_rows = way_feature_rows(chunks, whole)
    src = perm if x_rows is None else perm[x_rows]
    x = features[src] if sp.issparse(features) else np.asarray(features[src], dtype=np.float32)
    return x, x_rows


class _NoOpt:
    """The optimizer of a stage that owns no parameters."""

    def step(self) -> None:
        pass
