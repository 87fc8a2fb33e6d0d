"""Layer-to-stage assignment for pipeline mode: per-layer cost estimates and an exact
min-max split into contiguous stage blocks. Pure functions, no torch.

Units are what a stage can own: the input linear layer (models that have one), each graph
layer, and the output linear layer (models that have one). Costs are floating-point
operations of one forward plus backward pass over the whole graph (×3 of the forward,
the usual rule for GEMMs); only their ratios matter to the assignment, so measured times
can be passed to :func:`assign_layers` instead.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from gnnpipe._base import GnnpipeError
from gnnpipe.config import MODELS

_FWD_BWD = 3.0


def _gemm(n: float, fin: float, fout: float, nnz: float | None = None) -> float:
    # A sparse input row costs its non-zeros instead of the full width.
    rows_x_in = nnz if nnz is not None else n * fin
    return 2.0 * rows_x_in * fout


def _spmm(e: float, width: float) -> float:
    return 2.0 * e * width


def layer_costs(
    model: str,
    num_layers: int,
    F: int,
    d: int,
    N: int,
    E: int,
    classes: int,
    sparse_nnz: int | None = None,
) -> list[float]:
    """Estimated cost of each assignable unit of a model, in FLOPs (forward + backward).

    Args:
        model: gcn, sage, gat (``num_layers`` graph layers, the first F→d, the last
            d→classes), gcnii or resgcn+ (input linear F→d, ``num_layers`` d→d graph
            layers, output linear d→classes).
        num_layers: L, graph layers (≥ 1).
        F: input feature width.
        d: hidden width.
        N: vertices.
        E: directed edges (each undirected edge twice).
        classes: output width.
        sparse_nnz: non-zeros of a sparse input feature matrix; the unit reading the
            features then costs ``nnz`` rows-times-width instead of ``N·F``.

    Returns:
        list of floats: ``[input?] + L graph layers + [output?]`` in execution order.
    """
    m = model.lower()
    if m not in MODELS:
        raise GnnpipeError(f"model: expected one of {', '.join(MODELS)}, got {model!r}")
    if num_layers < 1:
        raise GnnpipeError(f"num_layers: expected at least 1, got {num_layers}")
    for k, v in (("F", F), ("d", d), ("N", N), ("E", E), ("classes", classes)):
        if v < 0:
            raise GnnpipeError(f"{k}: expected a non-negative number, got {v}")
    L = num_layers
    costs: list[float] = []
    if m in ("gcn", "sage", "gat"):
        for i in range(L):
            fin = F if i == 0 else d
            fout = classes if i == L - 1 else d
            nnz = sparse_nnz if i == 0 else None
            if m == "gcn":
                # Transform first, then aggregate the (narrower) output.
                c = _gemm(N, fin, fout, nnz) + _spmm(E, fout)
            elif m == "sage":
                # Mean of neighbours (input width), then self and neighbour linears.
                c = 2 * _gemm(N, fin, fout, nnz) + _spmm(E, fin)
            else:  # gat, one head: transform, per-edge scores and softmax, weighted sum.
                c = _gemm(N, fin, fout, nnz) + 3 * _spmm(E, fout)
            costs.append(_FWD_BWD * c)
        return costs
    costs.append(_FWD_BWD * _gemm(N, F, d, sparse_nnz))
    for _ in range(L):
        if m == "gcnii":
            # Aggregate, mix with h0 (elementwise), identity-mapped d×d weight.
            c = _spmm(E, d) + 3.0 * N * d + _gemm(N, d, d)
        else:  # resgcn+: norm, act, softmax aggregation over edges, MLP, residual.
            c = 4.0 * _spmm(E, d) + 6.0 * N * d + _gemm(N, d, d)
        costs.append(_FWD_BWD * c)
    costs.append(_FWD_BWD * _gemm(N, d, classes))
    return costs


def assign_layers(costs: Sequence[float], stages: int) -> list[tuple[int, int]]:
    """Split units into ``stages`` contiguous non-empty blocks minimising the largest sum.

    Exact: a dynamic programme finds the optimal bottleneck ``B*``; among all splits
    reaching it, a second one picks the smallest sum of squared stage costs (the other
    stages balanced too); remaining ties go to the split with the fullest last stages
    (deterministic). O(S·n²) for n units.

    Args:
        costs: cost of each unit, in order (non-negative).
        stages: S ≥ 1.

    Returns:
        list of S half-open unit ranges ``(start, end)`` covering ``[0, len(costs))``.

    Raises:
        GnnpipeError: fewer units than stages (then use hybrid mode), S < 1, or a
            negative or non-finite cost.
    """
    c = np.asarray(list(costs), dtype=np.float64)
    n = c.size
    if stages < 1:
        raise GnnpipeError(f"stages: expected at least 1, got {stages}")
    if n < stages:
        raise GnnpipeError(
            f"cannot place {n} layers on {stages} pipeline stages: each stage needs at least "
            f"one layer; use fewer stages or hybrid mode (--mode hybrid, ways × stages) "
            f"with at most {n} stages"
        )
    if n and (not np.all(np.isfinite(c)) or c.min() < 0):
        raise GnnpipeError("costs: expected finite non-negative numbers")
    pre = np.concatenate(([0.0], np.cumsum(c)))

    def cost(i: int, j: int) -> float:
        return float(pre[j] - pre[i])

    # best[k][j]: minimal bottleneck placing units [0, j) on k stages.
    inf = float("inf")
    best = [[inf] * (n + 1) for _ in range(stages + 1)]
    best[0][0] = 0.0
    for k in range(1, stages + 1):
        for j in range(k, n - (stages - k) + 1):
            b = inf
            for i in range(k - 1, j):
                v = max(best[k - 1][i], cost(i, j))
                if v < b:
                    b = v
            best[k][j] = b
    bstar = best[stages][n]
    tol = 1e-12 * max(1.0, abs(bstar))
    # Many splits share the optimal bottleneck (e.g. when one wide input layer dominates);
    # among them take the one with the smallest sum of squared stage costs, i.e. the rest
    # balanced too. Equal sums (within tolerance) keep the largest last stages, which leaves
    # the first stage (input layer, wide features) the lightest, as in the paper.
    sq = [[inf] * (n + 1) for _ in range(stages + 1)]
    arg = [[-1] * (n + 1) for _ in range(stages + 1)]
    sq[0][0] = 0.0
    for k in range(1, stages + 1):
        for j in range(k, n - (stages - k) + 1):
            b, bi = inf, -1
            for i in range(k - 1, j):
                c_ij = cost(i, j)
                if c_ij > bstar + tol or sq[k - 1][i] == inf:
                    continue
                v = sq[k - 1][i] + c_ij * c_ij
                # Strictly better only: on ties the smaller i (fuller later stage) stays.
                if b == inf or v < b - 1e-12 * max(1.0, abs(b)):
                    b, bi = v, i
            sq[k][j], arg[k][j] = b, bi
    blocks: list[tuple[int, int]] = []
    j = n
    for k in range(stages, 0, -1):
        i = arg[k][j]
        assert i >= 0, "assign_layers: no split within the optimal bottleneck"
        blocks.append((i, j))
        j = i
    assert j == 0, "assign_layers: walk-back did not reach unit 0"
    blocks.reverse()
    return blocks

