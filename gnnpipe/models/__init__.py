"""GNN models as flat stacks of units, on PyG (default) or DGL layers; math only.

``build_model(cfg, seed)`` returns a :class:`GNN` whose ``units`` an executor slices and
runs on any :class:`Block` (a whole graph, a partition with its halo, a pipeline chunk).
Nothing here communicates. Units per model (``cfg.layers`` = L graph layers):

- ``gcn``: L GCN units (F→d, d→d ..., d→classes), dropout on each unit's input, ReLU
  between (Kipf & Welling).
- ``sage``: same shape with GraphSAGE-mean (+ root weight).
- ``gat``: L GAT units; hidden units have ``heads`` heads of ``hidden/heads`` channels,
  concatenated, then ELU; the last unit has 1 head (GAT paper's transductive setup uses
  1 output head for Cora), so no head averaging is needed.
- ``gcnii``: input Linear F→d + ReLU (writes carry ``h0``), L GCNII layers
  (α, λ, β_l = log(λ/l + 1)) with ReLU, output Linear d→classes.
- ``resgcn+``: input Linear F→d, L res+ units (LayerNorm → ReLU → dropout → GCN → +h),
  output unit LayerNorm → ReLU → dropout → Linear.

A chain of the user's own PyG / DGL layers (``fit(layers=[...])``) has the model name
``user`` (:data:`USER_MODEL`): :mod:`gnnpipe.models.user` builds it, one unit per layer;
:func:`build_model` refuses the name.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from gnnpipe.config import (BACKENDS, FEATURE_FIRST_MODELS, MODELS, USER_MODEL, ModelConfigError, ModelShape,
                            bad_model_field)
from gnnpipe.extras import require_dgl
from gnnpipe.models.block import Block, BlockError
from gnnpipe.models.units import (
    ConvUnit,
    GCNIIUnit,
    InputLinear,
    OutputLinear,
    ResPlusUnit,
    RunCtx,
    Unit,
)

__all__ = [
    "Block", "BlockError", "ModelConfig", "ModelConfigError", "ModelShape", "RunCtx", "Unit", "GNN",
    "build_model", "copy_weights", "loss_fn", "accuracy_counts", "MODELS", "BACKENDS", "USER_MODEL",
]

log = logging.getLogger(__name__)


@dataclass
class ModelConfig:
    """What model to build: a :class:`~gnnpipe.config.ModelShape` (``model``, ``layers``,
    ``hidden``, ``heads``: :attr:`shape`, which defines and validates them) with the data's
    widths and the layers' options. Its fields stay flat, so that a trained model's file
    (:mod:`gnnpipe.export`) keeps the same ``model_config`` keys.

    Args:
        model, layers, hidden, heads: the shape (:class:`~gnnpipe.config.ModelShape`); the
            defaults build a 2-layer, 64-wide model with 4 gat heads.
        in_dim: input feature width F.
        num_classes: output width (classes, or labels for multi-label).
        dropout: drop probability in [0, 1).
        alpha: GCNII initial-residual weight α in [0, 1].
        lam: GCNII λ (θ in PyG) > 0; β_l = log(λ/l + 1).
        backend: layer library, ``pyg`` or ``dgl``.
        multilabel: targets are a 0/1 matrix (BCE loss) rather than class ids.
    """

    model: str
    in_dim: int
    num_classes: int
    layers: int = 2
    hidden: int = 64
    heads: int = 4
    dropout: float = 0.5
    alpha: float = 0.1
    lam: float = 0.5
    backend: str = "pyg"
    multilabel: bool = False

    def __post_init__(self) -> None:
        def bad(name: str, want: str) -> ModelConfigError:
            return bad_model_field(name, getattr(self, name), want)

        self.shape  # model, layers, hidden, heads
        if self.backend not in BACKENDS:
            raise bad("backend", "one of " + ", ".join(BACKENDS))
        for name in ("in_dim", "num_classes"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise bad(name, "an integer >= 1")
        if not (isinstance(self.dropout, (int, float)) and 0.0 <= self.dropout < 1.0):
            raise bad("dropout", "a probability in [0, 1)")
        if not 0.0 <= self.alpha <= 1.0:
            raise bad("alpha", "a weight in [0, 1]")
        if not self.lam > 0.0:
            raise bad("lam", "a number > 0")

    @classmethod
    def of(cls, shape: ModelShape, in_dim: int, num_classes: int, **options) -> "ModelConfig":
        """The model of ``shape`` on data of these widths; ``options`` set the other fields."""
        return cls(model=shape.model, in_dim=in_dim, num_classes=num_classes, layers=shape.layers,
                   hidden=shape.hidden, heads=shape.heads, **options)

    @property
    def shape(self) -> ModelShape:
        """The model's shape (validated: :class:`~gnnpipe.config.ModelShape`)."""
        return ModelShape(self.model, self.layers, self.hidden, self.heads)

    @property
    def num_units(self) -> int:
        """Units :func:`build_model` makes (:attr:`ModelShape.num_units`)."""
        return self.shape.num_units


class GNN(nn.Module):
    """A model as a flat :class:`nn.ModuleList` of units (``self.units``)."""

    def __init__(self, cfg: ModelConfig, units: list[Unit]):
        super().__init__()
        self.cfg = cfg
        self.units = nn.ModuleList(units)

    def forward(self, block: Block, x: Tensor, ctx: RunCtx) -> Tensor:
        """One-process full run on a square block.

        Args:
            block: square block of the whole graph (``Block.full``).
            x: [N, F] features, dense or torch sparse CSR.

        Returns:
            [N, num_classes] logits.
        """
        h, carry = x, {}
        for u in self.units:
            h, carry = u(h, carry, ctx, block, h if u.aggregates else None)
        return h


def _backend(name: str):
    if name == "dgl":
        require_dgl("the dgl backend")
        from gnnpipe.models import dgl as mod
    else:
        from gnnpipe.models import pyg as mod
    return mod


def build_model(cfg: ModelConfig, seed: int) -> GNN:
    """Build the model of ``cfg`` with weights drawn from ``seed``.

    The global RNG state is saved and restored, so building never disturbs other streams.
    Same ``cfg`` and ``seed`` give identical weights (the two backends initialise
    differently: use :func:`copy_weights` to share weights between them).

    Returns:
        :class:`GNN`.
    """
    if cfg.model == USER_MODEL:
        raise ModelConfigError("model", "model config: model 'user' is a chain of your own layers; "
                               "gnnpipe.models.user.UserChain builds it, build_model cannot")
    b = _backend(cfg.backend)
    L, d, p, C = cfg.layers, cfg.hidden, cfg.dropout, cfg.num_classes
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        units: list[Unit] = []
        if cfg.model in FEATURE_FIRST_MODELS:
            for i in range(L):
                fin = cfg.in_dim if i == 0 else d
                last = i == L - 1
                if cfg.model == "gat":
                    heads = 1 if last else cfg.heads
                    ch = C if last else d // cfg.heads
                    conv = b.GATConv(fin, ch, heads, concat=not last)
                    act = None if last else "elu"
                else:
                    cls = b.GCNConv if cfg.model == "gcn" else b.SAGEConv
                    conv = cls(fin, C if last else d)
                    act = None if last else "relu"
                units.append(ConvUnit(i, fin, C if last else d, p, conv, act))
        elif cfg.model == "gcnii":
            units.append(InputLinear(0, cfg.in_dim, d, p, relu=True, write_h0=True))
            for l in range(1, L + 1):
                units.append(GCNIIUnit(l, d, p, b.GCN2Conv(d, cfg.alpha, cfg.lam, l)))
            units.append(OutputLinear(L + 1, d, C, p, pre_norm=False))
        else:  # resgcn+
            units.append(InputLinear(0, cfg.in_dim, d, 0.0, relu=False, write_h0=False))
            for l in range(1, L + 1):
                units.append(ResPlusUnit(l, d, p, b.GCNConv(d, d)))
            units.append(OutputLinear(L + 1, d, C, p, pre_norm=True))
    log.debug("built %s/%s with %d units", cfg.model, cfg.backend, len(units))
    return GNN(cfg, units)


def copy_weights(dst: GNN, src: GNN) -> None:
    """Copy every weight of ``src`` into ``dst`` (same config; backends may differ).

    Raises:
        ModelConfigError: the two models were built from different configurations.
    """
    a, b = dst.cfg, src.cfg
    for f in ("model", "in_dim", "num_classes", "layers", "hidden", "heads"):
        if getattr(a, f) != getattr(b, f):
            raise ModelConfigError(
                f, f"copy_weights: models differ in {f}: destination {getattr(a, f)!r}, source {getattr(b, f)!r}"
            )
    with torch.no_grad():
        for ud, us in zip(dst.units, src.units):
            for cd, cs in zip(ud.convs(), us.convs()):
                cd.load(cs.export())
            # Backend-independent parts (Linear, LayerNorm) share their state_dict layout.
            for name, mod in ud.named_children():
                if name != "conv" and isinstance(mod, (nn.Linear, nn.LayerNorm)):
                    mod.load_state_dict(getattr(us, name).state_dict())


def _select(t: Tensor, mask_or_idx: Tensor) -> Tensor:
    return t[mask_or_idx]


def loss_fn(logits: Tensor, labels: Tensor, mask_or_idx: Tensor, multilabel: bool = False,
            normalizer: float | None = None) -> Tensor:
    """Sum of per-node losses over the selected nodes, divided by ``normalizer``.

    Per-node loss: cross-entropy of the class id, or for multi-label targets the binary
    cross-entropy averaged over the labels. Executors pass the GLOBAL number of training
    nodes as ``normalizer`` so that the per-rank losses add up to the one-process loss.

    Args:
        logits: [n, C]; labels: [n] int64 or [n, C] float 0/1.
        mask_or_idx: bool [n] mask or int64 indices of the nodes to count.
        normalizer: default: the number of selected nodes (at least 1).

    Returns:
        scalar tensor.
    """
    if logits.device.type != "cpu" and mask_or_idx.dtype == torch.bool and normalizer is not None:
        # On an accelerator, boolean selection waits for the device (the selected count sets
        # the shape): weigh every row by its mask instead (the same sum; on the CPU the
        # selection is kept, so CPU runs add in the order the oracles were written for).
        w = mask_or_idx.to(logits.dtype)
        if multilabel:
            per = nn.functional.binary_cross_entropy_with_logits(logits, labels.to(logits.dtype),
                                                                 reduction="none").mean(1)
        else:
            per = nn.functional.cross_entropy(logits, labels, reduction="none")
        return (per * w).sum() / float(normalizer)
    lg, y = _select(logits, mask_or_idx), _select(labels, mask_or_idx)
    if multilabel:
        per = nn.functional.binary_cross_entropy_with_logits(lg, y.to(lg.dtype), reduction="none").mean(1)
        total = per.sum()
    else:
        total = nn.functional.cross_entropy(lg, y, reduction="sum")
    n = float(normalizer) if normalizer is not None else float(max(lg.shape[0], 1))
    return total / n


def accuracy_counts(logits: Tensor, labels: Tensor, mask: Tensor, multilabel: bool = False,
                    as_tensor: bool = False):
    """(correct, total) over the selected nodes.

    Single-label: argmax equals the class id, total = selected nodes. Multi-label: each
    (node, label) entry with ``logit > 0`` equal to the target counts, total = nodes × labels.
    With ``as_tensor`` an int64 tensor [2] on the logits' device (no host synchronisation:
    executors sum these over an epoch's chunks and read the sum once).
    """
    with torch.no_grad():
        if mask.dtype == torch.bool:  # counted under the mask: no selection, no host sync
            if multilabel:
                hit = ((logits > 0) == (labels > 0.5)) & mask.unsqueeze(1)
                total = mask.sum() * labels.shape[1]
            else:
                hit = (logits.argmax(1) == labels) & mask
                total = mask.sum()
            correct = hit.sum()
        else:
            lg, y = _select(logits, mask), _select(labels, mask)
            hit = ((lg > 0) == (y > 0.5)) if multilabel else (lg.argmax(1) == y)
            correct = hit.sum()
            total = torch.tensor(y.numel() if multilabel else y.shape[0], device=correct.device)
    if as_tensor:
        return torch.stack([correct.to(torch.int64), total.to(torch.int64)])
    return int(correct), int(total)
