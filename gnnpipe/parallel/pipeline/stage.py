"""One pipeline stage's compute: its units over each chunk, with history buffers.

A stage owns a contiguous block of the model's units and runs it over its way's chunks. It
never communicates: the runtime (:mod:`.runtime`) moves chunk activations between stages,
and the rows of a chunk's neighbours outside the chunk come from a neighbour source
(:mod:`.sources`) that whoever builds the stage hands in: the stage's own history
(``LocalHistory``) or, in hybrid mode, the link to the other ways
(:class:`gnnpipe.parallel.halo.WayLink`).

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
4. **Snapshot** (period ``K``; 0 = off, the default: the paper's ``K = 23`` makes stale rows
   up to ``K`` epochs old, which costs accuracy at short schedules). At the end of every epoch ``e`` with ``(e+1) % K ==
   0`` the history buffers are copied into a snapshot; at the start of every later epoch the
   buffers are restored from it, so stale rows come from one consistent model state.
5. **History refresh** (``refresh_epochs`` N; 0 = off). Before the chunks of each epoch
   ``e < N`` run (after rule 4's restore), the history is refilled by an exact forward of
   the current weights, in training mode with epoch ``e``'s dropout masks and no gradient:
   unit by unit over the whole graph, each aggregating unit's input rows of every node are
   written into ``H_u`` before the unit runs (:meth:`PipelineStage.forward_whole` with
   ``refresh``, driven by the runtime's ``_refresh``; the rows cross stage boundaries
   once, as in evaluation). Every row a chunk then reads from history equals the row it
   would compute this epoch, so the epoch's forward is the exact one (its loss is the
   one-process loss); rule 3 still decides which cross-chunk gradients count. One extra
   forward per refreshed epoch; it removes the staleness where it is largest: the first
   epoch reads a zero history otherwise, and the weights move fastest early.
6. **Exact mode.** One chunk spanning the whole graph: every aggregation sees current-epoch
   inputs, no history is read, and the result equals the one-process full-graph run (stages
   then cannot overlap within the epoch).
7. **Hybrid ways (stale).** ``D`` ways run the same chunk order, local chunk ``k`` of every
   way at the same slot. Rules 2–5 hold over the whole graph: a neighbour row in another
   way is fresh if its owner's chunk ran forward this epoch (this slot included), one epoch
   old (or the snapshot's) otherwise; its gradient counts if produced at an earlier
   backward slot than its chunk's. How the rows and gradients travel (each boundary row
   once per unit and epoch in each direction) is :class:`gnnpipe.parallel.halo.WayLink`'s.
8. **Exact epochs** (``exact_every`` N; 0 = off; pipeline mode). Epochs ``e`` with
   ``e % N == 0`` run as exact mode does (rule 6: one chunk spanning the whole graph, run
   by a second stage over the same units), with two differences: the epoch still passes
   through rule 4's phases, and at each aggregating unit with history the whole graph's
   input rows are written into ``H_u`` (the stale epochs after it read them, as they read
   a stale epoch's rows). Exact epochs take no refresh (rule 5): their forward is exact.
   Every other epoch follows rules 1–5. Measured (docs/convergence-notes.md): the stale
   backward's gradient is biased in a way no rule that keeps it chunked removed; an exact
   step every N epochs pulls the weights back towards exact training's path.

Weight gradients accumulate over the chunks; each stage steps its optimizer once per epoch.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
import torch

from gnnpipe._base import GnnpipeError
from gnnpipe.device import upload
from gnnpipe.models import RunCtx, accuracy_counts, loss_fn, ops
from gnnpipe.parallel.chunks import ChunkInfo
from gnnpipe.parallel.executor import StaleOptions
from gnnpipe.parallel.features import feature_rows
from gnnpipe.parallel.pipeline.autograd import GradSink, InjectGrad, Root, Sunk
from gnnpipe.parallel.pipeline.history import History
from gnnpipe.parallel.pipeline.sources import LocalHistory, NeighbourSource


def carry_keys_after(units, start: int) -> tuple[str, ...]:
    """Cross-layer tensors that units from ``start`` on read before one of them writes it
    (they must travel with the chunk into unit ``start``).

    A unit that declares ``carry_reads`` / ``carry_writes`` (user layers) is read that way;
    a built-in unit's ``carry_keys`` count as reads (GCNII's input unit, which writes
    ``h0``, is unit 0 and never follows a stage boundary).
    """
    keys: list[str] = []
    written: set = set()
    for u in list(units)[start:]:
        reads = getattr(u, "carry_reads", None)
        if reads is None:
            reads = getattr(u, "carry_keys", ()) or ()
        for k in reads:
            if k not in keys and k not in written:
                keys.append(k)
        written.update(getattr(u, "carry_writes", ()) or ())
    return tuple(keys)


def _is_dense(x) -> bool:
    return x is not None and not sp.issparse(x) and not (isinstance(x, torch.Tensor) and x.layout != torch.strided)


@dataclass
class _ChunkState:
    nbr_leaves: list = field(default_factory=list)  # (unit position, GradSink of neighbour rows)
    h_in: GradSink | None = None                   # gradient of the received rows
    carry_in: dict = field(default_factory=dict)    # key -> GradSink
    h_in_shape: tuple = ()
    root: torch.Tensor | None = None                # Root over the outputs (not on the last stage)
    out_req: list = field(default_factory=list)     # which outputs the root stands for: None (h) / carry keys
    box: list = field(default_factory=list)         # their gradients, filled at backward
    loss: torch.Tensor | None = None
    z_sink: GradSink | None = None                 # gradient of the chunk's rows of the epoch's input transform
    z_piece: tuple | None = None                    # (rows, their transform) first transformed by this chunk


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
        source: where the chunks' out-of-chunk neighbour rows come from: this stage's own
            history (:class:`LocalHistory`, the default) or, in hybrid mode, the link to the
            other ways (:class:`gnnpipe.parallel.halo.WayLink`). The stage itself never
            communicates; whoever builds it chooses the source.
        hist_dtype: storage dtype of the history, cross-chunk gradient and snapshot buffers
            (reads upcast to float32, writes round).
        device: where the stage computes: its labels, masks, features and every buffer are
            made there (the chunks, the units and the source are placed by the builder).
        history: another stage's :class:`History` to write (rule 8: the exact stage of
            ``exact_every`` writes the stale stage's history; it reads none, its one chunk
            having no neighbour outside it); by default the stage allocates its own.

    The history buffers of every aggregating unit whose input is trained (``H``, ``G``,
    ``S`` and, with a source that has remote rows, ``R``, ``GR``, ``RS``) and their epoch
    phases are :attr:`history`'s (:class:`gnnpipe.parallel.pipeline.history.History`).
    """

    def __init__(self, units, first_unit: int, chunks: list[ChunkInfo], num_nodes: int, x,
                 labels, train_mask, masks: dict, num_train_global: int, is_last: bool,
                 opts: StaleOptions, seed: int, multilabel: bool = False,
                 carry_out_keys: tuple = (), source: NeighbourSource | None = None,
                 hist_dtype: torch.dtype = torch.float32, x_rows: np.ndarray | None = None,
                 device: torch.device | str = "cpu", history: History | None = None) -> None:
        self.device = dev = torch.device(device)
        self.units = list(units)
        self.source = source if source is not None else LocalHistory(chunks)
        self.first_unit = first_unit
        self.chunks = chunks
        self.N = int(num_nodes)
        self.is_last = is_last
        self.opts = opts
        self.seed = seed
        self.multilabel = multilabel
        self.num_train_global = max(int(num_train_global), 1)
        self.carry_out_keys = tuple(carry_out_keys)
        self.labels = torch.as_tensor(np.asarray(labels)).to(dev) if labels is not None else None
        self.masks = {k: torch.as_tensor(np.asarray(v, dtype=bool)).to(dev) for k, v in masks.items()}
        self.train_mask = (self.masks.get("train") if train_mask is None
                           else torch.as_tensor(np.asarray(train_mask, dtype=bool)).to(dev))
        # Units whose input is the constant features (only unit 0 of the model) need no history.
        # Row r of a buffer is node row0 + r: every node with one way, a way's own part in
        # hybrid mode (see WayLink).
        self.hist_dtype = hist_dtype
        # With several chunks a node's row is read by every chunk it neighbours: its dropout
        # masks are hashed once per unit and epoch, for the forward phase (ops.KeepMaskCache),
        # where the chunks' source rows outnumber the nodes (the cost model assumes the same).
        src_rows = sum(ch.block.num_src for ch in chunks)
        self.keep_masks = ops.KeepMaskCache(self.N) if len(chunks) > 1 and src_rows > self.N else None
        self.gather_s = 0.0
        self.row0 = self.source.row0
        self.rows = self.source.rows if self.source.rows is not None else self.N
        # A fresh source (exact hybrid) exchanges current rows: no history. A collective one
        # (stale hybrid) needs buffers on every unit so that every way's exchanges line up.
        has_nbrs = any(ch.nbr_ids.numel() for ch in chunks)
        keeps_history = not self.source.fresh and (has_nbrs or self.source.collective)
        dims = {pos: u.in_dim for pos, u in enumerate(self.units)
                if u.aggregates and not (first_unit == 0 and pos == 0) and keeps_history}
        self.history = history if history is not None else History(
            dims, self.rows, self.source.halo_rows, opts.grad_fix, opts.snapshot_period, hist_dtype, dev)
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
            self.x = (x if isinstance(x, torch.Tensor)
                      else torch.from_numpy(np.ascontiguousarray(np.asarray(x), dtype=np.float32))).to(dev)
            host_src = [pos(ch.src_ids().cpu().numpy()) for ch in chunks]
            self.x_src_ids = [torch.from_numpy(ids).to(dev) for ids in host_src]
            self.x_dst_off = [int(pos([ch.lo])[0]) for ch in chunks]
        elif first_unit == 0:
            for ch in chunks:
                ids = np.arange(ch.lo, ch.hi, dtype=np.int64)
                self.x_dst.append(feature_rows(x, pos(ids)).to(dev))
                if self.units[0].aggregates:
                    self.x_src.append(feature_rows(x, pos(np.concatenate([ids, ch.nbr_ids.cpu().numpy()]))).to(dev))
        self.state: dict[int, _ChunkState] = {}
        self.epoch = 0
        # The epoch's input transform. A first unit that transforms its input row by row
        # before aggregating (GCN/GAT wider in than out: ConvUnit.can_transform_input) would
        # compute drop(x) W for every chunk's source rows: Σ_k |src(k)| rows, 4.9·N on
        # Squirrel with 16 chunks, each row the same in every chunk (W changes once per
        # epoch, the dropout masks are per node). So the stage transforms each row once per
        # epoch, when the first chunk that reads it runs forward (its "piece" of rows: the
        # work spreads over the chunks as the per-chunk transform's did, rather than stalling
        # the pipeline's fill with all of it at once); each chunk reads its rows of the
        # result, and their gradients add up in one [rows, d] buffer. Chunks run backward in
        # the reverse of their forward order, so when chunk k's backward is done every chunk
        # that reads its piece's rows (k and those after it) has added its gradient: the
        # piece's backward through the transform then gives its share of W's gradient. The
        # same sums in another order. Training only; one chunk (exact mode) and sparse
        # features keep the unit's own path.
        self.x_gid: torch.Tensor | None = None
        self._zd = self._gz = None  # this epoch's transformed rows, their gradients
        self._zdone: np.ndarray | None = None  # rows transformed this epoch (host: no device sync)
        self._x_src_host: list[np.ndarray] = []
        u0 = self.units[0] if self.units else None
        if (self.x is not None and len(chunks) > 1 and u0 is not None and u0.aggregates
                and callable(getattr(u0, "can_transform_input", None)) and u0.can_transform_input(self.x)):
            gid = torch.full((self.x.shape[0],), -1, dtype=torch.int64, device=dev)
            for ch, ids in zip(chunks, self.x_src_ids):
                gid[ids] = ch.block.src_gid.to(device=dev, dtype=torch.int64)
            if bool((gid >= 0).all()):  # every row is some chunk's (else: the unit's path)
                self.x_gid = gid
                rows_x = self.x.shape[0]
                self._zd = torch.zeros(rows_x, u0.out_dim, device=dev)
                self._gz = torch.zeros(rows_x, u0.out_dim, device=dev)
                self._zdone = np.zeros(rows_x, dtype=bool)
                self._x_src_host = host_src  # (read back from the device never)

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
        self._reset_transform()
        self.gather_s = 0.0  # seconds reading neighbour rows this epoch (EpochResult.actions)
        self.state.clear()
        if self.keep_masks is not None:
            self.keep_masks.clear()
        self.history.begin_epoch(epoch)

    def begin_backward(self) -> None:
        """The turn from the forward to the backward phase (every stage runs all its
        forwards before any backward): the history's turn (:meth:`History.begin_backward`)."""
        if self.history.begin_backward() and self.keep_masks is not None:
            self.keep_masks.clear()  # backward uses the masks each dropout saved, packed

    def end_epoch(self) -> None:
        self.begin_backward()  # (a no-op after any backward)
        self.history.end_epoch()  # drops the gradients of rows whose chunk already ran backward
        self.state.clear()
        self._reset_transform()

    def _fresh_grad(self, pos: int, k: int, g: torch.Tensor) -> torch.Tensor:
        """``g`` plus chunk k's rows of G_u times grad_scale (see :class:`InjectGrad`)."""
        ch = self.chunks[k]
        rows = self.history.gacc[pos][ch.lo - self.row0 : ch.hi - self.row0]
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
        if training and self.history.backward_phase:
            # G may occupy H's storage from the turn on (see begin_backward)
            raise GnnpipeError(f"internal: forward of chunk {k} after this stage's backward phase began; "
                               "a stage must run all its forwards of an epoch before any backward")
        ch = self.chunks[k]
        ctx = RunCtx(training=training, epoch=self.epoch, seed=self.seed, masks=self.keep_masks)
        st = _ChunkState()
        if self.first_unit == 0:
            h = self.x_dst_rows(k)
        elif training:
            st.h_in = GradSink()
            st.h_in_shape = tuple(h_in.shape)
            h = Sunk.apply(st.h_in.anchor, h_in.detach(), None, st.h_in)
        else:
            h = h_in
        carry = {}
        for key, t in carry_in.items():
            if training:
                sink = GradSink()
                st.carry_in[key] = (sink, tuple(t.shape))
                carry[key] = Sunk.apply(sink.anchor, t.detach(), None, sink)
            else:
                carry[key] = t
        r0 = self.row0
        for pos, u in enumerate(self.units):
            if u.aggregates and self.first_unit == 0 and pos == 0 and training and self.x_gid is not None:
                h, carry = self._forward_transformed(k, u, carry, ctx, st)
            elif u.aggregates:
                if self.first_unit == 0 and pos == 0:
                    h_src = self.x_src_rows(k)
                elif self.source.fresh:
                    # exact hybrid: the whole part is one chunk; halo rows are exchanged fresh
                    # and their gradients return inside autograd, as in graph parallelism.
                    h_src = self.source.with_fresh(h, self.epoch if training else None,
                                                   self.first_unit + pos)
                elif pos not in self.history:  # one chunk spanning every node: nothing outside it
                    h_src = h
                else:
                    hist = self.history.hist[pos]
                    if training:
                        hist[ch.lo - r0 : ch.hi - r0] = h.detach()
                        if self.opts.grad_fix and h.requires_grad:
                            h = InjectGrad.apply(h, self, pos, k)
                    m = ch.nbr_ids.numel()
                    rbuf = self.history.remote.get(pos)
                    if training:  # (a collective: every way, every unit, even with m = 0)
                        self.source.push(hist, rbuf, k, epoch=self.epoch, unit=self.first_unit + pos)
                    make = lambda hist=hist, rbuf=rbuf: self.source.read(hist, rbuf, k)  # noqa: E731
                    t0 = time.perf_counter()
                    if not m and rbuf is None:  # (rule 8's exact stage: it only writes the history)
                        h_src = h
                    elif training and self.opts.grad_fix and m:
                        sink = GradSink()
                        nbr = Sunk.apply(sink.anchor, None, make, sink)
                        st.nbr_leaves.append((pos, sink))
                        h_src = torch.cat([h, nbr], dim=0)
                    else:
                        h_src = torch.cat([h, make()], dim=0)
                    self.gather_s += time.perf_counter() - t0
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
                st.root = Root.apply(st.box, *[t for _, t in outs])
        if training:
            self.state[k] = st
        return h, carry_out

    def _reset_transform(self) -> None:
        if self._zdone is not None:
            self._zdone[:] = False
            self._gz.zero_()

    def _forward_transformed(self, k: int, u, carry: dict, ctx: RunCtx, st: _ChunkState):
        """The first unit on chunk k through the epoch's input transform (see __init__)."""
        host = self._x_src_host[k]
        new = host[~self._zdone[host]]  # this chunk's rows no earlier chunk transformed
        if new.size:
            self._zdone[new] = True
            rows = upload(new, self.device)  # host-chosen rows: no read of the device
            z = u.transform_input(self.x.index_select(0, rows), self.x_gid.index_select(0, rows), ctx)
            self._zd.index_copy_(0, rows, z.detach())
            st.z_piece = (rows, z)
        ids = self.x_src_ids[k]
        st.z_sink = sink = GradSink()
        t0 = time.perf_counter()
        z_src = Sunk.apply(sink.anchor, None, lambda: self._zd.index_select(0, ids), sink)
        self.gather_s += time.perf_counter() - t0
        return u.forward_transformed(z_src, carry, ctx, self.chunks[k].block)

    def backward_chunk(self, k: int, grad_out: torch.Tensor | None, grad_carry: dict):
        """Backward of chunk ``k``; returns (grad of the chunk's input rows, grads of carry_in)."""
        self.begin_backward()
        st = self.state.pop(k)
        # remote rows' gradients accumulated since the forward phase, into their owners' G_u
        # before chunk k's backward injects G_u (a collective: every way, every chunk)
        hy = self.history
        self.source.before_backward(k, hy.gacc, hy.gremote, epoch=self.epoch, unit0=self.first_unit)
        if self.is_last:
            torch.autograd.backward([st.loss], [torch.ones_like(st.loss)])
        elif st.root is not None:
            st.box.extend(grad_out if key is None else grad_carry.get(key) for key in st.out_req)
            torch.autograd.backward([st.root])
        for pos, sink in st.nbr_leaves:
            if sink.grad is not None:
                self.source.return_grads(hy.gacc[pos], hy.gremote.get(pos), sink.grad, k)
        if st.z_sink is not None and st.z_sink.grad is not None:
            self._gz.index_add_(0, self.x_src_ids[k], st.z_sink.grad)
        if st.z_piece is not None:  # every reader of the piece's rows is done: W's share
            rows, z = st.z_piece
            torch.autograd.backward([z], [self._gz.index_select(0, rows)])
        grad_in = None
        if st.h_in is not None:
            grad_in = st.h_in.grad if st.h_in.grad is not None else torch.zeros(st.h_in_shape, device=self.device)
        gcarry = {}
        for key, (sink, shape) in st.carry_in.items():
            gcarry[key] = sink.grad if sink.grad is not None else torch.zeros(shape, device=self.device)
        # the chunk's loss stays on the device: the executor reads the epoch's sum once
        loss = st.loss.detach() if st.loss is not None else None
        return grad_in, gcarry, loss

    # ------------------------------------------------------------------ whole part
    def forward_whole(self, h: torch.Tensor | None, carry: dict, epoch: int,
                      refresh: bool = False) -> tuple[torch.Tensor, dict]:
        """This stage's output rows (and carry) of its whole part, unit by unit and chunk by
        chunk over the training chunks' blocks: every unit's input rows of the whole part
        are computed before the unit runs, so every neighbour row is current.

        Evaluation (``refresh`` False): no history is read or written; the other ways'
        current rows come through the source's exchange (one per unit, ``eval`` bytes).

        ``refresh`` (rule 5, training): the same forward in training mode (this epoch's
        dropout masks, no gradient); at each aggregating unit with history, the current
        input rows of the whole part are written into ``H_u`` and pushed into the other
        ways' ``R_u`` (as a training forward writes and pushes one chunk's), and the
        neighbour rows are read back from them as training reads them.

        Args:
            h, carry: the whole part's input rows and carry (None, {} on the first stage).
        """
        base = self.chunks[0].lo
        R = self.chunks[-1].hi - base
        hy = self.history
        # (a refresh hashes this epoch's dropout masks into the stage's cache: the chunks reuse them)
        ctx = RunCtx(training=refresh, epoch=epoch, seed=self.seed, masks=self.keep_masks if refresh else None)
        if not refresh:
            for u in self.units:
                u.eval()
        try:
            for pos, u in enumerate(self.units):
                out, new_carry = None, {}
                remote = None
                src = h
                if u.aggregates and not (self.first_unit == 0 and pos == 0):
                    if refresh and pos in hy:
                        # rows as the training forward will read them (history dtype)
                        src = hy.hist[pos]
                        src.copy_(h)
                        remote = hy.remote.get(pos)
                        self.source.push(src, remote, None, category="halo_fwd")
                    elif not refresh:
                        # the other ways' current rows this way reads: one exchange per unit
                        rows = self.source.halo_rows
                        remote = None if rows is None else h.new_empty((rows, h.shape[1]))
                        self.source.push(h, remote, None, category="eval")
                for k, ch in enumerate(self.chunks):
                    a, b = ch.lo - base, ch.hi - base
                    features = self.first_unit == 0 and pos == 0
                    hk = self.x_dst_rows(k) if features else h[a:b]
                    ck = {key: v[a:b] for key, v in carry.items()}
                    if u.aggregates:
                        if features:
                            h_src = self.x_src_rows(k)
                        elif refresh and pos not in hy:  # no neighbour outside the chunk
                            h_src = hk
                        else:
                            # h's row r is node base + r, as the stage's buffers: the same
                            # read as training's, from current rows instead of history
                            h_src = torch.cat([hk, self.source.read(src, remote, k)], dim=0)
                        o, c2 = u(hk, ck, ctx, block=ch.block, h_src=h_src)
                    else:
                        o, c2 = u(hk, ck, ctx, block=ch.block)
                    if out is None:
                        out = o.new_empty(R, o.shape[1])
                    out[a:b] = o
                    for key, t in c2.items():
                        if key in ck and t is ck[key]:
                            continue  # passed through unchanged
                        if key not in new_carry:
                            new_carry[key] = t.new_empty(R, t.shape[1])
                        new_carry[key][a:b] = t
                h = out
                carry.update(new_carry)
        finally:
            for u in self.units:
                u.train()
        return h, carry

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict:
        """This stage's units and what the next epoch reads of its history
        (:meth:`History.state_dict`)."""
        return {"first_unit": self.first_unit, "units": [u.state_dict() for u in self.units],
                **self.history.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        """The inverse of :meth:`state_dict`; refuses a checkpoint of other units."""
        if state.get("first_unit") != self.first_unit or len(state["units"]) != len(self.units):
            raise GnnpipeError(
                f"checkpoint holds units from {state.get('first_unit')} ({len(state['units'])} units) "
                f"but this stage runs units from {self.first_unit} ({len(self.units)} units)"
            )
        for u, sd in zip(self.units, state["units"]):
            u.load_state_dict(sd)
        self.history.load_state_dict(state)

    def train_counts(self, k: int, logits: torch.Tensor) -> torch.Tensor:
        """int64 [2] (correct, total) of chunk k's training rows, on the device (no host sync)."""
        ch = self.chunks[k]
        return accuracy_counts(logits.detach(), self.labels[ch.lo : ch.hi], self.train_mask[ch.lo : ch.hi],
                               multilabel=self.multilabel, as_tensor=True)
