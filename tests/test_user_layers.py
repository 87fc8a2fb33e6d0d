"""The user's own layers (fit(layers=[...])): every executor equals a plain PyG / DGL loop.

The reference is written here the way a user writes it: the same modules (deep copies of
the same initial weights), Adam, dropout off, the mean cross-entropy over the training
nodes. Multi-rank cases run several fits over one launch (the ranks import torch and PyG
once): the PyG chain in graph, pipeline and hybrid mode on 2 and 4 ranks, on Gloo and MPI.
"""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn
from torch_geometric.nn import GCN2Conv, GCNConv, GraphConv

import gnnpipe
from gnnpipe.data import synthetic
from gnnpipe.models.user import UserChain, UserLayerUnit, Layer
from gnnpipe.parallel.pipeline.stage import carry_keys_after

HERE = Path(__file__).resolve()
REPO = HERE.parents[1]
EPOCHS = 4
OPTS = dict(epochs=EPOCHS, dropout=0.0, exact=True, eval_every=EPOCHS, seed=3, lr=0.01)
F, C, D = 8, 4, 16


def small_graph():
    return synthetic.sbm(num_nodes=300, num_classes=C, avg_degree=6, num_features=F, seed=1)


def graphconv_chain():
    torch.manual_seed(0)
    return [GraphConv(F, D), GraphConv(D, D), GraphConv(D, D), GraphConv(D, C)]


def gcnii_chain():
    """GCNII through the carry protocol: the input Linear writes h0, each GCN2Conv reads it."""
    torch.manual_seed(1)
    return [Layer(nn.Linear(F, D), writes="h0")] + [
        Layer(GCN2Conv(D, alpha=0.1, theta=0.5, layer=l, normalize=False), reads=("h0",)) for l in (1, 2, 3)
    ] + [nn.Linear(D, C)]


def dgl_chain():
    import dgl.nn as dglnn

    torch.manual_seed(2)
    return [dglnn.GraphConv(F, D, norm="right", allow_zero_in_degree=True),
            dglnn.SAGEConv(D, D, "mean"), dglnn.GraphConv(D, C, norm="right", allow_zero_in_degree=True)]


def _modules(layers):
    return [it.module if isinstance(it, Layer) else it for it in layers]


def plain_loop(layers, kind="pyg"):
    """Per-epoch losses of the chain trained as a user would, without gnnpipe."""
    data = small_graph().to_pyg()
    mods = nn.ModuleList(copy.deepcopy(_modules(layers)))
    specs = [it if isinstance(it, Layer) else Layer(it) for it in layers]
    if kind == "dgl":
        import dgl

        g = dgl.graph((data.edge_index[0], data.edge_index[1]), num_nodes=data.num_nodes)
    opt = torch.optim.Adam(mods.parameters(), lr=OPTS["lr"])
    losses = []
    for _ in range(EPOCHS):
        h, carry = data.x, {}
        for i, (m, s) in enumerate(zip(mods, specs)):
            extra = [carry[k] for k in s.reads]
            if s.kind == "rows":
                h = m(h, *extra)
            elif kind == "dgl":
                h = m(g, h, *extra)
            else:
                h = m(h, *extra, data.edge_index)
            if i < len(mods) - 1:
                h = h.relu()
            if s.writes:
                carry[s.writes] = h
        loss = nn.functional.cross_entropy(h[data.train_mask], data.y[data.train_mask])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


CHAINS = {"graphconv": graphconv_chain, "gcnii": gcnii_chain, "dgl": dgl_chain}


def _rank_fits(comm, runs):
    """One rank: every (chain, mode, options) of ``runs`` in turn; per-epoch losses."""
    g = small_graph()
    out = []
    for chain, mode, extra in runs:
        res = gnnpipe.fit(g, comm=comm, layers=CHAINS[chain](), mode=mode, **{**OPTS, **extra})
        out.append([m["loss"] for m in res.metrics])
    return out


def _check(runs, got):
    """Each run's losses against the plain loop; a run with dropout (hashed, keyed by node id)
    against gnnpipe in one process, whose masks any split of the graph must reproduce."""
    refs = {}
    for (chain, mode, extra), losses in zip(runs, got):
        if "dropout" in extra:
            one = gnnpipe.fit(small_graph(), layers=CHAINS[chain](), mode="graph", **{**OPTS, **extra})
            want = [m["loss"] for m in one.metrics]
            assert want != plain_loop(CHAINS[chain]())  # the dropout did drop
        else:
            if chain not in refs:
                refs[chain] = plain_loop(CHAINS[chain](), "dgl" if chain == "dgl" else "pyg")
            want = refs[chain]
        np.testing.assert_allclose(losses, want, rtol=1e-5, err_msg=f"{chain} {mode} {extra}")


# hybrid needs ways x stages with both > 1 (2 ways of one stage are graph parallelism)
RUNS = {
    2: [("graphconv", "graph", {}), ("graphconv", "pipeline", {}), ("gcnii", "pipeline", {}),
        ("gcnii", "graph", {})],
    4: [("graphconv", "graph", {}), ("graphconv", "pipeline", {}), ("graphconv", "hybrid", {"ways": 2}),
        ("gcnii", "hybrid", {"ways": 2}), ("gcnii", "pipeline", {"dropout": 0.3})],
}


@pytest.mark.parametrize("world", [2, 4])
def test_user_chain_equals_plain_pyg_loop_on_gloo(world):
    got = gnnpipe.launch(f"{HERE}:_rank_fits", world, "torch", args={"runs": RUNS[world]}, timeout_s=300)
    _check(RUNS[world], got)


@pytest.mark.mpi
@pytest.mark.parametrize("world", [2, 4])
def test_user_chain_equals_plain_pyg_loop_on_mpi(world):
    runs = RUNS[world][:3]  # graph, pipeline and (on 4 ranks) hybrid
    got = gnnpipe.launch(f"{HERE}:_rank_fits", world, "mpi", args={"runs": runs}, timeout_s=300)
    _check(runs, got)


@pytest.mark.dgl
def test_dgl_chain_equals_plain_dgl_loop_in_pipeline_and_graph_mode():
    runs = [("dgl", "pipeline", {}), ("dgl", "graph", {})]
    got = gnnpipe.launch(f"{HERE}:_rank_fits", 2, "torch", args={"runs": runs}, timeout_s=300)
    _check(runs, got)


def test_result_model_loads_into_the_plain_chain_and_equals_predict():
    g = small_graph()
    layers = gcnii_chain()
    before = {k: v.clone() for k, v in nn.ModuleList(_modules(layers)).state_dict().items()}
    res = gnnpipe.fit(g, layers=layers, mode="pipeline", **{**OPTS, "dropout": 0.3})
    # the user's modules are not trained in place
    for k, v in nn.ModuleList(_modules(layers)).state_dict().items():
        assert torch.equal(v, before[k]), k
    plain = nn.ModuleList(copy.deepcopy(_modules(layers)))
    plain.load_state_dict(res.model.state_dict())
    data = g.to_pyg()
    with torch.no_grad():
        h0 = h = plain[0](data.x).relu()
        for conv in plain[1:4]:
            h = conv(h, h0, data.edge_index).relu()
        want = plain[4](h)
        res.model.eval()
        torch.testing.assert_close(res.model(data.x, data.edge_index), want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(res.predict(), want, rtol=1e-5, atol=1e-5)
    acc = float((want.argmax(1)[data.test_mask] == data.y[data.test_mask]).float().mean())
    assert acc == pytest.approx(res.metrics[-1]["test_acc"])


def test_non_local_layers_are_refused_in_one_line():
    g = small_graph()
    with pytest.raises(gnnpipe.GnnpipeError, match=r"layers\[1\] \(GCNConv\).*normalize=False") as e:
        gnnpipe.fit(g, layers=[GraphConv(F, D), GCNConv(D, C)], epochs=1)
    assert "\n" not in str(e.value)
    with pytest.raises(gnnpipe.GnnpipeError, match=r"layers\[1\] \(BatchNorm1d\).*LayerNorm"):
        gnnpipe.fit(g, layers=[nn.Linear(F, D), nn.BatchNorm1d(D), GraphConv(D, C)], epochs=1)
    with pytest.raises(gnnpipe.GnnpipeError, match=r"reads \['h0'\], which no earlier layer writes"):
        gnnpipe.fit(g, layers=[Layer(GCN2Conv(F, 0.1, normalize=False), reads="h0"), nn.Linear(F, C)], epochs=1)
    with pytest.raises(gnnpipe.GnnpipeError, match=r"outputs 16 columns; the graph has 4 classes"):
        gnnpipe.fit(g, layers=[GraphConv(F, D)], epochs=1)
    with pytest.raises(gnnpipe.GnnpipeError, match="model= describe a built-in model"):
        gnnpipe.fit(g, layers=graphconv_chain(), model="gcn", epochs=1)
    with pytest.raises(gnnpipe.GnnpipeError, match="act= applies to your own layers"):
        gnnpipe.fit(g, act="elu", epochs=1)


@pytest.mark.dgl
def test_a_non_local_dgl_layer_is_refused_in_one_line():
    import dgl.nn as dglnn

    with pytest.raises(gnnpipe.GnnpipeError, match=r"layers\[0\] \(GraphConv\).*norm='right'"):
        gnnpipe.fit(small_graph(), layers=[dglnn.GraphConv(F, C)], epochs=1)  # norm='both' by default


class Residual(nn.Module):
    """A row-wise item that reads a carried tensor: ``lin(x) + h0``."""

    def __init__(self, fin, fout):
        super().__init__()
        self.lin = nn.Linear(fin, fout)

    def forward(self, x, h0):
        return self.lin(x) + h0[:, : self.lin.out_features]


def test_a_carried_tensor_travels_only_where_it_is_read_before_written():
    ch = UserChain([Layer(nn.Linear(F, D), writes="h0"), Layer(Residual(D, D), reads="h0"),
                    Layer(nn.Linear(D, D), writes="h0"), Layer(Residual(D, C), reads="h0")])
    ch.prepare(F, C)
    units = list(ch.to_gnn(ch.model_config(False, 0.0)).units)
    assert all(isinstance(u, UserLayerUnit) and not u.aggregates for u in units)
    assert [carry_keys_after(units, s) for s in (1, 2, 3)] == [("h0",), (), ("h0",)]


@pytest.mark.mpi
def test_example_runs_in_one_process_and_under_mpirun():
    ex = REPO / "examples" / "pyg_custom_layers.py"
    venv = Path(sys.executable).parent
    for cmd in ([sys.executable, str(ex)], [str(venv / "mpirun"), "-np", "2", sys.executable, str(ex)]):
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO)
        assert p.returncode == 0, p.stderr[-3000:]
        assert "PASS" in p.stdout and "FAIL" not in p.stdout, p.stdout


#: The zoo's first 7 layers are PyG's, the last 3 DGL's (the optional extra).
N_PYG_ZOO, N_DGL_ZOO = 7, 3


def _layer_zoo(i: int):
    from torch_geometric.nn import GATConv, GATv2Conv, GINConv, SAGEConv, TransformerConv

    torch.manual_seed(5)
    zoo = [lambda: GraphConv(F, D), lambda: GINConv(nn.Linear(F, D)), lambda: SAGEConv(F, D),
           lambda: GATConv(F, 4, heads=2), lambda: GATv2Conv(F, D), lambda: TransformerConv(F, D),
           lambda: GCNConv(F, D, normalize=False)]
    if i >= N_PYG_ZOO:
        import dgl.nn as dglnn

        zoo += [lambda: dglnn.GINConv(nn.Linear(F, D), "mean"), lambda: dglnn.SAGEConv(F, D, "gcn"),
                lambda: dglnn.GraphConv(F, D, norm="right", allow_zero_in_degree=True)]
    # every layer is built (in the same order as before), so layer i's weights do not depend on i
    return [make() for make in zoo]


@pytest.mark.parametrize("i", [*range(N_PYG_ZOO),
                               *(pytest.param(i, marks=pytest.mark.dgl) for i in range(N_PYG_ZOO, N_PYG_ZOO + N_DGL_ZOO))])
def test_a_local_layer_on_sub_graphs_gives_the_whole_graph_rows(i):
    """A unit on parts with their halo (dst first: the bipartite path; dst last: the square
    path) gives exactly the rows of the layer on the whole graph."""
    from gnnpipe.models import RunCtx
    from gnnpipe.models.block import Block

    g = small_graph()
    layer = _layer_zoo(i)[i]
    chain = UserChain([layer], act=None)
    x = torch.as_tensor(np.asarray(g.features))
    full = Block.full(torch.as_tensor(np.asarray(g.indptr)), torch.as_tensor(np.asarray(g.indices)))
    ctx = RunCtx(training=False)
    with torch.no_grad():
        want = chain.run(full, x, ctx)
        chain.prepare(F, want.shape[1])
        unit = chain.to_gnn(chain.model_config(False, 0.0)).units[0]
        unit.module.load_state_dict(chain[0].state_dict())
        parts = np.array_split(np.random.default_rng(0).permutation(g.num_nodes), 3)
        for dst in parts:
            b = Block.from_rows(g.indptr, g.indices, np.sort(dst))
            got, _ = unit(x[b.dst_gid], {}, ctx, block=b, h_src=x[b.src_gid])
            torch.testing.assert_close(got, want[b.dst_gid], rtol=1e-5, atol=1e-5)
            # the same block with the dst rows last: no prefix, so the square call
            nd, ns = b.num_dst, b.num_src
            order = torch.cat([torch.arange(nd, ns), torch.arange(nd)])
            where = torch.empty(ns, dtype=torch.int64)
            where[order] = torch.arange(ns)
            b2 = Block(b.indptr, where[b.indices], ns, b.src_deg[order], b.dst_deg, b.dst_gid,
                       b.src_gid[order], where[:nd])
            assert not b2.dst_is_prefix()
            got2, _ = unit(x[b.dst_gid], {}, ctx, block=b2, h_src=x[b2.src_gid])
            torch.testing.assert_close(got2, want[b.dst_gid], rtol=1e-5, atol=1e-5)


def test_checkpoint_resume_export_and_merge(tmp_path):
    """A resumed user chain continues as the uninterrupted run; the exported file and the
    merged checkpoint load into nn.ModuleList(layers); another chain cannot resume it."""
    from gnnpipe.export import load_model, merge_checkpoint

    g = small_graph()
    opts = dict(mode="pipeline", stages=1, chunks=3, dropout=0.2, eval_every=2, seed=3)  # stale: history too
    whole = gnnpipe.fit(g, layers=graphconv_chain(), epochs=6, **opts)
    run = tmp_path / "run"
    first = gnnpipe.fit(g, layers=graphconv_chain(), epochs=4, out=run, checkpoint_every=2,
                        export=tmp_path / "m.pt", **opts)
    exported = torch.load(tmp_path / "m.pt", weights_only=True)
    merged, mc, _ = merge_checkpoint(run)
    assert mc["model"] == "user" and exported["state_dict"].keys() == merged.keys()
    for k, v in first.model.state_dict().items():
        assert torch.equal(exported["state_dict"][k], v) and torch.equal(merged[k], v), k
    nn.ModuleList(graphconv_chain()).load_state_dict(merged)
    with pytest.raises(gnnpipe.GnnpipeError, match="chain of your own layers"):
        load_model(tmp_path / "m.pt")
    resumed = gnnpipe.fit(g, layers=graphconv_chain(), epochs=6, resume=run, out=tmp_path / "r", **opts)
    np.testing.assert_allclose([m["loss"] for m in resumed.metrics], [m["loss"] for m in whole.metrics], rtol=1e-6)
    with pytest.raises(gnnpipe.GnnpipeError, match="user_layers"):
        gnnpipe.fit(g, layers=graphconv_chain()[:3] + [nn.Linear(D, C)], epochs=6, resume=run,
                    out=tmp_path / "r2", **opts)
