"""``gnnpipe-bench tta``: the target, epochs and seconds to it, the not-reached rows, and the
premise the benchmark rests on (a run's accuracy per epoch does not depend on the link)."""

from __future__ import annotations

import json
import os

import pytest

from gnnpipe import cluster as CL
from gnnpipe._base import GnnpipeError
from gnnpipe.bench import cluster as BC
from gnnpipe.bench import common as C
from gnnpipe.bench import tta


def _curve(mode, seed, val, wire="float32", epoch_s=1.0, every=1):
    epochs = [every * (i + 1) - 1 for i in range(len(val))]
    return {"mode": mode, "wire": wire, "seed": seed, "epochs": epochs, "val": val, "test": val,
            "epoch_time_s": [epoch_s] * (epochs[-1] + 1)}


CURVES = [
    _curve("graph", 0, [0.20, 0.30, 0.40, 0.41]),          # best 0.41
    _curve("graph", 1, [0.25, 0.35, 0.39, 0.39]),          # best 0.39: target 0.40 - 0.005
    _curve("pipeline", 0, [0.30, 0.396, 0.40]),              # reaches 0.395 at epoch 2
    _curve("pipeline", 1, [0.38, 0.3951]),                  # at epoch 2
    _curve("hybrid", 0, [0.10, 0.20, 0.30, 0.33]),          # never
    _curve("hybrid", 1, [0.10, 0.396]),                     # at epoch 2
]
TIMING = [{"mode": "graph", "wire": "float32", "rate": "50mbit", "epoch_s": 8.0},
          {"mode": "pipeline", "wire": "float32", "rate": "50mbit", "epoch_s": 1.0},
          {"mode": "hybrid", "wire": "float32", "rate": "50mbit", "epoch_s": 2.0}]


def test_the_target_is_exact_graph_parallelisms_mean_best_minus_half_a_point():
    assert tta.target_of(CURVES[:2]) == pytest.approx(0.40 - 0.005)
    with pytest.raises(GnnpipeError, match="no float32 graph-parallel curve"):
        tta.target_of([])


def test_epochs_to_target_count_trained_epochs_and_none_when_never():
    assert tta.epochs_to(_curve("x", 0, [0.1, 0.5], every=5), 0.4) == 10  # evaluated after epoch index 9
    assert tta.epochs_to(_curve("x", 0, [0.1, 0.2]), 0.4) is None


def test_time_to_target_rows_speedups_and_the_seed_that_never_got_there():
    rows, target = tta.summarize(CURVES, TIMING, ["50mbit"])
    by = {r["mode"]: r for r in rows}
    assert by["graph"]["epochs_to_target"] == [3, None] and by["graph"]["reached"] == 1
    assert by["pipeline"]["epochs_to_target"] == [2, 2] and by["pipeline"]["tta_s"] == pytest.approx(2.0)
    assert by["graph"]["tta_s"] == pytest.approx(24.0)
    # a speed-up only where graph parallelism and the row reached the target on every seed
    assert "speedup" not in by["pipeline"]
    md = tta.table(rows, target)
    assert "not reached" not in md.split("| graph")[1].split("\n")[0]
    assert "1 seed(s) never reached it" in md
    rows2, _ = tta.summarize(CURVES[1:2] + CURVES[2:4], TIMING, ["50mbit"])  # graph seed 1 alone: target 0.385
    by2 = {r["mode"]: r for r in rows2}
    assert by2["graph"]["epochs_to_target"] == [3] and by2["pipeline"]["speedup"] == pytest.approx(24 / 2)


def test_a_mode_that_never_reaches_the_target_says_so_with_its_best():
    curves = CURVES[:2] + [_curve("hybrid", 0, [0.10, 0.33]), _curve("hybrid", 1, [0.12, 0.30])]
    rows, target = tta.summarize(curves, TIMING, ["50mbit"])
    md = tta.table(rows, target)
    line = next(ln for ln in md.splitlines() if ln.startswith("| hybrid"))
    assert "not reached (best val 30.00–33.00 % over the seeds)" in line and "0/2" in line


def test_exact_epochs_are_timed_and_counted_apart():
    """--exact-every N: epochs 0, N, 2N, ... cost the exact epoch's time, the others the
    stale one's; the timing run's two medians are taken apart (the first epoch left out)."""
    assert tta.exact_every_of(["--epochs", "9", "--exact-every", "2"]) == 2
    assert tta.exact_every_of(["--exact-every=3"]) == 3 and tta.exact_every_of(["--epochs", "2", "--mode", "graph"]) == 0
    # unset: gnnpipe-train's default for the run (every 2nd epoch exact in the stale modes)
    assert tta.exact_every_of(["--mode", "hybrid"]) == 2 and tta.exact_every_of(["--epochs", "2"]) == 2
    assert tta.exact_every_of(["--mode", "pipeline", "--exact"]) == 0
    assert tta.exact_every_of(["--mode", "pipeline", "--drift-bound", "0.7"]) == 0
    assert tta.exact_every_of(["--exact-every", "2", "--exact-every", "0"]) == 0  # the last one counts
    # a stored curve: what it recorded; one written before curves recorded it, its flag's (then 0)
    assert tta._every_of({"exact_every": 2, "args": ["--mode", "pipeline"]}) == 2
    assert tta._every_of({"args": ["--mode", "pipeline"]}) == 0
    assert tta._every_of({"args": ["--mode", "pipeline", "--exact-every", "2"]}) == 2
    assert tta.seconds_to(5, 1.0, 3.0, 2) == pytest.approx(3 * 3.0 + 2 * 1.0)  # 0, 2, 4 exact
    assert tta.seconds_to(4, 1.0, 3.0, 2) == pytest.approx(2 * 3.0 + 2 * 1.0)
    assert tta.seconds_to(4, 1.0) == pytest.approx(4.0)
    recs = [{"epoch": e, "epoch_time_s": t} for e, t in enumerate([9.0, 1.0, 3.0, 1.2, 3.4])]
    assert tta.epoch_times(recs, 2) == {"epoch_s": pytest.approx(1.1), "exact_epoch_s": pytest.approx(3.2)}
    assert tta.epoch_times(recs, 0) == {"epoch_s": pytest.approx(2.1)}
    assert tta.epoch_times(recs[:2], 2) == {"epoch_s": 1.0, "exact_epoch_s": 9.0}  # only epoch 0 was exact
    assert tta.epoch_times(recs[:1], 2) == {"epoch_s": 9.0, "exact_epoch_s": 9.0}
    alt = [dict(_curve("pipeline", s, [0.30, 0.396]), args=["--exact-every", "2"]) for s in (0, 1)]
    timing = TIMING[:1] + [{"mode": "pipeline", "wire": "float32", "rate": "50mbit", "epoch_s": 1.0,
                            "exact_epoch_s": 3.0, "exact_every": 2}]
    rows, target = tta.summarize(CURVES[:2] + alt, timing, ["50mbit"])
    pipe = next(r for r in rows if r["mode"] == "pipeline")
    assert pipe["epochs_to_target"] == [2, 2] and pipe["tta_s"] == pytest.approx(3.0 + 1.0)
    assert "(exact every 2: 3.000)" in tta.table(rows, target)


def test_drift_bounded_runs_count_their_own_exact_epochs():
    """--drift-bound: which epochs ran exact is the run's own (metrics.jsonl's ``exact``,
    the curve's ``exact_epochs``); each seed's time to target counts its own."""
    assert tta.drift_bounded(["--drift-bound", "0.7"]) and tta.drift_bounded(["--drift-bound=0.5"])
    assert not tta.drift_bounded(["--drift-bound", "0"]) and not tta.drift_bounded(["--exact-every", "2"])
    assert tta.seconds_to(4, 1.0, 3.0, 0, [0, 3]) == pytest.approx(2 * 3.0 + 2 * 1.0)
    assert tta.seconds_to(3, 1.0, 3.0, 0, [0, 3]) == pytest.approx(3.0 + 2 * 1.0)
    recs = [{"epoch": 0, "epoch_time_s": 9.0, "exact": True}, {"epoch": 1, "epoch_time_s": 1.0, "drift": 0.9},
            {"epoch": 2, "epoch_time_s": 3.0, "exact": True}, {"epoch": 3, "epoch_time_s": 1.2, "drift": 0.3},
            {"epoch": 4, "epoch_time_s": 1.4, "drift": 0.3}]
    assert tta.epoch_times(recs, 0) == {"epoch_s": pytest.approx(1.2), "exact_epoch_s": 3.0}
    unmarked = [{k: v for k, v in r.items() if k != "exact"} for r in recs]
    assert tta.epoch_times(unmarked, 0) == {"epoch_s": pytest.approx(1.3)}  # no marks: every epoch alike
    flags = ["--drift-bound", "0.7"]
    pipe = [dict(_curve("pipeline", 0, [0.30, 0.396]), args=flags, exact_epochs=[0, 1]),
            dict(_curve("pipeline", 1, [0.30, 0.396]), args=flags, exact_epochs=[0])]
    timing = TIMING[:1] + [{"mode": "pipeline", "wire": "float32", "rate": "50mbit", "epoch_s": 1.0,
                            "exact_epoch_s": 3.0, "exact_every": 0}]
    rows, target = tta.summarize(CURVES[:2] + pipe, timing, ["50mbit"])
    row = next(r for r in rows if r["mode"] == "pipeline")
    assert row["epochs_to_target"] == [2, 2] and row["tta_s"] == pytest.approx(((3.0 + 3.0) + (3.0 + 1.0)) / 2)
    assert "(exact: 3.000)" in tta.table(rows, target)


def test_cool_down_runs_count_their_marked_exact_epochs():
    """--exact-from E: the epochs from E on cost the exact epoch's time, read off the run's
    own marks as --drift-bound's are, after --exact-every's (if any) before E; the timing
    run's flags move the cool-down to its last two epochs."""
    assert tta.exact_from_of(["--exact-from", "75"]) == 75 and tta.exact_from_of(["--exact-from=3"]) == 3
    assert tta.exact_from_of(["--exact-every", "2"]) == 0 and tta.marks_exact_epochs(["--exact-from", "4"])
    assert not tta.marks_exact_epochs(["--exact-every", "2"])
    with pytest.raises(GnnpipeError, match="--exact-from 'x'"):
        tta.exact_from_of(["--exact-from", "x"])
    assert tta._without_flag(["--a", "1", "--exact-from", "9", "--exact-from=8", "--b"], "--exact-from") == ["--a", "1", "--b"]
    flags = ["--exact-every", "3", "--exact-from", "2"]
    pipe = [dict(_curve("pipeline", s, [0.30, 0.33, 0.396]), args=flags, exact_epochs=[0, 2]) for s in (0, 1)]
    timing = TIMING[:1] + [{"mode": "pipeline", "wire": "float32", "rate": "50mbit", "epoch_s": 1.0,
                            "exact_epoch_s": 3.0, "exact_every": 3}]
    rows, target = tta.summarize(CURVES[:2] + pipe, timing, ["50mbit"])
    row = next(r for r in rows if r["mode"] == "pipeline")
    # the target at the evaluation after epoch 2: epochs 0, 1, 2, of which 0 (every 3rd) and 2 (from 2) exact
    assert row["epochs_to_target"] == [3, 3] and row["tta_s"] == pytest.approx(2 * 3.0 + 1.0)
    assert row["exact_from"] == 2 and "(exact every 3: 3.000)" in tta.table(rows, target)


def test_report_writes_the_table_and_a_plot(tmp_path):
    d = tmp_path / "squirrel-gcnii32"
    d.mkdir()
    (d / "curves.jsonl").write_text("".join(json.dumps(c) + "\n" for c in CURVES))
    (d / "timing.jsonl").write_text("".join(json.dumps(t) + "\n" for t in TIMING))
    rows, md = tta.report(d)
    assert (d / "tta.png").stat().st_size > 10_000 and (d / "summary.md").is_file()
    assert {r["rate"] for r in rows} == {"50mbit"} and "Target: validation accuracy 39.50 %" in md


@pytest.mark.parametrize("field, value, needle", [
    ("epochs", [0, 0.0, 2, 3], "increasing epoch counts"),   # a float epoch once crashed the slice in summarize
    ("epochs", [0, 2, 1, 3], "increasing epoch counts"),
    ("epochs", [-1, 0, 1, 2], "increasing epoch counts"),
    ("test", [0.1], "test accuracies"),
    ("exact_every", "2", "exact_every"), ("exact_every", -1, "exact_every"), ("exact_every", True, "exact_every"),
])
def test_a_curve_with_bad_epochs_or_tests_is_refused_naming_the_line(field, value, needle, tmp_path, capsys):
    d = tmp_path / "r"
    d.mkdir()
    curves = [dict(c) for c in CURVES]
    curves[1][field] = value
    (d / "curves.jsonl").write_text("".join(json.dumps(c) + "\n" for c in curves))
    (d / "timing.jsonl").write_text("".join(json.dumps(t) + "\n" for t in TIMING))
    assert tta.main(["--plot", str(d)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "curves.jsonl, line 2" in err[0] and needle in err[0], err


@pytest.mark.parametrize("field, value", [("epoch_s", 9_000_000_000_000_000_000), ("epoch_s", 10**400),
                                          ("exact_epoch_s", 10**400)], ids=["int19", "int401", "exact-int401"])
def test_huge_or_integer_seconds_are_plotted_or_refused_in_one_line(field, value, tmp_path, capsys):
    """The fuzzer's find: an integer epoch_s of 19 digits times the epochs left int64, and the plot's
    numpy array became objects (a traceback); one beyond a float's range must be refused, not crash."""
    d = tmp_path / "r"
    d.mkdir()
    curves, timing = [dict(c) for c in CURVES], [dict(t) for t in TIMING]
    timing[0][field] = value
    (d / "curves.jsonl").write_text("".join(json.dumps(c) + "\n" for c in curves))
    (d / "timing.jsonl").write_text("".join(json.dumps(t) + "\n" for t in timing))
    code = tta.main(["--plot", str(d)])
    err = capsys.readouterr().err
    if value == 10**400:  # beyond a float: refused
        assert code == 2 and len(err.strip().splitlines()) == 1 and "positive number" in err, err
    else:
        assert code == 0 and (d / "tta.png").stat().st_size > 0, err


@pytest.mark.parametrize("argv, needle", [
    (["--config", "nope"], "--config 'nope'"),
    (["--config", "tiny", "--modes", "graph,pipe"], "--modes"),
    (["--config", "tiny", "--wires", "int7"], "--wires"),
    (["--config", "tiny", "--timing-epochs", "1"], "--timing-epochs"),
    (["--plot", "/nonexistent/dir"], "no curves.jsonl"),
])
def test_bad_arguments_are_one_line(argv, needle, capsys, tmp_path):
    assert tta.main([*argv, "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err
    assert not (tmp_path / "r").exists()


@pytest.mark.slow
@pytest.mark.mpi
def test_local_run_end_to_end(tmp_path):
    rows, md = tta.run(tmp_path, "tiny", seeds=(0,), local=True, quick=True)
    d = tmp_path / "tta-quick" / "tiny"
    curves = [json.loads(x) for x in (d / "curves.jsonl").read_text().splitlines()]
    assert {c["mode"] for c in curves} == {"graph", "pipeline", "hybrid"}
    graph = next(c for c in curves if c["mode"] == "graph")
    assert graph["trained"] == 12  # the reference trains its whole budget
    for c in curves:  # the others stop at the target or at the budget
        hit = tta.epochs_to(c, tta.target_of([graph]))
        assert c["trained"] == (hit if hit is not None else 12)
    assert (d / "tta.png").is_file() and "| pipeline | float32 | local |" in md
    again, _ = tta.run(tmp_path, "tiny", seeds=(0,), local=True, quick=True)  # stored runs are reused
    assert len((d / "curves.jsonl").read_text().splitlines()) == 3 and again == rows


@pytest.mark.slow
@pytest.mark.mpi
def test_local_run_with_exact_epochs_times_them_apart(tmp_path):
    rows, md = tta.run(tmp_path, "tiny", seeds=(0,), modes=("pipeline",), local=True, quick=True,
                       train_flags=["--exact-every", "2"])
    timing = [json.loads(x) for x in (tmp_path / "tta-quick" / "tiny" / "timing.jsonl").read_text().splitlines()]
    pipe = next(t for t in timing if t["mode"] == "pipeline")
    graph = next(t for t in timing if t["mode"] == "graph")
    assert pipe["exact_every"] == 2 and pipe["exact_epoch_s"] > 0 and "exact_epoch_s" not in graph
    assert "exact every 2" in md


@pytest.mark.netns
def test_accuracy_per_epoch_does_not_depend_on_the_link(tmp_path):
    """The premise of time = epochs to target × the link's epoch time: the same run at two
    link rates trains the same bits (losses and accuracies equal, not close)."""
    why = CL.unavailable()
    if why is not None:
        pytest.skip(f"the emulated cluster needs root and iproute2: {why}")
    args = [*tta.CONFIGS["tiny"][0], "--eval-every", "2", "--seed", "1", *BC.mode_flags("hybrid", 4), "--timeout", "60"]
    args[args.index("--epochs") + 1] = "4"
    got = {}
    for rate in ("unshaped", "20mbit"):
        BC.run_job(CL.ClusterSpec(4, CL.parse_rate(rate)), args, tmp_path / rate, "torch", 600)
        got[rate] = [{k: r[k] for k in ("loss", "train_acc", "val_acc", "test_acc") if k in r}
                     for r in C.read_metrics(tmp_path / rate)]
    assert got["unshaped"] == got["20mbit"] and len(got["unshaped"]) == 4
    assert not [n for n in CL.list_namespaces() if n.startswith(f"{CL.PREFIX}{os.getpid()}-")]
