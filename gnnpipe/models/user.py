"""The user's own layers as units: ``gnnpipe.fit(graph, layers=[conv, nn.Linear(...), conv, ...])``.

A chain is a list of modules, each one of:

- a **PyG** graph layer (a ``torch_geometric.nn.MessagePassing``), called
  ``conv(x, *carried, edge_index)``;
- a **DGL** graph layer (a module of ``dgl.nn``), called ``conv(g, x, *carried)``;
- a **row-wise** torch module (``nn.Linear``, ``nn.LayerNorm``, an MLP), called
  ``m(x, *carried)``.

Between items come gnnpipe's hashed dropout on each item's input (keyed by global node id,
so any split of the graph and any rank count draw the same masks) and an activation after
every item but the last (ReLU unless ``act=`` says otherwise). :class:`Layer` wraps an item
to change either, or to carry tensors across items (GCNII's initial residual):
``Layer(nn.Linear(F, d), writes="h0")`` stores that item's output (after its activation)
under ``"h0"``, ``Layer(GCN2Conv(d, alpha, normalize=False), reads=("h0",))`` is called
``conv(x, h0, edge_index)``, exactly PyG's ``GCN2Conv(x, x_0, edge_index)``.

**The locality rule.** The executors run a layer on a sub-graph: a part with its halo, or a
pipeline chunk with its neighbours. That gives the same numbers as the whole graph only if
a layer computes node v from v's own row and the rows of v's in-neighbours over v's
incoming edges, nothing else: one hop, no degree of a source node, no statistics over all
nodes. :func:`check_local` refuses the known exceptions in one line (PyG ``GCNConv`` with
``normalize=True``, multi-hop layers such as ``SGConv`` or ``APPNP``, batch statistics,
DGL ``GraphConv(norm='both')`` ...). A layer's own randomness (``GATConv(dropout=0.5)``)
differs between ranks: use gnnpipe's dropout instead.

**How a unit calls a layer on a block.** A PyG layer whose ``forward`` takes a pair
``(x_src, x_dst)`` (its first argument is annotated with a tuple type, as ``GraphConv``,
``GINConv``, ``SAGEConv``, ``GATConv`` are) and reads no carried tensor is called
bipartite: ``conv((h_src, h_src[:num_dst]), block.edge_index(), size=(num_src, num_dst))``
computes only the dst rows, which a pipeline chunk (whose src rows are 3-5 times its dst
rows) needs. This requires the dst nodes to be the first src rows (every executor's blocks
are; :meth:`Block.dst_is_prefix`), since a layer that adds self-loops adds ``i -> i``.
Any other PyG layer is called on the square graph of the src rows
(:meth:`Block.square_edge_index`), carried tensors padded with zero rows to src-row space,
and the dst rows of its output are kept: correct for a local layer, as a src row that is
no dst row is never kept. DGL layers known to take a pair (:data:`DGL_PAIR_LAYERS`) get
``block.dgl_block``; others the square graph.
"""

from __future__ import annotations

import copy
import inspect
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch
import torch_geometric.nn as pygnn
from torch import Tensor, nn

from gnnpipe._base import GnnpipeError
from gnnpipe.models import GNN, USER_MODEL, ModelConfig
from gnnpipe.models import ops
from gnnpipe.models.block import Block
from gnnpipe.models.units import RunCtx, Unit

__all__ = ["Layer", "UserChain", "UserGNN", "UserLayerUnit", "check_local", "ACTIVATIONS", "DGL_PAIR_LAYERS"]

#: Activations by name (``act=``); a callable (row-wise) is also accepted.
ACTIVATIONS: dict[str, Callable[[Tensor], Tensor] | None] = {
    "relu": ops.relu, "elu": nn.functional.elu, "gelu": nn.functional.gelu, "tanh": torch.tanh,
    "leaky_relu": nn.functional.leaky_relu, "sigmoid": torch.sigmoid, "none": None,
}

#: DGL layers that take a ``(feat_src, feat_dst)`` pair on a block (``expand_as_pair``).
DGL_PAIR_LAYERS = ("GraphConv", "SAGEConv", "GATConv", "GATv2Conv", "GINConv", "DotGatConv", "EdgeConv")

_DEFAULT = "default"  # Layer.act: the chain's activation, none after the last item


@dataclass
class Layer:
    """One item of a user chain with its own options (a plain module needs no wrapper).

    Args:
        module: the PyG / DGL layer or row-wise torch module.
        reads: names of carried tensors passed after ``x`` (PyG ``conv(x, *carried,
            edge_index)``, DGL ``conv(g, x, *carried)``, row-wise ``m(x, *carried)``); an
            earlier item must write each.
        writes: store this item's output (after its activation) under this name.
        act: activation after the item (a name of :data:`ACTIVATIONS` or a callable); by
            default the chain's (``fit(act=...)``, ReLU), none after the last item.
        dropout: drop probability of the item's input; by default ``fit(dropout=...)``.
        kind: ``"pyg"``, ``"dgl"`` or ``"rows"``; by default found from the module's type.
    """

    module: nn.Module
    reads: tuple = ()
    writes: str | None = None
    act: Any = _DEFAULT
    dropout: float | None = None
    kind: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.reads, str):
            self.reads = (self.reads,)
        self.reads = tuple(self.reads)
        if not isinstance(self.module, nn.Module):
            raise GnnpipeError(f"Layer: module must be a torch.nn.Module, got {type(self.module).__name__}")
        if self.kind is None:
            self.kind = _kind_of(self.module)
        if self.kind not in ("pyg", "dgl", "rows"):
            raise GnnpipeError(f"Layer: kind must be 'pyg', 'dgl' or 'rows', got {self.kind!r}")
        if self.dropout is not None and not 0.0 <= float(self.dropout) < 1.0:
            raise GnnpipeError(f"Layer: dropout must be in [0, 1), got {self.dropout!r}")


def _kind_of(m: nn.Module) -> str:
    if isinstance(m, pygnn.MessagePassing):
        return "pyg"
    if type(m).__module__.split(".")[0] == "dgl":
        return "dgl"
    return "rows"


def _act_fn(act: Any) -> Callable[[Tensor], Tensor] | None:
    if act is None or callable(act):
        return act
    if act not in ACTIVATIONS:
        raise GnnpipeError(f"act: expected one of {', '.join(ACTIVATIONS)} or a callable, got {act!r}")
    return ACTIVATIONS[act]


# ------------------------------------------------------------------ the locality rule
def _pyg(name: str):
    return getattr(pygnn, name, None)


def _non_local_reason(m: nn.Module, kind: str) -> str | None:
    """Why ``m`` cannot be exact on a sub-graph, with what to use instead; None if not known."""
    t = type(m).__name__
    if kind == "pyg" or type(m).__module__.startswith("torch_geometric"):  # PyG norms are row-wise items
        for name, alt in (("GCNConv", "GCNConv(normalize=False) (no degree normalisation) or the built-in "
                                      "model='gcn', which normalises with global degrees"),
                          ("GCN2Conv", "GCN2Conv(normalize=False) or the built-in model='gcnii'"),
                          ("LGConv", "LGConv(normalize=False)"),
                          ("FAConv", "FAConv(normalize=False)")):
            cls = _pyg(name)
            if cls is not None and isinstance(m, cls) and getattr(m, "normalize", False):
                return (f"normalize=True scales each edge by its source's degree, which a sub-graph "
                        f"does not know; use {alt}")
        for name in ("ChebConv", "SGConv", "SSGConv", "APPNP", "TAGConv", "ARMAConv", "MixHopConv"):
            cls = _pyg(name)
            if cls is not None and isinstance(m, cls):
                return ("it propagates over more than one hop (and normalises by source degrees) in one "
                        "call; stack one-hop layers instead (e.g. GraphConv, GINConv)")
        for name in ("BatchNorm", "GraphNorm", "InstanceNorm", "PairNorm", "DiffGroupNorm", "GraphSizeNorm",
                     "MeanSubtractionNorm"):
            cls = _pyg(name)
            if cls is not None and isinstance(m, cls):
                return "it uses statistics over all nodes, which differ between parts and chunks; use nn.LayerNorm"
        cls = _pyg("LayerNorm")
        if cls is not None and isinstance(m, cls) and getattr(m, "mode", "graph") == "graph":
            return "mode='graph' normalises over all nodes; use LayerNorm(mode='node') or nn.LayerNorm"
    if kind == "dgl":
        if t == "GraphConv" and getattr(m, "_norm", "none") in ("both", "left"):
            return (f"norm='{m._norm}' scales by the source's out-degree, which a sub-graph does not know; "
                    "use GraphConv(norm='right') or norm='none'")
        if t in ("ChebConv", "SGConv", "TAGConv", "APPNPConv", "GatedGraphConv"):
            return "it propagates over more than one hop in one call; stack one-hop layers instead"
        if t in ("GCN2Conv", "EdgeWeightNorm"):
            return "it normalises by source degrees, which a sub-graph does not know; use GraphConv(norm='right')"
    if isinstance(m, (nn.modules.batchnorm._BatchNorm, nn.modules.instancenorm._InstanceNorm)):
        return "it uses statistics over all nodes, which differ between parts and chunks; use nn.LayerNorm"
    return None


def check_local(module: nn.Module, index: int, kind: str | None = None) -> None:
    """Refuse a layer that is known not to be local (see the module docstring).

    Raises:
        GnnpipeError: one line naming the layer's index and type, why, and what to use.
    """
    why = _non_local_reason(module, kind or _kind_of(module))
    if why is not None:
        raise GnnpipeError(f"layers[{index}] ({type(module).__name__}) cannot run exactly on sub-graphs: {why} "
                           "(a layer must compute node v from v's own row and its incoming edges only)")


def _takes_pair(m: nn.Module, kind: str) -> tuple[bool, bool]:
    """(whether to call ``m`` bipartite, whether its forward accepts ``size=``)."""
    if kind == "dgl":
        return type(m).__name__ in DGL_PAIR_LAYERS, False
    try:
        params = list(inspect.signature(type(m).forward).parameters.values())[1:]
    except (TypeError, ValueError):
        return False, False
    if not params:
        return False, False
    ann = str(params[0].annotation)
    pair = any(s in ann for s in ("Tuple", "tuple", "PairTensor"))
    return pair, any(p.name == "size" for p in params)


# ------------------------------------------------------------------ calling a layer
def _dense(x: Tensor) -> Tensor:
    return x if x.layout == torch.strided else x.to_dense()


def _pad(t: Tensor, block: Block) -> Tensor:
    """Carried dst rows ``t`` [num_dst, w] as src-row space [num_src, w] (zeros elsewhere)."""
    if block.num_src == block.num_dst and block.dst_is_prefix():
        return t
    return t.new_zeros((block.num_src, t.shape[1])).index_copy(0, block.dst_in_src, t)


def _call_full(m: nn.Module, kind: str, block: Block, x: Tensor, extra: list) -> Tensor:
    """``m`` on the square graph of ``block``'s src rows; returns every src row's output."""
    if kind == "pyg":
        return m(x, *extra, block.square_edge_index())
    return m(block.dgl_square(), x, *extra)


class UserLayerUnit(Unit):
    """One item of a user chain as a unit: dropout → the module → activation (→ carry).

    Args:
        index: the unit's position (its dropout stream).
        layer: the item (:class:`Layer`).
        in_dim, out_dim: its widths (measured by :meth:`UserChain.prepare`).
        dropout: its input's drop probability.
        act: its activation (None: none).
    """

    def __init__(self, index: int, layer: Layer, in_dim: int, out_dim: int, dropout: float,
                 act: Callable[[Tensor], Tensor] | None) -> None:
        super().__init__(index, in_dim, out_dim, dropout)
        self.module = layer.module
        self.kind = layer.kind
        self.aggregates = layer.kind != "rows"
        self.reads, self.writes = layer.reads, layer.writes
        # parallel.pipeline.stage.carry_keys_after: what must travel into a stage starting here
        self.carry_keys = self.carry_reads = layer.reads
        self.carry_writes = (layer.writes,) if layer.writes else ()
        self.act = act
        self.pair, self.sized = _takes_pair(layer.module, layer.kind) if self.aggregates else (False, False)

    def forward(self, h_dst, carry, ctx, block=None, h_src=None):
        missing = [k for k in self.reads if k not in carry]
        if missing:
            raise ValueError(f"unit {self.index} ({type(self.module).__name__}): carry lacks {missing}")
        extra = [carry[k] for k in self.reads]
        if not self.aggregates:
            x = self.drop(_dense(h_dst), None if block is None else block.dst_gid, ctx)
            out = self.module(x, *extra)
        else:
            hs = self.drop(_dense(self._src(h_dst, block, h_src)), block.src_gid, ctx)
            out = self.conv(block, hs, extra)
        if self.act is not None:
            out = self.act(out)
        if self.writes:
            carry = {**carry, self.writes: out}
        return out, carry

    def conv(self, block: Block, hs: Tensor, extra: list) -> Tensor:
        """The module's output rows of ``block``'s dst nodes from its src rows ``hs``."""
        nd = block.num_dst
        if self.pair and not extra and block.dst_is_prefix():
            if self.kind == "pyg":
                kw = {"size": (block.num_src, nd)} if self.sized else {}
                return self.module((hs, hs[:nd]), block.edge_index(), **kw)
            return self.module(block.dgl_block(self_loops=False), (hs, hs[:nd]))
        out = _call_full(self.module, self.kind, block, hs, [_pad(t, block) for t in extra])
        return out[:nd] if block.dst_is_prefix() else out[block.dst_in_src]


# ------------------------------------------------------------------ the chain
class UserChain(nn.ModuleList):
    """The user's chain as one ordinary module: ``model(x, edge_index) -> logits``.

    Its ``state_dict`` is that of ``nn.ModuleList([the modules])`` (a :class:`Layer`'s
    module in its place), so it loads into the user's own un-parallelised chain.
    :func:`gnnpipe.fit` deep-copies the layers it is given (they keep their initial weights)
    and returns the trained chain as ``Result.model``.

    Args:
        layers: the items: modules or :class:`Layer` s.
        act: the activation between items (name or callable).
        dropout: the default drop probability of each item's input.
        seed: keys the dropout masks (the run's seed).
    """

    def __init__(self, layers, act: Any = "relu", dropout: float = 0.0, seed: int = 0) -> None:
        items = list(layers)
        if not items:
            raise GnnpipeError("layers: expected a non-empty list of modules")
        specs = [copy.deepcopy(it if isinstance(it, Layer) else Layer(it)) for it in items]
        super().__init__([s.module for s in specs])
        _act_fn(act)  # validate
        self.specs, self.act, self.dropout, self.seed = specs, act, float(dropout), int(seed)
        written: set = set()
        for i, s in enumerate(specs):
            if not isinstance(s.module, nn.Module):
                raise GnnpipeError(f"layers[{i}]: expected a torch.nn.Module or gnnpipe.Layer, got "
                                   f"{type(s.module).__name__}")
            check_local(s.module, i, s.kind)
            lost = [k for k in s.reads if k not in written]
            if lost:
                raise GnnpipeError(f"layers[{i}] ({type(s.module).__name__}) reads {lost}, which no earlier "
                                   "layer writes (Layer(..., writes=name))")
            if s.writes:
                written.add(s.writes)
        self.in_dims: list[int] = []
        self.out_dims: list[int] = []
        self.carry_dims: dict[str, int] = {}

    # per-item options, resolved
    def item_act(self, i: int):
        a = self.specs[i].act
        if a == _DEFAULT:
            return None if i == len(self.specs) - 1 else _act_fn(self.act)
        return _act_fn(a)

    def item_dropout(self, i: int) -> float:
        p = self.specs[i].dropout
        return self.dropout if p is None else float(p)

    @property
    def kinds(self) -> list[str]:
        return [s.kind for s in self.specs]

    def run(self, block: Block, x: Tensor, ctx: RunCtx) -> Tensor:
        """The chain on a square block of a whole graph (what a plain loop does).

        Args:
            block: :meth:`Block.full` of the graph.
            x: [N, F] features (dense or sparse CSR).

        Returns:
            [N, out] the last item's output.
        """
        h, carry = _dense(x), {}
        for i, s in enumerate(self.specs):
            p = self.item_dropout(i)
            if ctx.training and p > 0:
                h = ops.hashed_dropout(h, block.src_gid, p, ctx.seed, ctx.epoch, i)
            extra = [carry[k] for k in s.reads]
            h = s.module(h, *extra) if s.kind == "rows" else _call_full(s.module, s.kind, block, h, extra)
            act = self.item_act(i)
            if act is not None:
                h = act(h)
            if s.writes:
                carry[s.writes] = h
        return h

    def forward(self, x: Tensor, edge_index: Tensor, epoch: int = 0) -> Tensor:
        """Logits [N, classes] of every node.

        Args:
            x: [N, F] features (dense, or a torch sparse CSR tensor).
            edge_index: int64 [2, E]; made symmetric, self-loops and duplicates dropped, as
                gnnpipe's Graph holds a graph (and as it was trained).
            epoch: keys the dropout masks in training mode.
        """
        block = Block.from_edge_index(edge_index, int(x.shape[0]))
        return self.run(block, x, RunCtx(training=self.training, epoch=epoch, seed=self.seed))

    # ------------------------------------------------------------------ set-up
    @torch.no_grad()
    def prepare(self, in_dim: int, num_classes: int) -> None:
        """Measure every item's widths with a forward over a 4-node ring (eval mode, the
        global RNG untouched; it also materialises lazy parameters) and check them.

        Raises:
            GnnpipeError: a layer fails on the probe, the last width is not the class
                count, or carried tensors differ in width (they travel in one message).
        """
        n = 4
        ring = np.arange(n)
        src = np.concatenate([ring, (ring + 1) % n])
        dst = np.concatenate([(ring + 1) % n, ring])
        order = np.lexsort((src, dst))
        indptr = np.zeros(n + 1, np.int64)
        np.cumsum(np.bincount(dst, minlength=n), out=indptr[1:])
        block = Block.full(torch.from_numpy(indptr), torch.from_numpy(src[order]))
        was = [m.training for m in self.modules()]
        self.eval()
        self.in_dims, self.out_dims, self.carry_dims = [], [], {}
        try:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(0)
                h, carry = torch.randn(n, in_dim), {}
                for i, s in enumerate(self.specs):
                    self.in_dims.append(int(h.shape[1]))
                    extra = [carry[k] for k in s.reads]
                    try:
                        h = s.module(h, *extra) if s.kind == "rows" else _call_full(s.module, s.kind, block, h, extra)
                    except Exception as e:  # noqa: BLE001 - the user's layer: say which one failed
                        raise GnnpipeError(f"layers[{i}] ({type(s.module).__name__}) failed on a {list(h.shape)} "
                                           f"input: {type(e).__name__}: {e}".splitlines()[0]) from None
                    if not isinstance(h, Tensor) or h.dim() != 2 or h.shape[0] != n:
                        raise GnnpipeError(f"layers[{i}] ({type(s.module).__name__}) must return one [nodes, width] "
                                           f"tensor, got {getattr(h, 'shape', type(h).__name__)}")
                    self.out_dims.append(int(h.shape[1]))
                    if s.writes:
                        carry[s.writes] = h
                        self.carry_dims[s.writes] = int(h.shape[1])
        finally:
            for m, t in zip(self.modules(), was):
                m.training = t
        if self.out_dims[-1] != num_classes:
            raise GnnpipeError(f"layers[{len(self.specs) - 1}] ({type(self.specs[-1].module).__name__}) outputs "
                               f"{self.out_dims[-1]} columns; the graph has {num_classes} classes")
        if len(set(self.carry_dims.values())) > 1:
            raise GnnpipeError(f"carried tensors must share one width (they travel in one message), got "
                               f"{self.carry_dims}")

    def signature(self) -> list[str]:
        """What a checkpoint of this chain must match to be resumed by it: each item's
        ``repr``, parameter shapes, carry names, activation and dropout (JSON-serialisable; a
        best effort: options a layer's repr does not show, such as PyG's ``aggr``, escape it)."""
        out = []
        for i, s in enumerate(self.specs):
            shapes = [list(p.shape) for p in s.module.parameters()]
            act = self.item_act(i)
            out.append(f"{' '.join(repr(s.module).split())} {shapes} reads={list(s.reads)} writes={s.writes} "
                       f"act={getattr(act, '__name__', act)} dropout={self.item_dropout(i)}")
        return out

    def model_config(self, multilabel: bool, dropout: float) -> ModelConfig:
        """The :class:`ModelConfig` that describes this chain (model ``user``)."""
        if not self.out_dims:
            raise GnnpipeError("internal: UserChain.prepare must run before model_config")
        hidden = next(iter(self.carry_dims.values()), max(self.out_dims))
        return ModelConfig(model=USER_MODEL, in_dim=self.in_dims[0], num_classes=self.out_dims[-1],
                           layers=len(self.specs), hidden=hidden, dropout=dropout,
                           backend="dgl" if "dgl" in self.kinds else "pyg", multilabel=multilabel)

    def to_gnn(self, cfg: ModelConfig) -> "UserGNN":
        """A fresh :class:`UserGNN` (deep copies of the modules) that every executor runs."""
        units = [UserLayerUnit(i, copy.deepcopy(s), self.in_dims[i], self.out_dims[i], self.item_dropout(i),
                               self.item_act(i)) for i, s in enumerate(self.specs)]
        return UserGNN(cfg, units)

    def load_units_state(self, state: dict) -> None:
        """Load a :class:`UserGNN`'s ``state_dict`` (keys ``units.<i>.module.*``)."""
        mine = {}
        for k, v in state.items():
            _, i, rest = k.split(".", 2)
            if not rest.startswith("module."):
                raise GnnpipeError(f"internal: unexpected key {k!r} in a user model's state")
            mine[f"{i}.{rest[len('module.'):]}"] = v
        self.load_state_dict(mine)


class UserGNN(GNN):
    """A :class:`GNN` of :class:`UserLayerUnit` s (``units`` as every executor expects)."""

    def unit_costs(self, num_nodes: int, num_edges: int) -> list[float]:
        """Estimated FLOPs (forward + backward) of each unit, for the stage balancer: a
        graph layer's transform over the nodes plus its messages over the edges."""
        out = []
        for u in self.units:
            c = 6.0 * num_nodes * u.in_dim * u.out_dim
            if u.aggregates:
                c += 4.0 * num_edges * max(u.in_dim, u.out_dim)
            out.append(c + num_nodes)
        return out

