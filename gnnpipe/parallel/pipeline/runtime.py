"""The pipeline runtime: interprets one stage's lowered action list for an epoch.

Each rank (stage) runs :class:`PipelineExecutor`, which takes its list from
:func:`gnnpipe.schedule.lower` of :func:`gnnpipe.schedule.gnnpipe_schedule`, checked by
:func:`gnnpipe.schedule.validate`, and executes it action by action: ``F``/``B`` call the
:class:`gnnpipe.parallel.pipeline.stage.PipelineStage`'s compute, ``SEND_*``/``RECV_*`` move
chunk activations (and GCNII's ``h0``, unless each stage computes it: :mod:`.local_carry`) and
their gradients between neighbour stages, ``OPT`` all-reduces the weight gradients across
ways and steps the optimizer. Only chunk activations travel between stages; no halo exchange.

Wire formats (``--wire``): a training message is one wire row per node, the concatenated
``[h | carry]`` row encoded as ONE row of width ``d + len(carry)·d`` (one header for int8 /
int4), keyed by the seed, the epoch, ``message_site(KIND_PIPE, unit, backward)`` with
``unit`` the receiving side's first unit (the same on both stages of a boundary) and the
chunk's original node ids; receive buffers are uint8 ``[n_k, row_bytes(width, fmt)]``.
float32 sends the float rows as they are. In a one-chunk epoch (``--exact``, the exact
epochs of ``--exact-every``) the carry travels in messages of its own, ahead of the rows
(:mod:`.carry`), and the chunk message holds ``h`` alone. Evaluation messages always travel in
float32: evaluation is exact full-graph inference.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from gnnpipe._base import GnnpipeError
from gnnpipe.dims import ParallelDims
from gnnpipe.models import RunCtx
from gnnpipe.parallel.executor import (ACTION_KINDS, EpochResult, Executor, allreduce_grads,
                                       reduce_accuracies, wait_seconds)
from gnnpipe.parallel.pipeline.carry import CarryAhead
from gnnpipe.parallel.pipeline.exact_epochs import ExactEpochs, drift_of
from gnnpipe.parallel.pipeline.local_carry import LocalCarry
from gnnpipe.parallel.pipeline.shared_input import SharedInput
from gnnpipe.parallel.pipeline.stage import PipelineStage
from gnnpipe.wire import FLOAT32, KIND_PIPE, Wire, message_site
from gnnpipe.schedule import ActionKind, chunk_order, gnnpipe_schedule, lower, validate

# Chunk messages use tags 2k (activations) and 2k+1 (gradients); evaluation uses its own.
_EVAL_TAG = 30000


class PipelineExecutor(Executor):
    """Runs one stage of the pipeline on this rank and talks to its neighbour stages.

    Args:
        comm: communicator of this pipeline (ranks = stages, in order).
        stage: the :class:`PipelineStage` of this rank (its units, the carry that arrives
            with each chunk, its staleness rules and seed).
        optimizer: over this stage's parameters.
        dims: the layout (``dims.stages`` stages per way).
        carry_dim: the width of each carry tensor (the model's hidden width).
        cross: hybrid mode: the stage communicator across ways (weight all-reduce).
        world: the world communicator (evaluation counts); ``comm`` by default.
        wire: the wire format of training chunk messages (float32 by default).
        exact_stage: with ``opts.exact_every`` or ``opts.drift_bound``, the stage of the exact
            epochs (the same units over one chunk spanning the whole graph, writing ``stage``'s
            history).
        input_layer: the input layer's parts that run around every stale training epoch
            (:class:`InputLayerParts`: ``--shared-input``, ``--local-carry``).
    """

    def __init__(self, comm, stage: PipelineStage, optimizer, dims: ParallelDims, carry_dim: int,
                 cross=None, world=None, wire: Wire = FLOAT32, exact_stage: PipelineStage | None = None,
                 input_layer: "InputLayerParts | None" = None) -> None:
        if stage.opts.has_exact_epochs and exact_stage is None:
            raise GnnpipeError("internal: exact epochs without the stage of the exact epochs")
        self.exact_stage = exact_stage
        self.exact_epochs = ExactEpochs(stage.opts)
        parts = input_layer if input_layer is not None else InputLayerParts()
        self.shared_input, self.local_carry = parts.shared, parts.local
        self.comm = comm
        self.cross = cross
        self.world = world if world is not None else comm
        self.stage = stage
        self.params = [p for u in stage.units for p in u.parameters()]
        self.opt = optimizer
        self.S = dims.stages
        self.s = comm.rank
        self.carry_in_keys = stage.block.carry_in
        self.carry_dim = carry_dim
        self.opts = stage.opts
        self.seed = stage.seed
        self.wire = wire
        self.C = len(stage.chunks)
        self.device = stage.device
        self.dims = dims

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

    def _site(self, backward: bool) -> int:
        """The wire site of this stage's outgoing training message: the boundary is named
        by the first unit after it (the next stage's first forward, this stage's first for
        gradients), so both stages of a boundary agree."""
        unit = self.stage.first_unit if backward else self.stage.first_unit + len(self.stage.units)
        return message_site(KIND_PIPE, unit, backward)

    def _encode(self, msg: torch.Tensor, st: PipelineStage, k: int, epoch: int, backward: bool) -> torch.Tensor:
        """A packed training message of ``st``'s chunk ``k`` on the wire (float32: unchanged)."""
        if not self.wire.lossy:
            return msg
        return self.wire.encode(msg, epoch=epoch, site=self._site(backward), gid=st.chunks[k].block.dst_gid)

    def _recv_buffer(self, n: int, width: int) -> torch.Tensor:
        if not self.wire.lossy:
            return torch.empty(n, width, device=self.device)
        return torch.empty((n, self.wire.row_bytes(width)), dtype=torch.uint8, device=self.device)

    def train_epoch(self, epoch: int) -> EpochResult:
        """Interpret this stage's lowered action list for one epoch.

        The list comes from :func:`gnnpipe.schedule.gnnpipe_schedule` lowered by
        :func:`gnnpipe.schedule.lower`: ``RECV_*`` waits for a receive that was posted at the
        start of the epoch (so transfers overlap compute), ``SEND_*`` posts a non-blocking
        send that is waited for only at the end of the epoch, ``F``/``B`` compute, ``OPT``
        steps the optimizer. Each kind has one handler (:attr:`_HANDLERS`); the state they
        share for the epoch is an :class:`_EpochRun`. An exact epoch (:attr:`exact_epochs`:
        ``--exact-every`` or ``--drift-bound``) runs the exact stage: one chunk. With
        ``--drift-bound`` a stale epoch ends by adding its history drift over every rank
        (a collective), which decides the next epoch.
        """
        exact = self.exact_epochs.is_exact(epoch)
        st = self.exact_stage if exact else self.stage
        self.stage.history.measure_drift = self.exact_epochs.measures_drift and not exact
        C = len(st.chunks)
        t_start = time.perf_counter()
        wait0 = wait_seconds(self.comm)
        order = chunk_order(C, epoch, self.seed, self.opts.shuffle and not self.opts.exact)
        schedule = lower(gnnpipe_schedule(self.S, order), self.S)
        # Every stage checks the whole epoch's schedule it is about to run (counts, pairing,
        # same order on every stage, no deadlock in simulation): milliseconds, and a wrong
        # list would otherwise hang or silently mix chunks.
        validate(schedule, self.S, C)
        actions = schedule[self.s]
        st.begin_epoch(epoch)
        if epoch < self.opts.refresh_epochs and st is self.stage:  # (an exact epoch's forward is exact)
            self._refresh(epoch)  # every stage, in stage order: before any chunk message of the epoch
        for p in self.params:
            p.grad = None
        ahead = CarryAhead(self.comm, st, self.carry_dim, self.wire, epoch) if CarryAhead.wanted(st, self.S) else None
        # the carry keys packed beside the rows of each chunk message (none when they travel ahead)
        in_keys, out_keys = ((), ()) if ahead else (self.carry_in_keys, st.carry_out_keys)
        local = self.local_carry if st is self.stage else None  # (an exact epoch relays the carry)
        if local is not None:
            in_keys = tuple(k for k in in_keys if k not in local.keys)
            out_keys = tuple(k for k in out_keys if k not in local.keys)
        run = _EpochRun(st, epoch, actions, in_keys, out_keys, self._width(st.in_dim, in_keys),
                        self._width(st.out_dim, out_keys))
        run.ahead = ahead
        run.shared = self.shared_input if st is self.stage else None  # (an exact epoch: stage 0's own path)
        run.local = local
        if run.shared is not None:
            t0 = time.perf_counter()
            run.shared.forward(epoch)
            run.spent["input"] += time.perf_counter() - t0
        self._post(run, ActionKind.RECV_F)
        if ahead is not None:
            ahead.post_forward()
        if run.local is not None:  # (after the posts: the first chunks flow while the weights do)
            t0 = time.perf_counter()
            run.local.forward(epoch)
            run.spent["input"] += time.perf_counter() - t0
        for a in actions:
            if not run.b_posted and a.kind in (ActionKind.RECV_B, ActionKind.B):
                run.b_posted = True
                self._post(run, ActionKind.RECV_B)
                if ahead is not None:
                    ahead.post_backward()
            run.free_sends()
            handler = self._HANDLERS.get(a.kind)
            if handler is None:  # pragma: no cover - the generator emits no other kinds
                raise GnnpipeError(f"stage {self.s}: cannot execute schedule action {a}")
            handler(self, run, a)
        st.end_epoch()
        drift = self._decide_next(exact)
        loss = float(run.loss_sum)  # (the epoch's one wait for the device)
        correct, total = (int(c) for c in run.counts.tolist())
        wall = time.perf_counter() - t_start
        comm_s = (wait_seconds(self.comm) - wait0) if hasattr(self.comm, "stats") else run.bubble
        spent = run.spent
        spent["gather"] = st.gather_s
        spent["other"] = max(0.0, wall - sum(v for k, v in spent.items() if k != "gather"))
        return EpochResult(loss, correct, total, wall - comm_s, comm_s, run.bubble, spent,
                           exact=exact, drift=drift)

    def _decide_next(self, exact: bool) -> float | None:
        """With ``--drift-bound``: the drift of a stale epoch that just ended, over every rank
        (a collective on the world), and the next epoch's kind from it; None otherwise."""
        if not self.exact_epochs.measures_drift:
            return None
        sums = self.stage.history.take_drift().cpu()  # (zeros after an exact epoch: nothing measured)
        drift = None
        if not exact:
            if self.world.world_size > 1:
                self.world.all_reduce(sums, op="sum", category="control")
            drift = drift_of(sums)
        self.exact_epochs.record(exact, drift)
        return drift

    # ------------------------------------------------------------------ action handlers
    def _post(self, run: "_EpochRun", kind: ActionKind) -> None:
        """Post every receive of a phase when the phase starts (transfers overlap compute);
        a phase's buffers total N rows. The gradient receives wait for the backward phase,
        so the two phases' buffers are not held together."""
        for a in run.actions:
            if a.kind == kind == ActionKind.RECV_F:
                buf = self._recv_buffer(run.st.chunks[a.chunk].size, run.in_w)
                run.recvs[("F", a.chunk)] = (buf, self.comm.irecv(buf, a.peer, tag=2 * a.chunk))
            elif a.kind == kind == ActionKind.RECV_B:
                buf = self._recv_buffer(run.st.chunks[a.chunk].size, run.out_w)
                run.recvs[("B", a.chunk)] = (buf, self.comm.irecv(buf, a.peer, tag=2 * a.chunk + 1))

    def _on_recv(self, run: "_EpochRun", a) -> None:
        st, k = run.st, a.chunk
        tag = "F" if a.kind == ActionKind.RECV_F else "B"
        buf, work = run.recvs.pop((tag, k))
        t0 = time.perf_counter()
        carry_msgs, carry_work = {}, 0.0  # a one-chunk epoch: the carry's own messages (handed-on keys go on first)
        if run.ahead is not None:
            w0 = run.ahead.wait_s
            carry_msgs = run.ahead.take_forward() if tag == "F" else run.ahead.grads_for_backward()
            carry_work = (time.perf_counter() - t0) - (run.ahead.wait_s - w0)  # decoding, not waiting
        work.wait()
        t1 = time.perf_counter()
        run.bubble += t1 - t0 - carry_work
        run.spent["wait_recv"] += t1 - t0 - carry_work
        run.spent["decode"] += carry_work
        d = st.in_dim if tag == "F" else st.out_dim
        if self.wire.lossy:
            buf = self.wire.decode(buf, run.in_w if tag == "F" else run.out_w)
        h, carry = self._unpack(buf, d, run.in_keys if tag == "F" else run.out_keys)
        run.inbox[(tag, k)] = (h, {**carry, **carry_msgs})
        run.spent["decode"] += time.perf_counter() - t1

    def _on_forward(self, run: "_EpochRun", a) -> None:
        st, k = run.st, a.chunk
        t0 = time.perf_counter()
        h_in, carry = run.inbox.pop(("F", k), (None, {}))
        if run.local is not None:
            ch = st.chunks[k]
            carry = {**carry, **run.local.rows(ch.lo, ch.hi)}
        out, cout = st.forward_chunk(k, h_in, carry, on_carry=run.ahead.send_ready if run.ahead else None)
        self._emit(out.detach())
        t1 = time.perf_counter()
        run.spent["forward"] += t1 - t0
        if st.is_last:
            run.counts += st.train_counts(k, out)
        else:
            msg = self._pack(out, cout, run.out_keys)
            run.outbox[("F", k)] = self._encode(msg, st, k, run.epoch, False)
            run.spent["encode"] += time.perf_counter() - t1

    def _on_backward(self, run: "_EpochRun", a) -> None:
        st, k = run.st, a.chunk
        t0 = time.perf_counter()
        g_out, gcarry = run.inbox.pop(("B", k), (None, {}))
        g_in, g_cin, loss = st.backward_chunk(k, g_out, gcarry)
        if run.local is not None:
            ch = st.chunks[k]
            run.local.add_grads(ch.lo, ch.hi, g_cin)
        if loss is not None:
            run.loss_sum += loss
        t1 = time.perf_counter()
        run.spent["backward"] += t1 - t0
        if self.s > 0:
            msg = self._pack(g_in, g_cin, run.in_keys)
            run.outbox[("B", k)] = self._encode(msg, st, k, run.epoch, True)
            if run.ahead:
                run.carry_grads = g_cin  # sent after the rows' gradient (_on_send_b)
            run.spent["encode"] += time.perf_counter() - t1

    def _on_send_f(self, run: "_EpochRun", a) -> None:
        run.sends.append(self.comm.isend(run.outbox.pop(("F", a.chunk)), a.peer, tag=2 * a.chunk,
                                         category="pipe_act"))

    def _on_send_b(self, run: "_EpochRun", a) -> None:
        run.sends.append(self.comm.isend(run.outbox.pop(("B", a.chunk)), a.peer, tag=2 * a.chunk + 1,
                                         category="pipe_grad"))
        if run.ahead is not None:  # then the carry's gradients (waiting for the later stages' part)
            t0, w0 = time.perf_counter(), run.ahead.wait_s
            run.ahead.send_grads(run.carry_grads)
            waited = run.ahead.wait_s - w0
            run.bubble += waited
            run.spent["wait_recv"] += waited
            run.spent["encode"] += time.perf_counter() - t0 - waited

    def _on_opt(self, run: "_EpochRun", a) -> None:
        # (every chunk's backward is done: the carry rows' gradients are whole) the local
        # carry's backward computes while the last rows' gradients are still on the wire
        t0 = time.perf_counter()
        if run.local is not None:
            run.local.backward()
            run.spent["input"] += time.perf_counter() - t0
        t0 = time.perf_counter()
        for w in run.sends + (run.ahead.sends if run.ahead is not None else []):
            w.wait()
        t1 = time.perf_counter()
        run.bubble += t1 - t0
        run.spent["wait_send"] += t1 - t0
        run.sends.clear()
        if run.shared is not None:
            run.shared.backward()
            t2 = time.perf_counter()
            run.spent["input"] += t2 - t1
            t1 = t2
        allreduce_grads(self.params, self.cross)  # across ways: the same stage's layers
        self.opt.step()
        run.spent["optimizer"] += time.perf_counter() - t1

    _HANDLERS = {
        ActionKind.RECV_F: _on_recv, ActionKind.RECV_B: _on_recv,
        ActionKind.F: _on_forward, ActionKind.B: _on_backward,
        ActionKind.SEND_F: _on_send_f, ActionKind.SEND_B: _on_send_b,
        ActionKind.OPT: _on_opt,
    }

    def state_dict(self) -> dict:
        """This stage's parameters, optimizer, and what the next epoch reads of the history:
        the snapshot when one exists (the next epoch restores the history from it; between
        epochs the history's storage holds the last backward's cross-chunk gradients), the
        history buffers otherwise; the same of the remote rows (stale hybrid: the other
        ways' rows ``R``, or their snapshot), which the next epoch reads where their owners'
        chunks have not run yet.

        Cross-chunk gradient buffers are empty between epochs and chunk order and dropout
        are pure functions of (seed, epoch), so this is everything a resume needs.
        """
        return {"kind": "pipeline", **self.stage.state_dict(),
                "opt": self.opt.state_dict() if hasattr(self.opt, "state_dict") else {},
                "exact_epochs": self.exact_epochs.state_dict()}

    def owned_units(self) -> dict[int, dict]:
        st = self.stage
        return {st.first_unit + i: u.state_dict() for i, u in enumerate(st.units)}

    def load_state_dict(self, state: dict) -> None:
        self.stage.load_state_dict(state)
        if hasattr(self.opt, "load_state_dict"):
            self.opt.load_state_dict(state["opt"])
        self.exact_epochs.load_state_dict(state.get("exact_epochs"))

    @torch.no_grad()
    def evaluate(self, epoch: int) -> dict:
        """Exact full-graph inference, unit by unit and chunk by chunk over the training
        chunks' blocks: every unit's input rows of the whole part (the whole graph with one
        way) are computed before the unit runs, so every neighbour row is current (no
        history is read). A stage receives and sends its whole part's rows at once, in
        float32 whatever ``--wire`` says (evaluation is exact)."""
        st = self.stage
        comm = self.comm
        last = self.s == self.S - 1
        out, carry = self._eval_forward(epoch)
        counts = [0] * 6  # only the last stage scores
        if not last:
            cout = {k: carry[k] for k in st.carry_out_keys}
            comm.send(self._pack(out, cout, st.carry_out_keys), self.s + 1, tag=_EVAL_TAG, category="eval")
        else:
            counts = st.eval_counts(out)
        return reduce_accuracies(counts, self.world)

    def _eval_forward(self, epoch: int, refresh: bool = False) -> tuple[torch.Tensor, dict]:
        """This stage's output rows (and carry) of its whole part: receive the previous
        stage's, run :meth:`PipelineStage.forward_whole` (evaluation, or with ``refresh``
        the history refresh of ``StaleOptions.refresh_epochs``) and, for a refresh, send
        them on (evaluation's last send is :meth:`evaluate`'s). Stage boundaries carry
        ``eval`` bytes, ``pipe_act`` for a refresh, float32 whatever ``--wire`` says."""
        st = self.stage
        base = st.chunks[0].lo
        R = st.chunks[-1].hi - base
        tag_cat = "pipe_act" if refresh else "eval"
        h, carry = None, {}
        if self.s > 0:
            buf = torch.empty(R, self._width(st.in_dim, self.carry_in_keys), device=st.device)
            self.comm.recv(buf, self.s - 1, tag=_EVAL_TAG)
            h, carry = self._unpack(buf, st.in_dim, self.carry_in_keys)
        h, carry = st.forward_whole(h, carry, epoch, refresh)
        if refresh and self.s < self.S - 1:
            cout = {k: carry[k] for k in st.carry_out_keys}
            self.comm.send(self._pack(h, cout, st.carry_out_keys), self.s + 1, tag=_EVAL_TAG, category=tag_cat)
        return h, carry

    @torch.no_grad()
    def _refresh(self, epoch: int) -> None:
        """The history refresh before a training epoch (see :meth:`_eval_forward`)."""
        self._eval_forward(epoch, refresh=True)


@dataclass(frozen=True)
class InputLayerParts:
    """This stage's parts of the input layer that run around every stale training epoch
    (exact epochs keep stage 0's own path and relay the carry)."""

    shared: SharedInput | None = None  # --shared-input: its share of the first layer's transform
    local: LocalCarry | None = None    # --local-carry: the carry computed here; its keys leave the messages


class _EpochRun:
    """What the action handlers of one epoch share: the stage that runs it, the posted
    receives, the chunks' arrived inputs (``inbox``) and messages waiting for their send
    (``outbox``), the sends in flight, and the epoch's sums (loss and training counts stay
    on the device until the end), bubble and seconds by kind of work."""

    def __init__(self, st: PipelineStage, epoch: int, actions: list, in_keys: tuple, out_keys: tuple,
                 in_w: int, out_w: int) -> None:
        self.st, self.epoch, self.actions, self.in_w, self.out_w = st, epoch, actions, in_w, out_w
        self.in_keys, self.out_keys = in_keys, out_keys  # carry keys beside the rows of arriving / leaving messages
        self.recvs: dict[tuple, tuple] = {}
        self.inbox: dict[tuple, tuple] = {}
        self.outbox: dict[tuple, torch.Tensor] = {}
        self.sends: list = []
        self.b_posted = False
        self.shared: SharedInput | None = None  # the shared input layer, in a stale epoch
        self.local: LocalCarry | None = None  # the carry computed on every stage, in a stale epoch
        self.ahead: CarryAhead | None = None  # a one-chunk epoch's carry messages
        self.carry_grads: dict = {}
        self.bubble = 0.0
        self.loss_sum = torch.zeros((), dtype=torch.float64, device=st.device)
        self.counts = torch.zeros(2, dtype=torch.int64, device=st.device)
        self.spent = dict.fromkeys(ACTION_KINDS, 0.0)  # seconds by kind of work (EpochResult.actions)

    def free_sends(self) -> None:
        """A completed send's buffer is freed now, not at the epoch's end."""
        if self.sends:
            live = []
            for w in self.sends:
                if w.is_completed():
                    w.wait()
                else:
                    live.append(w)
            self.sends = live
