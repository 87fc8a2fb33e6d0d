"""--stop-at-val-acc ends a run at the first evaluation that reaches the target, without
changing the epochs before it; --divergence-drop marks evaluations that fell far below the
best validation accuracy (the paper's pipeline collapsed that way on ogbn-arxiv)."""

from __future__ import annotations

import json

import pytest

from gnnpipe._base import GnnpipeError
from gnnpipe.comm import SingleProcessCommunicator
from gnnpipe.config import TrainConfig
from gnnpipe.train import train
from gnnpipe.train.loop import diverging

TINY = dict(dataset="sbm", synth_nodes=600, synth_degree=8.0, synth_classes=4, synth_features=16,
            mode="pipeline", model="gcnii", layers=4, hidden=16, epochs=30, eval_every=1, seed=0, threads=1)

TIMES = ("epoch_time_s", "compute_s", "comm_s", "bubble_s", "peak_rss_mb")


def _run(tmp_path, name, **kw):
    out = tmp_path / name
    summary = train(TrainConfig(**{**TINY, **kw}), SingleProcessCommunicator(), out=out)
    recs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return summary, [{k: v for k, v in r.items() if k not in TIMES} for r in recs]


def test_stop_at_val_acc_ends_at_the_first_evaluation_reaching_it_and_changes_nothing_before(tmp_path):
    full, full_recs = _run(tmp_path, "full")
    vals = [r["val_acc"] for r in full_recs]
    target = sorted(set(vals))[len(set(vals)) // 2]  # a value the full run reaches mid-way
    first = next(i for i, v in enumerate(vals) if v >= target)
    assert first < len(vals) - 1, "the target must be reached before the last epoch for this test"
    stopped, recs = _run(tmp_path, "stopped", stop_at_val_acc=target)
    assert stopped["stopped_at_val_acc"] == first and stopped["epochs"] == first + 1
    assert recs == full_recs[: first + 1]
    assert full["stopped_at_val_acc"] is None


def test_a_collapsing_run_is_marked_diverging_in_the_metrics(tmp_path, caplog):
    with caplog.at_level("WARNING", logger="gnnpipe"):
        summary, recs = _run(tmp_path, "hot", lr=5.0, epochs=12, divergence_drop=0.05, exact_every=0)
    warned = [r.getMessage() for r in caplog.records if "diverging" in r.getMessage()]
    # once, and a stale run without exact epochs is pointed at the switches that add them
    assert len(warned) == 1 and "--drift-bound 0.7" in warned[0] and "--exact-every 0" in warned[0], warned
    marked = [r["epoch"] for r in recs if r.get("diverging")]
    assert marked and summary["diverging_evals"] == len(marked)
    best = -1.0
    for r in recs:  # each marked epoch is really the drop below the best so far, and only those
        assert bool(r.get("diverging")) == (best >= 0 and best - r["val_acc"] >= 0.05)
        best = max(best, r["val_acc"])


@pytest.mark.parametrize("schedule", [dict(drift_bound=0.5), {}], ids=["drift-bound", "default"])
def test_a_run_with_exact_epochs_is_not_pointed_at_them(tmp_path, caplog, schedule):
    with caplog.at_level("WARNING", logger="gnnpipe"):
        _run(tmp_path, "hot", lr=5.0, epochs=12, divergence_drop=0.05, **schedule)
    warned = [r.getMessage() for r in caplog.records if "diverging" in r.getMessage()]
    assert len(warned) == 1 and "--drift-bound" not in warned[0], warned


def test_a_healthy_run_is_not_marked():
    assert not diverging(0.40, 0.39, 0.2) and diverging(0.677, 0.143, 0.2) and not diverging(-1.0, 0.1, 0.2)


@pytest.mark.parametrize("field, value", [("stop_at_val_acc", 1.5), ("stop_at_val_acc", -0.1),
                                          ("divergence_drop", 0.0), ("divergence_drop", 2.0)])
def test_out_of_range_values_are_refused_naming_the_field(field, value):
    with pytest.raises(GnnpipeError, match=field):
        TrainConfig(**{**TINY, field: value}).validate()
