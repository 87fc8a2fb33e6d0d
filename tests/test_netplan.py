"""The cost model's network term (issue 12, part 4): :func:`gnnpipe.cost.with_link`,
``gnnpipe-plan --link-rate``, the ``a2a_factor`` profile field, the fit behind
``gnnpipe-plan calibrate --network`` and, with root (``netns``), a real measurement on an
emulated 2-host cluster shaped to 100 Mbit/s.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace

import pytest

from gnnpipe import GnnpipeError
from gnnpipe.cli.plan import main as plan_main
from gnnpipe.cost import (GraphStats, ModelSpec, PartInfo, load_profile, predict, profile_toml, with_link)
from gnnpipe.dims import ParallelDims


def _stats(N=20000, E=400000, F=128, K=8, parts=(2, 4)):
    # Every part equal, halo 30 % of a part's nodes: communication dominates at 100 Mbit/s.
    infos = [PartInfo(p, int(0.3 * N), N // p + 1, E // p, int(0.3 * N / p) + 1, "test") for p in parts]
    return GraphStats(N, E, F, K, None, "synthetic").with_parts(infos)


@pytest.fixture(scope="module")
def cpu():
    return load_profile("cpu-this-machine")


def test_with_link_fields(cpu):
    p = with_link(cpu, 100_000_000)
    assert p.inter_bw_bytes_s == 12.5e6 and p.devices_per_node == 1
    assert p.inter_latency_s == cpu.inter_latency_s  # not measured: the profile's
    assert (p.gemm_flops_s, p.intra_bw_bytes_s, p.cores_per_host) == (cpu.gemm_flops_s, cpu.intra_bw_bytes_s,
                                                                       cpu.cores_per_host)
    q = with_link(cpu, 10**9, ranks_per_host=2, latency_s=1e-4)
    assert q.inter_bw_bytes_s == 1.25e8 and q.devices_per_node == 2 and q.inter_latency_s == 1e-4
    u = with_link(cpu, None)
    assert u.inter_bw_bytes_s == cpu.inter_bw_bytes_s and u.devices_per_node == 1 and "unshaped" in u.name
    assert cpu.devices_per_node == 64  # the original is untouched
    for bad in ((0, 1, None), (-5, 1, None), (10**8, 0, None), (10**8, 1, -1.0)):
        with pytest.raises(GnnpipeError):
            with_link(cpu, *bad)


def test_halving_the_rate_doubles_graph_parallel_comm(cpu):
    st, spec, topo = _stats(), ModelSpec("gcn", 8, 128), ParallelDims("graph", ways=4)
    # Without per-message costs, communication is bytes / bandwidth: exactly twice.
    bare = replace(cpu, coll_overhead_s=0.0, oversub_wait_s=0.0)
    a = predict(st, spec, topo, with_link(bare, 100_000_000, latency_s=0.0))
    b = predict(st, spec, topo, with_link(bare, 50_000_000, latency_s=0.0))
    assert a.comm_s > 3 * a.compute_s  # communication dominates
    assert b.comm_s == pytest.approx(2 * a.comm_s, rel=1e-12)
    assert b.compute_s == a.compute_s and b.bytes == a.bytes
    # With the profile's own latency and collective costs: close to twice.
    a, b = (predict(st, spec, topo, with_link(cpu, r)) for r in (100_000_000, 50_000_000))
    assert b.comm_s / a.comm_s == pytest.approx(2.0, rel=0.05)


def test_a2a_factor_scales_only_the_network_term(cpu, tmp_path):
    st, spec, topo = _stats(), ModelSpec("gcn", 8, 128), ParallelDims("graph", ways=4)
    base = with_link(replace(cpu, coll_overhead_s=0.0, oversub_wait_s=0.0), 100_000_000, latency_s=0.0)
    a = predict(st, spec, topo, base)
    b = predict(st, spec, topo, replace(base, a2a_factor=1.5))
    assert b.comm_s > a.comm_s and b.compute_s == a.compute_s
    # Old profiles (no a2a_factor field) load with 1.0, and a written one reads back.
    assert cpu.a2a_factor == 1.0
    f = tmp_path / "p.toml"
    f.write_text(profile_toml(replace(cpu, a2a_factor=1.25)))
    assert load_profile(f).a2a_factor == 1.25
    f.write_text(profile_toml(cpu).replace("a2a_factor = 1", "a2a_factor = 0"))
    with pytest.raises(GnnpipeError, match="a2a_factor"):
        load_profile(f)


ARGS = ["--stats", "20000,400000,128", "--world", "4", "--layers", "8", "--hidden", "128", "--chunk-factors", "1,2"]


def test_cli_link_rate(capsys):
    assert plan_main([*ARGS, "--link-rate", "100mbit", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["profile"] == "cpu-this-machine@100mbit"
    rec = out["recommended"]
    assert rec.startswith("mpirun -np 4 gnnpipe-train ") and "link" not in rec and "100" not in rec.split("--layers")[0]
    assert "--ranks-per-host" not in rec and "cpu-this-machine" not in rec
    # A slower link: slower epochs for every layout that communicates.
    assert plan_main([*ARGS, "--link-rate", "25mbit", "--json"]) == 0
    slow = {json.dumps(p["topology"], default=str): p["epoch_s"] for p in json.loads(capsys.readouterr().out)["predictions"]}
    fast = {json.dumps(p["topology"], default=str): p["epoch_s"] for p in out["predictions"]}
    assert all(slow[k] > fast[k] for k in fast)
    assert plan_main([*ARGS, "--link-rate", "1gbit", "--ranks-per-host", "2", "--top", "1"]) == 0
    txt = capsys.readouterr().out
    assert "2 rank(s) per host" in txt and "recommended:" in txt
    assert plan_main([*ARGS, "--link-rate", "unshaped", "--top", "1"]) == 0
    assert "@unshaped" in capsys.readouterr().out


@pytest.mark.parametrize("extra,msg", [
    (["--link-rate", "100mbyte"], "--link-rate: link rate must look like 200mbit"),
    (["--link-rate", "fast"], "--link-rate: link rate must look like 200mbit"),
    (["--link-rate=-3mbit"], "--link-rate: link rate must look like 200mbit"),
    (["--link-rate", "100mbit", "--ranks-per-host", "0"], "--ranks-per-host: expected at least 1"),
    (["--ranks-per-host", "2"], "--ranks-per-host: only with --link-rate"),
])
def test_cli_link_rate_errors(capsys, extra, msg):
    assert plan_main([*ARGS, *extra]) == 2
    err = capsys.readouterr().err
    assert msg in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


# ----------------------------------------------------------------------------- calibrate --network
def test_sizes_scale_with_the_rate():
    from gnnpipe.cost import netcal as N

    s100, s10 = N.sizes_for(100_000_000), N.sizes_for(10_000_000)
    assert s100[0] == 8 and max(s100) == 1_500_000 and max(s10) == 150_000
    assert all(x % 4 == 0 for x in s100) and s100 == sorted(s100)
    assert max(N.sizes_for(None)) == N.MAX_BYTES and max(N.sizes_for(1000)) == N.MIN_LARGEST
    q = N.sizes_for(100_000_000, quick=True)
    assert len(q) == 4 and len(N.bulk(dict.fromkeys(q, 1.0))) == 3


def test_fit_recovers_a_line_and_leaves_the_burst_out():
    from gnnpipe.cost import netcal as N

    bw, lat = 12.5e6, 80e-6
    times = {n: lat + n / bw for n in (8, 23_436, 187_500, 375_000, 750_000, 1_500_000)}
    assert N.fit_link(times) == pytest.approx((bw, lat), rel=1e-6)
    # The shaper's burst lets small messages through faster: bulk() keeps them out of the rate.
    times[23_436] /= 2
    assert N.fit_link(N.bulk(times))[0] == pytest.approx(bw, rel=1e-6)
    with pytest.raises(GnnpipeError, match="at least two"):
        N.fit_link({8: 1e-4})
    with pytest.raises(GnnpipeError, match="do not grow"):
        N.fit_link({8: 1e-3, 10**6: 1e-4})
    prof = load_profile("cpu-this-machine")
    fit = N.NetworkFit(10**8, 2, 1.2e7, 7e-5, 1.02, 0.0, times, times, 9.0, (1.0, 1.5), 2)
    p = N.apply(prof, fit)
    assert (p.inter_bw_bytes_s, p.inter_latency_s, p.a2a_factor) == (1.2e7, 7e-5, 1.02)
    assert p.gemm_flops_s == prof.gemm_flops_s and any("96% of the rate" in ln for ln in fit.lines())


def test_calibrate_network_without_root_says_why_in_one_line(monkeypatch, capsys, tmp_path):
    from gnnpipe.cost import netcal as N

    monkeypatch.setattr(N.os, "geteuid", lambda: 1000)
    assert plan_main(["calibrate", "--network", "--out", str(tmp_path / "p.toml")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "needs root" in err and not (tmp_path / "p.toml").exists()
    for bad, msg in ((["--rate", "100mbyte"], "--rate: link rate must look like"),
                     (["--hosts", "1"], "--hosts: a link needs at least 2 hosts")):
        assert plan_main(["calibrate", "--network", *bad]) == 2
        err = capsys.readouterr().err.strip()
        assert msg in err and len(err.splitlines()) == 1


@pytest.mark.netns
def test_calibrate_network_measures_100mbit(tmp_path, capsys):
    from gnnpipe import cluster as CL
    from gnnpipe.cost import netcal as N

    why = N.unavailable()
    if why is not None:
        pytest.skip(f"calibrate --network: {why}")
    mine = lambda: [n for n in CL.list_namespaces() if n.startswith(f"{CL.PREFIX}{os.getpid()}-")]  # noqa: E731
    out = tmp_path / "net.toml"
    assert plan_main(["calibrate", "--network", "--rate", "100mbit", "--quick", "--out", str(out)]) == 0
    assert mine() == []  # the cluster is gone
    p = load_profile(out)
    assert 0.70 * 12.5e6 <= p.inter_bw_bytes_s <= 1.05 * 12.5e6, p.inter_bw_bytes_s
    assert 0 < p.inter_latency_s < 5e-3 and 0.5 < p.a2a_factor < 2.0
    assert "Network (gnnpipe-plan calibrate --network --rate 100mbit" in out.read_text()
    # the planner takes it: same rate, the measured latency
    q = with_link(p, 100_000_000)
    assert q.inter_latency_s == p.inter_latency_s and q.a2a_factor == p.a2a_factor


# ----------------------------------------------------------------------------- the sweep's predicted lines
def test_bench_cluster_predictor(tmp_path):
    from gnnpipe.bench import cluster as BC

    fn = BC.make_predictor("cpu-this-machine")
    tiny = [*BC.GRAPHS["tiny"], "--model", "gcn", "--layers", "4", "--hidden", "16", "--seed", "0"]
    rows = []
    for mode in BC.MODES:
        for bps in (25_000_000, 100_000_000, None):
            rows.append({"graph": "tiny", "model": "gcn", "mode": mode, "rate_bps": bps, "epoch_s": 0.1,
                         "world": 4, "ranks_per_host": 1, "args": [*tiny, *BC.mode_flags(mode, 4)]})
    for mode in BC.MODES:
        slow, fast, free = (fn(r, r["rate_bps"]) for r in rows if r["mode"] == mode)
        assert slow > fast > free > 0, (mode, slow, fast, free)
    assert fn({"rate": "unshaped", "error": "x"}, None) is None  # a failed cell
    assert fn({**rows[0], "args": ["--dataset", "no-such-graph", "--mode", "graph"]}, None) is None
    png = BC.plot(rows, tmp_path / "p.png", predict=fn)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_cluster_predictor_takes_the_rows_measured_link():
    """A row's measured link (``network``, written by the sweep) replaces the nominal rate/8:
    a slower measured bandwidth or a larger all-to-all factor predicts a slower graph-parallel
    epoch; a measurement made at another rate is not used."""
    from gnnpipe.bench import cluster as BC

    fn = BC.make_predictor("cpu-this-machine")
    tiny = [*BC.GRAPHS["tiny"], "--model", "gcn", "--layers", "4", "--hidden", "16", "--seed", "0"]
    row = {"graph": "tiny", "model": "gcn", "mode": "graph", "rate_bps": 25_000_000, "epoch_s": 0.1,
           "world": 4, "ranks_per_host": 1, "args": [*tiny, *BC.mode_flags("graph", 4)]}
    lat = load_profile("cpu-this-machine").inter_latency_s
    nominal = fn(row, 25_000_000)
    same = fn({**row, "network": {"bw_bytes_s": 25e6 / 8, "latency_s": lat, "a2a_factor": 1.0}}, 25_000_000)
    half = fn({**row, "network": {"bw_bytes_s": 25e6 / 16, "latency_s": lat, "a2a_factor": 1.0}}, 25_000_000)
    a2a = fn({**row, "network": {"bw_bytes_s": 25e6 / 8, "latency_s": lat, "a2a_factor": 2.0}}, 25_000_000)
    assert same == pytest.approx(nominal, rel=0.05)
    assert half > 1.3 * same and a2a > 1.3 * same, (same, half, a2a)
    assert fn({**row, "network": {"bw_bytes_s": 1.0, "latency_s": 1.0, "a2a_factor": 9.0}}, 50_000_000) \
        == fn(row, 50_000_000)  # measured at 25 Mbit/s: not taken for another rate


def test_cpu_share_ranks_slows_compute_like_one_host_while_the_links_stay_the_hosts():
    """Emulated hosts on one machine: with ``cpu_share_ranks`` = 4 on a 2-core profile the 4
    one-rank hosts time-share the cores (slowdown as for 4 ranks on one host), while every
    pair of ranks still talks over the inter-host link."""
    p = with_link(load_profile("cpu-this-machine"), 100_000_000, 1)
    shared = replace(p, cpu_share_ranks=4)
    assert p.slowdown(4) == 1.0 and p.ranks_on_host(4) == 1
    assert shared.ranks_on_host(4) == 4
    assert shared.slowdown(4) == pytest.approx(shared.shared_slowdown * shared.oversub_slowdown * 4 / p.cores_per_host)
    assert shared.link(0, 1) == p.link(0, 1) == (p.inter_bw_bytes_s, p.inter_latency_s)


def test_bench_cluster_predictor_charges_the_shared_cores():
    """The sweep's predictor gives the cell's ranks this machine's cores to share: its epoch
    is the planner's for the profile with ``cpu_share_ranks`` = world, slower than with a
    host's cores per rank."""
    from gnnpipe.bench import cluster as BC
    from gnnpipe.config import parse_config
    from gnnpipe.cost import ModelSpec, chunk_counts, graph_stats_from_graph, predict
    from gnnpipe.data.load import load_graph_for
    from gnnpipe.dims import ParallelDims

    tiny = [*BC.GRAPHS["tiny"], "--model", "gcn", "--layers", "4", "--hidden", "16", "--seed", "0"]
    row = {"graph": "tiny", "model": "gcn", "mode": "graph", "rate_bps": 100_000_000, "epoch_s": 0.1,
           "world": 4, "ranks_per_host": 1, "args": [*tiny, *BC.mode_flags("graph", 4)]}
    got = BC.make_predictor("cpu-this-machine")(row, 100_000_000)
    cfg, _ = parse_config(row["args"])
    topo = ParallelDims.from_config(cfg, 4)
    st = graph_stats_from_graph(load_graph_for(cfg), sorted({topo.ways, 2}), seed=0, chunks=chunk_counts([topo]))
    p = with_link(load_profile("cpu-this-machine"), 100_000_000, 1)
    spec = ModelSpec("gcn", 4, 16)
    assert got == pytest.approx(predict(st, spec, topo, replace(p, cpu_share_ranks=4)).epoch_s, rel=1e-9)
    assert got > predict(st, spec, topo, p).epoch_s
