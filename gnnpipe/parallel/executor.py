"""What every executor offers the trainer, and what the executors share.

An executor runs this rank's share of one parallel mode (graph, pipeline, hybrid) for one
epoch at a time. The trainer sees only :class:`Executor`: ``train_epoch`` returns one
:class:`EpochResult` (this rank's sums; the trainer reduces them over ranks), ``evaluate``
the exact full-graph accuracies (already reduced), and ``state_dict``/``load_state_dict``
what a checkpoint holds. ``output_hook`` is how the trainer watches the embeddings an
executor produces in training (for example for non-finite values) without reaching into it.

The pieces both executors need live here once: the weight-gradient all-reduce, the
per-split accuracy counts and their reduction, and the staleness options.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch

from gnnpipe.dims import ParallelDims
from gnnpipe.models import accuracy_counts

SPLITS = ("train", "val", "test")


@dataclass
class EpochResult:
    """What one training epoch produced on this rank (sums; the trainer reduces them).

    Attributes:
        loss: this rank's share of the loss (the shares add up to the epoch's loss).
        train_correct, train_total: training-accuracy counts of the rows this rank scored.
        compute_s: wall time minus time spent waiting on the communicator.
        comm_s: time spent waiting on the communicator.
        bubble_s: pipeline stages: time spent waiting for a neighbour stage (0 in graph mode).
        actions: pipeline stages: seconds by kind of work (:data:`ACTION_KINDS`), what
            ``gnnpipe-train --profile-actions`` records; empty in graph mode.
        exact: a stale run's exact epoch (``--exact-every``, ``--drift-bound``).
        drift: with ``--drift-bound``, a stale epoch's history drift (the same on every rank).
        cpu_s: this process's CPU seconds over the epoch (every thread), set by the trainer:
            beside the wall time it tells a rank that had a core to itself (``cpu_s`` close to
            ``compute_s``) from one that shared it.
    """

    loss: float
    train_correct: int
    train_total: int
    compute_s: float
    comm_s: float
    bubble_s: float = 0.0
    actions: dict = field(default_factory=dict)
    exact: bool = False
    drift: float | None = None
    cpu_s: float | None = None


#: A pipeline stage's epoch by kind of work: ``forward`` and ``backward`` (the units'
#: compute, ``gather`` included), ``gather`` (reading neighbour rows from the history or the
#: other ways into each chunk's source rows), ``encode``/``decode`` (wire format and packing
#: of chunk messages), ``wait_recv`` (waiting for a neighbour stage's chunk), ``wait_send``
#: (waiting for sends to finish before the optimizer), ``optimizer`` (the cross-way gradient
#: all-reduce and the step), ``input`` (``--shared-input``: the stage's share of the first
#: layer's transform, forward and backward, with its messages) and ``other`` (the rest:
#: schedule, bookkeeping).
ACTION_KINDS = ("forward", "backward", "gather", "encode", "decode", "wait_recv", "wait_send", "optimizer", "input",
                "other")


@dataclass
class StaleOptions:
    """The pipeline's convergence techniques and exactness: shuffle and the gradient fix on
    by default, the snapshot (the paper's third technique) and the history refresh off (see
    docs/convergence-notes.md for the measurements behind the defaults).

    Exact mode runs one chunk per way, so there is nothing stale: use :meth:`resolve`, which
    switches the techniques off there.
    """

    exact: bool = False
    shuffle: bool = True
    grad_fix: bool = True
    grad_scale: float = 2.0
    snapshot_period: int = 0
    refresh_epochs: int = 0
    exact_every: int = 0
    drift_bound: float = 0.0
    exact_from: int = 0

    @classmethod
    def resolve(cls, exact: bool, shuffle: bool = True, grad_fix: bool = True,
                snapshot_period: int = 0, grad_scale: float = 2.0, refresh_epochs: int = 0,
                exact_every: int = 0, drift_bound: float = 0.0, exact_from: int = 0) -> "StaleOptions":
        """The options a run uses: in exact mode no gradient fix, no snapshot, no refresh,
        no exact epochs (every epoch is)."""
        return cls(exact=exact, shuffle=shuffle, grad_fix=grad_fix and not exact, grad_scale=grad_scale,
                   snapshot_period=0 if exact else snapshot_period, refresh_epochs=0 if exact else refresh_epochs,
                   exact_every=0 if exact else exact_every, drift_bound=0.0 if exact else drift_bound,
                   exact_from=0 if exact else exact_from)

    @property
    def has_exact_epochs(self) -> bool:
        """Whether a stale run has exact epochs among its stale ones (rules 8 to 10)."""
        return bool(self.exact_every) or self.drift_bound > 0 or self.exact_from > 0


OutputHook = Callable[[torch.Tensor], None]


class Executor(ABC):
    """This rank's part of one parallel mode.

    Attributes:
        dims: the parallel layout the executor runs.
        device: where this rank computes (every tensor the executor makes lives there).
        output_hook: called with every output this rank computes in a training forward
            (graph mode: the local logits; a pipeline stage: each chunk's output rows), or
            None. It must not modify the tensor.
    """

    dims: ParallelDims
    device: torch.device = torch.device("cpu")
    output_hook: OutputHook | None = None

    @abstractmethod
    def train_epoch(self, epoch: int) -> EpochResult:
        """One training epoch (one optimizer step) on this rank."""

    @abstractmethod
    def evaluate(self, epoch: int) -> dict:
        """Exact full-graph inference: ``{"train_acc", "val_acc", "test_acc"}``, the same on
        every rank (collective)."""

    @abstractmethod
    def state_dict(self) -> dict:
        """Everything a resumed run needs from this rank."""

    @abstractmethod
    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`'s output."""

    @abstractmethod
    def owned_units(self) -> dict[int, dict]:
        """``{unit index in the model: state_dict}`` of the units this rank trains (graph
        mode: every unit; a pipeline stage: its block)."""

    def _emit(self, out: torch.Tensor) -> None:
        if self.output_hook is not None:
            self.output_hook(out)


def wait_seconds(comm) -> float:
    """Seconds ``comm`` has spent waiting so far (0 for a communicator that keeps no stats)."""
    stats = getattr(comm, "stats", None)
    return float(stats.wait_s) if stats is not None else 0.0


def allreduce_grads(params: Sequence[torch.nn.Parameter], comm) -> None:
    """Give every parameter a gradient (zeros where autograd left none) and sum them over
    ``comm``'s ranks in one flat buffer (nothing travels with one rank or ``comm=None``)."""
    params = list(params)
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    if comm is None or comm.world_size == 1 or not params:
        return
    flat = torch.cat([p.grad.reshape(-1) for p in params])
    comm.all_reduce(flat, op="sum", category="allreduce")
    off = 0
    for p in params:
        k = p.numel()
        p.grad.copy_(flat[off : off + k].view_as(p.grad))
        off += k


def split_counts(logits: torch.Tensor, labels: torch.Tensor, masks: dict, multilabel: bool) -> list[int]:
    """``[correct, total]`` for each of :data:`SPLITS`, flattened (6 numbers)."""
    counts = [accuracy_counts(logits, labels, masks[split], multilabel=multilabel, as_tensor=True) for split in SPLITS]
    return torch.cat(counts).tolist()  # one read of the device


def reduce_accuracies(counts: Sequence[float], comm) -> dict:
    """Sum :func:`split_counts` over ``comm``'s ranks (collective) into accuracies."""
    t = torch.tensor(list(counts), dtype=torch.float64)
    if comm.world_size > 1:
        comm.all_reduce(t, op="sum", category="control")
    c = t.tolist()
    return {f"{split}_acc": c[2 * i] / max(c[2 * i + 1], 1) for i, split in enumerate(SPLITS)}
