"""One pipeline stage's compute: its units over each chunk, with history buffers.

A stage owns a contiguous block of the model's units and runs it over its way's chunks. It
never communicates: the runtime (:mod:`.runtime`) moves chunk activations between stages,
and the rows of a chunk's neighbours outside the chunk come from a neighbour source
(:mod:`.sources`) that whoever builds the stage hands in: the stage's own history
(``LocalHistory``) or, in hybrid mode, the link to the other ways
(:class:`gnnpipe.parallel.pipeline.waylink.WayLink`).

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
   once per unit and epoch in each direction) is :class:`gnnpipe.parallel.pipeline.waylink.WayLink`'s.
   With boundary sampling (``--boundary-sample P``) a stale epoch moves only its draw of
   those rows: a way reads another way's row as it last received it, scaled by ``n / k``
   when drawn this epoch and by 0 otherwise (WayLink's docstring has the exact rule).
8. **Exact epochs** (``exact_every`` N; 0 = off; pipeline and hybrid). Epochs ``e`` with
   ``e % N == 0`` run as exact mode does (rule 6: one chunk spanning the whole graph, run
   by a second stage over the same units; in a hybrid way, one chunk spanning its part,
   the other ways' rows exchanged current inside autograd as the exact hybrid does), with
   two differences: the epoch still passes through rule 4's phases, and at each
   aggregating unit with history the whole graph's input rows are written into ``H_u``
   (in a hybrid way, its part's into ``H_u`` and the exchanged rows of the other ways
   into ``R_u``: the stale epochs after it read them, as they read a stale epoch's rows).
   Exact epochs take no refresh (rule 5): their forward is exact.
   Every other epoch follows rules 1–5. Measured (docs/convergence-notes.md): the stale
   backward's gradient is biased in a way no rule that keeps it chunked removed; an exact
   step every N epochs pulls the weights back towards exact training's path.
9. **Drift-bounded exact epochs** (``drift_bound`` B; 0 = off; pipeline and hybrid; not with
   rule 8). Epoch 0 runs exact (rule 8's way), and so does every epoch after a stale epoch
   whose history drift exceeded B: ``sqrt(Σ‖new − old‖² / Σ‖new‖²)`` over every row its
   chunks wrote into any ``H_u`` (rule 2's writes, before the write; every stage and way),
   the relative change of the rows a chunk that ran before their own read stale. Which
   epochs those are, and why the measure, is :mod:`.exact_epochs`'.
10. **Exact cool-down** (``exact_from`` E; 0 = off; pipeline and hybrid; with or without
   rule 8 or 9). Every epoch ``e >= E`` runs exact (rule 8's way), whatever rules 8 and 9
   say; the epochs before E follow them (or rules 1–5). Measured (docs/convergence-notes.md
   section 16): with every 2nd epoch exact, the stale steps leave the late test accuracy
   under exact training's at equal epochs; ending the run on exact steps closes most of it.

Weight gradients accumulate over the chunks; each stage steps its optimizer once per epoch.
With the shared input layer (``--shared-input``, :mod:`.shared_input`) the first unit's
transform of every row is computed by all the way's stages and handed to the first stage's
:class:`StageFeatures` before the chunks run; the rules above are unchanged (only the order of
the weight gradient's sums differs). With the carry computed on every stage (``--local-carry``,
:mod:`.local_carry`) a stage's chunks receive GCNII's ``h0`` from the stage's own copy of the
input layer instead of the previous stage; the stage sees no difference (the runtime hands it
the rows and takes their gradients), and neither do the rules.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import cached_property

import torch

from gnnpipe._base import GnnpipeError
from gnnpipe.models import RunCtx, ops
from gnnpipe.parallel.chunks import ChunkInfo
from gnnpipe.parallel.executor import StaleOptions
from gnnpipe.parallel.pipeline.autograd import GradSink, InjectGrad, Root, Sunk
from gnnpipe.parallel.pipeline.history import History
from gnnpipe.parallel.pipeline.inputs import StageFeatures, StageTargets
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


@dataclass(frozen=True)
class StageUnits:
    """A stage's contiguous block of the model's units: ``units`` are the model's units
    ``first, first + 1, ...``; ``carry_in`` / ``carry_out`` the cross-layer tensors that
    arrive with each chunk from the previous stage and leave with it for the next."""

    units: tuple
    first: int
    carry_in: tuple = ()
    carry_out: tuple = ()

    def carry_ready_after(self) -> dict[int, tuple[str, ...]]:
        """``{position: keys}``: each ``carry_out`` key a unit of this block writes, at the
        position of its last writer (from there on the key's rows are final)."""
        return dict(self._carry_ready)

    @cached_property
    def _carry_ready(self) -> dict[int, tuple[str, ...]]:
        # (computed once per block: the units and their carry_writes do not change)
        ready: dict[int, list] = {}
        for key in self.carry_out:
            at = [pos for pos, u in enumerate(self.units) if key in (getattr(u, "carry_writes", ()) or ())]
            if at:
                ready.setdefault(max(at), []).append(key)
        return {pos: tuple(keys) for pos, keys in ready.items()}

    @cached_property
    def carry_passed(self) -> tuple:
        """The ``carry_out`` keys no unit of this block writes: they leave as they arrived."""
        ready = {k for keys in self._carry_ready.values() for k in keys}
        return tuple(k for k in self.carry_out if k not in ready)

    @classmethod
    def of(cls, model_units, a: int, b: int) -> "StageUnits":
        """Units ``[a, b)`` of a model's units, with what they receive and hand on."""
        units = list(model_units)
        return cls(tuple(units[a:b]), a, carry_keys_after(units, a) if a > 0 else (),
                   carry_keys_after(units, b) if b < len(units) else ())


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


class PipelineStage:
    """Compute of one stage: its units, history buffers and cross-chunk gradient buffers.

    No communication: the executor moves tensors between stages; the one-process reference
    and tests can drive it directly.

    Args:
        block: this stage's units (:class:`StageUnits`: a slice of ``model.units``, its
            first unit's index in the model, the carry it receives and hands on).
        chunks: every chunk's :class:`ChunkInfo`, on the device where the stage computes
            (its buffers are made there).
        num_nodes: N.
        opts: the staleness rules (:class:`StaleOptions`).
        seed: the run's seed (dropout masks).
        features: the first stage's input rows (:class:`StageFeatures`; required when
            ``block.first == 0``).
        targets: the last stage's labels and masks (:class:`StageTargets`); the stage with
            targets is the last, computing the loss.
        source: where the chunks' out-of-chunk neighbour rows come from: this stage's own
            history (``LocalHistory``, the default) or, in hybrid mode, the link to the
            other ways (:class:`gnnpipe.parallel.pipeline.waylink.WayLink`). The stage itself never
            communicates; whoever builds it chooses the source.
        hist_dtype: storage dtype of the history, cross-chunk gradient and snapshot buffers
            (reads upcast to float32, writes round).
        history: another stage's :class:`History` to write (rule 8: the exact stage of
            ``exact_every`` writes the stale stage's history; it reads none, its one chunk
            having no neighbour outside it); by default the stage allocates its own.

    The history buffers of every aggregating unit whose input is trained (``H``, ``G``,
    ``S`` and, with a source that has remote rows, ``R``, ``GR``, ``RS``) and their epoch
    phases are :attr:`history`'s (:class:`gnnpipe.parallel.pipeline.history.History`).
    """

    def __init__(self, block: StageUnits, chunks: list[ChunkInfo], num_nodes: int, opts: StaleOptions,
                 seed: int, *, features: StageFeatures | None = None, targets: StageTargets | None = None,
                 source: NeighbourSource | None = None, hist_dtype: torch.dtype = torch.float32,
                 history: History | None = None) -> None:
        if (block.first == 0) != (features is not None):
            raise GnnpipeError(f"internal: a stage from unit {block.first} "
                               f"{'needs' if block.first == 0 else 'reads no'} input features")
        self.device = dev = chunks[0].device
        self.block = block
        self.units = list(block.units)
        self.first_unit = block.first
        self.carry_out_keys = block.carry_out
        self._carry_ready = block.carry_ready_after()
        self.features = features
        self.targets = targets
        self.is_last = targets is not None
        self.source = source if source is not None else LocalHistory(chunks)
        self.chunks = chunks
        self.N = int(num_nodes)
        self.opts = opts
        self.seed = seed
        # With several chunks a node's row is read by every chunk it neighbours: its dropout
        # masks are hashed once per unit and epoch, for the forward phase (ops.KeepMaskCache),
        # where the chunks' source rows outnumber the nodes (the cost model assumes the same).
        src_rows = sum(ch.block.num_src for ch in chunks)
        self.keep_masks = ops.KeepMaskCache(self.N) if len(chunks) > 1 and src_rows > self.N else None
        self.gather_s = 0.0
        # Row r of a buffer is node row0 + r: every node with one way, a way's own part in
        # hybrid mode (see WayLink).
        self.row0 = self.source.row0
        self.rows = self.source.rows if self.source.rows is not None else self.N
        # Units whose input is the constant features (only unit 0 of the model) need no
        # history. A fresh source (exact hybrid) exchanges current rows: no history. A
        # collective one (stale hybrid) needs buffers on every unit so that every way's
        # exchanges line up.
        has_nbrs = any(ch.nbr_ids.numel() for ch in chunks)
        keeps_history = not self.source.fresh and (has_nbrs or self.source.collective)
        dims = {pos: u.in_dim for pos, u in enumerate(self.units)
                if u.aggregates and not (self.first_unit == 0 and pos == 0) and keeps_history}
        self.history = history if history is not None else History(
            dims, self.rows, self.source.halo_rows, opts.grad_fix, opts.snapshot_period, hist_dtype, dev)
        self.state: dict[int, _ChunkState] = {}
        self.epoch = 0

    @property
    def in_dim(self) -> int:
        return self.units[0].in_dim

    @property
    def out_dim(self) -> int:
        return self.units[-1].out_dim

    # ------------------------------------------------------------------ epoch
    def begin_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        if self.features is not None:
            self.features.reset()
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
        if self.features is not None:
            self.features.reset()

    def _fresh_grad(self, pos: int, k: int, g: torch.Tensor) -> torch.Tensor:
        """``g`` plus chunk k's rows of G_u times grad_scale (see :class:`InjectGrad`)."""
        ch = self.chunks[k]
        rows = self.history.gacc[pos][ch.lo - self.row0 : ch.hi - self.row0]
        return g + rows.float() * self.opts.grad_scale

    # ------------------------------------------------------------------ compute
    def forward_chunk(self, k: int, h_in: torch.Tensor | None, carry_in: dict, training: bool = True,
                      on_carry=None):
        """Run this stage's units on chunk ``k``.

        Args:
            h_in: [n_k, in_dim] the chunk's input rows (None on the first stage).
            carry_in: cross-layer tensors of the chunk's rows.
            on_carry: called ``on_carry(key, rows)`` for each carry key this stage writes and
                hands on, as soon as its last writer here has run (the runtime sends it
                ahead in a one-chunk epoch: :mod:`.carry`).
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
            h = self.features.dst_rows(k)
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
            if self.first_unit == 0 and pos == 0 and training and self.features.transforms:
                h, carry, gather_s = self.features.forward_transformed(k, u, carry, ctx)
                self.gather_s += gather_s
            elif u.aggregates:
                if self.first_unit == 0 and pos == 0:
                    h_src = self.features.src_rows(k)
                elif self.source.fresh:
                    # exact hybrid: the whole part is one chunk; halo rows are exchanged fresh
                    # and their gradients return inside autograd, as in graph parallelism.
                    h_src = self.source.with_fresh(h, self.epoch if training else None,
                                                   self.first_unit + pos)
                    if training and pos in self.history:  # rule 8 in a hybrid way: H_u, R_u as any epoch's
                        self.history.write_whole(pos, h, h_src[h.shape[0]:])
                elif pos not in self.history:  # one chunk spanning every node: nothing outside it
                    h_src = h
                else:
                    hist = self.history.hist[pos]
                    if training:
                        self.history.write_chunk(pos, ch.lo - r0, ch.hi - r0, h)
                        if self.opts.grad_fix and h.requires_grad:
                            h = InjectGrad.apply(h, self, pos, k)
                    m = ch.nbr_ids.numel()
                    rbuf = self.history.remote.get(pos)
                    if training:  # (a collective: every way, every unit, even with m = 0)
                        self.source.push(hist, rbuf, k, epoch=self.epoch, unit=self.first_unit + pos)
                    ep = self.epoch if training else None  # (a training read may be sampled)
                    make = lambda hist=hist, rbuf=rbuf: self.source.read(hist, rbuf, k, ep)  # noqa: E731
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
            if on_carry is not None:
                for key in self._carry_ready.get(pos, ()):
                    on_carry(key, carry[key])
        carry_out = {key: carry[key] for key in self.carry_out_keys}
        if self.is_last and training:
            st.loss = self.targets.loss(ch, h)
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

    def backward_chunk(self, k: int, grad_out: torch.Tensor | None, grad_carry: dict):
        """Backward of chunk ``k``; returns (grad of the chunk's input rows, grads of carry_in)."""
        self.begin_backward()
        st = self.state.pop(k)
        # remote rows' gradients accumulated since the forward phase, into their owners' G_u
        # before chunk k's backward injects G_u (a collective: every way, every chunk)
        hy = self.history
        if not self.source.fresh:  # (a fresh source's gradients return inside autograd)
            self.source.before_backward(k, hy.gacc, hy.gremote, epoch=self.epoch, unit0=self.first_unit)
        if self.is_last:
            torch.autograd.backward([st.loss], [torch.ones_like(st.loss)])
        elif st.root is not None:
            st.box.extend(grad_out if key is None else grad_carry.get(key) for key in st.out_req)
            torch.autograd.backward([st.root])
        for pos, sink in st.nbr_leaves:
            if sink.grad is not None:
                self.source.return_grads(hy.gacc[pos], hy.gremote.get(pos), sink.grad, k, self.epoch)
        if self.features is not None and self.features.transforms:
            self.features.backward(k)
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
                        self.source.push(src, remote, None, category="way_fwd")
                    elif not refresh:
                        # the other ways' current rows this way reads: one exchange per unit
                        rows = self.source.halo_rows
                        remote = None if rows is None else h.new_empty((rows, h.shape[1]))
                        self.source.push(h, remote, None, category="eval")
                for k, ch in enumerate(self.chunks):
                    a, b = ch.lo - base, ch.hi - base
                    features = self.first_unit == 0 and pos == 0
                    hk = self.features.dst_rows(k) if features else h[a:b]
                    ck = {key: v[a:b] for key, v in carry.items()}
                    if u.aggregates:
                        if features:
                            h_src = self.features.src_rows(k)
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
        return self.targets.train_counts(self.chunks[k], logits)

    def eval_counts(self, logits: torch.Tensor) -> list[int]:
        """``[correct, total]`` per split of the whole part's rows (the last stage's
        :meth:`forward_whole` output)."""
        return self.targets.split_counts(logits, self.chunks[0].lo)
