"""Which epochs of a stale run are exact (stage.py rules 8 to 10).

Two schedules, never both, and a cool-down that either may end in:

- **fixed** (``--exact-every N``, rule 8): epochs 0, N, 2N, ...; a pure function of the
  epoch.
- **drift-bounded** (``--drift-bound B``, rule 9): epoch 0 is exact (the history holds
  nothing yet: a stale epoch 0 reads zeros for every neighbour whose chunk has not run),
  and so is every epoch that follows a stale epoch whose history **drift** exceeded ``B``.
  An exact epoch is always followed by a stale one, so at most every other epoch is exact.
- **cool-down** (``--exact-from E``, rule 10): every epoch ``e >= E`` is exact, whatever the
  schedule above says; the run ends on exact training's objective.

The drift of a stale epoch is ``sqrt(Σ‖new − old‖² / Σ‖new‖²)`` over every history row its
chunks wrote, every unit, stage and way (:meth:`History.write_chunk` sums them, the runtime
adds the sums over the ranks): the relative change of the rows one epoch apart, which is
the error of a row read stale by a chunk that ran before the row's own. It includes
dropout's resampling (a row depends on the epoch's masks of every layer below it), so it
does not go to zero: about 0.42-0.45 on Squirrel and Coauthor-Physics GCNII-32 after a few
epochs, where the stale pipeline trains; 0.9-1.8 on Amazon-Photo, where it collapses
(docs/convergence-notes.md section 15).

The decision is the same on every rank (the sums are all-reduced), so the epochs stay data
every stage agrees on before the epoch starts; :meth:`state_dict` carries it across a
checkpoint.
"""

from __future__ import annotations

import math

import torch

from gnnpipe.parallel.executor import StaleOptions


def drift_of(sums: torch.Tensor) -> float:
    """The drift of ``[Σ‖new − old‖², Σ‖new‖²]`` (0 where no row was written)."""
    num, den = (float(v) for v in sums.tolist())
    return math.sqrt(num / den) if den > 0 else 0.0


class ExactEpochs:
    """The exact epochs of one stale run (see the module docstring).

    Args:
        opts: the run's :class:`StaleOptions` (``exact_every`` or ``drift_bound``).
    """

    def __init__(self, opts: StaleOptions) -> None:
        self.every = opts.exact_every
        self.bound = opts.drift_bound
        self.since = opts.exact_from
        self.next_exact = self.bound > 0  # drift-bounded: epoch 0 is exact

    @property
    def measures_drift(self) -> bool:
        return self.bound > 0

    def is_exact(self, epoch: int) -> bool:
        """Whether ``epoch`` (the next one to run) is exact."""
        if self.since and epoch >= self.since:
            return True
        if self.measures_drift:
            return self.next_exact
        return bool(self.every) and epoch % self.every == 0

    def record(self, exact: bool, drift: float | None) -> None:
        """An epoch ran, exact or with this ``drift``: decide the next one."""
        if self.measures_drift:
            self.next_exact = not exact and drift is not None and drift > self.bound

    def state_dict(self) -> dict:
        return {"next_exact": self.next_exact}

    def load_state_dict(self, state: dict | None) -> None:
        if state is not None and self.measures_drift:
            self.next_exact = bool(state["next_exact"])
