"""What a pipeline stage reads besides the previous stage's rows: the first stage's feature
rows (with the epoch's input transform) and the last stage's targets.

Features never travel between stages: the first stage holds the rows its chunks read
(:class:`StageFeatures`); the last stage scores its rows against labels and masks
(:class:`StageTargets`). The builder makes both on the device where the stage computes.
"""

from __future__ import annotations

import time

import numpy as np
import scipy.sparse as sp
import torch

from gnnpipe._base import GnnpipeError
from gnnpipe.device import upload
from gnnpipe.models import RunCtx, accuracy_counts, loss_fn
from gnnpipe.parallel.chunks import ChunkInfo
from gnnpipe.parallel.executor import split_counts
from gnnpipe.parallel.features import feature_rows
from gnnpipe.parallel.pipeline.autograd import GradSink, Sunk


def _is_dense(x) -> bool:
    return x is not None and not sp.issparse(x) and not (isinstance(x, torch.Tensor) and x.layout != torch.strided)


class StageFeatures:
    """The input feature rows a first stage's chunks read, and the epoch's input transform.

    Dense features stay one [rows, F] tensor: a chunk's own rows are a view of it and its
    source rows are gathered when the chunk runs (keeping every chunk's source rows would
    hold Σ_k |src(k)| ≈ 3-5·N rows). Sparse features keep per-chunk copies.

    The epoch's input transform. A first unit that transforms its input row by row before
    aggregating (GCN/SAGE wider in than out, GAT: ``ConvUnit.can_transform_input``) would compute
    drop(x) W for every chunk's source rows: Σ_k |src(k)| rows, 4.9·N on Squirrel with 16
    chunks, each row the same in every chunk (W changes once per epoch, the dropout masks are
    per node). So each row is transformed once per epoch, when the first chunk that reads it
    runs forward (its "piece" of rows: the work spreads over the chunks as the per-chunk
    transform's did, rather than stalling the pipeline's fill with all of it at once); each
    chunk reads its rows of the result, and their gradients add up in one [rows, d] buffer.
    Chunks run backward in the reverse of their forward order, so when chunk k's backward is
    done every chunk that reads its piece's rows (k and those after it) has added its
    gradient: the piece's backward through the transform then gives its share of W's
    gradient. The same sums in another order. Training only; one chunk (exact mode) and
    sparse features keep the unit's own path.

    With the shared input layer (``shared``, :mod:`gnnpipe.parallel.pipeline.shared_input`)
    every row's transform arrives before the first chunk (:meth:`take_transform`): no piece
    is transformed here, and the rows' summed gradients (:meth:`transform_grad`) go back to
    the stages that computed them. A row-wise first unit (GCNII's input layer) then takes
    the same path over the way's own rows, dense or sparse.

    Args:
        x: the features: a dense [rows, F] tensor or ndarray, or scipy CSR.
        chunks: the stage's chunks (on ``device``).
        unit: the model's first unit (whether it can transform its input row by row).
        device: where the rows are kept.
        x_rows: sorted relabelled ids of ``x``'s rows (None: all N), so that a hybrid way
            holds only the rows its chunks read.
        shared: the stages share the first unit (``--shared-input``): a row-wise first unit
            (GCNII's input layer) takes the transform too, over the way's own rows (the
            chunks read theirs), computed elsewhere (:meth:`take_transform`).
    """

    def __init__(self, x, chunks: list[ChunkInfo], unit, device: torch.device,
                 x_rows: np.ndarray | None = None, shared: bool = False) -> None:
        self.device = dev = torch.device(device)
        self.chunks = chunks
        self.x: torch.Tensor | None = None
        self.x_dst: list = []      # sparse: per chunk, its own rows
        self.x_src: list = []      # sparse: per chunk, its block's source rows
        self.x_src_ids: list = []  # dense: per chunk, the rows of ``self.x`` its first unit reads
        self.x_dst_off: list = []  # dense: per chunk, the row of ``self.x`` of its first node

        def pos(ids):
            ids = np.asarray(ids, dtype=np.int64)
            return ids if x_rows is None else np.searchsorted(x_rows, ids)

        host_src: list[np.ndarray] = []
        if _is_dense(x):
            self.x = (x if isinstance(x, torch.Tensor)
                      else torch.from_numpy(np.ascontiguousarray(np.asarray(x), dtype=np.float32))).to(dev)
            host_src = [pos(ch.src_ids().cpu().numpy()) for ch in chunks]
            self.x_src_ids = [torch.from_numpy(ids).to(dev) for ids in host_src]
            self.x_dst_off = [int(pos([ch.lo])[0]) for ch in chunks]
        else:
            for ch in chunks:
                ids = np.arange(ch.lo, ch.hi, dtype=np.int64)
                self.x_dst.append(feature_rows(x, pos(ids)).to(dev))
                if unit is not None and unit.aggregates:
                    self.x_src.append(feature_rows(x, pos(np.concatenate([ids, ch.nbr_ids.cpu().numpy()]))).to(dev))
        self.gid: torch.Tensor | None = None  # the transform's: row -> node id (its dropout key)
        self._zd = self._gz = None  # this epoch's transformed rows, their gradients
        self._zdone: np.ndarray | None = None  # rows transformed this epoch (host: no device sync)
        self._x_src_host: list[np.ndarray] = []
        self._pieces: dict = {}  # chunk -> (rows, their transform) first transformed by it
        self._sinks: dict = {}   # chunk -> GradSink of its rows of the transform
        self._read_ids: list = []  # per chunk, the rows of the transform its first unit reads
        if (self.x is not None and len(chunks) > 1 and unit is not None and unit.aggregates
                and callable(getattr(unit, "can_transform_input", None)) and unit.can_transform_input(self.x)):
            gid = torch.full((self.x.shape[0],), -1, dtype=torch.int64, device=dev)
            for ch, ids in zip(chunks, self.x_src_ids):
                gid[ids] = ch.block.src_gid.to(device=dev, dtype=torch.int64)
            if bool((gid >= 0).all()):  # every row is some chunk's (else: the unit's path)
                self.gid = gid
                rows_x = self.x.shape[0]
                self._zd = torch.zeros(rows_x, unit.transformed_dim, device=dev)
                self._gz = torch.zeros(rows_x, unit.transformed_dim, device=dev)
                self._zdone = np.zeros(rows_x, dtype=bool)
                self._x_src_host = host_src  # (read back from the device never)
                self._read_ids = self.x_src_ids  # each chunk reads its block's source rows
        elif shared and len(chunks) > 1 and unit is not None and not unit.aggregates:
            # A row-wise first unit shared by the stages (GCNII's input layer, dense or sparse
            # features): its rows are the way's own nodes, all computed elsewhere each epoch
            # (take_transform); each chunk reads its own rows.
            base = chunks[0].lo
            self._zd = torch.zeros(chunks[-1].hi - base, unit.transformed_dim, device=dev)
            self._gz = torch.zeros_like(self._zd)
            self._zdone = np.zeros(self._zd.shape[0], dtype=bool)
            self._read_ids = [torch.arange(ch.lo - base, ch.hi - base, device=dev) for ch in chunks]

    def dst_rows(self, k: int) -> torch.Tensor:
        """Chunk k's own feature rows."""
        if self.x is None:
            return self.x_dst[k]
        off = self.x_dst_off[k]
        return self.x[off : off + self.chunks[k].size]

    def src_rows(self, k: int) -> torch.Tensor:
        """Chunk k's feature rows of its block's sources."""
        return self.x_src[k] if self.x is None else self.x.index_select(0, self.x_src_ids[k])

    @property
    def transforms(self) -> bool:
        """Whether training runs the first unit through the epoch's input transform."""
        return self._zd is not None

    def reset(self) -> None:
        """Forget the epoch's transform (at each epoch's start and end)."""
        self._pieces.clear()
        self._sinks.clear()
        if self._zdone is not None:
            self._zdone[:] = False
            self._gz.zero_()

    def take_transform(self, z: torch.Tensor) -> None:
        """This epoch's transform of every row, computed elsewhere (the shared input layer,
        :mod:`gnnpipe.parallel.pipeline.shared_input`; after :meth:`reset`): the chunks read
        their rows of ``z`` and no piece is transformed here, so the rows' gradients stay
        summed in :meth:`transform_grad` for whoever computed them."""
        if self._zd is None or tuple(z.shape) != tuple(self._zd.shape):
            raise GnnpipeError(f"internal: a shared input transform of shape {tuple(z.shape)} for a first stage "
                               f"that transforms {None if self._zd is None else tuple(self._zd.shape)}")
        self._zd = z
        self._zdone[:] = True

    def transform_grad(self) -> torch.Tensor:
        """[rows, width] the gradients every chunk's backward added to the transform's rows
        (complete once the epoch's last chunk backward is done)."""
        return self._gz

    def forward_transformed(self, k: int, u, carry: dict, ctx: RunCtx) -> tuple[torch.Tensor, dict, float]:
        """The first unit ``u`` on chunk k through the epoch's input transform: (rows,
        carry, seconds spent gathering the chunk's transformed rows)."""
        host = self._x_src_host[k] if self._x_src_host else np.zeros(0, dtype=np.int64)
        new = host[~self._zdone[host]]  # this chunk's rows no earlier chunk transformed
        if new.size:
            self._zdone[new] = True
            rows = upload(new, self.device)  # host-chosen rows: no read of the device
            z = u.transform_input(self.x.index_select(0, rows), self.gid.index_select(0, rows), ctx)
            self._zd.index_copy_(0, rows, z.detach())
            self._pieces[k] = (rows, z)
        ids = self._read_ids[k]
        self._sinks[k] = sink = GradSink()
        t0 = time.perf_counter()
        z_src = Sunk.apply(sink.anchor, None, lambda: self._zd.index_select(0, ids), sink)
        gather_s = time.perf_counter() - t0
        h, carry = u.forward_transformed(z_src, carry, ctx, self.chunks[k].block)
        return h, carry, gather_s

    def backward(self, k: int) -> None:
        """After chunk k's autograd backward: add its rows' gradients of the transform; if
        chunk k transformed a piece, every reader of the piece is done: W's share."""
        sink = self._sinks.pop(k, None)
        if sink is not None and sink.grad is not None:
            self._gz.index_add_(0, self._read_ids[k], sink.grad)
        piece = self._pieces.pop(k, None)
        if piece is not None:
            rows, z = piece
            torch.autograd.backward([z], [self._gz.index_select(0, rows)])


class StageTargets:
    """The labels and masks the last stage scores its rows against (row ``r`` is node
    ``r`` of the relabelled graph).

    Args:
        labels: [N] class ids, or [N, C] multilabel targets.
        masks: ``train``, ``val``, ``test`` boolean [N].
        num_train_global: the loss normaliser (training nodes in the whole graph).
        multilabel: the targets are [N, C] 0/1.
        device: where they are kept.
    """

    def __init__(self, labels, masks: dict, num_train_global: int, multilabel: bool,
                 device: torch.device | str) -> None:
        dev = torch.device(device)
        self.labels = torch.as_tensor(np.asarray(labels)).to(dev)
        self.masks = {k: torch.as_tensor(np.asarray(v, dtype=bool)).to(dev) for k, v in masks.items()}
        self.train_mask = self.masks["train"]
        self.num_train_global = max(int(num_train_global), 1)
        self.multilabel = multilabel

    def loss(self, ch: ChunkInfo, logits: torch.Tensor) -> torch.Tensor:
        """Chunk ``ch``'s share of the epoch's loss (normalised by the whole graph's
        training nodes, so the chunks' losses add up to the full-graph loss)."""
        return loss_fn(logits, self.labels[ch.lo : ch.hi], self.train_mask[ch.lo : ch.hi],
                       multilabel=self.multilabel, normalizer=self.num_train_global)

    def train_counts(self, ch: ChunkInfo, logits: torch.Tensor) -> torch.Tensor:
        """int64 [2] (correct, total) of chunk ``ch``'s training rows, on the device (no host sync)."""
        return accuracy_counts(logits.detach(), self.labels[ch.lo : ch.hi], self.train_mask[ch.lo : ch.hi],
                               multilabel=self.multilabel, as_tensor=True)

    def split_counts(self, logits: torch.Tensor, lo: int) -> list[int]:
        """``[correct, total]`` per split of the rows ``lo, lo + 1, ...`` that ``logits`` hold."""
        hi = lo + logits.shape[0]
        return split_counts(logits, self.labels[lo:hi], {k: m[lo:hi] for k, m in self.masks.items()}, self.multilabel)
