"""Synthetic node-classification graphs: a stochastic block model and R-MAT.

Both generators are seeded and deterministic, never build an N×N matrix, and return a
:class:`~gnnpipe.data.graph.Graph` built through :func:`~gnnpipe.data.graph.symmetric_csr`
(symmetric, sorted, no self-loops, no duplicates). Sizes count *directed* edges, the way
:attr:`Graph.num_edges` and the README tables do: each undirected edge counts twice.

The edge count is hit exactly (up to rounding to an even number) whenever the graph can
hold it: edges are sampled in rounds, deduplicated, topped up while short, and a random
surplus is dropped. Memory stays proportional to the edge count: one int64 key per
undirected edge, plus the transient arrays of :func:`symmetric_csr`.

Features are label-correlated Gaussians, ``x_v = mu_{y_v} + eps_v`` with
``eps_v ~ N(0, I_F)`` and class means ``mu_c ~ N(0, (signal**2 / F) · I_F)``, so the
expected distance between two class means is ``signal·√2`` noise standard deviations
whatever the width ``F``: ``feature_signal`` alone sets how separable the classes are from
features, and ``homophily`` how much neighbour aggregation helps.

Random streams are split with :class:`numpy.random.SeedSequence` (labels, edges,
features, split), so changing e.g. ``num_features`` leaves the edges and labels unchanged.
"""

from __future__ import annotations

import logging
import math
from typing import Callable

import numpy as np

from gnnpipe._base import GnnpipeError
from gnnpipe.data.graph import Graph, drop_sorted_duplicates, symmetric_csr

log = logging.getLogger(__name__)

# Bump when a change makes the same parameters produce a different graph.
GENERATOR_VERSION = 1
# Edges sampled per vectorized block: bounds the transient memory of one round
# (a few int64/float arrays of this length) independently of the graph size.
_EDGE_BLOCK = 1 << 22
# Feature rows generated per block (fixed, so the random stream does not depend on memory).
_FEATURE_BLOCK = 1 << 16
_MAX_ROUNDS = 12


# ---------------------------------------------------------------------- validation helpers
def _check_int(name: str, value: int, lo: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise GnnpipeError(f"{name}: expected an integer >= {lo}, got {value!r}")
    if value < lo:
        raise GnnpipeError(f"{name}: expected an integer >= {lo}, got {value}")
    return int(value)


def _check_float(name: str, value: float, lo: float, hi: float = math.inf) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise GnnpipeError(f"{name}: expected a number in [{lo}, {hi}], got {value!r}") from None
    if not (lo <= v <= hi):
        raise GnnpipeError(f"{name}: expected a number in [{lo}, {hi}], got {value}")
    return v


def _check_split(train_frac: float, val_frac: float) -> tuple[float, float]:
    tr = _check_float("train_frac", train_frac, 0.0, 1.0)
    va = _check_float("val_frac", val_frac, 0.0, 1.0)
    if tr + va > 1.0 + 1e-12:
        raise GnnpipeError(f"train_frac + val_frac: expected <= 1, got {tr} + {va} = {tr + va}")
    return tr, va


def _check_edge_target(num_nodes: int, num_edges: int) -> int:
    """Undirected edge target for ``num_edges`` directed edges (rounded down to even)."""
    most = num_nodes * (num_nodes - 1)  # directed edges of the complete graph
    if num_edges > most:
        raise GnnpipeError(
            f"num_edges: {num_edges} directed edges requested, but {num_nodes} nodes hold at "
            f"most {most} without self-loops or duplicates"
        )
    return num_edges // 2


# ---------------------------------------------------------------------- shared pieces
def _sample_unique_edges(
    sample: Callable[[np.random.Generator, int], tuple[np.ndarray, np.ndarray]],
    target: int,
    num_nodes: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """Draw edges until ``target`` distinct undirected edges exist; return their keys.

    ``sample(rng, m)`` returns ``m`` candidate (src, dst) pairs, possibly with self-loops,
    duplicates or ids ``>= num_nodes`` (marked by the sampler as -1 and discarded here).
    Each undirected edge is keyed ``min·N + max``; keys are kept sorted and unique, so a
    round merges two sorted runs (timsort merges them in linear time). When the rounds
    overshoot, a uniformly random surplus is dropped, which keeps the edge distribution.

    Returns:
        int64 [target'] sorted keys, ``target' == target`` unless the sampler could not
        find that many distinct edges in ``_MAX_ROUNDS`` rounds (then a warning is logged).
    """
    n = num_nodes
    keys = np.empty(0, dtype=np.int64)
    yield_rate = 1.0  # distinct new edges per candidate, re-estimated every round
    barren = 0  # consecutive rounds that found nothing new
    for _ in range(_MAX_ROUNDS):
        deficit = target - keys.size
        if deficit <= 0:
            break
        # Over-ask slightly so one round usually suffices; later rounds mop up. The cap
        # bounds memory when the last few edges are rare (skewed R-MAT, tiny classes).
        want = int(math.ceil(deficit / max(yield_rate, 1e-3) * 1.02)) + 16
        want = min(want, 4 * target + (1 << 16))
        parts = []
        for start in range(0, want, _EDGE_BLOCK):
            m = min(_EDGE_BLOCK, want - start)
            s, d = sample(rng, m)
            ok = (s != d) & (s >= 0) & (d >= 0)
            s, d = s[ok], d[ok]
            lo = np.minimum(s, d)
            hi = np.maximum(s, d)
            lo *= n
            lo += hi
            parts.append(lo)
            del s, d, ok, hi
        new = np.concatenate(parts) if parts else np.empty(0, np.int64)
        del parts
        new.sort()
        before = keys.size
        merged = np.concatenate([keys, new])
        del new
        merged.sort(kind="stable")  # two sorted runs: a linear merge
        keys = drop_sorted_duplicates(merged)
        del merged
        gained = keys.size - before
        if gained <= 0:
            # Nearly saturated, or rare edges: ask for more before giving up.
            barren += 1
            if barren >= 3:
                break
            yield_rate /= 8
            continue
        barren = 0
        yield_rate = gained / want
    if keys.size > target:
        drop = rng.choice(keys.size, size=keys.size - target, replace=False)
        keep = np.ones(keys.size, dtype=bool)
        keep[drop] = False
        keys = keys[keep]
    elif keys.size < target:
        log.warning(
            "synthetic graph: found %d distinct undirected edges of the %d requested "
            "(the model cannot place more on %d nodes)",
            keys.size,
            target,
            n,
        )
    return keys


def _keys_to_csr(holder: list[np.ndarray], num_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """CSR of the undirected keys in ``holder[0]``, which is emptied to free them early."""
    keys = holder.pop()
    src = keys // num_nodes
    dst = keys
    dst -= src * num_nodes  # in place: the keys are not needed any more
    del keys
    return symmetric_csr(src, dst, num_nodes)


def _class_features(
    labels: np.ndarray, num_classes: int, num_features: int, signal: float, rng: np.random.Generator
) -> np.ndarray:
    """float32 [N, F] rows ``mu[label] + N(0, I)``, generated in fixed-size blocks."""
    n = labels.size
    means = rng.standard_normal((num_classes, num_features), dtype=np.float32)
    means *= np.float32(signal / math.sqrt(num_features))
    x = np.empty((n, num_features), dtype=np.float32)
    for start in range(0, n, _FEATURE_BLOCK):
        stop = min(n, start + _FEATURE_BLOCK)
        blk = x[start:stop]  # a contiguous row block: rng writes straight into it
        rng.standard_normal(out=blk, dtype=np.float32)
        blk += means[labels[start:stop]]
    return x


def _random_split(
    n: int, train_frac: float, val_frac: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Disjoint boolean masks covering all nodes: round(f·N) train, round(f·N) val, rest test."""
    perm = rng.permutation(n)
    n_tr = int(round(train_frac * n))
    n_va = min(n - n_tr, int(round(val_frac * n)))
    masks = [np.zeros(n, dtype=bool) for _ in range(3)]
    masks[0][perm[:n_tr]] = True
    masks[1][perm[n_tr : n_tr + n_va]] = True
    masks[2][perm[n_tr + n_va :]] = True
    return masks[0], masks[1], masks[2]


def _streams(seed: int, k: int) -> list[np.random.Generator]:
    return [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(k)]


# ---------------------------------------------------------------------- SBM
def sbm(
    num_nodes: int,
    num_classes: int = 8,
    avg_degree: float = 10.0,
    homophily: float = 0.8,
    num_features: int = 64,
    feature_signal: float = 1.0,
    seed: int = 0,
    train_frac: float = 0.6,
    val_frac: float = 0.2,
    name: str | None = None,
) -> Graph:
    r"""A stochastic block model graph with label-correlated Gaussian features.

    Nodes get balanced classes (sizes differ by at most one, randomly placed). Each
    undirected edge picks its source uniformly; with probability ``homophily`` its
    destination is uniform within the source's class, otherwise uniform within a uniformly
    chosen *other* class. The edge homophily (fraction of edges joining same-class nodes)
    is therefore ``homophily`` in expectation (exactly 1 when ``num_classes == 1``), and
    degrees are Poisson-like around ``avg_degree``. No N×N matrix is formed: time and
    memory are O(N·F + E).

    Args:
        num_nodes: N, at least ``num_classes``.
        num_classes: K classes.
        avg_degree: requested mean degree; the graph gets
            ``2·floor(round(avg_degree·N) / 2)`` directed edges (each undirected edge
            counted twice), exactly, unless the classes are too small to hold them.
        homophily: expected fraction of edges within a class, in ``[0, 1]``.
        num_features: F, width of the dense float32 features.
        feature_signal: scale of the class means (0: features carry no label information).
        seed: seed of every random choice; the same arguments give the same
            :attr:`Graph.content_hash`.
        train_frac, val_frac: random split fractions; the rest is test.
        name: graph name; default ``sbm-n{N}-k{K}-s{seed}``.

    Returns:
        :class:`Graph` with ``meta = {"generator": "sbm", "generator_version", "params"}``.

    Shapes:
        features: float32 [N, F]; labels: int64 [N]; indices: int64 [≈avg_degree·N].
    """
    n = _check_int("num_nodes", num_nodes, 1)
    k = _check_int("num_classes", num_classes, 1)
    if k > n:
        raise GnnpipeError(f"num_classes: expected <= num_nodes = {n}, got {k}")
    deg = _check_float("avg_degree", avg_degree, 0.0)
    h = _check_float("homophily", homophily, 0.0, 1.0)
    f = _check_int("num_features", num_features, 1)
    sig = _check_float("feature_signal", feature_signal, 0.0)
    seed = _check_int("seed", seed, 0)
    tr, va = _check_split(train_frac, val_frac)
    requested = int(round(deg * n))
    target = _check_edge_target(n, requested)

    r_lab, r_edge, r_feat, r_split = _streams(seed, 4)
    labels = r_lab.permutation(np.arange(n, dtype=np.int64) % k)
    order = np.argsort(labels, kind="stable")  # nodes grouped by class
    size = np.bincount(labels, minlength=k).astype(np.int64)
    start = np.zeros(k, dtype=np.int64)
    np.cumsum(size[:-1], out=start[1:])
    h_eff = 1.0 if k == 1 else h

    def sample(rng: np.random.Generator, m: int) -> tuple[np.ndarray, np.ndarray]:
        src = rng.integers(0, n, size=m, dtype=np.int64)
        c = labels[src]
        if k > 1:
            other = rng.integers(1, k, size=m, dtype=np.int64)  # offset to a different class
            inside = rng.random(m) < h_eff
            other[inside] = 0
            c += other
            c %= k
        pos = (rng.random(m) * size[c]).astype(np.int64)
        np.minimum(pos, size[c] - 1, out=pos)  # guard the u -> 1.0 rounding edge
        pos += start[c]
        return src, order[pos]

    indptr, indices = _keys_to_csr([_sample_unique_edges(sample, target, n, r_edge)], n)
    x = _class_features(labels, k, f, sig, r_feat)
    train, val, test = _random_split(n, tr, va, r_split)
    params = dict(
        num_nodes=n, num_classes=k, avg_degree=deg, homophily=h, num_features=f,
        feature_signal=sig, seed=seed, train_frac=tr, val_frac=va,
    )
    log.info("sbm: %d nodes, %d directed edges (requested %d)", n, indices.size, requested)
    return Graph(
        indptr, indices, x, labels, train, val, test,
        name=name or f"sbm-n{n}-k{k}-s{seed}",
        num_classes=k,
        meta={"generator": "sbm", "generator_version": GENERATOR_VERSION, "params": params},
    )


# ---------------------------------------------------------------------- R-MAT
def rmat(
    num_nodes: int,
    num_edges: int,
    a: float = 0.57,
    b: float = 0.19,
    c: float = 0.19,
    num_classes: int = 8,
    num_features: int = 64,
    seed: int = 0,
    feature_signal: float = 1.0,
    train_frac: float = 0.6,
    val_frac: float = 0.2,
    name: str | None = None,
    homophily: float = 0.5,
) -> Graph:
    r"""An R-MAT power-law graph (Chakrabarti, Zhan, Faloutsos, SDM 2004) with classes.

    **Edges.** With ``s = ceil(log2 N)`` and ``d = 1 - a - b - c``, each edge descends
    ``s`` levels of the recursive adjacency matrix, picking quadrant (top-left, top-right,
    bottom-left, bottom-right) with probability (a, b, c, d); the quadrants' bits spell
    the source and destination ids in ``[0, 2**s)``. All edges of a block take each level
    at once (vectorized, ``_EDGE_BLOCK`` edges per block to bound memory).

    **Ids outside [0, N) are dropped, not folded.** The ``2**s`` R-MAT ids are shuffled by
    a seeded random permutation first (so hubs do not sit at low ids, and node id says
    nothing about degree, as in Graph500), and the ``2**s - N`` ids that land at ``>= N``
    are dropped with their edges; the sampler draws more edges to make up the count.
    Folding (``id mod N``) would instead merge unrelated nodes into hubs.

    **Labels** come from the recursive quadrant structure: with ``k = ceil(log2 K)``, the
    top ``k`` bits of a node's R-MAT id name its *block* (one of ``2**k`` contiguous id
    ranges, a sub-matrix of the recursion), and class = ``block·K // 2**k`` (equal-sized
    classes when K is a power of two, else sizes differ by at most 2×). Plain R-MAT with
    the default (a, b, c) is almost uncorrelated across levels, so these classes would not
    be visible in the structure; hence ``homophily``: with that probability an edge's
    destination takes the top ``k`` bits of its source (landing in the source's block, so
    its class), keeping its lower bits. When ``b == c`` the source and destination bits
    have the same distribution, so this leaves every node's expected number of edge
    endpoints unchanged and the degree distribution stays R-MAT's (the largest degrees
    drop somewhat, since a hub's edges then repeat within its block more often and
    duplicates merge; with ``b != c`` degrees shift slightly). As in any R-MAT graph,
    many nodes are isolated (about a third at mean degree 10). Measured edge homophily is about
    ``homophily + (1 - homophily)·p0``, where ``p0`` (~0.25 for the defaults, K=8) is the
    plain R-MAT rate. ``homophily=0`` gives plain R-MAT.

    Args:
        num_nodes: N, at least ``num_classes``.
        num_edges: requested *directed* edges (each undirected edge counted twice); the
            graph gets exactly ``2·floor(num_edges/2)`` unless the skew makes that many
            distinct edges too rare to find (a warning is logged).
        a, b, c: R-MAT quadrant probabilities, ``d = 1 - a - b - c >= 0``.
        num_classes: K classes.
        num_features: F, width of the dense float32 features.
        seed: seed of every random choice.
        feature_signal: scale of the class means, as in :func:`sbm`.
        train_frac, val_frac: random split fractions; the rest is test.
        name: graph name; default ``rmat-n{N}-e{num_edges}-s{seed}``.
        homophily: probability that an edge stays within its source's block (see above).

    Returns:
        :class:`Graph` with ``meta = {"generator": "rmat", "generator_version", "params"}``.

    Shapes:
        features: float32 [N, F]; labels: int64 [N]; indices: int64 [≈num_edges].
    """
    n = _check_int("num_nodes", num_nodes, 1)
    e = _check_int("num_edges", num_edges, 0)
    a = _check_float("a", a, 0.0, 1.0)
    b = _check_float("b", b, 0.0, 1.0)
    c = _check_float("c", c, 0.0, 1.0)
    d = 1.0 - a - b - c
    if d < -1e-12:
        raise GnnpipeError(f"a + b + c: expected <= 1, got {a} + {b} + {c} = {a + b + c}")
    d = max(d, 0.0)
    k = _check_int("num_classes", num_classes, 1)
    if k > n:
        raise GnnpipeError(f"num_classes: expected <= num_nodes = {n}, got {k}")
    f = _check_int("num_features", num_features, 1)
    seed = _check_int("seed", seed, 0)
    sig = _check_float("feature_signal", feature_signal, 0.0)
    h = _check_float("homophily", homophily, 0.0, 1.0)
    tr, va = _check_split(train_frac, val_frac)
    target = _check_edge_target(n, e)

    scale = max(1, (n - 1).bit_length())  # 2**scale >= n
    n2 = 1 << scale
    kbits = (k - 1).bit_length()  # 2**kbits >= k, and kbits <= scale since k <= n
    low = scale - kbits
    low_mask = np.int64((1 << low) - 1)

    r_perm, r_edge, r_feat, r_split = _streams(seed, 4)
    perm = r_perm.permutation(n2).astype(np.int64)  # R-MAT id -> node id (kept if < n)
    perm[perm >= n] = -1
    inv = np.empty(n, dtype=np.int64)  # node id -> R-MAT id
    kept = perm >= 0
    inv[perm[kept]] = np.nonzero(kept)[0]
    del kept
    labels = ((inv >> low) * k) >> kbits
    del inv
    # Thresholds on one uniform per level: [0,a) TL, [a,a+b) TR, [a+b,a+b+c) BL, rest BR.
    t_ab, t_a, t_abc = np.float32(a + b), np.float32(a), np.float32(a + b + c)

    def sample(rng: np.random.Generator, m: int) -> tuple[np.ndarray, np.ndarray]:
        src = np.zeros(m, dtype=np.int64)
        dst = np.zeros(m, dtype=np.int64)
        u = np.empty(m, dtype=np.float32)
        bit = np.empty(m, dtype=bool)
        tmp = np.empty(m, dtype=bool)
        for _ in range(scale):  # most significant bit first
            rng.random(out=u, dtype=np.float32)
            src <<= 1
            np.greater_equal(u, t_ab, out=bit)  # bottom half: source bit 1
            src |= bit
            dst <<= 1
            np.greater_equal(u, t_a, out=bit)
            np.less(u, t_ab, out=tmp)
            bit &= tmp  # top-right quadrant
            np.greater_equal(u, t_abc, out=tmp)
            bit |= tmp  # or bottom-right: destination bit 1
            dst |= bit
        if h > 0 and kbits > 0:
            same = rng.random(m) < h
            dst[same] = (src[same] & ~low_mask) | (dst[same] & low_mask)
        return perm[src], perm[dst]  # dropped ids map to -1

    indptr, indices = _keys_to_csr([_sample_unique_edges(sample, target, n, r_edge)], n)
    x = _class_features(labels, k, f, sig, r_feat)
    train, val, test = _random_split(n, tr, va, r_split)
    params = dict(
        num_nodes=n, num_edges=e, a=a, b=b, c=c, d=d, num_classes=k, num_features=f,
        seed=seed, feature_signal=sig, train_frac=tr, val_frac=va, homophily=h,
    )
    log.info("rmat: %d nodes, %d directed edges (requested %d)", n, indices.size, e)
    return Graph(
        indptr, indices, x, labels, train, val, test,
        name=name or f"rmat-n{n}-e{e}-s{seed}",
        num_classes=k,
        meta={"generator": "rmat", "generator_version": GENERATOR_VERSION, "params": params},
    )
