"""Layer-wise model units: the slices of a model that executors run on any block.

A model is a flat list of units. An aggregating unit needs a :class:`Block` and the
unit's input rows for every src node of the block (``h_src``); a non-aggregating unit is
row-wise and needs only the dst rows. Dropout is applied to a unit's input with masks keyed
by ``(seed, epoch, unit index, global node id, column)`` (:func:`ops.hashed_dropout`), so a
node gets the same mask however the graph is split.

Cross-layer tensors travel in ``carry`` (dst rows only): GCNII's input unit writes ``h0``
and every GCNII layer reads it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from gnnpipe.models import ops
from gnnpipe.models.block import Block


@dataclass
class RunCtx:
    """Per-call context of a forward pass.

    Args:
        training: apply dropout.
        epoch: the epoch number (part of the dropout stream).
        seed: the run's seed (part of the dropout stream).
        masks: where dropout takes its keep-masks from (a pipeline stage's
            :class:`~gnnpipe.models.ops.KeepMaskCache`: the same masks, each node hashed
            once per unit and epoch); None hashes each call's rows.
    """

    training: bool
    epoch: int = 0
    seed: int = 0
    masks: ops.KeepMaskCache | None = None


class Unit(nn.Module):
    """One slice of a model (see the module docstring).

    Attributes:
        aggregates: True when the unit needs a block and ``h_src``.
        index: position in the model's unit list (selects the dropout stream).
        in_dim, out_dim: input and output widths.
        carry_keys: names of the cross-layer tensors it reads or writes.
        carry_writes: the names among them it writes (a stage hands a written tensor on
            as soon as the stage's last writer of it has run: ``parallel/pipeline/carry.py``).
    """

    aggregates: bool = False
    carry_keys: tuple = ()
    carry_writes: tuple = ()

    def __init__(self, index: int, in_dim: int, out_dim: int, dropout: float):
        super().__init__()
        self.index, self.in_dim, self.out_dim, self.p = index, in_dim, out_dim, dropout

    def drop(self, h: Tensor, gid: Tensor | None, ctx: RunCtx) -> Tensor:
        """Hashed dropout of rows ``h`` whose global ids are ``gid``."""
        if not ctx.training or self.p <= 0.0:
            return h
        if gid is None:
            raise ValueError(
                f"unit {self.index} ({type(self).__name__}): training-mode dropout needs the "
                "block (its dst_gid keys the masks); pass block= to every unit"
            )
        return ops.hashed_dropout(h, gid, self.p, ctx.seed, ctx.epoch, self.index, masks=ctx.masks)

    def _src(self, h_dst: Tensor, block: Block | None, h_src: Tensor | None) -> Tensor:
        if block is None:
            raise ValueError(f"unit {self.index} ({type(self).__name__}) aggregates: it needs a block")
        if h_src is None:
            # Only valid for a square block whose src rows are its dst rows in order.
            if block.num_src != block.num_dst:
                raise ValueError(f"unit {self.index}: h_src is required for a non-square block")
            return h_dst
        return h_src

    def forward(self, h_dst: Tensor, carry: dict, ctx: RunCtx, block: Block | None = None,
                h_src: Tensor | None = None) -> tuple[Tensor, dict]:
        """Compute this unit's output rows for the block's dst nodes.

        Args:
            h_dst: [num_dst, in_dim] input rows of the dst nodes (dense or sparse CSR).
            carry: dict of dst-row tensors (e.g. ``"h0"`` [num_dst, d]).
            ctx: training flag, epoch and seed.
            block: the block (required when aggregating, and for training-mode dropout).
            h_src: [num_src, in_dim] input rows of all src nodes, with
                ``h_src[block.dst_in_src] == h_dst`` (aggregating units use it).

        Returns:
            ``(out [num_dst, out_dim], carry)``.
        """
        raise NotImplementedError

    def convs(self) -> list[nn.Module]:
        """Backend adapters (with ``export``/``load``) this unit owns, in a fixed order."""
        return []


def _gid(block: Block | None, src: bool) -> Tensor | None:
    if block is None:
        return None
    return block.src_gid if src else block.dst_gid


class ConvUnit(Unit):
    """dropout → graph conv → activation (GCN, GraphSAGE, GAT layers)."""

    aggregates = True

    def __init__(self, index, in_dim, out_dim, dropout, conv: nn.Module, act: str | None):
        super().__init__(index, in_dim, out_dim, dropout)
        self.conv = conv
        self.act = act

    def forward(self, h_dst, carry, ctx, block=None, h_src=None):
        hs = self.drop(self._src(h_dst, block, h_src), _gid(block, True), ctx)
        return self._activate(self.conv(block, hs)), carry

    def _activate(self, out: Tensor) -> Tensor:
        if self.act == "relu":
            return ops.relu(out)  # keeps 1 bit per value for backward, not the float output
        if self.act == "elu":
            return nn.functional.elu(out)
        return out

    # The transform-first split. A conv that transforms its input row by row before it
    # aggregates (GCN/SAGE wider in than out, GAT) computes the same rows of ``drop(h) W``
    # for every block that reads a node; a caller that runs many blocks over the same
    # input rows with the same weights (a pipeline stage's chunks over the input features)
    # can transform every row once and hand each block its rows:
    # ``forward(h_dst, carry, ctx, block, h_src)`` equals
    # ``forward_transformed(z[rows], carry, ctx, block)`` with
    # ``z = transform_input(x, gid, ctx)`` and ``h_src = x[rows]``, ``gid`` x's global ids.
    def can_transform_input(self, h: Tensor) -> bool:
        """Whether :meth:`transform_input` applies to inputs like ``h`` (dense rows of
        ``in_dim``): the conv offers the split and transforms such input first."""
        f = getattr(self.conv, "transforms_first", None)
        return f is not None and h.layout == torch.strided and bool(f(h))

    @property
    def transformed_dim(self) -> int:
        """The width of :meth:`transform_input`'s rows."""
        return self.conv.transformed_dim

    def transform_input(self, h: Tensor, gid: Tensor, ctx: RunCtx) -> Tensor:
        """``drop(h) W`` for rows ``h`` whose global ids are ``gid`` (the dropout masks
        are the per-node ones every block would draw)."""
        return self.conv.transform(self.drop(h, gid, ctx))

    def forward_transformed(self, z_src: Tensor, carry: dict, ctx: RunCtx, block: Block) -> tuple[Tensor, dict]:
        """:meth:`forward` on the block's src rows already through :meth:`transform_input`."""
        return self._activate(self.conv.propagate(block, z_src)), carry

    def convs(self):
        return [self.conv]


class InputLinear(Unit):
    """dropout → Linear (→ ReLU); GCNII's writes ``carry["h0"]``."""

    def __init__(self, index, in_dim, out_dim, dropout, relu: bool, write_h0: bool):
        super().__init__(index, in_dim, out_dim, dropout)
        self.lin = nn.Linear(in_dim, out_dim)
        self.relu, self.write_h0 = relu, write_h0
        self.carry_keys = self.carry_writes = ("h0",) if write_h0 else ()
        # the carry keys whose rows are transform_input's (its output): a pipeline stage may
        # compute them from the features itself (``--local-carry``)
        self.carry_from_input = self.carry_writes
        self._xt = ops.CsrTranspose()  # transform_input's, for sparse rows given again each epoch

    def forward(self, h_dst, carry, ctx, block=None, h_src=None):
        x = self.drop(h_dst, _gid(block, False), ctx)
        tr = None
        if block is not None and block.num_src == block.num_dst:
            tr = block.sparse_transpose_for  # sparse x rows are the block's rows
        out = ops.linear(x, self.lin.weight, self.lin.bias, tr)
        if self.relu:
            out = ops.relu(out)
        if self.write_h0:
            carry = {**carry, "h0": out}
        return out, carry

    # The transform-first split (see ConvUnit) of a row-wise unit: the whole unit is its own
    # transform, ``forward(x, carry, ctx, block)`` equals
    # ``forward_transformed(transform_input(x, block.dst_gid, ctx), carry, ctx, block)``, so a
    # caller can run it on any rows (the shared input layer, ``--shared-input``).
    def can_transform_input(self, h: Tensor) -> bool:
        """Any input rows, dense or sparse CSR."""
        return True

    @property
    def transformed_dim(self) -> int:
        return self.out_dim

    def transform_input(self, h: Tensor, gid: Tensor, ctx: RunCtx) -> Tensor:
        """The unit's output rows for input rows ``h`` (dense or sparse CSR) whose global
        ids are ``gid``."""
        tr = self._xt if h.layout == torch.sparse_csr else None
        out = ops.linear(self.drop(h, gid, ctx), self.lin.weight, self.lin.bias, tr)
        return ops.relu(out) if self.relu else out

    def forward_transformed(self, z: Tensor, carry: dict, ctx: RunCtx, block: Block | None = None) -> tuple[Tensor, dict]:
        """:meth:`forward` on rows already through :meth:`transform_input`."""
        return z, ({**carry, "h0": z} if self.write_h0 else carry)


class OutputLinear(Unit):
    """(LayerNorm → ReLU →) dropout → Linear."""

    def __init__(self, index, in_dim, out_dim, dropout, pre_norm: bool):
        super().__init__(index, in_dim, out_dim, dropout)
        self.norm = nn.LayerNorm(in_dim) if pre_norm else None
        self.lin = nn.Linear(in_dim, out_dim)

    def forward(self, h_dst, carry, ctx, block=None, h_src=None):
        h = h_dst
        if self.norm is not None:
            h = ops.relu(self.norm(h))
        h = self.drop(h, _gid(block, False), ctx)
        return self.lin(h), carry


class GCNIIUnit(Unit):
    """dropout → GCNII conv (initial residual ``carry["h0"]``, identity mapping) → ReLU."""

    aggregates = True
    carry_keys = ("h0",)

    def __init__(self, index, dim, dropout, conv: nn.Module):
        super().__init__(index, dim, dim, dropout)
        self.conv = conv

    def forward(self, h_dst, carry, ctx, block=None, h_src=None):
        if "h0" not in carry:
            raise ValueError(f"unit {self.index} (GCNII layer): carry lacks 'h0' (run the input unit first)")
        hs = self.drop(self._src(h_dst, block, h_src), _gid(block, True), ctx)
        return ops.relu(self.conv(block, hs, carry["h0"])), carry

    def convs(self):
        return [self.conv]


class ResPlusUnit(Unit):
    """DeeperGCN res+: h_v + conv(dropout(ReLU(LayerNorm(h))))_v.

    LayerNorm, not BatchNorm: batch statistics over "all nodes of the batch" would differ
    between partitions and chunks and break exactness; LayerNorm is per node.
    """

    aggregates = True

    def __init__(self, index, dim, dropout, conv: nn.Module):
        super().__init__(index, dim, dim, dropout)
        self.norm = nn.LayerNorm(dim)
        self.conv = conv

    def forward(self, h_dst, carry, ctx, block=None, h_src=None):
        hs = self._src(h_dst, block, h_src)
        z = self.drop(ops.relu(self.norm(hs)), _gid(block, True), ctx)
        return hs[block.dst_in_src] + self.conv(block, z), carry

    def convs(self):
        return [self.conv]
