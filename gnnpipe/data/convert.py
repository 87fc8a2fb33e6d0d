"""Conversion between :class:`~gnnpipe.data.graph.Graph` and PyG ``Data`` / DGL graphs.

Users call :meth:`Graph.from_pyg`, :meth:`Graph.to_pyg`, :meth:`Graph.from_dgl` and
:meth:`Graph.to_dgl`, which delegate here. Every problem with the input raises one
:class:`~gnnpipe.GnnpipeError` line that names the attribute (``data.train_mask``,
``g.ndata["feat"]``) and says how to fix it.

What a Graph needs from the input, and where it is read:

================  =========================  ===========================================
                  PyG ``Data``               DGL graph
================  =========================  ===========================================
edges             ``edge_index`` [2, E]      ``g.edges()``
features          ``x`` [N, F]               ``g.ndata["feat"]``
labels            ``y`` [N] or [N, C]        ``g.ndata["label"]``
masks             ``train_mask`` ...         ``g.ndata["train_mask"]`` ...
================  =========================  ===========================================

Features are float (dense stays a dense ``float32`` array; a torch sparse COO/CSR tensor or a
scipy matrix becomes ``scipy.sparse.csr_matrix``). Labels are integer class ids [N] (an
OGB-style [N, 1] column is squeezed), or a 0/1 multi-label matrix [N, C]. Masks are bool [N];
a 2-D mask [N, K] holds K splits (the heterophilous datasets' 10) and ``split=`` picks one.

This module never imports :mod:`gnnpipe.data.graph` (which imports this one): the Graph
class is passed in.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from gnnpipe._base import GnnpipeError
from gnnpipe.extras import require_dgl
from gnnpipe.quiet import known_warnings_silenced

MASKS = ("train_mask", "val_mask", "test_mask")


# ---------------------------------------------------------------------------- helpers
def _is_torch(a: Any) -> bool:
    return type(a).__module__.startswith("torch")


def _sparse_torch(a: Any) -> bool:
    if not _is_torch(a):
        return False
    import torch  # already imported: ``a`` is a tensor

    return a.layout != torch.strided


def _dense_numpy(a: Any, what: str) -> np.ndarray:
    """A dense tensor or array as a numpy array (a copy: the Graph must not alias the input)."""
    if _is_torch(a):
        import torch  # already imported: ``a`` is a tensor

        if a.layout != torch.strided:
            raise GnnpipeError(f"{what}: expected a dense tensor, got layout {a.layout}")
        a = a.detach().cpu()
        if a.dtype == torch.bfloat16 or a.dtype == torch.float16:
            a = a.float()
        return a.numpy().copy()
    if sp.issparse(a):
        raise GnnpipeError(f"{what}: expected a dense tensor, got a scipy sparse matrix")
    try:
        return np.array(a)
    except Exception as e:  # a list of str, an object ...
        raise GnnpipeError(f"{what}: expected a tensor or array, got {type(a).__name__} ({e})") from None


def _features(x: Any, n: int, what: str) -> Any:
    """[N, F] float32: dense ``np.ndarray``, or ``scipy.sparse.csr_matrix`` for sparse input."""
    if _sparse_torch(x):
        import torch  # already imported: ``x`` is a tensor

        t = x.detach().cpu()
        if not t.is_floating_point():
            raise GnnpipeError(f"{what}: expected floating features, got {t.dtype}; cast with {what} = {what}.float()")
        if t.dim() != 2:
            raise GnnpipeError(f"{what}: expected a 2-D sparse matrix [N, F], got shape {list(t.shape)}")
        if t.layout != torch.sparse_csr:
            t = t.to_sparse_coo().coalesce()
            idx = t.indices().numpy()
            f = sp.coo_matrix((t.values().float().numpy(), (idx[0], idx[1])), shape=tuple(t.shape)).tocsr()
        else:
            f = sp.csr_matrix(
                (t.values().float().numpy().copy(), t.col_indices().numpy().astype(np.int64),
                 t.crow_indices().numpy().astype(np.int64)),
                shape=tuple(t.shape),
            )
        f.sort_indices()
    elif sp.issparse(x):
        f = sp.csr_matrix(x, dtype=np.float32, copy=True)
        f.sum_duplicates()
    else:
        f = _dense_numpy(x, what)
        if not np.issubdtype(f.dtype, np.floating):
            raise GnnpipeError(
                f"{what}: expected floating features, got {f.dtype}; cast with {what} = {what}.float() "
                "(or one-hot encode categorical ids)"
            )
    if f.ndim != 2:
        raise GnnpipeError(f"{what}: expected shape [N, F] = [{n}, F], got {list(f.shape)}")
    if f.shape[0] != n:
        raise GnnpipeError(f"{what}: has {f.shape[0]} rows but the graph has {n} nodes")
    return f.astype(np.float32, copy=False)


def _labels(y: Any, n: int, what: str) -> np.ndarray:
    """int64 [N] class ids, or float32 [N, C] 0/1 multi-label targets."""
    y = _dense_numpy(y, what)
    if y.ndim == 2 and y.shape[1] == 1 and not np.issubdtype(y.dtype, np.floating):
        y = y[:, 0]  # OGB stores class ids as an [N, 1] column
    if y.shape[:1] != (n,) or y.ndim not in (1, 2):
        raise GnnpipeError(
            f"{what}: expected class ids [N] or a multi-label matrix [N, C] with N = {n}, got shape {list(y.shape)}"
        )
    if y.ndim == 1:
        if not (np.issubdtype(y.dtype, np.integer) or y.dtype == np.bool_):
            raise GnnpipeError(
                f"{what}: expected integer class ids, got {y.dtype} (regression targets are not supported); "
                f"cast with {what} = {what}.long() if they are class ids"
            )
        y = y.astype(np.int64)
        if y.size and y.min() < 0:
            raise GnnpipeError(
                f"{what}: {int((y < 0).sum())} nodes have a negative class id; every node needs one in [0, C): "
                "give unlabelled nodes any class and leave them out of the masks"
            )
        return y
    if np.issubdtype(y.dtype, np.floating) and np.isnan(y).any():
        raise GnnpipeError(f"{what}: multi-label matrix holds NaN; use 0/1 targets and leave unlabelled nodes out of the masks")
    if not np.isin(y, (0, 1)).all():
        raise GnnpipeError(
            f"{what}: a 2-D label matrix must hold 0/1 multi-label targets, got values outside {{0, 1}} "
            "(for class ids use a 1-D tensor)"
        )
    return y.astype(np.float32)


def _mask(m: Any, n: int, split: int | None, what: str, index_fix: str) -> np.ndarray:
    """bool [N]; column ``split`` of a 2-D [N, K] mask."""
    a = _dense_numpy(m, what)
    if a.ndim == 2 and a.shape[0] == n:
        k = a.shape[1]
        if split is None:
            raise GnnpipeError(
                f"{what}: has shape [{n}, {k}], one column per split; pass split=K with 0 <= K < {k} to pick one"
            )
        if not 0 <= split < k:
            raise GnnpipeError(f"split={split}: out of range, {what} has {k} splits (0 <= split < {k})")
        a = a[:, split]
    elif a.ndim == 1 and split is not None:
        raise GnnpipeError(f"split={split}: {what} is 1-D (a single split); drop split=")
    if a.shape != (n,):
        hint = f" (an index tensor? turn it into a mask with {index_fix})" if a.ndim == 1 else ""
        raise GnnpipeError(f"{what}: expected a bool mask of shape [{n}], got shape {list(a.shape)}{hint}")
    if a.dtype != np.bool_:
        if not (np.issubdtype(a.dtype, np.integer) and np.isin(a, (0, 1)).all()):
            raise GnnpipeError(f"{what}: expected a bool mask, got {a.dtype} (an index tensor? use {index_fix})")
        a = a.astype(bool)
    return a


def _missing_masks(missing: list[str], how: str) -> GnnpipeError:
    names = ", ".join(missing)
    return GnnpipeError(f"missing {names}: gnnpipe needs bool train/val/test masks of shape [N]; {how}")


def edges_to_csr(
    src: Any, dst: Any, n: int, *, symmetrize: bool, clean: bool, what: str, fixes: dict[str, str]
) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric CSR (sorted rows, no self-loops, no duplicates) from a directed edge list.

    Refuses self-loops or duplicate edges unless ``clean`` or ``symmetrize`` (then drops
    them), and an edge whose reverse is missing unless ``symmetrize`` (then adds it).

    Args:
        src, dst: int [E] endpoints.
        what: the input's name in messages (``data.edge_index``, ``g``).
        fixes: the library's own remedy per problem (keys ``loops``, ``dups``, ``directed``).

    Returns:
        (indptr int64 [N+1], indices int64 [2E'])
    """
    src = _dense_numpy(src, what).reshape(-1)
    dst = _dense_numpy(dst, what).reshape(-1)
    for a in (src, dst):
        if not np.issubdtype(a.dtype, np.integer):
            raise GnnpipeError(f"{what}: expected integer node ids, got {a.dtype}")
    src, dst = src.astype(np.int64), dst.astype(np.int64)
    if src.size:
        lo, hi = int(min(src.min(), dst.min())), int(max(src.max(), dst.max()))
        if lo < 0 or hi >= n:
            raise GnnpipeError(
                f"{what}: node id {lo if lo < 0 else hi} out of range [0, {n}) (the graph has {n} nodes)"
            )
    loop = src == dst
    n_loops = int(loop.sum())
    keep = ~loop
    key = np.sort(src[keep] * n + dst[keep])
    uniq = np.unique(key)
    n_dups = int(key.size - uniq.size)
    if (n_loops or n_dups) and not (clean or symmetrize):
        parts = [f"{n_loops} self-loops"] * bool(n_loops) + [f"{n_dups} duplicate edges"] * bool(n_dups)
        remedy = " / ".join(fixes[k] for k, c in (("loops", n_loops), ("dups", n_dups)) if c)
        raise GnnpipeError(
            f"{what}: has {' and '.join(parts)}; gnnpipe's graphs have neither: "
            f"pass clean=True (or symmetrize=True) to drop them, or use {remedy}"
        )
    rows = uniq // n
    rev = np.sort((uniq - rows * n) * n + rows)
    if not np.array_equal(uniq, rev):
        if not symmetrize:
            lone = int((~np.isin(uniq, rev, assume_unique=True)).sum())
            raise GnnpipeError(
                f"{what}: is directed ({lone} of {uniq.size} edges have no reverse edge); gnnpipe trains on "
                f"undirected graphs: pass symmetrize=True to add the reverse edges, or use {fixes['directed']}"
            )
        uniq = np.union1d(uniq, rev)
        rows = uniq // n
    indices = uniq - rows * n
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
    return indptr, indices


# ---------------------------------------------------------------------------- PyG
_PYG_FIXES = {
    "loops": "torch_geometric.utils.remove_self_loops",
    "dups": "torch_geometric.utils.coalesce",
    "directed": "torch_geometric.utils.to_undirected",
}


def from_pyg(
    graph_cls: type,
    data: Any,
    *,
    name: str | None = None,
    symmetrize: bool = False,
    clean: bool = False,
    split: int | None = None,
    num_classes: int | None = None,
) -> Any:
    """A Graph from a ``torch_geometric.data.Data``; see :meth:`Graph.from_pyg`."""
    # torch_geometric is an optional, heavy import (~2 s): only the converters need it.
    from torch_geometric.data import HeteroData

    if isinstance(data, HeteroData):
        raise GnnpipeError(
            "data: is a HeteroData (node types " + ", ".join(map(repr, data.node_types)) + "); gnnpipe trains "
            "homogeneous graphs: convert with data.to_homogeneous() or pick one node/edge type"
        )
    get = lambda k: getattr(data, k, None)  # noqa: E731 - Data returns None for unset keys anyway
    if get("edge_index") is None:
        extra = " (data.adj_t from ToSparseTensor is not supported: build data without it)" if get("adj_t") is not None else ""
        raise GnnpipeError(f"data.edge_index: missing; gnnpipe needs an edge_index [2, E]{extra}")
    for key, fix in (("x", "e.g. data.x = torch.ones(data.num_nodes, 1) or torch_geometric.transforms.OneHotDegree"),
                     ("y", "set data.y = class ids [N] (int) or 0/1 multi-label targets [N, C]")):
        if get(key) is None:
            raise GnnpipeError(f"data.{key}: missing; gnnpipe needs node {'features' if key == 'x' else 'labels'}: {fix}")
    ei = data.edge_index
    if np.ndim(ei) != 2 or ei.shape[0] != 2:
        raise GnnpipeError(f"data.edge_index: expected shape [2, E], got {list(ei.shape)}")
    n = int(data.num_nodes)
    missing = [f"data.{m}" for m in MASKS if get(m) is None]
    if missing:
        raise _missing_masks(
            missing, "set them, e.g. data.train_mask = torch.zeros(N, dtype=torch.bool) then mark nodes, "
            "or data = torch_geometric.transforms.RandomNodeSplit()(data)",
        )
    index_fix = "torch_geometric.utils.index_to_mask(idx, size=N)"
    features = _features(data.x, n, "data.x")
    labels = _labels(data.y, n, "data.y")
    masks = [_mask(get(m), n, split, f"data.{m}", index_fix) for m in MASKS]
    indptr, indices = edges_to_csr(ei[0], ei[1], n, symmetrize=symmetrize, clean=clean,
                                   what="data.edge_index", fixes=_PYG_FIXES)
    if name is None:
        name = get("name") if isinstance(get("name"), str) else "graph"
    if num_classes is None and isinstance(get("num_classes"), int):
        num_classes = get("num_classes")
    g = graph_cls(indptr, indices, features, labels, *masks, name=name, num_classes=num_classes or 0,
                  meta={"source": "pyg", "split": split, "symmetrize": symmetrize, "clean": clean})
    g.check_content()  # finite x, disjoint masks (the edges are symmetric by now)
    return g


def to_pyg(graph: Any) -> Any:
    """A ``torch_geometric.data.Data`` from a Graph; see :meth:`Graph.to_pyg`."""
    import torch
    # torch_geometric is an optional, heavy import (~2 s): only the converters need it.
    from torch_geometric.data import Data

    edge_index = torch.from_numpy(np.stack([graph.edge_src(), np.array(graph.indices, dtype=np.int64)]))
    with known_warnings_silenced():  # torch's "sparse CSR is beta" notice
        x = _torch_features(graph)
    return Data(
        x=x,
        edge_index=edge_index,
        y=torch.from_numpy(np.array(graph.labels)),
        num_nodes=graph.num_nodes,
        name=graph.name,
        num_classes=graph.num_classes,
        **{m: torch.from_numpy(np.array(getattr(graph, m))) for m in MASKS},
    )


def _torch_features(graph: Any) -> Any:
    """Dense float32 tensor [N, F], or a torch sparse CSR tensor for sparse features (copies)."""
    import torch

    f = graph.features
    if graph.sparse_features:
        # torch's CSR wants each row's column indices sorted and distinct; a graph prepared
        # before Graph canonicalised its features (or loaded read-only from a memory map)
        # may hold them in file order, so canonicalise a copy, never the graph's arrays.
        f = sp.csr_matrix((np.array(f.data, dtype=np.float32), np.array(f.indices, dtype=np.int64),
                           np.array(f.indptr, dtype=np.int64)), shape=f.shape)
        f.sum_duplicates()  # sorts each row's indices, merges duplicates; in place on the copy
        return torch.sparse_csr_tensor(
            torch.from_numpy(f.indptr.astype(np.int64, copy=False)),
            torch.from_numpy(f.indices.astype(np.int64, copy=False)),
            torch.from_numpy(f.data),
            size=f.shape,
            check_invariants=True,  # O(nnz); also opts out of torch's "checks are disabled" warning
        )
    return torch.from_numpy(np.array(f, dtype=np.float32))


# ---------------------------------------------------------------------------- DGL
_DGL_FIXES = {
    "loops": "dgl.remove_self_loop(g)",
    "dups": "dgl.to_simple(g) (g is a multi-graph)",
    "directed": "dgl.to_bidirected(g)",
}


def from_dgl(
    graph_cls: type,
    g: Any,
    *,
    name: str | None = None,
    symmetrize: bool = False,
    clean: bool = False,
    split: int | None = None,
    num_classes: int | None = None,
) -> Any:
    """A Graph from a homogeneous ``dgl.DGLGraph``; see :meth:`Graph.from_dgl`."""
    if len(g.ntypes) != 1 or len(g.canonical_etypes) != 1:
        raise GnnpipeError(
            f"g: is a heterogeneous DGL graph (node types {g.ntypes}, edge types {g.etypes}); gnnpipe trains "
            "homogeneous graphs: convert with dgl.to_homogeneous(g, ndata=[...]) or pick one type"
        )
    n = int(g.num_nodes())
    nd = g.ndata
    for key, fix in (("feat", "g.ndata['feat'] = features [N, F] (float)"),
                     ("label", "g.ndata['label'] = class ids [N] (int) or 0/1 multi-label targets [N, C]")):
        if key not in nd:
            raise GnnpipeError(f"g.ndata['{key}']: missing (ndata has {sorted(nd.keys())}); set {fix}")
    missing = [f"g.ndata['{m}']" for m in MASKS if m not in nd]
    if missing:
        raise _missing_masks(
            missing, "set them, e.g. g.ndata['train_mask'] = torch.zeros(N, dtype=torch.bool) then mark nodes"
        )
    index_fix = "mask = torch.zeros(N, dtype=torch.bool); mask[idx] = True"
    features = _features(nd["feat"], n, "g.ndata['feat']")
    labels = _labels(nd["label"], n, "g.ndata['label']")
    masks = [_mask(nd[m], n, split, f"g.ndata['{m}']", index_fix) for m in MASKS]
    src, dst = g.edges()
    indptr, indices = edges_to_csr(src, dst, n, symmetrize=symmetrize, clean=clean, what="g", fixes=_DGL_FIXES)
    g = graph_cls(indptr, indices, features, labels, *masks, name=name or "graph",
                  num_classes=num_classes or 0,
                  meta={"source": "dgl", "split": split, "symmetrize": symmetrize, "clean": clean})
    g.check_content()  # finite feat, disjoint masks (the edges are symmetric by now)
    return g


def to_dgl(graph: Any) -> Any:
    """A ``dgl.DGLGraph`` from a Graph; see :meth:`Graph.to_dgl`."""
    import torch
    # dgl is an optional, heavy import (~1.5 s, prints its backend choice): only the
    # converters need it.
    require_dgl("Graph.to_dgl()")
    with known_warnings_silenced():  # also sets DGLBACKEND, so dgl does not print its choice
        import dgl

        x = _torch_features(graph)
    g = dgl.graph(
        (torch.from_numpy(graph.edge_src()), torch.from_numpy(np.array(graph.indices, dtype=np.int64))),
        num_nodes=graph.num_nodes,
        idtype=torch.int64,
    )
    g.ndata["feat"] = x
    g.ndata["label"] = torch.from_numpy(np.array(graph.labels))
    for m in MASKS:
        g.ndata[m] = torch.from_numpy(np.array(getattr(graph, m)))
    return g
