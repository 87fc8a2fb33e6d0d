"""The input layer's carry computed on every stage (``--local-carry``).

GCNII's initial residual ``h0`` is the input unit's output, read by every GCNII layer: in a
stale epoch it travels beside the rows ``h`` across every stage boundary, forward, and its
gradient back, which doubles the pipeline's bytes. Yet ``h0`` depends only on the input
features and the input unit's weights, and the weights are far smaller than the rows when
the graph has more nodes than features (Physics: 8,415 x 100 weights against 34,493 x 100
rows per boundary and direction). So here every stage that reads ``h0`` computes it itself:

1. **forward**, at the start of the epoch: the input unit's current weights travel from stage
   0 down the chain of stages that read the carry (``0 → r1 → r2 → ...``), in pieces that each
   stage hands on as they arrive, so every link carries them once and the last reader has them
   about one transfer after stage 0 sent them (while the pipeline fills); each reader
   computes the unit's rows of its way's nodes from the features
   (:meth:`InputLinear.transform_input`: this epoch's dropout masks, the same per node as on
   stage 0) and its chunks read their rows of the result as if they had arrived (the runtime
   adds them to the chunk's carry);
2. **backward**: each chunk's gradient of those rows is added up (the runtime hands it over
   instead of sending it back); at the optimizer step each reader back-propagates the summed
   gradients through its copy of the unit, adds the weight-gradient share that comes up the
   chain from the readers after it, piece by piece as it arrives (the later readers finish
   their backward first), and sends each summed piece on towards stage 0, which adds the
   sum to its own before it steps.

The chunk messages then hold ``h`` alone. Only stage 0 owns the unit's weights and their
optimizer (the other stages' copies are overwritten each epoch): checkpoints and resumes
are unchanged. The result is the relayed carry's up to the order of the weight gradient's
sums: stale training's numbers up to rounding (a lossy wire no longer rounds the carry).
Exact epochs (``--exact-every``, ``--drift-bound``, ``--exact-from``), the history refresh
and evaluation keep relaying it; ``--exact`` refuses the switch (it equals one process bit
for bit). Bytes per epoch and way: the weights once over each link of the chain and a weight
gradient back over each, float32 whatever ``--wire`` says (category ``input_fwd`` / ``input_bwd``;
:func:`gnnpipe.partition.volume.local_carry_bytes`).
"""

from __future__ import annotations

import torch

from gnnpipe._base import GnnpipeError
from gnnpipe.models import RunCtx

# Tags apart from the chunk messages' (2k, 2k + 1), evaluation's, the carry ahead's (2**26 on)
# and the shared input's (2**27 to 2**27 + 3): one per piece of the weights, then of their gradient.
_MAX_PIECES, _PIECE_BYTES = 16, 2**18
_TAG_WEIGHTS = 2**27 + 8
_TAG_WEIGHT_GRADS = _TAG_WEIGHTS + _MAX_PIECES


def local_keys(unit) -> tuple[str, ...]:
    """The carry keys whose rows are ``unit``'s :meth:`transform_input` of the features (the
    model's first unit: GCNII's input layer writes ``h0``, its own output); () for any other
    unit, a user's included."""
    keys = getattr(unit, "carry_from_input", ())
    return tuple(keys) if callable(getattr(unit, "transform_input", None)) else ()


class LocalCarry:
    """One stage's part of the locally computed carry (see the module docstring).

    Args:
        comm: the way's communicator (rank = stage).
        unit: the model's first unit on this rank (stage 0: the one it trains; elsewhere a
            copy whose weights each epoch overwrites).
        keys: the carry keys computed locally (:func:`local_keys`), model-wide: no training
            message of a stale epoch holds them.
        readers: the stages (> 0) whose units read them: the chain the weights go down
            from stage 0, in stage order (and the gradient shares up).
        x: this stage's feature rows of its way's nodes (dense or sparse CSR, on the
            stage's device; None on stage 0 and on a stage that reads none).
        gid: their global node ids (the dropout masks' key).
        base: the way's first node (chunk rows ``[lo, hi)`` are rows ``[lo - base, hi - base)``).
        seed: the run's seed (dropout).
    """

    def __init__(self, comm, unit, keys: tuple, readers: list[int], x, gid: torch.Tensor | None,
                 base: int, seed: int) -> None:
        self.comm, self.unit, self.keys = comm, unit, tuple(keys)
        self.readers = sorted(int(s) for s in readers)
        self.stage = comm.rank
        self.reads = self.stage in self.readers
        if self.reads and x is None:
            raise GnnpipeError(f"internal: stage {self.stage} computes the carry {self.keys} without features")
        chain = [0] + self.readers
        i = chain.index(self.stage) if self.stage in chain else None
        self.prev = chain[i - 1] if i else None              # where the weights come from
        self.next = chain[i + 1] if i is not None and i + 1 < len(chain) else None  # where they go on to
        self.x, self.gid, self.base, self.seed = x, gid, int(base), seed
        self.params = list(unit.parameters())
        n = self.weight_numel
        k = max(1, min(_MAX_PIECES, 4 * n // _PIECE_BYTES))
        self.pieces = [(n * j // k, n * (j + 1) // k) for j in range(k)]
        self._z: torch.Tensor | None = None   # this epoch's rows, with their autograd graph
        self._zd: torch.Tensor | None = None  # the same, detached (what the chunks read)
        self._gz: torch.Tensor | None = None  # their gradients, summed over the chunks
        self._sends: list = []

    @property
    def weight_numel(self) -> int:
        return sum(p.numel() for p in self.params)

    def forward(self, epoch: int) -> None:
        """Step 1 of the module docstring (every stage of the way calls it)."""
        if self.stage != 0 and not self.reads:
            return
        dev = self.params[0].device
        if self.stage == 0:
            flat = torch.cat([p.detach().reshape(-1) for p in self.params]) if self.next is not None else None
        else:
            flat = torch.empty(self.weight_numel, device=dev)
        for j, (a, b) in enumerate(self.pieces):
            if self.prev is not None:
                self.comm.recv(flat[a:b], self.prev, tag=_TAG_WEIGHTS + j, category="input_fwd")
            if self.next is not None:
                self._sends.append(self.comm.isend(flat[a:b], self.next, tag=_TAG_WEIGHTS + j, category="input_fwd"))
        if self.stage == 0:
            return
        with torch.no_grad():
            off = 0
            for p in self.params:
                p.copy_(flat[off : off + p.numel()].view_as(p))
                off += p.numel()
        ctx = RunCtx(training=True, epoch=epoch, seed=self.seed)
        with torch.enable_grad():
            self._z = self.unit.transform_input(self.x, self.gid, ctx)
        self._zd = self._z.detach()
        self._gz = torch.zeros_like(self._zd)

    def rows(self, lo: int, hi: int) -> dict:
        """The carry of the chunk of nodes ``[lo, hi)``: {key: rows} (empty where this stage
        reads none)."""
        if not self.reads:
            return {}
        z = self._zd[lo - self.base : hi - self.base]
        return {key: z for key in self.keys}

    def add_grads(self, lo: int, hi: int, grads: dict) -> None:
        """Take the gradients of the chunk ``[lo, hi)``'s carry rows out of ``grads`` (the
        stage's backward gives one per key it received) and add them up."""
        for key in self.keys:
            g = grads.pop(key, None)
            if g is not None and self.reads:
                self._gz[lo - self.base : hi - self.base] += g

    def backward(self) -> None:
        """Step 2 of the module docstring (every stage of the way calls it, after its last
        chunk's backward)."""
        if self.stage != 0 and not self.reads:
            return
        if self.stage == 0:
            if self.next is not None:
                share = torch.empty(self.weight_numel, device=self.params[0].device)
                for j, (a, b) in enumerate(self.pieces):
                    self.comm.recv(share[a:b], self.next, tag=_TAG_WEIGHT_GRADS + j, category="input_bwd")
                off = 0
                for p in self.params:
                    g = share[off : off + p.numel()].view_as(p)
                    p.grad = g.clone() if p.grad is None else p.grad.add_(g)
                    off += p.numel()
        else:
            z, gz = self._z, self._gz
            self._z = self._zd = self._gz = None
            for p in self.params:
                p.grad = None
            torch.autograd.backward([z], [gz])
            share = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
                               for p in self.params])
            for p in self.params:
                p.grad = None
            later = torch.empty_like(share) if self.next is not None else None
            for j, (a, b) in enumerate(self.pieces):
                if later is not None:  # the readers after this one, summed: own + later, every run alike
                    self.comm.recv(later[a:b], self.next, tag=_TAG_WEIGHT_GRADS + j, category="input_bwd")
                    share[a:b] += later[a:b]
                self._sends.append(self.comm.isend(share[a:b], self.prev, tag=_TAG_WEIGHT_GRADS + j,
                                                   category="input_bwd"))
        for w in self._sends:
            w.wait()
        self._sends = []
