"""One-process oracles for the distributed tests: the plain model on the whole graph."""

from __future__ import annotations

import numpy as np
import torch

from gnnpipe.models import ModelConfig, RunCtx, build_model, loss_fn
from gnnpipe.models.block import Block
from gnnpipe.parallel.features import features_to_tensor
from gnnpipe.data.load import load_graph_for
from helpers.rankfns import _cfg, _unit_grads


def model_config(cfg, graph) -> ModelConfig:
    return ModelConfig(model=cfg.model, in_dim=graph.num_features, num_classes=graph.num_classes,
                       layers=cfg.layers, hidden=cfg.hidden, heads=cfg.heads, dropout=cfg.dropout,
                       alpha=cfg.alpha, lam=cfg.lam, backend=cfg.backend, multilabel=graph.multilabel)


def full_graph_run(epochs: int = 3, **kw) -> dict:
    """Logits, first-step gradients and the loss curve of the plain one-process run."""
    cfg = _cfg(epochs=epochs, **kw)
    g = load_graph_for(cfg)
    model = build_model(model_config(cfg, g), seed=cfg.seed)
    blk = Block.full(torch.as_tensor(np.asarray(g.indptr)), torch.as_tensor(np.asarray(g.indices)))
    x = features_to_tensor(g.features)
    y = torch.as_tensor(np.asarray(g.labels))
    tr = torch.as_tensor(np.asarray(g.train_mask))
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    logits0 = None
    losses, grads = [], None
    for e in range(epochs):
        model.train()
        opt.zero_grad()
        out = model(blk, x, RunCtx(training=True, epoch=e, seed=cfg.seed))
        if e == 0:
            logits0 = out.detach().clone()
        loss = loss_fn(out, y, tr, normalizer=int(tr.sum()))
        loss.backward()
        if e == 0:
            grads = _unit_grads(model.units)
        opt.step()
        losses.append(float(loss))
    return {"logits": logits0, "grads": grads, "losses": losses, "graph": g, "cfg": cfg}
