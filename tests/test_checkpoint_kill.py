"""A real SIGKILL at every step of the checkpoint commit protocol, then ``--resume``.

Each case runs ``gnnpipe-train`` in a process of its own with a fault injector that lets the
checkpoint of epoch 5 (the third write, the first that prunes) proceed to one named point
and then SIGKILLs the process there: half a rank file on disk, a rank file written but not
renamed, renamed but not committed, ``COMMIT.json`` written but not renamed, committed but
``latest`` not updated, ``latest`` updated but not pruned, half-way through pruning. The run
is then resumed with ``gnnpipe-train --resume`` and must:

- resume from the checkpoint ``latest`` named when it died, or the newest committed one if
  that is not committed: epoch 3 until ``latest`` is renamed, epoch 5 after (``latest``
  decides, not the newest ``COMMIT.json``: a run resumed from an earlier checkpoint must not
  jump to the later epochs of the timeline it abandoned);
- end with metrics identical to an uninterrupted run's, every epoch;
- leave no temporary file and no uncommitted checkpoint directory behind.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from gnnpipe import checkpoint as ckpt

from test_checkpoint import _metrics, _same_metrics  # noqa: E402

ARGS = ["--mode", "graph", "--dataset", "sbm", "--synth-nodes", "300", "--synth-degree", "6",
        "--synth-classes", "4", "--synth-features", "12", "--model", "gcn", "--layers", "3",
        "--hidden", "16", "--seed", "3", "--eval-every", "2", "--epochs", "10",
        "--checkpoint-every", "2", "--threads", "1", "--no-progress"]
KILLED_EPOCH = 5  # checkpoints are written after epochs 1, 3, 5, ...; the third prunes epoch 1

# Runs gnnpipe-train's console entry with the file operations of the checkpoint writer
# wrapped: once the rank file of epoch-$FAULT_EPOCH is being saved the injector is armed,
# and it SIGKILLs this process at the point $FAULT_POINT names.
_INJECTED_MAIN = r"""
import io, os, shutil, signal
import torch

POINT, TARGET = os.environ["FAULT_POINT"], "epoch-" + os.environ["FAULT_EPOCH"]
armed = False

def die():
    os.kill(os.getpid(), signal.SIGKILL)

_save = torch.save
def save(obj, f, *a, **k):
    global armed
    if TARGET in str(getattr(f, "name", f)):
        armed = True
        if POINT == "rank-file-half":
            buf = io.BytesIO()
            _save(obj, buf, *a, **k)
            f.write(buf.getvalue()[: len(buf.getvalue()) // 2])
            f.flush()
            os.fsync(f.fileno())
            die()
    return _save(obj, f, *a, **k)
torch.save = save

_replace = os.replace
def replace(src, dst, *a, **k):
    s = str(src)
    if armed and (POINT, s.rsplit("/", 1)[-1]) in {("rank-file-written", "rank0.pt.tmp"),
                                                   ("commit-written", "COMMIT.json.tmp"),
                                                   ("commit-renamed", "latest.tmp")}:
        die()
    out = _replace(src, dst, *a, **k)
    if armed and (POINT, s.rsplit("/", 1)[-1]) in {("rank-file-renamed", "rank0.pt.tmp"),
                                                   ("latest-renamed", "latest.tmp")}:
        die()
    return out
os.replace = replace

_rmtree = shutil.rmtree
def rmtree(path, *a, **k):
    if armed and POINT == "pruning":  # the old directory's COMMIT.json is already gone
        die()
    return _rmtree(path, *a, **k)
shutil.rmtree = rmtree

from gnnpipe.cli.train import entry
entry()
"""

# point -> the checkpoint --resume must continue from
POINTS = {
    "rank-file-half": KILLED_EPOCH - 2,
    "rank-file-written": KILLED_EPOCH - 2,
    "rank-file-renamed": KILLED_EPOCH - 2,
    "commit-written": KILLED_EPOCH - 2,
    "commit-renamed": KILLED_EPOCH - 2,  # committed, but `latest` still names epoch 3
    "latest-renamed": KILLED_EPOCH,
    "pruning": KILLED_EPOCH,
}
# Two cases run by default (one each side of the commit point); the rest in the slow pass.
DEFAULT = {"rank-file-half", "latest-renamed"}


def _train(args: list[str], env: dict | None = None, timeout: float = 240) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).parent / "gnnpipe-train"
    env = dict(os.environ, OMP_NUM_THREADS="1", **(env or {}))
    for k in ("RANK", "WORLD_SIZE", "PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"):
        env.pop(k, None)
    if env.get("FAULT_POINT"):
        cmd = [sys.executable, "-c", _INJECTED_MAIN, *args]
    else:
        cmd = [str(exe), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> list[dict]:
    out = tmp_path_factory.mktemp("ref") / "run"
    p = _train([*ARGS, "--out", str(out)])
    assert p.returncode == 0, p.stderr[-3000:]
    return _metrics(out)


@pytest.mark.parametrize("point", [p if p in DEFAULT else pytest.param(p, marks=pytest.mark.slow)
                                   for p in POINTS])
def test_sigkill_during_checkpoint_write_then_resume_equals_uninterrupted(tmp_path, reference, point):
    out = tmp_path / "run"
    p = _train([*ARGS, "--out", str(out)], env={"FAULT_POINT": point, "FAULT_EPOCH": str(KILLED_EPOCH)})
    assert p.returncode == -signal.SIGKILL, f"the injector did not fire at {point}: rc {p.returncode}\n{p.stderr[-2000:]}"
    died = _metrics(out)
    assert [r["epoch"] for r in died] == list(range(KILLED_EPOCH + 1)), "killed during epoch 5's checkpoint"
    assert ckpt.checkpoint_dir(out, KILLED_EPOCH).is_dir()

    want = POINTS[point]
    assert ckpt.find_checkpoint(out).name == f"epoch-{want}", f"{point}: --resume would use the wrong checkpoint"
    r = _train(["--resume", str(out)])
    assert r.returncode == 0, f"{point}: resume failed\n{r.stderr[-3000:]}"
    assert f"resumed from {ckpt.checkpoint_dir(out, want)}" in r.stderr, r.stderr[-2000:]

    _same_metrics(_metrics(out), reference, f"killed at {point} of epoch {KILLED_EPOCH}'s checkpoint")
    left = sorted(str(f.relative_to(out)) for f in out.rglob("*.tmp"))
    assert left == [], f"{point}: temporary files left behind: {left}"
    every = [e for e, _ in ckpt.list_checkpoints(out, committed_only=False)]
    committed = [e for e, _ in ckpt.list_checkpoints(out)]
    assert every == committed == [7, 9], f"{point}: checkpoint directories {every}, committed {committed}"
    assert json.loads((ckpt.checkpoint_dir(out, 9) / ckpt.COMMIT_FILE).read_text())["epoch"] == 9
