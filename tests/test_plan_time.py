"""The time model's structure: oversubscription, the pipeline's per-chunk history work,
collective waits, optional profile fields, re-predicting stored epoch results, and the
planner's closed-form pipeline time against the schedule simulator.

No timed assertions: these check what the model computes from its inputs."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from fractions import Fraction

import pytest

from gnnpipe import GnnpipeError
from gnnpipe.cost import (GraphStats, ModelSpec, PartInfo, load_profile, predict, profile_toml, profiles_dir,
                          train_command, unit_works)
from gnnpipe.cost.predict import pipeline_span
from gnnpipe.dims import ParallelDims
from gnnpipe.schedule import ActionKind, chunk_order, gnnpipe_schedule, lower, simulate

CPU_FIELDS = dict(cores_per_host=2.0, devices_per_node=64, shared_slowdown=1.1, oversub_slowdown=1.2,
                  coll_overhead_s=3e-4, oversub_wait_s=5e-3, chunk_overhead_s=1e-4, gather_bytes_s=5e9)


@pytest.fixture(scope="module")
def cpu():
    return replace(load_profile("a5000-100gbe"), name="cpu", gemm_flops_s=6e10, spmm_edge_width_s=7e9,
                   mem_bytes_s=3e9, unit_overhead_s=3e-4, intra_bw_bytes_s=2e9, inter_bw_bytes_s=2e9,
                   intra_latency_s=1e-4, inter_latency_s=1e-4, **CPU_FIELDS)


def _stats(chunk_nbrs=None, chunk_halo=None):
    N, E = 20000, 200000
    one = PartInfo(1, 0, N, E, 0, "whole graph", {}, chunk_nbrs or {})
    two = PartInfo(2, 6000, 10000, 100000, 3000, "test", chunk_halo or {}, {8: 30000})
    four = PartInfo(4, 12000, 5000, 50000, 3000, "test")
    return GraphStats(N, E, 32, 8, name="t").with_parts([one, two, four])


def test_slowdown_rules(cpu):
    assert cpu.slowdown(1) == 1.0
    assert cpu.slowdown(2) == pytest.approx(1.1)  # every core busy
    assert cpu.slowdown(4) == pytest.approx(1.1 * 1.2 * 2)  # two ranks per core
    gpu = load_profile("a5000-100gbe")
    assert gpu.cores_per_host == gpu.devices_per_node and gpu.slowdown(8) == 1.0


def test_oversubscribed_graph_mode_pays_compute_share_and_waits(cpu):
    st, spec = _stats(), ModelSpec("gcnii", 8, 64)
    cpu = replace(cpu, oversub_wait_s=1e-3)  # below the compute between two collectives here
    g4 = predict(st, spec, ParallelDims("graph", 4), cpu)
    no_wait = predict(st, spec, ParallelDims("graph", 4), replace(cpu, oversub_wait_s=0.0))
    one_core_each = predict(st, spec, ParallelDims("graph", 4), replace(cpu, cores_per_host=4.0))
    assert g4.compute_s == pytest.approx(one_core_each.compute_s * 1.1 * 1.2 * 2 / 1.1, rel=1e-9)
    # 8 exchanged layers both ways + the all-reduce: 17 blocking collectives, each waiting.
    assert g4.comm_s - no_wait.comm_s == pytest.approx(17 * 1e-3, rel=1e-9)
    assert one_core_each.comm_s < no_wait.comm_s + 1e-12


def test_pipeline_counts_history_rows_and_per_chunk_costs(cpu):
    spec = ModelSpec("gcnii", 8, 64)
    topo = ParallelDims("pipeline", 1, 2, 8)
    few = predict(_stats({8: 10000}), spec, topo, cpu)
    many = predict(_stats({8: 60000}), spec, topo, cpu)
    # More out-of-chunk neighbour rows: more gather/scatter bytes, on every aggregating unit.
    assert many.compute_s > few.compute_s
    # The per-chunk history overhead grows with the chunks (2 passes per chunk and unit).
    free = replace(cpu, chunk_overhead_s=0.0)
    d8 = predict(_stats({8: 10000}), spec, topo, cpu).per_stage[0].compute_s - \
        predict(_stats({8: 10000}), spec, topo, free).per_stage[0].compute_s
    units0 = [j for j in range(*few.per_stage[0].units) if 1 <= j <= 8]
    assert d8 == pytest.approx(2 * 8 * len(units0) * 1e-4 * cpu.slowdown(2), rel=1e-9)


def test_only_gat_pipeline_transforms_neighbour_rows(cpu):
    # gat transforms h_src (attention needs every source row's transform): its pipeline
    # GEMMs grow with the gathered rows. gcn's and sage's hidden layers aggregate first and
    # gcnii always does, so theirs stay on the chunk's own rows.
    topo = ParallelDims("pipeline", 1, 2, 8)
    nogemm = replace(cpu, gemm_flops_s=1e30)
    for spec, grows in ((ModelSpec("gat", 8, 64), True), (ModelSpec("gcn", 8, 64), False),
                        (ModelSpec("sage", 8, 64), False), (ModelSpec("gcnii", 8, 64), False)):
        def gemm_part(nbrs):
            st = _stats({8: nbrs})
            return predict(st, spec, topo, cpu).compute_s - predict(st, spec, topo, nogemm).compute_s
        assert (gemm_part(60000) > gemm_part(10000) * 1.5) == grows


def test_missing_chunk_facts_are_estimated_with_a_note(cpu):
    p = predict(_stats(), ModelSpec("gcnii", 8, 64), ParallelDims("pipeline", 1, 2, 8), cpu)
    assert any("estimated" in n for n in p.notes)
    h = predict(_stats(), ModelSpec("gcnii", 8, 64), ParallelDims("hybrid", 2, 2, 8), cpu)
    assert any("per-chunk halo" in n for n in h.notes)
    h2 = predict(_stats(chunk_halo={8: 9000}), ModelSpec("gcnii", 8, 64), ParallelDims("hybrid", 2, 2, 8), cpu)
    assert not any("per-chunk halo" in n for n in h2.notes)
    # each boundary row travels once per layer and direction: Σ_w M_w = 6000 rows, not the
    # per-chunk 9000 (which prices only the gathers)
    assert h2.bytes["way"] == 2 * 4 * 64 * 8 * 6000


def test_hybrid_pair_exchanges_do_not_wait(cpu):
    # 2 ways x 2 stages on 2 cores: each exchange is between 2 ranks, which fit the cores.
    st, spec = _stats(chunk_halo={8: 9000}), ModelSpec("gcnii", 8, 64)
    h = predict(st, spec, ParallelDims("hybrid", 2, 2, 8), cpu)
    h_nowait = predict(st, spec, ParallelDims("hybrid", 2, 2, 8), replace(cpu, oversub_wait_s=0.0))
    assert h.epoch_s == pytest.approx(h_nowait.epoch_s, rel=1e-12)


def test_optional_profile_fields_round_trip_and_validate(tmp_path, cpu):
    path = tmp_path / "p.toml"
    path.write_text(profile_toml(replace(cpu, dropout_values_s=1.25e8)))
    back = load_profile(path)
    for k, v in {**CPU_FIELDS, "dropout_values_s": 1.25e8}.items():
        assert getattr(back, k) == pytest.approx(v), k
    bad = path.read_text().replace("oversub_slowdown = 1.2", "oversub_slowdown = 0.5")
    path.write_text(bad)
    with pytest.raises(GnnpipeError, match=r"p\.toml: field profile\.oversub_slowdown"):
        load_profile(path)
    path.write_text(profile_toml(replace(cpu, cpu_share_ranks=4)))
    back = load_profile(path)
    assert back.cpu_share_ranks == 4 and isinstance(back.cpu_share_ranks, int) and back.ranks_on_host(8) == 4
    path.write_text(path.read_text().replace("cpu_share_ranks = 4", "cpu_share_ranks = 2.5"))
    with pytest.raises(GnnpipeError, match=r"p\.toml: field profile\.cpu_share_ranks"):
        load_profile(path)


def test_validate_repredicts_stored_epoch_results(tmp_path, capsys):
    # A stored result of the quick case (measured numbers made up: nothing is timed here).
    from gnnpipe.bench.epoch import QUICK_CASES, world_topologies
    from gnnpipe.cli.plan import main

    rows = [{"case": "sbm2k-gcnii4", "world": 4, "mode": t.mode, "config": t.short(), "measured_s": m,
             "run_min_s": m, "run_max_s": m, "compute_s": m, "comm_s": 0.0, "bubble_s": 0.0}
            for t, m in zip(world_topologies(4), (0.1, 0.2, 0.3))]
    assert "sbm2k-gcnii4" in QUICK_CASES
    d = tmp_path / "epoch"
    d.mkdir()
    (d / "results.json").write_text(json.dumps({"rows": rows}))
    assert main(["validate", str(d), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["config"] for r in out["rows"]] == ["G4", "P4c16", "H2x2c8"]
    assert all(r["pred_s"] > 0 and r["rel_err"] == pytest.approx((r["pred_s"] - r["measured_s"]) / r["measured_s"])
               for r in out["rows"])
    assert len(out["planner"]) == 1 and out["planner"][0]["fastest"] == "G4"
    (d / "results.json").write_text("{not json")
    assert main(["validate", str(d)]) == 2
    assert "not a readable epoch results.json" in capsys.readouterr().err
    # Cells measured under load are left out (and counted) unless asked for.
    rows[1].update(under_load=True, load1_before=6.9, cpu_count=2)
    (d / "results.json").write_text(json.dumps({"rows": rows}))
    assert main(["validate", str(d), "--json"]) == 0
    cap = capsys.readouterr()
    out = json.loads(cap.out)
    assert [r["config"] for r in out["rows"]] == ["G4", "H2x2c8"] and out["left_out_under_load"] == 1
    assert cap.err.strip().splitlines() == ["gnnpipe-plan validate: left out 1 row(s) measured under load "
                                            "(--include-loaded keeps them)"]
    assert main(["validate", str(d), "--include-loaded"]) == 0
    md = capsys.readouterr().out
    assert "P4c16 *" in md and "1 of 3 measured while the 1-minute load exceeded the cores" in md


def test_validate_without_results_says_what_to_run(tmp_path, capsys):
    from gnnpipe.cli.plan import main

    assert main(["validate", str(tmp_path / "results" / "epoch")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "run `gnnpipe-bench epoch` first" in err[0]


def test_calibrate_never_writes_a_shipped_profile(capsys):
    from gnnpipe.cli.plan import main

    target = profiles_dir() / "cpu-this-machine.toml"
    before = target.read_bytes()
    assert main(["calibrate", "--out", str(target)]) == 2
    assert "that is a shipped profile" in capsys.readouterr().err
    assert target.read_bytes() == before


def test_calibrate_writes_the_user_profile_dir(tmp_path, monkeypatch, capsys):
    # The measurements are stubbed (the real ones take a minute): what is checked is where
    # the profile goes and that the planner then finds it by name.
    from gnnpipe.cli import plan as P
    from gnnpipe.cost import calibrate as cal

    fake = {"gemm_flops_s": 5e10, "spmm_edge_width_s": 5e9, "spmm_by_width": {64: 5e9}, "mem_bytes_s": 5e9,
            "unit_overhead_s": 1e-4, "bw_bytes_s": 2e9, "latency_s": 5e-5, "p2p": {8: 5e-5}}
    monkeypatch.setattr(cal, "measure", lambda quick, p2p: fake)
    monkeypatch.setattr(cal, "measure_dropout", lambda quick: 1e8)
    monkeypatch.setattr(cal, "measure_units", lambda *a, **k: {"spmm_edge_width_s": 4e9, "mem_bytes_s": 3e9,
                                                             "unit_overhead_s": 2e-4, "fit": []})
    monkeypatch.setattr(cal, "measure_chunk_path", lambda quick: {"gather_bytes_s": 5e9, "chunk_overhead_s": 1e-5})
    monkeypatch.setattr(cal, "measure_contention", lambda cores, quick: {
        "alone_s": 0.01, "cores_s": 0.011, "oversub_s": 0.025, "shared_slowdown": 1.1, "oversub_slowdown": 1.1})
    monkeypatch.setattr(cal, "measure_collectives", lambda cores, quick: {
        "coll_overhead_s": 1e-4, "oversub_wait_s": 1e-3, "oversub_iter_s": 0.02, "work_alone_s": 0.01})
    monkeypatch.setattr(cal, "measure_base_mem", lambda: 3e8)
    monkeypatch.setenv("GNNPIPE_PROFILE_DIR", str(tmp_path / "mine"))
    assert P.main(["calibrate"]) == 0
    assert (tmp_path / "mine" / "cpu-this-machine.toml").is_file()
    err = capsys.readouterr().err
    assert "wrote " + str(tmp_path / "mine" / "cpu-this-machine.toml") in err
    assert "the planner's --profile cpu-this-machine now reads it" in err
    assert load_profile("cpu-this-machine").unit_overhead_s == pytest.approx(2e-4)
    # Written elsewhere, the name would read another file: the message gives the path to pass.
    other = tmp_path / "lab" / "today.toml"
    assert P.main(["calibrate", "--out", str(other)]) == 0
    err = capsys.readouterr().err
    assert f"pass --profile {other} to the planner" in err and "now reads it" not in err
    assert load_profile(str(other)).unit_overhead_s == pytest.approx(2e-4)


def test_calibrate_device_runs_the_gpu_measurements_on_the_cpu_as_a_dry_run():
    """The GPU calibration's code path (GEMM/SpMM/copy ceilings, the unit fit on the larger
    cases, the history path) on the CPU at small sizes: a profile for ``--device cuda`` whose
    every rate is measured (positive) and whose links are said to be assumed."""
    from gnnpipe.cost import calibrate as cal

    prof, comments = cal.calibrate_device("cpu", "dry", quick=True)
    assert prof.name == "dry" and prof.device == "cuda"
    for k in ("gemm_flops_s", "spmm_edge_width_s", "mem_bytes_s", "gather_bytes_s", "dropout_values_s"):
        assert getattr(prof, k) > 0, k
    assert len([c for c in comments if "modelled" in c]) == len(cal.UNIT_FIT_CASES_GPU)
    assert any("Links NOT measured" in c for c in comments)


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="this machine has a GPU")
def test_calibrate_device_cuda_without_a_gpu_says_so_in_one_line(capsys, tmp_path):
    from gnnpipe.cli.plan import main

    assert main(["calibrate", "--device", "cuda", "--out", str(tmp_path / "g.toml")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--device cuda: torch sees no CUDA device" in err[0]
    assert not (tmp_path / "g.toml").exists()


def test_oversubscribed_unequal_stages_share_the_cores_by_demand(cpu):
    """4 stages on 2 cores: the busiest stage runs at max(its own work, the host's demand
    over the cores) — not at its work times ranks/cores when the other stages wait."""
    st = GraphStats(20000, 200000, 2000, 8, name="wide").with_parts(
        [PartInfo(1, 0, 20000, 200000, 0, "whole graph", {}, {16: 60000}),
         PartInfo(4, 12000, 5000, 50000, 3000, "test")])
    spec, topo = ModelSpec("gcn", 8, 64), ParallelDims("pipeline", 1, 4, 16)  # F=2000: stage 0 is heavy
    flat = dict(shared_slowdown=1.0, oversub_slowdown=1.0)
    alone = predict(st, spec, topo, replace(cpu, cores_per_host=4.0, **flat))  # one core per stage
    shared = predict(st, spec, topo, replace(cpu, cores_per_host=2.0, **flat))
    raw = [x.compute_s for x in alone.per_stage]
    assert max(raw) > 1.5 * sorted(raw)[-2]  # unequal indeed
    want = max(max(raw), 4 * (sum(raw) / 4) / 2.0)
    assert max(x.compute_s for x in shared.per_stage) == pytest.approx(want, rel=1e-9)
    assert want < 2.0 * max(raw)  # better than the fair share r/c applied to the busiest stage
    # Equal demand everywhere (graph mode) keeps the fair share.
    g_alone = predict(st, spec, ParallelDims("graph", 4), replace(cpu, cores_per_host=4.0, **flat))
    g_shared = predict(st, spec, ParallelDims("graph", 4), replace(cpu, cores_per_host=2.0, **flat))
    assert g_shared.compute_s == pytest.approx(2.0 * g_alone.compute_s, rel=1e-9)


def test_graph_mode_sage_transforms_its_source_rows_with_w_l_only(cpu):
    """A SAGE layer that transforms first (in > out) runs its neighbour transform W_l on every
    source row (own + halo) and its root transform W_r on its destination rows
    (gnnpipe.models.pyg.SAGEConv): graph mode's GEMM time is half the unit's FLOPs over the
    source rows, half over its rows; GCN's transform-first GEMM runs all on the source rows."""
    from gnnpipe.cost.units import gemm_rows_frac, unit_works

    st = GraphStats(20000, 200000, 2000, 8, name="wide").with_parts(
        [PartInfo(4, 36000, 5000, 50000, 9000, "test")])
    gemm_only = replace(cpu, spmm_edge_width_s=1e30, mem_bytes_s=1e30, unit_overhead_s=0.0, dropout_values_s=1e30,
                        gather_bytes_s=1e30, cores_per_host=64.0, shared_slowdown=1.0, oversub_slowdown=1.0)
    rows, src = 5000 / 20000, (5000 + 9000) / 20000
    for model, share in (("sage", 0.5), ("gcn", 1.0)):
        spec = ModelSpec(model, 3, 64)
        us = unit_works(st, spec)
        assert [u.gemm_on_src for u in us] == [True, False, True]  # 2000 -> 64 and 64 -> 8 transform first
        assert us[0].src_gemm_share == share and gemm_rows_frac(us[1], rows, src) == rows
        want = sum(u.gemm_flops * (share * src + (1 - share) * rows if u.gemm_on_src else rows) for u in us) / 6e10
        p = predict(st, spec, ParallelDims("graph", 4), gemm_only)
        assert p.compute_s == pytest.approx(want, rel=1e-9), model


def test_calibrate_measures_the_base_memory_of_a_rank():
    """The profile's per-rank base is measured (a fresh process trains a 400-node graph), not
    written by hand: it must at least hold torch and PyG, and not be graph-sized."""
    import resource

    from gnnpipe.cost.calibrate import measure_base_mem

    base = measure_base_mem()
    here = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # this test process
    assert 1e8 < base < 2e9
    assert base > 0.5 * min(here, 4e8)  # the same libraries are loaded here


def test_history_terms_follow_the_executor(cpu):
    # A stage holds two buffers of its way's rows per aggregating unit whose input is
    # trained (history + cross-chunk gradients, or history + snapshot), in the history's
    # dtype; bfloat16 halves them and the stale hybrid's halo bytes, not the pipe's.
    st = _stats({8: 30000}, chunk_halo={8: 9000})
    f32, b16 = ModelSpec("gcn", 8, 64), ModelSpec("gcn", 8, 64, history_bytes=2)
    pipe = ParallelDims("pipeline", 1, 2, 8)
    units = unit_works(st, f32)
    for x in predict(st, f32, pipe, cpu).per_stage:
        a, b = x.units
        trained = [u for u in units[a:b] if u.aggregates and not u.reads_features]
        assert x.mem["history"] == pytest.approx(2 * 4 * st.num_nodes * sum(u.in_dim for u in trained))
    p32, p16 = predict(st, f32, pipe, cpu), predict(st, b16, pipe, cpu)
    for x32, x16 in zip(p32.per_stage, p16.per_stage):
        assert x16.mem["history"] == pytest.approx(x32.mem["history"] / 2)
    assert p16.bytes == p32.bytes
    hyb = ParallelDims("hybrid", 2, 2, 8)
    h32, h16 = predict(st, f32, hyb, cpu), predict(st, b16, hyb, cpu)
    # a way's buffers hold its own part's rows and its halo's (R_u beside H_u)
    way_rows = st.part(2).max_nodes + st.part(2).max_halo
    x = h32.per_stage[1]
    trained = [u for u in units[x.units[0]:x.units[1]] if u.aggregates and not u.reads_features]
    assert x.mem["history"] == pytest.approx(2 * 4 * way_rows * sum(u.in_dim for u in trained))
    assert h16.bytes["way"] == h32.bytes["way"] // 2 and h16.bytes["pipe"] == h32.bytes["pipe"]
    assert "--history-dtype bfloat16" in train_command(h16, "d", b16)
    assert "--history-dtype" not in train_command(h32, "d", f32)
    with pytest.raises(GnnpipeError, match="history_bytes"):
        ModelSpec("gcn", 8, 64, history_bytes=3)


def test_input_dropout_runs_over_neighbour_rows(cpu):
    # Every aggregating unit drops out its whole h_src (own + neighbour rows) before it
    # aggregates: that elementwise work grows with the chunks' neighbour rows (and with the
    # halo in graph mode); a row-wise unit's does not.
    topo = ParallelDims("pipeline", 1, 2, 8)
    noelem = replace(cpu, mem_bytes_s=1e30)
    spec = ModelSpec("gcnii", 8, 64)

    def elem_part(nbrs):
        st = _stats({8: nbrs})
        return predict(st, spec, topo, cpu).compute_s - predict(st, spec, topo, noelem).compute_s

    assert elem_part(60000) > 1.5 * elem_part(10000)
    # and at the profile's own dropout rate when it has one (hashed dropout costs several
    # elementwise passes per value)
    slow_drop = replace(cpu, dropout_values_s=1e6)
    st = _stats({8: 10000})
    assert predict(st, spec, topo, slow_drop).compute_s > predict(st, spec, topo, cpu).compute_s
    for u in unit_works(_stats(), spec):
        assert 0.0 <= u.elem_src_bytes <= u.elem_bytes
        assert u.drop_values > 0  # every gcnii unit drops out its input


def test_calibrate_measures_hashed_dropout():
    from gnnpipe.cost.calibrate import measure_dropout

    rate = measure_dropout(quick=True)
    assert 1e5 < rate < 1e12  # values per second of CPU time: positive and finite


# ----------------------------------------------------------------------------- closed form vs simulator
def _simulated_span(S, C, busy, t_b, opt=0, seed=0):
    """Makespan of GNNPipe's lowered schedule in :func:`gnnpipe.schedule.simulate` with
    the planner's per-action costs: ``F`` on stage s takes busy_s/3/C, ``B`` twice that, a
    message over boundary b (either direction) t_b, ``OPT`` ``opt``."""
    order = chunk_order(C, epoch=1, seed=seed)  # the order does not matter: chunks are identical
    lowered = lower(gnnpipe_schedule(S, order), S)

    def compute(a):
        f = busy[a.stage] / 3 / C
        return f if a.kind is ActionKind.F else 2 * f

    return simulate(lowered, S, compute_time=compute, comm_time=lambda a: t_b[min(a.stage, a.peer)],
                    opt_time=lambda a: opt)


@pytest.mark.parametrize("S,C", [(2, 1), (2, 2), (2, 8), (3, 5), (4, 4), (4, 16), (5, 3), (7, 10)])
@pytest.mark.parametrize("costs", ["equal, free links", "unequal stages", "slow links", "mixed"])
def test_closed_form_pipeline_time_equals_the_simulated_schedule(S, C, costs):
    """The planner's closed-form pipeline time (:func:`gnnpipe.cost.predict.pipeline_span`)
    is exactly the simulator's makespan of the lowered GNNPipe schedule with the same
    per-action compute and message times (Fractions: no tolerance). Both phases are flow
    shops of C identical jobs over stage, link, stage, ...: sum of the machines + (C−1) ×
    the slowest."""
    rng = random.Random(f"{S}/{C}/{costs}")
    if costs == "equal, free links":
        busy, t_b = [Fraction(3 * C)] * S, [Fraction(0)] * (S - 1)
    elif costs == "unequal stages":
        busy, t_b = [Fraction(rng.randint(1, 50), 7) for _ in range(S)], [Fraction(1, 1000)] * (S - 1)
    elif costs == "slow links":  # every message longer than any chunk's backward
        busy = [Fraction(rng.randint(1, 9)) for _ in range(S)]
        t_b = [Fraction(rng.randint(10, 20)) for _ in range(S - 1)]
    else:
        busy = [Fraction(rng.randint(1, 40), rng.randint(1, 5)) for _ in range(S)]
        t_b = [Fraction(rng.randint(0, 30), rng.randint(1, 3) * C) for _ in range(S - 1)]
    span, exposed = pipeline_span(busy, t_b, C)
    sim = _simulated_span(S, C, busy, t_b)
    assert span == sim.makespan, sim.grid()
    if costs == "equal, free links":  # and the bubble is the analytic (S−1)/(C+S−1)
        assert exposed == 0 and sim.bubble_fraction == Fraction(S - 1, C + S - 1)
    # the exposed transfers are part of the span, never more than the messages' own time
    assert 0 <= exposed <= 2 * sum(t_b) + (C - 1) * 2 * max(t_b, default=0)


@pytest.mark.parametrize("model", ["gcn", "gcnii"])
@pytest.mark.parametrize("S,C", [(2, 2), (2, 8), (4, 4), (4, 16)])
@pytest.mark.parametrize("link", ["loopback", "slow"])
def test_predicted_pipeline_epoch_equals_the_simulated_schedule(cpu, model, S, C, link):
    """End to end: ``predict``'s pipeline epoch (D = 1) is the simulated makespan of the
    lowered schedule with the prediction's own per-stage times (``compute_s + halo_s``),
    the message time of a chunk's activations written out here from the profile (latency +
    collective overhead + rows/C · width · 4 bytes / bandwidth; GCNII's h0 travels beside
    them), and its optimizer step; equal up to float rounding (1e-12)."""
    prof = cpu if link == "loopback" else replace(cpu, intra_bw_bytes_s=2e7, intra_latency_s=2e-3)
    st = _stats({C: 30000})
    spec = ModelSpec(model, 8, 64)
    pred = predict(st, spec, ParallelDims("pipeline", 1, S, C), prof)
    busy = [x.compute_s + x.halo_s for x in pred.per_stage]
    width = spec.hidden * (2 if model == "gcnii" else 1)
    msg = prof.intra_latency_s + prof.coll_overhead_s + st.num_nodes / C * width * 4 / prof.intra_bw_bytes_s
    sim = _simulated_span(S, C, busy, [msg] * (S - 1), opt=pred.optimizer_s)
    assert pred.epoch_s == pytest.approx(sim.makespan, rel=1e-12)
    if link == "slow":
        assert pred.comm_s > 0.1 * pred.epoch_s  # the links do matter in this case


def test_hybrid_epoch_is_the_simulated_way_plus_the_weight_allreduce(cpu):
    """The hybrid's busiest way is the same pipeline (each stage's blocking halo exchanges
    folded into its per-chunk time, as the simulator's stage time); the one gap is the
    weight all-reduce across ways after the flush, which a one-way schedule has no action
    for: the prediction adds it (ring over the D ways + one collective's overhead)."""
    st = _stats({8: 30000}, chunk_halo={8: 9000})
    spec, D, S, C = ModelSpec("gcnii", 8, 64), 2, 2, 8
    pred = predict(st, spec, ParallelDims("hybrid", D, S, C), cpu)
    busy = [x.compute_s + x.halo_s for x in pred.per_stage]
    rows = st.part(D).max_nodes
    msg = cpu.intra_latency_s + cpu.coll_overhead_s + rows / C * 2 * spec.hidden * 4 / cpu.intra_bw_bytes_s
    sim = _simulated_span(S, C, busy, [msg] * (S - 1), opt=pred.optimizer_s)
    allreduce = max(2 * (D - 1) / D * x.params * 4 / cpu.intra_bw_bytes_s + 2 * (D - 1) * cpu.intra_latency_s
                    + cpu.coll_overhead_s for x in pred.per_stage)
    assert pred.epoch_s == pytest.approx(sim.makespan + allreduce, rel=1e-12)
