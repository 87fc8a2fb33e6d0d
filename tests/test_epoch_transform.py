"""The pipeline's epoch input transform (``PipelineStage``, ``ConvUnit.transform_input``).

A first unit that transforms its input row by row before aggregating (GCN and SAGE wider
in than out, GAT) used to transform every chunk's source rows: Σ_k |src(k)| rows per epoch, each
node's row once per chunk that reads it. The stage now transforms every row once per epoch
(when the first chunk that reads it runs), adds the chunks' gradients into one buffer, and
back-propagates each piece of rows when its last reader's backward is done. These tests check that this changes nothing
but the summation order, that it is really taken (each row once per epoch, not per chunk), and where
it must not be (one chunk, aggregate-first widths).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import gnnpipe
from gnnpipe.models import units as U

# F = 40 > d = 16: GCN's first layer transforms first. Every epoch stale (exact_every=0): the
# per-epoch transform is the stale epochs' path.
SMALL = dict(dataset="sbm", synth_nodes=300, synth_features=40, synth_classes=4, hidden=16, layers=3,
             epochs=4, eval_every=2, threads=1, seed=3, dropout=0.5, exact_every=0)


def _fit(**kw):
    res = gnnpipe.fit(mode="pipeline", **{**SMALL, **kw})
    weights = {k: v.detach().clone() for k, v in res.model.state_dict().items()}
    return [m["loss"] for m in res.metrics], weights


def _count_transforms(monkeypatch) -> list:
    calls = []
    real = U.ConvUnit.transform_input

    def counting(self, h, gid, ctx):
        calls.append((ctx.epoch, int(h.shape[0])))
        return real(self, h, gid, ctx)

    monkeypatch.setattr(U.ConvUnit, "transform_input", counting)
    return calls


@pytest.mark.parametrize("model", ["gcn", "gat", "sage"])
def test_epoch_transform_equals_per_chunk_transform(model, monkeypatch):
    calls = _count_transforms(monkeypatch)
    losses, weights = _fit(model=model, chunks=5)
    # taken: every node's row once per training epoch (in pieces, as the chunks first read
    # them), not once per chunk that reads it
    for e in range(SMALL["epochs"]):
        pieces = [n for ep, n in calls if ep == e]
        assert 1 < len(pieces) <= 5 and sum(pieces) == SMALL["synth_nodes"], (e, pieces)
    n_calls = len(calls)
    monkeypatch.setattr(U.ConvUnit, "can_transform_input", lambda self, h: False)
    ref_losses, ref_weights = _fit(model=model, chunks=5)
    assert len(calls) == n_calls  # the per-chunk path never calls it
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-5)
    assert weights.keys() == ref_weights.keys()
    for k in weights:
        torch.testing.assert_close(weights[k], ref_weights[k], rtol=1e-4, atol=1e-6, msg=lambda m: f"{k}: {m}")


def test_epoch_transform_not_taken_with_one_chunk_or_aggregate_first(monkeypatch):
    calls = _count_transforms(monkeypatch)
    _fit(model="gcn", chunks=1, epochs=2)  # one chunk: nothing to share between chunks
    _fit(model="gcn", chunks=5, epochs=2, synth_features=8)  # 8 <= 16: GCN aggregates first
    _fit(model="sage", chunks=5, epochs=2, synth_features=8)  # 8 <= 16: SAGE aggregates first
    assert calls == []
