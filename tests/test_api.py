"""The Python API: fit() from a Graph object, launch(), Result, export and merge-checkpoint.

Multi-rank cases run through gnnpipe.launch itself, with a function of this file (the ranks
import the file by path, which is what launch does for a script's functions).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import gnnpipe
from gnnpipe.data import synthetic
from gnnpipe.export import load_model, merge_checkpoint
from gnnpipe.models import ModelConfig, build_model

HERE = Path(__file__).resolve()
SMALL = dict(synth_nodes=400, synth_features=8, synth_classes=4)
OPTS = dict(model="gcn", layers=4, hidden=16, epochs=3, eval_every=1, dropout=0.0, seed=3)


def small_graph():
    return synthetic.sbm(num_nodes=400, num_classes=4, avg_degree=6, num_features=8, seed=1)


def test_fit_in_one_process_gives_a_plain_model_and_metrics():
    g = small_graph()
    res = gnnpipe.fit(g, mode="graph", **OPTS)
    assert isinstance(res.model, torch.nn.Module) and len(res.metrics) == 3
    assert res.summary["epochs"] == 3 and "history" not in res.summary
    # the model is callable on a PyG-style (x, edge_index), and equals predict()
    data = g.to_pyg()
    res.model.eval()
    with torch.no_grad():
        out = res.model(data.x, data.edge_index)
    logits = res.predict()
    assert logits.shape == (g.num_nodes, g.num_classes)
    torch.testing.assert_close(out, logits)
    # predict() agrees with the trainer's own exact evaluation at the last epoch
    test = np.asarray(g.test_mask)
    acc = float((logits.argmax(1).numpy()[test] == np.asarray(g.labels)[test]).mean())
    assert acc == pytest.approx(res.metrics[-1]["test_acc"])
    # the weights load into the user's own un-parallelised model
    plain = build_model(res.model.config, seed=0)
    plain.load_state_dict(res.model.gnn.state_dict())


def test_fit_refuses_bad_input_in_one_line():
    with pytest.raises(gnnpipe.GnnpipeError, match="unexpected keyword|options are gnnpipe-train"):
        gnnpipe.fit(small_graph(), epochz=3)
    with pytest.raises(gnnpipe.GnnpipeError, match="expected a gnnpipe.Graph"):
        gnnpipe.fit(object(), epochs=1)
    with pytest.raises(gnnpipe.GnnpipeError, match="give the data once"):
        gnnpipe.fit(small_graph(), dataset="cora")


def _rank_fit(comm, mode, out=None, export=None, **kw):
    """One rank of a launched fit; returns what the test compares."""
    g = small_graph()
    res = gnnpipe.fit(g, comm=comm, mode=mode, out=out, export=export, **kw)
    return {"state": res.model.gnn.state_dict(), "losses": [m["loss"] for m in res.metrics],
            "pred": res.predict(), "rank": comm.rank}


@pytest.mark.parametrize("mode,extra", [("graph", {}), ("pipeline", {"exact": True}),
                                        pytest.param("hybrid", {"exact": True, "ways": 2}, marks=pytest.mark.slow)])
def test_launched_fit_equals_one_process(mode, extra):
    world = 4 if mode == "hybrid" else 2
    one = gnnpipe.fit(small_graph(), mode="graph", **OPTS)
    got = gnnpipe.launch(f"{HERE}:_rank_fit", world, args=dict(mode=mode, **OPTS, **extra), timeout_s=600)
    assert got["rank"] == 0
    np.testing.assert_allclose(got["losses"], [m["loss"] for m in one.metrics], rtol=1e-4)
    for k, v in one.model.gnn.state_dict().items():
        torch.testing.assert_close(got["state"][k], v, rtol=1e-4, atol=1e-5, msg=lambda m: f"{mode} {k}: {m}")
    torch.testing.assert_close(got["pred"], one.predict(), rtol=1e-4, atol=1e-4)


def test_export_equals_merged_checkpoint_and_loads_into_a_plain_model(tmp_path):
    run, model_file = tmp_path / "run", tmp_path / "model.pt"
    got = gnnpipe.launch(f"{HERE}:_rank_fit", 2, args=dict(mode="pipeline", out=str(run), export=str(model_file),
                                                            checkpoint_every=3, chunks=3, **OPTS), timeout_s=600)
    exported = torch.load(model_file, weights_only=True)
    merged, mc, tc = merge_checkpoint(run)
    assert exported["state_dict"].keys() == merged.keys() == got["state"].keys()
    for k in merged:
        assert torch.equal(merged[k], exported["state_dict"][k]) and torch.equal(merged[k], got["state"][k]), k
    assert mc == exported["model_config"] and tc["mode"] == "pipeline"
    plain = build_model(ModelConfig(**mc), seed=0)
    plain.load_state_dict(exported["state_dict"])  # the user's own un-parallelised model
    gnn = load_model(model_file)
    for k, v in plain.state_dict().items():
        assert torch.equal(gnn.state_dict()[k], v)
    # the tool writes the same file from the checkpoint alone
    from gnnpipe.cli.tools import main

    assert main(["merge-checkpoint", str(run), "--out", str(tmp_path / "m2.pt")]) == 0
    again = torch.load(tmp_path / "m2.pt", weights_only=True)["state_dict"]
    assert all(torch.equal(again[k], merged[k]) for k in merged)
    assert main(["merge-checkpoint", str(run), "--out", str(tmp_path / "m2.pt")]) == 2  # exists: refused


def test_merge_checkpoint_refuses_a_folder_without_checkpoints(tmp_path, capsys):
    from gnnpipe.cli.tools import main

    assert main(["merge-checkpoint", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err


def _rank_fail(comm):
    raise RuntimeError(f"rank {comm.rank} fails on purpose")


def test_launch_reports_a_failing_rank():
    with pytest.raises(gnnpipe.GnnpipeError, match="fails on purpose"):
        gnnpipe.launch(f"{HERE}:_rank_fail", 2, timeout_s=120)


def test_launch_refuses_what_ranks_cannot_import():
    with pytest.raises(gnnpipe.GnnpipeError, match="module-level function"):
        gnnpipe.launch(lambda comm: 0, 2)


@pytest.mark.parametrize("env,threads,expect", [({"OMP_NUM_THREADS": "1"}, 0, 1), ({}, 1, 1), ({}, 0, None)])
def test_user_thread_count_wins(env, threads, expect):
    """OMP_NUM_THREADS and --threads win over the automatic share (checked in a fresh process)."""
    code = ("import torch; from gnnpipe.comm import detect_launch, threads_per_rank; from gnnpipe.config import TrainConfig; "
            "from gnnpipe.comm import apply_threads; "
            f"n = apply_threads(TrainConfig(threads={threads}).threads, detect_launch()); print(n, threads_per_rank())")
    base = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    out = subprocess.run([sys.executable, "-c", code], env={**base, **env}, capture_output=True, text=True, check=True)
    n, share = map(int, out.stdout.split())
    assert n == (share if expect is None else expect)


def test_import_gnnpipe_changes_no_warning_filters():
    code = "import warnings; before = list(warnings.filters); import gnnpipe; print(warnings.filters == before)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"
