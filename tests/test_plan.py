"""Cost model and planner: bytes equal volume.py's formulas (which the executors' byte
counters are tested against), feasibility, memory rejection, monotonicity, the analytic
bubble, the paper's direction of results, and the gnnpipe-plan CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from gnnpipe import GnnpipeError
from gnnpipe.partition import volume
from gnnpipe.dims import ParallelDims
from gnnpipe.cost import (
    GraphStats,
    ModelSpec,
    PartInfo,
    estimate_part_info,
    feasible_topologies,
    graph_stats_from_graph,
    list_profiles,
    load_profile,
    num_units,
    param_count,
    predict,
    rank_configs,
)

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "datasets"
MODELS = ("gcn", "sage", "gat", "gcnii", "resgcn+")


def _stats(N=20000, E=400000, F=128, K=8, nnz=None, parts=(2, 4, 8)):
    # Hand-made partition facts: every part equal, halo 30 % of a part's nodes.
    infos = [PartInfo(p, int(0.3 * N), N // p + 1, E // p, int(0.3 * N / p) + 1, "test") for p in parts]
    return GraphStats(N, E, F, K, nnz, "synthetic").with_parts(infos)


@pytest.fixture(scope="module")
def a5000():
    return load_profile("a5000-100gbe")


@pytest.fixture(scope="module")
def squirrel(raw_datasets):
    """Squirrel loaded from the raw files (skips only when the real datasets are absent)."""
    from gnnpipe.data.catalog import get_card, load_from_card

    return load_from_card(get_card("squirrel"), raw_datasets / "squirrel")


# ------------------------------------------------------------------ bytes
@pytest.mark.parametrize("model", MODELS)
def test_bytes_are_volume_formulas(model, a5000):
    st = _stats()
    spec = ModelSpec(model, 8, 64, heads=4 if model == "gat" else 1)
    g = predict(st, spec, ParallelDims("graph", 8), a5000)
    assert g.bytes["halo"] == volume.graph_parallel_bytes(st.part(8).sum_m, 128, 8, 64, 4, model, "ours")
    assert g.bytes["pipe"] == 0
    p = predict(st, spec, ParallelDims("pipeline", 1, 8, 16), a5000)
    assert p.bytes["pipe"] == volume.pipeline_bytes(20000, 64, 8, 4, h0=model == "gcnii")
    assert p.bytes["halo"] == 0 and p.bytes["allreduce"] == 0
    h = predict(st, spec, ParallelDims("hybrid", 2, 4, 8), a5000)
    assert h.bytes["halo"] == 0 and h.bytes["pipe"] + h.bytes["way"] == volume.hybrid_bytes(
        20000, st.part(2).sum_m, 128, 8, 64, 4, 2, 4, model, h0=model == "gcnii")
    # The all-reduce: every rank of the group contributes its parameter bytes once.
    assert g.bytes["allreduce"] == 8 * 4 * param_count(st, spec)
    assert h.bytes["allreduce"] == 2 * 4 * param_count(st, spec)


@pytest.mark.parametrize("model", MODELS)
def test_param_count_matches_built_model(model):
    # Independent check of the parameter formula: the real model's parameters.
    from gnnpipe.models import ModelConfig, build_model

    st = _stats(N=50, E=200, F=37, K=5)
    spec = ModelSpec(model, 3, 16, heads=4 if model == "gat" else 1)
    m = build_model(ModelConfig(model, 37, 5, layers=3, hidden=16, heads=spec.heads), seed=0)
    assert param_count(st, spec) == sum(p.numel() for p in m.parameters())
    assert num_units(spec) == len(m.units)


def test_real_plan_bytes_equal_plan_stats(squirrel, a5000):
    # Σ M_p from the real METIS plan: the predicted halo bytes are the plan's stats.json
    # volume (and so what the graph-parallel executor's counters measure).
    from gnnpipe.partition import build_plan, plan_stats

    st = graph_stats_from_graph(squirrel, [4])
    plan = build_plan(squirrel, 4, 1)
    stats = plan_stats(squirrel, plan, {"layers": 16, "hidden": 64, "model": "gcn"})
    pred = predict(st, ModelSpec("gcn", 16, 64), ParallelDims("graph", 4), a5000)
    assert st.part(4).sum_m == stats["parts"]["halo_sum"]
    assert pred.bytes["halo"] == stats["volume"]["graph_parallel_ours"]


# ------------------------------------------------------------------ feasibility
def test_feasible_topologies_rules():
    spec = ModelSpec("gcn", 4, 64)  # 4 units
    tops = feasible_topologies(8, spec, 10000)
    modes = {t.mode for t in tops}
    assert "graph" in modes and "pipeline" not in modes  # 4 units < 8 stages
    for t in tops:
        assert t.world == 8
        if t.mode == "hybrid":
            assert t.ways >= 2 and t.stages >= 2 and t.stages <= 4
            assert t.chunks in {f * t.stages for f in (1, 2, 4, 8)}
    assert {(t.ways, t.stages) for t in tops if t.mode == "hybrid"} == {(2, 4), (4, 2)}
    deep = feasible_topologies(8, ModelSpec("gcnii", 32, 64), 10000)
    assert {t.chunks for t in deep if t.mode == "pipeline"} == {8, 16, 32, 64}
    # World 1: graph parallelism with one part only; a prime world has no hybrid.
    assert [t.mode for t in feasible_topologies(1, spec, 100)] == ["graph"]
    assert not [t for t in feasible_topologies(7, ModelSpec("gcn", 32, 8), 1000) if t.mode == "hybrid"]


def test_infeasible_topologies_raise(a5000):
    with pytest.raises(GnnpipeError, match="ways >= 2 and stages >= 2"):
        ParallelDims("hybrid", 1, 8, 8)
    with pytest.raises(GnnpipeError, match="fewer than 8 stages"):
        predict(_stats(), ModelSpec("gcn", 4, 64), ParallelDims("pipeline", 1, 8, 8), a5000)
    with pytest.raises(GnnpipeError, match="no partition facts for 16 parts"):
        predict(_stats(), ModelSpec("gcn", 4, 64), ParallelDims("graph", 16), a5000)


# ------------------------------------------------------------------ memory
def test_memory_rejection(a5000):
    st = _stats(N=200000, E=20000000, F=512)
    spec = ModelSpec("gcn", 32, 256)
    preds = rank_configs(st, spec, 8, a5000)
    peaks = sorted(p.peak_mem_bytes for p in preds)
    assert peaks[0] < peaks[-1]
    limit = (peaks[0] + peaks[-1]) / 2
    small = replace(a5000, mem_bytes=limit)
    ranked = rank_configs(st, spec, 8, small)
    for p in ranked:
        assert p.fits == (p.peak_mem_bytes <= limit)
        if not p.fits:
            assert "GiB >" in p.reason and "per device" in p.reason
    assert ranked[0].fits and not ranked[-1].fits
    fits = [p.fits for p in ranked]
    assert fits == sorted(fits, reverse=True)  # fitting ones first
    tiny = replace(a5000, mem_bytes=1.0)
    assert not any(p.fits for p in rank_configs(st, spec, 8, tiny))


def test_exact_every_ranks_the_mean_of_stale_and_exact_epochs(a5000):
    """--exact-every N: a pipelined layout's figures are (N - 1) stale epochs and one exact
    (the same layout over one chunk per way, stage 0's own input path) over N; graph mode's
    are unchanged; the recommended command asks for the exact epochs it was ranked with."""
    from gnnpipe.cost.planner import train_command

    st, spec = _stats(), ModelSpec("gcnii", 16, 64)
    plain = {(p.topology, p.shared_input, p.local_carry): p for p in rank_configs(st, spec, 4, a5000)}
    blended = rank_configs(st, spec, 4, a5000, exact_every=3)
    assert {(p.topology, p.shared_input, p.local_carry) for p in blended} == set(plain)
    for p in blended:
        q = plain[(p.topology, p.shared_input, p.local_carry)]
        if p.topology.mode == "graph":
            assert p.epoch_s == q.epoch_s and p.exact_every == 0
            continue
        assert p.exact_every == 3 and p.epoch_s == pytest.approx((2 * q.epoch_s + p.exact_epoch_s) / 3)
        if p.topology.ways == 1:  # (a hybrid's one-chunk facts are estimated by the planner)
            ex = predict(st, replace(spec, shared_input=False, local_carry=False), replace(p.topology, chunks=1),
                         a5000)
            assert p.exact_epoch_s == pytest.approx(ex.epoch_s)
            assert p.bytes["total"] == pytest.approx((2 * q.bytes["total"] + ex.bytes["total"]) / 3)
        assert p.peak_mem_bytes >= q.peak_mem_bytes and "--exact-every 3" in train_command(p, "sbm", spec)
        # every epoch stale was planned: the command says so, whatever gnnpipe-train's default
        assert train_command(q, "sbm", spec).endswith(" --exact-every 0")
    assert [p.epoch_s for p in blended if p.fits] == sorted(p.epoch_s for p in blended if p.fits)


def test_an_exact_epoch_holds_the_history_beside_its_own_buffers(a5000):
    """The exact epochs' stage runs beside the stale stage's history and chunk blocks: the
    blend's peak is the larger of the stale peak and the exact peak plus those, and a
    profile between the two refuses the layout naming the exact epoch."""
    from gnnpipe.cost.predict import with_exact_epochs

    st, spec = _stats(N=200000, E=4000000, F=64), ModelSpec("gcnii", 16, 64)
    t = ParallelDims("pipeline", 1, 4, 8)
    stale, exact = predict(st, spec, t, a5000), predict(st, spec, replace(t, chunks=1), a5000)
    during = max(e.mem_bytes + s.mem["history"] + s.mem["structure"] for s, e in zip(stale.per_stage, exact.per_stage))
    both = with_exact_epochs(stale, exact, 2, a5000)
    assert both.peak_mem_bytes == pytest.approx(max(stale.peak_mem_bytes, during))
    assert during > stale.peak_mem_bytes  # (the whole graph's activations in one chunk)
    small = replace(a5000, mem_bytes=(stale.peak_mem_bytes + during) / 2)
    tight = with_exact_epochs(predict(st, spec, t, small), predict(st, spec, replace(t, chunks=1), small), 2, small)
    assert not tight.fits and "exact epoch" in tight.reason
    with pytest.raises(GnnpipeError, match="N >= 2"):
        with_exact_epochs(stale, exact, 1, a5000)
    with pytest.raises(GnnpipeError, match="internal"):
        with_exact_epochs(stale, stale, 2, a5000)


def test_memory_grows_with_graph(a5000):
    spec = ModelSpec("gcnii", 16, 64)
    small = predict(_stats(N=10000, E=100000), spec, ParallelDims("pipeline", 1, 4, 16), a5000)
    big = predict(_stats(N=100000, E=1000000), spec, ParallelDims("pipeline", 1, 4, 16), a5000)
    assert big.peak_mem_bytes > 5 * (small.peak_mem_bytes - a5000.base_mem_bytes)


# ------------------------------------------------------------------ sanity
def test_more_layers_graph_volume_grows_pipeline_does_not(a5000):
    st = _stats()
    prev_g = prev_p = None
    for L in (8, 16, 32, 64):
        spec = ModelSpec("gcnii", L, 64)
        g = predict(st, spec, ParallelDims("graph", 8), a5000).bytes["halo"]
        p = predict(st, spec, ParallelDims("pipeline", 1, 8, 32), a5000).bytes["pipe"]
        if prev_g is not None:
            assert g > prev_g
            assert p == prev_p
        prev_g, prev_p = g, p


@pytest.mark.parametrize("S,C", [(2, 2), (4, 8), (4, 16), (8, 32), (3, 7)])
def test_bubble_is_analytic_for_equal_stages(S, C, a5000):
    # Every unit identical (F = d = classes), free links, no per-pass overhead: the fill and
    # drain are (S−1)/(C+S−1) of the pipeline's time, as in the schedule tests.
    free = replace(a5000, intra_bw_bytes_s=1e30, inter_bw_bytes_s=1e30, intra_latency_s=0.0,
                   inter_latency_s=0.0, unit_overhead_s=0.0)
    st = GraphStats(10000, 200000, 64, 64, name="equal")
    p = predict(st, ModelSpec("gcn", 4 * S, 64), ParallelDims("pipeline", 1, S, C), free)
    assert p.comm_s == pytest.approx(0.0, abs=1e-12)
    # GPipe with one flush: epoch = Σ_s T_s/C + (C−1)·T_max/C, so the bubble beyond the
    # busiest stage is (Σ_s T_s − T_max)/C exactly ...
    T = [x.compute_s for x in p.per_stage]
    assert p.bubble_s == pytest.approx((sum(T) - max(T)) / C, rel=1e-9)
    # ... and with stages this nearly equal it is close to the schedule's analytic
    # (S−1)/(C+S−1) of the pipeline's time. Stage 0 is lighter (its first unit aggregates
    # the constant features: no input gradient, no backward SpMM), so the fraction falls
    # a few per cent short of the analytic value, never above it.
    frac = p.bubble_s / (p.epoch_s - p.optimizer_s)
    analytic = (S - 1) / (C + S - 1)
    assert 0.9 * analytic <= frac <= analytic * (1 + 1e-9)


def test_faster_links_never_slower(a5000):
    st = _stats()
    spec = ModelSpec("gcn", 16, 128)
    fast = replace(a5000, inter_bw_bytes_s=a5000.inter_bw_bytes_s * 10, intra_bw_bytes_s=a5000.intra_bw_bytes_s * 10)
    for t in feasible_topologies(8, spec, st.num_nodes):
        assert predict(st, spec, t, fast).epoch_s <= predict(st, spec, t, a5000).epoch_s + 1e-12


def test_estimate_sum_m_close_to_real(squirrel):
    # The synthetic estimate of Σ M_p lands within 2× of the real METIS value (Squirrel P=8:
    # real 11.2k); it is an estimate, documented to overestimate community-rich graphs.
    real = graph_stats_from_graph(squirrel, [8]).part(8).sum_m
    est = estimate_part_info(squirrel.num_nodes, squirrel.num_edges, [8])[0]
    assert real / 2 <= est.sum_m <= real * 2
    assert "estimated" in est.source


# ------------------------------------------------------------------ the paper's direction
# The A5000 profile's SpMM rate was fitted to the paper's Reddit graph-parallel breakdown and
# its per-unit overhead to the paper's Squirrel/Flickr pipeline epochs, so checking the
# paper's directions at exactly those values would be circular. Each direction is checked
# over a band around them instead (each fitted rate x0.5, x1, x2): a direction that holds
# over the whole band follows from the model's structure (bytes, depth, overlap), not from
# the fit. Where it does not (Physics GCNII), the test says so and checks less.
BAND = [(sp, uo) for sp in (0.5, 1.0, 2.0) for uo in (0.5, 1.0, 2.0)]


def _g_over_p(stats, spec, prof, spmm=1.0, overhead=1.0):
    prof = replace(prof, spmm_edge_width_s=prof.spmm_edge_width_s * spmm, unit_overhead_s=prof.unit_overhead_s * overhead)
    g = predict(stats, spec, ParallelDims("graph", 8), prof)
    p = predict(stats, spec, ParallelDims("pipeline", 1, 8, 32), prof)
    return g.epoch_s / p.epoch_s


def test_paper_direction_squirrel(squirrel, a5000):
    # The paper's Squirrel runs are 32 layers, d = 1000 (GNNPIPE.md §4; their 0.27 GB
    # pipeline volume is 2·4·7·5201·1000). Pipeline wins (paper: G/P 2.33 for GCN).
    st = graph_stats_from_graph(squirrel, [8], chunks={1: [32]})
    for model in ("gcn", "gcnii"):
        for sp, uo in BAND:
            assert _g_over_p(st, ModelSpec(model, 32, 1000), a5000, sp, uo) > 1.2, (model, sp, uo)


def test_paper_direction_physics(a5000):
    # Published Physics statistics, dense features as the paper used them; Σ M_p from the
    # real METIS plan when prepared, else estimated. Pipeline loses (paper: G/P 0.79, 0.55).
    st = GraphStats(34493, 495924, 8415, 5, name="physics")
    if (DATA / "coauthor_physics" / "meta.json").is_file():
        from gnnpipe.data.graph import Graph

        real = graph_stats_from_graph(Graph.load(DATA / "coauthor_physics"), [8], chunks={1: [32]})
        st = st.with_parts([real.part(8), real.part(1)])
    else:
        st = st.with_parts(estimate_part_info(34493, 495924, [8], chunks={1: [32]}))
    # The pipeline loses only when a unit pass costs at least the fitted overhead: at half of
    # it the model predicts a pipeline win. Checked where the fit puts it, and known to rest
    # on that fit. (GCN used to lose over the whole band: its stage transformed the
    # 8,415-wide input once per chunk that reads a row; it now transforms every row once per
    # epoch, PipelineStage's epoch input transform, and behaves as GCNII does.)
    for model in ("gcn", "gcnii"):
        for sp, uo in BAND:
            if uo >= 1.0:
                assert _g_over_p(st, ModelSpec(model, 32, 100), a5000, sp, uo) < 1.0, (model, sp, uo)
        assert _g_over_p(st, ModelSpec(model, 32, 100), a5000, 1.0, 0.5) > 1.0, model  # the fit matters here


def test_paper_direction_reddit_shaped(a5000):
    # Reddit is not here: published N, E, F and Σ M_p from a scaled-down R-MAT graph with
    # Reddit's average degree (492). Pipeline wins (paper: G/P 2.45).
    st = GraphStats(232965, 114615892, 602, 41, name="reddit")
    st = st.with_parts(estimate_part_info(st.num_nodes, st.num_edges, [8], sample_nodes=5000, chunks={1: [32]}))
    for sp, uo in BAND:
        assert _g_over_p(st, ModelSpec("gcn", 32, 100), a5000, sp, uo) > 1.5, (sp, uo)
    p = predict(st, ModelSpec("gcn", 32, 100), ParallelDims("pipeline", 1, 8, 32), a5000)
    assert p.bytes["pipe"] == 2 * 4 * 7 * 232965 * 100  # the paper's logged 1.215 GB


def test_profiles_load():
    names = list_profiles()
    for want in ("a5000-100gbe", "h100-nvlink", "a100-64gpu-ib", "cpu-this-machine"):
        assert want in names
        prof = load_profile(want)
        assert prof.gemm_flops_s > 0 and prof.mem_bytes > 0 and prof.devices_per_node >= 1


def test_bad_profile_names_file_and_field(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[profile]\nname = "x"\ngemm_flops_s = 1e12\n')
    with pytest.raises(GnnpipeError, match=r"bad\.toml: field profile\.spmm_edge_width_s missing"):
        load_profile(bad)
    with pytest.raises(GnnpipeError, match="not shipped"):
        load_profile("no-such-profile")


def test_user_profiles_come_first(tmp_path, monkeypatch):
    # A calibrated profile lives in the user directory and shadows a shipped one of the
    # same name; the shipped file is never the one written.
    shipped = load_profile("a5000-100gbe")
    text = (Path(__file__).resolve().parents[1] / "gnnpipe/profiles/a5000-100gbe.toml").read_text()
    (tmp_path / "a5000-100gbe.toml").write_text(text.replace('name = "a5000-100gbe"', 'name = "mine"'))
    (tmp_path / "only-mine.toml").write_text(text)
    monkeypatch.setenv("GNNPIPE_PROFILE_DIR", str(tmp_path))
    assert load_profile("a5000-100gbe").name == "mine"
    assert "only-mine" in list_profiles() and "h100-nvlink" in list_profiles()
    assert load_profile("only-mine").gemm_flops_s == shipped.gemm_flops_s
    assert shipped.device == "cuda" and load_profile("cpu-this-machine").device == "cpu"


def test_auto_estimate_nodes_bounds():
    from gnnpipe.cli.plan import ESTIMATE_EDGE_BUDGET, auto_estimate_nodes

    # Reddit's degree: the sample is cut to the edge budget, not 20,000 nodes.
    n = auto_estimate_nodes(232965, 114615892, 64)
    assert 1000 <= n and n * 114615892 / 232965 <= 1.01 * ESTIMATE_EDGE_BUDGET
    assert auto_estimate_nodes(1000000, 20000000, 4) == 20000   # 400k edges: the node cap
    assert auto_estimate_nodes(500, 5000, 4) == 500             # never more than the graph
    assert auto_estimate_nodes(10**7, 10**10, 512) == 8 * 512   # room for parts x chunks


# ------------------------------------------------------------------ CLI
def _cli(*args):
    return subprocess.run([sys.executable, "-m", "gnnpipe.cli.plan", *args], capture_output=True, text=True,
                          timeout=120, cwd=REPO, env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"})


def test_cli_table_and_command():
    r = _cli("--stats", "20000,400000,128,8", "--world", "4", "--layers", "16", "--hidden", "64",
             "--model", "gcnii", "--profile", "a100-64gpu-ib", "--estimate-nodes", "4000")
    assert r.returncode == 0, r.stderr
    assert "configuration" in r.stdout and "graph P=4" in r.stdout and "pipeline S=4" in r.stdout
    cmd = [ln for ln in r.stdout.splitlines() if ln.strip().startswith("mpirun")]
    assert len(cmd) == 1 and cmd[0].strip().startswith("mpirun -np 4 gnnpipe-train")
    assert "--mode" in cmd[0]


def test_cli_json_64_gpus():
    r = _cli("reddit", "--world", "64", "--layers", "32", "--hidden", "100", "--profile", "a100-64gpu-ib",
             "--json", "--top", "5", "--estimate-nodes", "3000", "--root", "/nonexistent")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["world"] == 64 and len(out["predictions"]) == 5
    assert all(p["topology"]["world"] == 64 for p in out["predictions"])
    eps = [p["epoch_s"] for p in out["predictions"] if p["fits"]]
    assert eps == sorted(eps)
    assert out["recommended"].startswith("mpirun -np 64 gnnpipe-train")


@pytest.mark.parametrize("profile,device", [("a5000-100gbe", "cuda"), ("cpu-this-machine", "cpu")])
def test_recommended_command_trains_what_was_planned(profile, device):
    # The printed command, parsed by the trainer's own parser, names the planned graph
    # (sizes of the generated R-MAT graph), device, mode, ways, stages and chunks.
    import shlex

    from gnnpipe.config import parse_config

    r = _cli("rmat", "--stats", "200000,2000000,64,5", "--world", "4", "--layers", "16", "--hidden", "64",
             "--model", "gcnii", "--profile", profile, "--history-dtype", "bfloat16", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    best = [p for p in out["predictions"] if p["fits"]][0]["topology"]
    argv = shlex.split(out["recommended"])
    assert argv[:4] == ["mpirun", "-np", "4", "gnnpipe-train"]
    cfg, _ = parse_config(argv[4:])
    assert (cfg.dataset, cfg.synth_nodes, cfg.synth_features, cfg.synth_classes) == ("rmat", 200000, 64, 5)
    assert int(cfg.synth_nodes * cfg.synth_degree) == 2000000
    assert (cfg.model, cfg.layers, cfg.hidden, cfg.device) == ("gcnii", 16, 64, device)
    assert cfg.mode == best["mode"]
    if cfg.mode == "graph":
        assert cfg.parts == best["ways"]
    else:
        assert (cfg.ways, cfg.stages, cfg.chunks, cfg.history_dtype) == (best["ways"], best["stages"], best["chunks"],
                                                                         "bfloat16")
    # planned with gnnpipe-train's default schedule (every 2nd epoch exact), and it runs that
    assert out["exact_every"] == 2 and cfg.exact_every == (0 if cfg.mode == "graph" else 2)
    assert all(p["exact_every"] == (0 if p["topology"]["mode"] == "graph" else 2) for p in out["predictions"])
    # The table prints the same command.
    t = _cli("rmat", "--stats", "200000,2000000,64,5", "--world", "4", "--layers", "16", "--hidden", "64",
             "--model", "gcnii", "--profile", profile, "--history-dtype", "bfloat16")
    assert out["recommended"] in t.stdout
    assert "estimated from a 20,000-node R-MAT graph" in t.stderr


@pytest.mark.parametrize("args,msg", [
    (["--stats", "10,x,5", "--world", "2"], "--stats: expected comma-separated integers"),
    (["--stats", "100,400,5", "--world", "0"], "--world: expected at least 1"),
    (["--stats", "100,400,5", "--world", "2", "--profile", "nope"], "not shipped"),
    (["rmat", "--world", "2"], "give its size with --stats"),
    (["--stats", "100,400,5", "--world", "2", "--model", "mlp"], "model: expected one of"),
    (["no-such-dataset", "--world", "2"], "not found"),
    (["--stats", "100,400,5", "--world", "2", "--exact-every", "1"], "--exact-every 1: expected an integer N >= 2"),
    (["--stats", "100,400,5", "--world", "2", "--exact-every", "2", "--exact"], "--exact already makes every epoch"),
    (["--stats", "100,400,5", "--world", "2", "--exact-every", "x"], "--exact-every"),
])
def test_cli_bad_input_one_line(args, msg):
    r = _cli(*args)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and msg in lines[0] and lines[0].startswith("gnnpipe-plan: error:")


def test_model_spec_of_a_run_maps_its_settings_one_way():
    from types import SimpleNamespace

    from gnnpipe.config import TrainConfig

    cfg = TrainConfig(model="gat", layers=8, hidden=64, heads=4, history_dtype="bfloat16", wire="int8")
    assert ModelSpec.of(cfg) == ModelSpec("gat", 8, 64, 4, history_bytes=2, wire="int8")
    built = SimpleNamespace(model="gcnii", layers=16, hidden=32, heads=1)  # a ModelConfig's fields: no dtype, no wire
    assert ModelSpec.of(built) == ModelSpec("gcnii", 16, 32, 1)
    assert ModelSpec.of(cfg, wire="float32").wire == "float32"
    with pytest.raises(GnnpipeError, match="wire"):
        ModelSpec.of(SimpleNamespace(model="gcn", layers=2, hidden=8, heads=1, wire="auto"))
