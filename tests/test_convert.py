"""Graph <-> PyG Data and Graph <-> DGL graph: round trips keep the content hash, and every
bad input gives one GnnpipeError line naming the attribute and the fix."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp
import torch

import gnnpipe
from gnnpipe import GnnpipeError, Graph
from gnnpipe.data import sbm

Data = pytest.importorskip("torch_geometric.data").Data
pyg_utils = pytest.importorskip("torch_geometric.utils")


def _tiny(sparse: bool = False, multilabel: bool = False, isolated: int = 0, seed: int = 0) -> Graph:
    """A random 30-node graph, plus ``isolated`` nodes with no edge (the last ids)."""
    rng = np.random.default_rng(seed)
    core = 30
    n = core + isolated
    src, dst = rng.integers(0, core, 80), rng.integers(0, core, 80)
    x = rng.normal(size=(n, 7)).astype(np.float32)
    if sparse:
        x[rng.random(x.shape) < 0.8] = 0
        x = sp.csr_matrix(x)
    y = (rng.random((n, 4)) < 0.4).astype(np.float32) if multilabel else rng.integers(0, 5, n)
    split = rng.integers(0, 3, n)
    return Graph.from_edges(src, dst, n, x, y, split == 0, split == 1, split == 2, name="tiny")


def _same(a: Graph, b: Graph) -> None:
    assert a.content_hash == b.content_hash
    assert (a.name, a.num_classes, a.num_nodes, a.sparse_features, a.multilabel) == (
        b.name, b.num_classes, b.num_nodes, b.sparse_features, b.multilabel)


def _data(n: int = 4, **kw) -> Data:
    """A valid 4-node path graph as PyG Data; ``kw`` overrides (None deletes) attributes."""
    ei = torch.tensor([[0, 1, 1, 2, 2, 3], [1, 0, 2, 1, 3, 2]])
    m = torch.tensor([True, False, False, False])
    fields = dict(x=torch.randn(n, 3), edge_index=ei, y=torch.tensor([0, 1, 0, 1]),
                  train_mask=m, val_mask=m.roll(1), test_mask=m.roll(2))
    fields.update(kw)
    return Data(**{k: v for k, v in fields.items() if v is not None})


# ------------------------------------------------------------------ top level
def test_graph_is_exported_lazily_from_the_package_root():
    assert gnnpipe.Graph is Graph and "Graph" in gnnpipe.__all__
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        gnnpipe.nope  # noqa: B018
    # and `import gnnpipe` alone loads neither the graph module nor numpy
    code = "import sys, gnnpipe; assert not {'numpy', 'gnnpipe.data.graph'} & set(sys.modules)"
    subprocess.run([sys.executable, "-c", code], check=True)


# ------------------------------------------------------------------ PyG round trips
@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize("multilabel", [False, True], ids=["single", "multi"])
@pytest.mark.parametrize("isolated", [0, 3])
def test_pyg_round_trip_keeps_the_content_hash(sparse, multilabel, isolated):
    g = _tiny(sparse, multilabel, isolated)
    d = g.to_pyg()
    n = g.num_nodes
    assert d.num_nodes == n and d.edge_index.dtype == torch.int64 and d.edge_index.shape == (2, g.num_edges)
    assert d.x.layout == (torch.sparse_csr if sparse else torch.strided) and d.x.shape == (n, 7)
    assert d.y.dtype == (torch.float32 if multilabel else torch.int64)
    assert d.train_mask.dtype == torch.bool and d.train_mask.shape == (n,)
    assert pyg_utils.is_undirected(d.edge_index, num_nodes=n)
    back = Graph.from_pyg(d)
    _same(g, back)
    assert back.sparse_features == sparse


def test_pyg_round_trip_of_a_synthetic_graph():
    g = sbm(200, num_classes=3, avg_degree=4, num_features=5, seed=1, name="sbm200")
    _same(g, Graph.from_pyg(g.to_pyg()))


def test_a_real_pyg_data_object_built_with_torch_geometric():
    # what a PyG user has in a notebook: one direction of each edge, made undirected by PyG
    ei = pyg_utils.to_undirected(torch.tensor([[0, 1, 2, 3, 0], [1, 2, 3, 4, 4]]))
    data = Data(x=torch.randn(6, 3, dtype=torch.float64), edge_index=ei, y=torch.tensor([0, 1, 2, 0, 1, 2]),
                num_nodes=6)
    data = __import__("torch_geometric.transforms", fromlist=["x"]).RandomNodeSplit(num_val=1, num_test=1)(data)
    g = Graph.from_pyg(data, name="ring")
    assert (g.name, g.num_nodes, g.num_edges, g.num_classes) == ("ring", 6, 10, 3)
    assert g.degrees()[5] == 0  # node 5 is isolated, kept by num_nodes
    g.check_symmetric()
    np.testing.assert_array_equal(g.features, data.x.float().numpy())
    np.testing.assert_array_equal(g.test_mask, data.test_mask.numpy())
    assert g.features.dtype == np.float32 and g.labels.dtype == np.int64


def test_pyg_sparse_coo_features_stay_sparse():
    x = torch.eye(4).to_sparse()  # COO
    g = Graph.from_pyg(_data(x=x))
    assert g.sparse_features and g.features.nnz == 4
    np.testing.assert_array_equal(g.features.toarray(), np.eye(4, dtype=np.float32))


def test_pyg_ogb_style_label_column_and_uint8_masks():
    m = torch.tensor([1, 0, 0, 0], dtype=torch.uint8)
    g = Graph.from_pyg(_data(y=torch.tensor([[0], [1], [0], [2]]), train_mask=m))
    assert g.labels.tolist() == [0, 1, 0, 2] and g.train_mask.tolist() == [True, False, False, False]


def test_pyg_symmetrize_and_clean():
    ei = torch.tensor([[0, 1, 2, 2, 1], [1, 2, 3, 2, 2]])  # directed, a self-loop, a duplicate
    g = Graph.from_pyg(_data(edge_index=ei), symmetrize=True)
    g.check_symmetric()
    assert g.num_edges == 6
    sym = pyg_utils.to_undirected(torch.tensor([[0, 1, 2], [1, 2, 3]]))
    dirty = torch.cat([sym, torch.tensor([[3, 0], [3, 1]])], 1)  # plus a self-loop and a duplicate
    g = Graph.from_pyg(_data(edge_index=dirty), clean=True)
    assert g.num_edges == 6
    with pytest.raises(GnnpipeError, match=r"data\.edge_index: is directed"):
        Graph.from_pyg(_data(edge_index=ei), clean=True)  # clean does not add reverse edges


def test_pyg_two_dimensional_masks_need_a_split():
    masks = {m: torch.rand(4, 10) < 0.5 for m in ("train_mask", "val_mask", "test_mask")}
    with pytest.raises(GnnpipeError, match=r"data\.train_mask: has shape \[4, 10\].*split=K"):
        Graph.from_pyg(_data(**masks))
    g = Graph.from_pyg(_data(**masks), split=3)
    np.testing.assert_array_equal(g.val_mask, masks["val_mask"][:, 3].numpy())
    assert g.meta["split"] == 3
    with pytest.raises(GnnpipeError, match=r"split=10: out of range"):
        Graph.from_pyg(_data(**masks), split=10)
    with pytest.raises(GnnpipeError, match=r"split=1: data\.train_mask is 1-D"):
        Graph.from_pyg(_data(), split=1)


# ------------------------------------------------------------------ PyG errors
@pytest.mark.parametrize(
    "kw, flags, pattern",
    [
        (dict(edge_index=torch.tensor([[0, 1, 2], [1, 2, 3]])), {},
         r"data\.edge_index: is directed \(3 of 3 edges have no reverse edge\).*symmetrize=True.*to_undirected"),
        (dict(edge_index=torch.tensor([[0, 1, 2, 2], [1, 0, 2, 2]])), {},
         r"data\.edge_index: has 2 self-loops; .*clean=True.*remove_self_loops"),
        (dict(edge_index=torch.tensor([[0, 1, 0, 1], [1, 0, 1, 0]])), {},
         r"data\.edge_index: has 2 duplicate edges.*clean=True.*coalesce"),
        (dict(edge_index=torch.tensor([[0, 9], [9, 0]])), {}, r"data\.edge_index: node id 9 out of range \[0, 4\)"),
        (dict(edge_index=torch.tensor([0, 1])), {}, r"data\.edge_index: expected shape \[2, E\]"),
        (dict(edge_index=torch.tensor([[0.0, 1.0], [1.0, 0.0]])), {}, r"data\.edge_index: expected integer node ids"),
        (dict(x=None, num_nodes=4), {}, r"data\.x: missing.*OneHotDegree"),
        (dict(y=None), {}, r"data\.y: missing.*class ids"),
        (dict(train_mask=None, test_mask=None), {},
         r"missing data\.train_mask, data\.test_mask: .*data\.train_mask = .*RandomNodeSplit"),
        (dict(x=torch.ones(4, 3, dtype=torch.long)), {}, r"data\.x: expected floating features, got int64.*\.float\(\)"),
        (dict(x=torch.ones(4)), {}, r"data\.x: expected shape \[N, F\] = \[4, F\], got \[4\]"),
        (dict(x=torch.ones(5, 2), num_nodes=4), {}, r"data\.x: has 5 rows but the graph has 4 nodes"),
        (dict(y=torch.tensor([0.5, 1.0, 0.0, 1.0])), {}, r"data\.y: expected integer class ids, got float32"),
        (dict(y=torch.tensor([0, -1, 0, 1])), {}, r"data\.y: 1 nodes have a negative class id"),
        (dict(y=torch.full((4, 2), 0.5)), {}, r"data\.y: a 2-D label matrix must hold 0/1"),
        (dict(y=torch.tensor([0, 1])), {}, r"data\.y: expected class ids \[N\] .* got shape \[2\]"),
        (dict(val_mask=torch.tensor([0, 2])), {}, r"data\.val_mask: expected a bool mask of shape \[4\].*index_to_mask"),
        (dict(val_mask=torch.tensor([0, 2, 1, 3])), {}, r"data\.val_mask: expected a bool mask, got int64.*index_to_mask"),
    ],
    ids=["directed", "self-loops", "duplicates", "out-of-range", "edge-shape", "edge-dtype", "no-x", "no-y",
         "no-masks", "int-x", "1d-x", "x-rows", "float-y", "negative-y", "y-not-01", "y-length",
         "index-mask", "int-mask"],
)
def test_pyg_errors_name_the_attribute_and_the_fix(kw, flags, pattern):
    with pytest.raises(GnnpipeError, match=pattern) as e:
        Graph.from_pyg(_data(**kw), **flags)
    assert "\n" not in str(e.value)


def test_pyg_adj_t_and_heterodata_are_refused():
    d = _data()
    d.adj_t = object()
    del d.edge_index
    with pytest.raises(GnnpipeError, match=r"data\.edge_index: missing.*adj_t.*not supported"):
        Graph.from_pyg(d)
    from torch_geometric.data import HeteroData

    h = HeteroData()
    h["paper"].x = torch.randn(3, 2)
    h["paper", "cites", "paper"].edge_index = torch.tensor([[0], [1]])
    with pytest.raises(GnnpipeError, match=r"data: is a HeteroData.*'paper'.*to_homogeneous"):
        Graph.from_pyg(h)


# ------------------------------------------------------------------ DGL
@pytest.fixture(scope="module")
def dgl():
    # dgl 1.1.3 with torch 2.13 imports (dgl.sparse does not; the converters do not use it).
    # Tests using it carry the dgl marker: conftest skips them where DGL is not installed.
    import dgl

    return dgl


@pytest.mark.dgl
@pytest.mark.parametrize(
    "sparse, multilabel, isolated", [(False, False, 0), (True, False, 3), (False, True, 2), (True, True, 0)]
)
def test_dgl_round_trip_keeps_the_content_hash(dgl, sparse, multilabel, isolated):
    g = _tiny(sparse, multilabel, isolated)
    h = g.to_dgl()
    assert h.num_nodes() == g.num_nodes and h.num_edges() == g.num_edges and not h.is_multigraph
    assert set(h.ndata) == {"feat", "label", "train_mask", "val_mask", "test_mask"}
    assert h.ndata["feat"].layout == (torch.sparse_csr if sparse else torch.strided)
    back = Graph.from_dgl(h, name="tiny")
    _same(g, back)


@pytest.mark.dgl
def test_dgl_graph_built_by_hand(dgl):
    src, dst = torch.tensor([0, 1, 2]), torch.tensor([1, 2, 0])
    h = dgl.graph((src, dst), num_nodes=4)  # directed triangle plus an isolated node
    h.ndata["feat"] = torch.randn(4, 2)
    h.ndata["label"] = torch.tensor([0, 1, 1, 0])
    for i, m in enumerate(("train_mask", "val_mask", "test_mask")):
        h.ndata[m] = torch.arange(4) % 3 == i
    with pytest.raises(GnnpipeError, match=r"^g: is directed \(3 of 3 edges.*dgl\.to_bidirected"):
        Graph.from_dgl(h)
    g = Graph.from_dgl(h, symmetrize=True)
    assert (g.num_nodes, g.num_edges, g.degrees().tolist()) == (4, 6, [2, 2, 2, 0])
    g2 = Graph.from_dgl(dgl.to_bidirected(h, copy_ndata=True))
    assert g2.content_hash == g.content_hash


@pytest.mark.dgl
def test_dgl_errors_name_the_attribute_and_the_fix(dgl):
    base = _tiny().to_dgl()
    # a multi-graph: one edge added twice more
    multi = dgl.add_edges(base, torch.tensor([0, 0]), torch.tensor([int(base.successors(0)[0])] * 2))
    with pytest.raises(GnnpipeError, match=r"^g: has 2 duplicate edges.*clean=True.*dgl\.to_simple\(g\) \(g is a multi-graph\)"):
        Graph.from_dgl(multi)
    assert Graph.from_dgl(multi, clean=True).content_hash == _tiny().content_hash
    loops = dgl.add_self_loop(base)
    with pytest.raises(GnnpipeError, match=r"^g: has 30 self-loops.*dgl\.remove_self_loop"):
        Graph.from_dgl(loops)
    for key, pattern in (("feat", r"g\.ndata\['feat'\]: missing"), ("label", r"g\.ndata\['label'\]: missing"),
                         ("val_mask", r"missing g\.ndata\['val_mask'\]: .*g\.ndata\['train_mask'\] = ")):
        h = _tiny().to_dgl()
        del h.ndata[key]
        with pytest.raises(GnnpipeError, match=pattern):
            Graph.from_dgl(h)
    h = _tiny().to_dgl()
    h.ndata["train_mask"] = torch.zeros(30, 10, dtype=torch.bool)
    with pytest.raises(GnnpipeError, match=r"g\.ndata\['train_mask'\]: has shape \[30, 10\].*split=K"):
        Graph.from_dgl(h)
    h = dgl.heterograph({("user", "follows", "user"): ([0], [1]), ("user", "buys", "item"): ([0], [0])})
    with pytest.raises(GnnpipeError, match=r"^g: is a heterogeneous DGL graph.*dgl\.to_homogeneous"):
        Graph.from_dgl(h)
