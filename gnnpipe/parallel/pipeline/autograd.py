"""The autograd pieces a pipeline stage builds its chunks' graphs from.

A stage keeps, between a chunk's forward and its backward, only what autograd itself needs:
rows that enter the graph from outside (received activations, neighbour rows read from
history) come in through :class:`Sunk`, whose gradient lands in a :class:`GradSink` instead
of a leaf's ``.grad`` (a leaf and its data would stay alive until the backward); the fresh
cross-chunk gradient is added at backward time by :class:`InjectGrad`; a stage's outputs
are stood for by a 0-d :class:`Root` that hands them the next stage's gradient.
"""

from __future__ import annotations

import torch


class GradSink:
    """Receives the gradient of rows that entered autograd through :class:`Sunk`."""

    __slots__ = ("anchor", "grad")

    def __init__(self) -> None:
        self.anchor = torch.empty(0, requires_grad=True)
        self.grad: torch.Tensor | None = None


class Sunk(torch.autograd.Function):
    """Rows made by ``make()`` (or the tensor ``x``) whose gradient lands in a :class:`GradSink`.

    A requires-grad leaf would do the same, but autograd keeps a leaf (and its data) alive
    until the backward; here nothing is kept: whether the rows stay alive is up to the
    units that read them. Used for a chunk's neighbour rows gathered from history (m·d_in
    values per unit and chunk) and for the activations a stage receives. The gradient is
    the same tensor the leaf's ``.grad`` would hold.
    """

    @staticmethod
    def forward(ctx, anchor, x, make, sink):  # type: ignore[override]
        ctx.sink = sink
        return x.view_as(x) if x is not None else make()

    @staticmethod
    def backward(ctx, g):  # type: ignore[override]
        ctx.sink.grad = g if ctx.sink.grad is None else ctx.sink.grad + g
        return None, None, None, None


class InjectGrad(torch.autograd.Function):
    """Identity on a unit's input ``h`` of chunk ``k``; its backward adds the fresh
    cross-chunk gradient ``G_u[chunk rows] · grad_scale``, read at backward time (``G_u``
    changes only after a chunk's backward, so this equals injecting it as an extra
    backward root when the backward starts, without keeping ``h`` alive until then)."""

    @staticmethod
    def forward(ctx, h, stage, pos, k):  # type: ignore[override]
        ctx.stage, ctx.pos, ctx.k = stage, pos, k
        return h.view_as(h)

    @staticmethod
    def backward(ctx, g):  # type: ignore[override]
        return ctx.stage._fresh_grad(ctx.pos, ctx.k, g), None, None, None


class Root(torch.autograd.Function):
    """A 0-d backward root standing for a stage's chunk outputs: its backward hands each
    output the gradient put in ``box`` (the next stage's), so the stage keeps this root
    until the chunk's backward instead of the outputs and their data."""

    @staticmethod
    def forward(ctx, box, *outs):  # type: ignore[override]
        ctx.box = box
        return outs[0].new_zeros(())

    @staticmethod
    def backward(ctx, _g):  # type: ignore[override]
        grads = ctx.box
        ctx.box = None
        return (None, *grads)
