"""The memory-lean multilevel path (gnnpipe.partition.coarsen) against brute force."""

from __future__ import annotations

import json

import numpy as np
import pytest

from gnnpipe import GnnpipeError
from gnnpipe.data.graph import Graph
from gnnpipe.partition import build_plan, coarsen, partition_nodes, plan_stats
from gnnpipe.partition.plan import _metis



def random_graph(n=120, e=400, seed=0) -> Graph:
    rng = np.random.default_rng(seed)
    return Graph.from_edges(rng.integers(0, n, e), rng.integers(0, n, e), n, np.zeros((n, 2), np.float32),
                            np.zeros(n, np.int64), np.ones(n, bool), np.zeros(n, bool), np.zeros(n, bool))


def level_of(g: Graph, vw=None) -> coarsen.Level:
    n = g.num_nodes
    return coarsen.Level(g.indptr, g.indices, None, np.ones(n, np.int64) if vw is None else np.asarray(vw, np.int64))


def weighted_edges(lv: coarsen.Level) -> dict[tuple[int, int], int]:
    out = {}
    for u in range(lv.n):
        for j in range(int(lv.indptr[u]), int(lv.indptr[u + 1])):
            w = 1 if lv.eweights is None else int(lv.eweights[j])
            out[(u, int(lv.indices[j]))] = out.get((u, int(lv.indices[j])), 0) + w
    return out


def brute_cut(lv: coarsen.Level, part) -> int:
    return sum(w for (u, v), w in weighted_edges(lv).items() if part[u] != part[v]) // 2


def community_graph(n=300, k=4, inner=2500, outer=150, seed=0) -> Graph:
    rng = np.random.default_rng(seed)
    block = rng.integers(0, k, n)
    src, dst = [], []
    for _ in range(inner):
        b = int(rng.integers(0, k))
        m = np.flatnonzero(block == b)
        src.append(int(rng.choice(m)))
        dst.append(int(rng.choice(m)))
    src += rng.integers(0, n, outer).tolist()
    dst += rng.integers(0, n, outer).tolist()
    # A few isolated vertices, as in R-MAT graphs.
    keep = [(s, d) for s, d in zip(src, dst) if s < n - 10 and d < n - 10]
    s, d = np.array(keep).T
    return Graph.from_edges(s, d, n, np.zeros((n, 1), np.float32), np.zeros(n, np.int64),
                            np.ones(n, bool), np.zeros(n, bool), np.zeros(n, bool))


# ------------------------------------------------------------------ matching
@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("two_hop", [False, True])
def test_matching_is_valid(seed, two_hop):
    g = random_graph(n=150, e=500, seed=seed)
    vw = np.random.default_rng(seed).integers(1, 4, g.num_nodes)
    lv = level_of(g, vw)
    cap = 5
    m = coarsen.heavy_edge_matching(lv, seed, cap, two_hop=two_hop, block_edges=97)
    n = g.num_nodes
    assert m.shape == (n,) and np.array_equal(m[m], np.arange(n))  # an involution
    adj = {(int(u), int(v)) for u, v in zip(g.edge_src(), g.indices)}
    nbrs = {u: {v for (a, v) in adj if a == u} for u in range(n)}
    paired = np.flatnonzero(m != np.arange(n))
    assert paired.size > 0
    for u in paired:
        v = int(m[u])
        assert vw[u] + vw[v] <= cap
        if two_hop:
            assert (u, v) in adj or nbrs[u] & nbrs[v]  # adjacent, or share a neighbour
        else:
            assert (u, v) in adj
    # Deterministic for a seed, and independent of the block size.
    assert np.array_equal(m, coarsen.heavy_edge_matching(lv, seed, cap, two_hop=two_hop))


def test_label_propagation_respects_cluster_weight():
    g = community_graph()
    vw = np.random.default_rng(1).integers(1, 3, g.num_nodes)
    lv = level_of(g, vw)
    lab = coarsen.label_propagation(lv, 3, 40, block_edges=301)
    assert lab.shape == (g.num_nodes,) and lab.min() >= 0 and lab.max() < g.num_nodes
    w = np.bincount(lab, weights=vw)
    assert w.max() <= 40
    assert np.unique(lab).size < g.num_nodes / 3  # it does cluster
    assert np.array_equal(lab, coarsen.label_propagation(lv, 3, 40))


# ------------------------------------------------------------------ contraction
@pytest.mark.parametrize("scheme", ["matching", "clusters", "random"])
def test_contract_equals_brute_force(scheme):
    g = random_graph(n=90, e=400, seed=4)
    n = g.num_nodes
    vw = np.random.default_rng(0).integers(1, 5, n)
    lv = level_of(g, vw)
    if scheme == "matching":
        groups = np.minimum(coarsen.heavy_edge_matching(lv, 0, 100), np.arange(n))
    elif scheme == "clusters":
        groups = coarsen.label_propagation(lv, 0, 30)
    else:
        groups = np.random.default_rng(2).integers(0, 20, n)  # any labels in [0, n)
    cmap, c = coarsen.contract(lv, groups, block_edges=53)
    # cmap: same group ⇔ same coarse vertex, numbered by smallest member.
    assert np.array_equal(cmap[:, None] == cmap[None, :], groups[:, None] == groups[None, :])
    firsts = [int(np.flatnonzero(cmap == k)[0]) for k in range(c.n)]
    assert firsts == sorted(firsts)
    assert np.array_equal(c.vweights, np.bincount(cmap, weights=vw).astype(np.int64))
    want: dict[tuple[int, int], int] = {}
    for (u, v), w in weighted_edges(lv).items():
        a, b = int(cmap[u]), int(cmap[v])
        if a != b:
            want[(a, b)] = want.get((a, b), 0) + w
    got = weighted_edges(c)
    assert got == want
    for u in range(c.n):  # rows sorted, no duplicates
        row = c.indices[c.indptr[u] : c.indptr[u + 1]]
        assert np.all(np.diff(row) > 0)
    # Contracting again (weights present) also matches.
    cmap2, c2 = coarsen.contract(c, np.minimum(coarsen.heavy_edge_matching(c, 1, 10**6), np.arange(c.n)))
    want2: dict[tuple[int, int], int] = {}
    for (u, v), w in got.items():
        a, b = int(cmap2[u]), int(cmap2[v])
        if a != b:
            want2[(a, b)] = want2.get((a, b), 0) + w
    assert weighted_edges(c2) == want2


def test_isolated_vertices_are_bundled():
    g = community_graph()
    lv = level_of(g)
    groups = np.arange(g.num_nodes, dtype=np.int64)
    coarsen._bundle_isolated(lv, groups, 4)
    iso = np.flatnonzero(np.diff(g.indptr) == 0)
    assert iso.size >= 10
    sizes = np.bincount(groups[iso])
    assert sizes.max() == 4 and np.unique(groups[iso]).size == -(-iso.size // 4)


# ------------------------------------------------------------------ refinement
@pytest.mark.parametrize("seed", range(5))
def test_refine_never_increases_cut_nor_breaks_balance(seed):
    g = community_graph(seed=seed)
    n, P = g.num_nodes, 4
    vw = np.random.default_rng(seed).integers(1, 4, n)
    lv = level_of(g, vw)
    part = np.random.default_rng(seed + 100).integers(0, P, n)
    bound = 1.05 * vw.sum() / P
    part = coarsen.rebalance(lv, part, P, bound)
    pw = np.bincount(part, weights=vw, minlength=P)
    assert pw.max() <= bound
    before = brute_cut(lv, part)
    assert coarsen.edge_cut(lv, part) == before
    out = coarsen.refine(lv, part.copy(), P, bound, passes=1, block_edges=211)
    one = brute_cut(lv, out)
    assert one <= before
    out = coarsen.refine(lv, out, P, bound, block_edges=211)
    after = brute_cut(lv, out)
    assert after <= one and after < 0.8 * before  # it does improve a random partition
    assert np.bincount(out, weights=vw, minlength=P).max() <= bound
    # Deterministic.
    again = coarsen.refine(lv, coarsen.refine(lv, part.copy(), P, bound, passes=1), P, bound)
    assert np.array_equal(again, out)


def test_refine_does_not_fill_overweight_parts():
    g = community_graph(seed=7)
    n, P = g.num_nodes, 3
    lv = level_of(g)
    part = np.zeros(n, np.int64)
    part[: n // 10] = 1
    part[n // 10 : n // 5] = 2
    bound = 1.03 * n / P
    out = coarsen.refine(lv, part.copy(), P, bound)
    pw = np.bincount(out, minlength=P)
    assert pw[0] <= (part == 0).sum()  # the overweight part only loses vertices
    assert pw[1:].max() <= bound
    assert brute_cut(lv, out) <= brute_cut(lv, part)


# ------------------------------------------------------------------ the whole path
def test_multilevel_quality_balance_and_determinism():
    g = community_graph(n=400, inner=4000, outer=200)
    n, P = g.num_nodes, 4
    fn = lambda ip, ix, vw, ew: _metis(ip, ix, P, "cut", 0, vw, ew)  # noqa: E731
    for scheme in ("clusters", "matching"):
        part, info = coarsen.multilevel_partition(g.indptr, g.indices, P, 0, None, fn, target_edges=800,
                                                  scheme=scheme, block_edges=500)
        assert len(info["levels"]) > 1  # it did coarsen
        assert np.bincount(part, minlength=P).max() <= 1.03 * n / P
        lv = level_of(g)
        rnd = np.random.default_rng(0).permutation(n) % P
        assert brute_cut(lv, part) < 0.5 * brute_cut(lv, rnd)
        for _, _projected, balanced, refined in info["cuts"]:
            assert refined <= balanced
        part2, _ = coarsen.multilevel_partition(g.indptr, g.indices, P, 0, None, fn, target_edges=800, scheme=scheme)
        assert np.array_equal(part, part2)


def test_build_plan_multilevel_keeps_invariants_and_records_the_path(tmp_path):
    g = community_graph(n=400, inner=4000, outer=200)
    plan = build_plan(g, 4, 3, method="metis", seed=2, metis_mode="multilevel", metis_budget=20_000)
    assert plan.params["metis_mode"] == "multilevel" and plan.params["metis_budget"] == 20_000
    assert plan.params["metis_path"] == {"parts": "multilevel", "chunks": "multilevel"}
    plan.validate()
    assert np.array_equal(plan.chunk // 3, plan.part)
    assert set(np.unique(plan.chunk).tolist()) == set(range(12))
    assert plan_stats(g, plan)["parts"]["balance"] <= 1.03 + 1e-9
    auto = build_plan(g, 4, 3, method="metis", seed=2)  # small: plain METIS
    assert auto.params["metis_path"] == {"parts": "plain", "chunks": "plain"}
    assert auto.params["metis_mode"] == "auto"
    # Byte-identical plan directories for the same inputs and seed.
    a = plan.save(tmp_path / "a")
    b = build_plan(g, 4, 3, method="metis", seed=2, metis_mode="multilevel", metis_budget=20_000).save(tmp_path / "b")
    for f in ("META.json", "assignment.npz", "stats.json"):
        assert (a / f).read_bytes() == (b / f).read_bytes(), f
    meta = json.loads((a / "META.json").read_text())
    assert meta["params"]["metis_path"]["parts"] == "multilevel"


def test_auto_switches_by_memory_estimate(monkeypatch):
    from gnnpipe.partition import plan as plan_mod

    g = community_graph()
    monkeypatch.setattr(plan_mod, "METIS_PLAIN_FLOOR_BYTES", 0)
    # A budget below plain METIS's estimate → multilevel; above → plain.
    est = coarsen.estimate_metis_bytes(g.num_nodes, g.num_edges)
    low = build_plan(g, 4, 1, method="metis", metis_budget=est // 4)
    high = build_plan(g, 4, 1, method="metis", metis_budget=est + 1)
    assert low.params["metis_path"]["parts"] == "multilevel"
    assert high.params["metis_path"]["parts"] == "plain"


def test_bad_metis_mode_and_budget():
    g = community_graph()
    with pytest.raises(GnnpipeError, match="metis_mode"):
        partition_nodes(g, 2, metis_mode="fast")
    with pytest.raises(GnnpipeError, match="metis_budget"):
        build_plan(g, 2, metis_budget=0)


def test_cli_metis_mode_flag_reuse_and_errors(tmp_path, capsys):
    from gnnpipe.cli.partition import main as cli_main

    g = community_graph(n=200, inner=2000, outer=100)
    d = g.save(tmp_path / "g")
    out = tmp_path / "plan"
    args = [str(d), "--parts", "2", "--chunks", "2", "--out", str(out), "--json"]
    assert cli_main(args + ["--metis-mode", "multilevel", "--metis-budget", "5000"]) == 0
    meta = json.loads((out / "META.json").read_text())
    assert meta["params"]["metis_mode"] == "multilevel" and meta["params"]["metis_budget"] == 5000
    assert meta["params"]["metis_path"] == {"parts": "multilevel", "chunks": "multilevel"}
    capsys.readouterr()
    # Same request: reused (metis_path is a result, not compared).
    assert cli_main(args + ["--metis-mode", "multilevel", "--metis-budget", "5000"]) == 0
    assert "reusing" in capsys.readouterr().err
    # Another mode: refused without --force, naming the field.
    assert cli_main(args + ["--metis-mode", "plain"]) == 2
    assert "metis_mode" in capsys.readouterr().err
    assert cli_main(args + ["--metis-mode", "fast"]) == 2
    assert "--metis-mode" in capsys.readouterr().err
