"""Memory-lean multilevel partitioning: our own coarsening, METIS on the coarse graph.

METIS (pymetis, 64-bit ``idx_t``) needs about 130 bytes per directed edge for a k-way or
recursive-bisection partition: 2.7 GB for a 20M-edge graph, 16× its CSR. This module
keeps the large levels out of METIS:

1. **Coarsen** in numpy with int32 arrays, in row blocks of ``block_edges`` edges so that
   temporaries stay small. Per level (``scheme="adaptive"``): a seeded heavy-edge
   matching (each unmatched vertex proposes to its best-rated unmatched neighbour,
   rating ``w(u,v)² / (c(u)·c(v))``, mutual proposals match; a few rounds; then two-hop
   pairs of leftover vertices whose best neighbour is the same), unless matching keeps
   more than :data:`MATCHING_MIN_SHRINK` of the edges (power-law graphs: a hub pairs
   with one leaf per level) or the levels kept would outgrow the input's edges; then
   size-constrained label propagation clusters instead. Isolated vertices are bundled.
   Contraction merges parallel edges (summed weights), drops self-loops, adds vertex
   weights.
2. Repeat until the coarse graph has at most ``target_edges`` directed edges (or stops
   shrinking), then run **METIS** on it with vertex and edge weights.
3. **Uncoarsen**: project the parts back level by level, rebalance if a part is over the
   bound, and at every level run a
   vectorised greedy **boundary refinement** that never increases the cut and never puts
   a part above the balance bound: every pass moves an independent set of vertices
   (no two movers adjacent), each with a positive gain, into parts with room.

Everything is deterministic for a given seed (seeded hashes break ties; stable sorts).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

log = logging.getLogger(__name__)

BLOCK_EDGES = 1 << 21  # edges per row block: temporaries of a few tens of MB at most
#: Observed peak of pymetis (64-bit idx_t) per directed edge / per vertex, with margin;
#: see docs/partitioner.md for the measurement.
METIS_BYTES_PER_EDGE = 140
METIS_BYTES_PER_NODE = 400
#: ``adaptive`` coarsening clusters instead of matching a level when matching would keep
#: more than this fraction of its edges (R-MAT: 0.95; Squirrel: 0.69).
MATCHING_MIN_SHRINK = 0.8


def estimate_metis_bytes(num_nodes: int, num_edges: int) -> int:
    """Predicted extra peak memory of plain METIS (pymetis) on a graph of that size."""
    return METIS_BYTES_PER_EDGE * int(num_edges) + METIS_BYTES_PER_NODE * int(num_nodes)


@dataclass
class Level:
    """One graph of the hierarchy: CSR, edge weights (None = all 1), vertex weights."""

    indptr: np.ndarray
    indices: np.ndarray
    eweights: np.ndarray | None
    vweights: np.ndarray  # int64 [n]

    @property
    def n(self) -> int:
        return int(self.indptr.size - 1)

    @property
    def nnz(self) -> int:
        return int(self.indptr[-1])


def _row_blocks(indptr: np.ndarray, block_edges: int):
    """Row ranges [a, b) whose edges number about ``block_edges`` (at least one row)."""
    n = indptr.size - 1
    a = 0
    while a < n:
        b = int(np.searchsorted(indptr, indptr[a] + block_edges, side="right")) - 1
        b = min(max(b, a + 1), n)
        yield a, b
        a = b


def _block(lv: Level, a: int, b: int):
    """(local row of every edge, neighbours, weights as float64) of rows [a, b)."""
    ea, eb = int(lv.indptr[a]), int(lv.indptr[b])
    rows = np.repeat(np.arange(b - a, dtype=np.int64), np.diff(np.asarray(lv.indptr[a : b + 1])))
    nbr = np.asarray(lv.indices[ea:eb], dtype=np.int64)
    w = np.ones(eb - ea) if lv.eweights is None else lv.eweights[ea:eb].astype(np.float64)
    return rows, nbr, w


def _pair_hash(u: np.ndarray, v: np.ndarray, salt: int) -> np.ndarray:
    """A seeded hash of the unordered pair {u, v} (uint64), for symmetric tie-breaking."""
    lo = np.minimum(u, v).astype(np.uint64)
    hi = np.maximum(u, v).astype(np.uint64)
    x = lo * np.uint64(0x9E3779B97F4A7C15) ^ (hi + np.uint64(salt)) * np.uint64(0xC2B2AE3D27D4EB4F)
    x ^= x >> np.uint64(31)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(29)
    return x


def _best_per_row(rows: np.ndarray, nrows: int, key: np.ndarray, tie: np.ndarray) -> np.ndarray:
    """Index (into the block's edges) of the max-``key`` edge of every row, ties by max
    ``tie``; -1 for rows whose keys are all -inf (no candidate) or that have no edge.

    ``rows`` must be non-decreasing (edges in CSR order).
    """
    out = np.full(nrows, -1, dtype=np.int64)
    if rows.size == 0:
        return out
    starts = np.flatnonzero(np.r_[True, rows[1:] != rows[:-1]])
    r = rows[starts]
    m1 = np.maximum.reduceat(key, starts)
    cand = key == np.repeat(m1, np.diff(np.r_[starts, rows.size]))
    t = np.where(cand, tie, np.uint64(0))
    m2 = np.maximum.reduceat(t, starts)
    pick = np.flatnonzero(cand & (t == np.repeat(m2, np.diff(np.r_[starts, rows.size]))))
    # First picked edge of every row (a tie on both keys is a hash collision).
    pr = rows[pick]
    first = np.r_[True, pr[1:] != pr[:-1]]
    pick, pr = pick[first], pr[first]
    good = key[pick] > -np.inf
    out[pr[good]] = pick[good]
    return out


def label_propagation(lv: Level, seed: int, max_cluster_weight: int, rounds: int = 6,
                      resolution: float = 0.0, block_edges: int = BLOCK_EDGES) -> np.ndarray:
    """Size-constrained label propagation clustering (as in KaHIP's coarsening of
    complex networks): ``label[u]`` is the cluster of u (a vertex id).

    Every round, half of the vertices (a seeded hash picks which) each look for the
    neighbouring cluster they are most strongly connected to (summed edge weight, ties
    by a seeded hash) and join it when that beats their own cluster; joins into a
    cluster are accepted, strongest first, while its weight stays at most
    ``max_cluster_weight``. Matching shrinks power-law graphs poorly (a hub pairs with one
    leaf per level); clusters shrink them fast.

    Returns:
        int64 [n] cluster label of every vertex; no cluster heavier than
        ``max(max_cluster_weight, heaviest vertex)``.
    """
    n = lv.n
    vw = lv.vweights.astype(np.int64)
    label = np.arange(n, dtype=np.int64)
    cw = vw.copy()  # weight of the cluster named by each label
    ids = np.arange(n, dtype=np.int64)
    # Modularity-style penalty (resolution > 0): joining C is worth w(u, C) minus the
    # edges expected between u and C, resolution · d(u) · vol(C) / vol(V).
    if resolution > 0:
        dv = np.zeros(n)
        for a, b in _row_blocks(lv.indptr, block_edges):
            rows, _, w = _block(lv, a, b)
            dv[a:b] = np.bincount(rows, weights=w, minlength=b - a)
        cvol = dv.copy()
        scale = resolution / max(float(dv.sum()), 1.0)
    for rnd in range(2 * rounds):
        active = (_pair_hash(ids, ids, seed * 7919 + rnd // 2) & np.uint64(1)).astype(bool) == bool(rnd % 2)
        tgt = np.full(n, -1, dtype=np.int64)
        gain = np.zeros(n)
        for a, b in _row_blocks(lv.indptr, block_edges):
            if not active[a:b].any():
                continue
            rows, nbr, w = _block(lv, a, b)
            sel = active[rows + a] & (nbr != rows + a)
            rows, nbr, w = rows[sel], nbr[sel], w[sel]
            if rows.size == 0:
                continue
            key = rows * n + label[nbr]
            uk, inv = np.unique(key, return_inverse=True)
            sums = np.bincount(inv.ravel(), weights=w, minlength=uk.size)
            del key, inv
            ur = uk // n
            ul = uk - ur * n
            if resolution > 0:
                mine = ul == label[ur + a]
                sums -= scale * dv[ur + a] * (cvol[ul] - np.where(mine, dv[ur + a], 0.0))
            own = np.zeros(b - a)
            if resolution > 0:
                own -= scale * dv[a:b] * (cvol[label[a:b]] - dv[a:b])
            mine = ul == label[ur + a]
            own[ur[mine]] = sums[mine]
            ok = (~mine) & (cw[ul] + vw[ur + a] <= max_cluster_weight)
            bi = _best_per_row(ur, b - a, np.where(ok, sums, -np.inf), _pair_hash(ul, ul, seed + rnd))
            has = np.flatnonzero(bi >= 0)
            better = sums[bi[has]] > own[has]
            has = has[better]
            tgt[a + has] = ul[bi[has]]
            gain[a + has] = sums[bi[has]] - own[has]
        mv = np.flatnonzero(tgt >= 0)
        if mv.size == 0:
            if rnd % 2:
                break
            continue
        # Joins per target cluster, strongest first, while the cluster has room.
        o = np.lexsort((mv, -gain[mv], tgt[mv]))
        mv = mv[o]
        t = tgt[mv]
        cum = np.cumsum(vw[mv])
        gstart = np.flatnonzero(np.r_[True, t[1:] != t[:-1]])
        before = np.repeat(np.r_[0, cum[gstart[1:] - 1]], np.diff(np.r_[gstart, mv.size]))
        mv = mv[cw[t] + (cum - before) <= max_cluster_weight]
        # Leaving vertices lighten their clusters only after this round; joins into a
        # cluster whose members are leaving stay within the bound all the same.
        np.subtract.at(cw, label[mv], vw[mv])
        if resolution > 0:
            np.subtract.at(cvol, label[mv], dv[mv])
            np.add.at(cvol, tgt[mv], dv[mv])
        label[mv] = tgt[mv]
        np.add.at(cw, label[mv], vw[mv])
        log.debug("label propagation round %d: %d moves", rnd, mv.size)
    return label


def heavy_edge_matching(lv: Level, seed: int, max_vweight: int, rounds: int = 8,
                        two_hop: bool = True, block_edges: int = BLOCK_EDGES) -> np.ndarray:
    """A matching of ``lv``: ``match[u]`` is u's partner, or u itself when unmatched.

    Matched pairs are adjacent (or, two-hop, share a neighbour), and their summed vertex
    weight is at most ``max_vweight``.

    Returns:
        int64 [n], an involution (``match[match[u]] == u``).
    """
    n = lv.n
    vw = lv.vweights.astype(np.float64)
    match = np.full(n, -1, dtype=np.int64)
    anchor = np.full(n, -1, dtype=np.int64)  # best neighbour of any state, for two-hop
    salt = int(seed) * 1_000_003 + 17
    for rnd in range(rounds):
        free = match < 0
        nfree = int(free.sum())
        if nfree < 2:
            break
        best = np.full(n, -1, dtype=np.int64)
        for a, b in _row_blocks(lv.indptr, block_edges):
            if not free[a:b].any():
                continue
            rows, nbr, w = _block(lv, a, b)
            u = rows + a
            rating = w * w / (vw[u] * vw[nbr])
            tie = _pair_hash(u, nbr, salt + rnd)
            valid = free[u] & (nbr != u)
            if rnd == 0:
                # Best neighbour whatever its state (rating only), for two-hop matching.
                bi = _best_per_row(rows, b - a, np.where(valid, rating, -np.inf), tie)
                has = bi >= 0
                anchor[a:b][has] = nbr[bi[has]]
            valid &= free[nbr] & (vw[u] + vw[nbr] <= max_vweight)
            bi = _best_per_row(rows, b - a, np.where(valid, rating, -np.inf), tie)
            has = bi >= 0
            best[a:b][has] = nbr[bi[has]]
        cand = np.flatnonzero(best >= 0)
        mutual = cand[best[best[cand]] == cand]
        if mutual.size == 0:
            break
        match[mutual] = best[mutual]
        if mutual.size < 0.01 * nfree:
            break
    if two_hop:
        # Unmatched vertices sharing the same best neighbour: pair them in id order.
        left = np.flatnonzero((match < 0) & (anchor >= 0))
        if left.size > 1:
            o = np.lexsort((left, anchor[left]))
            left = left[o]
            same = anchor[left[1:]] == anchor[left[:-1]]
            # Pair positions (i, i+1) greedily within each anchor group: take every
            # group's 0-1, 2-3, ...: position parity inside its group.
            grp_start = np.r_[True, ~same]
            pos = np.arange(left.size) - np.maximum.accumulate(np.where(grp_start, np.arange(left.size), 0))
            i = np.flatnonzero((pos % 2 == 0)[:-1] & same)
            u, v = left[i], left[i + 1]
            fit = vw[u] + vw[v] <= max_vweight
            u, v = u[fit], v[fit]
            match[u] = v
            match[v] = u
    lone = match < 0
    match[lone] = np.flatnonzero(lone)
    return match


def contract(lv: Level, groups: np.ndarray, block_edges: int = BLOCK_EDGES) -> tuple[np.ndarray, Level]:
    """Collapse every group of vertices into one coarse vertex.

    ``groups[u]`` names u's group by a label in ``[0, n)`` shared by its members: the
    smaller id of a matched pair, or the labels of :func:`label_propagation`. Coarse ids follow the smallest member id of each
    group. Parallel coarse edges merge (weights add), edges inside a group disappear,
    vertex weights add.

    Returns:
        (cmap int64 [n] fine → coarse, coarse :class:`Level` with int32 indices and weights)
    """
    n = lv.n
    # Smallest member of every group, then groups numbered in that order.
    first = np.full(n, n, dtype=np.int64)
    np.minimum.at(first, groups, np.arange(n, dtype=np.int64))
    leader = first[groups]
    del first
    is_leader = np.zeros(n, dtype=bool)
    is_leader[leader] = True
    cid = np.cumsum(is_leader, dtype=np.int64) - 1
    cmap = cid[leader]
    del cid, leader, is_leader
    nc = int(cmap.max()) + 1 if n else 0
    cvw = np.bincount(cmap, weights=lv.vweights, minlength=nc).astype(np.int64)
    # Fine rows in coarse order (stable: a pair's rows in id order).
    order = np.argsort(cmap, kind="stable")
    cptr_f = np.zeros(nc + 1, dtype=np.int64)  # fine rows of each coarse vertex
    np.cumsum(np.bincount(cmap, minlength=nc), out=cptr_f[1:])
    deg = np.diff(np.asarray(lv.indptr)).astype(np.int64)
    # Fine edges per coarse vertex, for the blocks.
    fe = np.zeros(nc + 1, dtype=np.int64)
    np.cumsum(np.bincount(cmap, weights=deg, minlength=nc).astype(np.int64), out=fe[1:])
    out_ix = np.empty(lv.nnz, dtype=np.int32)
    out_w = np.empty(lv.nnz, dtype=np.int32 if lv.eweights is None or lv.eweights.dtype == np.int32 else np.int64)
    counts = np.zeros(nc, dtype=np.int64)
    fill = 0
    for ca, cb in _row_blocks(fe, block_edges):
        rows = order[cptr_f[ca] : cptr_f[cb]]
        start = np.asarray(lv.indptr[rows], dtype=np.int64)
        cnt = deg[rows]
        total = int(cnt.sum())
        if total == 0:
            continue
        off = np.zeros(rows.size, dtype=np.int64)
        np.cumsum(cnt[:-1], out=off[1:])
        pos = np.repeat(start - off, cnt) + np.arange(total, dtype=np.int64)
        src = np.repeat(cmap[rows] - ca, cnt)
        dst = cmap[np.asarray(lv.indices[pos], dtype=np.int64)]
        w = None if lv.eweights is None else lv.eweights[pos]
        del pos
        keep = dst != src + ca
        key = src[keep] * nc + dst[keep]
        del src, dst
        w = np.ones(key.size, dtype=out_w.dtype) if w is None else w[keep]
        o = np.argsort(key, kind="stable")
        key = key[o]
        w = w[o]
        del o
        first = np.flatnonzero(np.r_[True, key[1:] != key[:-1]]) if key.size else np.zeros(0, np.int64)
        uk = key[first]
        sw = np.add.reduceat(w, first) if key.size else w
        r = uk // nc
        m = uk.size
        out_ix[fill : fill + m] = uk - r * nc
        out_w[fill : fill + m] = sw
        counts[ca:cb] = np.bincount(r, minlength=cb - ca)
        fill += m
    cptr = np.zeros(nc + 1, dtype=np.int64)
    np.cumsum(counts, out=cptr[1:])
    ix = out_ix[:fill].copy()
    del out_ix
    w = out_w[:fill].copy()
    return cmap, Level(cptr, ix, w, cvw)


def edge_cut(lv: Level, part: np.ndarray, block_edges: int = BLOCK_EDGES) -> int:
    """Weighted undirected edge cut of ``part`` on ``lv``."""
    cut = 0.0
    for a, b in _row_blocks(lv.indptr, block_edges):
        rows, nbr, w = _block(lv, a, b)
        cut += float(w[part[rows + a] != part[nbr]].sum())
    return int(round(cut)) // 2


def _connectivity(lv: Level, part: np.ndarray, parts: int, a: int, b: int) -> np.ndarray:
    rows, nbr, w = _block(lv, a, b)
    return np.bincount(rows * parts + part[nbr], weights=w, minlength=(b - a) * parts).reshape(b - a, parts)


def _take_within_bound(mv, src, dst, w, pw, bound) -> np.ndarray:
    """The moves (in the given order) that keep every receiving part at most ``bound``,
    updating part weights ``pw`` as moves are taken. Sequential, over candidates only."""
    pw = pw.astype(np.float64).copy()
    take = np.zeros(mv.size, dtype=bool)
    srcl, dstl, wl = src.tolist(), dst.tolist(), w.tolist()
    for i in range(mv.size):
        d = dstl[i]
        if pw[d] + wl[i] <= bound:
            pw[d] += wl[i]
            pw[srcl[i]] -= wl[i]
            take[i] = True
    return mv[take]


def refine(lv: Level, part: np.ndarray, parts: int, max_part_weight: float, passes: int = 24,
           block_edges: int = BLOCK_EDGES) -> np.ndarray:
    """Greedy boundary refinement, vectorised; modifies and returns ``part``.

    Every pass computes, for every vertex, the gain of moving it to its best-connected
    other part, keeps the positive-gain moves into parts that stay at or below
    ``max_part_weight`` (best gains first), and applies an independent set of them (no
    two movers adjacent: a mover yields to an adjacent mover of higher (gain, hash)), so
    the cut falls by exactly the sum of the applied gains. Parts above the bound never
    receive vertices, so the balance never gets worse than max(bound, the input's).
    """
    n = lv.n
    vw = lv.vweights
    for it in range(passes):
        pw = np.bincount(part, weights=vw, minlength=parts)
        tgt = np.full(n, -1, dtype=np.int64)
        gain = np.zeros(n)
        for a, b in _row_blocks(lv.indptr, block_edges):
            conn = _connectivity(lv, part, parts, a, b)
            own_p = part[a:b]
            r = np.arange(b - a)
            own = conn[r, own_p].copy()
            conn[r, own_p] = -1.0
            bt = np.argmax(conn, axis=1)
            g = conn[r, bt] - own
            pos = g > 0
            tgt[a:b][pos] = bt[pos]
            gain[a:b][pos] = g[pos]
        mv = np.flatnonzero(tgt >= 0)
        if mv.size == 0:
            break
        # Balance first (so that moves blocked by it do not block their neighbours in
        # the independent set), best gains first; checked again below.
        mv = mv[np.lexsort((mv, -gain[mv]))]
        mv = _take_within_bound(mv, part[mv], tgt[mv], vw[mv], pw, max_part_weight)
        # Independent set: a mover stays only if it beats every adjacent mover.
        moving = np.zeros(n, dtype=bool)
        moving[mv] = True
        prio = np.zeros(n)
        rank = np.empty(mv.size, dtype=np.int64)
        rank[np.lexsort((mv, gain[mv]))] = np.arange(mv.size)  # higher = stronger
        prio[mv] = rank + 1
        keep = np.ones(n, dtype=bool)
        for a, b in _row_blocks(lv.indptr, block_edges):
            if not moving[a:b].any():
                continue
            rows, nbr, _ = _block(lv, a, b)
            u = rows + a
            clash = moving[u] & moving[nbr] & (prio[nbr] > prio[u])
            keep[u[clash]] = False
        mv = mv[keep[mv]]
        del moving, prio, keep
        # Balance, best gains first: a move is taken when its target part stays within
        # the bound, counting the moves taken before it (departures free room).
        mv = _take_within_bound(mv, part[mv], tgt[mv], vw[mv], pw, max_part_weight)
        if mv.size == 0:
            break
        part[mv] = tgt[mv]
        log.debug("refine pass %d: moved %d vertices, gain %.0f", it, mv.size, gain[mv].sum())
    return part


def _bundle_isolated(lv: Level, groups: np.ndarray, max_vw: int) -> None:
    """Put the isolated vertices (no edges: neither clustering nor matching can merge
    them; R-MAT graphs have many) into bundles of weight at most ``max_vw``, in id order."""
    iso = np.flatnonzero(np.diff(np.asarray(lv.indptr)) == 0)
    if iso.size < 2:
        return
    w = lv.vweights[iso]
    cum = np.cumsum(w) - w  # weight before each vertex
    bundle = cum // max(int(max_vw), 1)
    first = np.r_[True, bundle[1:] != bundle[:-1]]
    groups[iso] = iso[first][np.cumsum(first) - 1]


def rebalance(lv: Level, part: np.ndarray, parts: int, max_part_weight: float, passes: int = 4,
              block_edges: int = BLOCK_EDGES) -> np.ndarray:
    """Move vertices out of parts above ``max_part_weight`` into parts below it, the
    cheapest (highest gain, often isolated vertices at no cost) first; modifies and
    returns ``part``. May raise the cut: balance comes first."""
    vw = lv.vweights
    for _ in range(passes):
        pw = np.bincount(part, weights=vw, minlength=parts).astype(np.float64)
        if pw.max() <= max_part_weight:
            break
        room = pw < max_part_weight
        tgt = np.full(lv.n, -1, dtype=np.int64)
        gain = np.full(lv.n, -np.inf)
        for a, b in _row_blocks(lv.indptr, block_edges):
            src = part[a:b]
            over = pw[src] > max_part_weight
            if not over.any():
                continue
            conn = _connectivity(lv, part, parts, a, b)
            r = np.arange(b - a)
            own = conn[r, src].copy()
            conn[:, ~room] = -np.inf
            bt = np.argmax(conn, axis=1)
            g = conn[r, bt] - own
            ok = over & np.isfinite(g)
            tgt[a:b][ok] = bt[ok]
            gain[a:b][ok] = g[ok]
        mv = np.flatnonzero(tgt >= 0)
        if mv.size == 0:
            break
        mv = mv[np.lexsort((mv, -gain[mv]))]
        src, dst, w = part[mv].tolist(), tgt[mv].tolist(), vw[mv].tolist()
        take = np.zeros(mv.size, dtype=bool)
        for i in range(mv.size):
            if pw[src[i]] > max_part_weight and pw[dst[i]] + w[i] <= max_part_weight:
                pw[src[i]] -= w[i]
                pw[dst[i]] += w[i]
                take[i] = True
        # Moves are chosen one at a time against their neighbours' old parts, so the
        # cut may differ from the sum of gains; balance is exact.
        part[mv[take]] = tgt[mv[take]]
    return part


def multilevel_partition(indptr: np.ndarray, indices: np.ndarray, parts: int, seed: int,
                         vweights: np.ndarray | None, metis_fn, target_edges: int,
                         imbalance: float = 0.03, scheme: str = "adaptive", cluster_share: int = 16,
                         lp_rounds: int = 6, resolution: float = 0.0, block_edges: int = BLOCK_EDGES) -> tuple[np.ndarray, dict]:
    """Coarsen to at most ``target_edges`` directed edges, partition with ``metis_fn``,
    project back with refinement at every level.

    Args:
        indptr, indices: the symmetric CSR (not copied; read in row blocks).
        vweights: int64 [n] or None (all 1).
        metis_fn: ``f(indptr, indices, vweights, eweights) -> part`` for the coarse graph.
        target_edges: stop coarsening once the graph has at most this many edges.
        imbalance: allowed part weight above the mean (0.03: METIS's default 1.03).
        cluster_share: no coarse vertex weighs more than 1/cluster_share of a part.
        scheme: how each coarser level is built: ``"matching"``
            (:func:`heavy_edge_matching`), ``"clusters"`` (:func:`label_propagation`) or
            ``"adaptive"`` (matching, unless it keeps more than
            :data:`MATCHING_MIN_SHRINK` of the edges; then clusters).

    Returns:
        (part int64 [n], info dict: ``levels`` [(nodes, directed edges)], finest first;
        ``cuts`` [(level, projected, after rebalancing, after refinement)], coarsest first)
    """
    n = indptr.size - 1
    vw = np.ones(n, dtype=np.int64) if vweights is None else np.asarray(vweights, dtype=np.int64)
    total = int(vw.sum())
    # No coarse vertex heavier than a small share of a part: keeps balance reachable.
    max_vw = max(int(vw.max()) if n else 1, int(np.ceil(total / (parts * cluster_share))))
    levels = [Level(indptr, indices, None, vw)]
    cmaps: list[np.ndarray] = []
    info: dict = {"levels": [(n, int(indptr[-1]))]}
    while levels[-1].nnz > target_edges:
        lv = levels[-1]
        coarse = None
        if scheme in ("matching", "adaptive"):
            groups = heavy_edge_matching(lv, seed + len(levels), max_vw, block_edges=block_edges)
            np.minimum(groups, np.arange(lv.n, dtype=np.int64), out=groups)  # pair label: smaller id
            _bundle_isolated(lv, groups, max_vw)
            cmap, coarse = contract(lv, groups, block_edges)
            del groups
            held = sum(c.nnz for c in levels[1:]) + coarse.nnz
            if scheme == "adaptive" and (coarse.nnz > MATCHING_MIN_SHRINK * lv.nnz or held > levels[0].nnz):
                # Matching barely merges edges here (power-law graphs), or the levels kept
                # for uncoarsening would outgrow the input graph's edges: cluster instead.
                log.info("matching kept %d of %d edges; clustering instead", coarse.nnz, lv.nnz)
                coarse = None
        if coarse is None:
            groups = label_propagation(lv, seed + len(levels), max_vw, rounds=lp_rounds,
                                       resolution=resolution, block_edges=block_edges)
            _bundle_isolated(lv, groups, max_vw)
            cmap, coarse = contract(lv, groups, block_edges)
            del groups
        if coarse.n > 0.95 * lv.n:  # stopped shrinking
            log.info("coarsening stalled at %d nodes / %d edges", lv.n, lv.nnz)
            break
        cmaps.append(cmap)
        levels.append(coarse)
        info["levels"].append((coarse.n, coarse.nnz))
        log.info("coarsened to %d nodes / %d edges", coarse.n, coarse.nnz)
    top = levels[-1]
    part = np.asarray(metis_fn(top.indptr, top.indices, top.vweights, top.eweights), dtype=np.int64)
    maxw = (1.0 + imbalance) * total / parts
    cuts = []
    for k in range(len(levels) - 1, -1, -1):
        lv = levels[k]
        before = edge_cut(lv, part, block_edges)
        # METIS may leave the coarse graph above the bound (heavy coarse vertices); finer
        # levels have lighter vertices to move. Refinement never moves vertices into
        # parts at the bound.
        if np.bincount(part, weights=lv.vweights, minlength=parts).max() > maxw:
            part = rebalance(lv, part, parts, maxw, block_edges=block_edges)
            balanced = edge_cut(lv, part, block_edges)
        else:
            balanced = before
        part = refine(lv, part, parts, maxw, block_edges=block_edges)
        cuts.append((k, before, balanced, edge_cut(lv, part, block_edges)))
        if k > 0:
            part = part[cmaps[k - 1]]
            levels.pop()
            cmaps.pop()
    info["cuts"] = cuts
    return part, info
