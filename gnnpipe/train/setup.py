"""Setting up a rank's run: the layout, the model config, the plan, the executor.

The layout is resolved once (:class:`gnnpipe.dims.ParallelDims`), checked against the model,
then the partition plan is loaded (and checked against the dataset) or made in memory, and
:func:`executor_for_config` turns a :class:`~gnnpipe.config.TrainConfig` into the arguments of
:func:`gnnpipe.parallel.build.build_executor`, which builds this rank's executor.
"""

from __future__ import annotations

import torch

from gnnpipe._base import GnnpipeError
from gnnpipe.config import TrainConfig
from gnnpipe.dims import ParallelDims
from gnnpipe.models import ModelConfig
from gnnpipe.models.user import UserChain
from gnnpipe.parallel import build
from gnnpipe.parallel.executor import Executor, StaleOptions
from gnnpipe.wire import Wire
from gnnpipe.partition import PartitionPlan, build_plan, check_plan_matches


def model_config(cfg: TrainConfig, graph, user: UserChain | None = None) -> ModelConfig:
    """The model a config trains on ``graph`` (input and output widths from the data), or
    the description of the user's chain ``user`` (prepared by :func:`executor_for_config`)."""
    if user is not None:
        return user.model_config(graph.multilabel, cfg.dropout)
    return ModelConfig.of(cfg.model_shape, graph.num_features, graph.num_classes, dropout=cfg.dropout,
                          alpha=cfg.alpha, lam=cfg.lam, backend=cfg.backend, multilabel=graph.multilabel)


def plan_for(cfg: TrainConfig, graph, dims: ParallelDims):
    """Load ``cfg.plan`` (checked against the dataset and the layout) or partition in memory."""
    parts, chunks = dims.parts, dims.plan_chunks
    if cfg.plan:
        plan = PartitionPlan.load(cfg.plan)
        check_plan_matches(plan, graph)
        if plan.num_parts != parts:
            raise GnnpipeError(
                f"plan {cfg.plan} has {plan.num_parts} parts but this run needs {parts} "
                f"(world size / mode); partition again with --parts {parts}"
            )
        if chunks and plan.num_chunks != chunks:
            raise GnnpipeError(
                f"plan {cfg.plan} has {plan.num_chunks} chunks per part but --chunks is {chunks}"
            )
        return plan
    if parts > graph.num_nodes:
        raise GnnpipeError(f"cannot split {graph.num_nodes} nodes into {parts} parts")
    method = cfg.method if parts > 1 or chunks > 1 else "contiguous"
    return build_plan(graph, parts=parts, chunks=max(chunks, 1), method=method, seed=cfg.seed)


def executor_for_config(cfg: TrainConfig, comm, graph, user: UserChain | None = None) -> tuple[Executor, object]:
    """This rank's executor for ``cfg`` and the partition plan it runs: the layout is
    resolved once, checked against the model, then the plan is loaded or made, and the
    config's settings become :func:`gnnpipe.parallel.build.build_executor`'s arguments
    (staleness options, optimizer, history dtype, device, wire format).

    With ``user`` (a chain of the user's layers) the chain is measured on the graph's widths
    and rank 0's initial weights are broadcast into it (collective: every rank constructed
    its own modules, and nothing makes their random initialisations agree), then each
    executor runs a copy of it.
    """
    dims = ParallelDims.from_config(cfg, comm.world_size)
    model = None
    if user is not None:
        user.prepare(graph.num_features, graph.num_classes)
        if comm.world_size > 1:
            user.load_state_dict(comm.broadcast_object(user.state_dict() if comm.rank == 0 else None, 0))
    mcfg = model_config(cfg, graph, user)
    if user is not None:
        model = user.to_gnn(mcfg)
    # Here, before the plan is made (METIS can take minutes); parallel.build checks again for
    # its direct callers, who hand it a plan already made.
    build.check_layout(dims, mcfg)
    plan = plan_for(cfg, graph, dims)
    opts = StaleOptions.resolve(cfg.exact, shuffle=cfg.shuffle, grad_fix=cfg.grad_fix,
                                snapshot_period=cfg.snapshot_period, grad_scale=cfg.grad_scale,
                                refresh_epochs=cfg.refresh_epochs, exact_every=cfg.exact_every,
                                drift_bound=cfg.drift_bound, exact_from=cfg.exact_from)
    ex = build.build_executor(comm, graph, plan, dims, mcfg, opts, seed=cfg.seed,
                              optimizer=build.adam(cfg.lr, cfg.weight_decay),
                              history_dtype=cfg.history_dtype, device=compute_device(cfg, comm),
                              wire=Wire(cfg.wire, cfg.seed), model=model, boundary_sample=cfg.boundary_sample,
                              shared_input=cfg.shared_input, local_carry=cfg.local_carry)
    return ex, plan


def compute_device(cfg, comm) -> torch.device:
    """Where this rank computes: the GPU its communicator was set up for (see
    :func:`gnnpipe.device.choose`), or ``cfg.device`` for a communicator made without one."""
    dev = getattr(comm, "compute_device", None)
    if dev is not None and dev.type == cfg.device:
        return dev
    if dev is not None and dev.type != "cpu":
        # A communicator set up for a GPU and a config that says CPU: training on the CPU
        # would "pass" while the user meant the GPU (issue 19), so neither is guessed.
        raise GnnpipeError(f"the communicator computes on {dev} but the config says --device {cfg.device}: "
                           f"set device={dev.type!r} in the TrainConfig (--device {dev.type}), or make the "
                           f"communicator with device={cfg.device!r}")
    return torch.device(cfg.device)


def gather_model_state(ex: Executor, comm, num_units: int) -> dict:
    """The whole model's ``state_dict`` (keys ``units.<i>.*``) on every rank (collective).

    Graph-parallel ranks each hold every unit; a pipeline's stages hold their own blocks, so
    way 0's stages broadcast theirs in turn (the other ways hold the same weights).

    Raises:
        GnnpipeError: the stages' units do not cover the model (a bug, named).
    """
    def owned() -> dict:  # on the host: the state travels pickled and loads anywhere
        return {i: {k: v.detach().cpu() if isinstance(v, torch.Tensor) else v for k, v in sd.items()}
                for i, sd in ex.owned_units().items()}

    units = owned()
    if ex.dims.pipelined and comm.world_size > 1:
        units = {}
        for s in range(ex.dims.stages):
            src = ex.dims.rank_of(0, s)
            units.update(comm.broadcast_object(owned() if comm.rank == src else None, src))
    if sorted(units) != list(range(num_units)):
        raise GnnpipeError(f"internal: gathered units {sorted(units)}, expected 0..{num_units - 1}")
    return {f"units.{i}.{k}": v for i, sd in sorted(units.items()) for k, v in sd.items()}
