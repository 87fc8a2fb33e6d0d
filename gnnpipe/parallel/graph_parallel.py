"""Graph-parallel executor: each rank owns one partition and every layer.

Before every aggregation whose inputs change during training, each rank sends the rows its
neighbours' partitions need (its "send" lists) and receives its halo rows, all in one
``all_to_all``; in the backward pass the gradients of the halo rows travel back the same
way and are added into the owners' rows. Weight gradients are all-reduced once per epoch
and every rank steps an identical optimizer: full-batch semantics, identical to a
one-process run of the same model up to floating-point summation order.

What travels, per epoch (bytes as handed to the communicator, ``s`` bytes per value):

* ``halo_fwd``: for every aggregating unit except one whose input is the constant input
  features: ``Σ_p M_p · d_in · s`` (``M_p`` halo rows of part ``p``);
* ``halo_bwd``: the same amount again, gradients of those rows;
* ``allreduce``: the parameter bytes, once per rank.

The input features' halo never travels: features are constant, so every rank reads its halo
rows of the (memory-mapped) dataset at start-up — cheaper still than the one-time exchange
the paper's model would suggest (see :mod:`gnnpipe.partition.volume`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import torch

from gnnpipe.models import GNN, RunCtx, accuracy_counts, loss_fn
from gnnpipe.models.block import Block

log = logging.getLogger(__name__)


def features_to_tensor(f, device: torch.device | str = "cpu") -> torch.Tensor:
    """Node features (dense ndarray or scipy CSR) as a float32 tensor (sparse stays sparse CSR)."""
    if sp.issparse(f):
        f = sp.csr_matrix(f)
        t = torch.sparse_csr_tensor(
            torch.from_numpy(np.asarray(f.indptr, dtype=np.int64)),
            torch.from_numpy(np.asarray(f.indices, dtype=np.int64)),
            torch.from_numpy(np.asarray(f.data, dtype=np.float32)),
            size=f.shape,
        )
        return t.to(device)
    return torch.from_numpy(np.ascontiguousarray(f, dtype=np.float32)).to(device)


def gather_feature_rows(features, rows: np.ndarray):
    """Rows of a (possibly memory-mapped) dense or sparse feature matrix, in order."""
    rows = np.asarray(rows, dtype=np.int64)
    if sp.issparse(features):
        return sp.csr_matrix(features)[rows]
    order = np.argsort(rows, kind="stable")  # sorted reads are sequential on a memmap
    out = np.empty((rows.size, features.shape[1]), dtype=np.float32)
    out[order] = np.asarray(features[rows[order]], dtype=np.float32)
    return out


def concat_rows(a, b):
    """Stack two feature blocks (both dense or both scipy sparse)."""
    if sp.issparse(a):
        return sp.vstack([a, b], format="csr")
    return np.concatenate([a, b], axis=0)


class _HaloExchange(torch.autograd.Function):
    """Forward: [local rows] → [local rows; halo rows]; backward: halo grads go home."""

    @staticmethod
    def forward(ctx, h_local: torch.Tensor, ex: "HaloExchanger") -> torch.Tensor:
        ctx.ex = ex
        return torch.cat([h_local, ex.exchange(h_local, ex.fwd_category)], dim=0)

    @staticmethod
    def backward(ctx, grad_src: torch.Tensor):
        ex: HaloExchanger = ctx.ex
        n = ex.num_local
        grad_local = grad_src[:n].clone()
        ex.return_grads(grad_src[n:].contiguous(), grad_local, ex.bwd_category)
        return grad_local, None


class HaloExchanger:
    """The per-part send/recv lists and the two all-to-all directions.

    Args:
        comm: the communicator (any world size; world 1 exchanges nothing).
        num_local: rows this rank owns.
        send_idx: per peer, local row offsets to send (sorted as the peer's halo expects).
        recv_counts: per peer, halo rows received (halo rows are ordered by owner).
    """

    def __init__(self, comm, num_local: int, send_idx: list, recv_counts,
                 fwd_category: str = "halo_fwd", bwd_category: str = "halo_bwd") -> None:
        self.comm = comm
        self.fwd_category = fwd_category
        self.bwd_category = bwd_category
        self.num_local = int(num_local)
        self.send_idx = [torch.as_tensor(np.asarray(s, dtype=np.int64)) for s in send_idx]
        self.recv_counts = [int(c) for c in recv_counts]
        self.num_halo = int(sum(self.recv_counts))
        self.recv_off = np.concatenate([[0], np.cumsum(self.recv_counts)]).astype(np.int64)

    def exchange(self, h_local: torch.Tensor, category: str) -> torch.Tensor:
        """Halo rows [num_halo, d] of ``h_local`` as owned by the peers."""
        d = h_local.shape[1]
        h_local = h_local.detach()
        send = [h_local.index_select(0, idx) for idx in self.send_idx]
        out = h_local.new_empty((self.num_halo, d))
        recv = [out[self.recv_off[q] : self.recv_off[q + 1]] for q in range(len(self.recv_counts))]
        if self.comm.world_size > 1:
            self.comm.all_to_all(send, recv, category=category)
        return out

    def return_grads(self, grad_halo: torch.Tensor, grad_local: torch.Tensor, category: str) -> None:
        """Send halo-row gradients to their owners; add what comes back into ``grad_local``."""
        d = grad_halo.shape[1]
        send = [grad_halo[self.recv_off[q] : self.recv_off[q + 1]] for q in range(len(self.recv_counts))]
        recv = [grad_local.new_empty((idx.numel(), d)) for idx in self.send_idx]
        if self.comm.world_size > 1:
            self.comm.all_to_all(send, recv, category=category)
        for idx, g in zip(self.send_idx, recv):
            if idx.numel():
                grad_local.index_add_(0, idx, g)


@dataclass
class EpochResult:
    """What one training epoch produced on this rank (sums; the trainer reduces them)."""

    loss: float
    train_correct: int
    train_total: int
    compute_s: float
    comm_s: float


class GraphParallelExecutor:
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
    """

    def __init__(self, comm, local, halo_features, model: GNN, optimizer, num_train_global: int,
                 seed: int = 0, multilabel: bool = False, device: str = "cpu") -> None:
        self.comm = comm
        self.local = local
        self.model = model
        self.opt = optimizer
        self.seed = seed
        self.multilabel = multilabel
        self.device = torch.device(device)
        self.num_train_global = max(int(num_train_global), 1)
        halo = local.halo
        n = int(local.num_local)
        self.num_local = n
        self.exchanger = HaloExchanger(comm, n, halo.send_idx, halo.recv_counts)
        # Dropout masks are keyed by ORIGINAL node ids, so they do not depend on the plan:
        # runs on any number of ranks draw the same masks as the one-process run.
        gid_local = np.asarray(local.orig_ids, dtype=np.int64)
        gid_halo = np.asarray(local.halo_orig_ids, dtype=np.int64)
        self.block = Block(
            indptr=torch.as_tensor(np.asarray(local.indptr, dtype=np.int64)),
            indices=torch.as_tensor(np.asarray(local.indices, dtype=np.int64)),
            num_src=n + gid_halo.size,
            src_deg=torch.as_tensor(np.concatenate([local.deg_local, local.deg_halo]).astype(np.float32)),
            dst_deg=torch.as_tensor(np.asarray(local.deg_local, dtype=np.float32)),
            dst_gid=torch.as_tensor(gid_local),
            src_gid=torch.as_tensor(np.concatenate([gid_local, gid_halo])),
            dst_in_src=torch.arange(n, dtype=torch.int64),
        )
        # Input features of local + halo rows: constant, so they never travel per epoch.
        self.x_src = features_to_tensor(concat_rows(local.features, halo_features), self.device)
        # Dense: the local rows are the first rows of x_src (a view, not a second copy).
        self.x_dst = self.x_src[:n] if self.x_src.layout == torch.strided else features_to_tensor(local.features, self.device)
        self.labels = torch.as_tensor(np.asarray(local.labels))
        self.masks = {
            "train": torch.as_tensor(np.asarray(local.train_mask, dtype=bool)),
            "val": torch.as_tensor(np.asarray(local.val_mask, dtype=bool)),
            "test": torch.as_tensor(np.asarray(local.test_mask, dtype=bool)),
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
                        h_src = _HaloExchange.apply(h, self.exchanger)
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
        stats0 = self.comm.stats.wait_s if hasattr(self.comm, "stats") else 0.0
        ctx = RunCtx(training=True, epoch=epoch, seed=self.seed)
        self.opt.zero_grad(set_to_none=False)
        logits = self.forward(ctx)
        mask = self.masks["train"]
        loss = loss_fn(logits, self.labels, mask, multilabel=self.multilabel,
                       normalizer=self.num_train_global)
        loss.backward()
        self.allreduce_grads()
        self.opt.step()
        correct, total = accuracy_counts(logits.detach(), self.labels, mask, multilabel=self.multilabel)
        wall = time.perf_counter() - t0
        comm_s = (self.comm.stats.wait_s - stats0) if hasattr(self.comm, "stats") else 0.0
        return EpochResult(float(loss.detach()), correct, total, wall - comm_s, comm_s)

    def allreduce_grads(self) -> None:
        """Sum every parameter's gradient over ranks in one flat buffer."""
        params = [p for p in self.model.parameters() if p.requires_grad]
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        if self.comm.world_size == 1:
            return
        flat = torch.cat([p.grad.reshape(-1) for p in params])
        self.comm.all_reduce(flat, op="sum", category="allreduce")
        off = 0
        for p in params:
            k = p.numel()
            p.grad.copy_(flat[off : off + k].view_as(p.grad))
            off += k

    def state_dict(self) -> dict:
        """Everything a resumed run needs from this rank (dropout and chunk order are pure
        functions of seed and epoch, so no RNG state is needed)."""
        return {"kind": "graph", "model": self.model.state_dict(), "opt": self.opt.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.opt.load_state_dict(state["opt"])

    @torch.no_grad()
    def evaluate(self, epoch: int) -> dict:
        """Exact full-graph inference: correct/total counts per split, summed over ranks."""
        self.model.eval()
        h = self.forward(RunCtx(training=False, epoch=epoch, seed=self.seed))
        counts = []
        for split in ("train", "val", "test"):
            counts.extend(accuracy_counts(h, self.labels, self.masks[split], multilabel=self.multilabel))
        t = torch.tensor(counts, dtype=torch.float64)
        if self.comm.world_size > 1:
            self.comm.all_reduce(t, op="sum", category="control")
        c = t.tolist()
        return {
            "train_acc": c[0] / max(c[1], 1),
            "val_acc": c[2] / max(c[3], 1),
            "test_acc": c[4] / max(c[5], 1),
        }
