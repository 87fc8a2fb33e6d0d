"""Graph convolutions on dgl.nn layers over DGL blocks built from :class:`Block`.

DGL 1.1.3 imports with torch 2.13 except ``dgl.sparse``; it needs ``DGLBACKEND=pytorch``,
which this module sets when unset. DGL layers take dense features, so a sparse input is
densified here (use the pyg backend for wide bag-of-words inputs).

Global-degree normalisation: DGL's layers normalise by the degrees of the graph they are
given, which for a partition's block are not the global ones. So GCN-type layers run
``GraphConv(norm="none")`` on a block that carries one self-loop edge per dst node, with
the GCN-normalised weights (self-loop weight 1/(d_v+1)) as ``edge_weight``; SAGE-mean gets
``edge_weight = in-degree(v) / global degree(v)`` so that DGL's mean over the block's edges
equals the mean over all neighbours; GCNII uses ``GCN2Conv``'s parameters and update rule
but aggregates with such a weighted ``GraphConv`` because its own ``edge_weight`` path
re-normalises by the block's degrees.
"""

from __future__ import annotations

import os

os.environ.setdefault("DGLBACKEND", "pytorch")

import torch  # noqa: E402
from torch import Tensor, nn  # noqa: E402

import dgl.nn.pytorch as dglnn  # noqa: E402  (models.build_model checks it is installed first)

from gnnpipe.models.block import Block  # noqa: E402


def _dense(x: Tensor) -> Tensor:
    return x.to_dense() if x.layout == torch.sparse_csr else x


def _copy(param: Tensor, value: Tensor) -> None:
    with torch.no_grad():
        param.copy_(value.reshape(param.shape))


def _gcn_edge_weight(block: Block) -> Tensor:
    """GCN weights of the self-looped block's edges: CSR edges, then one self-loop per dst."""
    return block._cached("dgl_gcn_w", lambda: torch.cat([block.gcn_norm(), block.gcn_self_weight().view(-1)]))


def _sage_edge_weight(block: Block) -> Tensor:
    def make():
        indeg = (block.indptr[1:] - block.indptr[:-1]).to(torch.float32)
        w = indeg / block.dst_deg.clamp(min=1.0)
        return w[block.rows()]
    return block._cached("dgl_sage_w", make)


class GCNConv(nn.Module):
    """GCN layer on ``dgl.nn.GraphConv`` (see the module docstring for normalisation)."""

    def __init__(self, in_dim: int, out_dim: int):
        super().__init__()
        self.conv = dglnn.GraphConv(in_dim, out_dim, norm="none", weight=True, bias=True,
                                    allow_zero_in_degree=True)

    def forward(self, block: Block, h_src: Tensor) -> Tensor:
        # GraphConv aggregates first when in_feats <= out_feats (else transforms first):
        # the rule of :func:`gnnpipe.models.pyg.aggregate_first`, so both backends sum in
        # the same order and keep the same tensors (the aggregate over dst rows; u_mul_e's
        # SpMM keeps only the block's cached edge weights).
        h_src = _dense(h_src)
        g = block.dgl_block(self_loops=True)
        return self.conv(g, (h_src, h_src[block.dst_in_src]), edge_weight=_gcn_edge_weight(block))

    def export(self) -> dict:  # DGL stores W as [in, out]
        return {"weight": self.conv.weight.t(), "bias": self.conv.bias}

    def load(self, p: dict) -> None:
        _copy(self.conv.weight, p["weight"].t())
        _copy(self.conv.bias, p["bias"])


class SAGEConv(nn.Module):
    """GraphSAGE-mean on ``dgl.nn.SAGEConv``."""

    def __init__(self, in_dim: int, out_dim: int):
        super().__init__()
        self.conv = dglnn.SAGEConv(in_dim, out_dim, "mean", bias=True)

    def forward(self, block: Block, h_src: Tensor) -> Tensor:
        # SAGEConv applies fc_self to the dst rows given and aggregates before fc_neigh
        # when in_feats <= out_feats: the pyg adapter's order.
        h_src = _dense(h_src)
        g = block.dgl_block(self_loops=False)
        return self.conv(g, (h_src, h_src[block.dst_in_src]), edge_weight=_sage_edge_weight(block))

    def export(self) -> dict:
        return {"w_neigh": self.conv.fc_neigh.weight, "w_self": self.conv.fc_self.weight,
                "bias": self.conv.fc_self.bias}

    def load(self, p: dict) -> None:
        _copy(self.conv.fc_neigh.weight, p["w_neigh"])
        _copy(self.conv.fc_self.weight, p["w_self"])
        _copy(self.conv.fc_self.bias, p["bias"])


class GATConv(nn.Module):
    """GAT on ``dgl.nn.GATConv`` over the self-looped block."""

    def __init__(self, in_dim: int, out_per_head: int, heads: int, concat: bool):
        super().__init__()
        self.heads, self.ch, self.concat = heads, out_per_head, concat
        self.conv = dglnn.GATConv(in_dim, out_per_head, heads, negative_slope=0.2,
                                  allow_zero_in_degree=True, bias=True)

    def forward(self, block: Block, h_src: Tensor) -> Tensor:
        h_src = _dense(h_src)
        g = block.dgl_block(self_loops=True)
        out = self.conv(g, (h_src, h_src[block.dst_in_src]))  # [n_dst, H, C], bias per head
        return out.reshape(out.shape[0], -1) if self.concat else out.mean(1)

    def export(self) -> dict:
        bias = self.conv.bias
        if not self.concat:  # DGL adds a per-head bias before the mean: its mean is the bias
            bias = bias.view(self.heads, self.ch).mean(0)
        return {"weight": self.conv.fc.weight, "att_src": self.conv.attn_l,
                "att_dst": self.conv.attn_r, "bias": bias}

    def load(self, p: dict) -> None:
        _copy(self.conv.fc.weight, p["weight"])
        _copy(self.conv.attn_l, p["att_src"])
        _copy(self.conv.attn_r, p["att_dst"])
        b = p["bias"]
        if not self.concat:
            b = b.reshape(1, -1).expand(self.heads, -1)
        _copy(self.conv.bias, b)


class GCN2Conv(nn.Module):
    """GCNII layer with ``dgl.nn.GCN2Conv``'s parameters and update rule."""

    def __init__(self, dim: int, alpha: float, lam: float, layer: int):
        super().__init__()
        self.conv = dglnn.GCN2Conv(dim, layer, alpha=alpha, lambda_=lam,
                                   project_initial_features=True, allow_zero_in_degree=True,
                                   bias=False)
        # Weightless, unnormalised GraphConv: pure weighted aggregation on the block.
        self.agg = dglnn.GraphConv(dim, dim, norm="none", weight=False, bias=False,
                                   allow_zero_in_degree=True)

    def forward(self, block: Block, h_src: Tensor, h0: Tensor) -> Tensor:
        g = block.dgl_block(self_loops=True)
        agg = self.agg(g, (h_src, h_src[block.dst_in_src]), edge_weight=_gcn_edge_weight(block))
        alpha, beta = self.conv.alpha, self.conv.beta
        h = agg * (1.0 - alpha) + h0 * alpha
        return (1.0 - beta) * h + beta * (h @ self.conv.weight1)

    def export(self) -> dict:
        return {"weight1": self.conv.weight1}

    def load(self, p: dict) -> None:
        _copy(self.conv.weight1, p["weight1"])
