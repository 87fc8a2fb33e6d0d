"""The input layer shared by every stage of a way (``--shared-input``,
:mod:`gnnpipe.parallel.pipeline.shared_input`).

* real ranks with it train as real ranks without it (stage 0 transforming every row
  itself): the same losses and first-step gradients up to the order of the weight
  gradient's sums, for gcn, sage and gat (a conv's transform) and gcnii and resgcn+ (a
  row-wise input layer), with exact epochs between stale ones, in pipeline
  and hybrid mode; a lost weight-gradient share or a stale copy of the weights breaks it;
* it is taken: every other stage transforms its share of the rows, and the bytes equal
  :func:`gnnpipe.partition.volume.shared_input_bytes` exactly;
* what it cannot serve is refused in one line; sparse features are served to a row-wise
  input layer.
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
from gnnpipe.parallel.build import check_shared_input
from gnnpipe.parallel.executor import StaleOptions
from gnnpipe.parallel.pipeline.shared_input import share_bounds
from gnnpipe.partition.volume import shared_input_bytes
from gnnpipe.spawn import run_ranks

from helpers.oracle import model_config
from helpers.switches import ENV, bag_of_words_graph, pairs, same_training

# 40 features > hidden 16: the first layer transforms first (gcn, sage), as gat always does.
WIDE = dict(synth_features=40, layers=3, epochs=3)


def test_stages_sharing_the_input_layer_train_as_stage_zero_alone():
    runs = [dict(WIDE, model=m) for m in ("gcn", "sage", "gat", "gcnii", "resgcn+")]
    runs.append(dict(WIDE, model="sage", exact_every=2, epochs=4))  # exact epochs keep stage 0's own path
    for run, (shared, plain) in zip(runs, pairs(3, runs, "shared_input")):
        what = f"{run['model']}{' exact-every 2' if run.get('exact_every') else ''}"
        same_training(shared, plain, what)
        # taken in a stale epoch 0 (every stage sent: the weights from stage 0, rows from the
        # others); not in an exact one (epoch 0 of exact-every 2), nor without the switch
        sent = [r["bytes"].get("input_fwd", 0) for r in shared]
        assert all(b == 0 for b in sent) if run.get("exact_every") else all(b > 0 for b in sent), (what, sent)
        assert all(r["bytes"].get("input_fwd", 0) == 0 for r in plain), what


def test_a_hybrid_way_shares_its_first_layer_too():
    """Each way shares among its own stages: a convolution's over the way's feature rows
    (its part's and its chunks' neighbours'), a row-wise layer's over its part's nodes."""
    runs = [dict(WIDE, model=m, mode="hybrid", ways=2) for m in ("sage", "gcnii")]
    for run, (shared, plain) in zip(runs, pairs(4, runs, "shared_input")):
        same_training(shared, plain, f"hybrid 2x2 {run['model']}")
        assert all(r["bytes"].get("input_fwd", 0) > 0 for r in shared)


def test_bytes_equal_the_formula():
    """Per epoch and way: the weights out and the rows back, then the same again backward."""
    world, L, d = 3, 3, 16
    runs = [dict(WIDE, model=m, epochs=1, shared_input=True) for m in ("gcn", "sage")]
    res = run_ranks("helpers.rankfns:many", world, "torch", args={"fn": "pipeline_run", "runs": runs},
                    env=ENV, timeout_s=300)
    g = load_graph_for(_cfg(**WIDE))
    for i, run in enumerate(runs):
        unit = build_model(model_config(_cfg(**run), g), seed=0).units[0]
        width = unit.transformed_dim
        assert width == (2 * d if run["model"] == "sage" else d)
        want = shared_input_bytes(g.num_nodes, world, width, sum(p.numel() for p in unit.parameters()))
        got = {k: sum(r[i]["bytes"].get(k, 0) for r in res) for k in ("input_fwd", "input_bwd")}
        assert got == {"input_fwd": want // 2, "input_bwd": want // 2}, (run["model"], got, want)
    assert L == 3


def test_shares_cover_every_row_once():
    for rows, S in ((10, 3), (2, 4), (5201, 4), (0, 2)):
        b = share_bounds(rows, S)
        assert b[0] == 0 and b[-1] == rows and np.all(np.diff(b) >= 0) and len(b) == S + 1
        assert np.ptp(np.diff(b)) <= 1  # as equal as the rows allow


@pytest.mark.parametrize("kw, why", [
    (dict(mode="graph"), "not --mode graph"),
    (dict(mode="pipeline", exact=True), "--exact forbids"),
])
def test_modes_it_cannot_serve_are_refused(kw, why):
    with pytest.raises(GnnpipeError, match=f"--shared-input .*{why}.*drop --shared-input"):
        TrainConfig(shared_input=True, **kw)


class _OpaqueLayer:  # a user's first layer that offers no transform split
    aggregates, out_dim = True, 16


@pytest.mark.parametrize("kw, why", [
    (dict(model="gcn", synth_features=8), "8 features in"),    # 8 <= 16: GCN aggregates first
    (dict(model="sage", chunks=1), "one stage or one chunk"),
    (dict(model="user"), "_OpaqueLayer"),
])
def test_models_and_layouts_it_cannot_serve_are_refused(kw, why):
    user = kw.get("model") == "user"
    if user:
        kw = {k: v for k, v in kw.items() if k != "model"}
    cfg = _cfg(**{**WIDE, "mode": "pipeline", **kw})
    g = load_graph_for(cfg)
    unit = _OpaqueLayer() if user else build_model(model_config(cfg, g), seed=0).units[0]
    dims = ParallelDims.from_config(cfg, 3)
    with pytest.raises(GnnpipeError, match=f"--shared-input .*{why}"):
        check_shared_input(unit, g, dims, StaleOptions.resolve(False))


# ------------------------------------------------------------------ the cost model and planner
def _squirrel_like(parts: dict | None = None):
    from gnnpipe.cost.inputs import GraphStats, PartInfo
    return GraphStats(5201, 396706, 2089, 5, None,
                      parts=parts or {1: PartInfo(1, 0, 5201, 396706, 0, chunk_nbrs={16: 25000})})


def test_the_prediction_counts_the_formula_bytes_and_balances_the_stages_without_the_transform():
    from dataclasses import replace

    from gnnpipe.cost.inputs import ModelSpec
    from gnnpipe.cost.predict import balance_profile, predict, stage_blocks

    st, prof = _squirrel_like(), balance_profile()
    spec = ModelSpec("sage", 16, 100)
    topo = ParallelDims("pipeline", 1, 4, 16)
    on = predict(st, replace(spec, shared_input=True), topo, prof)
    off = predict(st, spec, topo, prof)
    assert on.shared_input and not off.shared_input and off.bytes["input"] == 0
    assert on.bytes["input"] == shared_input_bytes(5201, 4, 2 * 100, 2 * 2089 * 100 + 100)
    assert on.bytes["total"] == off.bytes["total"] + on.bytes["input"]
    # without the transform stage 0's first unit weighs less: the balancer gives it more units
    a_on = stage_blocks(st, replace(spec, shared_input=True), 4, 1, 16)[0]
    a_off = stage_blocks(st, spec, 4, 1, 16)[0]
    assert a_on[1] > a_off[1], (a_on, a_off)
    # a layout it cannot serve predicts without it, whatever the spec says
    assert not predict(st, replace(spec, shared_input=True), ParallelDims("pipeline", 1, 4, 1), prof).shared_input


def test_the_planner_ranks_layouts_with_and_without_it_and_its_command_says_so():
    from gnnpipe.cost.inputs import ModelSpec
    from gnnpipe.cost.planner import rank_configs, train_command

    st = _squirrel_like()
    preds = rank_configs(st, ModelSpec("sage", 4, 256), 4, _profile(), chunk_factors=(4,), estimate_nodes=2000)
    shared = [p for p in preds if p.shared_input]
    assert shared and all(p.topology.mode != "graph" and p.topology.stages > 1 for p in shared)
    twins = {(p.topology, p.wire) for p in preds if not p.shared_input and p.topology.mode != "graph"
             and p.topology.stages > 1}
    assert {(p.topology, p.wire) for p in shared} <= twins
    assert "--shared-input" in train_command(shared[0], "squirrel", ModelSpec("sage", 4, 256))
    assert all("--shared-input" not in train_command(p, "squirrel", ModelSpec("sage", 4, 256))
               for p in preds if not p.shared_input and p.topology.chunks > 1)
    # gcnii's row-wise input layer is offered too; nothing on one stage or in graph mode
    gcnii = rank_configs(st, ModelSpec("gcnii", 8, 64), 4, _profile(), chunk_factors=(4,), estimate_nodes=2000)
    assert any(p.shared_input for p in gcnii)
    assert not any(p.shared_input for p in gcnii if p.topology.mode == "graph" or p.topology.stages < 2)


def _profile():
    from gnnpipe.cost.predict import balance_profile
    return balance_profile()


def test_a_row_wise_input_layer_is_shared_over_sparse_features(tmp_path):
    """Bag-of-words features (Physics' kind) stay sparse CSR: gcnii's input layer takes
    them row-wise on every stage; a convolution's transform is refused on them."""
    run = dict(WIDE, model="gcnii", dataset=bag_of_words_graph(tmp_path / "bags"))
    (shared, plain), = pairs(3, [run], "shared_input")
    assert load_graph_for(_cfg(**run)).sparse_features
    same_training(shared, plain, "gcnii on sparse features")
    assert all(r["bytes"].get("input_fwd", 0) > 0 for r in shared)
    cfg = _cfg(**{**run, "model": "gcn", "mode": "pipeline"})
    unit = build_model(model_config(cfg, load_graph_for(cfg)), seed=0).units[0]
    with pytest.raises(GnnpipeError, match="--shared-input .*features are sparse"):
        check_shared_input(unit, load_graph_for(cfg), ParallelDims.from_config(cfg, 3), StaleOptions.resolve(False))


def test_a_resumed_run_equals_the_uninterrupted_one(tmp_path):
    """Only stage 0 owns the first layer's weights and the other stages' copies are
    overwritten every epoch, so a checkpoint holds nothing new and a resume continues the
    same numbers (3 stages, stale sage)."""
    from test_checkpoint import _finish, _metrics, _same_metrics

    from gnnpipe.spawn import spawn_ranks

    cfg = dict(synth_nodes=300, synth_degree=6.0, synth_classes=4, synth_features=40, hidden=16, seed=3,
               eval_every=1, progress=False, timeout=60.0, mode="pipeline", model="sage", layers=3,
               shared_input=True)
    ref, run = tmp_path / "ref", tmp_path / "run"
    ranks = spawn_ranks("test_checkpoint:train_rank", 3, "torch", env=ENV, args={"jobs": [
        {"cfg": dict(cfg, epochs=6), "out": str(ref)},
        {"cfg": dict(cfg, epochs=3, checkpoint_every=3), "out": str(run)},
        {"cfg": dict(cfg, epochs=6, resume=str(run)), "out": str(run)},
    ]})
    try:
        out = _finish(ranks)
    finally:
        ranks.close()
    assert all("error" not in r for rank in out for r in rank), out
    _same_metrics(_metrics(run), _metrics(ref), "shared input, resumed at epoch 3")
