"""``--profile-actions``: each rank's seconds per kind of work, one line per epoch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import gnnpipe
from gnnpipe.parallel.executor import ACTION_KINDS

REPO = Path(__file__).resolve().parents[1]
SMALL = dict(dataset="sbm", synth_nodes=400, synth_features=8, synth_classes=4, model="gcn", layers=4, hidden=8,
             epochs=3, eval_every=100, threads=1)


def test_pipeline_run_records_every_kind_of_work_per_epoch(tmp_path):
    out = tmp_path / "run"
    gnnpipe.fit(mode="pipeline", chunks=4, profile_actions=True, out=out, **SMALL)
    recs = [json.loads(line) for line in (out / "actions" / "rank0.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in recs] == [0, 1, 2]
    for r in recs:
        assert set(r["actions"]) == set(ACTION_KINDS) and (r["way"], r["stage"]) == (0, 0)
        a = r["actions"]
        assert all(v >= 0 for v in a.values())
        assert a["forward"] > 0 and a["backward"] > 0 and a["optimizer"] > 0
        assert a["gather"] <= a["forward"]  # reading neighbour rows is part of the forward
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    for r, m in zip(recs, metrics):  # the kinds other than gather add up to the epoch
        assert sum(v for k, v in r["actions"].items() if k != "gather") <= m["epoch_time_s"] * 1.01 + 1e-3
        # the CPU this process got over the epoch: some, and (one thread) no more than the epoch's wall time
        assert 0 < r["cpu_s"] <= m["epoch_time_s"] * 1.1 + 0.02
    p = subprocess.run([sys.executable, str(REPO / "scripts" / "action_profile.py"), str(out)],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "| 0 | 0 | 0 |" in p.stdout and "median of 2 epochs" in p.stdout and "cpu_s |" in p.stdout


def test_off_by_default_and_overwrite_removes_the_profile(tmp_path):
    out = tmp_path / "run"
    gnnpipe.fit(mode="pipeline", chunks=4, out=out, **SMALL)
    assert not (out / "actions").exists()
    gnnpipe.fit(mode="pipeline", chunks=4, out=out, overwrite=True, profile_actions=True, **SMALL)
    assert (out / "actions" / "rank0.jsonl").exists()
    with pytest.raises(gnnpipe.GnnpipeError, match="actions"):
        gnnpipe.fit(mode="pipeline", chunks=4, out=out, **SMALL)  # names what --overwrite deletes
    gnnpipe.fit(mode="graph", out=out, overwrite=True, **SMALL)
    assert not (out / "actions").exists()
