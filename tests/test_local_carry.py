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

import numpy as np
import pytest

from helpers.rankfns import _cfg

from gnnpipe import GnnpipeError
from gnnpipe.config import TrainConfig
from gnnpipe.data.load import load_graph_for
from gnnpipe.dims import ParallelDims
from gnnpipe.models import build_model
from gnnpipe.parallel.build import check_local_carry
from gnnpipe.parallel.executor import StaleOptions
from gnnpipe.partition.volume import local_carry_bytes, pipeline_bytes

from helpers.oracle import model_config
from helpers.switches import bag_of_words_graph, pairs, same_training

RUN = dict(synth_features=40, layers=4, epochs=3, model="gcnii")


def test_stages_computing_the_carry_train_as_stages_receiving_it():
    # (9,000 features: the weights travel down the chain in two pieces)
    runs = [RUN, dict(RUN, wire="int8"), dict(RUN, exact_every=2, epochs=4), dict(RUN, synth_features=9000)]
    for run, (local, relayed) in zip(runs, pairs(3, runs, "local_carry")):
        what = f"gcnii {run.get('wire', 'float32')}{' exact-every 2' if run.get('exact_every') else ''}"
        if run.get("wire") == "int8":  # the relayed carry is rounded on the wire, the local one is not
            np.testing.assert_allclose(local[0]["losses"], relayed[0]["losses"], rtol=2e-2, err_msg=what)
            continue
        same_training(local, relayed, what)


def test_it_is_taken_and_its_bytes_equal_the_formula():
    """Per stale epoch: the chunk messages hold the rows alone; stage 0 sends the input
    layer's weights to each reading stage and gets a weight-gradient share back."""
    world = 3
    (local, relayed), = pairs(world, [dict(RUN, epochs=1)], "local_carry")
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
    (local, _), = pairs(3, [dict(RUN, exact_every=2, epochs=1)], "local_carry")
    assert local[0]["exact"] == [True]
    assert sum(r["bytes"].get("input_fwd", 0) for r in local) == 0


def test_a_hybrid_way_computes_its_own_rows():
    runs = [dict(RUN, mode="hybrid", ways=2)]
    for run, (local, relayed) in zip(runs, pairs(4, runs, "local_carry")):
        same_training(local, relayed, "hybrid 2x2 gcnii")
        # rank = way * 2 + stage: each way's stage 0 sends the weights, its stage 1 a gradient share
        assert [r["bytes"].get("input_fwd", 0) > 0 for r in local] == [True, False, True, False]
        assert [r["bytes"].get("input_bwd", 0) > 0 for r in local] == [False, True, False, True]


def test_sparse_features(tmp_path):
    """Bag-of-words features (Physics' kind) stay sparse CSR on every reading stage."""
    run = dict(RUN, dataset=bag_of_words_graph(tmp_path / "bags"))
    (local, relayed), = pairs(3, [run], "local_carry")
    assert load_graph_for(_cfg(**run)).sparse_features
    same_training(local, relayed, "gcnii on sparse features")


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


# ------------------------------------------------------------------ the cost model and planner
def _physics_like():
    from gnnpipe.cost.inputs import GraphStats, PartInfo
    return GraphStats(34493, 495924, 8415, 5, 1_100_000,
                      parts={1: PartInfo(1, 0, 34493, 495924, 0, chunk_nbrs={16: 120000})})


def test_the_prediction_counts_the_formula_bytes_and_the_rows_alone():
    from dataclasses import replace

    from gnnpipe.cost.inputs import ModelSpec
    from gnnpipe.cost.predict import balance_profile, predict

    st, prof = _physics_like(), balance_profile()
    spec = ModelSpec("gcnii", 32, 100)
    topo = ParallelDims("pipeline", 1, 4, 16)
    on = predict(st, replace(spec, local_carry=True), topo, prof)
    off = predict(st, spec, topo, prof)
    assert on.local_carry and not off.local_carry and off.bytes["input"] == 0
    assert on.bytes["pipe"] == pipeline_bytes(34493, 100, 4, h0=False) == off.bytes["pipe"] // 2
    assert on.bytes["input"] == local_carry_bytes(3, 8415 * 100 + 100)
    # on a slow link the halved boundary bytes win over the weights' round trip
    slow = replace(prof, inter_bw_bytes_s=50e6 / 8, intra_bw_bytes_s=50e6 / 8, devices_per_node=1)
    assert predict(st, replace(spec, local_carry=True), topo, slow).epoch_s < predict(st, spec, topo, slow).epoch_s
    # a layout or model it cannot serve predicts without it, whatever the spec says
    assert not predict(st, replace(spec, local_carry=True), ParallelDims("pipeline", 1, 4, 1), prof).local_carry
    assert not predict(st, ModelSpec("sage", 32, 100, local_carry=True), topo, prof).local_carry


def test_the_planner_ranks_layouts_with_and_without_it_and_its_command_says_so():
    from gnnpipe.cost.inputs import ModelSpec
    from gnnpipe.cost.planner import rank_configs, train_command
    from gnnpipe.cost.predict import balance_profile

    spec = ModelSpec("gcnii", 32, 100)
    preds = rank_configs(_physics_like(), spec, 4, balance_profile(), chunk_factors=(4,), estimate_nodes=2000)
    local = [p for p in preds if p.local_carry]
    assert local and all(p.topology.mode != "graph" and p.topology.stages > 1 and p.topology.chunks > 1
                         and not p.shared_input for p in local)
    assert "--local-carry" in train_command(local[0], "coauthor_physics", spec)
    assert all("--local-carry" not in train_command(p, "coauthor_physics", spec) for p in preds if not p.local_carry)
    sage = rank_configs(_physics_like(), ModelSpec("sage", 8, 64), 4, balance_profile(), chunk_factors=(4,),
                        estimate_nodes=2000)
    assert not any(p.local_carry for p in sage)
