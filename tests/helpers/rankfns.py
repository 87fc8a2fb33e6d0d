"""Functions that run inside real rank processes (started by gnnpipe.spawn.run_ranks).

Each takes the world communicator and plain keyword arguments and returns tensors/lists
that the parent test compares against a one-process oracle.
"""

from __future__ import annotations

import numpy as np
import torch

from gnnpipe.config import TrainConfig
from gnnpipe.models import RunCtx
from gnnpipe.data.load import load_graph_for
from gnnpipe.train import executor_for_config


def _cfg(**kw) -> TrainConfig:
    # exact_every=0: the oracles' stale runs are every epoch stale unless a test asks for
    # exact epochs (gnnpipe-train's default has every 2nd epoch exact)
    base = dict(hidden=16, dropout=0.5, lr=0.01, seed=0, epochs=1, eval_every=1000, progress=False,
                synth_nodes=240, synth_degree=6.0, synth_classes=4, synth_features=12, exact_every=0)
    base.update(kw)
    return TrainConfig(**base)


def _unit_grads(units, offset: int = 0) -> dict:
    out = {}
    for i, u in enumerate(units):
        for name, p in u.named_parameters():
            out[f"{offset + i}.{name}"] = (p.grad.clone() if p.grad is not None else torch.zeros_like(p))
    return out


def graph_parallel_run(comm, epochs: int = 3, **kw) -> dict:
    """Logits before training, gradients of the first step, the loss curve, byte counts."""
    cfg = _cfg(mode="graph", epochs=epochs, **kw)
    graph = load_graph_for(cfg)
    ex, plan = executor_for_config(cfg, comm, graph)
    logits = ex.forward(RunCtx(training=True, epoch=0, seed=cfg.seed)).detach()
    before = comm.stats.snapshot()
    losses = []
    grads = None
    for e in range(epochs):
        r = ex.train_epoch(e)
        t = torch.tensor([r.loss], dtype=torch.float64)
        comm.all_reduce(t, op="sum", category="metrics")
        losses.append(float(t))
        if e == 0:
            grads = _unit_grads(ex.model.units)
            after = comm.stats.snapshot()
    sent = {k: after["bytes_sent"].get(k, 0) - before["bytes_sent"].get(k, 0) for k in after["bytes_sent"]}
    return {
        "orig_ids": torch.as_tensor(np.asarray(ex.local.orig_ids)),
        "logits": logits,
        "grads": grads,
        "losses": losses,
        "bytes": sent,
        "num_halo": ex.local.num_halo,
        "param_bytes": sum(p.numel() * p.element_size() for p in ex.model.parameters()),
    }


def pipeline_run(comm, epochs: int = 3, **kw) -> dict:
    """Per stage: its unit range, first-epoch gradients, loss curve, bytes of epoch 0."""
    kw.setdefault("mode", "pipeline")
    cfg = _cfg(epochs=epochs, **kw)
    graph = load_graph_for(cfg)
    ex, plan = executor_for_config(cfg, comm, graph)
    a = ex.stage.first_unit
    losses, grads, sent, exact, drift = [], None, None, [], []
    for e in range(epochs):
        before = comm.stats.snapshot()
        r = ex.train_epoch(e)
        after = comm.stats.snapshot()
        t = torch.tensor([r.loss], dtype=torch.float64)
        comm.all_reduce(t, op="sum", category="metrics")
        losses.append(float(t))
        exact.append(r.exact)
        drift.append(r.drift)
        if e == 0:
            grads = _unit_grads(ex.stage.units, a)
            sent = {k: after["bytes_sent"].get(k, 0) - before["bytes_sent"].get(k, 0) for k in after["bytes_sent"]}
    acc = ex.evaluate(epochs)
    return {"first_unit": a, "num_units": len(ex.stage.units), "grads": grads, "losses": losses,
            "bytes": sent, "acc": acc, "num_nodes": graph.num_nodes, "exact": exact, "drift": drift}


def many(comm, fn: str, runs: list) -> list:
    """Several runs in one launch (process start-up dominates small runs)."""
    f = globals()[fn]
    return [f(comm, **r) for r in runs]
