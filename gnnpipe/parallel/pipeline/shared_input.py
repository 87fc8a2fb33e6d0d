"""The input layer shared by every stage of a way (``--shared-input``).

A model's first layer reads the raw features, often far wider than the hidden width
(Squirrel 2,089, Physics 8,415): its row-wise transform ``drop(x) W`` is then most of the
first stage's work, and the other stages wait for it. Graph parallelism splits that work
over every rank; a pipeline gives all of it to stage 0. Here every stage of the way
transforms a contiguous share of the feature rows with its copy of the first unit (the
unit's ``transform_input``, the split :class:`gnnpipe.parallel.pipeline.inputs.StageFeatures`
uses) and stage 0 runs its chunks on the rows so gathered.

One epoch, for a stale training epoch (exact epochs and evaluation keep the unit's own path
on stage 0):

1. **forward**, before the first chunk: stage 0 sends the first unit's current weights to
   every other stage; each stage transforms its share of the rows (this epoch's dropout
   masks, the same per node as on stage 0) and sends them to stage 0, which transforms its
   own share meanwhile and hands all rows to its :class:`StageFeatures`
   (:meth:`StageFeatures.take_transform`); chunks read their rows of the result;
2. **backward**, when stage 0's last chunk backward is done (at the optimizer step, when
   every chunk has added its rows' gradients): stage 0 sends each stage the gradients of
   its share's rows; each back-propagates them through its transform and sends its share of
   the weight gradient to stage 0, which adds the shares to its own, in stage order, before
   it steps. Only stage 0 owns the weights and their optimizer: the other stages' copies
   are overwritten by the next epoch's step 1, so checkpoints and resumes are unchanged.

The result is the one-stage transform's, summed in another order (the weight gradient is a
sum of per-share products): stale training's numbers up to rounding. ``--exact`` refuses it
(exact mode equals one process bit for bit). Bytes per epoch: stage 0 sends the weights and
the row gradients, every other stage its rows and its weight-gradient share, all float32
whatever ``--wire`` says (category ``input_fwd`` / ``input_bwd``;
:func:`gnnpipe.partition.volume.shared_input_bytes` predicts them).
"""

from __future__ import annotations

import numpy as np
import torch

from gnnpipe.models import RunCtx

# Tags apart from the chunk messages' (2k, 2k + 1) and evaluation's.
_TAG_WEIGHTS, _TAG_ROWS, _TAG_ROW_GRADS, _TAG_WEIGHT_GRADS = 2**27, 2**27 + 1, 2**27 + 2, 2**27 + 3


def share_bounds(rows: int, stages: int) -> np.ndarray:
    """``[stages + 1]`` row offsets: stage ``s`` transforms rows ``[b[s], b[s + 1])``
    (contiguous shares as equal as rows allow)."""
    return np.array([rows * s // stages for s in range(stages + 1)], dtype=np.int64)


class SharedInput:
    """One stage's part of the shared input layer (see the module docstring).

    Args:
        comm: the way's communicator (rank = stage).
        unit: the model's first unit on this rank (stage 0: the one it trains; elsewhere a
            copy whose weights each epoch overwrites).
        x: this stage's share of the feature rows (dense [rows, F], on ``device``).
        gid: their global node ids (the dropout masks' key).
        bounds: :func:`share_bounds` of the way's feature rows.
        seed: the run's seed (dropout).
        features: stage 0's :class:`StageFeatures` (None on the other stages).
    """

    def __init__(self, comm, unit, x: torch.Tensor, gid: torch.Tensor, bounds: np.ndarray, seed: int,
                 features=None) -> None:
        self.comm, self.unit, self.x, self.gid = comm, unit, x, gid
        self.bounds = [int(b) for b in bounds]
        self.seed = seed
        self.features = features
        self.stage = comm.rank
        self.params = list(unit.parameters())
        self._z: torch.Tensor | None = None  # this epoch's share, with its autograd graph
        self.width = int(unit.transformed_dim)

    @property
    def weight_numel(self) -> int:
        return sum(p.numel() for p in self.params)

    def forward(self, epoch: int) -> None:
        """Step 1 of the module docstring (every stage of the way calls it)."""
        comm, S = self.comm, len(self.bounds) - 1
        dev = self.x.device
        if self.stage == 0:
            flat = torch.cat([p.detach().reshape(-1) for p in self.params])
            sends = [comm.isend(flat, s, tag=_TAG_WEIGHTS, category="input_fwd") for s in range(1, S)]
            z_all = torch.empty(self.bounds[-1], self.width, device=dev)
            recvs = [comm.irecv(z_all[self.bounds[s]:self.bounds[s + 1]], s, tag=_TAG_ROWS, category="input_fwd")
                     for s in range(1, S)]
            self._z = z = self._transform(epoch)
            z_all[: self.bounds[1]] = z.detach()
            for w in recvs + sends:
                w.wait()
            self.features.take_transform(z_all)
        else:
            flat = torch.empty(self.weight_numel, device=dev)
            comm.recv(flat, 0, tag=_TAG_WEIGHTS, category="input_fwd")
            with torch.no_grad():
                off = 0
                for p in self.params:
                    p.copy_(flat[off : off + p.numel()].view_as(p))
                    off += p.numel()
            self._z = z = self._transform(epoch)
            comm.send(z.detach().contiguous(), 0, tag=_TAG_ROWS, category="input_fwd")

    def backward(self) -> None:
        """Step 2 of the module docstring (every stage of the way calls it, after its last
        chunk's backward)."""
        comm, S = self.comm, len(self.bounds) - 1
        z, self._z = self._z, None
        if self.stage == 0:
            gz = self.features.transform_grad()
            sends = [comm.isend(gz[self.bounds[s]:self.bounds[s + 1]], s, tag=_TAG_ROW_GRADS, category="input_bwd")
                     for s in range(1, S)]
            torch.autograd.backward([z], [gz[: self.bounds[1]]])
            share = torch.empty(self.weight_numel, device=z.device)
            for s in range(1, S):  # in stage order: the same sums on every run
                comm.recv(share, s, tag=_TAG_WEIGHT_GRADS, category="input_bwd")
                off = 0
                for p in self.params:
                    g = share[off : off + p.numel()].view_as(p)
                    p.grad = g.clone() if p.grad is None else p.grad.add_(g)
                    off += p.numel()
            for w in sends:
                w.wait()
        else:
            gz = torch.empty(z.shape, device=z.device)
            comm.recv(gz, 0, tag=_TAG_ROW_GRADS, category="input_bwd")
            for p in self.params:
                p.grad = None
            torch.autograd.backward([z], [gz])
            share = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
                               for p in self.params])
            comm.send(share, 0, tag=_TAG_WEIGHT_GRADS, category="input_bwd")
            for p in self.params:
                p.grad = None

    def _transform(self, epoch: int) -> torch.Tensor:
        ctx = RunCtx(training=True, epoch=epoch, seed=self.seed)
        with torch.enable_grad():
            return self.unit.transform_input(self.x, self.gid, ctx)
