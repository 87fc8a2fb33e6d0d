"""The carry computed on every stage (``--local-carry``,
:mod:`gnnpipe.parallel.pipeline.local_carry`).

* real ranks with it train as real ranks without it (GCNII's ``h0`` relayed beside the
  rows): the same losses and first-step gradients up to the order of the input layer's
  weight-gradient sums, in pipeline and hybrid mode, with exact epochs between stale ones,
  on dense and sparse features; a lost weight-gradient share or a stale copy of the weights
  breaks it;
* it is taken: no chunk message holds the carry, the pipeline's bytes fall to the rows'
  alone and the input layer's messages equal :func:`volume.local_carry_bytes` exactly;
* what it cannot serve is refused in one line.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from helpers.rankfns import _cfg

from gnnpipe import GnnpipeError
from gnnpipe.config import TrainConfig
from gnnpipe.data.load import load_graph_for
from gnnpipe.dims import ParallelDims
from gnnpipe.models import build_model
from gnnpipe.parallel.build import check_local_carry
from gnnpipe.parallel.executor import StaleOptions
from gnnpipe.partition.volume import local_carry_bytes, pipeline_bytes
from gnnpipe.spawn import run_ranks

from helpers.oracle import model_config

ENV = {"PYTHONPATH": str(Path(__file__).resolve().parent)}
RUN = dict(synth_features=40, layers=4, epochs=3, model="gcnii")


def _pairs(world: int, runs: list) -> list:
    both = [dict(r, local_carry=s) for r in runs for s in (True, False)]
    res = run_ranks("helpers.rankfns:many", world, "torch", args={"fn": "pipeline_run", "runs": both},
                    env=ENV, timeout_s=300)
    return [([rank[2 * i] for rank in res], [rank[2 * i + 1] for rank in res]) for i in range(len(runs))]


def _same_training(local: list, relayed: list, what: str) -> None:
    np.testing.assert_allclose(local[0]["losses"], relayed[0]["losses"], rtol=1e-5, err_msg=what)
    for a, b in zip(local, relayed):
        assert a["grads"].keys() == b["grads"].keys()
        for k in a["grads"]:
            torch.testing.assert_close(a["grads"][k], b["grads"][k], rtol=1e-4, atol=1e-6,
                                       msg=lambda m, k=k: f"{what}, {k}: {m}")


def test_stages_computing_the_carry_train_as_stages_receiving_it():
    runs = [RUN, dict(RUN, wire="int8"), dict(RUN, exact_every=2, epochs=4)]
    for run, (local, relayed) in zip(runs, _pairs(3, runs)):
        what = f"gcnii {run.get('wire', 'float32')}{' exact-every 2' if run.get('exact_every') else ''}"
        if run.get("wire") == "int8":  # the relayed carry is rounded on the wire, the local one is not
            np.testing.assert_allclose(local[0]["losses"], relayed[0]["losses"], rtol=2e-2, err_msg=what)
            continue
        _same_training(local, relayed, what)


def test_it_is_taken_and_its_bytes_equal_the_formula():
    """Per stale epoch: the chunk messages hold the rows alone; stage 0 sends the input
    layer's weights to each reading stage and gets a weight-gradient share back."""
    world = 3
    (local, relayed), = _pairs(world, [dict(RUN, epochs=1)])
    g = load_graph_for(_cfg(**RUN))
    N, d = g.num_nodes, 16
    unit = build_model(model_config(_cfg(**RUN), g), seed=0).units[0]
    weights = sum(p.numel() for p in unit.parameters())

    def total(res, k):
        return sum(r["bytes"].get(k, 0) for r in res)

    pipe = total(local, "pipe_act") + total(local, "pipe_grad")
    assert pipe == pipeline_bytes(N, d, world, h0=False)
    assert total(relayed, "pipe_act") + total(relayed, "pipe_grad") == pipeline_bytes(N, d, world, h0=True)
    want = local_carry_bytes(world - 1, weights)
    assert total(local, "input_fwd") + total(local, "input_bwd") == want
    assert total(local, "input_fwd") == total(local, "input_bwd") == want // 2
    assert total(relayed, "input_fwd") == 0


def test_exact_epochs_relay_the_carry():
    """An exact epoch (epoch 0 of --exact-every 2) sends the carry ahead of the rows and no
    weights; the stale epoch after it computes it locally."""
    (local, _), = _pairs(3, [dict(RUN, exact_every=2, epochs=1)])
    assert local[0]["exact"] == [True]
    assert sum(r["bytes"].get("input_fwd", 0) for r in local) == 0


def test_a_hybrid_way_computes_its_own_rows():
    runs = [dict(RUN, mode="hybrid", ways=2)]
    for run, (local, relayed) in zip(runs, _pairs(4, runs)):
        _same_training(local, relayed, "hybrid 2x2 gcnii")
        # rank = way * 2 + stage: each way's stage 0 sends the weights, its stage 1 a gradient share
        assert [r["bytes"].get("input_fwd", 0) > 0 for r in local] == [True, False, True, False]
        assert [r["bytes"].get("input_bwd", 0) > 0 for r in local] == [False, True, False, True]


def test_sparse_features(tmp_path):
    """Bag-of-words features (Physics' kind) stay sparse CSR on every reading stage."""
    import dataclasses

    import scipy.sparse as sp

    from gnnpipe.data import synthetic

    g = synthetic.sbm(num_nodes=240, num_classes=4, avg_degree=6.0, num_features=40, seed=0)
    rng = np.random.default_rng(0)
    bags = sp.csr_matrix((rng.random((240, 40)) < 0.1).astype(np.float32))
    dataclasses.replace(g, features=bags, validate=False, _hash=None).save(tmp_path / "bags")
    run = dict(RUN, dataset=str(tmp_path / "bags"))
    (local, relayed), = _pairs(3, [run])
    assert load_graph_for(_cfg(**run)).sparse_features
    _same_training(local, relayed, "gcnii on sparse features")


@pytest.mark.parametrize("kw, why", [
    (dict(mode="graph"), "not --mode graph"),
    (dict(mode="pipeline", exact=True), "--exact forbids"),
])
def test_modes_it_cannot_serve_are_refused(kw, why):
    with pytest.raises(GnnpipeError, match=f"--local-carry .*{why}.*drop --local-carry"):
        TrainConfig(local_carry=True, **kw)


@pytest.mark.parametrize("kw, shared, why", [
    (dict(model="sage"), False, "SAGE|Conv.*writes none"),
    (dict(model="resgcn+"), False, "writes none"),
    (dict(chunks=1), False, "one stage or one chunk"),
    ({}, True, "--shared-input beside it"),
])
def test_models_and_layouts_it_cannot_serve_are_refused(kw, shared, why):
    cfg = _cfg(**{**RUN, "mode": "pipeline", **kw})
    g = load_graph_for(cfg)
    unit = build_model(model_config(cfg, g), seed=0).units[0]
    with pytest.raises(GnnpipeError, match=f"--local-carry .*({why})"):
        check_local_carry(unit, ParallelDims.from_config(cfg, 3), StaleOptions.resolve(False), shared)
