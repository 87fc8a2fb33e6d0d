"""gnnpipe-train end to end through real launchers: outputs, metrics, and bad input.

Bad input must give one clear error on rank 0 and a non-zero exit on every rank, quickly
(no rank left waiting on a peer).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent
SMALL = ["--synth-nodes", "600", "--synth-degree", "6", "--synth-features", "8", "--hidden", "8",
         "--epochs", "3", "--eval-every", "2", "--no-progress"]
ENV = dict(os.environ, OMP_NUM_THREADS="1")


def mpirun(np_: int, *args: str, timeout: int = 180) -> subprocess.CompletedProcess:
    cmd = [str(BIN / "mpirun"), "-np", str(np_), str(BIN / "gnnpipe-train"), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=ENV)


def errors(p: subprocess.CompletedProcess) -> list[str]:
    return [ln for ln in p.stderr.splitlines() if "error:" in ln]


@pytest.mark.mpi
@pytest.mark.parametrize("mode,extra", [
    ("graph", ["--model", "gcn", "--layers", "2"]),
    ("pipeline", ["--model", "gcnii", "--layers", "4", "--chunks", "4"]),
    ("hybrid", ["--model", "gcnii", "--layers", "4", "--ways", "2", "--stages", "2", "--chunks", "2"]),
])
def test_train_writes_config_and_metrics(tmp_path, mode, extra):
    out = tmp_path / "run"
    p = mpirun(4, "--mode", mode, *extra, *SMALL, "--out", str(out))
    assert p.returncode == 0, p.stderr[-3000:]
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["mode"] == mode and cfg["world_size"] == 4 and len(cfg["dataset_hash"]) == 64
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in lines] == [0, 1, 2]
    for r in lines:
        for key in ("loss", "train_acc", "epoch_time_s", "compute_s", "comm_s", "bubble_s", "bytes_sent", "peak_rss_mb"):
            assert key in r, key
        assert r["peak_rss_mb"] > 10
    assert "val_acc" in lines[1] and "test_acc" in lines[2] and "val_acc" not in lines[0]
    if mode == "graph":
        assert lines[0]["bytes_sent"]["halo_fwd"] > 0 and lines[0]["bytes_sent"]["pipe_act"] == 0
    else:
        assert lines[0]["bytes_sent"]["pipe_act"] > 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["epochs"] == 3 and summary["best_epoch"] in (1, 2)
    assert "done: 3 epochs" in p.stdout


def test_torchrun_launch(tmp_path):
    out = tmp_path / "run"
    cmd = [str(BIN / "torchrun"), "--standalone", "--nproc-per-node", "2", "-m", "gnnpipe.train",
           "--mode", "graph", "--model", "sage", "--layers", "2", *SMALL, "--out", str(out)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=ENV)
    assert p.returncode == 0, p.stderr[-3000:]
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["world_size"] == 2 and cfg["comm"] == "auto"
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 3


def test_one_process(tmp_path):
    from gnnpipe.cli.train import main

    assert main(["--mode", "graph", "--model", "gcn", "--layers", "2", *SMALL, "--out", str(tmp_path / "r")]) == 0
    assert (tmp_path / "r" / "summary.json").exists()


@pytest.mark.mpi
def test_world_size_not_matching_plan(tmp_path):
    plan_dir = tmp_path / "plan"
    from gnnpipe.config import TrainConfig
    from gnnpipe.partition import build_plan
    from gnnpipe.data.load import load_graph_for

    g = load_graph_for(TrainConfig(synth_nodes=600, synth_degree=6, synth_features=8))
    build_plan(g, parts=3, chunks=1, seed=0).save(plan_dir)
    t0 = time.time()
    p = mpirun(2, "--mode", "graph", "--model", "gcn", "--layers", "2", *SMALL, "--plan", str(plan_dir),
               "--out", str(tmp_path / "run"))
    assert p.returncode != 0
    errs = errors(p)
    assert len(errs) == 1, p.stderr
    assert "3 parts" in errs[0] and "2" in errs[0]
    assert time.time() - t0 < 60
    assert not (tmp_path / "run").exists()


@pytest.mark.mpi
def test_plan_of_another_dataset_is_refused(tmp_path):
    from gnnpipe.config import TrainConfig
    from gnnpipe.partition import build_plan
    from gnnpipe.data.load import load_graph_for

    other = load_graph_for(TrainConfig(synth_nodes=600, synth_degree=6, synth_features=8, seed=1))
    build_plan(other, parts=2, chunks=1, seed=0).save(tmp_path / "plan")
    p = mpirun(2, "--mode", "graph", "--model", "gcn", "--layers", "2", *SMALL, "--plan", str(tmp_path / "plan"))
    assert p.returncode != 0
    errs = errors(p)
    assert len(errs) == 1 and "hash" in errs[0], p.stderr


@pytest.mark.mpi
@pytest.mark.parametrize("args,needle", [
    (["--model", "transformer"], "invalid choice"),
    (["--mode", "pipeline", "--model", "gcn", "--layers", "1"], "hybrid"),
    (["--mode", "hybrid", "--ways", "3", "--stages", "2"], "world size"),
    (["--dropout", "1.5"], "dropout"),
])
def test_bad_options_one_error_every_rank_fails(args, needle):
    p = mpirun(2, *SMALL, *args)
    assert p.returncode != 0
    errs = errors(p)
    assert len(errs) == 1, p.stderr
    assert needle in errs[0]
