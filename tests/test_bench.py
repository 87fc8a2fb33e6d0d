"""gnnpipe-bench: statistics helpers, planner hits, outputs, and comm --quick on real ranks."""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest

from gnnpipe.bench import common as C


# ----------------------------------------------------------------------------- statistics
def test_geomean_known_values():
    assert C.geomean([1.0, 4.0]) == pytest.approx(2.0)
    assert C.geomean([2.0, 8.0, 4.0]) == pytest.approx(4.0)
    # GNNPIPE.md §5: a ratio and its inverse average to 1 geometrically, not arithmetically.
    assert C.geomean([0.5, 2.0]) == pytest.approx(1.0)
    assert C.geomean([3.0]) == pytest.approx(3.0)


@pytest.mark.parametrize("bad", [[], [1.0, 0.0], [1.0, -2.0], [float("nan")], [math.inf]])
def test_geomean_refuses_non_positive(bad):
    with pytest.raises(C.BenchError):
        C.geomean(bad)


def test_median_spread_and_rel_error():
    assert C.median_spread([3.0, 1.0, 2.0, 10.0]) == (2.5, 1.0, 10.0)
    assert C.rel_error(1.25, 1.0) == pytest.approx(0.25)
    assert C.rel_error(0.5, 1.0) == pytest.approx(-0.5)


# ----------------------------------------------------------------------------- planner hits
TABLE = [
    # case a: the smallest prediction (G4) is also the fastest measured -> hit
    {"case": "a", "world": 4, "config": "G4", "predicted_s": 1.0, "measured_s": 2.0},
    {"case": "a", "world": 4, "config": "P4", "predicted_s": 1.5, "measured_s": 3.0},
    # case b: the model prefers P4 but H2x2 is fastest -> miss, first choice 1.5x slower
    {"case": "b", "world": 4, "config": "G4", "predicted_s": 3.0, "measured_s": 4.0},
    {"case": "b", "world": 4, "config": "P4", "predicted_s": 1.0, "measured_s": 3.0},
    {"case": "b", "world": 4, "config": "H2x2", "predicted_s": 2.0, "measured_s": 2.0},
    # same case name at another world size is its own group
    {"case": "a", "world": 2, "config": "G2", "predicted_s": 5.0, "measured_s": 1.0},
    {"case": "a", "world": 2, "config": "P2", "predicted_s": 4.0, "measured_s": 1.1},
]


def test_planner_hits_on_made_up_table():
    hits = {(h["case"], h["world"]): h for h in C.planner_hits(TABLE, ("case", "world"))}
    assert set(hits) == {("a", 4), ("b", 4), ("a", 2)}
    assert hits[("a", 4)]["hit"] and hits[("a", 4)]["loss"] == pytest.approx(1.0)
    assert hits[("b", 4)]["first_choice"] == "P4" and hits[("b", 4)]["fastest"] == "H2x2"
    assert not hits[("b", 4)]["hit"] and hits[("b", 4)]["loss"] == pytest.approx(1.5)
    assert not hits[("a", 2)]["hit"] and hits[("a", 2)]["loss"] == pytest.approx(1.1)


def test_planner_hits_uses_given_first_choice():
    # The planner's ranking (rank_configs) may differ from min(predicted) in the table.
    hits = {(h["case"], h["world"]): h for h in C.planner_hits(TABLE, ("case", "world"),
                                                                first_choice={("b", 4): "H2x2"})}
    assert hits[("b", 4)]["hit"]
    assert hits[("a", 4)]["hit"]  # groups without an entry fall back to the smallest prediction


# ----------------------------------------------------------------------------- outputs
def test_write_results_csv_json_md(tmp_path):
    rows = [{"a": 1, "b": 0.5, "nested": {"x": 1}}, {"a": 2, "c": "z"}]
    C.write_results(tmp_path, rows, "| x |\n|---|\n| 1 |", {"setting": 3})
    with open(tmp_path / "results.csv") as f:
        got = list(csv.DictReader(f))
    assert [r["a"] for r in got] == ["1", "2"] and got[1]["c"] == "z" and "nested" not in got[0]
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["setting"] == 3 and doc["rows"][0]["nested"] == {"x": 1} and "date" in doc
    assert (tmp_path / "summary.md").read_text().startswith("| x |")


def test_md_table_shape():
    md = C.md_table(["a", "b"], [[1, 0.12345], ["x", True]]).splitlines()
    assert md[0] == "| a | b |" and md[1] == "|---|---|"
    assert md[2] == "| 1 | 0.123 |" and md[3] == "| x | yes |"


def test_measured_bytes_categories():
    rec = {"bytes_sent": {"halo_fwd": 10, "halo_bwd": 5, "pipe_act": 7, "pipe_grad": 3, "allreduce": 2,
                          "control": 99, "eval": 1000}}
    # an older record: no way_*, no input_*
    assert C.measured_bytes(rec) == {"halo": 15, "way": 0, "pipe": 10, "input": 0, "allreduce": 2}
    rec["bytes_sent"].update(way_fwd=4, way_bwd=6, input_fwd=8, input_bwd=1)
    assert C.measured_bytes(rec) == {"halo": 15, "way": 10, "pipe": 10, "input": 9, "allreduce": 2}


def test_read_metrics_names_bad_line(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"epoch": 0}\nnot json\n')
    with pytest.raises(C.BenchError, match="metrics.jsonl:2"):
        C.read_metrics(tmp_path)


def _tiny_graph():
    from gnnpipe.data.graph import Graph

    # 0-2, 1-2, 2-3: with contiguous ways {0,1} | {2,3} and one node per chunk, chunks 0 and 1
    # both need node 2 from the other way, chunk 2 (node 2) needs nodes 0 and 1.
    n = 4
    return Graph.from_edges(np.array([0, 1, 2]), np.array([2, 2, 3]), n, np.ones((n, 2), np.float32),
                            np.array([0, 1, 0, 1]), np.ones(n, bool), np.zeros(n, bool), np.zeros(n, bool))


def test_chunk_halo_sum_counts_per_chunk():
    g = _tiny_graph()
    # Per way: way 0 needs {2}, way 1 needs {0, 1}: 3. Per chunk: {2}, {2}, {0, 1}, {}: 4.
    assert C.chunk_halo_sum(g, 2, 2, method="contiguous") == 4
    assert C.chunk_halo_sum(g, 2, 1, method="contiguous") == 3


def test_cli_help_lists_subcommands(capsys):
    from gnnpipe.bench.cli import SUBS, main

    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    text = capsys.readouterr().out
    for s in SUBS:
        assert s in text


# ----------------------------------------------------------------------------- CLI guards
@pytest.mark.parametrize("sub", ["comm", "epoch", "memory", "scale", "overhead", "accuracy", "report"])
def test_only_typo_fails_in_one_line_and_keeps_results(sub, tmp_path, capsys):
    from gnnpipe.bench.cli import main

    old = tmp_path / sub / "results.json"
    old.parent.mkdir()
    old.write_text('{"rows": [{"x": 1}]}')
    assert main([sub, "--only", "typo", "--out", str(tmp_path), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"gnnpipe-bench {sub}: error:") and "'typo'" in err[0], err
    assert old.read_text() == '{"rows": [{"x": 1}]}'


def test_out_that_is_a_file_fails_in_one_line(tmp_path, capsys):
    from gnnpipe.bench.cli import main

    f = tmp_path / "results.md"
    f.write_text("mine")
    assert main(["epoch", "--out", str(f)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is a file; expected the results folder" in err[0]
    assert f.read_text() == "mine"


def test_write_results_refuses_empty_rows(tmp_path):
    C.write_results(tmp_path, [{"a": 1}], "| a |")
    before = (tmp_path / "results.json").read_text()
    with pytest.raises(C.BenchError, match="keeps its earlier results"):
        C.write_results(tmp_path, [], "")
    assert (tmp_path / "results.json").read_text() == before


def test_quick_runs_write_their_own_folder(tmp_path):
    assert C.sub_dir(tmp_path, "epoch") == tmp_path / "epoch"
    assert C.sub_dir(tmp_path, "epoch", quick=True) == tmp_path / "epoch-quick"


def test_report_fills_marked_sections_only(tmp_path):
    from gnnpipe.bench import report
    from gnnpipe.bench.accuracy import CONFIGS

    res = tmp_path / "results"
    (res / "epoch").mkdir(parents=True)
    (res / "epoch" / "summary.md").write_text("| case | s |\n|---|---|\n| a | 1 |\n")
    (res / "epoch" / "results.json").write_text('{"date": "2026-12-03 10:00:00 UTC", "rows": []}')
    (res / "memory").mkdir()
    (res / "memory" / "summary.md").write_text("| m |\n|---|\n")
    (res / "accuracy.json").write_text(json.dumps([
        {"name": "cora-gcn2-graph", "seed": 0, "ok": True, "test_acc": 0.705, "mean_epoch_time_s": 0.1, "epochs": 20}]))
    doc = tmp_path / "b.md"
    doc.write_text("# B\n<!-- epoch:begin -->\nold\n<!-- epoch:end -->\ntext\n<!-- accuracy:begin -->\n"
                   "<!-- accuracy:end -->\nend\n")
    out = report.run(res, doc)
    text = doc.read_text()
    assert "| a | 1 |" in text and "old" not in text and "run of 2026-12-03" in text and text.endswith("end\n")
    # A 20-epoch run says it does not test the 200-epoch target.
    assert "70.50" in text and "for 200 epochs; this run had 20" in text
    assert "memory: " in out and "no <!-- memory:begin -->" in out
    assert "comm: no stored results" in out
    assert int(CONFIGS["cora-gcn2-graph"][2][CONFIGS["cora-gcn2-graph"][2].index("--epochs") + 1]) == 200


def test_accuracy_summary_mean_sd_and_distance_from_graph():
    from gnnpipe.bench.accuracy import summarize

    def rows(name, accs):
        return [{"name": name, "seed": k, "ok": True, "test_acc": a, "mean_epoch_time_s": 1.0, "epochs": 60}
                for k, a in enumerate(accs)]

    md = summarize(rows("squirrel-gcnii32-graph", [0.40, 0.42, 0.44]) + rows("squirrel-gcnii32-pipeline", [0.40, 0.41, 0.42])
                   + rows("squirrel-gcnii32-hybrid", [0.38, 0.39, 0.40])
                   + [{"name": "physics-gcnii32-graph", "seed": 0, "ok": False, "error": "x", "epochs": 15}]
                   + rows("physics-gcnii32-pipeline", [0.93]))
    line = {ln.split(" | ")[0].strip("| "): ln for ln in md.splitlines()[2:]}
    assert "| 3 | 42.00 ± 2.00 |  |" in line["squirrel-gcnii32-graph"]  # sample sd of 40, 42, 44
    assert "| 3 | 41.00 ± 1.00 | -1.00 (within 1.5) |" in line["squirrel-gcnii32-pipeline"]
    assert "| 3 | 39.00 ± 1.00 | -3.00 (below by more than 1.5) |" in line["squirrel-gcnii32-hybrid"]
    assert "FAILED" in line["physics-gcnii32-graph"]
    assert "| 1 | 93.00 ± 0.00 |  |" in line["physics-gcnii32-pipeline"]  # no graph mean to compare with
    assert "for 150 epochs; this run had 60" in line["squirrel-gcnii32-hybrid"]


def test_accuracy_exact_epoch_variants_compare_with_graph_within_issue_29s_half_point():
    from gnnpipe.bench.accuracy import CONFIGS, summarize

    def rows(name, accs):
        return [{"name": name, "seed": k, "ok": True, "test_acc": a, "mean_epoch_time_s": 1.0, "epochs": 150}
                for k, a in enumerate(accs)]

    flags = CONFIGS["squirrel-gcnii32-hybrid-exact2"][2]
    assert flags[flags.index("--exact-every") + 1] == "2" and flags[flags.index("--mode") + 1] == "hybrid"
    md = summarize(rows("squirrel-gcnii32-graph", [0.40, 0.40]) + rows("squirrel-gcnii32-pipeline-exact2", [0.396, 0.396])
                   + rows("squirrel-gcnii32-hybrid-exact2", [0.393, 0.393]) + rows("squirrel-gcnii32-pipeline", [0.393, 0.393]))
    line = {ln.split(" | ")[0].strip("| "): ln for ln in md.splitlines()[2:]}
    # The same distance from graph parallelism is judged by each configuration's own bound.
    assert "| -0.40 (within 0.5) |" in line["squirrel-gcnii32-pipeline-exact2"]
    assert "| -0.70 (below by more than 0.5) |" in line["squirrel-gcnii32-hybrid-exact2"]
    assert "| -0.70 (within 1.5) |" in line["squirrel-gcnii32-pipeline"]
    # the cool-down variants: the second half of each schedule exact, held to the same bound
    for name, since in (("squirrel-gcnii32-pipeline-exact2-from75", "75"), ("physics-resgcn32-hybrid-exact2-from30", "30")):
        f = CONFIGS[name][2]
        assert f[f.index("--exact-from") + 1] == since and f[f.index("--exact-every") + 1] == "2"
    md = summarize(rows("squirrel-gcnii32-graph", [0.40, 0.40]) + rows("squirrel-gcnii32-hybrid-exact2-from75", [0.393, 0.393]))
    assert "| -0.70 (below by more than 0.5) |" in md.splitlines()[-1]


def test_accuracy_wire_rows_compare_with_the_same_configuration_in_float32(tmp_path):
    from gnnpipe.bench.accuracy import _flags, plot, plot_wire, split_wire, summarize, variant

    def rows(name, accs):
        return [{"name": name, "seed": k, "ok": True, "test_acc": a, "mean_epoch_time_s": 1.0, "epochs": 150}
                for k, a in enumerate(accs)]

    base = "squirrel-gcnii32-pipeline"
    assert variant(base, "float32") == base and split_wire(variant(base, "int8")) == (base, "int8")
    assert _flags(variant(base, "int8"))[-2:] == ["--wire", "int8"] and "--wire" not in _flags(base)
    res = (rows(base, [0.40, 0.42]) + rows(f"{base}+bfloat16", [0.41, 0.41]) + rows(f"{base}+int8", [0.39, 0.40])
           + rows(f"{base}+int4", [0.30, 0.31]) + rows("squirrel-gcnii32-graph+int8", [0.5]))
    line = {ln.split(" | ")[0].strip("| "): ln for ln in summarize(res).splitlines()[2:]}
    # paired by seed: (41-40, 41-42) has mean 0 and sd 1.41
    assert "| 2 | 41.00 ± 0.00 | +0.00 ± 1.41 vs float32 on 2 seeds (within 0.2) | within 0.2 of" in line[f"{base}+bfloat16"]
    assert "-1.50 ± 0.71 vs float32 on 2 seeds (outside 0.5) | within 0.5 of" in line[f"{base}+int8"]
    assert "-10.50 ± 0.71 vs float32 on 2 seeds |" in line[f"{base}+int4"] and "reported (no target)" in line[f"{base}+int4"]
    assert "| 1 | 50.00 ± 0.00 |  |" in line["squirrel-gcnii32-graph+int8"]  # its float32 row was not run
    assert plot(res, tmp_path / "acc.png").stat().st_size > 0
    assert plot_wire(res, tmp_path / "wire.png").read_bytes()[:4] == b"\x89PNG"
    assert plot_wire(rows(base, [0.4]), tmp_path / "none.png") is None  # no lossy row: no plot
    # a lossy row run on fewer seeds is compared with float32 on those seeds only
    one = rows(base, [0.40, 0.50]) + rows(f"{base}+int4", [0.41])
    line = {ln.split(" | ")[0].strip("| "): ln for ln in summarize(one).splitlines()[2:]}
    assert "+1.00 vs float32 on 1 seed |" in line[f"{base}+int4"]


def test_accuracy_keep_done_skips_runs_already_in_the_results_with_the_same_command(tmp_path, monkeypatch):
    """--keep-done: a configuration and seed whose successful run with the very same command is in
    <out>/accuracy.json is not run again (adding --wire int8 beside float32 rows); a failed run, another
    seed, another --epochs or the lossy variant runs."""
    from gnnpipe.bench import accuracy as A
    from gnnpipe.bench.cli import main

    ran = []

    def fake(name, seed, out_root, timeout, epochs=None):
        ran.append((name, seed))
        cmd, n, _ = A._command(name, seed, out_root, epochs)
        return {"name": name, "seed": seed, "ok": seed != 9, "test_acc": 0.4, "best_val_acc": 0.4, "best_epoch": 1,
                "mean_epoch_time_s": 1.0, "wall_s": 1.0, "target": "t", "epochs": n, "command": " ".join(cmd[2:])}

    monkeypatch.setattr(A, "run_one", fake)
    cfg = "squirrel-gcnii32-pipeline"
    A.run(tmp_path, only=[cfg], seeds=[0, 9], epochs=3, progress=False)
    assert ran == [(cfg, 0), (cfg, 9)]
    ran.clear()
    A.run(tmp_path, only=[cfg], seeds=[0, 1, 9], epochs=3, progress=False, wire=("float32", "int8"), keep_done=True)
    # seed 0 is kept; seed 9 failed before, so it runs again; seed 1 and the int8 rows are new
    assert ran == [(cfg, 1), (cfg, 9), (f"{cfg}+int8", 0), (f"{cfg}+int8", 1), (f"{cfg}+int8", 9)]
    kept = json.loads((tmp_path / "accuracy.json").read_text())
    assert sorted((r["name"], r["seed"]) for r in kept) == sorted(
        [(cfg, 0), (cfg, 1), (cfg, 9), (f"{cfg}+int8", 0), (f"{cfg}+int8", 1), (f"{cfg}+int8", 9)])
    ran.clear()
    A.run(tmp_path, only=[cfg], seeds=[0], epochs=4, progress=False, keep_done=True)  # other epochs: another command
    assert ran == [(cfg, 0)]
    ran.clear()
    A.run(tmp_path, only=[cfg], seeds=[0], epochs=4, progress=False)  # without the flag: runs again
    assert ran == [(cfg, 0)]
    assert main(["comm", "--keep-done", "--out", str(tmp_path / "c")]) == 2  # accuracy's flag only


# ----------------------------------------------------------------------------- load
def test_load_fields_flag_cells_above_the_cores(capsys):
    quiet = {"load": [0.5, 0.4, 0.3], "cpus": 2}
    busy = {"load": [6.9, 4.0, 2.0], "cpus": 2}
    f = C.load_fields([{"load_before": quiet, "load_after": quiet}, {"load_before": quiet, "load_after": busy}])
    assert f["load1_before"] == 0.5 and f["load1_after"] == 6.9 and f["cpu_count"] == 2 and f["under_load"]
    assert not C.load_fields([{"load_before": quiet, "load_after": quiet}])["under_load"]
    assert C.load_fields([{"metrics": []}]) == {}  # no snapshot, no columns
    assert C.warn_if_loaded(busy, "cell-x") and not C.warn_if_loaded(quiet, "cell-y")
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "load 6.9 > 2 cores around cell-x" in err[0]
    assert C.warn_if_loaded(quiet, "cell-z", busy)  # one line per cell, the higher snapshot
    assert capsys.readouterr().err.count("\n") == 1


def test_timed_cell_records_the_machine_load():
    import os

    out, load = C.timed_cell(lambda: 42, "c")
    assert out == 42
    for k in ("load_before", "load_after"):
        assert len(load[k]["load"]) == 3 and load[k]["cpus"] == os.cpu_count()
    assert set(C.load_fields([load])) >= {"load1_before", "load1_after", "cpu_count", "under_load"}


# ----------------------------------------------------------------------------- real ranks
def _check_outputs(d):
    assert (d / "summary.md").read_text().count("|") > 10
    with open(d / "results.csv") as f:
        rows = list(csv.DictReader(f))
    doc = json.loads((d / "results.json").read_text())
    assert len(rows) == len(doc["rows"]) > 0
    pngs = list(d.glob("*.png"))
    assert pngs and all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)
    return doc


@pytest.mark.mpi
@pytest.mark.slow  # ~40 s on a quiet machine, 80 s at load 14 on the shared 2 cores
def test_comm_quick_measured_equals_predicted(tmp_path):
    from gnnpipe.bench import comm

    rows, md = comm.run(tmp_path, quick=True, progress=False)
    measured = [r for r in rows if r["measured"]]
    assert {r["mode"] for r in measured} == {"graph", "pipeline", "hybrid"}
    for r in measured:
        assert "error" not in r, r
        assert r["meas_pipe"] == r["pred_pipe"] and r["meas_allreduce"] == r["pred_allreduce"], r
        # Hybrid included: plan.predict counts the way link's bytes the executor sends.
        assert r["meas_halo"] == r["pred_halo"] and r["meas_way"] == r["pred_way"] and r["equal"], r
        if r["mode"] == "hybrid":
            assert r["sum_m_chunks"] > r["sum_m_ways"], r  # the per-way count would be wrong
    # Unmeasured depths are predictions only; graph-parallel bytes grow with depth.
    g = {r["layers"]: r["pred_halo"] for r in rows if r["mode"] == "graph" and r["model"] == "gcnii"}
    assert g[8] == 2 * g[4]
    doc = _check_outputs(tmp_path / "comm-quick")
    assert doc["measured"] == len(measured)


@pytest.mark.mpi
@pytest.mark.slow
def test_epoch_quick_outputs(tmp_path):
    from gnnpipe.bench import epoch

    rows, md = epoch.run(tmp_path, quick=True, progress=False)
    ok = [r for r in rows if "measured_s" in r]
    assert len(ok) == len(rows) == 3
    for r in ok:
        assert r["measured_s"] > 0 and r["compute_s"] > 0 and r["run_min_s"] <= r["run_max_s"]
        assert r["samples"] == 4  # 2 runs x (3 epochs - the first)
        assert r["cpu_count"] >= 1 and r["load1_before"] >= 0 and r["load1_after"] >= 0
    doc = _check_outputs(tmp_path / "epoch-quick")
    assert doc["groups"] == 1 and "Planner hits" in md


# ----------------------------------------------------------------------------- plots
def _comm_rows():
    rows = []
    for ds, n in (("squirrel", 5201), ("physics", 34493), ("sbm20k", 20000)):
        for model in ("gcn", "gcnii"):
            for L in (4, 8, 16, 32, 64):
                for mode, f in (("graph", 1.0), ("pipeline", 0.3), ("hybrid", 0.6)):
                    b = (L if mode == "graph" else (1 + L / 64)) * f * n * 400 * (2 if model == "gcnii" else 1)
                    r = {"dataset": ds, "nodes": n, "model": model, "layers": L, "hidden": 100, "mode": mode,
                         "pred_total": b}
                    if L in (8, 16):
                        r["meas_total"] = b
                    rows.append(r)
    return rows

def _epoch_rows(quick=False):
    rows = []
    cases = ["sbm2k-gcnii4"] if quick else ["squirrel-gcn16", "squirrel-gcnii16", "sbm20k-gcnii16"]
    for c in cases:
        for w, cfgs in ((2, ["G2", "P2c8"]), (4, ["G4", "P4c16", "H2x2c8"])):
            if quick and w == 2:
                continue
            for cfg in cfgs:
                m = 0.8 if cfg[0] == "G" else 1.0
                bub = 0.0 if cfg[0] == "G" else 0.2
                rows.append({"case": c, "world": w, "config": cfg, "mode": {"G": "graph", "P": "pipeline", "H": "hybrid"}[cfg[0]],
                             "measured_s": m, "run_min_s": m * 0.9, "run_max_s": m * 1.2, "compute_s": m * 0.8,
                             "comm_s": m * 0.3 + bub, "bubble_s": bub, "pred_s": m * 1.1, "under_load": cfg == "P4c16" and c.startswith("squirrel-gcnii")})
    return rows

def _memory_rows(quick=False):
    rows = []
    for c in (["sbm2k"] if quick else ["squirrel-gcnii32", "physics-gcn16", "sbm20k-gcnii16"]):
        for cfg in (["G4", "P4c16"] if quick else ["G4", "P4c16", "H2x2c8"]):
            m = 380 if quick else 900
            rows.append({"case": c, "config": cfg, "mode": {"G": "graph", "P": "pipeline", "H": "hybrid"}[cfg[0]],
                         "measured_mb": m * (1.1 if cfg[0] == "P" else 1), "pred_mb": m * 0.95})
    return rows

def _scale_rows(quick=False):
    rows = []
    for n in ((2000,) if quick else (31250, 62500, 125000, 250000, 1000000)):
        for cfg in ("G4", "P4c16", "H2x2c8") + (() if quick else ("P4c16+bf16",)):
            if cfg == "P4c16" and n == 1000000:
                rows.append({"nodes": n, "config": cfg, "skipped": "skipped: too big"})
                continue
            rows.append({"nodes": n, "config": cfg, "epoch_s": n / 3e4, "peak_rss_mb": 300 + n / 400,
                         "pred_s": n / 4e4, "pred_mem_mb": 280 + n / 450})
    return rows

def _overhead_rows(quick=False):
    rows = []
    for ds, m in ([("squirrel", "gcn")] if quick else [("squirrel", "gcn"), ("squirrel", "gcnii"), ("physics", "gcn"), ("physics", "gcnii")]):
        r = {"dataset": ds, "model": m, "threads": 1, "pyg_adj_t_s": 1.0, "gnnpipe_s": 0.45, "limit_s": 0.2}
        if not quick:
            r["pyg_edge_index_s"] = 9.0
        rows.append(r)
    return rows


@pytest.mark.parametrize("quick", [False, True])
def test_plots_draw_from_small_result_rows(tmp_path, quick):
    # Every plot function on made-up rows of the real shape, full and --quick sized: it
    # draws, titles carry the settings, and no legend entry names a series not drawn.
    from gnnpipe.bench import accuracy, comm, epoch, memory, overhead, scale

    plt = C.pyplot()
    drawn = {}
    real_save = C.save_fig

    def keep(fig, path):
        drawn[path.name] = ([t.get_text() for t in fig.legends[0].get_texts()] if fig.legends else [],
                            fig.get_suptitle() + " ".join(a.get_title() for a in fig.axes))
        return real_save(fig, path)

    C.save_fig = keep
    try:
        cr = _comm_rows()
        comm.plot([r for r in cr if r["dataset"] == "sbm20k" and r["layers"] in (4, 8)] if quick else cr,
                  tmp_path / "comm_volume.png")
        epoch.plot(_epoch_rows(quick), tmp_path / "epoch_breakdown.png", settings="2 runs x 2 epochs")
        memory.plot(_memory_rows(quick), tmp_path / "memory.png", settings="4 ranks, --lean-memory")
        scale.plot(_scale_rows(quick), tmp_path / "scale.png", settings="GCN-16 d=64")
        overhead.plot(_overhead_rows(quick), tmp_path / "overhead.png", settings="32 layers, d=100")
        accuracy.plot([{"name": "cora-gcn2-graph", "seed": 0, "ok": True, "test_acc": 0.705,
                        "epochs": 20 if quick else 200}], tmp_path / "accuracy.png")
    finally:
        C.save_fig = real_save
    for name, (legend, title) in drawn.items():
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert legend, name  # one figure legend, below the axes
    assert drawn["comm_volume.png"][0] == ["gcn", "gcnii", "graph", "pipeline", "hybrid", "measured"]
    assert "d=100" in drawn["comm_volume.png"][1] and "2 runs x 2 epochs" in drawn["epoch_breakdown.png"][1]
    assert "4 ranks" in drawn["memory.png"][1] and "GCN-16" in drawn["scale.png"][1]
    assert ("PyG edge_index" in drawn["overhead.png"][0]) == (not quick)  # not drawn in quick: no entry
    assert ("* measured under load" in drawn["epoch_breakdown.png"][1]) == (not quick)
    assert ("not a test of the targets" in drawn["accuracy.png"][1]) == quick  # 20 of 200 epochs
    plt.close("all")


def test_epoch_bars_stand_at_the_median():
    # The stacked parts split the median epoch: the bar's top is the median, not the sum of
    # per-rank maxima (which exceeds it).
    from gnnpipe.bench import epoch

    rows = _epoch_rows(True)
    plt = C.pyplot()
    real_save = C.save_fig
    tops = {}

    def keep(fig, path):
        ax = fig.axes[0]
        for p in ax.patches:
            x = round(p.get_x() + p.get_width() / 2)
            tops[x] = max(tops.get(x, 0.0), p.get_y() + p.get_height())
        plt.close(fig)
        return path

    C.save_fig = keep
    try:
        epoch.plot(rows, C.Path("unused.png"))
    finally:
        C.save_fig = real_save
    for i, r in enumerate(rows):
        assert r["compute_s"] + r["comm_s"] > r["measured_s"]  # the raw parts overshoot
        assert tops[i] == pytest.approx(r["measured_s"])


def test_log_ticks_are_plain_decimals():
    plt = C.pyplot()
    fig, ax = plt.subplots()
    ax.plot([1, 2], [0.30, 0.45])
    ax.set_yscale("log")
    C.plain_ticks(ax)
    fig.canvas.draw()
    labels = [t.get_text() for t in ax.get_yticklabels(minor=True) + ax.get_yticklabels() if t.get_text()]
    assert labels and all("10^" not in t and "times" not in t and "×" not in t for t in labels), labels
    plt.close(fig)
