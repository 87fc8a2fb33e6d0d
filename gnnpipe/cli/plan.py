"""``gnnpipe-plan``: rank every parallel configuration by predicted epoch time.

Usage::

    gnnpipe-plan DATASET --world N --layers L --hidden d --model M [--profile P]
        [--heads H] [--history-dtype float32|bfloat16] [--chunk-factors 1,2,4,8] [--json] [--top K] [--root DIR]
    gnnpipe-plan --stats N,E,F[,CLASSES[,NNZ]] --world N ...     (a graph that is not here)
    gnnpipe-plan reddit --world 8 ...                  (published statistics, see PUBLISHED)
    gnnpipe-plan calibrate [--out FILE] [--thorough]   (measure this machine, write ./profiles/cpu-this-machine.toml)
    gnnpipe-plan validate RESULTS [--profile P]        (re-predict a stored `gnnpipe-bench epoch`)

``DATASET`` is a prepared graph directory or name (Σ M_p then comes from METIS plans of the
real graph), or one of the names in :data:`PUBLISHED` (Σ M_p estimated from a synthetic
graph of the same shape, see :func:`gnnpipe.plan.estimate_part_info`). ``--profile`` is a
profile name, looked up in the user profile directory (``$GNNPIPE_PROFILE_DIR``, default
``./profiles/``, where ``calibrate`` writes) and then among the shipped ones
(``gnnpipe/profiles/*.toml``), or a TOML path; the default is ``cpu-this-machine``. Configurations that do not fit a device's memory are listed after the
others with the reason. The first fitting one is printed as a ``gnnpipe-train`` command.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Sequence

from gnnpipe._base import GnnpipeError
from gnnpipe.cli import ArgumentParser, run_cli

PROG = "gnnpipe-plan"

#: Published statistics of the paper's graphs that are not prepared here:
#: (nodes, directed edges, features, classes).
#: Reddit and Flickr: DGL's RedditDataset / FlickrDataset and PyG's Reddit docs
#: (232,965 / 114,615,892 / 602 / 41; 89,250 / 899,756 / 500 / 7).
#: ogbn-arxiv: OGB lists 169,343 nodes and 1,166,243 directed citations, 128 features,
#: 40 classes; symmetrized (as every graph here) that is 2,332,486 directed edges.
PUBLISHED = {
    "reddit": (232965, 114615892, 602, 41),
    "flickr": (89250, 899756, 500, 7),
    "ogbn-arxiv": (169343, 2332486, 128, 40),
}


#: Default size of the synthetic sample that stands in for a graph that is not here. METIS
#: runs once per plan on it (about 30 plans at 64 ranks) and its time grows with the edges:
#: Reddit's degree (492) at 20,000 nodes is 9.8M edges and took 22 minutes at 64 ranks, at
#: 2,000 nodes (1M edges) 6 s, with the same ranking. Denser graphs get fewer nodes.
ESTIMATE_EDGE_BUDGET = 1_000_000
ESTIMATE_MAX_NODES = 20000
#: The sample keeps at least this many nodes, and 8 per rank (parts x chunks must fit in it).
ESTIMATE_MIN_NODES = 1000
#: Dataset names that ``gnnpipe-train`` generates (``--synth-*``) instead of loading.
SYNTHETIC = ("sbm", "rmat")


def auto_estimate_nodes(num_nodes: int, num_edges: int, world: int) -> int:
    """Nodes of the synthetic sample for a graph of ``num_nodes`` / ``num_edges`` (directed)
    planned at ``world`` ranks: at most :data:`ESTIMATE_EDGE_BUDGET` edges at the graph's
    average degree, between ``max(ESTIMATE_MIN_NODES, 8·world)`` and :data:`ESTIMATE_MAX_NODES`
    (never more than the graph).

    Returns:
        the sample's node count.
    """
    deg = max(num_edges / max(num_nodes, 1), 1.0)
    n = min(ESTIMATE_MAX_NODES, int(ESTIMATE_EDGE_BUDGET / deg))
    return int(min(num_nodes, max(n, ESTIMATE_MIN_NODES, 8 * world)))


def _parser() -> argparse.ArgumentParser:
    ap = ArgumentParser(prog=PROG, description="Rank graph / pipeline / hybrid configurations by predicted epoch time.")
    ap.add_argument("dataset", nargs="?", help="prepared dataset name or directory, or one of: " + ", ".join(PUBLISHED))
    ap.add_argument("--stats", help="N,E,F[,CLASSES[,NNZ]] for a graph that is not here (E directed)")
    ap.add_argument("--world", type=int, required=True, help="number of ranks (devices)")
    ap.add_argument("--layers", type=int, default=32, help="graph layers L (default 32)")
    ap.add_argument("--hidden", type=int, default=100, help="hidden width d (default 100)")
    ap.add_argument("--model", default="gcn", help="gcn, sage, gat, gcnii or resgcn+ (default gcn)")
    ap.add_argument("--heads", type=int, default=1, help="gat heads (default 1)")
    ap.add_argument("--history-dtype", choices=("float32", "bfloat16"), default="float32",
                    help="pipeline/hybrid history buffers as gnnpipe-train would hold them (default float32)")
    ap.add_argument("--profile", default="cpu-this-machine", help="profile name or TOML path (default cpu-this-machine)")
    ap.add_argument("--chunk-factors", default="1,2,4,8", help="chunks per way = factor x stages (default 1,2,4,8)")
    ap.add_argument("--top", type=int, default=0, help="print only the K best (0: all)")
    ap.add_argument("--json", action="store_true", help="machine-readable output")
    ap.add_argument("--root", type=Path, help="data root for dataset names")
    ap.add_argument("--estimate-nodes", type=int, default=None,
                    help="nodes of the synthetic sample for Σ M_p estimates of a graph that is not here (default: "
                         f"as many as keep it under {ESTIMATE_EDGE_BUDGET:,} edges, at most {ESTIMATE_MAX_NODES:,}; "
                         "larger samples take longer, minutes at 20,000 nodes of Reddit's degree)")
    ap.add_argument("--seed", type=int, default=0, help="METIS / generator seed")
    ap.add_argument("--debug", action="store_true", help="tracebacks and debug logging")
    return ap


def _ints(flag: str, text: str, lo: int, hi: int) -> list[int]:
    try:
        vals = [int(x) for x in text.split(",")]
    except ValueError:
        raise GnnpipeError(f"{flag}: expected comma-separated integers, got {text!r}") from None
    if not lo <= len(vals) <= hi:
        raise GnnpipeError(f"{flag}: expected {lo} to {hi} integers, got {len(vals)} in {text!r}")
    return vals


def synth_fields(stats) -> dict:
    """``gnnpipe-train`` ``synth_*`` fields that generate a graph of these statistics
    (``--dataset sbm|rmat``): nodes, average degree (directed edges per node), features,
    classes."""
    return {"synth_nodes": stats.num_nodes, "synth_degree": round(stats.num_edges / stats.num_nodes, 4),
            "synth_features": stats.num_features, "synth_classes": stats.num_classes}


def _stats(args, spec=None, factors: Sequence[int] = (1, 2, 4, 8)):
    """(:class:`GraphStats`, the dataset name for the command, ``synth_*`` fields or None)."""
    from gnnpipe.plan import GraphStats, chunk_counts, feasible_topologies, graph_stats_from_graph

    if args.stats:
        v = _ints("--stats", args.stats, 3, 5)
        if any(x < 0 for x in v) or v[0] < 1 or v[2] < 1:
            raise GnnpipeError(f"--stats: expected positive N and F and non-negative E, got {args.stats!r}")
        st = GraphStats(v[0], v[1], v[2], v[3] if len(v) > 3 else 2, v[4] if len(v) > 4 else None,
                        name=args.dataset or "graph")
        # A built-in synthetic name trains the graph gnnpipe-train generates: the command
        # must carry the planned sizes, not leave the 20,000-node default.
        synth = synth_fields(st) if (args.dataset or "").lower() in SYNTHETIC else None
        return st, args.dataset or "DATASET", synth
    if not args.dataset:
        raise GnnpipeError("give a DATASET (prepared name or directory, or one of "
                           f"{', '.join(PUBLISHED)}) or --stats N,E,F")
    from gnnpipe.data.catalog import resolve_dataset
    from gnnpipe.data.graph import Graph

    try:
        gdir = resolve_dataset(args.dataset, args.root)
    except GnnpipeError:
        if args.dataset.lower() in PUBLISHED:
            n, e, f, k = PUBLISHED[args.dataset.lower()]
            return GraphStats(n, e, f, k, name=args.dataset.lower()), args.dataset.lower(), None
        if args.dataset.lower() in SYNTHETIC:
            raise GnnpipeError(f"{args.dataset}: a generated graph; give its size with --stats N,E,F[,CLASSES]") from None
        raise
    graph = Graph.load(gdir)
    ways = {args.world} | {d for d in range(2, args.world // 2 + 1) if args.world % d == 0}
    ways = {w for w in ways if 1 < w <= graph.num_nodes}
    # Per-chunk facts (out-of-chunk neighbours, per-chunk halos) of every pipeline and
    # hybrid plan the planner will rank: the time model and the hybrid bytes need them.
    chunks = chunk_counts(feasible_topologies(args.world, spec, graph.num_nodes, factors)) if spec else {}
    print(f"{PROG}: partitioning {graph.name} with METIS into {sorted(ways)} parts"
          + (f" and chunks {chunks}" if chunks else ""), file=sys.stderr)
    return graph_stats_from_graph(graph, sorted(ways), seed=args.seed, chunks=chunks), args.dataset, None


def _gb(b: float) -> str:
    return f"{b / 1e9:.2f}"


def format_table(preds, stats, spec, profile, dataset: str, top: int = 0, synth: dict | None = None) -> str:
    """The human table: one line per configuration, the rejected ones with their reason,
    and the ``gnnpipe-train`` command of the best that fits (with ``synth`` flags for a
    generated graph and the profile's device)."""
    from gnnpipe.plan import train_command

    lines = [
        f"graph    {stats.name}: N={stats.num_nodes:,} E={stats.num_edges:,} F={stats.num_features:,}"
        + (f" (sparse, nnz {stats.sparse_nnz:,})" if stats.sparse_nnz is not None else ""),
        f"model    {spec.model} L={spec.layers} d={spec.hidden}" + (f" heads={spec.heads}" if spec.model == "gat" else ""),
        f"profile  {profile.name}: {profile.description}",
        "",
        f"{'#':>3} {'configuration':<26} {'epoch ms':>9} {'compute':>8} {'comm':>8} {'bubble':>8} "
        f"{'GB/epoch':>9} {'peak GiB':>9}  fits",
    ]
    fitting = [p for p in preds if p.fits]
    shown = preds[:top] if top else preds
    for i, p in enumerate(shown, 1):
        lines.append(
            f"{i:>3} {p.topology.label():<26} {p.epoch_s * 1e3:>9.1f} {p.compute_s * 1e3:>8.1f} {p.comm_s * 1e3:>8.1f} "
            f"{p.bubble_s * 1e3:>8.1f} {_gb(p.bytes['total']):>9} {p.peak_mem_bytes / 2**30:>9.2f}  "
            + ("yes" if p.fits else f"no: {p.reason}")
        )
    notes = sorted({n for p in shown for n in p.notes})
    if notes:
        lines += [""] + [f"note: {n}" for n in notes]
    lines.append("")
    if fitting:
        lines.append("recommended:")
        lines.append("  " + train_command(fitting[0], dataset, spec, device=profile.device, synth=synth))
    else:
        lines.append("no configuration fits the profile's memory; use more devices or a smaller model")
    return "\n".join(lines)


#: Deepest model the planner is asked about (the paper's models have 16-128 layers).
MAX_LAYERS = 65536


def _check_out_file(out: Path) -> None:
    """An output file path whose folder exists or can be made, and which is not a folder."""
    if out.is_dir():
        raise GnnpipeError(f"--out {out}: is a directory; give a file name")
    for anc in out.parents:
        if anc.exists():
            if not anc.is_dir():
                raise GnnpipeError(f"--out {out}: {anc} is a file, not a folder")
            break


def _main(argv: Sequence[str] | None = None) -> int:
    argv = list(argv or [])
    if argv and argv[0] == "calibrate":
        return calibrate_main(argv[1:])
    if argv and argv[0] == "validate":
        return validate_main(argv[1:])
    args = _parser().parse_args(argv)
    from gnnpipe.plan import ModelSpec, load_profile, rank_configs, train_command

    if args.world < 1:
        raise GnnpipeError(f"--world: expected at least 1 rank, got {args.world}")
    # A bound at the edge: the planner's loops grow with the depth.
    if not 1 <= args.layers <= MAX_LAYERS:
        raise GnnpipeError(f"--layers: expected an integer in [1, {MAX_LAYERS}], got {args.layers}")
    if args.top < 0:
        raise GnnpipeError(f"--top: expected >= 0, got {args.top}")
    factors = _ints("--chunk-factors", args.chunk_factors, 1, 16)
    if min(factors) < 1:
        raise GnnpipeError(f"--chunk-factors: expected positive factors, got {args.chunk_factors!r}")
    spec = ModelSpec(args.model, args.layers, args.hidden, args.heads,
                     history_bytes=2 if args.history_dtype == "bfloat16" else 4)
    try:
        profile = load_profile(args.profile)
    except UnicodeDecodeError:  # a binary file given as --profile
        raise GnnpipeError(f"--profile {args.profile}: not a text file (TOML must be UTF-8)") from None
    stats, dataset, synth = _stats(args, spec, factors)
    t0 = time.perf_counter()
    est_nodes = args.estimate_nodes
    if est_nodes is not None and est_nodes < 2:
        raise GnnpipeError(f"--estimate-nodes: expected at least 2, got {est_nodes}")
    estimated = not stats.parts and args.world > 1
    if est_nodes is None:
        est_nodes = auto_estimate_nodes(stats.num_nodes, stats.num_edges, args.world)
    if estimated:
        n_s = min(est_nodes, stats.num_nodes)
        print(f"{PROG}: no partition of {stats.name} here: Σ M_p and chunk facts are estimated from a {n_s:,}-node R-MAT "
              f"graph of the same average degree ({stats.num_edges / stats.num_nodes:.1f}), scaled by "
              f"{stats.num_nodes / n_s:.1f}" + ("" if args.estimate_nodes else "; --estimate-nodes N for a larger, "
                                                 "slower sample"), file=sys.stderr)

    def progress(line: str) -> None:
        print(f"{PROG}: [{time.perf_counter() - t0:5.1f} s] {line}", file=sys.stderr, flush=True)

    preds = rank_configs(stats, spec, args.world, profile, chunk_factors=factors,
                         estimate_nodes=est_nodes, seed=args.seed, progress=progress)
    if not preds:
        raise GnnpipeError(f"--world {args.world}: no feasible configuration for {stats.num_nodes} nodes")
    if args.json:
        fitting = [p for p in preds if p.fits]
        out = {
            "graph": {"name": stats.name, "num_nodes": stats.num_nodes, "num_edges": stats.num_edges,
                      "num_features": stats.num_features, "num_classes": stats.num_classes,
                      "sparse_nnz": stats.sparse_nnz},
            "model": {"model": spec.model, "layers": spec.layers, "hidden": spec.hidden, "heads": spec.heads},
            "profile": profile.name,
            "world": args.world,
            "predictions": [p.to_dict() for p in (preds[: args.top] if args.top else preds)],
            "recommended": (train_command(fitting[0], dataset, spec, device=profile.device, synth=synth)
                            if fitting else None),
            "estimate_nodes": min(est_nodes, stats.num_nodes) if estimated else None,
            "seconds": time.perf_counter() - t0,
        }
        print(json.dumps(out, indent=1, default=str))
    else:
        print(format_table(preds, stats, spec, profile, dataset, args.top, synth=synth))
    return 0


# ----------------------------------------------------------------------------- calibrate
def _p2p_rank(comm, sizes: Sequence[int], reps: int = 20) -> dict:
    """Ping-pong between ranks 0 and 1 (run by :func:`gnnpipe.testing.run_ranks`).

    Returns:
        on rank 0, ``{size_bytes: one-way seconds (median of reps)}``.
    """
    import statistics

    import torch

    out = {}
    for n in sizes:
        buf = torch.zeros(max(n // 4, 1), dtype=torch.float32)
        times = []
        for i in range(reps + 2):
            comm.barrier()
            t0 = time.perf_counter()
            if comm.rank == 0:
                comm.send(buf, 1, tag=1)
                comm.recv(buf, 1, tag=2)
            else:
                comm.recv(buf, 0, tag=1)
                comm.send(buf, 0, tag=2)
            if i >= 2:
                times.append((time.perf_counter() - t0) / 2.0)
        out[int(buf.nbytes)] = statistics.median(times)
    return out


def _timeit(fn, reps: int, best: bool = False, cpu: bool = True) -> float:
    """Median (or, with ``best``, the fastest) of ``reps`` timed calls after one warm-up.

    With ``cpu`` (the default) the clock is this thread's CPU time, not the wall clock:
    the single-threaded kernels measured here then do not count the time other processes
    on a shared machine hold the core (what is left is cache and memory-bandwidth sharing).
    """
    import statistics

    clock = time.thread_time if cpu else time.perf_counter
    fn()
    ts = []
    for _ in range(reps):
        t0 = clock()
        fn()
        ts.append(clock() - t0)
    return min(ts) if best else statistics.median(ts)


def measure(quick: bool = False, p2p: bool = True) -> dict:
    """Micro-benchmarks of this machine with one thread per process.

    Returns:
        dict with ``gemm_flops_s``, ``spmm_edge_width_s`` (and per width), ``mem_bytes_s``,
        ``unit_overhead_s``, ``p2p`` (bytes → one-way seconds) and the derived link
        bandwidth and latency.
    """
    import numpy as np
    import torch

    torch.set_num_threads(1)
    reps = 3 if quick else 7
    res: dict = {}
    n = 4096 if quick else 16384
    a = torch.randn(n, 256)
    w = torch.randn(256, 256)
    t = _timeit(lambda: a @ w, reps)
    res["gemm_flops_s"] = 2.0 * n * 256 * 256 / t
    # Random CSR, degree 40, 10,000 rows: the operand of a d-wide SpMM is 2.5-5 MB, like
    # Squirrel or a Physics partition (a 50,000-row one runs ~4x slower, out of cache).
    nn_ = 5000 if quick else 10000
    deg = 40
    rng = np.random.default_rng(0)
    cols = rng.integers(0, nn_, size=nn_ * deg)
    crow = np.arange(0, nn_ * deg + 1, deg)
    adj = torch.sparse_csr_tensor(torch.from_numpy(crow), torch.from_numpy(np.sort(cols.reshape(nn_, deg), axis=1).reshape(-1)),
                                  torch.ones(nn_ * deg), size=(nn_, nn_))
    per_w = {}
    for width in (16, 64, 128):
        x = torch.randn(nn_, width)
        t = _timeit(lambda: torch.sparse.mm(adj, x), reps)
        per_w[width] = nn_ * deg * width / t
    res["spmm_by_width"] = per_w
    res["spmm_edge_width_s"] = per_w[64]
    big = torch.randn((8 if quick else 32) * 2**20 // 4 * 4)
    dst = torch.empty_like(big)
    t = _timeit(lambda: dst.copy_(big), reps)
    res["mem_bytes_s"] = 2.0 * big.nbytes / t
    # Fixed cost of one unit pass: a GCN-like unit (dropout, linear, SpMM, ReLU) forward
    # and backward on 64 rows, where the arithmetic is negligible.
    from gnnpipe.models.ops import hashed_dropout  # noqa: F401  (import cost outside the timing)

    small = torch.sparse_csr_tensor(torch.arange(0, 65 * 4, 4)[:65], torch.randint(0, 64, (256,)), torch.ones(256), size=(64, 64))
    lin = torch.nn.Linear(32, 32)
    h = torch.randn(64, 32, requires_grad=True)

    def unit():
        z = torch.nn.functional.dropout(h, 0.5, True)
        y = torch.relu(torch.sparse.mm(small, lin(z)))
        y.sum().backward()

    t_unit = _timeit(unit, 50 if quick else 200)
    res["unit_overhead_s"] = t_unit / 2.0  # forward + backward = two passes
    if p2p:
        from gnnpipe.testing import run_ranks

        sizes = [8, 2**20, 16 * 2**20] if not quick else [8, 2**20]
        r = run_ranks("gnnpipe.cli.plan:_p2p_rank", 2, "torch", args={"sizes": sizes, "reps": 5 if quick else 20},
                      timeout_s=300)
        pp = {int(k): float(v) for k, v in r[0].items()}
        res["p2p"] = pp
        small_b, big_b = min(pp), max(pp)
        res["latency_s"] = pp[small_b]
        res["bw_bytes_s"] = (big_b - small_b) / max(pp[big_b] - pp[small_b], 1e-9)
    return res


#: Calibration graphs for the unit fit: (model, nodes, average degree, F, d). Random graphs,
#: none of them a benchmark case; sizes span the rows/edges/widths a rank sees here.
UNIT_FIT_CASES = (
    ("gcn", 300, 8, 32, 32), ("gcn", 3000, 40, 256, 64), ("gcn", 8000, 15, 64, 128),
    ("gcn", 2000, 120, 128, 96), ("gcnii", 300, 8, 32, 32), ("gcnii", 3000, 40, 256, 64),
    ("gcnii", 8000, 15, 64, 128), ("gcnii", 2000, 120, 128, 96), ("gcnii", 12000, 6, 32, 48),
)


def _random_csr(n: int, deg: int, seed: int):
    import numpy as np

    rng = np.random.default_rng(seed)
    src = rng.integers(0, n, size=n * deg // 2)
    dst = rng.integers(0, n, size=n * deg // 2)
    keep = src != dst
    a = np.concatenate([src[keep], dst[keep]])
    b = np.concatenate([dst[keep], src[keep]])
    key = np.unique(a.astype(np.int64) * n + b)
    rows, cols = key // n, key % n
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
    return indptr, cols.astype(np.int64)


def measure_dropout(quick: bool = False) -> float:
    """Hashed dropout (:func:`gnnpipe.models.ops.hashed_dropout`), forward + backward, on a
    [20000, 128] block of rows: values per second of this thread's CPU time (the
    counter-based hash per value costs several elementwise passes, so the model gives it
    its own rate: ``dropout_values_s``)."""
    import torch

    from gnnpipe.models import ops

    torch.set_num_threads(1)
    n, w = (5000, 128) if quick else (20000, 128)
    h = torch.randn(n, w, requires_grad=True)
    gid = torch.arange(n)
    g = torch.ones(n, w)
    ep = [0]

    def step():
        ep[0] += 1
        ops.hashed_dropout(h, gid, 0.5, 0, ep[0], 1).backward(g)

    return n * w / _timeit(step, 3 if quick else 7, best=True)


def measure_units(gemm_flops_s: float, spmm_edge_width_s: float, quick: bool = False,
                  dropout_values_s: float = 0.0) -> dict:
    """Fit the SpMM and elementwise rates and the per-pass overhead to real gnnpipe units.

    For each :data:`UNIT_FIT_CASES` graph, a 4-layer model of :mod:`gnnpipe.models` runs
    forward and backward over a square block (the graph-parallel executor's path), one
    process, one thread; the fastest of the repetitions is kept (the least disturbed by
    other processes). With the GEMM part of the cost model's own work counts
    (:func:`gnnpipe.plan.unit_works`) taken out at the GEMM rate measured directly, the
    rest is regressed (non-negative least squares, relative errors) on the SpMM
    edge·width, the elementwise bytes and the number of unit passes: the aggregation as
    the executors run it (normalisation, transposed CSR in backward) and what bare kernels
    miss (autograd, hashed dropout, Python per op). ``spmm_edge_width_s`` (the bare
    kernel's rate) is only the fallback should the fit leave SpMM free.

    Returns:
        ``{"spmm_edge_width_s", "mem_bytes_s", "unit_overhead_s", "fit": [(case, measured s,
        modelled s)]}``.
    """
    import numpy as np
    import torch
    from scipy.optimize import nnls

    from gnnpipe.models import ModelConfig, RunCtx, build_model
    from gnnpipe.models.block import Block
    from gnnpipe.plan import GraphStats, ModelSpec, dropout_elem_bytes, unit_works

    torch.set_num_threads(1)
    reps = 2 if quick else 4
    rows, ys, names, drop_values = [], [], [], []
    for i, (model, n, deg, F, d) in enumerate(UNIT_FIT_CASES):
        if quick:
            n = max(n // 4, 200)
        indptr, indices = _random_csr(n, deg, i)
        blk = Block.full(indptr, indices)
        K, L = 8, 4
        m = build_model(ModelConfig(model, F, K, L, d), 0)
        x = torch.randn(n, F)

        def step(ep=[0]):
            ep[0] += 1
            out = m(blk, x, RunCtx(training=True, epoch=ep[0], seed=0))
            out.sum().backward()

        t = _timeit(step, reps, best=True)
        st = GraphStats(n, int(indices.size), F, K)
        us = unit_works(st, ModelSpec(model, L, d))
        if dropout_values_s > 0:
            elem = sum(u.elem_bytes for u in us)
            drop_values.append(sum(u.drop_values for u in us))
        else:  # no dropout rate: dropout counts as elementwise passes, as the model does then
            elem = sum(u.elem_bytes + dropout_elem_bytes(u.drop_values) for u in us)
        rows.append([sum(u.gemm_flops for u in us), sum(u.spmm_ew for u in us), elem, 2.0 * len(us)])
        ys.append(t)
        names.append(f"{model} n={n} deg={deg} F={F} d={d}")
    X = np.asarray(rows)
    y = np.asarray(ys)
    # the GEMMs at the measured GEMM rate and the dropouts at the measured dropout rate
    drops = np.asarray(drop_values) / dropout_values_s if dropout_values_s > 0 else 0.0
    kernels = X[:, 0] / gemm_flops_s + drops
    rest = np.maximum(y - kernels, 0.0)
    coef, _ = nnls(X[:, 1:] / y[:, None], rest / y)  # relative residuals
    modelled = kernels + X[:, 1:] @ coef
    inv = lambda c, cap: 1.0 / c if c > 0 else cap  # noqa: E731  (a term the fit found free)
    return {"spmm_edge_width_s": inv(coef[0], spmm_edge_width_s), "mem_bytes_s": inv(coef[1], 1e12),
            "unit_overhead_s": float(coef[2]), "fit": list(zip(names, ys, modelled.tolist()))}


def measure_chunk_path(quick: bool = False) -> dict:
    """The pipeline's per-chunk history path, as :class:`gnnpipe.parallel.stage.PipelineStage`
    runs it per aggregating unit: write the chunk's rows into the history, gather the
    out-of-chunk rows (``index_select``), concatenate, and in backward ``index_add_`` their
    gradients. Fits ``time = chunk_overhead_s + bytes / gather_bytes_s`` over sizes, with
    bytes = 4·d·(2·rows + 3·neighbour rows).
    """
    import numpy as np
    import torch

    torch.set_num_threads(1)
    N, d = 20000, 64
    hist = torch.zeros(N, d)
    gacc = torch.zeros(N, d)
    xs, ys = [], []
    for rows, nbrs in ((16, 32), (500, 2000), (2000, 8000), (5000, 15000)):
        h = torch.randn(rows, d, requires_grad=True)
        ids = torch.from_numpy(np.sort(np.random.default_rng(rows).choice(N, nbrs, replace=False)))

        def path():
            hist[0:rows] = h.detach()
            nbr = hist.index_select(0, ids).requires_grad_(True)
            src = torch.cat([h, nbr], dim=0)
            src.sum().backward()
            gacc.index_add_(0, ids, nbr.grad)

        ys.append(_timeit(path, 5 if quick else 15, best=True))
        xs.append(4.0 * d * (2 * rows + 3 * nbrs))
    slope, icpt = np.polyfit(xs, ys, 1)
    return {"gather_bytes_s": 1.0 / max(slope, 1e-15), "chunk_overhead_s": max(float(icpt), 0.0)}


def _contention_worker(index: int, phases: Sequence[int], barriers: dict, done, reps: int, rounds: int, q) -> None:
    """One process of :func:`measure_contention`: for every round and every phase ``k`` of
    ``phases``, the first ``k`` workers time the same GCNII step together (after a barrier of
    ``k``) and report their median; every worker then meets at ``done`` so the next phase
    starts with exactly ``k`` busy processes (the others block, using no CPU)."""
    import statistics

    import torch

    torch.set_num_threads(1)
    from gnnpipe.models import ModelConfig, RunCtx, build_model
    from gnnpipe.models.block import Block

    indptr, indices = _random_csr(4000, 20, 7)
    blk = Block.full(indptr, indices)
    m = build_model(ModelConfig("gcnii", 64, 8, 4, 64), 0)
    x = torch.randn(4000, 64)

    def step():
        m(blk, x, RunCtx(training=True, epoch=0, seed=0)).sum().backward()

    step()
    done.wait()  # every worker imported and warmed up: the 1-process phase runs alone
    for r in range(rounds):
        for k in phases:
            if index < k:
                barriers[k].wait()
                ts = []
                for _ in range(reps):
                    t0 = time.thread_time()
                    step()
                    ts.append(time.thread_time() - t0)
                q.put((r, k, statistics.median(ts)))
            done.wait()


_BASE_PROBE = """
import resource, sys
from mpi4py import MPI  # noqa: F401  (an MPI rank has it loaded)
from gnnpipe.comm import SingleProcessCommunicator
from gnnpipe.config import TrainConfig
from gnnpipe.train import train
train(TrainConfig(synth_nodes=400, synth_features=8, epochs=2, eval_every=1, layers=4, hidden=16,
                  mode="graph", model="gcn", progress=False), SingleProcessCommunicator(), out=sys.argv[1])
# VmHWM, not ru_maxrss: Linux carries ru_maxrss across fork + exec, so a probe started by
# a large parent (calibrate itself, ~0.6 GB by then) would report the parent's size.
hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")]
print(int(hwm[0].split()[1]) * 1024 if hwm else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
"""


def measure_base_mem() -> float:
    """Peak RSS of a rank that trains a 400-node graph: the interpreter, torch, PyG and
    mpi4py loaded, allocator and thread pools warmed — what every rank holds before any
    graph-sized data (the profile's ``base_mem_bytes``). Runs in a fresh process."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run([sys.executable, "-c", _BASE_PROBE, str(Path(tmp) / "run")], capture_output=True,
                             text=True, timeout=300)
    if out.returncode != 0:
        raise GnnpipeError(f"calibrate: the base-memory probe failed: {out.stderr.strip()[-500:]}")
    return float(out.stdout.split()[-1])


def measure_contention(cores: int, quick: bool = False) -> dict:
    """Slow-down of real unit work (a GCNII model's forward + backward, one thread per
    process) when ``cores`` processes run it at once (every core busy: shared memory
    bandwidth and caches) and when ``2·cores`` do (two per core: context switches, cache
    refills), against one process alone.

    Each process's CPU time per step is measured (median), not the wall clock: the fair
    share ``ranks / cores`` of time-sharing is the model's structure
    (:meth:`gnnpipe.plan.HardwareProfile.slowdown`), what is measured here is how much more
    CPU the same work takes, which other processes on a shared machine disturb less than
    wall-clock ratios.

    Returns:
        ``{"alone_s", "shared_slowdown": cpu(cores)/cpu(1), "oversub_slowdown":
        cpu(2·cores)/cpu(cores)}`` (each at least 1; medians of 3 interleaved rounds).
    """
    import multiprocessing as mp
    import statistics

    ctx = mp.get_context("spawn")
    reps = 6 if quick else 15
    # One round's ratios move by 10-30 % between idle-machine runs (turbo, the other
    # core's housekeeping): the thorough mode keeps the median of 3 interleaved rounds.
    n_rounds = 1 if quick else 3
    # The same 2·cores processes serve every phase: spawning a fresh set per phase paid the
    # interpreter + torch import (seconds per process) three times per round.
    phases = (1, cores, 2 * cores)
    barriers = {k: ctx.Barrier(k) for k in phases}
    done, q = ctx.Barrier(2 * cores), ctx.Queue()
    procs = [ctx.Process(target=_contention_worker, args=(i, phases, barriers, done, reps, n_rounds, q))
             for i in range(2 * cores)]
    for pr in procs:
        pr.start()
    try:
        got: dict[tuple[int, int], list[float]] = {}
        for _ in range(n_rounds * sum(phases)):
            r, k, v = q.get(timeout=600)
            got.setdefault((r, k), []).append(v)
    finally:
        for pr in procs:
            pr.join(timeout=30)
            if pr.is_alive():
                pr.terminate()
    rounds = []
    for r in range(n_rounds):
        t1, tc, t2 = (max(got[(r, k)]) for k in phases)
        rounds.append((t1, tc, t2, tc / t1, t2 / tc))
    t1, tc, t2 = (statistics.median(r[i] for r in rounds) for i in range(3))
    return {"alone_s": t1, "shared_slowdown": max(1.0, statistics.median(r[3] for r in rounds)),
            "oversub_slowdown": max(1.0, statistics.median(r[4] for r in rounds)), "cores_s": tc, "oversub_s": t2}


def _coll_rank(comm, work_s: float, reps: int, rows: int) -> dict:
    """Blocking all-to-alls between bursts of compute (run by ``run_ranks``): wall time per
    iteration, and the same compute alone, on every rank."""
    import statistics

    import torch

    torch.set_num_threads(1)
    a = torch.randn(256, 256)
    for _ in range(5):
        a @ a
    t0 = time.thread_time()
    for _ in range(20):
        a @ a
    one = (time.thread_time() - t0) / 20
    n_mm = max(1, int(work_s / max(one, 1e-6)))

    def work():
        for _ in range(n_mm):
            a @ a

    peers = comm.world_size
    send = [torch.zeros(rows, 32) for _ in range(peers)]
    recv = [torch.zeros(rows, 32) for _ in range(peers)]
    comm.barrier()
    alone = []
    for _ in range(reps):
        t0 = time.perf_counter()
        work()
        alone.append(time.perf_counter() - t0)
    comm.barrier()
    t0 = time.perf_counter()
    for _ in range(reps):
        work()
        comm.all_to_all(send, recv, category="control")
    total = time.perf_counter() - t0
    comm.barrier()
    colls = []
    for _ in range(reps):
        t0 = time.perf_counter()
        comm.all_to_all(send, recv, category="control")
        colls.append(time.perf_counter() - t0)
    # The fastest all-to-all: its software and loopback cost without a peer descheduled by
    # some other process (on an idle machine the median is close to it).
    return {"iter_s": total / reps, "work_alone_s": statistics.median(alone), "coll_only_s": min(colls)}


def measure_collectives(cores: int, quick: bool = False) -> dict:
    """Cost of a blocking collective with ``cores`` ranks (one per core) and with
    ``2·cores`` ranks (two per core, every rank computing between collectives).

    ``coll_overhead_s``: a small all-to-all among ``cores`` ranks (its whole cost: software
    and loopback latency). ``oversub_wait_s``: with twice as many ranks as cores, each
    computing a 10 ms burst between all-to-alls, the wall time per iteration minus the fair
    share of the bursts (2 × the burst measured with one rank per core) minus
    ``coll_overhead_s``: the wait for peers that the scheduler has descheduled. Each is the
    smallest over ``trials`` launches (other processes on the machine only add to it).
    """
    from gnnpipe.testing import run_ranks

    reps = 10 if quick else 30
    trials = 1 if quick else 3
    args = {"work_s": 0.010, "reps": reps, "rows": 64}
    colls, alones, its, coll2s = [], [], [], []
    for _ in range(trials):
        r1 = run_ranks("gnnpipe.cli.plan:_coll_rank", max(cores, 2), "torch", args=args, timeout_s=300)
        r2 = run_ranks("gnnpipe.cli.plan:_coll_rank", 2 * max(cores, 2), "torch", args=args, timeout_s=300)
        colls.append(max(x["coll_only_s"] for x in r1))
        alones.append(max(x["work_alone_s"] for x in r1))
        its.append(max(x["iter_s"] for x in r2))
        coll2s.append(max(x["coll_only_s"] for x in r2))
    coll, alone1, it2 = min(colls), min(alones), min(its)
    wait = max(0.0, it2 - 2.0 * alone1 - coll)
    return {"coll_overhead_s": coll, "oversub_wait_s": wait, "oversub_coll_s": min(coll2s),
            "oversub_iter_s": it2, "work_alone_s": alone1}


def calibrate_main(argv: Sequence[str] | None = None) -> int:
    """``gnnpipe-plan calibrate``: measure this machine and write a profile TOML."""
    import datetime
    import os

    import psutil

    from gnnpipe.plan import PROFILE_DIR_ENV as PROFILE_DIR_ENV_NAME
    from gnnpipe.plan import HardwareProfile, profile_toml, profiles_dir, user_profiles_dir

    ap = ArgumentParser(prog=f"{PROG} calibrate", description=(
        "Measure this machine; write a hardware profile into the user profile directory "
        f"(${PROFILE_DIR_ENV_NAME}, default ./profiles/), where the planner finds it before the shipped ones."))
    ap.add_argument("--out", type=Path, default=None,
                    help=f"profile file (default <${PROFILE_DIR_ENV_NAME} or ./profiles>/cpu-this-machine.toml; "
                         "never the shipped gnnpipe/profiles/)")
    ap.add_argument("--thorough", action="store_true",
                    help="larger problems, more repetitions and 3 contention rounds (several minutes; the default "
                         "takes under a minute on an idle machine)")
    ap.add_argument("--quick", action="store_true", help=argparse.SUPPRESS)  # the old name of the default
    ap.add_argument("--no-p2p", action="store_true", help="skip the 2-process Gloo measurement")
    ap.add_argument("--debug", action="store_true")
    args = ap.parse_args(argv)
    quick = not args.thorough
    out = args.out or user_profiles_dir() / "cpu-this-machine.toml"
    # The shipped profiles are tracked, hand-merged files: a measurement never rewrites one.
    if out.resolve().parent == profiles_dir().resolve():
        raise GnnpipeError(f"--out {out}: that is a shipped profile; write to {user_profiles_dir()}/ "
                           f"(or set ${PROFILE_DIR_ENV_NAME}) and pass --profile NAME or the path")
    _check_out_file(out)  # before minutes of measuring, not after
    t_start = time.perf_counter()
    cores = os.cpu_count() or 1
    load0 = os.getloadavg()[0]
    print(f"{PROG}: measuring GEMM, SpMM, copy bandwidth"
          + ("" if args.no_p2p else ", Gloo point-to-point and collectives") + " with 1 thread per process", file=sys.stderr)
    m = measure(quick=quick, p2p=not args.no_p2p)
    print(f"{PROG}: fitting elementwise rate and per-pass overhead to real units", file=sys.stderr)
    drop_s = measure_dropout(quick=quick)
    mu = measure_units(m["gemm_flops_s"], m["spmm_edge_width_s"], quick=quick, dropout_values_s=drop_s)
    print(f"{PROG}: the pipeline's history path; {cores} and {2 * cores} processes sharing the cores", file=sys.stderr)
    mc = measure_chunk_path(quick=quick)
    mk = measure_contention(cores, quick=quick)
    mcoll = measure_collectives(cores, quick=quick) if not args.no_p2p else {}
    total = psutil.virtual_memory().total
    base_mem = measure_base_mem()
    prof = HardwareProfile(
        name="cpu-this-machine",
        gemm_flops_s=m["gemm_flops_s"], spmm_edge_width_s=mu["spmm_edge_width_s"], mem_bytes_s=mu["mem_bytes_s"],
        unit_overhead_s=mu["unit_overhead_s"],
        intra_bw_bytes_s=m.get("bw_bytes_s", 1e9), intra_latency_s=m.get("latency_s", 5e-5),
        inter_bw_bytes_s=m.get("bw_bytes_s", 1e9), inter_latency_s=m.get("latency_s", 5e-5),
        # Every rank of a run here is on this one host: the planner's worlds (up to 64
        # ranks) all share its cores.
        devices_per_node=64, mem_bytes=total / cores, base_mem_bytes=base_mem,
        cores_per_host=float(cores), gather_bytes_s=mc["gather_bytes_s"], chunk_overhead_s=mc["chunk_overhead_s"],
        coll_overhead_s=mcoll.get("coll_overhead_s", 0.0), oversub_wait_s=mcoll.get("oversub_wait_s", 0.0),
        shared_slowdown=mk["shared_slowdown"], oversub_slowdown=mk["oversub_slowdown"], dropout_values_s=drop_s,
        description=f"this machine: {cores} cores shared by every rank (1 thread each), Gloo over loopback",
        source=f"gnnpipe-plan calibrate{' --thorough' if args.thorough else ''}, {datetime.date.today().isoformat()}",
    )
    spmm = ", ".join(f"d={w}: {v / 1e9:.2f} G" for w, v in m["spmm_by_width"].items())
    comments = [
        "Measured on this machine by `gnnpipe-plan calibrate` (scripts/calibrate.py), 1 thread per process.",
        f"GEMM: [N x 256] @ [256 x 256], {m['gemm_flops_s'] / 1e9:.1f} GFLOP/s.",
        f"Base memory per rank: {base_mem / 1e6:.0f} MB, the peak RSS of a process training a 400-node graph.",
        f"SpMM kernel (not used by the model, see the fit below): torch.sparse.mm, random CSR, 10,000 rows, degree 40, "
        f"edge*width/s by width: {spmm}.",
        f"Copy bandwidth (not used by the model): tensor copy, read + write bytes / s = {m['mem_bytes_s'] / 1e9:.2f} GB/s.",
        f"Hashed dropout, forward + backward, [20000 x 128]: {drop_s / 1e6:.0f} M values/s.",
        "spmm_edge_width_s, mem_bytes_s and unit_overhead_s: fitted (NNLS, relative errors) to real gnnpipe units, "
        "4-layer models on random graphs (cli.plan.UNIT_FIT_CASES), after the GEMM and dropout time at the rates above; "
        "thread CPU time, fastest of the repeats:",
        *[f"  {name}: measured {t * 1e3:.1f} ms, modelled {f * 1e3:.1f} ms" for name, t, f in mu["fit"]],
        f"History path (write, gather, cat, scatter-add): {mc['chunk_overhead_s'] * 1e6:.0f} us + bytes / "
        f"{mc['gather_bytes_s'] / 1e9:.2f} GB/s per chunk and unit.",
        f"Contention (GCNII units, 1 thread each, CPU time per step): alone {mk['alone_s'] * 1e3:.1f} ms, "
        f"{cores} processes {mk['cores_s'] * 1e3:.1f} ms, {2 * cores} processes {mk['oversub_s'] * 1e3:.1f} ms.",
    ]
    if mcoll:
        comments.append(f"Collectives: all-to-all among {cores} ranks {mcoll['coll_overhead_s'] * 1e6:.0f} us; "
                        f"{2 * cores} ranks with 10 ms of compute between: {mcoll['oversub_iter_s'] * 1e3:.2f} ms per "
                        f"iteration against 2 x {mcoll['work_alone_s'] * 1e3:.2f} ms compute alone.")
    if "p2p" in m:
        comments.append("Gloo ping-pong between 2 local processes, one-way median s by bytes: "
                        + ", ".join(f"{k}: {v:.3g}" for k, v in m["p2p"].items()))
    comments.append(f"Load average while measuring: {load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the end, "
                    f"on {cores} cores (other processes slow every figure down; calibrate on an idle machine).")
    comments.append(f"Memory per device: total RAM / cores = {total / cores / 2**30:.1f} GiB; the node's devices are its cores.")
    text = profile_toml(prof, comments)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
    except OSError as e:
        raise GnnpipeError(f"{out}: cannot write the profile ({e.strerror})") from None
    print(text)
    print(f"{PROG}: wrote {out} in {time.perf_counter() - t_start:.0f} s (load {load0:.1f} -> "
          f"{os.getloadavg()[0]:.1f} on {cores} cores); the planner's --profile cpu-this-machine now reads it"
          + (f" while the current directory is {Path.cwd()}" if not os.environ.get(PROFILE_DIR_ENV_NAME) and not args.out
             else ""), file=sys.stderr)
    return 0


def validate_main(argv: Sequence[str] | None = None) -> int:
    """``gnnpipe-plan validate RESULTS``: the epoch benchmark's predictions again, for its
    stored measurements, with the current model and a profile (nothing is run)."""
    from gnnpipe.bench.epoch import repredict

    ap = ArgumentParser(prog=f"{PROG} validate",
                                 description="Re-predict a stored `gnnpipe-bench epoch` result (results.json or its folder).")
    ap.add_argument("results", type=Path, help="results/<run>/epoch/results.json or its folder")
    ap.add_argument("--profile", default="cpu-this-machine", help="profile name or TOML path")
    ap.add_argument("--json", action="store_true", help="rows and planner hits as JSON")
    ap.add_argument("--include-loaded", action="store_true",
                    help="keep rows measured while the 1-minute load exceeded the cores (left out by default)")
    args = ap.parse_args(argv)
    try:
        rows, hits, md, left_out = repredict(args.results, args.profile, include_loaded=args.include_loaded)
    except UnicodeDecodeError:
        raise GnnpipeError(f"{args.results} or --profile {args.profile}: not a UTF-8 text file") from None
    if args.json:
        print(json.dumps({"rows": rows, "planner": hits, "left_out_under_load": left_out}, indent=1, default=str))
    else:
        print(md)
    if left_out:
        print(f"{PROG} validate: left out {left_out} row(s) measured under load (--include-loaded keeps them)",
              file=sys.stderr)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point with the shared error policy (one line, exit 2, for user errors)."""
    return run_cli(_main, argv, prog=PROG)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
