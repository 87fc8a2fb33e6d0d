"""Graph-parallel executor: each rank owns one partition and every layer.

Before every aggregation whose inputs change during training, each rank sends the rows its
neighbours' partitions need (its "send" lists) and receives its halo rows, all in one
``all_to_all``; in the backward pass the gradients of the halo rows travel back the same
way and are added into the owners' rows. Weight gradients are all-reduced once per epoch
and every rank steps an identical optimizer: full-batch semantics, identical to a
one-process run of the same model up to floating-point summation order.

What travels, per epoch (bytes as handed to the communicator, ``s`` bytes per value; with a
lossy ``--wire`` format ``row_bytes(d_in, wire)`` per row instead of ``d_in · s``, see
:mod:`gnnpipe.wire`; evaluation halos stay float32):

* ``halo_fwd``: for every aggregating unit except one whose input is the constant input
  features: ``Σ_p M_p · d_in · s`` (``M_p`` halo rows of part ``p``);
* ``halo_bwd``: the same amount again, gradients of those rows;
* ``allreduce``: the parameter bytes, once per rank.

With boundary sampling (``boundary_sample`` P < 1, :mod:`gnnpipe.partition.sampling`) each
training exchange carries, per ordered pair of parts, ``⌊P·n⌋`` of the pair's ``n`` rows
instead of all of them, in both directions.

The input features' halo never travels: features are constant, so every rank reads its halo
rows of the (memory-mapped) dataset at start-up — cheaper still than the one-time exchange
the paper's model would suggest (see :mod:`gnnpipe.partition.volume`).
"""

from __future__ import annotations

import logging
import time

import numpy as np
import torch

from gnnpipe.dims import ParallelDims
from gnnpipe.models import GNN, RunCtx, accuracy_counts, loss_fn
from gnnpipe.models.block import Block
from gnnpipe.parallel.features import concat_rows, features_to_tensor
from gnnpipe.parallel.executor import EpochResult, Executor, allreduce_grads, reduce_accuracies, split_counts, wait_seconds
from gnnpipe.parallel.halo import HaloExchanger, with_halo
from gnnpipe.partition.sampling import BoundarySample
from gnnpipe.wire import FLOAT32, Wire

log = logging.getLogger(__name__)


def part_exchanger(comm, local, device: torch.device | str = "cpu", wire: Wire = FLOAT32,
                   sample: BoundarySample | None = None) -> HaloExchanger:
    """The halo exchange of this rank's part ``local`` (a :class:`gnnpipe.partition.LocalPart`):
    its send lists, in ``wire``'s format, under boundary ``sample`` (None: every row).
    Rows are keyed by ORIGINAL node ids (dropout masks, a lossy wire's rounding), so runs on
    any number of ranks draw as the one-process run does."""
    return HaloExchanger(comm, int(local.num_local), local.halo.send_idx, local.halo.recv_counts, wire=wire,
                         gid_local=np.asarray(local.orig_ids, dtype=np.int64),
                         gid_halo=np.asarray(local.halo_orig_ids, dtype=np.int64), device=device, sample=sample)


class GraphParallelExecutor(Executor):
    """Runs the whole model on this rank's partition with per-layer halo exchange.

    Args:
        comm: communicator whose world size equals the plan's number of parts.
        local: this rank's :class:`gnnpipe.partition.LocalPart`.
        halo_features: input features of the halo rows (dense or sparse), in halo order.
        model: the :class:`gnnpipe.models.GNN` (identical initial weights on every rank).
        optimizer: the optimizer over ``model.parameters()``.
        num_train_global: number of training nodes in the whole graph (loss normaliser).
        seed: dropout seed.
        multilabel: BCE instead of cross-entropy.
        device: where this rank computes: the block, features, labels, masks and halo lists
            are put there (the model is the caller's to place, as its optimizer is built
            over its parameters).
        exchanger: the part's halo exchange (:func:`part_exchanger`: its wire format and
            boundary sampling); by default every row in float32.
    """

    def __init__(self, comm, local, halo_features, model: GNN, optimizer, num_train_global: int,
                 seed: int = 0, multilabel: bool = False, device: str = "cpu",
                 exchanger: HaloExchanger | None = None) -> None:
        self.comm = comm
        self.dims = ParallelDims("graph", ways=comm.world_size)
        self.local = local
        self.model = model
        self.opt = optimizer
        self.seed = seed
        self.multilabel = multilabel
        self.device = torch.device(device)
        self.num_train_global = max(int(num_train_global), 1)
        n = int(local.num_local)
        self.num_local = n
        # Dropout masks (and a lossy wire's rounding) are keyed by ORIGINAL node ids, so they
        # do not depend on the plan: runs on any number of ranks draw the same masks as the
        # one-process run.
        gid_local = np.asarray(local.orig_ids, dtype=np.int64)
        gid_halo = np.asarray(local.halo_orig_ids, dtype=np.int64)
        self.exchanger = exchanger if exchanger is not None else part_exchanger(comm, local, self.device)
        self.block = Block(
            indptr=torch.as_tensor(np.asarray(local.indptr, dtype=np.int64)),
            indices=torch.as_tensor(np.asarray(local.indices, dtype=np.int64)),
            num_src=n + gid_halo.size,
            src_deg=torch.as_tensor(np.concatenate([local.deg_local, local.deg_halo]).astype(np.float32)),
            dst_deg=torch.as_tensor(np.asarray(local.deg_local, dtype=np.float32)),
            dst_gid=torch.as_tensor(gid_local),
            src_gid=torch.as_tensor(np.concatenate([gid_local, gid_halo])),
            dst_in_src=torch.arange(n, dtype=torch.int64),
        ).to(self.device)
        # Input features of local + halo rows: constant, so they never travel per epoch.
        self.x_src = features_to_tensor(concat_rows(local.features, halo_features), self.device)
        # Dense: the local rows are the first rows of x_src (a view, not a second copy).
        self.x_dst = self.x_src[:n] if self.x_src.layout == torch.strided else features_to_tensor(local.features, self.device)
        self.labels = torch.as_tensor(np.asarray(local.labels)).to(self.device)
        self.masks = {
            split: torch.as_tensor(np.asarray(getattr(local, f"{split}_mask"), dtype=bool)).to(self.device)
            for split in ("train", "val", "test")
        }

    # ------------------------------------------------------------------ forward
    def forward(self, ctx: RunCtx) -> torch.Tensor:
        """Logits of the local rows [num_local, classes].

        Training exchanges halo rows inside autograd (their gradients go home in backward);
        evaluation exchanges plain rows under the ``eval`` category.
        """
        h = self.x_dst
        h_src = self.x_src
        carry: dict = {}
        for i, unit in enumerate(self.model.units):
            if unit.aggregates:
                if i > 0:  # unit 0's sources are the constant features, halo included
                    if ctx.training:
                        h_src = with_halo(h, self.exchanger, ctx.epoch, i)
                    else:
                        h_src = torch.cat([h, self.exchanger.exchange(h, "eval")], dim=0)
                h, carry = unit(h, carry, ctx, block=self.block, h_src=h_src)
            else:
                h, carry = unit(h, carry, ctx, block=self.block)
        return h

    def train_epoch(self, epoch: int) -> EpochResult:
        """One full-batch step: forward, backward, gradient all-reduce, optimizer step."""
        self.model.train()
        t0 = time.perf_counter()
        wait0 = wait_seconds(self.comm)
        ctx = RunCtx(training=True, epoch=epoch, seed=self.seed)
        self.opt.zero_grad(set_to_none=False)
        logits = self.forward(ctx)
        self._emit(logits.detach())
        mask = self.masks["train"]
        loss = loss_fn(logits, self.labels, mask, multilabel=self.multilabel,
                       normalizer=self.num_train_global)
        loss.backward()
        allreduce_grads([p for p in self.model.parameters() if p.requires_grad], self.comm)
        self.opt.step()
        counts = accuracy_counts(logits.detach(), self.labels, mask, multilabel=self.multilabel, as_tensor=True)
        correct, total = counts.tolist()  # one read of the device per epoch, with the loss's
        wall = time.perf_counter() - t0
        comm_s = wait_seconds(self.comm) - wait0
        return EpochResult(float(loss.detach()), correct, total, wall - comm_s, comm_s)

    def state_dict(self) -> dict:
        """Everything a resumed run needs from this rank (dropout and chunk order are pure
        functions of seed and epoch, so no RNG state is needed)."""
        return {"kind": "graph", "model": self.model.state_dict(), "opt": self.opt.state_dict()}

    def owned_units(self) -> dict[int, dict]:
        return {i: u.state_dict() for i, u in enumerate(self.model.units)}

    def load_state_dict(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.opt.load_state_dict(state["opt"])

    @torch.no_grad()
    def evaluate(self, epoch: int) -> dict:
        """Exact full-graph inference: correct/total counts per split, summed over ranks."""
        self.model.eval()
        h = self.forward(RunCtx(training=False, epoch=epoch, seed=self.seed))
        return reduce_accuracies(split_counts(h, self.labels, self.masks, self.multilabel), self.comm)
