"""What a pipeline stage holds between chunks and epochs.

* per aggregating unit at most two [R, d_in] buffers at any time: H and G before the first
  snapshot, then H (whose storage G takes over in the backward phase) and S;
* the stage keeps neither unit inputs nor received activations until the flush;
* ``--history-dtype bfloat16`` halves the buffers and still trains (one process and hybrid);
* a hybrid way's buffers hold only its own part's rows.
"""

from __future__ import annotations

import weakref
from pathlib import Path

import numpy as np
import pytest
import torch

TESTS = Path(__file__).resolve().parent

from helpers.rankfns import _cfg  # noqa: E402

from gnnpipe.comm import SingleProcessCommunicator  # noqa: E402
from gnnpipe.data import synthetic  # noqa: E402
from gnnpipe.models import ModelConfig, build_model  # noqa: E402
from gnnpipe.parallel.build import first_stage_features  # noqa: E402
from gnnpipe.parallel.chunks import build_chunks  # noqa: E402
from gnnpipe.parallel.executor import StaleOptions  # noqa: E402
from gnnpipe.parallel.pipeline.inputs import StageFeatures, StageTargets  # noqa: E402
from gnnpipe.parallel.pipeline.stage import PipelineStage, StageUnits  # noqa: E402
from gnnpipe.partition import build_plan, part_halo, relabel_graph  # noqa: E402
from gnnpipe.spawn import run_ranks  # noqa: E402
from gnnpipe.data.load import load_graph_for  # noqa: E402
from gnnpipe.train import executor_for_config  # noqa: E402

ENV = {"PYTHONPATH": str(TESTS)}


def _middle_stage(snapshot_period: int, hist_dtype=torch.float32):
    g = synthetic.sbm(num_nodes=600, num_classes=3, avg_degree=6.0, num_features=12, seed=1)
    plan = build_plan(g, parts=1, chunks=4, method="random", seed=0)
    rg = relabel_graph(g, plan)
    model = build_model(ModelConfig("gcn", g.num_features, g.num_classes, layers=4, hidden=16), seed=0)
    chunks = build_chunks(rg.indptr, rg.indices, plan.chunk_ptr, rg.degrees().astype(np.float32), orig=plan.perm)
    return PipelineStage(StageUnits.of(model.units, 1, 3), chunks, rg.num_nodes,
                         StaleOptions(snapshot_period=snapshot_period), seed=0, hist_dtype=hist_dtype)


def _tensors(obj) -> list:
    """Every tensor reachable from a chunk's state (its fields, lists, dicts and sinks)."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for x in obj for t in _tensors(x)]
    if isinstance(obj, dict):
        return [t for x in obj.values() for t in _tensors(x)]
    if hasattr(obj, "__dataclass_fields__"):
        return [t for f in obj.__dataclass_fields__ for t in _tensors(getattr(obj, f))]
    if hasattr(obj, "__slots__"):
        return [t for f in obj.__slots__ for t in _tensors(getattr(obj, f, None))]
    return []


def _storages(st) -> set:
    bufs = list(st.history.hist.values()) + list(st.history.gacc.values()) + list((st.history.snap or {}).values())
    return {t.untyped_storage().data_ptr() for t in bufs}


def test_two_history_buffers_per_unit_and_nothing_held_until_the_flush():
    st = _middle_stage(snapshot_period=2)
    units = len(st.history.hist)
    assert units == 2
    seen = []
    for epoch in range(5):
        st.begin_epoch(epoch)
        seen.append(len(_storages(st)))
        inputs = []
        for k in range(4):
            h_in = torch.randn(st.chunks[k].size, st.in_dim)
            inputs.append(weakref.ref(h_in))
            out, _ = st.forward_chunk(k, h_in, {})
            del h_in, out
        seen.append(len(_storages(st)))
        # the received rows are not kept by the stage (GCN units save no copy of their input),
        # and what the stage keeps per chunk until its backward holds no rows at all
        assert all(r() is None for r in inputs)
        for cs in st.state.values():
            assert all(t.numel() <= 1 for t in _tensors(cs)), [t.shape for t in _tensors(cs)]
        for k in reversed(range(4)):
            g_in, _, _ = st.backward_chunk(k, torch.randn(st.chunks[k].size, st.out_dim), {})
            assert g_in.shape == (st.chunks[k].size, st.in_dim)
            seen.append(len(_storages(st)))
            if epoch >= 1:  # a snapshot exists from epoch 1's backward turn on: G is in H's storage
                assert all(st.history.gacc[p].data_ptr() == st.history.hist[p].data_ptr() for p in st.history.hist)
        st.end_epoch()
        assert (st.history.snap is not None) == (epoch >= 1)
    assert max(seen) == 2 * units, seen


def test_snapshot_taken_at_the_backward_turn_equals_end_of_epoch_history():
    st = _middle_stage(snapshot_period=1)
    st.begin_epoch(0)
    for k in range(4):
        st.forward_chunk(k, torch.randn(st.chunks[k].size, st.in_dim), {})
    hist = {p: h.clone() for p, h in st.history.hist.items()}
    for k in reversed(range(4)):
        st.backward_chunk(k, torch.randn(st.chunks[k].size, st.out_dim), {})
    st.end_epoch()
    for p in hist:
        assert torch.equal(st.history.snap[p], hist[p])
    st.begin_epoch(1)
    for p in hist:
        assert torch.equal(st.history.hist[p], hist[p])


def _train_one_process(history_dtype: str, epochs: int = 30):
    cfg = _cfg(mode="pipeline", model="gcn", layers=3, chunks=4, epochs=epochs, history_dtype=history_dtype,
               snapshot_period=5, synth_nodes=400)
    comm = SingleProcessCommunicator()
    ex, _ = executor_for_config(cfg, comm, load_graph_for(cfg))
    losses = [ex.train_epoch(e).loss for e in range(epochs)]
    return ex, losses, ex.evaluate(epochs)


def test_bfloat16_history_halves_the_buffers_and_trains():
    ex32, l32, acc32 = _train_one_process("float32")
    ex16, l16, acc16 = _train_one_process("bfloat16")
    b32 = sum(t.nbytes for t in list(ex32.stage.history.hist.values()) + list((ex32.stage.history.snap or {}).values()))
    b16 = sum(t.nbytes for t in list(ex16.stage.history.hist.values()) + list((ex16.stage.history.snap or {}).values()))
    assert b32 > 0 and b16 * 2 == b32
    assert all(t.dtype == torch.bfloat16 for t in ex16.stage.history.hist.values())
    assert l16[-1] < 0.8 * l16[0]
    assert abs(acc16["val_acc"] - acc32["val_acc"]) <= 0.05, (acc16, acc32)
    assert abs(l16[-1] - l32[-1]) <= 0.1 * l32[-1], (l16[-1], l32[-1])


def test_hybrid_buffers_hold_only_the_ways_rows_and_bfloat16_trains():
    runs = [dict(model="gcn", layers=4, epochs=15, mode="hybrid", ways=2, stages=2, chunks=3, snapshot_period=4,
                 history_dtype=dt, synth_nodes=400) for dt in ("float32", "bfloat16")]
    res = run_ranks("helpers.rankfns:many", 4, "torch", args={"fn": "pipeline_run", "runs": runs}, env=ENV, timeout_s=300)
    f32, b16 = res[0][0], res[0][1]
    assert b16["losses"][-1] < 0.8 * b16["losses"][0]
    assert abs(b16["acc"]["val_acc"] - f32["acc"]["val_acc"]) <= 0.1, (b16["acc"], f32["acc"])
    # the way link's rows travel in the history dtype: half the forward way link bytes
    halo = [sum(r[i]["bytes"].get("way_fwd", 0) for r in res) for i in range(2)]
    assert 2 * halo[1] == halo[0] > 0, halo


def test_hybrid_way_history_rows_are_its_part():
    from gnnpipe.parallel.pipeline.waylink import build_way_link

    g = synthetic.sbm(num_nodes=600, num_classes=3, avg_degree=6.0, num_features=12, seed=1)
    plan = build_plan(g, parts=2, chunks=3, method="random", seed=0)
    rg = relabel_graph(g, plan)
    chunks_all = build_chunks(rg.indptr, rg.indices, plan.chunk_ptr, orig=plan.perm, only=range(3, 6))
    link = build_way_link(None, plan, chunks_all, 1, 3, exact=False)
    model = build_model(ModelConfig("gcn", g.num_features, g.num_classes, layers=3, hidden=16), seed=0)
    masks = {"train": rg.train_mask, "val": rg.val_mask, "test": rg.test_mask}
    st = PipelineStage(StageUnits.of(model.units, 1, len(model.units)), chunks_all[3:], rg.num_nodes,
                       StaleOptions(snapshot_period=1), seed=0, targets=StageTargets(rg.labels, masks, 100, False, "cpu"),
                       source=link)
    lo, hi = int(plan.part_ptr[1]), int(plan.part_ptr[2])
    assert st.row0 == lo and all(h.shape[0] == hi - lo < rg.num_nodes for h in st.history.hist.values())
    for k in range(3):
        ids = chunks_all[3 + k].nbr_ids
        assert torch.equal(ids[link.own_pos[k]], link.own_rows[k] + lo)
        assert torch.equal(ids[link.remote_pos[k]], link.halo_ids[link.remote_rows[k]])
    # R_u holds the way's halo (graph parallelism's halo of the same part), once
    assert link.halo_rows == part_halo(rg, plan, 1).num_halo
    assert st.history.remote.keys() == st.history.hist.keys()
    assert all(r.shape[0] == link.halo_rows for r in st.history.remote.values())
    # R follows H: snapshot at the backward turn, GR in R's storage, restored next epoch
    st.begin_epoch(0)
    for r in st.history.remote.values():
        r.fill_(3.0)
    st.begin_backward()
    assert all(st.history.gremote[p].data_ptr() == st.history.remote[p].data_ptr() for p in st.history.remote)
    assert all(float(st.history.rsnap[p].min()) == 3.0 for p in st.history.remote)
    st.end_epoch()
    st.begin_epoch(1)
    assert all(torch.equal(st.history.remote[p], st.history.rsnap[p]) for p in st.history.remote)


@pytest.mark.parametrize("bad", ["float16", "int8"])
def test_history_dtype_is_checked(bad):
    from gnnpipe import GnnpipeError

    with pytest.raises(GnnpipeError, match="history_dtype"):
        _cfg(history_dtype=bad)


@pytest.mark.parametrize("model", ["gcn", "gcnii", "resgcn+", "gat"])
def test_evaluation_by_chunks_equals_the_whole_graph_forward(model):
    """Evaluation runs unit by unit over the training chunks' blocks (no second whole-graph
    block): the logits equal the same units run on the whole graph at once."""
    from gnnpipe.models import RunCtx
    from gnnpipe.models.block import Block
    from gnnpipe.parallel.features import features_to_tensor

    cfg = _cfg(mode="pipeline", model=model, layers=3, chunks=4, epochs=2)
    g = load_graph_for(cfg)
    ex, plan = executor_for_config(cfg, SingleProcessCommunicator(), g)
    for e in range(2):
        ex.train_epoch(e)
    made = []
    real_init = Block.__init__

    def counting_init(self, *a, **kw):
        made.append(kw.get("num_src", a[2] if len(a) > 2 else None))
        real_init(self, *a, **kw)

    Block.__init__ = counting_init
    try:
        out, _ = ex._eval_forward(2)
    finally:
        Block.__init__ = real_init
    assert made == [], f"evaluation built {len(made)} new block(s); it must reuse the training chunks' blocks"
    rg = relabel_graph(g, plan)
    blk = Block.full(torch.as_tensor(rg.indptr), torch.as_tensor(rg.indices))
    h, carry = features_to_tensor(rg.features), {}
    ctx = RunCtx(training=False, epoch=2, seed=cfg.seed)
    with torch.no_grad():
        for u in ex.stage.units:
            u.eval()
            h, carry = u(h, carry, ctx, blk, h if u.aggregates else None)
            u.train()
    torch.testing.assert_close(out, h, rtol=1e-5, atol=1e-6)
    assert all(u.training for u in ex.stage.units)


def test_pipeline_and_hybrid_evaluate_the_same_exact_model_alike():
    runs = [dict(model="gcnii", layers=4, epochs=3, exact=True),
            dict(model="gcnii", layers=4, epochs=3, exact=True, mode="hybrid", ways=2, stages=2),
            dict(model="gcnii", layers=4, epochs=3, mode="hybrid", ways=2, stages=2, chunks=3)]
    res = run_ranks("helpers.rankfns:many", 4, "torch", args={"fn": "pipeline_run", "runs": runs}, env=ENV, timeout_s=300)
    pipe, hyb, stale = (res[0][i]["acc"] for i in range(3))
    assert all(r[i]["acc"] == res[0][i]["acc"] for r in res for i in range(3))
    for key in pipe:
        assert abs(pipe[key] - hyb[key]) <= 0.01, (pipe, hyb)
    assert 0.0 < stale["val_acc"] <= 1.0


def test_first_stage_features_one_way_and_hybrid():
    """One way: the first stage's features are the relabelled [N, F] matrix. A hybrid way's
    first stage holds only its part's and its chunks' neighbours' rows and reads the same
    values (the builder relabels no features at all)."""
    cfg = _cfg(mode="pipeline", model="gcn", layers=3, chunks=4)
    g = load_graph_for(cfg)
    ex, plan = executor_for_config(cfg, SingleProcessCommunicator(), g)
    rg = relabel_graph(g, plan)
    feats = torch.from_numpy(np.asarray(rg.features))
    assert torch.equal(ex.stage.features.x, feats)
    for k in range(4):
        assert torch.equal(ex.stage.features.src_rows(k), feats[ex.stage.chunks[k].src_ids()])

    plan = build_plan(g, parts=2, chunks=3, method="random", seed=0)
    rg = relabel_graph(g, plan)
    feats = torch.from_numpy(np.asarray(rg.features))
    chunks = build_chunks(rg.indptr, rg.indices, plan.chunk_ptr, orig=plan.perm, only=range(3, 6))[3:]
    x, rows = first_stage_features(g.features, plan, chunks, whole=False)  # what the builder gives way 1
    read = np.unique(np.concatenate([c.src_ids().numpy() for c in chunks]))  # what its chunks read
    assert np.array_equal(rows, read), "a hybrid way's first stage holds exactly the rows its chunks read"
    model = build_model(ModelConfig("gcn", g.num_features, g.num_classes, layers=3, hidden=16), seed=0)
    masks = {"train": rg.train_mask, "val": rg.val_mask, "test": rg.test_mask}
    st = PipelineStage(StageUnits.of(model.units, 0, len(model.units)), chunks, rg.num_nodes, StaleOptions(), seed=0,
                       features=StageFeatures(x, chunks, model.units[0], "cpu", x_rows=rows),
                       targets=StageTargets(rg.labels, masks, 100, False, "cpu"))
    assert st.features.x.shape[0] == rows.size < g.num_nodes
    for k, ch in enumerate(chunks):
        assert torch.equal(st.features.dst_rows(k), feats[ch.lo : ch.hi])
        assert torch.equal(st.features.src_rows(k), feats[ch.src_ids()])
