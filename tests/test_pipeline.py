"""GNNPipe pipeline on real rank processes.

* exact mode equals the plain one-process full-graph run (first-step gradients of every
  parameter, loss curve over 20 epochs);
* stale mode equals the independent one-process reference semantics
  (:mod:`gnnpipe.parallel.reference`), whatever the number of stages;
* activation + gradient bytes per epoch equal ``2·s·(S−1)·|V|·d`` (×2 when GCNII's h0
  travels), independent of depth;
* the stale hybrid's halo bytes between ways equal graph parallelism's for the same parts.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

TESTS = Path(__file__).resolve().parent

from helpers.oracle import full_graph_run, model_config  # noqa: E402
from helpers.rankfns import _cfg, _unit_grads  # noqa: E402

from gnnpipe import GnnpipeError  # noqa: E402
from gnnpipe.config import FEATURE_FIRST_MODELS  # noqa: E402
from gnnpipe.models import build_model  # noqa: E402
from gnnpipe.parallel.executor import StaleOptions  # noqa: E402
from gnnpipe.parallel.reference import StaleReference  # noqa: E402
from gnnpipe.partition import build_plan, relabel_graph  # noqa: E402
from gnnpipe.partition.halo import part_halo  # noqa: E402
from gnnpipe.partition.volume import graph_parallel_bytes, pipeline_bytes  # noqa: E402
from gnnpipe.spawn import run_ranks  # noqa: E402
from gnnpipe.data.load import load_graph_for  # noqa: E402

ENV = {"PYTHONPATH": str(TESTS)}
MODELS = ["gcn", "sage", "gat", "gcnii", "resgcn+"]
EPOCHS = 20


def _merge_grads(ranks: list[dict]) -> dict:
    out: dict = {}
    for r in ranks:
        out.update(r["grads"])
    return out


def stale_reference(epochs: int, chunks: int, ways: int = 1, **kw) -> dict:
    cfg = _cfg(mode="hybrid" if ways > 1 else "pipeline", ways=ways, epochs=epochs, chunks=chunks, **kw)
    g = load_graph_for(cfg)
    plan = build_plan(g, parts=ways, chunks=chunks, method=cfg.method, seed=cfg.seed)
    rg = relabel_graph(g, plan)
    model = build_model(model_config(cfg, g), seed=cfg.seed)
    opts = StaleOptions(shuffle=cfg.shuffle, grad_fix=cfg.grad_fix, snapshot_period=cfg.snapshot_period,
                        grad_scale=cfg.grad_scale, refresh_epochs=cfg.refresh_epochs, exact_every=cfg.exact_every,
                        drift_bound=cfg.drift_bound, exact_from=cfg.exact_from)
    ref = StaleReference(model, rg, plan.chunk_ptr, opts, seed=cfg.seed, lr=cfg.lr, orig=plan.perm, ways=ways,
                         sample=cfg.boundary_sample)
    losses, grads, exact, drift = [], None, [], []
    for e in range(epochs):
        exact.append(bool(cfg.exact_from) and e >= cfg.exact_from
                     or (ref.next_exact if cfg.drift_bound else bool(cfg.exact_every) and e % cfg.exact_every == 0))
        losses.append(ref.epoch(e))
        drift.append(ref.drift if not exact[-1] else None)
        if e == 0:
            grads = _unit_grads(model.units)
    return {"losses": losses, "grads": grads, "graph": g, "cfg": cfg, "plan": plan, "relabelled": rg,
            "exact": exact, "drift": drift}


def _compare(ranks: list[dict], ref: dict, where: str) -> None:
    grads = _merge_grads(ranks)
    assert grads.keys() == ref["grads"].keys(), where
    for k in ref["grads"]:
        torch.testing.assert_close(grads[k], ref["grads"][k], rtol=1e-4, atol=1e-6, msg=lambda m: f"{where} grad {k}: {m}")
    np.testing.assert_allclose(ranks[0]["losses"], ref["losses"], rtol=1e-4, err_msg=where)
    # stages cover the units contiguously
    spans = sorted((r["first_unit"], r["first_unit"] + r["num_units"]) for r in ranks)
    assert spans[0][0] == 0 and all(a[1] == b[0] for a, b in zip(spans, spans[1:])), spans


def _runs(exact: bool, layers: int = 4) -> list[dict]:
    extra = {"exact": True} if exact else {"chunks": 5, "snapshot_period": 3}
    return [dict(model=m, layers=layers, epochs=EPOCHS, **extra) for m in MODELS]


# The 4-rank MPI variants repeat what 4-rank Gloo and 2-rank MPI cover; they run in CI's
# slow pass so the default suite stays within its time budget.
WORLD_COMM = [(2, "torch"), (4, "torch"), pytest.param(2, "mpi", marks=pytest.mark.mpi),
              pytest.param(4, "mpi", marks=[pytest.mark.mpi, pytest.mark.slow])]
COMMS_SLOW_MPI = ["torch", pytest.param("mpi", marks=[pytest.mark.mpi, pytest.mark.slow])]


@pytest.mark.parametrize("world,comm", WORLD_COMM)
def test_exact_pipeline_equals_one_process(world, comm):
    runs = _runs(exact=True)
    res = run_ranks("helpers.rankfns:many", world, comm, args={"fn": "pipeline_run", "runs": runs}, env=ENV, timeout_s=300)
    for i, run in enumerate(runs):
        ranks = [r[i] for r in res]
        ref = full_graph_run(**{k: v for k, v in run.items() if k != "exact"})
        _compare(ranks, ref, f"exact {run['model']} S={world} {comm}")


@pytest.mark.parametrize("world,comm", WORLD_COMM)
def test_stale_pipeline_equals_reference(world, comm):
    runs = _runs(exact=False)
    res = run_ranks("helpers.rankfns:many", world, comm, args={"fn": "pipeline_run", "runs": runs}, env=ENV, timeout_s=300)
    for i, run in enumerate(runs):
        ranks = [r[i] for r in res]
        ref = stale_reference(**run)
        _compare(ranks, ref, f"stale {run['model']} S={world} {comm}")
        # bytes per epoch: activations + gradients between consecutive stages
        cfg = ref["cfg"]
        h0 = cfg.model == "gcnii"
        expect = pipeline_bytes(ranks[0]["num_nodes"], cfg.hidden, world, 4, h0=h0)
        got = sum(r["bytes"].get("pipe_act", 0) + r["bytes"].get("pipe_grad", 0) for r in ranks)
        assert got == expect, f"{run['model']} S={world}: {got} bytes != 2·s·(S−1)·|V|·d = {expect}"


def test_pipeline_volume_independent_of_depth():
    runs = [dict(model="gcnii", layers=L, epochs=1, chunks=4) for L in (4, 8)]
    res = run_ranks("helpers.rankfns:many", 2, "torch", args={"fn": "pipeline_run", "runs": runs}, env=ENV, timeout_s=300)
    vols = []
    for i in range(2):
        ranks = [r[i] for r in res]
        vols.append(sum(r["bytes"].get("pipe_act", 0) + r["bytes"].get("pipe_grad", 0) for r in ranks))
    n = res[0][0]["num_nodes"]
    assert vols[0] == vols[1] == pipeline_bytes(n, 16, 2, 4, h0=True)


def test_stale_differs_from_exact_and_techniques_matter():
    """The reference really is stale (else the stale tests would prove nothing)."""
    exact = full_graph_run(epochs=3, model="gcn", layers=4)
    stale = stale_reference(epochs=3, chunks=5, model="gcn", layers=4)
    nofix = stale_reference(epochs=3, chunks=5, model="gcn", layers=4, grad_fix=False)
    assert not np.allclose(exact["losses"][1:], stale["losses"][1:], rtol=1e-4)
    assert not np.allclose(stale["losses"][1:], nofix["losses"][1:], rtol=1e-4)


# The convergence switches of issue 29 (docs/convergence-notes.md) against the oracle: the
# gradient scale and the history refresh (over the first epochs, with a snapshot taken and
# restored among them), in a pipeline of 2 stages and a 2 x 2 hybrid.
SWITCHES = dict(grad_scale=1.0, refresh_epochs=4)


def test_stale_pipeline_with_the_convergence_switches_equals_reference():
    runs = [dict(model=m, layers=4, epochs=EPOCHS, chunks=5, snapshot_period=3, **SWITCHES)
            for m in ("gcn", "gcnii", "resgcn+")]
    res = run_ranks("helpers.rankfns:many", 2, "torch", args={"fn": "pipeline_run", "runs": runs}, env=ENV, timeout_s=300)
    for i, run in enumerate(runs):
        _compare([r[i] for r in res], stale_reference(**run), f"stale {run['model']} S=2 {SWITCHES}")


def test_stale_hybrid_with_the_convergence_switches_equals_reference():
    runs = [dict(model=m, layers=4, epochs=EPOCHS, mode="hybrid", ways=2, stages=2, chunks=3, snapshot_period=3,
                 **SWITCHES) for m in ("gcn", "gcnii")]
    _hybrid_2x2_equals_reference(runs, str(SWITCHES))


def _hybrid_2x2_equals_reference(runs: list, label: str) -> None:
    """Each run on a 2 x 2 hybrid (4 ranks): both ways' stages equal the oracle with ways."""
    res = run_ranks("helpers.rankfns:many", 4, "torch", args={"fn": "pipeline_run", "runs": runs}, env=ENV, timeout_s=300)
    for i, run in enumerate(runs):
        ranks = [r[i] for r in res]
        ref = stale_reference(**{k: v for k, v in run.items() if k not in ("mode", "stages")})
        _compare(ranks[:2], ref, f"stale hybrid {run['model']} 2x2 {label}")
        _compare(ranks[2:], ref, f"stale hybrid {run['model']} 2x2 {label} (way 1)")


def test_stale_pipeline_with_exact_epochs_equals_reference():
    """Rule 8: every 3rd epoch exact (the whole graph as one chunk, writing the history the
    stale epochs read), among a snapshot (period 4) and the first 2 epochs refreshed."""
    runs = [dict(model=m, layers=4, epochs=10, chunks=5, snapshot_period=4, exact_every=3, refresh_epochs=2)
            for m in ("gcn", "gcnii", "resgcn+")]
    res = run_ranks("helpers.rankfns:many", 2, "torch", args={"fn": "pipeline_run", "runs": runs}, env=ENV, timeout_s=300)
    for i, run in enumerate(runs):
        _compare([r[i] for r in res], stale_reference(**run), f"stale {run['model']} S=2 exact_every=3")


def test_stale_hybrid_with_exact_epochs_equals_reference():
    """Rule 8 in a 2 x 2 hybrid: every 3rd epoch each way runs its whole part as one chunk,
    exchanging the other way's rows fresh inside autograd, and writes its own rows (H) and
    the other way's (R) that the stale epochs read; among a snapshot (period 4), the first
    2 epochs refreshed and gcn and gcnii (whose carry h0 crosses the stages)."""
    runs = [dict(model=m, layers=4, epochs=10, mode="hybrid", ways=2, stages=2, chunks=3, snapshot_period=4,
                 exact_every=3, refresh_epochs=2) for m in ("gcn", "gcnii")]
    _hybrid_2x2_equals_reference(runs, "exact_every=3")


def test_exact_cool_down_equals_reference():
    """Rule 10 on 2 stages and on a 2 x 2 hybrid: every epoch from E on runs exact, after
    every 3rd epoch exact or after stale epochs alone; the ranks run the oracle's schedule
    and losses."""
    runs = [dict(model="gcnii", layers=4, epochs=7, chunks=4, exact_every=3, exact_from=5),
            dict(model="gcn", layers=4, epochs=6, chunks=4, exact_from=3)]
    res = run_ranks("helpers.rankfns:many", 2, "torch", args={"fn": "pipeline_run", "runs": runs}, env=ENV, timeout_s=300)
    for i, run in enumerate(runs):
        ref = stale_reference(**run)
        assert ref["exact"][run["exact_from"]:] == [True] * (run["epochs"] - run["exact_from"])
        _compare([r[i] for r in res], ref, f"stale {run['model']} S=2 exact_from={run['exact_from']}")
        assert all(r[i]["exact"] == ref["exact"] for r in res)
    hybrid = [dict(model="gcnii", layers=4, epochs=6, mode="hybrid", ways=2, stages=2, chunks=3, exact_from=3)]
    _hybrid_2x2_equals_reference(hybrid, "exact_from=3")


def test_exact_epochs_are_the_one_process_epochs_and_feed_the_stale_ones():
    """In the oracle, an exact epoch's loss is the one-process loss (epoch 0 and, every epoch
    exact, all of them); the stale epoch after an exact one reads the rows it wrote, so it
    differs from a run whose epoch 0 was stale."""
    exact = full_graph_run(epochs=4, model="gcnii", layers=4)["losses"]
    every = stale_reference(epochs=4, chunks=4, model="gcnii", layers=4, exact_every=1)["losses"]
    np.testing.assert_allclose(every, exact, rtol=1e-5)
    alt = stale_reference(epochs=2, chunks=4, model="gcnii", layers=4, exact_every=2)["losses"]
    stale = stale_reference(epochs=2, chunks=4, model="gcnii", layers=4)["losses"]
    assert alt[0] == pytest.approx(exact[0], rel=1e-5) and stale[0] != pytest.approx(exact[0], rel=1e-3)
    assert alt[1] != pytest.approx(stale[1], rel=1e-4)


def _same_schedule(ranks: list[dict], ref: dict, where: str) -> None:
    """Every rank ran the oracle's exact epochs and measured its drifts (rule 9)."""
    for r in ranks:
        assert r["exact"] == ref["exact"], (where, r["exact"], ref["exact"])
        got = [d is None for d in r["drift"]]
        assert got == [d is None for d in ref["drift"]], where
        np.testing.assert_allclose([d for d in r["drift"] if d is not None],
                                   [d for d in ref["drift"] if d is not None], rtol=1e-4, err_msg=where)


def test_drift_bounded_exact_epochs_equal_the_reference():
    """Rule 9 on 2 stages and on a 2 x 2 hybrid: epoch 0 exact, then an exact epoch after
    each stale epoch whose history drift (summed over the stages and ways) exceeded the
    bound; with a snapshot and a refreshed epoch 1 (whose drift is 0: the refresh wrote
    the rows the chunks then write). The bounds sit among the drifts, so the schedule mixes
    both kinds: the same epochs, drifts, losses and gradients as the oracle."""
    runs = [dict(model="gcn", layers=4, epochs=10, chunks=5, snapshot_period=4, refresh_epochs=2, drift_bound=0.85),
            dict(model="gcnii", layers=4, epochs=10, chunks=5, snapshot_period=4, refresh_epochs=2, drift_bound=0.85)]
    res = run_ranks("helpers.rankfns:many", 2, "torch", args={"fn": "pipeline_run", "runs": runs}, env=ENV, timeout_s=300)
    for i, run in enumerate(runs):
        ref = stale_reference(**run)
        assert True in ref["exact"][1:] and False in ref["exact"][1:], ref["exact"]  # a mixed schedule
        where = f"stale {run['model']} S=2 drift_bound={run['drift_bound']}"
        _compare([r[i] for r in res], ref, where)
        _same_schedule([r[i] for r in res], ref, where)
    hyb = [dict(model="gcnii", layers=4, epochs=8, mode="hybrid", ways=2, stages=2, chunks=3, drift_bound=0.85)]
    res = run_ranks("helpers.rankfns:many", 4, "torch", args={"fn": "pipeline_run", "runs": hyb}, env=ENV, timeout_s=300)
    ref = stale_reference(**{k: v for k, v in hyb[0].items() if k not in ("mode", "stages")})
    assert True in ref["exact"][1:] and False in ref["exact"][1:], ref["exact"]
    _compare([r[0] for r in res[:2]], ref, "stale hybrid gcnii 2x2 drift_bound")
    _compare([r[0] for r in res[2:]], ref, "stale hybrid gcnii 2x2 drift_bound (way 1)")
    _same_schedule([r[0] for r in res], ref, "stale hybrid gcnii 2x2 drift_bound")


def test_the_drift_bound_decides_which_epochs_are_exact():
    """In the oracle: a bound every drift exceeds alternates exact and stale epochs (the
    losses of ``exact_every`` 2); a bound none reaches leaves epoch 0 exact and every later
    epoch stale, each measuring a drift > 0; epoch 0's loss is the one-process loss."""
    exact = full_graph_run(epochs=1, model="gcnii", layers=4)["losses"]
    low = stale_reference(epochs=6, chunks=4, model="gcnii", layers=4, drift_bound=1e-9)
    # the same gradient scale (each schedule's default differs: 2 under --drift-bound, 1 under --exact-every)
    every2 = stale_reference(epochs=6, chunks=4, model="gcnii", layers=4, exact_every=2, grad_scale=2.0)
    assert low["exact"] == [True, False] * 3 and low["losses"] == every2["losses"]
    high = stale_reference(epochs=6, chunks=4, model="gcnii", layers=4, drift_bound=1e9)
    assert high["exact"] == [True] + [False] * 5 and all(d > 0 for d in high["drift"][1:])
    assert high["losses"][0] == pytest.approx(exact[0], rel=1e-5) and high["losses"][2:] != low["losses"][2:]


def test_drift_bounded_schedule_survives_a_checkpoint():
    """The next epoch's kind is state: it is saved and restored (an old checkpoint without
    it keeps the default), and the fixed schedule has none to restore."""
    from gnnpipe.parallel.executor import StaleOptions
    from gnnpipe.parallel.pipeline.exact_epochs import ExactEpochs, drift_of

    ee = ExactEpochs(StaleOptions(drift_bound=0.5))
    assert ee.is_exact(0)
    ee.record(True, None)
    assert not ee.is_exact(1)
    ee.record(False, 0.7)
    saved = ee.state_dict()
    again = ExactEpochs(StaleOptions(drift_bound=0.5))
    again.record(True, None)
    again.load_state_dict(saved)
    assert again.is_exact(2) and saved == {"next_exact": True}
    again.load_state_dict(None)
    assert again.is_exact(2)
    cool = ExactEpochs(StaleOptions(drift_bound=0.5, exact_from=2))
    cool.record(True, None)
    assert [cool.is_exact(e) for e in (1, 2, 3)] == [False, True, True]
    fixed = ExactEpochs(StaleOptions(exact_every=3))
    assert [fixed.is_exact(e) for e in range(4)] == [True, False, False, True] and not fixed.measures_drift
    assert drift_of(torch.tensor([9.0, 4.0], dtype=torch.float64)) == 1.5 and drift_of(torch.zeros(2)) == 0.0


def test_exact_epochs_are_refused_in_graph_mode():
    from gnnpipe.config import TrainConfig
    from gnnpipe._base import GnnpipeError

    with pytest.raises(GnnpipeError, match="--exact-every 2: .*not --mode graph"):
        TrainConfig(mode="graph", exact_every=2)
    assert TrainConfig(mode="hybrid", ways=2, exact_every=2).exact_every == 2
    with pytest.raises(GnnpipeError, match="--drift-bound 0.5: .*not --mode graph"):
        TrainConfig(mode="graph", drift_bound=0.5)
    with pytest.raises(GnnpipeError, match="--drift-bound 0.5 and --exact-every 2 .*keep one"):
        TrainConfig(mode="pipeline", drift_bound=0.5, exact_every=2)
    for bad in (-0.1, float("nan"), float("inf")):
        with pytest.raises(GnnpipeError, match="drift_bound"):
            TrainConfig(mode="pipeline", drift_bound=bad)
    assert TrainConfig(mode="hybrid", ways=2, drift_bound=0.7).drift_bound == 0.7
    with pytest.raises(GnnpipeError, match="--exact-from 100: .*not --mode graph"):
        TrainConfig(mode="graph", exact_from=100)
    with pytest.raises(GnnpipeError, match="exact_from"):
        TrainConfig(mode="pipeline", exact_from=-1)
    assert TrainConfig(mode="pipeline", exact_every=2, exact_from=100).exact_from == 100


def test_stale_runs_have_every_2nd_epoch_exact_by_default(tmp_path):
    """The default schedule (docs/convergence-notes.md section 18): every 2nd epoch exact in
    the stale modes, none where the run is exact anyway or --drift-bound chooses; what ran is
    in config.json and the metrics mark the exact epochs."""
    import json

    import gnnpipe
    from gnnpipe.config import DEFAULT_EXACT_EVERY, TrainConfig

    assert DEFAULT_EXACT_EVERY == 2
    assert TrainConfig(mode="pipeline").exact_every == 2
    assert TrainConfig(mode="hybrid", ways=2).exact_every == 2
    assert TrainConfig(mode="graph").exact_every == 0
    assert TrainConfig(mode="pipeline", exact=True).exact_every == 0
    assert TrainConfig(mode="pipeline", drift_bound=0.7).exact_every == 0
    assert TrainConfig(mode="pipeline", exact_every=0).exact_every == 0  # the paper's schedule, asked for
    assert TrainConfig(mode="pipeline", exact_every=3).exact_every == 3
    res = gnnpipe.fit(mode="pipeline", dataset="sbm", synth_nodes=200, synth_features=8, layers=2, hidden=8,
                      chunks=4, epochs=3, eval_every=3, threads=1, out=tmp_path / "run", progress=False)
    assert [bool(m.get("exact")) for m in res.metrics] == [True, False, True]
    assert json.loads((tmp_path / "run" / "config.json").read_text())["exact_every"] == 2


def test_grad_scale_defaults_to_1_with_exact_epochs_and_2_without(tmp_path):
    """The gradient fix's scale follows the schedule (docs/convergence-notes.md section 19): 1
    under exact epochs every N, the paper's 2 under every epoch stale and for ResGCN+ (measured
    worse at 1); a scale given is kept; what ran reaches the stages (the default's losses are
    scale 1's, not scale 2's) and config.json records it."""
    import json

    import gnnpipe
    from gnnpipe.config import TrainConfig

    assert TrainConfig(mode="pipeline").grad_scale == 1.0
    assert TrainConfig(mode="hybrid", ways=2, exact_every=3).grad_scale == 1.0
    assert TrainConfig(mode="pipeline", exact_every=0).grad_scale == 2.0
    assert TrainConfig(mode="pipeline", drift_bound=0.7).grad_scale == 2.0
    assert TrainConfig(mode="pipeline", grad_scale=2.0).grad_scale == 2.0
    assert TrainConfig(mode="pipeline", exact_every=0, grad_scale=1.0).grad_scale == 1.0
    assert TrainConfig(mode="pipeline", model="resgcn+").grad_scale == 2.0
    assert TrainConfig(mode="pipeline", model="resgcn+", grad_scale=1.0).grad_scale == 1.0
    assert TrainConfig(mode="pipeline", model="sage").grad_scale == 1.0
    kw = dict(mode="pipeline", dataset="sbm", synth_nodes=200, synth_features=8, model="gcnii", layers=4, hidden=8,
              chunks=4, epochs=4, eval_every=4, threads=1, progress=False)
    losses = {}
    for name, extra in (("default", {}), ("one", {"grad_scale": 1.0}), ("two", {"grad_scale": 2.0})):
        res = gnnpipe.fit(**kw, **extra, out=tmp_path / name)
        losses[name] = [m["loss"] for m in res.metrics]
    assert losses["default"] == losses["one"]
    assert losses["default"][:2] == losses["two"][:2]  # epoch 0 exact, epoch 1's forward precedes its backward
    assert losses["default"][2:] != losses["two"][2:]
    assert json.loads((tmp_path / "default" / "config.json").read_text())["grad_scale"] == 1.0


@pytest.mark.parametrize("ways", [1, 2])
def test_history_refresh_makes_the_forward_exact(ways):
    """A refreshed epoch reads, for every neighbour outside its chunk, the row the exact
    forward computes: its loss is the one-process loss (epoch 0, same weights), where the
    stale epoch's (zero history) is not."""
    exact = full_graph_run(epochs=1, model="gcnii", layers=4)["losses"][0]
    fresh = stale_reference(epochs=1, chunks=4, ways=ways, model="gcnii", layers=4, refresh_epochs=1)["losses"][0]
    stale = stale_reference(epochs=1, chunks=4, ways=ways, model="gcnii", layers=4)["losses"][0]
    assert fresh == pytest.approx(exact, rel=1e-5)
    assert stale != pytest.approx(exact, rel=1e-3)


def test_bad_pipeline_inputs_fail_clearly():
    from gnnpipe.comm import SingleProcessCommunicator
    from gnnpipe.train import executor_for_config

    comm = SingleProcessCommunicator()
    g = load_graph_for(_cfg())
    with pytest.raises(GnnpipeError, match="pipeline runs one stage per rank"):
        executor_for_config(_cfg(mode="pipeline", stages=2, model="gcn", layers=4), comm, g)
    with pytest.raises(GnnpipeError, match=r"chunks"):
        _cfg(mode="pipeline", chunks=-1)


def test_plan_with_other_chunk_count_is_refused(tmp_path):
    from gnnpipe.comm import SingleProcessCommunicator
    from gnnpipe.train import executor_for_config

    g = load_graph_for(_cfg())
    build_plan(g, parts=1, chunks=3, seed=0).save(tmp_path / "plan")
    cfg = _cfg(mode="pipeline", model="gcn", layers=2, chunks=4, plan=str(tmp_path / "plan"))
    with pytest.raises(GnnpipeError, match=r"3 chunks per part but --chunks is 4"):
        executor_for_config(cfg, SingleProcessCommunicator(), g)
    # the matching count is accepted and the plan's chunks are used
    ex, plan = executor_for_config(_cfg(mode="pipeline", model="gcn", layers=2, chunks=3, plan=str(tmp_path / "plan")),
                              SingleProcessCommunicator(), g)
    assert len(ex.stage.chunks) == 3 and plan.num_chunks == 3


HYBRID_MODELS = ["gcn", "gat", "gcnii", "resgcn+"]


@pytest.mark.parametrize("comm", COMMS_SLOW_MPI)
def test_hybrid_exact_equals_one_process(comm):
    runs = [dict(model=m, layers=4, epochs=EPOCHS, mode="hybrid", ways=2, stages=2, exact=True) for m in HYBRID_MODELS]
    res = run_ranks("helpers.rankfns:many", 4, comm, args={"fn": "pipeline_run", "runs": runs}, env=ENV, timeout_s=300)
    for i, run in enumerate(runs):
        ranks = [r[i] for r in res]
        ref = full_graph_run(model=run["model"], layers=4, epochs=EPOCHS)
        _compare(ranks[:2], ref, f"exact hybrid {run['model']} 2x2 {comm}")
        _compare(ranks[2:], ref, f"exact hybrid {run['model']} 2x2 {comm} (way 1)")


@pytest.mark.parametrize("comm", COMMS_SLOW_MPI)
def test_hybrid_stale_equals_reference_with_ways(comm):
    from gnnpipe.parallel.chunks import build_chunks

    runs = [dict(model=m, layers=4, epochs=EPOCHS, mode="hybrid", ways=2, stages=2, chunks=3, snapshot_period=4)
            for m in HYBRID_MODELS]
    res = run_ranks("helpers.rankfns:many", 4, comm, args={"fn": "pipeline_run", "runs": runs}, env=ENV, timeout_s=300)
    for i, run in enumerate(runs):
        ranks = [r[i] for r in res]
        kw = {k: v for k, v in run.items() if k not in ("mode", "stages")}
        ref = stale_reference(**kw)
        _compare(ranks[:2], ref, f"stale hybrid {run['model']} 2x2 {comm}")
        _compare(ranks[2:], ref, f"stale hybrid {run['model']} 2x2 {comm} (way 1)")
        # way link bytes: at every aggregating unit whose input is trained, each boundary row
        # travels once per epoch to each way that reads it (whatever number of its chunks
        # do) and its gradient once back: graph parallelism's bytes over the same 2 parts.
        rg, plan, cfg = ref["relabelled"], ref["plan"], ref["cfg"]
        chunks = build_chunks(rg.indptr, rg.indices, plan.chunk_ptr)
        pp = np.asarray(plan.part_ptr)
        sum_m = 0
        for w in range(2):
            ids = np.concatenate([ch.nbr_ids.numpy() for ch in chunks[3 * w : 3 * w + 3]])
            sum_m += np.unique(ids[(ids < pp[w]) | (ids >= pp[w + 1])]).size
        assert sum_m == sum(part_halo(rg, plan, w).num_halo for w in range(2))
        n_ex = 3 if cfg.model in FEATURE_FIRST_MODELS else 4  # their first layer reads constant features
        expect = 2 * 4 * sum_m * cfg.hidden * n_ex
        assert expect == graph_parallel_bytes(sum_m, rg.num_features, 4, cfg.hidden, 4, cfg.model)
        got = sum(r["bytes"].get("way_fwd", 0) + r["bytes"].get("way_bwd", 0) for r in ranks)
        assert got == expect, f"{run['model']}: hybrid way link bytes {got} != {expect}"
        pipe = sum(r["bytes"].get("pipe_act", 0) + r["bytes"].get("pipe_grad", 0) for r in ranks)
        assert pipe == pipeline_bytes(rg.num_nodes, cfg.hidden, 2, 4, h0=cfg.model == "gcnii")


def test_stale_pipeline_and_hybrid_with_the_epoch_input_transform_equal_reference():
    """With input features wider than the hidden width (40 > 16) GCN's first layer, like
    GAT's, transforms first, so the first stage transforms every input row once per epoch
    (``PipelineStage``'s epoch input transform) instead of once per chunk that reads it: the
    reference, which transforms each chunk's rows, must still agree (2 stages; 2 ways x 2
    stages, whose first stages each transform their way's rows)."""
    runs = [dict(model=m, layers=4, epochs=EPOCHS, chunks=5, snapshot_period=3, synth_features=40)
            for m in ("gcn", "gat")]
    res = run_ranks("helpers.rankfns:many", 2, "torch", args={"fn": "pipeline_run", "runs": runs}, env=ENV, timeout_s=300)
    for i, run in enumerate(runs):
        _compare([r[i] for r in res], stale_reference(**run), f"stale {run['model']} F=40 S=2")
    runs = [dict(model="gcn", layers=4, epochs=EPOCHS, mode="hybrid", ways=2, stages=2, chunks=3, snapshot_period=4,
                 synth_features=40)]
    res = run_ranks("helpers.rankfns:many", 4, "torch", args={"fn": "pipeline_run", "runs": runs}, env=ENV, timeout_s=300)
    ref = stale_reference(**{k: v for k, v in runs[0].items() if k not in ("mode", "stages")})
    _compare([r[0] for r in res[:2]], ref, "stale hybrid gcn F=40 2x2")
    _compare([r[0] for r in res[2:]], ref, "stale hybrid gcn F=40 2x2 (way 1)")
