"""Boundary-node sampling: which halo rows travel in an epoch (``--boundary-sample P``).

The technique of BNS-GCN (Wan et al., "BNS-GCN: Efficient Full-Graph Training of Graph
Convolutional Networks with Partition-Parallelism and Random Boundary Node Sampling",
MLSys 2022), as that paper's code defines it: every epoch, for every ordered pair of parts
(owner ``q``, reader ``p``), the owner keeps ``k = ⌊P·n⌋`` of the ``n`` boundary nodes that
``p`` reads from it, drawn uniformly without replacement, the same set for every layer of
the epoch. Only those rows travel forward, multiplied by ``n / k`` (so that a sum over the
reader's neighbours stays unbiased), and only their gradients travel back (multiplied by
``n / k`` again: the chain rule of that forward). The other boundary nodes' edges are
dropped for the epoch; the degrees that normalise the aggregation stay the whole graph's.
Evaluation exchanges every row.

Zero rows and scaled rows equal dropped and reweighted edges only for layers linear in
their source rows (GCN, GraphSAGE-mean, GCNII: dropout, a linear map and a sum); a
LayerNorm (ResGCN+) or an attention softmax (GAT) is not, so the modes refuse those.

The draw is a pure function of ``(seed, epoch, owner, reader)``: both sides of a pair compute
the same positions, so no index list travels (BNS-GCN sends the ids), and the one-process
oracle (:class:`gnnpipe.parallel.reference.BoundarySampleReference`) draws the same.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gnnpipe.config import SAMPLED_MODELS  # noqa: F401  (re-exported: the models this technique serves)

#: Mixed into every draw's seed, so that no other random stream of a run shares it.
_SALT = 0x424E53


def sampled_count(n: int, p: float) -> int:
    """``⌊p·n⌋`` rows of ``n`` (all of them at ``p >= 1``); the epsilon keeps a product that
    rounds just under an integer (``0.3·10``) from losing a row."""
    if p >= 1.0:
        return int(n)
    return int(math.floor(p * n + 1e-9))


def sampled_positions(seed: int, epoch: int, owner: int, reader: int, n: int, p: float) -> np.ndarray:
    """int64 sorted positions, in ``[0, n)``, of the boundary nodes that part ``owner``
    sends part ``reader`` in epoch ``epoch`` (positions in the owner's send list for the
    reader, ascending node ids); every position at ``p >= 1``."""
    k = sampled_count(n, p)
    if k >= n:
        return np.arange(n, dtype=np.int64)
    rng = np.random.Generator(np.random.PCG64([_SALT, int(seed), int(epoch), int(owner), int(reader)]))
    return np.sort(rng.choice(n, size=k, replace=False)).astype(np.int64)


def sample_scale(n: int, p: float) -> float:
    """The factor ``n / k`` of the rows (and gradients) that travel; 0 when none does."""
    k = sampled_count(n, p)
    return n / k if k else 0.0


@dataclass(frozen=True)
class BoundarySample:
    """A run's boundary sampling: the fraction P and the seed of its draws."""

    fraction: float
    seed: int

    def positions(self, epoch: int, owner: int, reader: int, n: int) -> np.ndarray:
        """:func:`sampled_positions` of this run."""
        return sampled_positions(self.seed, epoch, owner, reader, n, self.fraction)

    def scale(self, n: int) -> float:
        """:func:`sample_scale` of this run."""
        return sample_scale(n, self.fraction)
