"""Run directories: the lock, finished runs, --overwrite, and bad --out on several ranks.

See :mod:`gnnpipe.train.rundir` for the rules. Two processes on one ``--out``: the second refuses at
once naming the first's pid. A bad ``--out`` on two MPI ranks: every rank exits non-zero
promptly (rank 0 reports through the setup agreement; nobody waits out the timeout).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gnnpipe import GnnpipeError
from gnnpipe.train.rundir import LOCK_FILE, MetricsFile, claim_run_dir, default_run_dir

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
ENV = {**os.environ, "PYTHONPATH": str(HERE.parent), "OMP_NUM_THREADS": "1"}
SMALL = ["--dataset", "sbm", "--synth-nodes", "300", "--synth-features", "8", "--layers", "2",
         "--hidden", "8", "--no-progress", "--threads", "1"]


def _train(*args: str, timeout: float = 120, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "gnnpipe-train"), *args], capture_output=True, text=True,
                          timeout=timeout, env=ENV, cwd=cwd)


def _errors(p: subprocess.CompletedProcess) -> list[str]:
    return [ln for ln in (p.stdout + p.stderr).splitlines() if "error:" in ln]


def test_second_run_on_locked_out_refuses_naming_pid(tmp_path):
    out = tmp_path / "run"
    first = subprocess.Popen([str(BIN / "gnnpipe-train"), *SMALL, "--epochs", "100000", "--eval-every", "100000",
                              "--out", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
    try:
        deadline = time.time() + 60
        while time.time() < deadline and not (out / "metrics.jsonl").exists():
            time.sleep(0.2)
        assert (out / "metrics.jsonl").exists(), "first run never started"
        t0 = time.time()
        p = _train(*SMALL, "--epochs", "1", "--out", str(out))
        assert p.returncode != 0 and "Traceback" not in p.stderr
        errs = _errors(p)
        assert len(errs) == 1 and f"pid {first.pid}" in errs[0] and "in use" in errs[0], p.stderr
        assert time.time() - t0 < 30
        assert first.poll() is None  # the first run is untouched and still training
        # --overwrite does not break a lock either.
        p = _train(*SMALL, "--epochs", "1", "--out", str(out), "--overwrite")
        assert p.returncode != 0 and f"pid {first.pid}" in p.stderr
    finally:
        first.kill()
        first.wait()
    lines = (out / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(ln)["epoch"] for ln in lines] == list(range(len(lines)))


def test_lock_in_process(tmp_path):
    out = tmp_path / "r"
    lock = claim_run_dir(out, resuming_here=False, overwrite=False)
    try:
        with pytest.raises(GnnpipeError, match=f"pid {os.getpid()}"):
            claim_run_dir(out, resuming_here=False, overwrite=False)
    finally:
        lock.release()
    assert not out.exists()  # created, never used: removed again on release


def test_finished_run_refused_then_overwrite_removes_only_run_outputs(tmp_path):
    out = tmp_path / "run"
    assert _train(*SMALL, "--epochs", "2", "--out", str(out)).returncode == 0
    (out / "notes.txt").write_text("mine\n")
    before = (out / "metrics.jsonl").read_bytes()
    p = _train(*SMALL, "--epochs", "1", "--out", str(out))
    assert p.returncode != 0 and len(_errors(p)) == 1 and "finished run" in _errors(p)[0]
    assert "--overwrite" in _errors(p)[0] and "--resume" not in _errors(p)[0]  # no checkpoints to resume
    assert (out / "metrics.jsonl").read_bytes() == before
    p = _train(*SMALL, "--epochs", "1", "--out", str(out), "--overwrite")
    assert p.returncode == 0, p.stderr
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 1
    assert (out / "notes.txt").read_text() == "mine\n"


def test_resume_finished_run_in_place_is_allowed(tmp_path):
    out = tmp_path / "run"
    assert _train(*SMALL, "--epochs", "2", "--checkpoint-every", "1", "--out", str(out)).returncode == 0
    p = _train("--resume", str(out), "--epochs", "3", "--no-progress")
    assert p.returncode == 0, p.stderr
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 3


def test_default_run_dir_is_unique(tmp_path):
    a = default_run_dir("graph", "gcn", tmp_path)
    a.mkdir()
    b = default_run_dir("graph", "gcn", tmp_path)
    assert a != b and b.name.startswith(a.name)


def test_metrics_file_cuts_back_a_failed_write(tmp_path, monkeypatch):
    mf = MetricsFile(tmp_path / "metrics.jsonl")
    mf.write('{"epoch": 0}\n')
    real = os.write

    def short(fd, data):  # a full disk that takes half the line
        return real(fd, data[: len(data) // 2])

    monkeypatch.setattr(os, "write", short)
    with pytest.raises(GnnpipeError, match="metrics.jsonl"):
        mf.write('{"epoch": 1, "loss": 0.5}\n')
    monkeypatch.setattr(os, "write", real)
    mf.close()
    assert (tmp_path / "metrics.jsonl").read_text() == '{"epoch": 0}\n'


@pytest.mark.mpi
@pytest.mark.parametrize("kind", ["file", "under_file", "finished"])
def test_bad_out_on_two_mpi_ranks_exits_promptly(tmp_path, kind):
    if not (BIN / "mpirun").exists():
        pytest.skip("no mpirun in the venv")
    (tmp_path / "f").write_text("x\n")
    out = {"file": tmp_path / "f", "under_file": tmp_path / "f" / "sub", "finished": tmp_path / "done"}[kind]
    if kind == "finished":
        assert _train(*SMALL, "--epochs", "1", "--out", str(out)).returncode == 0
    t0 = time.time()
    p = subprocess.run([str(BIN / "mpirun"), "-np", "2", str(BIN / "gnnpipe-train"), *SMALL, "--epochs", "1",
                        "--timeout", "60", "--out", str(out)], capture_output=True, text=True, timeout=120, env=ENV)
    took = time.time() - t0
    assert p.returncode != 0 and "Traceback" not in p.stdout + p.stderr
    errs = _errors(p)
    assert len(errs) == 1 and str(out) in errs[0], p.stdout + p.stderr
    assert took < 30, f"took {took:.0f} s: a rank waited for the timeout"
    assert (tmp_path / "f").read_text() == "x\n"


def test_read_only_out(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,ro", "tmpfs", str(ro)], capture_output=True, text=True)
    if p.returncode != 0:
        pytest.skip(f"cannot mount a read-only tmpfs ({p.stderr.strip() or 'mount failed'}; needs root)")
    try:
        for out in (ro, ro / "run"):
            q = _train(*SMALL, "--epochs", "1", "--out", str(out))
            assert q.returncode != 0 and "Traceback" not in q.stderr
            errs = _errors(q)
            assert len(errs) == 1 and "Read-only" in errs[0], q.stderr
    finally:
        subprocess.run(["umount", "-l", str(ro)], capture_output=True)


def test_setup_failure_leaves_no_run_dir(tmp_path):
    p = _train(*SMALL, "--epochs", "1", "--dataset", str(tmp_path / "nosuch"), cwd=tmp_path)
    assert p.returncode != 0 and len(_errors(p)) == 1
    assert sorted(x.name for x in tmp_path.iterdir()) == []  # neither runs/ nor runs/<name>/
