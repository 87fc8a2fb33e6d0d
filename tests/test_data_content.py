"""What data holds is checked where it enters (issue 31): finite features, a symmetric
adjacency, disjoint published splits; and outputs never land inside a dataset, a plan, the
package or a checkout's root; a config file that names one field twice is refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from torch_geometric.data import Data

from gnnpipe._base import GnnpipeError
from gnnpipe.data.graph import Graph

REPO = Path(__file__).resolve().parents[1]


def _path_graph(n: int = 6, x=None) -> Graph:
    src = np.arange(n - 1)
    x = np.ones((n, 3), np.float32) if x is None else x
    split = np.arange(n) % 3
    return Graph.from_edges(src, src + 1, n, x, np.arange(n) % 2, split == 0, split == 1, split == 2, name="p")


@pytest.mark.parametrize("sparse", [False, True])
def test_non_finite_features_are_refused_with_the_count_and_the_first_place(sparse, tmp_path):
    x = np.ones((6, 3), np.float32)
    x[2, 1], x[4, 0] = np.nan, np.inf
    g = _path_graph(x=sp.csr_matrix(x) if sparse else x)
    with pytest.raises(GnnpipeError, match=r"features: 2 values are NaN or infinite \(first at row 2, column 1\)"):
        g.save(tmp_path / "g")
    assert not (tmp_path / "g").exists()
    data = Data(x=torch.from_numpy(x), edge_index=torch.tensor([[0, 1], [1, 0]]), y=torch.zeros(6, dtype=torch.long),
                train_mask=torch.ones(6, dtype=torch.bool), val_mask=torch.ones(6, dtype=torch.bool),
                test_mask=torch.ones(6, dtype=torch.bool), num_nodes=6)
    with pytest.raises(GnnpipeError, match="features: 2 values are NaN or infinite"):
        Graph.from_pyg(data)


def test_an_asymmetric_adjacency_is_refused_naming_an_edge_without_its_reverse(tmp_path):
    g = _path_graph()
    # drop the edge 3 -> 2 (keep 2 -> 3): rebuild the CSR without it
    rows = np.repeat(np.arange(6), np.diff(g.indptr))
    keep = ~((rows == 3) & (g.indices == 2))
    indptr = np.concatenate([[0], np.cumsum(np.bincount(rows[keep], minlength=6))])
    bad = Graph(indptr, g.indices[keep], g.features, g.labels, g.train_mask, g.val_mask, g.test_mask, name="p",
                num_classes=2)
    with pytest.raises(GnnpipeError, match=r"not symmetric: 1 of 9 directed edges have no reverse \(first: 2 -> 3\)"):
        bad.save(tmp_path / "g")
    assert not (tmp_path / "g").exists()


def test_a_prepared_dataset_written_without_the_checks_is_refused_by_the_trainer(tmp_path, monkeypatch):
    x = np.ones((6, 3), np.float32)
    x[5, 2] = np.nan
    g = _path_graph(x=x)
    monkeypatch.setattr(Graph, "check_content", lambda self, disjoint_masks=False: None)  # an older gnnpipe
    g.save(tmp_path / "old")
    monkeypatch.undo()
    p = subprocess.run([sys.executable, "-m", "gnnpipe.train", "--dataset", str(tmp_path / "old"), "--mode", "graph",
                        "--model", "gcn", "--layers", "2", "--epochs", "1", "--out", str(tmp_path / "run")],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert p.returncode != 0
    lines = [ln for ln in p.stderr.splitlines() if "error" in ln]
    assert lines and "features: 1 values are NaN or infinite (first at row 5, column 2)" in lines[-1], p.stderr
    assert str(tmp_path / "old") in lines[-1]


def test_a_published_split_that_overlaps_is_refused_at_prepare(tmp_path, monkeypatch):
    from gnnpipe.data import catalog
    from test_loaders import make_catalog, make_hetero

    make_catalog(tmp_path, monkeypatch, sha_line="")  # a toy card whose file hash is not known
    raw = tmp_path / "raw" / "toy" / "toy.npz"
    make_hetero(raw)
    with np.load(raw) as z:
        arrays = dict(z)
    arrays["val_masks"][0] |= arrays["train_masks"][0]  # every training node of split 0 also in val
    np.savez(raw, **arrays)
    n_both = int(arrays["train_masks"][0].sum())
    first = int(np.argmax(arrays["train_masks"][0]))
    with pytest.raises(GnnpipeError, match=rf"train_mask, val_mask: {n_both} nodes are in both \(first: node {first}\)"):
        catalog.prepare("toy", split=0)
    assert not (tmp_path / "root" / "toy").exists()


@pytest.mark.parametrize("where", ["dataset", "package", "checkout"])
def test_a_run_is_never_written_into_a_dataset_the_package_or_a_checkout(where, tmp_path):
    _path_graph().save(tmp_path / "ds")
    out = {"dataset": tmp_path / "ds" / "run", "package": REPO / "gnnpipe" / "run-here",
           "checkout": REPO}[where]
    before = sorted(p.name for p in (tmp_path / "ds").iterdir())
    p = subprocess.run([sys.executable, "-m", "gnnpipe.train", "--config", "tiny", "--epochs", "1", "--out", str(out)],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert {"dataset": "inside a prepared gnnpipe dataset", "package": "inside the gnnpipe package",
            "checkout": "the root of a source checkout"}[where] in p.stderr
    assert sorted(p.name for p in (tmp_path / "ds").iterdir()) == before
    assert not (REPO / "gnnpipe" / "run-here").exists() and not (REPO / "config.json").exists()


def test_a_config_file_naming_one_field_twice_is_refused(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text("snapshot-period = 5\nsnapshot_period = 7\n")
    p = subprocess.run([sys.executable, "-m", "gnnpipe.train", "--config", str(cfg), "--out", str(tmp_path / "r")],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert p.returncode == 2
    assert "field 'snapshot_period' is given 2 times ('snapshot-period', 'snapshot_period')" in p.stderr
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("content", ["my notes\n", '[profile]\nname = "mine"\nsource = "hand-made"\n'])
def test_calibrate_never_replaces_a_file_it_did_not_write(content, tmp_path):
    mine = tmp_path / "mine.toml"
    mine.write_text(content)
    p = subprocess.run([sys.executable, "-c", "import sys; from gnnpipe.cli.plan import main; "
                        "sys.exit(main(['calibrate', '--out', sys.argv[1]]))", str(mine)],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert p.returncode == 2 and "was not written by gnnpipe-plan calibrate" in p.stderr, p.stderr
    assert mine.read_text() == content


def test_calibrate_may_replace_a_profile_it_wrote(tmp_path):
    from gnnpipe.cli.plan import _check_out_file

    ours = tmp_path / "cpu-this-machine.toml"
    ours.write_text('[profile]\nname = "cpu-this-machine"\nsource = "gnnpipe-plan calibrate, 2026-12-06"\n')
    _check_out_file(ours)  # no error: a re-calibration replaces its own earlier profile


_WRITER = """
import sys, time
from pathlib import Path
from gnnpipe.cli import run_cli
from gnnpipe.fsutil import atomic_directory

def main(argv):
    with atomic_directory(Path(argv[0])) as tmp:  # what prepare, synth and partition write through
        (tmp / "part.npy").write_bytes(b"x" * 1000)
        Path(argv[1]).write_text("writing")
        time.sleep(60)  # SIGTERM arrives here
    return 0

sys.exit(run_cli(main, sys.argv[1:], prog="gnnpipe-data"))
"""


def test_sigterm_during_a_write_leaves_no_temporary_and_says_so(tmp_path):
    """A command killed with SIGTERM while it writes (prepare, synth, partition: all through
    atomic_directory under run_cli) removes its temporary directory, leaves no output and
    exits 143 with one line."""
    import signal
    import time

    out, flag = tmp_path / "big", tmp_path / "flag"
    p = subprocess.Popen([sys.executable, "-c", _WRITER, str(out), str(flag)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    deadline = time.monotonic() + 120
    while not flag.exists() and time.monotonic() < deadline and p.poll() is None:
        time.sleep(0.02)
    assert flag.exists() and list(tmp_path.glob(".big.tmp-*")), p.communicate(timeout=5)
    os.kill(p.pid, signal.SIGTERM)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 143, err
    assert err.strip().splitlines() == ["gnnpipe-data: terminated (SIGTERM); nothing partial was left"]
    assert not list(tmp_path.glob(".big.*")) and not out.exists()


def test_a_dead_writers_temporary_is_swept_by_the_next_run(tmp_path):
    from gnnpipe.fsutil import sweep_stale

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()  # a pid that has exited
    stale = tmp_path / f".g.tmp-{dead}-0123abcd"
    stale.mkdir()
    (stale / "indptr.npy").write_bytes(b"x")
    live = tmp_path / f".g.tmp-{os.getpid()}-0123abcd"  # a running writer's (ours): kept
    live.mkdir()
    _path_graph().save(tmp_path / "g")  # the next write of the same output sweeps
    assert not stale.exists() and live.is_dir() and (tmp_path / "g" / "meta.json").is_file()
    assert sweep_stale(tmp_path / "g") == []


@pytest.mark.parametrize("rows, rc, needle", [
    ([{"name": "a", "epoch_s": 1.0}], 0, None),
    ([{"name": "a", "error": "boom"}, {"name": "b", "epoch_s": 1.0}], 1, "1 of 2 configuration(s) failed: a"),
    ([], 1, "no configuration produced a result"),
])
def test_a_benchmark_whose_configurations_failed_exits_non_zero_naming_them(rows, rc, needle, monkeypatch, tmp_path,
                                                                            capsys):
    from gnnpipe.bench import cli

    monkeypatch.setattr(cli, "_dispatch", lambda args: (rows, "table"))
    assert cli.main(["memory", "--out", str(tmp_path / "r")]) == rc
    err = capsys.readouterr().err
    assert (needle is None and not err) or (needle in err and len(err.strip().splitlines()) == 1)


@pytest.mark.slow
@pytest.mark.mpi
def test_a_benchmark_runs_from_any_directory_with_a_relative_out(tmp_path):
    """The ranks run in the checkout; a relative --out used to leave them without their jobs
    file, and the benchmark exited 0 with no rows."""
    p = subprocess.run([sys.executable, "-m", "gnnpipe.bench", "epoch", "--quick", "--out", "rel"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-2000:]
    rows = json.loads((tmp_path / "rel" / "epoch-quick" / "results.json").read_text())["rows"]
    assert rows and not any(r.get("error") for r in rows)
