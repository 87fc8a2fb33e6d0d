"""One-process reference semantics of GNNPipe's stale pipeline (the tests' oracle).

Written independently of :mod:`gnnpipe.parallel.pipeline.stage` and :mod:`gnnpipe.parallel.pipeline.runtime` on purpose: no stages, no chunk
blocks with compacted neighbour lists, no communication. Each chunk aggregates over a block
whose sources are *all* N nodes; the history of every aggregating unit is a full [N, d]
matrix; cross-chunk gradients are read off the gradient of that whole matrix. The rules are
the ones the pipeline module documents (chunk order, history, cross-chunk gradients scaled by
``grad_scale`` when fresh and dropped when stale, snapshots, the history refresh of the first
``refresh_epochs`` epochs, the exact epochs of ``exact_every``: one chunk of all N nodes,
whose rows are written into the history as any chunk's; with ``drift_bound``, epoch 0 and
every epoch after a stale epoch whose history rows moved by more than the bound, measured
here over the whole ``[N, d]`` matrices as each chunk overwrites its rows; with ``exact_from``
E, every epoch from E on). Because every rule is local to
one unit, the result does not depend on how units are split into stages: the distributed
runtime with any number of stages must reproduce it.

:class:`BoundarySampleReference` is the oracle of graph parallelism's boundary sampling
(``--boundary-sample``), on the same principle: whole matrices, no exchange.

With ``ways`` (the hybrid), it is also the oracle of the stale hybrid's link between ways
(:class:`gnnpipe.parallel.pipeline.waylink.WayLink`), sharing no code with it: there is one history
``H`` of every node and one gradient matrix ``G``, no remote-row buffers and nothing sent.
A neighbour row in another way is read straight from ``H`` when the slot aggregates (fresh
if its chunk ran this epoch, this slot included; last epoch's or the snapshot's
otherwise), and the gradients a slot produces are added into ``G`` after the slot (so they
count for chunks whose backward comes at a later slot, and are dropped for chunks of the
same or an earlier slot). WayLink's pushes of each row at its owner's slot and its
batching of gradients until the owner's backward slot must give the same numbers; only
the summation order differs.

With ``ways`` and ``sample`` P < 1 (the hybrid's boundary sampling), a reader way no longer
sees the owners' ``H``: each way ``w`` keeps its own ``[N, d]`` copy ``R[w]`` of the rows it
reads from other ways. At each slot of a stale epoch, after the writes into ``H``, ``R[w]``
takes the rows of that slot's chunks that the epoch's draw keeps for ``w``
(:func:`gnnpipe.partition.sampling.sampled_positions` over the sorted ids of way ``q``'s
part that ``w`` reads, owner ``q``, reader ``w``); an exact epoch's ``H`` rows go into
every ``R[w]`` whole. A chunk of way ``w`` reads its own part from ``H`` and the rest from
``R[w]``, multiplied by ``n / k`` where sampled this epoch and by 0 elsewhere, so autograd
scales the gradients the same way.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch

from gnnpipe.models import RunCtx, loss_fn
from gnnpipe.models.block import Block
from gnnpipe.partition.sampling import sample_scale, sampled_positions
from gnnpipe.schedule import chunk_order


def _rows_block(indptr: np.ndarray, indices: np.ndarray, deg: np.ndarray, lo: int, hi: int,
               orig: np.ndarray) -> Block:
    """dst = rows [lo, hi), src = every node; global ids (dropout keys) are ``orig``."""
    n = deg.size
    orig_t = torch.from_numpy(np.asarray(orig, dtype=np.int64))
    ptr = np.asarray(indptr[lo : hi + 1], dtype=np.int64)
    return Block(
        indptr=torch.from_numpy(ptr - ptr[0]),
        indices=torch.from_numpy(np.asarray(indices[ptr[0] : ptr[-1]], dtype=np.int64)),
        num_src=n,
        src_deg=torch.from_numpy(deg.astype(np.float32)),
        dst_deg=torch.from_numpy(deg[lo:hi].astype(np.float32)),
        dst_gid=orig_t[lo:hi].clone(),
        src_gid=orig_t,
        dst_in_src=torch.arange(lo, hi, dtype=torch.int64),
    )


def _dense(x) -> torch.Tensor:
    if sp.issparse(x):
        return torch.from_numpy(np.asarray(x.todense(), dtype=np.float32))
    return torch.as_tensor(np.asarray(x, dtype=np.float32))


class StaleReference:
    """Trains ``model`` with the stale-pipeline rules in one process.

    Args:
        model: a :class:`gnnpipe.models.GNN`.
        graph: the graph in relabelled ids (chunks are contiguous ranges).
        chunk_ptr: chunk boundaries.
        orig: original id of each relabelled id (``plan.perm``), which keys dropout masks.
        ways: hybrid ways D (``chunk_ptr`` then holds C chunks per way, way-major).
        opts: :class:`gnnpipe.parallel.executor.StaleOptions`.
        sample: with ``ways``, the hybrid's boundary sampling P of the rows between ways
            (1: every row).
    """

    def __init__(self, model, graph, chunk_ptr, opts, seed: int, lr: float = 0.01, weight_decay: float = 0.0,
                 orig: np.ndarray | None = None, ways: int = 1, sample: float = 1.0):
        self.model = model
        self.g = graph
        self.opts = opts
        self.seed = seed
        self.cp = [int(c) for c in chunk_ptr]
        self.C = len(self.cp) - 1
        self.ways = ways
        if self.C % ways:
            raise ValueError(f"{self.C} chunks do not split evenly over {ways} ways")
        deg = graph.degrees().astype(np.float32)
        orig = np.arange(graph.num_nodes) if orig is None else orig
        self.blocks = [_rows_block(graph.indptr, graph.indices, deg, self.cp[k], self.cp[k + 1], orig)
                       for k in range(self.C)]
        self.whole = _rows_block(graph.indptr, graph.indices, deg, 0, graph.num_nodes, orig)
        self.x = _dense(graph.features)
        self.y = torch.as_tensor(np.asarray(graph.labels))
        self.train = torch.as_tensor(np.asarray(graph.train_mask, dtype=bool))
        self.num_train = max(int(self.train.sum()), 1)
        n = graph.num_nodes
        self.H = {i: torch.zeros(n, u.in_dim) for i, u in enumerate(model.units) if u.aggregates and i > 0}
        self.G = {i: torch.zeros_like(h) for i, h in self.H.items()}
        self.sample = float(sample) if ways > 1 and sample < 1.0 else None
        if self.sample is not None and opts.refresh_epochs:
            raise ValueError("boundary sampling does not combine with the history refresh")
        per_way = self.C // ways
        self.part_ptr = [self.cp[w * per_way] for w in range(ways)] + [n]
        self.R: dict = {}  # reader way -> unit -> [N, d]: the rows it last received
        self.rsnap: dict = {}
        if self.sample is not None:
            self.R = {w: {i: torch.zeros_like(h) for i, h in self.H.items()} for w in range(ways)}
            ip, ix = np.asarray(graph.indptr), np.asarray(graph.indices)
            pp = self.part_ptr
            # reads[w][q]: sorted ids of way q's part that way w's rows aggregate from (q != w)
            self.reads = []
            for w in range(ways):
                nb = ix[ip[pp[w]] : ip[pp[w + 1]]]
                self.reads.append([np.unique(nb[(nb >= pp[q]) & (nb < pp[q + 1])]) if q != w
                                   else np.zeros(0, np.int64) for q in range(ways)])
        self.next_exact = opts.drift_bound > 0  # drift-bounded exact epochs: epoch 0 is exact
        self.drift: float | None = None  # the last stale epoch's, with drift_bound
        self.snap = None
        self.opt = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)

    def _drawn(self, epoch: int) -> tuple[list, list]:
        """Boundary sampling, epoch ``epoch``: ``kept[w][q]`` the ids of way ``q``'s part
        that reach way ``w``, and ``scale[w]`` float32 [N] every row's factor in ``w``'s
        reads (1 on its own part, ``n / k`` kept, 0 otherwise)."""
        kept, scale = [], []
        for w, reads in enumerate(self.reads):
            s = torch.zeros(self.g.num_nodes)
            s[self.part_ptr[w] : self.part_ptr[w + 1]] = 1.0
            row = []
            for q, ids in enumerate(reads):
                if q != w:
                    ids = ids[sampled_positions(self.seed, epoch, q, w, ids.size, self.sample)]
                    s[torch.from_numpy(ids)] = sample_scale(reads[q].size, self.sample)
                row.append(torch.from_numpy(ids))
            kept.append(row)
            scale.append(s)
        return kept, scale

    def _restore(self) -> None:
        """The snapshot, when one was taken, back into ``H`` (and every ``R[w]``)."""
        if self.snap is None:
            return
        for i in self.H:
            self.H[i].copy_(self.snap[i])
        for w, units in self.R.items():
            for i in units:
                units[i].copy_(self.rsnap[w][i])

    def _deliver(self, i: int, slot: list, cp: list, C: int, kept: list | None) -> None:
        """Boundary sampling, unit ``i`` after the slot's writes into ``H``: each reader way
        ``w`` receives the slot's rows of the other ways that the epoch's draw keeps for it
        (``kept``; None, an exact epoch: every row)."""
        for w, units in self.R.items():
            if kept is None:
                units[i].copy_(self.H[i])
                continue
            for c in slot:
                q = c // C
                if q != w:
                    ids = kept[w][q]
                    ids = ids[(ids >= cp[c]) & (ids < cp[c + 1])]
                    units[i][ids] = self.H[i][ids]

    def _sampled_source(self, i: int, w: int, h: torch.Tensor, lo: int, hi: int, scale: list,
                        grad_fix: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """Boundary sampling: the sources of way ``w``'s chunk ``[lo, hi)`` at unit ``i``
        (its own rows ``h``; the rest of its part from ``H``; the other ways' from
        ``R[w]``, scaled by the epoch's ``scale[w]``) and the leaf whose gradient the
        cross-chunk rule reads."""
        a, b = self.part_ptr[w], self.part_ptr[w + 1]
        base = self.R[w][i].clone()
        base[a:b] = self.H[i][a:b]
        full = base.requires_grad_(grad_fix)
        src = full * scale[w][:, None]
        return torch.cat([src[:lo], h, src[hi:]], dim=0), full

    @torch.no_grad()
    def _refresh(self, ctx: RunCtx) -> None:
        """History refresh: layer by layer over every chunk (hybrid: every way's), with this
        epoch's dropout masks and no gradient; before a layer runs, every node's input row
        is written into its history, so the refreshed history holds the exact forward's
        input rows of every layer."""
        hs = {c: self.x[self.cp[c] : self.cp[c + 1]] for c in range(self.C)}
        carries: dict = {c: {} for c in range(self.C)}
        for i, u in enumerate(self.model.units):
            if i in self.H:
                for c in range(self.C):
                    self.H[i][self.cp[c] : self.cp[c + 1]] = hs[c]
            for c in range(self.C):
                if not u.aggregates:
                    hs[c], carries[c] = u(hs[c], carries[c], ctx, block=self.blocks[c])
                else:
                    src = self.x if i == 0 else self.H[i]
                    hs[c], carries[c] = u(hs[c], carries[c], ctx, block=self.blocks[c], h_src=src)

    def epoch(self, epoch: int, step: bool = True) -> float:
        """One epoch; returns the training loss (sum over chunks).

        With ``ways`` D > 1 (hybrid), the ``D·C`` chunks are ``C`` per way and slot ``i``
        of the epoch processes local chunk ``order[i]`` of every way together, unit by unit:
        every way writes its rows into the history first, then every way aggregates (so rows
        of other ways' slot-``i`` chunks are fresh). In backward, the cross-chunk gradients
        a slot produces become visible from the next slot on.
        """
        o = self.opts
        D = self.ways
        C = self.C // D
        cp, blocks = self.cp, self.blocks
        grad_fix, exact = o.grad_fix, bool(o.exact_every) and epoch % o.exact_every == 0
        if o.drift_bound:
            exact = self.next_exact
        if o.exact_from and epoch >= o.exact_from:  # rule 10: the cool-down
            exact = True
        moved = torch.zeros(2, dtype=torch.float64)  # Σ‖new − old‖², Σ‖new‖² of the stale writes
        if exact:  # one chunk of every node: nothing read from the history, no cross-chunk gradient
            D, C, cp, blocks, grad_fix = 1, 1, [0, self.g.num_nodes], [self.whole], False
        order = chunk_order(C, epoch, self.seed, o.shuffle)
        self._restore()
        kept, scale = self._drawn(epoch) if self.sample is not None and not exact else (None, None)
        self.model.train()
        self.opt.zero_grad(set_to_none=False)
        ctx = RunCtx(training=True, epoch=epoch, seed=self.seed)
        if epoch < o.refresh_epochs and not exact:
            self._refresh(ctx)
        saved = {}
        for k in order:
            slot = [w * C + k for w in range(D)]
            hs = {c: self.x[cp[c] : cp[c + 1]] for c in slot}
            carries: dict = {c: {} for c in slot}
            inputs: dict = {c: [] for c in slot}
            leaves: dict = {c: [] for c in slot}
            for i, u in enumerate(self.model.units):
                if u.aggregates and i > 0:
                    for c in slot:
                        new, old = hs[c].detach(), self.H[i][cp[c] : cp[c + 1]]
                        moved += torch.stack([(new - old).square().sum(dtype=torch.float64),
                                              new.square().sum(dtype=torch.float64)])
                        self.H[i][cp[c] : cp[c + 1]] = new
                    self._deliver(i, slot, cp, C, kept)
                for c in slot:
                    lo, hi = cp[c], cp[c + 1]
                    h = hs[c]
                    if not u.aggregates:
                        hs[c], carries[c] = u(h, carries[c], ctx, block=blocks[c])
                        continue
                    if i == 0:
                        h_src = self.x
                    elif kept is not None:  # sampled: own part from H, the rest as this way got it
                        h_src, full = self._sampled_source(i, c // C, h, lo, hi, scale, grad_fix)
                        leaves[c].append((i, full))
                        inputs[c].append((i, h))
                    else:
                        full = self.H[i].clone().requires_grad_(grad_fix)
                        h_src = torch.cat([full[:lo], h, full[hi:]], dim=0)
                        leaves[c].append((i, full))
                        inputs[c].append((i, h))
                    hs[c], carries[c] = u(h, carries[c], ctx, block=blocks[c], h_src=h_src)
            for c in slot:
                lo, hi = cp[c], cp[c + 1]
                loss = loss_fn(hs[c], self.y[lo:hi], self.train[lo:hi], normalizer=self.num_train)
                saved[c] = (loss, inputs[c], leaves[c])
        total = 0.0
        for k in reversed(order):
            slot = [w * C + k for w in range(D)]
            produced = []
            for c in slot:
                lo, hi = cp[c], cp[c + 1]
                loss, inputs, leaves = saved.pop(c)
                ts, gs = [loss], [torch.ones_like(loss)]
                if grad_fix:
                    for i, h in inputs:
                        ts.append(h)
                        gs.append(self.G[i][lo:hi] * o.grad_scale)
                torch.autograd.backward(ts, gs)
                if grad_fix:
                    for i, full in leaves:
                        g = full.grad.clone()
                        g[lo:hi] = 0.0  # in-chunk rows already flowed through autograd
                        produced.append((i, g))
                total += float(loss.detach())
            for i, g in produced:  # visible from the next slot on
                self.G[i] += g
        for g in self.G.values():
            g.zero_()
        if o.snapshot_period and (epoch + 1) % o.snapshot_period == 0:
            self.snap = {i: h.clone() for i, h in self.H.items()}
            self.rsnap = {w: {i: r.clone() for i, r in units.items()} for w, units in self.R.items()}
        if o.drift_bound:
            self.drift = None if exact else (float(moved[0] / moved[1]) ** 0.5 if moved[1] > 0 else 0.0)
            self.next_exact = not exact and self.drift > o.drift_bound
        if step:
            self.opt.step()
        return total


class BoundarySampleReference:
    """Graph parallelism with boundary sampling (``--boundary-sample``) in one process: the
    oracle of :class:`gnnpipe.parallel.graph.GraphParallelExecutor` with ``boundary_sample``.

    Written without halos, exchangers or send lists: every part's rows aggregate over a
    block whose sources are all N nodes, from the whole ``[N, d]`` input scaled per reading
    part: its own rows by 1, the boundary rows the epoch's draw keeps
    (:func:`gnnpipe.partition.sampling.sampled_positions` over the sorted ids of part ``q``
    that part ``p`` reads) by ``n / k``, every other row by 0. Autograd then gives the
    gradients the exchanges send back. Unit 0's sources are the input features, whole.

    Args:
        model: a :class:`gnnpipe.models.GNN` (gcn, sage or gcnii).
        graph: the graph in relabelled ids (parts are contiguous ranges).
        part_ptr: part boundaries.
        sample: the fraction P.
        orig: original id of each relabelled id (``plan.perm``): dropout keys.
    """

    def __init__(self, model, graph, part_ptr, sample: float, seed: int, lr: float = 0.01,
                 weight_decay: float = 0.0, orig: np.ndarray | None = None):
        self.model, self.g, self.sample, self.seed = model, graph, float(sample), int(seed)
        self.pp = [int(c) for c in part_ptr]
        P, n = len(self.pp) - 1, graph.num_nodes
        deg = graph.degrees().astype(np.float32)
        orig = np.arange(n) if orig is None else orig
        indptr, indices = np.asarray(graph.indptr), np.asarray(graph.indices)
        self.blocks = [_rows_block(indptr, indices, deg, self.pp[p], self.pp[p + 1], orig) for p in range(P)]
        # reads[p][q]: sorted ids of part q that part p's rows aggregate from (q != p)
        self.reads = []
        for p in range(P):
            nb = indices[indptr[self.pp[p]] : indptr[self.pp[p + 1]]]
            self.reads.append([np.unique(nb[(nb >= self.pp[q]) & (nb < self.pp[q + 1])]) if q != p
                               else np.zeros(0, np.int64) for q in range(P)])
        self.x = _dense(graph.features)
        self.y = torch.as_tensor(np.asarray(graph.labels))
        self.train = torch.as_tensor(np.asarray(graph.train_mask, dtype=bool))
        self.num_train = max(int(self.train.sum()), 1)
        self.opt = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)

    def scales(self, epoch: int) -> list:
        """Per reading part ``p``: float32 [N], the factor of every node's row in its sources."""
        out = []
        for p, reads in enumerate(self.reads):
            s = torch.zeros(self.g.num_nodes)
            s[self.pp[p] : self.pp[p + 1]] = 1.0
            for q, ids in enumerate(reads):
                if q != p and ids.size:
                    pos = sampled_positions(self.seed, epoch, q, p, ids.size, self.sample)
                    s[torch.from_numpy(ids[pos])] = sample_scale(ids.size, self.sample)
            out.append(s)
        return out

    def epoch(self, epoch: int) -> float:
        """One full-batch step; returns the training loss."""
        self.model.train()
        self.opt.zero_grad(set_to_none=False)
        ctx = RunCtx(training=True, epoch=epoch, seed=self.seed)
        scales = self.scales(epoch)
        P = len(self.blocks)
        hs = [self.x[self.pp[p] : self.pp[p + 1]] for p in range(P)]
        carries: list = [{} for _ in range(P)]
        for i, u in enumerate(self.model.units):
            full = self.x if i == 0 else torch.cat(hs, dim=0)
            for p in range(P):
                if not u.aggregates:
                    hs[p], carries[p] = u(hs[p], carries[p], ctx, block=self.blocks[p])
                    continue
                src = full if i == 0 else full * scales[p][:, None]
                hs[p], carries[p] = u(hs[p], carries[p], ctx, block=self.blocks[p], h_src=src)
        loss = loss_fn(torch.cat(hs, dim=0), self.y, self.train, normalizer=self.num_train)
        loss.backward()
        self.opt.step()
        return float(loss.detach())
