"""Guards of a training run: what every rank must agree on, and a loss that stops being finite.

Collectives (every rank calls them): :func:`agree_on_setup` turns one rank's set-up failure
into the same error on every rank, :func:`agree_on_epoch` makes resumed ranks start from one
checkpoint, :func:`nonfinite_message` names where a NaN first appeared.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from gnnpipe._base import GnnpipeError
from gnnpipe.checkpoint import list_checkpoints
from gnnpipe.config import TrainConfig
from gnnpipe.dims import ParallelDims


class SetupError(GnnpipeError):
    """A setup failure every rank agreed on; rank 0 reports it, the others exit quietly."""


class NonFiniteLossError(GnnpipeError):
    """The loss became NaN or Inf; every rank raises it with the same message."""


class FiniteWatch:
    """Remembers whether this rank produced a non-finite training output this epoch.

    Installed as the executor's output hook. On a pipeline the last stage computes the
    loss, so a NaN born on stage 0 only shows there; checking each chunk's output (one pass
    over [n_k, d], small beside the aggregation) lets the error name the stage where it
    first appeared. Graph-parallel ranks each compute their own part of the loss, so there
    the local loss says the same.
    """

    def __init__(self) -> None:
        self.bad = False

    def __call__(self, out: torch.Tensor) -> None:
        if not self.bad and not bool(torch.isfinite(out).all()):
            self.bad = True

    def reset(self) -> None:
        self.bad = False


def nonfinite_message(cfg: TrainConfig, comm, dims: ParallelDims, watch: FiniteWatch, res, loss: float,
                       epoch: int, out: Path | None) -> str:
    """Where the non-finite loss came from (collective: every rank calls it)."""
    world = comm.world_size
    mine = watch.bad if dims.pipelined else not np.isfinite(res.loss)
    flags = torch.zeros(world, dtype=torch.float64)
    flags[comm.rank] = 1.0 if mine else 0.0
    if world > 1:
        comm.all_reduce(flags, op="sum", category="control")
    hit = [k for k in range(world) if flags[k] > 0]
    if dims.pipelined:
        S = dims.stages
        if hit:
            way, stage = min((dims.coords(k) for k in hit), key=lambda ws: (ws[1], ws[0]))
            where = f"first non-finite output on stage {stage} of {S}"
            if stage == S - 1:
                where += " (last)"
            if world > S:
                where += f", way {way}"
        else:
            where = f"every stage's output finite; the loss on stage {S - 1} (last) is not"
    else:
        where = f"non-finite local loss on rank(s) {', '.join(map(str, hit))}" if hit else "ranks' losses finite, their sum is not"
    msg = f"loss became {loss} at epoch {epoch} (mode {cfg.mode}; {where}); stopping"
    if out is not None and cfg.checkpoint_every:
        done = list_checkpoints(out)
        msg += (f"; last good checkpoint: {done[-1][1]}" if done else "; no checkpoint was written yet")
    return msg + ". Lower --lr or check the input features"


def agree_on_epoch(comm, epoch: int, where: Path) -> None:
    """Every rank resumes from the same epoch (each resolved ``latest`` on its own)."""
    if comm.world_size == 1:
        return
    t = torch.tensor([epoch, -epoch], dtype=torch.int64)
    comm.all_reduce(t, op="max", category="control")
    if int(t[0]) != epoch or int(-t[1]) != epoch:
        raise GnnpipeError(f"ranks resolved --resume to different checkpoints (epochs "
                           f"{int(-t[1])}..{int(t[0])}, rank {comm.rank} found {where}); "
                           "pass the checkpoint directory itself")


def agree_on_setup(comm, err: GnnpipeError | None) -> None:
    """Every rank learns whether any rank failed to set up, and why (no rank hangs waiting).

    The lowest failing rank's message is broadcast; every rank raises it, so rank 0 prints
    it and every process exits non-zero.
    """
    if comm.world_size == 1:
        if err is not None:
            raise err
        return
    failing = torch.tensor([comm.rank if err is not None else comm.world_size], dtype=torch.int64)
    comm.all_reduce(failing, op="min", category="control")
    r = int(failing)
    if r == comm.world_size:
        return
    msg = torch.zeros(2048, dtype=torch.uint8)
    if comm.rank == r:
        data = str(err).encode()[:2048]
        msg[: len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    comm.broadcast(msg, src=r, category="control")
    text = bytes(msg.tolist()).rstrip(b"\0").decode(errors="replace")
    if comm.rank == r:
        raise SetupError(str(err) if r == 0 else f"rank {r}: {err}") from err
    raise SetupError(text if r == 0 else f"rank {r}: {text}")
