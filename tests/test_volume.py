"""Hybrid communication volume: the halo counts, brute-forced and on real ranks.

The stale hybrid (``WayLink``) sends each boundary row once per way, layer and direction,
however many of the way's chunks read it, so its halo bytes are graph parallelism's over
the same parts, ``2·s·d·n_x·Σ_w M_w``; ``plan.predict`` counts them so. The per-chunk
count ``Σ_w Σ_k M_{w,k}`` (``volume.chunk_halo_sum``, ``PartInfo.chunk_halo``: the rows the
chunks read) is what per-chunk exchanges would send; on a dense graph it is far larger.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

TESTS = Path(__file__).resolve().parent

from helpers.rankfns import _cfg  # noqa: E402

from gnnpipe import GnnpipeError  # noqa: E402
from gnnpipe.partition import build_plan  # noqa: E402
from gnnpipe.partition.volume import (chunk_halo_sum, exchanged_layers, graph_parallel_bytes,  # noqa: E402
                                      hybrid_bytes, pipeline_bytes)
from gnnpipe.dims import ParallelDims  # noqa: E402
from gnnpipe.cost import (ModelSpec, chunk_counts, graph_stats_from_graph, load_profile,  # noqa: E402
                          predict)
from gnnpipe.spawn import run_ranks  # noqa: E402
from gnnpipe.data.load import load_graph_for  # noqa: E402


def _random_csr(n, e, seed):
    rng = np.random.default_rng(seed)
    a, b = rng.integers(0, n, e), rng.integers(0, n, e)
    keep = a != b
    key = np.unique(np.concatenate([a[keep] * n + b[keep], b[keep] * n + a[keep]]))
    rows, cols = key // n, key % n
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
    return indptr, cols


def _brute(indptr, indices, part, chunk):
    # For every (part, chunk): the set of neighbours in other parts, by plain loops.
    need: dict[tuple, set] = {}
    for v in range(len(part)):
        for u in indices[indptr[v]:indptr[v + 1]]:
            if part[u] != part[v]:
                need.setdefault((part[v], chunk[v]), set()).add(int(u))
    return sum(len(s) for s in need.values())


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_chunk_halo_sum_equals_brute_force(seed):
    n = 60
    indptr, indices = _random_csr(n, 150, seed)
    rng = np.random.default_rng(seed + 10)
    part = rng.integers(0, 3, n)
    chunk = rng.integers(0, 4, n)  # local chunk ids: the count must key them by part
    got = chunk_halo_sum(indptr, indices, part, chunk)
    assert got == _brute(indptr, indices, part, chunk)
    # One chunk per part: the per-way count Σ_w M_w; more chunks never count fewer.
    per_way = _brute(indptr, indices, part, np.zeros(n, dtype=int))
    assert chunk_halo_sum(indptr, indices, part, np.zeros(n, dtype=int)) == per_way <= got


def test_chunk_halo_sum_rejects_bad_shapes():
    indptr, indices = _random_csr(10, 20, 0)
    with pytest.raises(GnnpipeError, match="one entry per node"):
        chunk_halo_sum(indptr, indices, np.zeros(9, dtype=int), np.zeros(10, dtype=int))


def test_hybrid_bytes_is_pipeline_plus_graph_parallel_halo():
    N, d, L, S, D = 1000, 16, 6, 2, 2
    for model in ("gcn", "gcnii"):
        got = hybrid_bytes(N, 777, 12, L, d, S, D, 4, model, h0=model == "gcnii")
        assert got == pipeline_bytes(N, d, S, 4, h0=model == "gcnii") + 2 * 4 * d * exchanged_layers(model, L) * 777
        assert got == pipeline_bytes(N, d, S, 4, h0=model == "gcnii") + graph_parallel_bytes(777, 12, L, d, 4, model)


def test_plan_chunk_facts_match_the_chunks_the_executor_builds():
    from gnnpipe.parallel.chunks import build_chunks
    from gnnpipe.partition import relabel_graph

    cfg = _cfg(mode="hybrid", ways=2, stages=2, chunks=3)
    g = load_graph_for(cfg)
    st = graph_stats_from_graph(g, [2], seed=0, chunks={1: [4], 2: [3]})
    for ways, C in ((2, 3), (1, 4)):
        plan = build_plan(g, ways, C, seed=0)
        rg = relabel_graph(g, plan)
        chunks = build_chunks(rg.indptr, rg.indices, plan.chunk_ptr)
        pp = np.asarray(plan.part_ptr)
        remote, nbrs = 0, [0] * ways
        for c, ch in enumerate(chunks):
            w = c // C
            ids = ch.nbr_ids.numpy()
            remote += int(((ids < pp[w]) | (ids >= pp[w + 1])).sum())
            nbrs[w] += ids.size
        assert st.part(ways).chunk_halo[C] == remote
        assert st.part(ways).chunk_nbrs[C] == max(nbrs)
    assert st.part(2).chunk_halo[3] > st.part(2).sum_m  # per chunk > per way here


@pytest.mark.mpi
@pytest.mark.parametrize("model", ["gcn", "gcnii"])
def test_hybrid_predicted_bytes_equal_measured_on_real_ranks(model):
    # 2 ways x 2 stages, Gloo: one epoch's way link, pipe and all-reduce bytes equal plan.predict.
    run = dict(model=model, layers=4, epochs=1, mode="hybrid", ways=2, stages=2, chunks=3)
    res = run_ranks("helpers.rankfns:many", 4, "torch", args={"fn": "pipeline_run", "runs": [run]},
                    env={"PYTHONPATH": str(TESTS), "OMP_NUM_THREADS": "1"}, timeout_s=300)
    ranks = [r[0] for r in res]
    sent = {k: sum(r["bytes"].get(k, 0) for r in ranks) for k in
            ("halo_fwd", "halo_bwd", "way_fwd", "way_bwd", "pipe_act", "pipe_grad", "allreduce")}
    cfg = _cfg(**run)
    g = load_graph_for(cfg)
    topo = ParallelDims("hybrid", ways=2, stages=2, chunks=3)
    st = graph_stats_from_graph(g, [2], seed=cfg.seed, chunks=chunk_counts([topo]))
    p = predict(st, ModelSpec(model, 4, cfg.hidden), topo, load_profile("cpu-this-machine"))
    assert sent["halo_fwd"] + sent["halo_bwd"] == p.bytes["halo"] == 0  # the hybrid has no graph-mode halo
    assert sent["way_fwd"] + sent["way_bwd"] == p.bytes["way"]
    assert sent["pipe_act"] + sent["pipe_grad"] == p.bytes["pipe"]
    assert sent["allreduce"] == p.bytes["allreduce"]
    # Each boundary row once per way: the per-way count, not the per-chunk one.
    n_x = exchanged_layers(model, 4)
    assert p.bytes["way"] == 2 * 4 * cfg.hidden * n_x * st.part(2).sum_m
    assert p.bytes["way"] < 2 * 4 * cfg.hidden * n_x * st.part(2).chunk_halo[3]


def test_hybrid_halo_bytes_at_most_graph_parallel_on_a_dense_graph():
    # A dense graph (300 nodes, average degree 40), 2 parts: graph parallelism on 2 ranks and
    # the stale hybrid of 2 ways x 2 stages, 4 chunks each. Most boundary rows are read by
    # several chunks of a way; each still crosses once per way, layer and direction.
    dense = dict(synth_nodes=300, synth_degree=40.0, model="gcn", layers=3, epochs=1)
    env = {"PYTHONPATH": str(TESTS), "OMP_NUM_THREADS": "1"}
    res_g = run_ranks("helpers.rankfns:many", 2, "torch", args={"fn": "graph_parallel_run", "runs": [dense]},
                      env=env, timeout_s=300)
    res_h = run_ranks("helpers.rankfns:many", 4, "torch", args={"fn": "pipeline_run",
                      "runs": [dict(dense, mode="hybrid", ways=2, stages=2, chunks=4)]}, env=env, timeout_s=300)

    def sent(res, cat):
        return sum(r[0]["bytes"].get(f"{cat}_fwd", 0) + r[0]["bytes"].get(f"{cat}_bwd", 0) for r in res)

    graph_b, hybrid_b = sent(res_g, "halo"), sent(res_h, "way")  # graph mode's halo, the hybrid's way link
    assert 0 < hybrid_b <= graph_b, (hybrid_b, graph_b)
    # the same METIS parts (the chunking does not change them): equal, to the byte
    assert hybrid_b == graph_b
    # per-chunk exchanges would have sent far more on this graph
    cfg = _cfg(**dense)
    st = graph_stats_from_graph(load_graph_for(cfg), [2], seed=cfg.seed, chunks={2: [4]})
    per_chunk = 2 * 4 * cfg.hidden * exchanged_layers("gcn", 3) * st.part(2).chunk_halo[4]
    assert per_chunk > 1.5 * hybrid_b, (per_chunk, hybrid_b)
