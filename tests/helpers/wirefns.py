"""Rank functions of the wire-format tests (run inside real ranks by gnnpipe.spawn.run_ranks).

Every run builds its executor as the trainer does (:func:`gnnpipe.train.setup.executor_for_config`),
except ``exact_lossy``: the trainer's config refuses ``--exact`` with a lossy ``--wire``, so
that run builds the exact hybrid's executor directly to measure its halo exchanger's bytes in
every format.
"""

from __future__ import annotations

import math

import torch

from gnnpipe.data.load import load_graph_for
from gnnpipe.dims import ParallelDims
from gnnpipe.parallel import build
from gnnpipe.parallel.executor import StaleOptions
from gnnpipe.wire import Wire
from gnnpipe.train.setup import executor_for_config, model_config, plan_for
from helpers.rankfns import _cfg


def _executor(comm, cfg, exact_lossy: str | None):
    graph = load_graph_for(cfg)
    if exact_lossy is None:
        return executor_for_config(cfg, comm, graph)[0], graph
    dims = ParallelDims.from_config(cfg, comm.world_size)
    plan = plan_for(cfg, graph, dims)
    opts = StaleOptions.resolve(True)
    ex = build.build_executor(comm, graph, plan, dims, model_config(cfg, graph), opts, seed=cfg.seed,
                              optimizer=build.adam(cfg.lr), wire=Wire(exact_lossy, cfg.seed))
    return ex, graph


def train(comm, epochs: int = 1, evaluate: bool = False, exact_lossy: str | None = None,
          batched: bool = False, **kw) -> dict:
    """Bytes of epoch 0 by category, the loss curve, and (``evaluate``) the final accuracies.

    ``batched``: the communicator's streamed all-to-all falls back to one batched exchange
    (as on NCCL), to compare the two paths."""
    if batched:
        cls = type(comm)
        saved = cls.__dict__["streams_point_to_point"]
        cls.streams_point_to_point = False
        try:
            return train(comm, epochs, evaluate, exact_lossy, **kw)
        finally:
            cls.streams_point_to_point = saved
    cfg = _cfg(epochs=epochs, **kw)
    ex, graph = _executor(comm, cfg, exact_lossy)
    losses, sent = [], None
    for e in range(epochs):
        before = comm.stats.snapshot()
        r = ex.train_epoch(e)
        after = comm.stats.snapshot()
        if e == 0:
            sent = {k: after["bytes_sent"].get(k, 0) - before["bytes_sent"].get(k, 0) for k in after["bytes_sent"]}
        t = torch.tensor([r.loss], dtype=torch.float64)
        comm.all_reduce(t, op="sum", category="metrics")
        losses.append(float(t))
    out = {"bytes": sent, "losses": losses, "finite": all(math.isfinite(x) for x in losses)}
    if evaluate:
        out["acc"] = ex.evaluate(epochs)
    return out


def many(comm, runs: list) -> list:
    """Several runs in one launch (process start-up dominates small runs)."""
    return [train(comm, **r) for r in runs]
