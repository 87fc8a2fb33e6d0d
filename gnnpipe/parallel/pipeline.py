"""GNNPipe pipelined model parallelism: stage runtime, history buffers, the executor.

Each rank (stage) owns a contiguous block of the model's units and runs it over the whole
graph, chunk by chunk. Only chunk activations (and GCNII's ``h0``, which every GCNII layer
needs) travel forward to the next stage, and their gradients travel back. No halo exchange.

Semantics of one epoch (identical on every stage; :mod:`gnnpipe.parallel.reference` is an
independent one-process implementation of the same rules, used as the tests' oracle):

1. **Chunk order.** ``order = chunk_order(C, epoch, seed, shuffle)``: every chunk forward in
   that order, then every chunk backward in reverse (one flush per epoch).
2. **Historical embeddings.** Each aggregating unit ``u`` keeps ``H_u`` [N, d_in]: the input
   rows of every node. Forward of chunk ``c`` first writes its own input rows into ``H_u``,
   then aggregates from its own rows (fresh, differentiable) and from ``H_u`` for its
   out-of-chunk neighbours: fresh if their chunk already ran this epoch, one epoch old
   otherwise. A unit whose input is the constant input features needs no history.
3. **Cross-chunk gradients** (``grad_fix``, on by default). The gradient that chunk ``c``'s
   backward sends to a neighbour row of another chunk ``c'`` is accumulated in ``G_u``; when
   ``c'`` runs backward later in the same epoch (it ran forward earlier, so it was *fresh* for
   ``c``) that accumulated gradient, multiplied by ``grad_scale`` (2, as the authors: a
   neighbour is fresh with probability about 1/2), is injected at ``u``'s input for ``c'``.
   Gradients that reach chunks whose backward already ran (they were *stale* for ``c``) are
   dropped when ``G_u`` is cleared at the end of the epoch. With ``grad_fix`` off, no
   gradient crosses chunks (neighbour rows are constants, as in plain historical-embedding
   methods).
4. **Snapshot** (period ``K``; 0 = off). At the end of every epoch ``e`` with ``(e+1) % K ==
   0`` the history buffers are copied into a snapshot; at the start of every later epoch the
   buffers are restored from it, so stale rows come from one consistent model state.
5. **Exact mode.** One chunk spanning the whole graph: every aggregation sees current-epoch
   inputs, no history is read, and the result equals the one-process full-graph run (stages
   then cannot overlap within the epoch).

Weight gradients accumulate over the chunks; each stage steps its optimizer once per epoch.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
import torch

from gnnpipe import GnnpipeError
from gnnpipe.dims import ParallelDims
from gnnpipe.models import RunCtx, accuracy_counts, loss_fn
from gnnpipe.parallel.chunks import ChunkInfo, feature_rows
from gnnpipe.parallel.executor import (EpochResult, Executor, StaleOptions, allreduce_grads, reduce_accuracies,
                                       split_counts, wait_seconds)
from gnnpipe.parallel.halo import HaloExchanger, with_halo
from gnnpipe.schedule import ActionKind, chunk_order, gnnpipe_schedule, lower

log = logging.getLogger(__name__)

# Chunk messages use tags 2k (activations) and 2k+1 (gradients); evaluation uses its own.
_EVAL_TAG = 30000


def carry_keys_after(units, start: int) -> tuple[str, ...]:
    """Cross-layer tensors that units from ``start`` on read (must travel with the chunk)."""
    keys: list[str] = []
    for u in list(units)[start:]:
        for k in getattr(u, "carry_keys", ()) or ():
            if k not in keys:
                keys.append(k)
    return tuple(keys)


def _is_dense(x) -> bool:
    return x is not None and not sp.issparse(x) and not (isinstance(x, torch.Tensor) and x.layout != torch.strided)


class _GradSink:
    """Receives the gradient of rows that entered autograd through :class:`_Sunk`."""

    __slots__ = ("anchor", "grad")

    def __init__(self) -> None:
        self.anchor = torch.empty(0, requires_grad=True)
        self.grad: torch.Tensor | None = None


class _Sunk(torch.autograd.Function):
    """Rows made by ``make()`` (or the tensor ``x``) whose gradient lands in a :class:`_GradSink`.

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


class _InjectGrad(torch.autograd.Function):
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


class _Root(torch.autograd.Function):
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


def _acc_rows(buf: torch.Tensor, ids: torch.Tensor, rows: torch.Tensor) -> None:
    """``buf[ids] += rows`` (``ids`` unique); a low-precision ``buf`` adds in float32 and
    rounds once."""
    if buf.dtype == rows.dtype == torch.float32:
        buf.index_add_(0, ids, rows)
    elif ids.numel():
        buf.index_copy_(0, ids, buf.index_select(0, ids).float().add_(rows.float()).to(buf.dtype))


@dataclass
class _ChunkState:
    nbr_leaves: list = field(default_factory=list)  # (unit position, _GradSink of neighbour rows)
    h_in: _GradSink | None = None                   # gradient of the received rows
    carry_in: dict = field(default_factory=dict)    # key -> _GradSink
    h_in_shape: tuple = ()
    root: torch.Tensor | None = None                # _Root over the outputs (not on the last stage)
    out_req: list = field(default_factory=list)     # which outputs the root stands for: None (h) / carry keys
    box: list = field(default_factory=list)         # their gradients, filled at backward
    loss: torch.Tensor | None = None


@dataclass(eq=False)
class WayLink:
    """How one stage of one way reaches the same stage of the other ways (hybrid mode).

    Every way processes its local chunk ``k`` at the same slot of the epoch (one chunk order
    for all), so at each aggregating unit the ways exchange, for chunk ``k``, the boundary rows
    of their history buffers (fresh for chunks already processed this epoch, this slot
    included, stale otherwise), and in backward the gradients of those rows go back to their
    owners' cross-chunk gradient buffers (visible from the next slot on, like every other
    cross-chunk gradient).

    A way's history and gradient buffers hold only its own part's rows (row ``i - lo`` is
    node ``i``): it writes no other rows, and the other ways' rows it reads are received
    for the chunk that reads them, so they need not persist.

    Attributes:
        comm: the stage communicator (rank = way).
        lo, hi: this way's part (relabelled id range).
        recv_ids[k][q]: ids of way q's part that local chunk k of this way needs (sorted).
        recv_pos[k][q]: their positions in chunk k's ``nbr_ids``.
        send_ids[k][q]: ids of this way's part that chunk k of way q needs (sorted).
        own_pos[k] / own_rows[k]: positions in chunk k's ``nbr_ids`` of this part's ids, and
            their rows in this way's buffers.
        exchanger: exact mode: the autograd halo exchange of the whole part.
    """

    comm: object
    lo: int
    hi: int
    recv_ids: list
    recv_pos: list
    send_ids: list
    own_pos: list = field(default_factory=list)
    own_rows: list = field(default_factory=list)
    exchanger: object = None

    @property
    def rows(self) -> int:
        return self.hi - self.lo

    def gather(self, hist: torch.Tensor, k: int, m: int, category: str = "halo_fwd") -> torch.Tensor:
        """float32 [m, d] chunk k's neighbour rows: this part's from ``hist``, the others'
        from their owners' buffers (one all-to-all)."""
        d = hist.shape[1]
        send = [hist.index_select(0, ids - self.lo) for ids in self.send_ids[k]]
        recv = [hist.new_empty((ids.numel(), d)) for ids in self.recv_ids[k]]
        self.comm.all_to_all(send, recv, category=category)
        out = torch.empty((m, d), dtype=torch.float32)
        out.index_copy_(0, self.own_pos[k], hist.index_select(0, self.own_rows[k]).float())
        for pos, rows in zip(self.recv_pos[k], recv):
            if pos.numel():
                out.index_copy_(0, pos, rows.float())
        return out

    def return_grads(self, gacc: torch.Tensor, grad: torch.Tensor, k: int) -> None:
        """This part's rows of ``grad`` (chunk k's neighbour rows) into ``gacc``; the
        others to their owners' ``gacc``."""
        _acc_rows(gacc, self.own_rows[k], grad.index_select(0, self.own_pos[k]))
        d = gacc.shape[1]
        send = [grad.index_select(0, pos).to(gacc.dtype) for pos in self.recv_pos[k]]
        recv = [gacc.new_empty((ids.numel(), d)) for ids in self.send_ids[k]]
        self.comm.all_to_all(send, recv, category="halo_bwd")
        for ids, rows in zip(self.send_ids[k], recv):
            if ids.numel():
                _acc_rows(gacc, ids - self.lo, rows)


def build_way_link(cross, plan, chunks_all: list, way: int, chunks_per_way: int, exact: bool) -> WayLink:
    """The :class:`WayLink` of ``way`` from every way's chunks (all ranks know the plan)."""
    D, C = plan.num_parts, chunks_per_way
    part_ptr = np.asarray(plan.part_ptr, dtype=np.int64)
    lo, hi = int(part_ptr[way]), int(part_ptr[way + 1])

    def by_owner(ids: np.ndarray) -> list[np.ndarray]:
        owner = np.searchsorted(part_ptr, ids, side="right") - 1
        return [ids[owner == q] for q in range(D)]

    recv_ids, recv_pos, send_ids, own_pos, own_rows = [], [], [], [], []
    for k in range(C):
        mine = chunks_all[way * C + k].nbr_ids.numpy()
        groups = by_owner(mine)
        own = np.flatnonzero((mine >= lo) & (mine < hi))
        own_pos.append(torch.from_numpy(own))
        own_rows.append(torch.from_numpy(mine[own] - lo))
        groups[way] = groups[way][:0]
        recv_ids.append([torch.from_numpy(g) for g in groups])
        recv_pos.append([torch.from_numpy(np.searchsorted(mine, g)) for g in groups])
        sends = []
        for q in range(D):
            theirs = chunks_all[q * C + k].nbr_ids.numpy()
            sends.append(torch.from_numpy(theirs[(theirs >= lo) & (theirs < hi)] if q != way else theirs[:0]))
        send_ids.append(sends)
    link = WayLink(cross, lo, hi, recv_ids, recv_pos, send_ids, own_pos, own_rows)
    if exact:
        if C != 1:
            raise GnnpipeError("internal: exact hybrid runs one chunk per way")
        link.exchanger = HaloExchanger(cross, hi - lo, [(ids - lo).numpy() for ids in send_ids[0]],
                                       [ids.numel() for ids in recv_ids[0]])
    return link


class PipelineStage:
    """Compute of one stage: its units, history buffers and cross-chunk gradient buffers.

    No communication: the executor moves tensors between stages; the one-process reference
    and tests can drive it directly.

    Args:
        units: this stage's units (a slice of ``model.units``), in order.
        first_unit: index of ``units[0]`` in the whole model (0 means the stage reads features).
        chunks: every chunk's :class:`ChunkInfo`.
        num_nodes: N.
        x: input features (only used when ``first_unit == 0``): dense [N, F] tensor, or scipy
            CSR / dense ndarray.
        labels, train_mask: only used on the last stage (``is_last``).
        num_train_global: loss normaliser (training nodes in the whole graph).
        carry_out_keys: carry tensors to hand to the next stage.
        way: hybrid mode: this stage's link to the other ways (None for one way).
        hist_dtype: storage dtype of the history, cross-chunk gradient and snapshot buffers
            (reads upcast to float32, writes round).

    Buffers per aggregating unit ``u`` whose input is trained (``R`` rows: N, or a hybrid
    way's own part): ``H_u`` [R, d_in] always; ``G_u`` during the backward phase; ``S_u``
    once a snapshot exists. While no snapshot exists ``H_u`` must survive into the next
    epoch, so ``G_u`` is a buffer of its own; once one exists ``H_u`` is dead from the end
    of the forward phase (the next epoch restores it from ``S_u``), so ``G_u`` reuses its
    storage and the snapshot is taken at the end of the forward phase (``H_u`` is not
    written in backward, so this equals taking it at the end of the epoch). Two buffers per
    unit at any time.
    """

    def __init__(self, units, first_unit: int, chunks: list[ChunkInfo], num_nodes: int, x,
                 labels, train_mask, masks: dict, num_train_global: int, is_last: bool,
                 opts: StaleOptions, seed: int, multilabel: bool = False,
                 carry_out_keys: tuple = (), way: WayLink | None = None,
                 hist_dtype: torch.dtype = torch.float32, x_rows: np.ndarray | None = None) -> None:
        self.units = list(units)
        self.way = way
        self.first_unit = first_unit
        self.chunks = chunks
        self.N = int(num_nodes)
        self.is_last = is_last
        self.opts = opts
        self.seed = seed
        self.multilabel = multilabel
        self.num_train_global = max(int(num_train_global), 1)
        self.carry_out_keys = tuple(carry_out_keys)
        self.labels = torch.as_tensor(np.asarray(labels)) if labels is not None else None
        self.masks = {k: torch.as_tensor(np.asarray(v, dtype=bool)) for k, v in masks.items()}
        self.train_mask = self.masks.get("train") if train_mask is None else torch.as_tensor(np.asarray(train_mask, dtype=bool))
        # Units whose input is the constant features (only unit 0 of the model) need no history.
        # Row r of a buffer is node row0 + r: every node with one way, a way's own part in
        # hybrid mode (see WayLink).
        self.hist_dtype = hist_dtype
        stale_way = way is not None and way.exchanger is None
        self.row0 = way.lo if stale_way else 0
        self.rows = way.rows if stale_way else self.N
        self.hist: dict[int, torch.Tensor] = {}
        self.gacc: dict[int, torch.Tensor] = {}  # G_u; aliases H_u in the backward phase once a snapshot exists
        self.snap: dict[int, torch.Tensor] | None = None
        self._backward_phase = False
        needs_history = any(ch.nbr_ids.numel() for ch in chunks) and not (way is not None and way.exchanger is not None)
        for pos, u in enumerate(self.units):
            if u.aggregates and not (first_unit == 0 and pos == 0) and (needs_history or stale_way):
                self.hist[pos] = torch.zeros(self.rows, u.in_dim, dtype=hist_dtype)
                if opts.grad_fix:
                    self.gacc[pos] = torch.zeros(self.rows, u.in_dim, dtype=hist_dtype)
        self.x_dst: list = []
        self.x_src: list = []
        # Dense features stay one [N, F] tensor: a chunk's dst rows are a view of it and its
        # src rows are gathered when the chunk runs (keeping every chunk's src rows would
        # hold Σ_k |src(k)| ≈ 3-5·N rows). Sparse features keep per-chunk copies.
        # ``x_rows`` (sorted relabelled ids of x's rows; None: all N) lets a hybrid way hold
        # only the rows its chunks read.
        self.x: torch.Tensor | None = None
        self.x_src_ids: list = []  # per chunk, the rows of ``self.x`` its first unit reads
        self.x_dst_off: list = []  # per chunk, the row of ``self.x`` of its first node

        def pos(ids):
            ids = np.asarray(ids, dtype=np.int64)
            return ids if x_rows is None else np.searchsorted(x_rows, ids)

        if first_unit == 0 and _is_dense(x):
            self.x = x if isinstance(x, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(np.asarray(x), dtype=np.float32))
            self.x_src_ids = [torch.from_numpy(pos(ch.src_ids().numpy())) for ch in chunks]
            self.x_dst_off = [int(pos([ch.lo])[0]) for ch in chunks]
        elif first_unit == 0:
            for ch in chunks:
                ids = np.arange(ch.lo, ch.hi, dtype=np.int64)
                self.x_dst.append(feature_rows(x, pos(ids)))
                if self.units[0].aggregates:
                    self.x_src.append(feature_rows(x, pos(np.concatenate([ids, ch.nbr_ids.numpy()]))))
        self.state: dict[int, _ChunkState] = {}
        self.epoch = 0

    def x_dst_rows(self, k: int) -> torch.Tensor:
        """Chunk k's own feature rows (first stage)."""
        if self.x is None:
            return self.x_dst[k]
        off = self.x_dst_off[k]
        return self.x[off : off + self.chunks[k].size]

    def x_src_rows(self, k: int) -> torch.Tensor:
        """Chunk k's feature rows of its block's sources (first stage)."""
        return self.x_src[k] if self.x is None else self.x.index_select(0, self.x_src_ids[k])

    @property
    def in_dim(self) -> int:
        return self.units[0].in_dim

    @property
    def out_dim(self) -> int:
        return self.units[-1].out_dim

    # ------------------------------------------------------------------ epoch
    def begin_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        self.state.clear()
        self._backward_phase = False
        if self.snap is not None:
            self.gacc = {}  # G_u lives in H_u's storage during the backward phase only
            for pos, h in self.hist.items():
                h.copy_(self.snap[pos])

    def begin_backward(self) -> None:
        """The turn from the forward to the backward phase (every stage runs all its
        forwards before any backward): snapshot epochs take S ← H here; once a snapshot
        exists, G_u takes over H_u's storage, zeroed."""
        if self._backward_phase:
            return
        self._backward_phase = True
        k = self.opts.snapshot_period
        if k and (self.epoch + 1) % k == 0 and self.hist:
            if self.snap is None:
                self.gacc = {}  # the separate G buffers are all zero here: G is written only in backward
                self.snap = {pos: h.clone() for pos, h in self.hist.items()}
            else:
                for pos, h in self.hist.items():
                    self.snap[pos].copy_(h)
        if self.snap is not None and self.opts.grad_fix:
            self.gacc = {pos: h.zero_() for pos, h in self.hist.items()}

    def end_epoch(self) -> None:
        self.begin_backward()  # (a no-op after any backward)
        if self.snap is not None:
            self.gacc = {}  # H_u's storage: restored from the snapshot by the next epoch
        for g in self.gacc.values():
            g.zero_()
        self.state.clear()
        self._backward_phase = False

    def set_snapshot(self, snap: dict | None) -> None:
        """Load a snapshot (checkpoint resume): copied into buffers of the history dtype."""
        if snap is None:
            self.snap = None
            return
        self.gacc = {}
        self.snap = {pos: torch.empty_like(self.hist[pos]).copy_(v) for pos, v in snap.items()}

    def _fresh_grad(self, pos: int, k: int, g: torch.Tensor) -> torch.Tensor:
        """``g`` plus chunk k's rows of G_u times grad_scale (see :class:`_InjectGrad`)."""
        ch = self.chunks[k]
        rows = self.gacc[pos][ch.lo - self.row0 : ch.hi - self.row0]
        return g + rows.float() * self.opts.grad_scale

    # ------------------------------------------------------------------ compute
    def forward_chunk(self, k: int, h_in: torch.Tensor | None, carry_in: dict, training: bool = True):
        """Run this stage's units on chunk ``k``.

        Args:
            h_in: [n_k, in_dim] the chunk's input rows (None on the first stage).
            carry_in: cross-layer tensors of the chunk's rows.
        Returns:
            (output rows [n_k, out_dim], carry dict); on the last stage the output is logits.
        """
        if training and self._backward_phase:
            # G may occupy H's storage from the turn on (see begin_backward)
            raise GnnpipeError(f"internal: forward of chunk {k} after this stage's backward phase began; "
                               "a stage must run all its forwards of an epoch before any backward")
        ch = self.chunks[k]
        ctx = RunCtx(training=training, epoch=self.epoch, seed=self.seed)
        st = _ChunkState()
        if self.first_unit == 0:
            h = self.x_dst_rows(k)
        elif training:
            st.h_in = _GradSink()
            st.h_in_shape = tuple(h_in.shape)
            h = _Sunk.apply(st.h_in.anchor, h_in.detach(), None, st.h_in)
        else:
            h = h_in
        carry = {}
        for key, t in carry_in.items():
            if training:
                sink = _GradSink()
                st.carry_in[key] = (sink, tuple(t.shape))
                carry[key] = _Sunk.apply(sink.anchor, t.detach(), None, sink)
            else:
                carry[key] = t
        r0 = self.row0
        for pos, u in enumerate(self.units):
            if u.aggregates:
                if self.first_unit == 0 and pos == 0:
                    h_src = self.x_src_rows(k)
                elif self.way is not None and self.way.exchanger is not None:
                    # exact hybrid: the whole part is one chunk; halo rows are exchanged fresh
                    # and their gradients return inside autograd, as in graph parallelism.
                    h_src = with_halo(h, self.way.exchanger)
                elif pos not in self.hist:  # one chunk spanning every node: nothing outside it
                    h_src = h
                else:
                    hist = self.hist[pos]
                    if training:
                        hist[ch.lo - r0 : ch.hi - r0] = h.detach()
                        if self.opts.grad_fix and h.requires_grad:
                            h = _InjectGrad.apply(h, self, pos, k)
                    m = ch.nbr_ids.numel()
                    if self.way is not None:
                        make = lambda hist=hist: self.way.gather(hist, k, m)  # noqa: E731
                    else:
                        make = lambda hist=hist: hist.index_select(0, ch.nbr_ids).float()  # noqa: E731
                    # With several ways every unit must take part in the backward exchange,
                    # even with no neighbour rows, so the collectives line up.
                    if training and self.opts.grad_fix and (m or self.way is not None):
                        sink = _GradSink()
                        nbr = _Sunk.apply(sink.anchor, None, make, sink)
                        st.nbr_leaves.append((pos, sink))
                    else:
                        nbr = make()
                    h_src = torch.cat([h, nbr], dim=0)
                h, carry = u(h, carry, ctx, block=ch.block, h_src=h_src)
            else:
                h, carry = u(h, carry, ctx, block=ch.block)
        carry_out = {key: carry[key] for key in self.carry_out_keys}
        if self.is_last and training:
            mask = self.train_mask[ch.lo : ch.hi]
            st.loss = loss_fn(h, self.labels[ch.lo : ch.hi], mask, multilabel=self.multilabel,
                              normalizer=self.num_train_global)
        elif training:
            outs = [(None, h)] + list(carry_out.items())
            outs = [(key, t) for key, t in outs if t.requires_grad]
            if outs:
                st.out_req = [key for key, _ in outs]
                st.box = []
                st.root = _Root.apply(st.box, *[t for _, t in outs])
        if training:
            self.state[k] = st
        return h, carry_out

    def backward_chunk(self, k: int, grad_out: torch.Tensor | None, grad_carry: dict):
        """Backward of chunk ``k``; returns (grad of the chunk's input rows, grads of carry_in)."""
        self.begin_backward()
        st = self.state.pop(k)
        ch = self.chunks[k]
        if self.is_last:
            torch.autograd.backward([st.loss], [torch.ones_like(st.loss)])
        elif st.root is not None:
            st.box.extend(grad_out if key is None else grad_carry.get(key) for key in st.out_req)
            torch.autograd.backward([st.root])
        for pos, sink in st.nbr_leaves:
            gacc = self.gacc[pos]
            if self.way is not None:
                grad = sink.grad if sink.grad is not None else torch.zeros(ch.nbr_ids.numel(), gacc.shape[1])
                self.way.return_grads(gacc, grad, k)
            elif sink.grad is not None:
                _acc_rows(gacc, ch.nbr_ids, sink.grad)  # one way: buffer row = node id (row0 is 0)
        grad_in = None
        if st.h_in is not None:
            grad_in = st.h_in.grad if st.h_in.grad is not None else torch.zeros(st.h_in_shape)
        gcarry = {}
        for key, (sink, shape) in st.carry_in.items():
            gcarry[key] = sink.grad if sink.grad is not None else torch.zeros(shape)
        loss = float(st.loss.detach()) if st.loss is not None else 0.0
        return grad_in, gcarry, loss

    def train_counts(self, k: int, logits: torch.Tensor) -> tuple[int, int]:
        ch = self.chunks[k]
        return accuracy_counts(logits.detach(), self.labels[ch.lo : ch.hi], self.train_mask[ch.lo : ch.hi],
                               multilabel=self.multilabel)


class PipelineExecutor(Executor):
    """Runs one stage of the pipeline on this rank and talks to its neighbour stages.

    Args:
        comm: communicator of this pipeline (ranks = stages, in order).
        cross: hybrid mode: the stage communicator across ways (weight all-reduce).
        world: the world communicator (evaluation counts); ``comm`` by default.
        stage: the :class:`PipelineStage` of this rank.
        model: the whole model (this rank only steps its own units' parameters).
        optimizer: over this stage's parameters.
        carry_in_keys / carry_dims: what arrives with each chunk from the previous stage.
    """

    def __init__(self, comm, stage: PipelineStage, params, optimizer, num_stages: int,
                 carry_in_keys: tuple, carry_dim: int, opts: StaleOptions, seed: int,
                 cross=None, world=None, dims: ParallelDims | None = None) -> None:
        self.comm = comm
        self.cross = cross
        self.world = world if world is not None else comm
        self.stage = stage
        self.params = list(params)
        self.opt = optimizer
        self.S = num_stages
        self.s = comm.rank
        self.carry_in_keys = tuple(carry_in_keys)
        self.carry_dim = carry_dim
        self.opts = opts
        self.seed = seed
        self.C = len(stage.chunks)
        ways = cross.world_size if cross is not None else 1
        self.dims = dims or ParallelDims("hybrid" if ways > 1 else "pipeline", ways=ways, stages=num_stages, chunks=self.C)

    # one message per chunk and direction: [h | carry...] concatenated along columns
    def _pack(self, h: torch.Tensor, carry: dict, keys: tuple) -> torch.Tensor:
        if not keys:
            return h.detach().contiguous()
        return torch.cat([h.detach()] + [carry[k].detach() for k in keys], dim=1).contiguous()

    def _unpack(self, buf: torch.Tensor, d: int, keys: tuple) -> tuple[torch.Tensor, dict]:
        h = buf[:, :d]
        carry = {}
        off = d
        for k in keys:
            carry[k] = buf[:, off : off + self.carry_dim]
            off += self.carry_dim
        return h, carry

    def _width(self, d: int, keys: tuple) -> int:
        return d + len(keys) * self.carry_dim

    def train_epoch(self, epoch: int) -> EpochResult:
        """Interpret this stage's lowered action list for one epoch.

        The list comes from :func:`gnnpipe.schedule.gnnpipe_schedule` lowered by
        :func:`gnnpipe.schedule.lower`: ``RECV_*`` waits for a receive that was posted at the
        start of the epoch (so transfers overlap compute), ``SEND_*`` posts a non-blocking
        send that is waited for only at the end of the epoch, ``F``/``B`` compute, ``OPT``
        steps the optimizer.
        """
        st = self.stage
        comm = self.comm
        t_start = time.perf_counter()
        wait0 = wait_seconds(comm)
        order = chunk_order(self.C, epoch, self.seed, self.opts.shuffle and not self.opts.exact)
        actions = lower(gnnpipe_schedule(self.S, order), self.S)[self.s]
        st.begin_epoch(epoch)
        for p in self.params:
            p.grad = None
        in_keys = self.carry_in_keys
        out_keys = st.carry_out_keys
        in_w = self._width(st.in_dim, in_keys)
        out_w = self._width(st.out_dim, out_keys)
        recvs: dict[tuple, tuple] = {}

        def post(kind) -> None:
            # Every receive of a phase is posted when the phase starts (transfers overlap
            # compute); a phase's buffers total N rows. The gradient receives wait for the
            # backward phase, so the two phases' buffers are not held together.
            for a in actions:
                if a.kind == kind == ActionKind.RECV_F:
                    buf = torch.empty(st.chunks[a.chunk].size, in_w)
                    recvs[("F", a.chunk)] = (buf, comm.irecv(buf, a.peer, tag=2 * a.chunk))
                elif a.kind == kind == ActionKind.RECV_B:
                    buf = torch.empty(st.chunks[a.chunk].size, out_w)
                    recvs[("B", a.chunk)] = (buf, comm.irecv(buf, a.peer, tag=2 * a.chunk + 1))

        post(ActionKind.RECV_F)
        b_posted = False
        sends = []
        inbox: dict[tuple, tuple] = {}
        outbox: dict[tuple, torch.Tensor] = {}
        bubble = 0.0
        correct = total = 0
        loss = 0.0
        for a in actions:
            k = a.chunk
            if not b_posted and a.kind in (ActionKind.RECV_B, ActionKind.B):
                b_posted = True
                post(ActionKind.RECV_B)
            if sends:  # a completed send's buffer is freed now, not at the epoch's end
                live = []
                for w in sends:
                    if w.is_completed():
                        w.wait()
                    else:
                        live.append(w)
                sends = live
            if a.kind in (ActionKind.RECV_F, ActionKind.RECV_B):
                tag = "F" if a.kind == ActionKind.RECV_F else "B"
                buf, work = recvs.pop((tag, k))
                t0 = time.perf_counter()
                work.wait()
                bubble += time.perf_counter() - t0
                d = st.in_dim if tag == "F" else st.out_dim
                inbox[(tag, k)] = self._unpack(buf, d, in_keys if tag == "F" else out_keys)
            elif a.kind == ActionKind.F:
                h_in, carry = inbox.pop(("F", k), (None, {}))
                out, cout = st.forward_chunk(k, h_in, carry)
                self._emit(out.detach())
                if st.is_last:
                    c, t = st.train_counts(k, out)
                    correct += c
                    total += t
                else:
                    outbox[("F", k)] = self._pack(out, cout, out_keys)
            elif a.kind == ActionKind.B:
                g_out, gcarry = inbox.pop(("B", k), (None, {}))
                g_in, g_cin, l = st.backward_chunk(k, g_out, gcarry)
                loss += l
                if self.s > 0:
                    outbox[("B", k)] = self._pack(g_in, g_cin, in_keys)
            elif a.kind == ActionKind.SEND_F:
                sends.append(comm.isend(outbox.pop(("F", k)), a.peer, tag=2 * k, category="pipe_act"))
            elif a.kind == ActionKind.SEND_B:
                sends.append(comm.isend(outbox.pop(("B", k)), a.peer, tag=2 * k + 1, category="pipe_grad"))
            elif a.kind == ActionKind.OPT:
                t0 = time.perf_counter()
                for w in sends:
                    w.wait()
                bubble += time.perf_counter() - t0
                sends.clear()
                allreduce_grads(self.params, self.cross)  # across ways: the same stage's layers
                self.opt.step()
            else:  # pragma: no cover - the generator emits no other kinds
                raise GnnpipeError(f"stage {self.s}: cannot execute schedule action {a}")
        st.end_epoch()
        wall = time.perf_counter() - t_start
        comm_s = (wait_seconds(comm) - wait0) if hasattr(comm, "stats") else bubble
        return EpochResult(loss, correct, total, wall - comm_s, comm_s, bubble)

    def state_dict(self) -> dict:
        """This stage's parameters, optimizer, and what the next epoch reads of the history:
        the snapshot when one exists (the next epoch restores the history from it; between
        epochs the history's storage holds the last backward's cross-chunk gradients), the
        history buffers otherwise.

        Cross-chunk gradient buffers are empty between epochs and chunk order and dropout
        are pure functions of (seed, epoch), so this is everything a resume needs.
        """
        st = self.stage
        return {
            "kind": "pipeline",
            "first_unit": st.first_unit,
            "units": [u.state_dict() for u in st.units],
            "opt": self.opt.state_dict() if hasattr(self.opt, "state_dict") else {},
            # with a snapshot the next epoch restores the history from it: H is not needed
            "hist": {k: v.clone() for k, v in st.hist.items()} if st.snap is None else {},
            "snap": None if st.snap is None else {k: v.clone() for k, v in st.snap.items()},
        }

    def load_state_dict(self, state: dict) -> None:
        st = self.stage
        if state.get("first_unit") != st.first_unit or len(state["units"]) != len(st.units):
            raise GnnpipeError(
                f"checkpoint holds units from {state.get('first_unit')} ({len(state['units'])} units) "
                f"but this stage runs units from {st.first_unit} ({len(st.units)} units)"
            )
        for u, sd in zip(st.units, state["units"]):
            u.load_state_dict(sd)
        if hasattr(self.opt, "load_state_dict"):
            self.opt.load_state_dict(state["opt"])
        for k, v in state["hist"].items():
            st.hist[k].copy_(v)
        st.set_snapshot(state["snap"])

    @torch.no_grad()
    def evaluate(self, epoch: int) -> dict:
        """Exact full-graph inference, unit by unit and chunk by chunk over the training
        chunks' blocks: every unit's input rows of the whole part (the whole graph with one
        way) are computed before the unit runs, so every neighbour row is current (no
        history is read). A stage receives and sends its whole part's rows at once."""
        st = self.stage
        comm = self.comm
        last = self.s == self.S - 1
        out, carry = self._eval_forward(epoch)
        counts = [0] * 6  # only the last stage scores
        if not last:
            cout = {k: carry[k] for k in st.carry_out_keys}
            comm.send(self._pack(out, cout, st.carry_out_keys), self.s + 1, tag=_EVAL_TAG, category="eval")
        else:
            lo = st.chunks[0].lo
            hi = lo + out.shape[0]
            counts = split_counts(out, st.labels[lo:hi], {k: m[lo:hi] for k, m in st.masks.items()}, st.multilabel)
        return reduce_accuracies(counts, self.world)

    def _eval_forward(self, epoch: int) -> tuple[torch.Tensor, dict]:
        """This stage's output rows (and carry) of its whole part in evaluation mode."""
        st = self.stage
        base = st.chunks[0].lo
        R = st.chunks[-1].hi - base
        h, carry = None, {}
        if self.s > 0:
            buf = torch.empty(R, self._width(st.in_dim, self.carry_in_keys))
            self.comm.recv(buf, self.s - 1, tag=_EVAL_TAG)
            h, carry = self._unpack(buf, st.in_dim, self.carry_in_keys)
        ctx = RunCtx(training=False, epoch=epoch, seed=st.seed)
        for u in st.units:
            u.eval()
        try:
            for pos, u in enumerate(st.units):
                out, new_carry = None, {}
                for k, ch in enumerate(st.chunks):
                    a, b = ch.lo - base, ch.hi - base
                    features = st.first_unit == 0 and pos == 0
                    if features:
                        hk = st.x_dst_rows(k)
                    else:
                        hk = h[a:b]
                    ck = {key: v[a:b] for key, v in carry.items()}
                    if u.aggregates:
                        if features:
                            h_src = st.x_src_rows(k)
                        else:
                            m = ch.nbr_ids.numel()
                            if st.way is not None:  # h's row r is node base + r, as the way's buffers
                                nbr = st.way.gather(h, k, m, category="eval")
                            else:
                                nbr = h.index_select(0, ch.nbr_ids - base if base else ch.nbr_ids)
                            h_src = torch.cat([hk, nbr], dim=0)
                        o, c2 = u(hk, ck, ctx, block=ch.block, h_src=h_src)
                    else:
                        o, c2 = u(hk, ck, ctx, block=ch.block)
                    if out is None:
                        out = torch.empty(R, o.shape[1], dtype=o.dtype)
                    out[a:b] = o
                    for key, t in c2.items():
                        if key in ck and t is ck[key]:
                            continue  # passed through unchanged
                        if key not in new_carry:
                            new_carry[key] = torch.empty(R, t.shape[1], dtype=t.dtype)
                        new_carry[key][a:b] = t
                h = out
                carry.update(new_carry)
        finally:
            for u in st.units:
                u.train()
        return h, carry
