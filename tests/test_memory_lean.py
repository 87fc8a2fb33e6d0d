"""What a rank holds: lean dropout, lean pipeline stages, and the memory model's terms.

* hashed dropout keeps a bit-packed mask for backward (not a float copy of its input) and its
  gradients equal plain autograd through ``h * mask`` bit for bit;
* a pipeline stage keeps no copy of the neighbour rows it reads from history (their
  gradient still reaches the cross-chunk buffer), and gathers its features per chunk;
* a hybrid way builds blocks only for its own chunks;
* the memory model's saved-activation term equals what autograd saves, counted with
  ``saved_tensors_hooks``, for graph mode and for a pipeline stage;
* the scale benchmark's per-chunk facts from a plan on disk equal the planner's.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

from gnnpipe.cost import GraphStats, ModelSpec, chunk_facts, unit_works
from gnnpipe.cost.memory import saved_bytes
from gnnpipe.data import synthetic
from gnnpipe.models import ModelConfig, RunCtx, build_model, ops
from gnnpipe.parallel.chunks import ChunkInfo, ChunkNeighbours, build_chunks
from gnnpipe.parallel.executor import StaleOptions
from gnnpipe.parallel.pipeline.inputs import StageFeatures, StageTargets
from gnnpipe.parallel.pipeline.stage import PipelineStage, StageUnits
from gnnpipe.partition import build_plan, relabel_graph


from helpers.saved import Saved, tensors  # noqa: E402


def test_dropout_saves_packed_mask_and_equals_plain_autograd():
    torch.manual_seed(0)
    gid = torch.randperm(10_000)[:700]
    w = torch.randn(48, 16)
    h0 = torch.randn(700, 48)

    def run(drop):
        h = h0.clone().requires_grad_(True)
        with Saved() as saved:
            y = torch.relu(drop(h) @ w)
        y.pow(2).sum().backward()
        return y.detach(), h.grad, saved

    def plain(h):
        keep = ops.keep_mask(gid, h.shape[1], 0.3, 5, 2, 7)
        return h * keep.to(h.dtype).mul_(1.0 / (1.0 - 0.3))

    y0, g0, s0 = run(plain)
    y1, g1, s1 = run(lambda h: ops.hashed_dropout(h, gid, 0.3, 5, 2, 7))
    assert torch.equal(y0, y1) and torch.equal(g0, g1)
    mask_bytes = 700 * 48
    assert s1.bytes(torch.uint8) == mask_bytes // 8  # bit-packed: 8 values per byte
    assert s1.bytes(torch.bool) == 0
    # the plain path keeps a float mask (4 bytes per value) where we keep 1/8
    assert s0.bytes() - s1.bytes() == 4 * mask_bytes - mask_bytes // 8
    # evaluation and inputs without gradient save nothing
    with Saved() as s2:
        ops.hashed_dropout(h0, gid, 0.3, 5, 2, 7)
    assert s2.bytes() == 0


def _stage_setup(ways: int = 1, chunks: int = 4):
    g = synthetic.sbm(num_nodes=600, num_classes=3, avg_degree=6.0, num_features=12, seed=1)
    plan = build_plan(g, parts=ways, chunks=chunks, method="random", seed=0)
    rg = relabel_graph(g, plan)
    return g, plan, rg


def test_hybrid_way_builds_only_its_own_blocks():
    _, plan, rg = _stage_setup(ways=2, chunks=3)
    full = build_chunks(rg.indptr, rg.indices, plan.chunk_ptr, orig=plan.perm)
    mine = build_chunks(rg.indptr, rg.indices, plan.chunk_ptr, orig=plan.perm, only=range(3, 6))
    assert [type(c) for c in mine] == [ChunkNeighbours] * 3 + [ChunkInfo] * 3
    for a, b in zip(full, mine):
        assert torch.equal(a.nbr_ids, b.nbr_ids) and (a.lo, a.hi) == (b.lo, b.hi)
    for a, b in zip(full[3:], mine[3:]):
        assert torch.equal(a.block.indices, b.block.indices) and torch.equal(a.src_ids(), b.src_ids())
        assert torch.equal(a.src_ids(), a.block.src_gid.new_tensor(np.argsort(plan.perm))[a.block.src_gid])


def _stage(rg, plan, model, a, b, x=True):
    chunks = build_chunks(rg.indptr, rg.indices, plan.chunk_ptr, rg.degrees().astype(np.float32), orig=plan.perm)
    masks = {"train": rg.train_mask, "val": rg.val_mask, "test": rg.test_mask}
    last = b == len(model.units)
    return PipelineStage(StageUnits.of(model.units, a, b), chunks, rg.num_nodes, StaleOptions(), seed=0,
                         features=StageFeatures(rg.features, chunks, model.units[0], "cpu") if a == 0 else None,
                         targets=StageTargets(rg.labels, masks, 100, False, "cpu") if last else None)


def test_stage_keeps_no_neighbour_copies_and_cross_chunk_gradients_arrive():
    g, plan, rg = _stage_setup()
    model = build_model(ModelConfig("gcn", g.num_features, g.num_classes, layers=3, hidden=16), seed=0)
    st = _stage(rg, plan, model, 0, 2)
    assert st.features.x is not None and not st.features.x_src  # features gathered per chunk from one copy
    st.begin_epoch(0)
    outs = [st.forward_chunk(k, None, {})[0] for k in range(4)]
    for k in range(4):
        held = [s for _, s in st.state[k].nbr_leaves]
        assert held and all(s.grad is None and s.anchor.numel() == 0 for s in held)
    # backward of the last chunk sends gradients to the other chunks' rows
    before = st.history.gacc[1].clone()
    st.backward_chunk(3, torch.ones_like(outs[3]), {})
    nbr = st.chunks[3].nbr_ids
    assert torch.count_nonzero(st.history.gacc[1][nbr] - before[nbr]) > 0


def _predicted_saved(stats, spec, units, src, dst):
    return sum(saved_bytes(stats, spec.model, u, src, dst) for u in units)


@pytest.mark.parametrize("model", ["gcn", "gcnii"])
def test_model_counts_what_a_pipeline_stage_saves(model):
    g, plan, rg = _stage_setup()
    mcfg = ModelConfig(model, g.num_features, g.num_classes, layers=4, hidden=16)
    net = build_model(mcfg, seed=0)
    n_units = len(net.units)
    a, b = 1, n_units - 1  # a middle stage: no features, no loss
    st = _stage(rg, plan, net, a, b)
    carry = {"h0": torch.randn(1, 16)} if model == "gcnii" else {}
    st.begin_epoch(0)
    for ch in st.chunks:  # build each block's cached tensors (structure) before measuring
        ch.block.gcn_adj(), ch.block.gcn_self_weight()
    own = list(net.parameters()) + [t for ch in st.chunks for t in tensors(vars(ch.block))]
    with Saved(exclude=own) as saved:
        for k in range(4):
            ch = st.chunks[k]
            c = {key: v.expand(ch.size, 16).contiguous() for key, v in carry.items()}
            st.forward_chunk(k, torch.randn(ch.size, st.in_dim), c)
    stats = GraphStats(int(g.num_nodes), int(g.num_edges), int(g.num_features), int(g.num_classes))
    spec = ModelSpec(model, 4, 16)
    units = unit_works(stats, spec)[a:b]
    src = sum(c.block.num_src for c in st.chunks)
    want = _predicted_saved(stats, spec, units, src, g.num_nodes)
    got = saved.bytes()
    assert abs(got - want) <= 0.1 * want, (got, want)


def test_model_counts_what_graph_mode_saves():
    g = synthetic.sbm(num_nodes=500, num_classes=3, avg_degree=6.0, num_features=12, seed=1)
    net = build_model(ModelConfig("gcn", g.num_features, g.num_classes, layers=4, hidden=16), seed=0)
    from gnnpipe.models import Block

    blk = Block.full(g.indptr, g.indices)
    x = torch.from_numpy(np.asarray(g.features, dtype=np.float32))
    with Saved() as saved:
        net(blk, x, RunCtx(training=True, epoch=0, seed=0))
    stats = GraphStats(int(g.num_nodes), int(g.num_edges), int(g.num_features), int(g.num_classes))
    spec = ModelSpec("gcn", 4, 16)
    want = _predicted_saved(stats, spec, unit_works(stats, spec), g.num_nodes, g.num_nodes)
    # the last unit's log-softmax is the loss's, outside the model
    want -= 4.0 * g.num_nodes * g.num_classes
    assert abs(saved.bytes() - want) <= 0.1 * want, (saved.bytes(), want)


def test_scale_chunk_facts_from_plan_equal_planner():
    from gnnpipe.bench.scale import chunk_facts_of_plan

    g = synthetic.rmat(800, 6000, num_classes=3, num_features=4, seed=2)
    for parts, chunks in ((1, 4), (2, 3)):
        plan = build_plan(g, parts, chunks, method="random", seed=0)
        assert chunk_facts_of_plan(g, plan) == chunk_facts(g, parts, chunks, 0, "random")


@pytest.mark.parametrize("env,expect", [("", 1 << 20), ("0", 0), ("4194304", 4194304)])
def test_lean_allocator_threshold(env, expect):
    code = "from gnnpipe.parallel.alloc import lean_allocator; print(lean_allocator(), lean_allocator())"
    import os

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "GNNPIPE_MMAP_THRESHOLD": env})
    assert out.stdout.split() == [str(expect)] * 2


@pytest.mark.parametrize("flag,env,expect", [(False, None, 0), (True, None, 1 << 20), (False, "2097152", 2097152),
                                             (True, "0", 0)])
def test_train_sets_the_allocator_only_when_asked(tmp_path, flag, env, expect):
    """Training leaves malloc alone by default (the lean setting costs epoch time); --lean-memory
    or GNNPIPE_MMAP_THRESHOLD turn it on, and the variable wins over the flag."""
    import os

    code = ("import sys; from gnnpipe.config import TrainConfig; from gnnpipe.train import train; "
            "from gnnpipe.comm import SingleProcessCommunicator; from gnnpipe.parallel import alloc; "
            f"train(TrainConfig(synth_nodes=200, epochs=1, layers=2, mode='graph', model='gcn', progress=False, "
            f"lean_memory={flag}), SingleProcessCommunicator(), out=sys.argv[1]); print(alloc._done or 0)")
    e = {k: v for k, v in os.environ.items() if k != "GNNPIPE_MMAP_THRESHOLD"}
    if env is not None:
        e["GNNPIPE_MMAP_THRESHOLD"] = env
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "run")], capture_output=True, text=True,
                         env=e, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-1] == str(expect)


def test_scale_guard_skips_points_that_do_not_fit(tmp_path):
    """The scale benchmark never starts a point whose ranks' predicted memory does not fit:
    with no memory to spare every point is skipped, named, and still written out."""
    import json

    from gnnpipe.bench import scale

    rows, md = scale.run(tmp_path, quick=True, progress=False, mem_fraction=1e-9)
    assert {r["config"] for r in rows} == {"G4", "P4c16", "H2x2c8"}
    for r in rows:
        assert r["skipped"].startswith("skipped:") and "GiB for 4 ranks" in r["skipped"]
        assert "epoch_s" not in r
        # every rank counted: at least the busiest rank, at most 4 x it
        assert r["pred_mem_mb"] <= r["pred_total_mb"] <= 4 * r["pred_mem_mb"] + 1e-6
    saved = json.loads((tmp_path / "scale-quick" / "results.json").read_text())
    assert len(saved["rows"]) == 3 and "skipped" in md
