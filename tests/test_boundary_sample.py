"""Boundary sampling (``--boundary-sample P``, BNS-GCN's technique) in graph mode.

* the draw: ``⌊P·n⌋`` distinct positions per (owner, reader, epoch), the same on both
  sides, new every epoch;
* real ranks equal the independent one-process oracle
  (:class:`gnnpipe.parallel.reference.BoundarySampleReference`): losses and first-step
  gradients, 2 and 3 parts, gcn, sage and gcnii; and they differ from exact training;
* bytes: the halo categories carry exactly ``⌊P·n⌋`` rows per ordered pair of parts and
  exchanged unit, both directions (:mod:`gnnpipe.partition.volume`);
* the scaled sum is unbiased: averaged over many epochs' draws it approaches the full sum;
* the modes and models it cannot serve are refused in one line.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from helpers.oracle import model_config
from helpers.rankfns import _cfg

from gnnpipe import GnnpipeError
from gnnpipe.config import TrainConfig
from gnnpipe.data.load import load_graph_for
from gnnpipe.models import build_model
from gnnpipe.parallel.reference import BoundarySampleReference
from gnnpipe.partition import build_plan, relabel_graph
from gnnpipe.partition.halo import part_halo
from gnnpipe.partition.sampling import sample_scale, sampled_count, sampled_positions
from gnnpipe.partition.volume import exchanged_layers, sampled_halo_rows
from gnnpipe.spawn import run_ranks

from pathlib import Path

ENV = {"PYTHONPATH": str(Path(__file__).resolve().parent)}
EPOCHS = 6


def test_the_draw_keeps_floor_p_n_distinct_rows_the_same_on_both_sides_and_new_each_epoch():
    assert [sampled_count(10, p) for p in (0.1, 0.3, 0.35, 1.0)] == [1, 3, 3, 10]
    assert sampled_count(7, 0.1) == 0 and sample_scale(7, 0.1) == 0.0 and sample_scale(10, 0.3) == 10 / 3
    a = sampled_positions(0, 4, 1, 2, 50, 0.3)
    assert a.size == 15 and np.unique(a).size == 15 and a.min() >= 0 and a.max() < 50 and np.all(np.diff(a) > 0)
    assert np.array_equal(a, sampled_positions(0, 4, 1, 2, 50, 0.3))  # a pure function: both sides agree
    others = [sampled_positions(*k, 50, 0.3) for k in ((0, 5, 1, 2), (0, 4, 2, 1), (1, 4, 1, 2))]
    assert all(not np.array_equal(a, o) for o in others)  # epoch, direction and seed each draw anew
    assert np.array_equal(sampled_positions(0, 4, 1, 2, 50, 1.0), np.arange(50))


def test_the_scaled_sample_is_an_unbiased_sum():
    """BNS-GCN's factor n/k: over many epochs' draws the scaled sampled sum of a reader's
    boundary rows approaches the full sum (the mean of 400 draws within 5 %)."""
    rng = np.random.default_rng(0)
    rows = rng.random((40, 3))
    sums = [rows[sampled_positions(0, e, 0, 1, 40, 0.25)].sum(0) * sample_scale(40, 0.25) for e in range(400)]
    np.testing.assert_allclose(np.mean(sums, axis=0), rows.sum(0), rtol=0.05)
    assert np.std([s[0] for s in sums]) > 0.5  # (each draw alone is not the full sum)


def _oracle(world: int, epochs: int, sample: float, **kw) -> list[float]:
    cfg = _cfg(mode="graph", epochs=epochs, boundary_sample=sample, **kw)
    g = load_graph_for(cfg)
    plan = build_plan(g, parts=world, chunks=1, method=cfg.method, seed=cfg.seed)
    rg = relabel_graph(g, plan)
    model = build_model(model_config(cfg, g), seed=cfg.seed)
    ref = BoundarySampleReference(model, rg, plan.part_ptr, sample, seed=cfg.seed, lr=cfg.lr, orig=plan.perm)
    return [ref.epoch(e) for e in range(epochs)]


@pytest.mark.parametrize("world", [2, 3])
def test_ranks_equal_the_oracle_and_differ_from_exact_training(world):
    runs = [dict(model=m, layers=3, epochs=EPOCHS, boundary_sample=0.3) for m in ("gcn", "sage", "gcnii")]
    runs.append(dict(model="gcn", layers=3, epochs=EPOCHS))  # exact, for the difference
    res = run_ranks("helpers.rankfns:many", world, "torch", args={"fn": "graph_parallel_run", "runs": runs},
                    env=ENV, timeout_s=300)
    exact = res[0][3]["losses"]
    for i, run in enumerate(runs[:3]):
        got = res[0][i]["losses"]
        want = _oracle(world, EPOCHS, 0.3, model=run["model"], layers=3)
        np.testing.assert_allclose(got, want, rtol=2e-5, err_msg=f"{run['model']} on {world} parts")
        if run["model"] == "gcn":
            assert not np.allclose(got[1:], exact[1:], rtol=1e-4), "sampling changed nothing"


def test_bytes_are_floor_p_n_rows_per_pair_and_unit_both_ways():
    world, P, d, L = 3, 0.3, 16, 3
    runs = [dict(model=m, layers=L, epochs=1, boundary_sample=P) for m in ("gcn", "gcnii")]
    runs.append(dict(model="gcn", layers=L, epochs=1, boundary_sample=P, wire="int8"))
    res = run_ranks("helpers.rankfns:many", world, "torch", args={"fn": "graph_parallel_run", "runs": runs},
                    env=ENV, timeout_s=300)
    cfg = _cfg(mode="graph")
    g = load_graph_for(cfg)
    plan = build_plan(g, parts=world, chunks=1, method=cfg.method, seed=cfg.seed)
    pairs = [int(c) for p in range(world) for c in part_halo(relabel_graph(g, plan), plan, p).recv_counts]
    rows = sampled_halo_rows(pairs, P)
    assert rows == sum(sampled_count(n, P) for n in pairs) and 0 < rows < sum(pairs)
    for i, run in enumerate(runs):
        got = {k: sum(r[i]["bytes"].get(k, 0) for r in res) for k in ("halo_fwd", "halo_bwd")}
        per_row = 4 * d if run.get("wire") is None else 8 + d
        want = rows * exchanged_layers(run["model"], L) * per_row
        assert got == {"halo_fwd": want, "halo_bwd": want}, f"{run}: {got} != {want} each way"


@pytest.mark.parametrize("kw, why", [
    (dict(mode="pipeline"), "not --mode pipeline"), (dict(mode="hybrid", ways=1), "--ways 1 has none"),
    (dict(mode="hybrid", ways=2, refresh_epochs=2), "--refresh-epochs rewrites"),
    (dict(mode="hybrid", ways=2, model="resgcn+"), "not --model resgcn"),
    (dict(mode="hybrid", ways=2, exact=True), "--exact forbids"),
    (dict(mode="graph", model="gat"), "not --model gat"), (dict(mode="graph", model="resgcn+"), "not --model resgcn"),
    (dict(mode="graph", exact=True), "--exact forbids"),
])
def test_what_it_cannot_serve_is_refused(kw, why):
    with pytest.raises(GnnpipeError, match=f"--boundary-sample 0.5 .*{why}"):
        TrainConfig(boundary_sample=0.5, **kw)
    for bad in (0.0, 1.5, float("nan"), -0.1):
        with pytest.raises(GnnpipeError, match="boundary_sample"):
            TrainConfig(mode="graph", boundary_sample=bad)
    assert TrainConfig(boundary_sample=1.0, **kw).boundary_sample == 1.0  # off: anything goes


# ------------------------------------------------------------------ the hybrid's rows between ways
def _hybrid(**kw) -> dict:
    return dict(layers=4, epochs=EPOCHS, mode="hybrid", ways=2, stages=2, chunks=3, boundary_sample=0.3, **kw)


def test_a_sampled_hybrid_equals_its_oracle_and_differs_from_the_unsampled_one():
    """2 ways x 2 stages (4 ranks): the stale epochs push the draw's rows only, each way
    reads the rows it last received scaled by n / k (0 out of the sample), and the
    gradients return scaled; the oracle keeps each reader way's copy of the rows
    (:class:`StaleReference` with ``sample``). With exact epochs and a snapshot too."""
    from test_pipeline import _hybrid_2x2_equals_reference, stale_reference

    runs = [_hybrid(model=m) for m in ("gcn", "sage", "gcnii")]
    runs.append(_hybrid(model="gcnii", exact_every=3, snapshot_period=4))
    _hybrid_2x2_equals_reference(runs, "boundary sample 0.3")
    sampled = stale_reference(epochs=4, chunks=3, ways=2, model="gcn", layers=4, boundary_sample=0.3)["losses"]
    whole = stale_reference(epochs=4, chunks=3, ways=2, model="gcn", layers=4)["losses"]
    assert sampled[0] != pytest.approx(whole[0], rel=1e-4), "sampling changed nothing"


def test_a_sampled_hybrid_sends_floor_p_n_rows_per_pair_of_ways_and_unit():
    from gnnpipe.parallel.chunks import build_chunks

    runs = [dict(model=m, layers=4, epochs=1, mode="hybrid", ways=2, stages=2, chunks=3, boundary_sample=0.3, wire=w)
            for m, w in (("gcn", "float32"), ("gcnii", "float32"), ("gcnii", "int8"))]
    res = run_ranks("helpers.rankfns:many", 4, "torch", args={"fn": "pipeline_run", "runs": runs}, env=ENV,
                    timeout_s=300)
    cfg = _cfg(mode="hybrid", ways=2, chunks=3)
    g = load_graph_for(cfg)
    plan = build_plan(g, parts=2, chunks=3, method=cfg.method, seed=cfg.seed)
    rg = relabel_graph(g, plan)
    chunks = build_chunks(rg.indptr, rg.indices, plan.chunk_ptr)
    pp = np.asarray(plan.part_ptr)
    pairs = []  # rows of the other way each way's chunks read
    for w in range(2):
        ids = np.concatenate([ch.nbr_ids.numpy() for ch in chunks[3 * w : 3 * w + 3]])
        pairs.append(np.unique(ids[(ids < pp[w]) | (ids >= pp[w + 1])]).size)
    rows = sampled_halo_rows(pairs, 0.3)
    assert 0 < rows < sum(pairs)
    for i, run in enumerate(runs):
        got = {k: sum(r[i]["bytes"].get(k, 0) for r in res) for k in ("way_fwd", "way_bwd")}
        per_row = 4 * cfg.hidden if run["wire"] == "float32" else 8 + cfg.hidden
        want = rows * exchanged_layers(run["model"], 4) * per_row
        assert got == {"way_fwd": want, "way_bwd": want}, f"{run}: {got} != {want} each way"


# ------------------------------------------------------------------ the cost model and planner
def _plan_stats():
    from gnnpipe.cost import GraphStats, PartInfo

    N, E, C = 20000, 400000, (1, 2, 4, 8, 16)  # every part equal, halo 30 % of a part: no METIS runs
    infos = [PartInfo(p, int(0.3 * N), N // p + 1, E // p, int(0.3 * N / p) + 1, "test",
                      chunk_halo={c: int(0.3 * N) + 50 * c for c in C},
                      chunk_nbrs={c: (N // p) * min(c, 3) for c in C}) for p in (1, 2, 4)]
    return GraphStats(N, E, 128, 8, None, "synthetic").with_parts(infos)


def test_the_cost_model_sends_p_of_the_halo_rows():
    from gnnpipe.cost import ModelSpec, load_profile, predict, with_link
    from gnnpipe.dims import ParallelDims
    from gnnpipe.partition.volume import graph_parallel_bytes

    st, topo = _plan_stats(), ParallelDims("graph", ways=4)
    slow = with_link(load_profile("cpu-this-machine"), 50_000_000)
    full = predict(st, ModelSpec("gcnii", 8, 64), topo, slow)
    part = predict(st, ModelSpec("gcnii", 8, 64, boundary_sample=0.1), topo, slow)
    sum_m = st.part(4).sum_m
    assert part.bytes["halo"] == graph_parallel_bytes(round(0.1 * sum_m), 128, 8, 64, 4, "gcnii")
    assert full.bytes["halo"] == graph_parallel_bytes(sum_m, 128, 8, 64, 4, "gcnii")
    assert part.comm_s < 0.2 * full.comm_s + 0.05 * full.epoch_s and part.boundary_sample == 0.1
    assert any("boundary sampling 0.1" in n for n in part.notes)


def test_the_planner_offers_sampling_only_under_a_budget_that_admits_its_measured_loss(monkeypatch):
    from gnnpipe.cost import planner, wire_accuracy

    monkeypatch.setitem(wire_accuracy.BOUNDARY_SAMPLE_LOSS, 0.1, {"gcnii": (0.4, 32, "a test's figure")})
    assert planner.sample_choices("gcnii", None) == ([1.0], [])  # no budget: not considered
    assert planner.sample_choices("gcnii", 0.5) == ([1.0, 0.1], [])
    keep, out = planner.sample_choices("gcnii", 0.3)
    assert keep == [1.0] and "expected loss 0.40 points (measured) > accuracy budget 0.3" in out[0]
    assert "not gat" in planner.sample_choices("gat", 5.0)[1][0]
    assert "--exact" in planner.sample_choices("sage", 5.0, exact=True)[1][0]
    # a model not measured takes the worst measured figure, and says so
    # a model not measured, or deeper than measured, takes the worst measured figure, and says so
    monkeypatch.setitem(wire_accuracy.BOUNDARY_SAMPLE_LOSS, 0.1, {"gcnii": (2.0, 32, "a"), "sage": (0.0, 4, "b")})
    assert wire_accuracy.sample_figure(0.1, "sage", 4) == (0.0, "b")
    loss, src = wire_accuracy.sample_figure(0.1, "gcn", 2)
    assert loss == 2.0 and src.startswith("not measured for gcn: the worst measured, gcnii's")
    loss, src = wire_accuracy.sample_figure(0.1, "sage", 16)
    assert loss == 2.0 and src.startswith("not measured for sage with 16 layers (measured up to 4)")
    assert planner.sample_choices("sage", 1.0, layers=4) == ([1.0, 0.1], [])
    assert planner.sample_choices("sage", 1.0, layers=32)[1] == [
        "boundary sample 0.1: expected loss 2.00 points (the worst measured) > accuracy budget 1"]
    assert wire_accuracy.sample_figure(1.0, "gcn")[0] == 0.0


def test_a_sampled_plan_carries_its_loss_and_its_flag(monkeypatch):
    from gnnpipe.cost import ModelSpec, load_profile, rank_configs, train_command, with_link
    from gnnpipe.cost import planner, wire_accuracy

    monkeypatch.setitem(wire_accuracy.BOUNDARY_SAMPLE_LOSS, 0.1, {"gcnii": (0.4, 32, "a test's figure")})
    slow = with_link(load_profile("cpu-this-machine"), 50_000_000)
    spec = ModelSpec("gcnii", 8, 64)
    preds = rank_configs(_plan_stats(), spec, 4, slow, estimate=False, samples=[1.0, 0.1], chunk_factors=(4,))
    graph = [p for p in preds if p.topology.mode == "graph"]
    assert sorted(p.boundary_sample for p in graph) == [0.1, 1.0]
    sampled = next(p for p in graph if p.boundary_sample == 0.1)
    assert sampled.accuracy_cost == pytest.approx(0.4)
    assert all(p.boundary_sample == 1.0 for p in preds if p.topology.mode == "pipeline")
    # the stale hybrid samples its rows between ways: p of them, and the flag in its command
    hyb = [p for p in preds if p.topology.mode == "hybrid" and p.topology.chunks > 1 and not p.shared_input]
    assert {p.boundary_sample for p in hyb} == {0.1, 1.0}
    h_s = next(p for p in hyb if p.boundary_sample == 0.1)
    h_f = next(p for p in hyb if p.boundary_sample == 1.0 and p.topology == h_s.topology and p.wire == h_s.wire)
    assert 0 < h_s.bytes["way"] < 0.15 * h_f.bytes["way"] and h_s.bytes["pipe"] == h_f.bytes["pipe"]
    assert h_s.accuracy_cost == pytest.approx(0.4) and h_s.epoch_s < h_f.epoch_s
    h_cmd = train_command(h_s, "squirrel", spec).split()
    assert h_cmd[h_cmd.index("--boundary-sample") + 1] == "0.1"
    cmd = train_command(sampled, "squirrel", spec)
    assert cmd.endswith("--mode graph --parts 4 --boundary-sample 0.1")
    assert TrainConfig(mode="graph", model="gcnii", boundary_sample=0.1).boundary_sample == 0.1  # (it would run)
    assert planner.rank_key(sampled)[1] == pytest.approx(sampled.epoch_s * 1.05)


def test_gnnpipe_plan_ranks_sampling_under_a_budget_and_says_where_its_loss_comes_from(monkeypatch, capsys):
    import json

    from gnnpipe.cli.plan import main as plan_main
    from gnnpipe.cost import wire_accuracy

    monkeypatch.setitem(wire_accuracy.BOUNDARY_SAMPLE_LOSS, 0.1, {"gcnii": (0.4, 32, "a test's figure")})
    args = ["--stats", "20000,400000,128", "--world", "4", "--model", "gcnii", "--layers", "8", "--hidden", "64",
            "--chunk-factors", "4", "--estimate-nodes", "1000", "--link-rate", "50mbit"]
    assert plan_main([*args, "--json"]) == 0  # no budget: no sampling
    out = json.loads(capsys.readouterr().out)
    assert out["boundary_sample"]["ranked"] == [1.0] and {p["boundary_sample"] for p in out["predictions"]} == {1.0}
    assert plan_main([*args, "--accuracy-budget", "0.5", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["boundary_sample"]["ranked"] == [1.0, 0.1]
    assert out["boundary_sample"]["source"] == {"0.1": "a test's figure"}
    graph = {p["boundary_sample"]: p for p in out["predictions"] if p["topology"]["mode"] == "graph"}
    assert graph[0.1]["bytes"]["halo"] < 0.11 * graph[1.0]["bytes"]["halo"] and graph[0.1]["accuracy_cost"] == 0.4
    assert plan_main([*args, "--accuracy-budget", "0.3"]) == 0
    txt = capsys.readouterr().out
    assert "left out: boundary sample 0.1: expected loss 0.40 points (measured) > accuracy budget 0.3" in txt
    assert "+bns" not in txt
    assert plan_main([*args, "--accuracy-budget", "0.5"]) == 0
    txt = capsys.readouterr().out
    assert "float32+bns0.1" in txt and "expected loss 0.40 points, a test's figure" in txt
