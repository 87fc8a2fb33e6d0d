"""``gnnpipe-data`` in-process and as the installed console script: exit codes, one-line
errors, --force, and no partial output after a failed or interrupted prepare."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gnnpipe.cli.data import main
from gnnpipe.data import graph as graph_mod
from gnnpipe.data.graph import Graph

from test_loaders import make_catalog

SCRIPT = Path(sys.executable).with_name("gnnpipe-data")


def err_lines(capsys) -> list[str]:
    return [l for l in capsys.readouterr().err.splitlines() if l.strip()]


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """A one-card catalogue ('toy', heterophilous npz) with raw files and an empty data root."""
    make_catalog(tmp_path, monkeypatch)
    return tmp_path


def test_prepare_info_list_roundtrip(toy, capsys):
    assert main(["prepare", "toy", "--split", "1"]) == 0
    out = capsys.readouterr().out
    assert "toy: prepared" in out and "nodes" in out and "ok" in out
    assert main(["info", "toy", "--json", "--verify"]) == 0
    info = json.loads(capsys.readouterr().out)
    g = Graph.load(toy / "root" / "toy")
    assert (info["nodes"], info["edges"], info["features"], info["classes"]) == (8, 12, 4, 3)
    assert info["train"] == int(g.train_mask.sum()) and info["verified"] is True
    assert main(["list"]) == 0
    row = [l for l in capsys.readouterr().out.splitlines() if l.startswith("toy ")][0].split()
    assert row[-2:] == ["yes", "yes"]  # raw folder present, prepared


def test_existing_output_refused_then_forced(toy, capsys):
    assert main(["prepare", "toy"]) == 0
    capsys.readouterr()
    before = Graph.load(toy / "root" / "toy").content_hash
    assert main(["prepare", "toy", "--split", "2"]) == 2
    lines = err_lines(capsys)
    assert len(lines) == 1 and "output directory exists (use --force" in lines[0]
    assert main(["prepare", "toy", "--split", "2", "--force"]) == 0
    after = Graph.load(toy / "root" / "toy")
    assert after.content_hash != before and after.meta["split_index"] == 2


@pytest.mark.parametrize("argv, message", [
    (["prepare", "nope"], "unknown dataset 'nope'"),
    (["prepare", "toy", "--split", "7"], "split 7 out of range: valid splits are 0..2"),
    (["prepare", "toy", "--raw", "/nonexistent/raw"], "raw folder /nonexistent/raw not found"),
    (["info", "toy"], "dataset 'toy' not found"),
])
def test_user_errors_one_line_exit_2(toy, capsys, argv, message):
    assert main(argv) == 2
    lines = err_lines(capsys)
    assert len(lines) == 1 and lines[0].startswith("gnnpipe-data: error: ") and message in lines[0]
    assert not (toy / "root" / "toy").exists()


def test_debug_keeps_traceback(toy):
    from gnnpipe import GnnpipeError

    with pytest.raises(GnnpipeError, match="unknown dataset"):
        main(["prepare", "nope", "--debug"])


def test_interrupted_save_leaves_nothing(toy, monkeypatch, capsys):
    calls = {"n": 0}
    real_save = np.save

    def flaky_save(*a, **k):  # fail on the third array, after two files were written
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real_save(*a, **k)

    monkeypatch.setattr(graph_mod.np, "save", flaky_save)
    assert main(["prepare", "toy"]) == 130
    assert "interrupted" in capsys.readouterr().err
    root = toy / "root"
    assert calls["n"] == 3
    assert not root.exists() or list(root.iterdir()) == []  # no final dir, no temp dir
    monkeypatch.setattr(graph_mod.np, "save", real_save)
    assert main(["info", "toy"]) == 2


def test_failing_loader_leaves_nothing(toy, monkeypatch, capsys):
    from gnnpipe import GnnpipeError
    from gnnpipe.data import loaders

    def boom(raw_dir, filename, *, split=0, hashes=None, name=None):
        raise GnnpipeError("simulated failure midway")

    monkeypatch.setattr(loaders, "load_heterophilous", boom)
    assert main(["prepare", "toy"]) == 2
    assert "simulated failure midway" in capsys.readouterr().err
    assert not (toy / "root" / "toy").exists()


def test_prepare_all_skips_existing(toy, capsys):
    assert main(["prepare", "--all"]) == 0
    assert "toy: prepared" in capsys.readouterr().out
    assert main(["prepare", "--all"]) == 0
    assert "toy: skipped" in capsys.readouterr().out


def test_synth_then_info(tmp_path, capsys):
    out = tmp_path / "sbm"
    argv = ["synth", "sbm", "--nodes", "300", "--classes", "3", "--avg-degree", "6", "--homophily", "0.9",
            "--features", "8", "--signal", "1.0", "--seed", "1", "--out", str(out)]
    assert main(argv) == 0
    capsys.readouterr()
    assert main(["info", str(out), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["nodes"] == 300 and info["classes"] == 3 and info["features"] == 8
    assert info["edge_homophily"] > 0.7  # asked for 0.9
    assert main(argv) == 2  # exists
    assert main(argv + ["--force"]) == 0
    assert main(["synth", "rmat", "--nodes", "256", "--edges", "2000", "--seed", "2", "--out", str(tmp_path / "r")]) == 0
    assert Graph.load(tmp_path / "r").num_edges == 2000


def test_console_script_subprocess(toy):
    assert SCRIPT.exists(), SCRIPT
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    ok = subprocess.run([str(SCRIPT), "prepare", "toy"], env=env, capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    bad = subprocess.run([str(SCRIPT), "prepare", "toy"], env=env, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2
    assert bad.stderr.strip().count("\n") == 0 and "Traceback" not in bad.stderr
    dbg = subprocess.run([str(SCRIPT), "prepare", "toy", "--debug"], env=env, capture_output=True, text=True,
                         timeout=120)
    assert dbg.returncode != 0 and "Traceback" in dbg.stderr
    info = subprocess.run([str(SCRIPT), "info", "toy", "--json"], env=env, capture_output=True, text=True,
                          timeout=120)
    assert info.returncode == 0 and json.loads(info.stdout)["nodes"] == 8
