"""Graph convolutions on PyG layers, aggregating through the fast CSR path.

Each adapter owns a torch_geometric layer for its parameters and update math, but never
calls the layer's ``propagate``: PyG's default ``edge_index`` scatter aggregation is ~60x
slower than a CSR SpMM on this hardware (PERFORMANCE.md). Aggregation goes through
:func:`gnnpipe.models.ops.csr_mm` on the block's cached, GCN- or mean-normalised CSR,
whose backward multiplies by the cached transpose.

Every adapter has the same interface: ``forward(block, h_src) -> dst rows`` (``h_src``
already dropped out), ``export() -> dict`` of parameters in a backend-neutral layout, and
``load(dict)``; :func:`gnnpipe.models.copy_weights` uses the last two.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch_geometric.nn import GATConv as _PygGAT
from torch_geometric.nn import GCN2Conv as _PygGCN2
from torch_geometric.nn import GCNConv as _PygGCN
from torch_geometric.nn import SAGEConv as _PygSAGE
from torch_geometric.utils import softmax as _segment_softmax

from gnnpipe.models import ops
from gnnpipe.models.block import Block


def _copy(param: Tensor, value: Tensor) -> None:
    with torch.no_grad():
        param.copy_(value.reshape(param.shape))


def aggregate_first(h_src: Tensor, in_dim: int, out_dim: int) -> bool:
    """Whether a GCN / SAGE-neighbour layer aggregates before its transform: dense input
    and ``in_dim <= out_dim`` (DGL's ``GraphConv`` / ``SAGEConv`` rule, ``in > out`` →
    transform first). It depends on the layer's widths only, never on the block, so every
    executor (one process, graph parallel, pipeline, hybrid) and both backends sum in the
    same order. :func:`gnnpipe.cost.units.unit_works` models the same rule.
    """
    return h_src.layout == torch.strided and in_dim <= out_dim


class GCNConv(nn.Module):
    """GCN layer: out_v = Σ_u W h_u/√((d_u+1)(d_v+1)) + W h_v/(d_v+1) + b (global degrees)."""

    def __init__(self, in_dim: int, out_dim: int):
        super().__init__()
        self.conv = _PygGCN(in_dim, out_dim, add_self_loops=False, normalize=False)

    def forward(self, block: Block, h_src: Tensor) -> Tensor:
        w = self.conv.lin.weight
        if aggregate_first(h_src, w.shape[1], w.shape[0]):
            # Â h first: the SpMM's backward keeps nothing (only the block's cached
            # transpose) and the GEMM keeps its input over dst rows only, where transform
            # first keeps the dropped-out h over every src row (own + halo / neighbours).
            a, at = block.gcn_adj()
            agg = ops.csr_mm(a, at, h_src) + h_src[block.dst_in_src] * block.gcn_self_weight()
            return nn.functional.linear(agg, w, self.conv.bias)
        # Transform first: the SpMM runs on the narrower matrix, and sparse (bag-of-words)
        # inputs stay sparse.
        return self.propagate(block, ops.linear(h_src, w, None, block.sparse_transpose_for))

    # The transform-first split (see :meth:`gnnpipe.models.units.ConvUnit.transform_input`):
    # ``forward == propagate(block, transform(h_src))`` whenever ``transforms_first``.
    def transforms_first(self, h_src: Tensor) -> bool:
        """Whether :meth:`forward` transforms ``h_src`` row by row before aggregating."""
        w = self.conv.lin.weight
        return not aggregate_first(h_src, w.shape[1], w.shape[0])

    def transform(self, h_src: Tensor) -> Tensor:
        """``h_src W`` (dense rows)."""
        return nn.functional.linear(h_src, self.conv.lin.weight)

    @property
    def transformed_dim(self) -> int:
        """The width of :meth:`transform`'s rows."""
        return self.conv.lin.weight.shape[0]

    def propagate(self, block: Block, z: Tensor) -> Tensor:
        """Â z + b: the rest of a transform-first layer on the transformed src rows ``z``."""
        a, at = block.gcn_adj()
        out = ops.csr_mm(a, at, z)
        out = out + z[block.dst_in_src] * block.gcn_self_weight()
        return out + self.conv.bias

    def export(self) -> dict:
        return {"weight": self.conv.lin.weight, "bias": self.conv.bias}

    def load(self, p: dict) -> None:
        _copy(self.conv.lin.weight, p["weight"])
        _copy(self.conv.bias, p["bias"])


class SAGEConv(nn.Module):
    """GraphSAGE-mean: out_v = W_l mean_{u∈N(v)} h_u + b + W_r h_v (mean by global degree)."""

    def __init__(self, in_dim: int, out_dim: int):
        super().__init__()
        self.conv = _PygSAGE(in_dim, out_dim, aggr="mean", root_weight=True, bias=True)

    def forward(self, block: Block, h_src: Tensor) -> Tensor:
        wl, wr, bias = self.conv.lin_l.weight, self.conv.lin_r.weight, self.conv.lin_l.bias
        a, at = block.mean_adj()
        if h_src.layout == torch.strided:
            # Root term on dst rows only (its GEMM keeps dst rows, not every src row).
            r = nn.functional.linear(h_src[block.dst_in_src], wr)
            if aggregate_first(h_src, wl.shape[1], wl.shape[0]):
                return nn.functional.linear(ops.csr_mm(a, at, h_src), wl, bias) + r
            return ops.csr_mm(a, at, nn.functional.linear(h_src, wl)) + r + bias
        z = ops.linear(h_src, wl, None, block.sparse_transpose_for)
        out = ops.csr_mm(a, at, z)
        r = ops.linear(h_src, wr, None, block.sparse_transpose_for)
        return out + r[block.dst_in_src] + bias

    # The transform-first split (see GCNConv): when the layer transforms first, every src
    # row's neighbour transform and every dst row's root transform are row-wise, so both
    # are done once per row, side by side ``[h W_l | h W_r]``; the sums below are
    # :meth:`forward`'s, in its order.
    def transforms_first(self, h_src: Tensor) -> bool:
        """Whether :meth:`forward` transforms ``h_src`` row by row before aggregating."""
        w = self.conv.lin_l.weight
        return not aggregate_first(h_src, w.shape[1], w.shape[0])

    def transform(self, h_src: Tensor) -> Tensor:
        """``[h_src W_l | h_src W_r]`` (dense rows; two GEMMs, as :meth:`forward` runs them)."""
        return torch.cat([nn.functional.linear(h_src, self.conv.lin_l.weight),
                          nn.functional.linear(h_src, self.conv.lin_r.weight)], dim=1)

    @property
    def transformed_dim(self) -> int:
        """The width of :meth:`transform`'s rows: both transforms."""
        return 2 * self.conv.lin_l.weight.shape[0]

    def propagate(self, block: Block, z: Tensor) -> Tensor:
        """mean_u z_l + z_r + b: the rest of the layer on the transformed src rows ``z``."""
        o = self.conv.lin_l.weight.shape[0]
        a, at = block.mean_adj()
        return ops.csr_mm(a, at, z[:, :o]) + z[block.dst_in_src, o:] + self.conv.lin_l.bias

    def export(self) -> dict:
        return {"w_neigh": self.conv.lin_l.weight, "w_self": self.conv.lin_r.weight,
                "bias": self.conv.lin_l.bias}

    def load(self, p: dict) -> None:
        _copy(self.conv.lin_l.weight, p["w_neigh"])
        _copy(self.conv.lin_r.weight, p["w_self"])
        _copy(self.conv.lin_l.bias, p["bias"])


class GATConv(nn.Module):
    """GAT: attention over N(v) ∪ {v}; heads concatenated (``concat``) or averaged."""

    def __init__(self, in_dim: int, out_per_head: int, heads: int, concat: bool):
        super().__init__()
        self.heads, self.ch, self.concat = heads, out_per_head, concat
        self.conv = _PygGAT(in_dim, out_per_head, heads=heads, concat=concat,
                            add_self_loops=False, negative_slope=0.2, dropout=0.0)

    def forward(self, block: Block, h_src: Tensor) -> Tensor:
        return self.propagate(block, ops.linear(h_src, self.conv.lin.weight, None, block.sparse_transpose_for))

    # The transform-first split (see GCNConv): GAT always transforms first.
    def transforms_first(self, h_src: Tensor) -> bool:
        """Always: attention scores are computed on the transformed rows."""
        return True

    def transform(self, h_src: Tensor) -> Tensor:
        """``h_src W`` (dense rows), all heads side by side."""
        return nn.functional.linear(h_src, self.conv.lin.weight)

    @property
    def transformed_dim(self) -> int:
        """The width of :meth:`transform`'s rows (every head)."""
        return self.conv.lin.weight.shape[0]

    def propagate(self, block: Block, z: Tensor) -> Tensor:
        """Attention and the weighted sum over the transformed src rows ``z``."""
        h, c = self.heads, self.ch
        z = z.view(-1, h, c)
        a_src = (z * self.conv.att_src).sum(-1)  # [n_src, H]
        a_dst = (z[block.dst_in_src] * self.conv.att_dst).sum(-1)  # [n_dst, H]
        pattern = block.csr_with_self_loops()
        crow, col, rows = pattern[0], pattern[1], pattern[2]
        e = nn.functional.leaky_relu(a_src[col] + a_dst[rows], 0.2)
        # Segment softmax over CSR rows (ptr form: no scatter over an index vector).
        alpha = _segment_softmax(e, ptr=crow, num_nodes=block.num_dst)
        out = ops.csr_values_mm(alpha, z, pattern, block.num_dst)  # [n_dst, H, C]
        out = out.reshape(-1, h * c) if self.concat else out.mean(1)
        return out + self.conv.bias

    def export(self) -> dict:
        return {"weight": self.conv.lin.weight, "att_src": self.conv.att_src,
                "att_dst": self.conv.att_dst, "bias": self.conv.bias}

    def load(self, p: dict) -> None:
        _copy(self.conv.lin.weight, p["weight"])
        _copy(self.conv.att_src, p["att_src"])
        _copy(self.conv.att_dst, p["att_dst"])
        # A 1-head mean layer has a [C] bias in both layouts; a concat layer [H*C].
        _copy(self.conv.bias, p["bias"])


class GCN2Conv(nn.Module):
    """GCNII layer: h = (1-α) Â h_src + α h0;  out = (1-β) h + β h W,  β = log(λ/l + 1)."""

    def __init__(self, dim: int, alpha: float, lam: float, layer: int):
        super().__init__()
        self.conv = _PygGCN2(dim, alpha=alpha, theta=lam, layer=layer, shared_weights=True,
                             normalize=False)

    def forward(self, block: Block, h_src: Tensor, h0: Tensor) -> Tensor:
        a, at = block.gcn_adj()
        agg = ops.csr_mm(a, at, h_src) + h_src[block.dst_in_src] * block.gcn_self_weight()
        alpha, beta = self.conv.alpha, self.conv.beta
        h = agg * (1.0 - alpha) + h0 * alpha
        return torch.addmm(h, h, self.conv.weight1, beta=1.0 - beta, alpha=beta)

    def export(self) -> dict:
        return {"weight1": self.conv.weight1}

    def load(self, p: dict) -> None:
        _copy(self.conv.weight1, p["weight1"])
