"""Models: split-invariance (partitions, chunks), PyG == DGL, dropout masks, sparse inputs.

The graph-parallel and pipeline executors rely on exactly these properties: running the
units on any block (a partition with its halo, a chunk of rows) with source rows gathered
from a full-graph run reproduces the full-graph rows, forward and backward.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from gnnpipe import GnnpipeError
from gnnpipe.data.graph import symmetric_csr
from gnnpipe.models import (
    GNN,
    Block,
    ModelConfig,
    ModelConfigError,
    RunCtx,
    accuracy_counts,
    build_model,
    copy_weights,
    loss_fn,
)
from gnnpipe.models import ops

MODELS = ["gcn", "sage", "gat", "gcnii", "resgcn+"]
N, F, C = 60, 12, 4


def random_graph(n=N, m=150, seed=0, isolated=3):
    """Random undirected graph; the last ``isolated`` nodes have no edges."""
    rng = np.random.default_rng(seed)
    k = n - isolated
    s, d = rng.integers(0, k, m), rng.integers(0, k, m)
    return symmetric_csr(s, d, n)


@pytest.fixture(scope="module")
def graph():
    ip, ix = random_graph()
    x = torch.randn(N, F, generator=torch.Generator().manual_seed(1))
    return ip, ix, x


def cfg_for(model, backend="pyg", layers=3, **kw):
    return ModelConfig(model, F, C, layers=layers, hidden=8, heads=2, backend=backend, **kw)


def run_split(model: GNN, blocks, x, ctx):
    """Simulated graph-parallel execution: per unit, every block computes its dst rows
    from src rows gathered from the previous unit's full output (a halo exchange)."""
    h, carry = x, {}
    for u in model.units:
        outs, idx, new_carry = [], [], {}
        for b in blocks:
            hd = h[b.dst_gid]
            hs = h[b.src_gid] if u.aggregates else None
            c = {k: v[b.dst_gid] for k, v in carry.items()}
            o, c = u(hd, c, ctx, b, hs)
            outs.append(o)
            idx.append(b.dst_gid)
            for k, v in c.items():
                new_carry.setdefault(k, []).append(v)
        order = torch.cat(idx)
        inv = torch.empty_like(order)
        inv[order] = torch.arange(order.numel())
        h = torch.cat(outs)[inv]
        carry = {k: torch.cat(v)[inv] for k, v in new_carry.items()}
    return h


def grads(model, x):
    return [p.grad.clone() for p in model.parameters()], x.grad.clone()


def forward_backward(model, fn, x, weights):
    model.zero_grad()
    x = x.detach().clone().requires_grad_(True)
    out = fn(model, x)
    (out * weights).sum().backward()
    return out.detach(), [p.grad.clone() for p in model.parameters()], x.grad.clone()


def partition_blocks(ip, ix, parts):
    return [Block.from_rows(ip, ix, np.sort(p)) for p in parts]


def chunk_blocks(ip, ix, bounds):
    """dst = rows [lo, hi) of the whole graph, src = every node."""
    n = ip.size - 1
    deg = np.diff(ip).astype(np.float32)
    out = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        out.append(Block(ip[lo:hi + 1] - ip[lo], ix[ip[lo]:ip[hi]], n, deg, deg[lo:hi],
                         np.arange(lo, hi), np.arange(n), np.arange(lo, hi)))
    return out


def assert_same(ref, got):
    out0, g0, x0 = ref
    out1, g1, x1 = got
    torch.testing.assert_close(out1, out0, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(x1, x0, rtol=1e-4, atol=1e-5)
    assert len(g0) == len(g1)
    for a, b in zip(g0, g1):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------- (1) + (2) split invariance
@pytest.mark.parametrize("model_name", MODELS)
@pytest.mark.parametrize("nparts", [2, 3])
def test_partition_equivalence(graph, model_name, nparts):
    ip, ix, x = graph
    model = build_model(cfg_for(model_name), seed=3)
    ctx = RunCtx(training=True, epoch=5, seed=11)
    w = torch.randn(N, C, generator=torch.Generator().manual_seed(2))
    full = Block.full(ip, ix)
    ref = forward_backward(model, lambda m, xx: m(full, xx, ctx), x, w)
    perm = np.random.default_rng(nparts).permutation(N)
    blocks = partition_blocks(ip, ix, np.array_split(perm, nparts))
    assert any(b.num_src > b.num_dst for b in blocks), "the split must have halos"
    got = forward_backward(model, lambda m, xx: run_split(m, blocks, xx, ctx), x, w)
    assert_same(ref, got)


@pytest.mark.parametrize("model_name", MODELS)
def test_chunk_equivalence(graph, model_name):
    ip, ix, x = graph
    model = build_model(cfg_for(model_name), seed=4)
    ctx = RunCtx(training=True, epoch=2, seed=7)
    w = torch.randn(N, C, generator=torch.Generator().manual_seed(5))
    full = Block.full(ip, ix)
    ref = forward_backward(model, lambda m, xx: m(full, xx, ctx), x, w)
    blocks = chunk_blocks(ip, ix, [0, 17, 18, 45, N])
    got = forward_backward(model, lambda m, xx: run_split(m, blocks, xx, ctx), x, w)
    assert_same(ref, got)


@pytest.mark.dgl
def test_dgl_partition_equivalence(graph):
    ip, ix, x = graph
    for name in ("gcn", "sage", "gcnii"):
        model = build_model(cfg_for(name, backend="dgl"), seed=3)
        ctx = RunCtx(training=True, epoch=1, seed=1)
        w = torch.randn(N, C, generator=torch.Generator().manual_seed(2))
        ref = forward_backward(model, lambda m, xx: m(Block.full(ip, ix), xx, ctx), x, w)
        blocks = partition_blocks(ip, ix, np.array_split(np.arange(N)[::-1], 2))
        got = forward_backward(model, lambda m, xx: run_split(m, blocks, xx, ctx), x, w)
        assert_same(ref, got)


# ---------------------------------------------------------------- fast path == library path
def test_fast_paths_match_pyg_own_propagation(graph):
    """Our CSR aggregation equals each PyG layer's own forward on the whole graph, where
    local degrees are the global ones (an independent reference for the maths)."""
    from torch_geometric.nn import GATConv, GCN2Conv, GCNConv, SAGEConv

    ip, ix, x = graph
    b = Block.full(ip, ix)
    ei = torch.stack([torch.as_tensor(ix), b.rows()])
    m = build_model(cfg_for("gcn", layers=1), 0).units[0].conv
    ref = GCNConv(F, C, add_self_loops=True, normalize=True)
    ref.load_state_dict(m.conv.state_dict())
    torch.testing.assert_close(m(b, x), ref(x, ei), rtol=1e-5, atol=1e-6)

    m = build_model(cfg_for("sage", layers=1), 0).units[0].conv
    ref = SAGEConv(F, C)
    ref.load_state_dict(m.conv.state_dict())
    torch.testing.assert_close(m(b, x), ref(x, ei), rtol=1e-5, atol=1e-6)

    m = build_model(cfg_for("gat", layers=2), 0).units[0].conv
    ref = GATConv(F, 4, heads=2, add_self_loops=True)
    ref.load_state_dict(m.conv.state_dict())
    torch.testing.assert_close(m(b, x), ref(x, ei), rtol=1e-5, atol=1e-6)

    m = build_model(ModelConfig("gcnii", F, C, layers=2, hidden=F), 0).units[2].conv
    ref = GCN2Conv(F, alpha=0.1, theta=0.5, layer=2, shared_weights=True, normalize=True)
    ref.load_state_dict(m.conv.state_dict())
    h0 = torch.randn(N, F)
    torch.testing.assert_close(m(b, x, h0), ref(x, h0, ei), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("model_name", ["gcn", "sage"])
def test_aggregate_first_matches_pyg_own_propagation(graph, model_name):
    """in_dim <= out_dim takes the aggregate-first path (dense input); it computes the same
    layer, forward and backward, as PyG's own transform-then-propagate."""
    from torch_geometric.nn import GCNConv, SAGEConv

    ip, ix, x = graph
    b = Block.full(ip, ix)
    ei = torch.stack([torch.as_tensor(ix), b.rows()])
    m = build_model(ModelConfig(model_name, F, 2 * F, layers=1, hidden=8), 0).units[0].conv
    ref = GCNConv(F, 2 * F, add_self_loops=True, normalize=True) if model_name == "gcn" else SAGEConv(F, 2 * F)
    ref.load_state_dict(m.conv.state_dict())
    w = torch.randn(N, 2 * F, generator=torch.Generator().manual_seed(2))
    outs = []
    for fn in (lambda xx: m(b, xx), lambda xx: ref(xx, ei)):
        xx = x.clone().requires_grad_(True)
        out = fn(xx)
        (out * w).sum().backward()
        outs.append((out.detach(), xx.grad))
    torch.testing.assert_close(outs[0][0], outs[1][0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(outs[0][1], outs[1][1], rtol=1e-5, atol=1e-6)


def test_csr_mm_backward_matches_dense(graph):
    ip, ix, _ = graph
    b = Block.from_rows(ip, ix, np.arange(0, N, 3))  # non-square: needs the true transpose
    a, at = b.gcn_adj()
    x = torch.randn(b.num_src, 5, requires_grad=True)
    g = torch.randn(b.num_dst, 5)
    ops.csr_mm(a, at, x).backward(g)
    xd = x.detach().clone().requires_grad_(True)
    (a.to_dense() @ xd).backward(g)
    torch.testing.assert_close(x.grad, xd.grad)


# ---------------------------------------------------------------- (3) PyG vs DGL
def _grad_model(m):
    gm = copy.deepcopy(m)
    for p, src in zip(gm.parameters(), m.parameters()):
        p.data = src.grad.clone()
    return gm


@pytest.mark.dgl
@pytest.mark.parametrize("model_name", MODELS)
def test_pyg_vs_dgl(graph, model_name):
    ip, ix, x = graph
    mp = build_model(cfg_for(model_name, "pyg"), seed=9)
    md = build_model(cfg_for(model_name, "dgl"), seed=9)
    copy_weights(md, mp)
    ctx = RunCtx(training=True, epoch=3, seed=4)
    w = torch.randn(N, C, generator=torch.Generator().manual_seed(6))
    b = Block.full(ip, ix)
    out_p, _, xg_p = forward_backward(mp, lambda m, xx: m(b, xx, ctx), x, w)
    out_d, _, xg_d = forward_backward(md, lambda m, xx: m(b, xx, ctx), x, w)
    torch.testing.assert_close(out_d, out_p, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(xg_d, xg_p, rtol=1e-4, atol=1e-5)
    # Compare parameter gradients in the backend-neutral layout: put grads in place of the
    # weights and export them (export is linear: transposes, reshapes, head means).
    gp, gd = _grad_model(mp), _grad_model(md)
    for up, ud in zip(gp.units, gd.units):
        for cp, cd in zip(up.convs(), ud.convs()):
            ep, ed = cp.export(), cd.export()
            assert ep.keys() == ed.keys()
            for k in ep:
                torch.testing.assert_close(ed[k].reshape(ep[k].shape), ep[k], rtol=1e-4, atol=1e-5)
        for (n1, p1), (n2, p2) in zip(up.named_parameters(), ud.named_parameters()):
            if not n1.startswith("conv."):
                assert n1 == n2
                torch.testing.assert_close(p2, p1, rtol=1e-4, atol=1e-5)


def test_copy_weights_refuses_other_config():
    a = build_model(cfg_for("gcn"), 0)
    b = build_model(cfg_for("gcn", layers=2), 0)
    with pytest.raises(ModelConfigError, match="layers"):
        copy_weights(a, b)


def test_same_seed_same_weights_and_rng_untouched():
    torch.manual_seed(123)
    before = torch.rand(3)
    torch.manual_seed(123)
    a = build_model(cfg_for("gcnii"), 5)
    after = torch.rand(3)
    b = build_model(cfg_for("gcnii"), 5)
    c = build_model(cfg_for("gcnii"), 6)
    torch.testing.assert_close(before, after)  # building does not consume the global stream
    for pa, pb, pc in zip(a.parameters(), b.parameters(), c.parameters()):
        torch.testing.assert_close(pa, pb)
    assert any(not torch.equal(pa, pc) for pa, pc in zip(a.parameters(), c.parameters()) if pa.numel() > 8)


# ---------------------------------------------------------------- (4) dropout masks
def _py_lowbias32(x):
    x &= 0xFFFFFFFF
    x ^= x >> 16
    x = (x * 0x7FEB352D) & 0xFFFFFFFF
    x ^= x >> 15
    x = (x * 0x846CA68B) & 0xFFFFFFFF
    x ^= x >> 16
    return x


def _py_mix32(x):
    for _ in range(2):
        x ^= x >> 16
        x = (x * 0x45D9F3B) & 0xFFFFFFFF
    return x ^ (x >> 16)


def _py_keep(gid, col, p, seed, epoch, unit):
    kr, kc = ops.stream_keys(seed, epoch, unit)
    r = _py_mix32((_py_mix32((gid & 0xFFFFFFFF) ^ kr) + (gid >> 32)) & 0xFFFFFFFF)
    c = _py_mix32(_py_mix32(col ^ kc))
    return (_py_lowbias32(r ^ c) & 0xFFFFFF) >= round(p * (1 << 24))


def test_dropout_hash_matches_exact_python_arithmetic():
    """The vectorised int32 hash (wrapping multiplies) equals exact mod-2**32 arithmetic."""
    gid = torch.tensor([0, 1, 7, 2**31 - 1, 2**31, 2**32 + 5, 10**12])
    m = ops.keep_mask(gid, 6, 0.5, seed=3, epoch=4, unit=5)
    for i, g in enumerate(gid.tolist()):
        for j in range(6):
            assert bool(m[i, j]) == _py_keep(g, j, 0.5, 3, 4, 5), (g, j)


def test_dropout_masks_by_global_id():
    gid = torch.arange(1000, 3000)
    m = ops.keep_mask(gid, 50, 0.3, seed=1, epoch=2, unit=3)
    perm = torch.randperm(gid.numel(), generator=torch.Generator().manual_seed(0))
    # Same global id, any position or subset: same mask row.
    assert torch.equal(ops.keep_mask(gid[perm], 50, 0.3, 1, 2, 3), m[perm])
    assert torch.equal(ops.keep_mask(gid[:7], 50, 0.3, 1, 2, 3), m[:7])
    # Other epoch, unit or seed: a different mask (agreement ≈ 0.7² + 0.3² = 0.58).
    for other in (ops.keep_mask(gid, 50, 0.3, 1, 3, 3), ops.keep_mask(gid, 50, 0.3, 1, 2, 4),
                  ops.keep_mask(gid, 50, 0.3, 2, 2, 3)):
        agree = (other == m).float().mean().item()
        assert abs(agree - 0.58) < 0.01
    for p in (0.1, 0.5, 0.9):
        rate = ops.keep_mask(gid, 50, p, 1, 2, 3).float().mean().item()
        assert abs(rate - (1 - p)) < 0.005, (p, rate)  # 100k draws: sd 0.0016
    # Columns are not copies of each other and rows are not copies of each other.
    assert not torch.equal(m[:, 0], m[:, 1]) and not torch.equal(m[0], m[1])


def test_keep_mask_in_cache_sized_blocks_equals_row_by_row(monkeypatch):
    """A CPU hashes rows in blocks of about HASH_BLOCK_VALUES values (the cache's size): the
    blocks give every row the mask it gets alone, uneven last block included; so does the
    mask cache, which hashes and packs in such blocks."""
    monkeypatch.setattr(ops, "HASH_BLOCK_VALUES", 64)  # 37 columns: blocks of 1 row; 9 columns: 7 rows
    gid = torch.randperm(5000, generator=torch.Generator().manual_seed(1))[:45]
    for cols in (37, 9, 1):
        m = ops.keep_mask(gid, cols, 0.4, 1, 2, 3)
        rows = torch.cat([ops.keep_mask(gid[i : i + 1], cols, 0.4, 1, 2, 3) for i in range(gid.numel())])
        assert m.shape == (45, cols) and torch.equal(m, rows), cols
        for i in (0, 6, 7, 44):  # against the exact arithmetic, in the first, a middle and the last block
            assert [bool(v) for v in m[i]] == [_py_keep(int(gid[i]), j, 0.4, 1, 2, 3) for j in range(cols)]
        cache = ops.KeepMaskCache(5000)
        assert torch.equal(cache.get(gid, cols, 0.4, 1, 2, 3), m)


def test_dropout_scales_and_sparse_matches_dense():
    x = torch.rand(40, 30)
    x[x < 0.7] = 0.0
    gid = torch.arange(100, 140)
    dd = ops.hashed_dropout(x, gid, 0.5, 1, 2, 3)
    ds = ops.hashed_dropout(x.to_sparse_csr(), gid, 0.5, 1, 2, 3)
    assert ds.layout == torch.sparse_csr
    torch.testing.assert_close(ds.to_dense(), dd)
    kept = dd != 0
    torch.testing.assert_close(dd[kept], 2.0 * x[kept])
    assert torch.equal(ops.hashed_dropout(x, gid, 0.0, 1, 2, 3), x)


def test_eval_mode_has_no_dropout(graph):
    ip, ix, x = graph
    m = build_model(cfg_for("gcn"), 0)
    b = Block.full(ip, ix)
    a = m(b, x, RunCtx(False, 0, 0))
    assert torch.equal(a, m(b, x, RunCtx(False, 9, 9)))
    assert not torch.allclose(a, m(b, x, RunCtx(True, 0, 0)))


# ---------------------------------------------------------------- (5) sparse input
@pytest.mark.parametrize("model_name", MODELS)
def test_sparse_input_equals_dense(graph, model_name):
    ip, ix, _ = graph
    g = torch.Generator().manual_seed(8)
    x = (torch.rand(N, F, generator=g) < 0.2).float()
    model = build_model(cfg_for(model_name), seed=2)
    ctx = RunCtx(True, 1, 1)
    w = torch.randn(N, C, generator=g)
    res = []
    for xin in (x, x.to_sparse_csr()):
        for blocks in ([Block.full(ip, ix)], partition_blocks(ip, ix, [np.arange(0, N, 2), np.arange(1, N, 2)])):
            model.zero_grad()
            if len(blocks) == 1:
                out = model(blocks[0], xin, ctx)
            else:
                rows = [xin.to_dense()[b.src_gid] for b in blocks]
                out = run_split_sparse(model, blocks, rows, xin.layout == torch.sparse_csr, ctx)
            (out * w).sum().backward()
            res.append((out.detach(), [p.grad.clone() for p in model.parameters()]))
    for out, gr in res[1:]:
        torch.testing.assert_close(out, res[0][0], rtol=1e-5, atol=1e-5)
        for a, b in zip(gr, res[0][1]):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def run_split_sparse(model, blocks, src_rows, sparse, ctx):
    """Like :func:`run_split` with unit 0's src rows given per block (optionally sparse)."""
    x0 = [r.to_sparse_csr() if sparse else r for r in src_rows]
    u0 = model.units[0]
    outs, carries = [], []
    for b, xs in zip(blocks, x0):
        hd = xs.to_dense()[b.dst_in_src]
        hd = hd.to_sparse_csr() if sparse else hd
        o, c = u0(hd, {}, ctx, b, xs if u0.aggregates else None)
        outs.append(o)
        carries.append(c)
    order = torch.cat([b.dst_gid for b in blocks])
    inv = torch.empty_like(order)
    inv[order] = torch.arange(order.numel())
    h = torch.cat(outs)[inv]
    carry = {k: torch.cat([c[k] for c in carries])[inv] for k in carries[0]}
    rest = GNN(model.cfg, list(model.units[1:]))
    for u in rest.units:
        new = []
        for b in blocks:
            o, _ = u(h[b.dst_gid], {k: v[b.dst_gid] for k, v in carry.items()}, ctx, b,
                     h[b.src_gid] if u.aggregates else None)
            new.append(o)
        h = torch.cat(new)[inv]
    return h


# ---------------------------------------------------------------- (6) training sanity
def test_gcn_trains_on_sbm():
    rng = np.random.default_rng(0)
    n, k = 200, 2
    y = np.repeat(np.arange(k), n // k)
    same = y[:, None] == y[None, :]
    prob = np.where(same, 0.08, 0.01)
    a = np.triu(rng.random((n, n)) < prob, 1)
    s, d = np.nonzero(a)
    ip, ix = symmetric_csr(s, d, n)
    x = torch.tensor(rng.normal(size=(n, 16)) + 0.3 * y[:, None], dtype=torch.float32)
    labels = torch.as_tensor(y)
    train = torch.zeros(n, dtype=torch.bool)
    train[rng.choice(n, 40, replace=False)] = True
    model = build_model(ModelConfig("gcn", 16, k, layers=2, hidden=16), 0)
    opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    b = Block.full(ip, ix)
    for ep in range(60):
        opt.zero_grad()
        loss_fn(model(b, x, RunCtx(True, ep, 0)), labels, train).backward()
        opt.step()
    correct, total = accuracy_counts(model(b, x, RunCtx(False)), labels, ~train)
    assert total == n - 40
    assert correct / total > 0.8  # chance is 0.5; features alone give ~0.6


def test_loss_normalizer_adds_up_over_ranks():
    g = torch.Generator().manual_seed(0)
    logits, labels = torch.randn(30, 5, generator=g), torch.randint(0, 5, (30,), generator=g)
    mask = torch.rand(30, generator=g) < 0.5
    full = loss_fn(logits, labels, mask)
    parts = [torch.arange(0, 12), torch.arange(12, 30)]
    total = sum(loss_fn(logits[p], labels[p], mask[p], normalizer=int(mask.sum())) for p in parts)
    torch.testing.assert_close(total, full)
    torch.testing.assert_close(full, torch.nn.functional.cross_entropy(logits[mask], labels[mask]))
    ml = (torch.rand(30, 5, generator=g) < 0.3).float()
    torch.testing.assert_close(
        loss_fn(logits, ml, mask, multilabel=True),
        torch.nn.functional.binary_cross_entropy_with_logits(logits[mask], ml[mask]))
    assert accuracy_counts(logits, ml, mask, multilabel=True)[1] == int(mask.sum()) * 5


# ---------------------------------------------------------------- (7) bad config
@pytest.mark.parametrize("field,value,match", [
    ("model", "gin", "model"), ("backend", "jax", "backend"), ("layers", 0, "layers"),
    ("hidden", -3, "hidden"), ("dropout", 1.0, "dropout"), ("alpha", 1.5, "alpha"),
    ("lam", 0.0, "lam"), ("in_dim", 2.5, "in_dim"),
])
def test_bad_config(field, value, match):
    kw = dict(model="gcn", in_dim=4, num_classes=2)
    kw[field] = value
    with pytest.raises(ModelConfigError, match=match) as e:
        ModelConfig(**kw)
    assert isinstance(e.value, GnnpipeError) and repr(value) in str(e.value)


def test_gat_heads_must_divide_hidden():
    with pytest.raises(ModelConfigError, match="divisible"):
        ModelConfig("gat", 4, 2, hidden=10, heads=4)


def test_block_validation():
    with pytest.raises(GnnpipeError, match="indices"):
        Block([0, 1], [5], 3, np.ones(3), np.ones(1), [0], [0, 1, 2], [0])
    with pytest.raises(GnnpipeError, match="src_gid"):
        Block([0, 1], [0], 3, np.ones(3), np.ones(1), [0], [0, 1], [0])


def test_keep_mask_cache_gives_keep_masks_masks_hashed_once_per_node():
    n = 700
    cache = ops.KeepMaskCache(n)
    gid = torch.randperm(n)[:250]
    for width in (1, 7, 8, 9, 100):
        for p in (0.1, 0.5):
            assert torch.equal(cache.get(gid, width, p, 3, 4, 5), ops.keep_mask(gid, width, p, 3, 4, 5)), (width, p)
    assert not torch.equal(cache.get(gid, 100, 0.5, 3, 5, 5), cache.get(gid, 100, 0.5, 3, 4, 5))  # epoch is keyed
    assert cache.nbytes == n * sum(-(-w // 8) * 2 for w in (1, 7, 8, 9, 100)) + n * 13
    x = torch.randn(250, 100, requires_grad=True)
    g = torch.randn(250, 100)
    plain = ops.hashed_dropout(x, gid, 0.5, 3, 4, 5)
    (gx_plain,) = torch.autograd.grad(plain, x, g)
    cached = ops.hashed_dropout(x, gid, 0.5, 3, 4, 5, masks=cache)
    (gx_cached,) = torch.autograd.grad(cached, x, g)
    assert torch.equal(plain, cached) and torch.equal(gx_plain, gx_cached)
    cache.clear()
    assert cache.nbytes == 0
    small = ops.KeepMaskCache(n, max_bytes=n * 13 - 1)  # one 100-wide stream does not fit
    assert small.get(gid, 100, 0.5, 3, 4, 5) is None and small.nbytes == 0
    assert torch.equal(ops.hashed_dropout(x, gid, 0.5, 3, 4, 5, masks=small), plain)


def test_block_from_edge_index_equals_symmetric_csr_and_names_bad_ids():
    from gnnpipe.data.graph import symmetric_csr
    from gnnpipe.models.block import BlockError

    rng = np.random.default_rng(3)
    n = 50
    ei = rng.integers(0, n, size=(2, 400))
    ei[:, :20] = ei[0, :20]  # self-loops
    ei = np.concatenate([ei, ei[:, :30], ei[::-1, 30:60]], axis=1)  # duplicates, both directions
    b = Block.from_edge_index(torch.as_tensor(ei), n)
    indptr, indices = symmetric_csr(ei[0], ei[1], n)
    assert torch.equal(b.indptr, torch.as_tensor(indptr)) and torch.equal(b.indices, torch.as_tensor(indices))
    assert b.symmetric
    with pytest.raises(BlockError, match=r"edge_index: node id 50 outside \[0, 50\)"):
        Block.from_edge_index(torch.tensor([[0, 50], [1, 2]]), n)
    with pytest.raises(BlockError, match=r"expected shape \[2, E\], got \[3, 2\]"):
        Block.from_edge_index(torch.zeros(3, 2, dtype=torch.long), n)
