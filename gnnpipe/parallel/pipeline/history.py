"""A pipeline stage's history buffers and their epoch phases (rules 2–4 of
:mod:`gnnpipe.parallel.pipeline.stage`).

Per aggregating unit position ``u`` whose input is trained, with ``R`` rows (every node, or
a hybrid way's own part):

- ``H_u`` [R, d_in] (:attr:`History.hist`): the input rows chunks read for their
  out-of-chunk neighbours; always allocated;
- ``G_u`` (:attr:`History.gacc`, with ``grad_fix``): the cross-chunk gradients of those rows,
  live in the backward phase only;
- ``S_u`` (:attr:`History.snap`): the snapshot, once one was taken (``snapshot_period``).

While no snapshot exists ``H_u`` must survive into the next epoch, so ``G_u`` is a buffer of
its own. Once one exists ``H_u`` is dead from the end of the forward phase (the next epoch
restores it from ``S_u``), so ``G_u`` reuses its storage and the snapshot is taken at the
end of the forward phase (``H_u`` is not written in backward, so this equals taking it at
the end of the epoch). Two buffers per unit at any time.

A neighbour source with remote rows (``halo_rows``: the stale hybrid's rows of the other
ways) adds the same trio over those rows: ``R_u`` (:attr:`History.remote`) beside ``H_u``,
its gradient ``GR_u`` (:attr:`History.gremote`) beside ``G_u`` and ``RS_u``
(:attr:`History.rsnap`) beside ``S_u``, taken, restored and checkpointed at the same points.

With ``measure_drift`` the history also measures how far the rows a stale epoch's chunks
write moved from the rows they replace (the rows a reader of a chunk that had not run yet
saw): :meth:`write_chunk` sums ``‖new − old‖²`` and ``‖new‖²``, :meth:`take_drift` hands the
sums over (stage.py rule 9).

This object owns the buffers and the phase rules only; which rows a chunk writes and reads
is the stage's, how remote rows travel is the neighbour source's. It never communicates and
needs no model, so a test drives it rule by rule in one process.
"""

from __future__ import annotations

import torch

from gnnpipe._base import GnnpipeError


class History:
    """The buffers of one stage: ``H``, ``G``, ``S`` and their remote twins ``R``, ``GR``, ``RS``.

    Args:
        dims: unit position -> input width ``d_in`` of each unit that keeps history.
        rows: ``R``, rows of ``H_u`` (row ``r`` is node ``row0 + r`` of the stage's source).
        halo_rows: rows of the remote buffers (None: none).
        grad_fix: keep cross-chunk gradient buffers.
        snapshot_period: ``K`` (0: no snapshot).
        dtype: storage dtype of every buffer (reads upcast to float32, writes round).
        device: where the buffers live.
    """

    def __init__(self, dims: dict[int, int], rows: int, halo_rows: int | None, grad_fix: bool,
                 snapshot_period: int, dtype: torch.dtype = torch.float32,
                 device: torch.device | str = "cpu") -> None:
        self.grad_fix = grad_fix
        self.snapshot_period = snapshot_period
        self.hist: dict[int, torch.Tensor] = {}
        self.gacc: dict[int, torch.Tensor] = {}  # G_u; aliases H_u in the backward phase once a snapshot exists
        self.snap: dict[int, torch.Tensor] | None = None
        self.remote: dict[int, torch.Tensor] = {}
        self.gremote: dict[int, torch.Tensor] = {}
        self.rsnap: dict[int, torch.Tensor] | None = None
        self.epoch = 0
        self.backward_phase = False
        self.measure_drift = False
        self._drift = torch.zeros(2, dtype=torch.float64, device=device)  # Σ‖new − old‖², Σ‖new‖²
        for pos, d in dims.items():
            self.hist[pos] = torch.zeros(rows, d, dtype=dtype, device=device)
            if grad_fix:
                self.gacc[pos] = torch.zeros(rows, d, dtype=dtype, device=device)
            if halo_rows is not None:
                self.remote[pos] = torch.zeros(halo_rows, d, dtype=dtype, device=device)
                if grad_fix:
                    self.gremote[pos] = torch.zeros(halo_rows, d, dtype=dtype, device=device)

    def __contains__(self, pos: int) -> bool:
        return pos in self.hist

    # ------------------------------------------------------------------ phases
    def begin_epoch(self, epoch: int) -> None:
        """Start of epoch ``epoch``: with a snapshot, ``H ← S`` (and ``R ← RS``), and ``G``
        is unavailable until the backward phase (it will live in ``H``'s storage)."""
        self.epoch = epoch
        self.backward_phase = False
        if self.snap is not None:
            self.gacc = {}
            self.gremote = {}
            for pos, h in self.hist.items():
                h.copy_(self.snap[pos])
            for pos, r in self.remote.items():
                r.copy_(self.rsnap[pos])

    def begin_backward(self) -> bool:
        """The turn from the forward to the backward phase; returns False if it already
        turned this epoch. Snapshot epochs (``(epoch + 1) % K == 0``) take ``S ← H`` (and
        ``RS ← R``) here; once a snapshot exists, ``G`` takes over ``H``'s storage (and
        ``GR`` ``R``'s), zeroed."""
        if self.backward_phase:
            return False
        self.backward_phase = True
        k = self.snapshot_period
        if k and (self.epoch + 1) % k == 0 and self.hist:
            if self.snap is None:
                self.gacc = {}  # the separate G buffers are all zero here: G is written only in backward
                self.gremote = {}
                self.snap = {pos: h.clone() for pos, h in self.hist.items()}
                self.rsnap = {pos: r.clone() for pos, r in self.remote.items()}
            else:
                for pos, h in self.hist.items():
                    self.snap[pos].copy_(h)
                for pos, r in self.remote.items():
                    self.rsnap[pos].copy_(r)
        if self.snap is not None and self.grad_fix:
            self.gacc = {pos: h.zero_() for pos, h in self.hist.items()}
            self.gremote = {pos: r.zero_() for pos, r in self.remote.items()}
        return True

    def end_epoch(self) -> None:
        """End of the epoch: the gradients of rows whose chunk already ran backward (stale
        for their reader) are dropped (``G ← 0``)."""
        self.begin_backward()  # (a no-op after any backward)
        if self.snap is not None:
            self.gacc = {}  # H_u's storage: restored from the snapshot by the next epoch
            self.gremote = {}
        for g in list(self.gacc.values()) + list(self.gremote.values()):
            g.zero_()
        self.backward_phase = False

    def write_chunk(self, pos: int, lo: int, hi: int, rows: torch.Tensor) -> None:
        """A stale epoch's chunk writes its input rows of unit ``pos`` into rows ``[lo, hi)`` of
        ``H_u`` (detached, rounded to the buffers' dtype); with :attr:`measure_drift`, first
        adds how far they moved from the rows they replace to the epoch's drift sums."""
        h = self.hist[pos][lo:hi]
        new = rows.detach()
        if self.measure_drift:
            new32 = new.float()  # one upcast of the new rows for both sums (a no-op in float32)
            self._drift[0] += (new32 - h.float()).square().sum(dtype=torch.float64)
            self._drift[1] += new32.square().sum(dtype=torch.float64)
        h.copy_(new)

    def take_drift(self) -> torch.Tensor:
        """The drift sums of the writes since the last call, ``[Σ‖new − old‖², Σ‖new‖²]``
        (float64, on the buffers' device); the sums restart at zero."""
        out = self._drift.clone()
        self._drift.zero_()
        return out

    def write_whole(self, pos: int, rows: torch.Tensor, halo: torch.Tensor | None = None) -> None:
        """An exact epoch's rows of unit ``pos`` (rule 8): every row of ``H_u`` and, with
        remote rows, every row of ``R_u`` (``halo``, in ``R_u``'s row order), detached and
        rounded to the buffers' dtype, as chunks write theirs."""
        h = self.hist[pos]
        if rows.shape[0] != h.shape[0]:
            raise GnnpipeError(f"internal: {rows.shape[0]} rows for a history of {h.shape[0]}")
        h.copy_(rows.detach())
        r = self.remote.get(pos)
        if r is not None:
            if halo is None or halo.shape[0] != r.shape[0]:
                raise GnnpipeError(f"internal: the remote rows of unit {pos} need {r.shape[0]} halo rows")
            r.copy_(halo.detach())

    # ------------------------------------------------------------------ checkpoints
    def set_snapshot(self, snap: dict | None, rsnap: dict | None = None) -> None:
        """Load a snapshot of ``H`` (and of ``R``, when there are remote rows): copied into
        buffers of the history dtype."""
        if snap is None:
            self.snap = self.rsnap = None
            return
        if self.remote and rsnap is None:
            raise GnnpipeError("internal: a snapshot of the history without one of the remote rows")
        self.gacc = {}
        self.gremote = {}
        self.snap = {pos: torch.empty_like(self.hist[pos]).copy_(v) for pos, v in snap.items()}
        self.rsnap = {pos: torch.empty_like(self.remote[pos]).copy_(v) for pos, v in (rsnap or {}).items()}

    def state_dict(self) -> dict:
        """What the next epoch reads, between epochs: the snapshot when one exists (the next
        epoch restores ``H`` from it; ``H``'s storage then holds the last backward's
        gradients), ``H`` otherwise; the same of the remote rows. ``G`` is zero between
        epochs, so it is not saved."""
        return {
            "hist": {k: v.clone() for k, v in self.hist.items()} if self.snap is None else {},
            "snap": None if self.snap is None else {k: v.clone() for k, v in self.snap.items()},
            "remote": {k: v.clone() for k, v in self.remote.items()} if self.snap is None else {},
            "rsnap": None if self.rsnap is None else {k: v.clone() for k, v in self.rsnap.items()},
        }

    def load_state_dict(self, state: dict) -> None:
        """The inverse of :meth:`state_dict` (checkpoint resume)."""
        for k, v in state["hist"].items():
            self.hist[k].copy_(v)
        if self.remote and "remote" not in state:
            raise GnnpipeError("checkpoint holds no remote rows of the other ways (saved before they were "
                               "checkpointed); resuming would change the numbers")
        for k, v in state.get("remote", {}).items():
            self.remote[k].copy_(v)
        self.set_snapshot(state["snap"], state.get("rsnap"))
