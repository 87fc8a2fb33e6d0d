"""Partition plans: invariants against brute force on small random graphs."""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from gnnpipe import GnnpipeError
from gnnpipe.cli.partition import main as cli_main
from gnnpipe.data.graph import Graph
from gnnpipe.partition import (
    PartitionPlan,
    PlanMismatchError,
    assign_layers,
    build_plan,
    check_plan_matches,
    chunk_neighbours,
    graph_parallel_bytes,
    layer_costs,
    load_local_part,
    part_halo,
    partition_nodes,
    pipeline_bytes,
    plan_stats,
    relabel_graph,
)
from gnnpipe.partition.volume import exchanged_layers, hybrid_bytes, startup_bytes


def random_graph(n=120, e=400, f=6, seed=0, sparse=False, name="rand") -> Graph:
    rng = np.random.default_rng(seed)
    x = rng.random((n, f), dtype=np.float32)
    if sparse:
        x[x < 0.6] = 0
        x = sp.csr_matrix(x)
    return Graph.from_edges(
        rng.integers(0, n, e), rng.integers(0, n, e), n, x, rng.integers(0, 3, n),
        rng.random(n) < 0.5, rng.random(n) < 0.2, rng.random(n) < 0.2, name=name,
    )


def edge_set(g: Graph) -> set[tuple[int, int]]:
    return set(zip(g.edge_src().tolist(), g.indices.tolist()))


METHODS = ["metis", "random", "contiguous"]


@pytest.fixture(scope="module")
def graph() -> Graph:
    return random_graph()


@pytest.fixture(scope="module", params=METHODS)
def plan(request, graph) -> PartitionPlan:
    return with_stats(graph, build_plan(graph, 4, 3, method=request.param, seed=3))


def with_stats(graph, plan):
    """The plan with its statistics, as gnnpipe-partition saves it."""
    plan.stats = plan_stats(graph, plan)
    return plan


# ------------------------------------------------------------------ assignment invariants
def test_each_node_in_one_part_and_chunk(graph, plan):
    n, P, C = graph.num_nodes, plan.num_parts, plan.num_chunks
    assert plan.part.shape == plan.chunk.shape == (n,)
    assert set(np.unique(plan.part).tolist()) == set(range(P))  # every part non-empty
    assert set(np.unique(plan.chunk).tolist()) == set(range(P * C))
    assert np.array_equal(plan.chunk // C, plan.part)  # chunk k belongs to part k // C
    assert plan.chunk_ptr[-1] == n and np.all(np.diff(plan.chunk_ptr) > 0)


def test_contiguous_after_relabelling_and_stable(graph, plan):
    for k in range(plan.num_parts * plan.num_chunks):
        lo, hi = plan.chunk_range(k)
        old = plan.perm[lo:hi]
        assert np.all(plan.chunk[old] == k)
        assert np.all(np.diff(old) > 0)  # original order kept inside a chunk
        assert np.all(plan.chunk_of_new(np.arange(lo, hi)) == k)
    for p in range(plan.num_parts):
        lo, hi = plan.part_range(p)
        assert np.all(plan.part[plan.perm[lo:hi]] == p)
        assert np.all(plan.part_of_new(np.arange(lo, hi)) == p)


def test_permutation_round_trip(graph, plan):
    n = graph.num_nodes
    assert np.array_equal(np.sort(plan.perm), np.arange(n))
    assert np.array_equal(plan.inv[plan.perm], np.arange(n))
    assert np.array_equal(plan.perm[plan.inv], np.arange(n))


def test_relabel_graph_is_isomorphic(graph, plan):
    rg = relabel_graph(graph, plan)
    rg.check_symmetric()  # sorted rows, symmetric, no self-loops
    mapped = {(int(plan.inv[u]), int(plan.inv[v])) for u, v in edge_set(graph)}
    assert edge_set(rg) == mapped
    assert np.array_equal(rg.features, graph.features[plan.perm])
    assert np.array_equal(rg.labels, graph.labels[plan.perm])
    assert np.array_equal(rg.train_mask, graph.train_mask[plan.perm])


def test_relabel_sparse_features():
    g = random_graph(sparse=True, seed=5)
    p = build_plan(g, 3, 2, method="random", seed=1)
    rg = relabel_graph(g, p)
    assert sp.issparse(rg.features)
    assert np.array_equal(rg.features.toarray(), g.features.toarray()[p.perm])


# ------------------------------------------------------------------ halos by brute force
def brute_halo(graph, plan):
    """recv[p] = set of NEW ids of remote neighbours; send[p][q] = new ids of p needed by q."""
    P = plan.num_parts
    recv = {p: set() for p in range(P)}
    send = {(p, q): set() for p in range(P) for q in range(P)}
    for u, v in edge_set(graph):
        pu, pv = int(plan.part[u]), int(plan.part[v])
        if pu != pv:
            recv[pu].add(int(plan.inv[v]))
            send[(pv, pu)].add(int(plan.inv[v]))
    return recv, send


def test_part_halo_equals_brute_force_and_is_symmetric(graph, plan):
    rg = relabel_graph(graph, plan)
    recv, send = brute_halo(graph, plan)
    P = plan.num_parts
    halos = [part_halo(rg, plan, p) for p in range(P)]
    for p, h in enumerate(halos):
        lo, _ = plan.part_range(p)
        assert h.recv_ids.tolist() == sorted(recv[p])
        owners = plan.part_of_new(h.recv_ids)
        assert np.all(np.diff(owners) >= 0)  # grouped by owner
        assert h.recv_counts.tolist() == np.bincount(owners, minlength=P).tolist()
        assert h.recv_counts[p] == 0 and h.send_counts[p] == 0
        for q in range(P):
            assert (h.send_idx[q] + lo).tolist() == sorted(send[(p, q)])
            assert h.send_counts[q] == h.send_idx[q].size
            # What p sends to q is exactly q's receive slice owned by p.
            hq = halos[q]
            rp = hq.recv_ptr
            assert np.array_equal(h.send_idx[q] + lo, hq.recv_ids[rp[p] : rp[p + 1]])


def test_load_local_part_matches_relabelled_graph(graph, plan):
    rg = relabel_graph(graph, plan)
    deg = graph.degrees()
    for p in range(plan.num_parts):
        lp = load_local_part(graph, plan, p)
        h = part_halo(rg, plan, p)
        assert np.array_equal(lp.halo.recv_ids, h.recv_ids)
        for q in range(plan.num_parts):
            assert np.array_equal(lp.halo.send_idx[q], h.send_idx[q])
        # Local columns map back to the same neighbour sets as the relabelled graph.
        cols_new = np.concatenate([np.arange(lp.lo, lp.hi), lp.halo.recv_ids])
        for i in range(lp.num_local):
            row = lp.indices[lp.indptr[i] : lp.indptr[i + 1]]
            assert np.all(np.diff(row) > 0)
            nb = rg.indices[rg.indptr[lp.lo + i] : rg.indptr[lp.lo + i + 1]]
            assert sorted(cols_new[row].tolist()) == nb.tolist()
        assert np.array_equal(lp.deg_local, deg[lp.orig_ids])
        assert np.array_equal(lp.deg_halo, deg[plan.perm[lp.halo.recv_ids]])
        assert np.array_equal(lp.orig_ids, plan.perm[lp.lo : lp.hi])
        assert np.array_equal(lp.features, graph.features[lp.orig_ids])
        assert np.array_equal(lp.labels, graph.labels[lp.orig_ids])
        assert np.array_equal(lp.test_mask, graph.test_mask[lp.orig_ids])
        assert lp.chunk_ptr[0] == 0 and lp.chunk_ptr[-1] == lp.num_local
        assert lp.chunk_ptr.size == plan.num_chunks + 1


def test_chunk_neighbours_brute_force(graph, plan):
    rg = relabel_graph(graph, plan)
    edges = edge_set(rg)
    for k in range(plan.num_parts * plan.num_chunks):
        lo, hi = plan.chunk_range(k)
        nb = {v for u, v in edges if lo <= u < hi}
        inside, outside = chunk_neighbours(rg, plan, k)
        assert inside.tolist() == sorted(v for v in nb if lo <= v < hi)
        assert outside.tolist() == sorted(v for v in nb if not lo <= v < hi)


def test_stats_equal_brute_force(graph, plan):
    st = plan.stats
    recv, _ = brute_halo(graph, plan)
    edges = edge_set(graph)
    cut = sum(1 for u, v in edges if plan.part[u] != plan.part[v]) // 2
    ccut = sum(1 for u, v in edges if plan.chunk[u] != plan.chunk[v]) // 2
    assert st["parts"]["edge_cut"] == cut
    assert st["chunks"]["edge_cut"] == ccut
    assert st["parts"]["halo"] == [len(recv[p]) for p in range(plan.num_parts)]
    assert st["parts"]["halo_sum"] == sum(len(r) for r in recv.values())
    chalo = [len({v for u, v in edges if plan.chunk[u] == k and plan.chunk[v] != k})
             for k in range(plan.num_parts * plan.num_chunks)]
    assert st["chunks"]["halo"] == chalo
    assert st["parts"]["sizes"] == np.bincount(plan.part).tolist()
    assert st["parts"]["edges"] == [sum(1 for u, _ in edges if plan.part[u] == p) for p in range(plan.num_parts)]


# ------------------------------------------------------------------ volumes by brute force
def brute_gp_bytes(graph, plan, F, L, d, s, model, paper):
    """Enumerate every (layer, part, remote neighbour) row that travels, both directions."""
    recv, _ = brute_halo(graph, plan)
    total = 0
    # The paper's model: the first layer aggregates F-wide inputs whatever the model.
    first_linear = model in ("gcnii", "resgcn+") and not paper
    for layer in range(L):
        width = d if (first_linear or layer > 0) else F
        if not paper and layer == 0 and not first_linear:
            continue  # constant features: sent once at start-up, no gradient
        for p in recv:
            for _v in recv[p]:
                total += s * width  # forward: the embedding row
                total += s * width  # backward: its gradient
    return total


@pytest.mark.parametrize("model", ["gcn", "sage", "gat", "gcnii", "resgcn+"])
@pytest.mark.parametrize("L", [1, 2, 5])
def test_graph_parallel_volume_brute_force(graph, model, L):
    plan = with_stats(graph, build_plan(graph, 3, 1, method="random", seed=2))
    sum_m = plan.stats["parts"]["halo_sum"]
    F, d, s = 6, 7, 4
    assert graph_parallel_bytes(sum_m, F, L, d, s, model, "paper") == brute_gp_bytes(graph, plan, F, L, d, s, model, True)
    assert graph_parallel_bytes(sum_m, F, L, d, s, model, "ours") == brute_gp_bytes(graph, plan, F, L, d, s, model, False)
    recv, _ = brute_halo(graph, plan)
    once = s * F * sum(len(r) for r in recv.values()) if model in ("gcn", "sage", "gat") else 0
    assert startup_bytes(sum_m, F, L, s, model) == once


def test_paper_formula_reproduces_published_numbers():
    # GNNPIPE.md §3: Reddit, S = 8, d = 100: 2·4·7·232,965·100 = 1.215 GB per epoch.
    assert pipeline_bytes(232_965, 100, 8) == 1_304_604_000
    assert abs(pipeline_bytes(232_965, 100, 8) / 2**30 - 1.215) < 1e-3
    # Squirrel d=1000, S=8: 0.27 GiB; GCNII forwards h0 as well (×2).
    assert abs(pipeline_bytes(5201, 1000, 8) / 2**30 - 0.271) < 1e-3
    assert pipeline_bytes(5201, 1000, 8, h0=True) == 2 * pipeline_bytes(5201, 1000, 8)


def test_pipeline_volume_brute_force():
    N, d, S, s = 37, 5, 4, 4
    total = 0
    for _boundary in range(S - 1):
        for _v in range(N):
            total += 2 * s * d  # activation forward + gradient backward
    assert pipeline_bytes(N, d, S, s) == total
    assert pipeline_bytes(N, d, 1, s) == 0
    assert hybrid_bytes(N, 11, 6, 3, d, S, 1) == total
    assert hybrid_bytes(N, 11, 6, 3, d, S, 2) == total + graph_parallel_bytes(11, 6, 3, d)
    assert exchanged_layers("gcn", 3) == 2 and exchanged_layers("gcnii", 3) == 3


# ------------------------------------------------------------------ determinism and IO
def test_determinism_and_byte_identical_dirs(graph, tmp_path):
    for method in METHODS:
        a = build_plan(graph, 4, 2, method=method, seed=7)
        b = build_plan(graph, 4, 2, method=method, seed=7)
        assert np.array_equal(a.perm, b.perm) and np.array_equal(a.chunk, b.chunk)
        da, db = a.save(tmp_path / f"a-{method}"), b.save(tmp_path / f"b-{method}")
        names = sorted(os.listdir(da))
        assert names == sorted(os.listdir(db)) == ["META.json", "assignment.npz", "stats.json"]
        for f in names:
            assert (da / f).read_bytes() == (db / f).read_bytes(), f
    c = build_plan(graph, 4, 2, method="random", seed=8)
    assert not np.array_equal(c.part, build_plan(graph, 4, 2, method="random", seed=7).part)


def test_save_load_round_trip_and_meta(graph, plan, tmp_path):
    d = plan.save(tmp_path / "plan")
    meta = json.loads((d / "META.json").read_text())
    assert meta["dataset"]["content_hash"] == graph.content_hash
    assert meta["dataset"]["num_nodes"] == graph.num_nodes and meta["dataset"]["num_edges"] == graph.num_edges
    for k in ("parts", "chunks", "method", "objective", "seed", "vertex_weights", "gnnpipe_version"):
        assert k in meta["params"]
    q = PartitionPlan.load(d)
    for k in ("perm", "inv", "part_ptr", "chunk_ptr", "part", "chunk"):
        assert np.array_equal(getattr(q, k), getattr(plan, k))
    assert q.stats == json.loads(json.dumps(plan.stats))
    check_plan_matches(q, graph)
    with np.load(d / "assignment.npz", allow_pickle=False) as z:
        assert set(z.files) >= {"part", "chunk"}
    with pytest.raises(GnnpipeError, match="exists"):
        plan.save(d)


def test_load_rejects_corrupt_plans(graph, tmp_path):
    plan = build_plan(graph, 3, 2, method="random", seed=0)
    d = plan.save(tmp_path / "p")
    bad = PartitionPlan(**{**plan.__dict__, "inv": plan.inv[::-1].copy()})
    with pytest.raises(GnnpipeError, match="'perm' and 'inv'"):
        bad.validate()
    (d / "assignment.npz").write_bytes(b"junk")
    with pytest.raises(GnnpipeError, match="assignment.npz"):
        PartitionPlan.load(d)
    m = json.loads((d / "META.json").read_text())
    m["format_version"] = 99
    (d / "META.json").write_text(json.dumps(m))
    with pytest.raises(GnnpipeError, match="format_version"):
        PartitionPlan.load(d)
    with pytest.raises(GnnpipeError, match="META.json missing"):
        PartitionPlan.load(tmp_path)


def test_plan_mismatch_names_both_hashes(graph):
    plan = build_plan(graph, 2, 1, method="contiguous")
    other = random_graph(seed=9, name="other")
    with pytest.raises(PlanMismatchError) as ei:
        check_plan_matches(plan, other)
    msg = str(ei.value)
    assert graph.content_hash in msg and other.content_hash in msg and "'rand'" in msg and "'other'" in msg
    with pytest.raises(PlanMismatchError):
        load_local_part(other, plan, 0)


# ------------------------------------------------------------------ partition_nodes
def test_partition_nodes_methods_and_errors(graph):
    n = graph.num_nodes
    assert np.array_equal(partition_nodes(graph, 1), np.zeros(n, np.int64))
    c = partition_nodes(graph, 4, method="contiguous")
    assert np.all(np.diff(c) >= 0) and np.bincount(c).tolist() == [30, 30, 30, 30]
    r = partition_nodes(graph, 7, method="random", seed=1)
    assert np.bincount(r).max() - np.bincount(r).min() <= 1
    m = partition_nodes(graph, 4, objective="vol", vertex_weights="degree")
    assert set(m.tolist()) == set(range(4))
    w = partition_nodes(graph, 3, method="contiguous", vertex_weights=np.r_[np.full(60, 10), np.ones(60)])
    # Total weight 660: each third (220) is 22 nodes of weight 10; the light tail is one part.
    assert np.bincount(w).tolist() == [22, 22, 76]
    for bad, match in (
        (dict(parts=0), "parts"), (dict(parts=n + 1), "parts"), (dict(parts=2, method="kmeans"), "method"),
        (dict(parts=2, objective="edges"), "objective"), (dict(parts=2, vertex_weights=np.ones(3)), "vertex_weights"),
        (dict(parts=2, vertex_weights="pagerank"), "vertex_weights"),
    ):
        with pytest.raises(GnnpipeError, match=match):
            partition_nodes(graph, **bad)
    with pytest.raises(GnnpipeError, match="chunks"):
        build_plan(graph, 4, 31)  # parts of 30 nodes cannot hold 31 chunks
    with pytest.raises(GnnpipeError, match="chunks"):
        build_plan(graph, 2, 0)


def test_metis_cuts_less_than_random():
    # Two dense communities joined by few edges: METIS must find them.
    rng = np.random.default_rng(0)
    n = 200
    src = rng.integers(0, 100, 1500)
    dst = rng.integers(0, 100, 1500)
    src = np.r_[src, src + 100, rng.integers(0, 100, 5)]
    dst = np.r_[dst, dst + 100, rng.integers(100, 200, 5)]
    g = Graph.from_edges(src, dst, n, np.zeros((n, 1), np.float32), np.zeros(n, np.int64),
                         np.ones(n, bool), np.zeros(n, bool), np.zeros(n, bool))
    cut_m = plan_stats(g, build_plan(g, 2, method="metis"))["parts"]["edge_cut"]
    cut_r = plan_stats(g, build_plan(g, 2, method="random"))["parts"]["edge_cut"]
    assert cut_m <= 5 < cut_r


def test_isolated_nodes_and_tiny_graphs():
    n = 10
    g = Graph.from_edges(np.array([0]), np.array([1]), n, np.zeros((n, 2), np.float32),
                         np.zeros(n, np.int64), np.ones(n, bool), np.zeros(n, bool), np.zeros(n, bool))
    for method in METHODS:
        p = build_plan(g, 5, 2, method=method)
        assert np.all(np.diff(p.chunk_ptr) == 1)  # 10 nodes, 10 chunks: one each
    p = build_plan(g, n, 1, method="metis")
    assert sorted(p.part.tolist()) == list(range(n))


# ------------------------------------------------------------------ layer → stage
def brute_best(costs, S):
    n = len(costs)
    best = float("inf")
    for cuts in itertools.combinations(range(1, n), S - 1):
        b = (0, *cuts, n)
        best = min(best, max(sum(costs[b[i] : b[i + 1]]) for i in range(S)))
    return best


@pytest.mark.parametrize("seed", range(12))
def test_assign_layers_optimal_vs_enumeration(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 10))
    S = int(rng.integers(1, n + 1))
    costs = rng.integers(0, 20, n).astype(float).tolist()
    blocks = assign_layers(costs, S)
    assert len(blocks) == S and blocks[0][0] == 0 and blocks[-1][1] == n
    assert all(a < b for a, b in blocks) and all(blocks[i][1] == blocks[i + 1][0] for i in range(S - 1))
    assert max(sum(costs[a:b]) for a, b in blocks) == brute_best(costs, S)
    assert assign_layers(costs, S) == blocks  # deterministic


def test_assign_layers_balances_the_rest_and_raises():
    # One heavy input layer then equal layers: the bottleneck is fixed by unit 0, and the
    # other stages must still split the rest evenly (not 1,1,1,... then a big tail).
    blocks = assign_layers([100] + [1] * 12, 4)
    assert blocks == [(0, 1), (1, 5), (5, 9), (9, 13)]
    with pytest.raises(GnnpipeError, match="hybrid"):
        assign_layers([1, 2, 3], 4)
    with pytest.raises(GnnpipeError, match="stages"):
        assign_layers([1, 2], 0)
    with pytest.raises(GnnpipeError, match="costs"):
        assign_layers([1, -2], 1)


def test_layer_costs_shapes():
    args = dict(F=500, d=64, N=1000, E=8000, classes=5)
    assert len(layer_costs("gcn", 8, **args)) == 8
    assert len(layer_costs("sage", 8, **args)) == 8
    assert len(layer_costs("gat", 3, **args)) == 3
    c = layer_costs("gcnii", 8, **args)
    assert len(c) == 10 and len(set(c[1:-1])) == 1  # input + 8 equal layers + output
    assert len(layer_costs("resgcn+", 4, **args)) == 6
    g = layer_costs("gcn", 4, **args)
    assert g[0] > g[1] == g[2] > g[3]  # wide input first layer, narrow output last layer
    assert layer_costs("gcn", 4, sparse_nnz=5000, **args)[0] < g[0]
    with pytest.raises(GnnpipeError, match="model"):
        layer_costs("mlp", 4, **args)
    with pytest.raises(GnnpipeError, match="num_layers"):
        layer_costs("gcn", 0, **args)


# ------------------------------------------------------------------ CLI
@pytest.fixture()
def prepared(tmp_path, graph) -> Path:
    return graph.save(tmp_path / "data" / "rand")


def run_cli(args, capsys):
    rc = cli_main([str(a) for a in args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_cli_writes_reuses_refuses(prepared, tmp_path, capsys):
    out = tmp_path / "plans" / "p"
    rc, stdout, _ = run_cli([prepared, "--parts", 3, "--chunks", 2, "--out", out], capsys)
    assert rc == 0 and (out / "META.json").is_file()
    assert "edge cut" in stdout and "pipeline" in stdout and "paper" in stdout
    before = (out / "assignment.npz").read_bytes()
    rc, _, err = run_cli([prepared, "--parts", 3, "--chunks", 2, "--out", out], capsys)
    assert rc == 0 and "reusing" in err
    rc, _, err = run_cli([prepared, "--parts", 3, "--chunks", 3, "--out", out], capsys)
    assert rc == 2 and "other parameters" in err and "--force" in err
    assert (out / "assignment.npz").read_bytes() == before
    rc, _, _ = run_cli([prepared, "--parts", 3, "--chunks", 3, "--out", out, "--force"], capsys)
    assert rc == 0 and PartitionPlan.load(out).num_chunks == 3
    rc, stdout, _ = run_cli([prepared, "--parts", 2, "--out", tmp_path / "j", "--json", "--method", "random"], capsys)
    assert rc == 0 and json.loads(stdout)["meta"]["params"]["method"] == "random"


def test_cli_summary_names_its_model_and_follows_the_flags(prepared, tmp_path, capsys):
    from gnnpipe.partition import volume

    rc, stdout, _ = run_cli([prepared, "--parts", 2, "--dry-run"], capsys)
    assert rc == 0 and "for the model gcn L=32 d=100" in stdout and "GiB" in stdout and " GB" not in stdout
    rc, stdout, _ = run_cli([prepared, "--parts", 2, "--dry-run", "--json", "--model", "gcnii", "--layers", 8,
                             "--hidden", 16], capsys)
    doc = json.loads(stdout)
    v, sum_m = doc["volume_for_model"], doc["stats"]["parts"]["halo_sum"]
    assert v["model_shape"]["model"] == "gcnii" and v["model_shape"]["layers"] == 8
    assert v["graph_parallel_ours"] == volume.graph_parallel_bytes(sum_m, v["model_shape"]["features"], 8, 16, 4,
                                                                   "gcnii", "ours")
    assert doc["stats"]["volume"]["model_shape"]["layers"] == 32  # stats.json keeps the default shape
    rc, stdout, _ = run_cli([prepared, "--parts", 2, "--dry-run", "--model", "gcnii", "--layers", 8, "--hidden", 16],
                            capsys)
    gib = v["pipeline"] / 2**30
    assert "gcnii L=8 d=16" in stdout and f"{gib:.3f} GiB" in stdout
    rc, _, err = run_cli([prepared, "--parts", 2, "--dry-run", "--model", "mlp"], capsys)
    assert rc == 2 and "--model: expected one of" in err


def test_cli_default_out_and_dry_run(prepared, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("GNNPIPE_PARTITION_ROOT", str(tmp_path / "proot"))
    rc, stdout, err = run_cli([prepared, "--parts", 2, "--chunks", 2, "--dry-run"], capsys)
    assert rc == 0 and "edge cut" in stdout and "dry run" in err
    assert not (tmp_path / "proot").exists()
    rc, _, _ = run_cli([prepared, "--parts", 2, "--chunks", 2, "--method", "contiguous"], capsys)
    assert rc == 0 and (tmp_path / "proot" / "rand-contiguous-p2-c2" / "META.json").is_file()


@pytest.mark.parametrize(
    "extra, match",
    [
        (["--parts", "0"], "--parts"),
        (["--parts", "2", "--chunks", "0"], "--chunks"),
        (["--parts", "121"], "exceeds"),
        (["--parts", "2", "--method", "kmeans"], "--method"),
        (["--parts", "2", "--objective", "x"], "--objective"),
    ],
)
def test_cli_bad_input_writes_nothing(prepared, tmp_path, capsys, extra, match):
    out = tmp_path / "never"
    rc, _, err = run_cli([prepared, *extra, "--out", out], capsys)
    assert rc == 2 and match in err and err.count("\n") <= 3
    assert not out.exists()


def test_cli_bad_dataset_and_unwritable_out(prepared, tmp_path, capsys):
    rc, _, err = run_cli([tmp_path / "nope", "--parts", 2], capsys)
    assert rc == 2 and "nope" in err
    (prepared / "labels.npy").write_bytes(b"broken")
    rc, _, err = run_cli([prepared, "--parts", 2, "--out", tmp_path / "o"], capsys)
    assert rc == 2 and "labels.npy" in err and not (tmp_path / "o").exists()
    blocker = tmp_path / "file"
    blocker.write_text("x")
    ok = tmp_path / "data2"
    random_graph().save(ok)
    rc, _, err = run_cli([ok, "--parts", 2, "--out", blocker / "sub"], capsys)
    assert rc == 2 and "is a file" in err  # (refused before partitioning)
    if os.geteuid() != 0:  # root ignores permissions
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o500)
        rc, _, err = run_cli([ok, "--parts", 2, "--out", ro / "p"], capsys)
        assert rc == 2 and "not writable" in err and not (ro / "p").exists()


# ------------------------------------------------------------------ real datasets
REAL = ["cora", "citeseer", "squirrel", "chameleon", "amazon_photo", "coauthor_physics"]


@pytest.mark.realdata
@pytest.mark.parametrize("name", REAL)
def test_plans_for_real_datasets(raw_datasets, name, tmp_path):
    from gnnpipe.data import catalog

    g = catalog.load_from_card(catalog.get_card(name), raw_datasets / name)
    plan = with_stats(g, build_plan(g, 8, 4, method="metis", seed=0))
    d = plan.save(tmp_path / f"{name}-metis-p8-c4")
    q = PartitionPlan.load(d)
    check_plan_matches(q, g)
    st = q.stats
    assert st["parts"]["balance"] < 1.1
    rnd = plan_stats(g, build_plan(g, 8, 1, method="random", seed=0))["parts"]["edge_cut"]
    assert st["parts"]["edge_cut"] < 0.8 * rnd  # METIS well below random
    # The halo lists of one rank agree with the statistics.
    lp = load_local_part(g, q, 3)
    assert lp.num_halo == st["parts"]["halo"][3]
