"""Measure this machine for the cost model: ``gnnpipe-plan calibrate``'s measurements.

Kernel micro-benchmarks (GEMM, SpMM, copy), a fit of the SpMM and elementwise rates and the
per-pass overhead to real :mod:`gnnpipe.models` units, the pipeline's history path, hashed
dropout, contention between processes sharing the cores, blocking collectives and
point-to-point links between real ranks (launched through :func:`gnnpipe.spawn.run_ranks`),
and a rank's base memory (a fresh process trains a tiny graph). :func:`calibrate` runs them
all and returns a :class:`gnnpipe.cost.profile.HardwareProfile` with comments saying how
each figure was found; the CLI (:mod:`gnnpipe.cli.plan`) only parses, writes and prints.

Above the pure cost model: it imports torch, the models and the test harness, so nothing
of :mod:`gnnpipe.cost` imports it back.
"""

from __future__ import annotations

import datetime
import multiprocessing
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import psutil
import torch
from scipy.optimize import nnls

from gnnpipe import device
from gnnpipe._base import GnnpipeError
from gnnpipe.cost.inputs import GraphStats, ModelSpec
from gnnpipe.cost.profile import HardwareProfile, load_profile
from gnnpipe.cost.units import dropout_elem_bytes, unit_works
from gnnpipe.models import ModelConfig, RunCtx, build_model, ops
from gnnpipe.models.block import Block
from gnnpipe.quiet import silence_for_process
from gnnpipe.spawn import run_ranks


def _p2p_rank(comm, sizes: Sequence[int], reps: int = 20) -> dict:
    """Ping-pong between ranks 0 and 1 (run by :func:`gnnpipe.spawn.run_ranks`).

    Returns:
        on rank 0, ``{size_bytes: one-way seconds (median of reps)}``.
    """
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


def time_call(fn, reps: int, best: bool = False, cpu: bool = True, dev: torch.device | None = None) -> float:
    """Median (or, with ``best``, the fastest) of ``reps`` timed calls after one warm-up.

    With ``cpu`` (the default) the clock is this thread's CPU time, not the wall clock:
    the single-threaded kernels measured here then do not count the time other processes
    on a shared machine hold the core (what is left is cache and memory-bandwidth sharing).
    On a GPU (``dev``) the clock is the wall clock with the device synchronised around each
    call: the kernels run asynchronously, and the host's CPU time says nothing of them.
    """
    gpu = dev is not None and dev.type != "cpu"
    clock = time.perf_counter if gpu or not cpu else time.thread_time
    sync = (lambda: device.synchronize(dev)) if gpu else (lambda: None)  # noqa: E731
    fn()
    sync()
    ts = []
    for _ in range(reps):
        t0 = clock()
        fn()
        sync()
        ts.append(clock() - t0)
    return min(ts) if best else statistics.median(ts)


def measure(quick: bool = False, p2p: bool = True) -> dict:
    """Micro-benchmarks of this machine with one thread per process.

    Returns:
        dict with ``gemm_flops_s``, ``spmm_edge_width_s`` (and per width), ``mem_bytes_s``,
        ``unit_overhead_s``, ``p2p`` (bytes → one-way seconds) and the derived link
        bandwidth and latency.
    """
    torch.set_num_threads(1)
    reps = 3 if quick else 7
    res: dict = {}
    n = 4096 if quick else 16384
    a = torch.randn(n, 256)
    w = torch.randn(256, 256)
    t = time_call(lambda: a @ w, reps)
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
        t = time_call(lambda: torch.sparse.mm(adj, x), reps)
        per_w[width] = nn_ * deg * width / t
    res["spmm_by_width"] = per_w
    res["spmm_edge_width_s"] = per_w[64]
    big = torch.randn((8 if quick else 32) * 2**20 // 4 * 4)
    dst = torch.empty_like(big)
    t = time_call(lambda: dst.copy_(big), reps)
    res["mem_bytes_s"] = 2.0 * big.nbytes / t
    # Fixed cost of one unit pass: a GCN-like unit (dropout, linear, SpMM, ReLU) forward
    # and backward on 64 rows, where the arithmetic is negligible.
    small = torch.sparse_csr_tensor(torch.arange(0, 65 * 4, 4)[:65], torch.randint(0, 64, (256,)), torch.ones(256), size=(64, 64))
    lin = torch.nn.Linear(32, 32)
    h = torch.randn(64, 32, requires_grad=True)

    def unit():
        z = torch.nn.functional.dropout(h, 0.5, True)
        y = torch.relu(torch.sparse.mm(small, lin(z)))
        y.sum().backward()

    t_unit = time_call(unit, 50 if quick else 200)
    res["unit_overhead_s"] = t_unit / 2.0  # forward + backward = two passes
    if p2p:
        sizes = [8, 2**20, 16 * 2**20] if not quick else [8, 2**20]
        r = run_ranks("gnnpipe.cost.calibrate:_p2p_rank", 2, "torch", args={"sizes": sizes, "reps": 5 if quick else 20},
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


#: The same fit on a GPU: graphs 50 times larger (up to 12 M edges), so that the kernels run
#: well past their launch overhead, and one tiny case that is nothing but that overhead.
UNIT_FIT_CASES_GPU = (
    ("gcn", 300, 8, 32, 32), ("gcn", 150000, 40, 256, 64), ("gcn", 400000, 15, 64, 128),
    ("gcn", 100000, 120, 128, 96), ("gcnii", 300, 8, 32, 32), ("gcnii", 150000, 40, 256, 64),
    ("gcnii", 400000, 15, 64, 128), ("gcnii", 100000, 120, 128, 96), ("gcnii", 600000, 6, 32, 48),
)


def _single_thread(dev: torch.device | None) -> torch.device:
    """The device to measure on (the CPU by default), with one torch thread on the CPU:
    every rank here runs with one thread."""
    dev = torch.device("cpu") if dev is None else torch.device(dev)
    if dev.type == "cpu":
        torch.set_num_threads(1)
    return dev


def _random_csr(n: int, deg: int, seed: int):
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


def measure_dropout(quick: bool = False, dev: torch.device | None = None) -> float:
    """Hashed dropout (:func:`gnnpipe.models.ops.hashed_dropout`), forward + backward, on a
    [20000, 128] block of rows: values per second of this thread's CPU time (the
    counter-based hash per value costs several elementwise passes, so the model gives it
    its own rate: ``dropout_values_s``). On a GPU (``dev``), 50 times the rows, wall clock."""
    dev = _single_thread(dev)
    n, w = (5000, 128) if quick else (20000, 128)
    n *= 1 if dev.type == "cpu" else 50
    h = torch.randn(n, w, device=dev, requires_grad=True)
    gid = torch.arange(n, device=dev)
    g = torch.ones(n, w, device=dev)
    ep = [0]

    def step():
        ep[0] += 1
        ops.hashed_dropout(h, gid, 0.5, 0, ep[0], 1).backward(g)

    return n * w / time_call(step, 3 if quick else 7, best=True, dev=dev)


def measure_units(gemm_flops_s: float, spmm_edge_width_s: float, quick: bool = False,
                  dropout_values_s: float = 0.0, dev: torch.device | None = None) -> dict:
    """Fit the SpMM and elementwise rates and the per-pass overhead to real gnnpipe units.

    For each :data:`UNIT_FIT_CASES` graph, a 4-layer model of :mod:`gnnpipe.models` runs
    forward and backward over a square block (the graph-parallel executor's path), one
    process, one thread; the fastest of the repetitions is kept (the least disturbed by
    other processes). With the GEMM part of the cost model's own work counts
    (:func:`gnnpipe.cost.units.unit_works`) taken out at the GEMM rate measured directly, the
    rest is regressed (non-negative least squares, relative errors) on the SpMM
    edge·width, the elementwise bytes and the number of unit passes: the aggregation as
    the executors run it (normalisation, transposed CSR in backward) and what bare kernels
    miss (autograd, hashed dropout, Python per op). ``spmm_edge_width_s`` (the bare
    kernel's rate) is only the fallback should the fit leave SpMM free.

    Returns:
        ``{"spmm_edge_width_s", "mem_bytes_s", "unit_overhead_s", "fit": [(case, measured s,
        modelled s)]}``.
    """
    dev = _single_thread(dev)
    reps = 2 if quick else 4
    rows, ys, names, drop_values = [], [], [], []
    for i, (model, n, deg, F, d) in enumerate(UNIT_FIT_CASES if dev.type == "cpu" else UNIT_FIT_CASES_GPU):
        if quick:
            n = max(n // 4, 200)
        indptr, indices = _random_csr(n, deg, i)
        blk = Block.full(indptr, indices).to(dev)
        K, L = 8, 4
        m = build_model(ModelConfig(model, F, K, L, d), 0).to(dev)
        x = torch.randn(n, F, device=dev)

        def step(ep=[0]):
            ep[0] += 1
            out = m(blk, x, RunCtx(training=True, epoch=ep[0], seed=0))
            out.sum().backward()

        t = time_call(step, reps, best=True, dev=dev)
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


def measure_chunk_path(quick: bool = False, dev: torch.device | None = None) -> dict:
    """The pipeline's per-chunk history path, as :class:`gnnpipe.parallel.pipeline.stage.PipelineStage`
    runs it per aggregating unit: write the chunk's rows into the history, gather the
    out-of-chunk rows (``index_select``), concatenate, and in backward ``index_add_`` their
    gradients. Fits ``time = chunk_overhead_s + bytes / gather_bytes_s`` over sizes, with
    bytes = 4·d·(2·rows + 3·neighbour rows).
    """
    dev = _single_thread(dev)
    scale = 1 if dev.type == "cpu" else 20  # a GPU: sizes well past the launch overhead
    N, d = 20000 * scale, 64
    hist = torch.zeros(N, d, device=dev)
    gacc = torch.zeros(N, d, device=dev)
    xs, ys = [], []
    for rows, nbrs in ((16, 32), (500 * scale, 2000 * scale), (2000 * scale, 8000 * scale), (5000 * scale, 15000 * scale)):
        h = torch.randn(rows, d, device=dev, requires_grad=True)
        ids = torch.from_numpy(np.sort(np.random.default_rng(rows).choice(N, nbrs, replace=False))).to(dev)

        def path():
            hist[0:rows] = h.detach()
            nbr = hist.index_select(0, ids).requires_grad_(True)
            src = torch.cat([h, nbr], dim=0)
            src.sum().backward()
            gacc.index_add_(0, ids, nbr.grad)

        ys.append(time_call(path, 5 if quick else 15, best=True, dev=dev))
        xs.append(4.0 * d * (2 * rows + 3 * nbrs))
    slope, icpt = np.polyfit(xs, ys, 1)
    return {"gather_bytes_s": 1.0 / max(slope, 1e-15), "chunk_overhead_s": max(float(icpt), 0.0)}


def _contention_worker(index: int, phases: Sequence[int], barriers: dict, done, reps: int, rounds: int, q) -> None:
    """One process of :func:`measure_contention`: for every round and every phase ``k`` of
    ``phases``, the first ``k`` workers time the same GCNII step together (after a barrier of
    ``k``) and report their median; every worker then meets at ``done`` so the next phase
    starts with exactly ``k`` busy processes (the others block, using no CPU)."""
    silence_for_process()  # a spawned process: the CLI's warning filters are not inherited
    torch.set_num_threads(1)
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
from gnnpipe.quiet import silence_for_process
silence_for_process()
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
    (:meth:`gnnpipe.cost.profile.HardwareProfile.slowdown`), what is measured here is how much more
    CPU the same work takes, which other processes on a shared machine disturb less than
    wall-clock ratios.

    Returns:
        ``{"alone_s", "shared_slowdown": cpu(cores)/cpu(1), "oversub_slowdown":
        cpu(2·cores)/cpu(cores)}`` (each at least 1; medians of 3 interleaved rounds).
    """
    ctx = multiprocessing.get_context("spawn")
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
    reps = 10 if quick else 30
    trials = 1 if quick else 3
    args = {"work_s": 0.010, "reps": reps, "rows": 64}
    colls, alones, its, coll2s = [], [], [], []
    for _ in range(trials):
        r1 = run_ranks("gnnpipe.cost.calibrate:_coll_rank", max(cores, 2), "torch", args=args, timeout_s=300)
        r2 = run_ranks("gnnpipe.cost.calibrate:_coll_rank", 2 * max(cores, 2), "torch", args=args, timeout_s=300)
        colls.append(max(x["coll_only_s"] for x in r1))
        alones.append(max(x["work_alone_s"] for x in r1))
        its.append(max(x["iter_s"] for x in r2))
        coll2s.append(max(x["coll_only_s"] for x in r2))
    coll, alone1, it2 = min(colls), min(alones), min(its)
    wait = max(0.0, it2 - 2.0 * alone1 - coll)
    return {"coll_overhead_s": coll, "oversub_wait_s": wait, "oversub_coll_s": min(coll2s),
            "oversub_iter_s": it2, "work_alone_s": alone1}


def calibrate(thorough: bool = False, p2p: bool = True,
              say: Callable[[str], None] = lambda line: None) -> tuple[HardwareProfile, list[str]]:
    """Measure this machine: every measurement above, one thread per process.

    Args:
        thorough: larger problems, more repetitions and 3 contention rounds (minutes).
        p2p: also the 2-process Gloo ping-pong and the collectives (ranks launched by
            :func:`gnnpipe.spawn.run_ranks`).
        say: receives one progress line before each group of measurements.

    Returns:
        ``(profile, comments)``: the ``cpu-this-machine`` profile and the lines saying how
        each figure was found (for :func:`gnnpipe.cost.profile.profile_toml`).
    """
    quick = not thorough
    load_start = os.getloadavg()[0]
    cores = os.cpu_count() or 1
    say("measuring GEMM, SpMM, copy bandwidth"
        + ("" if not p2p else ", Gloo point-to-point and collectives") + " with 1 thread per process")
    m = measure(quick=quick, p2p=p2p)
    say("fitting elementwise rate and per-pass overhead to real units")
    drop_s = measure_dropout(quick=quick)
    mu = measure_units(m["gemm_flops_s"], m["spmm_edge_width_s"], quick=quick, dropout_values_s=drop_s)
    say(f"the pipeline's history path; {cores} and {2 * cores} processes sharing the cores")
    mc = measure_chunk_path(quick=quick)
    mk = measure_contention(cores, quick=quick)
    mcoll = measure_collectives(cores, quick=quick) if p2p else {}
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
        source=f"gnnpipe-plan calibrate{' --thorough' if thorough else ''}, {datetime.date.today().isoformat()}",
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
        "4-layer models on random graphs (cost.calibrate.UNIT_FIT_CASES), after the GEMM and dropout time at the rates above; "
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
    comments.append(f"Load average while measuring: {load_start:.1f} at the start, {os.getloadavg()[0]:.1f} at the end, "
                    f"on {cores} cores (other processes slow every figure down; calibrate on an idle machine).")
    comments.append(f"Memory per device: total RAM / cores = {total / cores / 2**30:.1f} GiB; the node's devices are its cores.")
    return prof, comments


def _gpu_rates(dev: torch.device, quick: bool = False) -> dict:
    """The GPU's kernel ceilings, measured: a large GEMM (float32), the bare CSR SpMM by width
    (cuSPARSE through ``torch.sparse.mm``), and a device-to-device copy (bytes read + written).
    ``quick``: 1/64 of the sizes (the CPU dry run)."""
    n = 1 << (14 if quick else 20)
    a = torch.randn(n, 256, device=dev)
    w = torch.randn(256, 256, device=dev)
    res = {"rows": n, "gemm_flops_s": 2.0 * n * 256 * 256 / time_call(lambda: a @ w, 10, best=True, dev=dev)}
    del a, w
    nn_, deg = n, 20
    indptr, indices = _random_csr(nn_, deg, 7)
    adj = torch.sparse_csr_tensor(torch.from_numpy(indptr), torch.from_numpy(indices),
                                  torch.ones(indices.size), size=(nn_, nn_)).to(dev)
    per_w = {}
    for width in (16, 64, 128):
        x = torch.randn(nn_, width, device=dev)
        per_w[width] = indices.size * width / time_call(lambda: torch.sparse.mm(adj, x), 10, best=True, dev=dev)
    res["spmm_by_width"] = per_w
    del adj, x
    big = torch.randn((4 if quick else 256) * 2**20 // 4, device=dev)
    dst = torch.empty_like(big)
    res["mem_bytes_s"] = 2.0 * big.nbytes / time_call(lambda: dst.copy_(big), 10, best=True, dev=dev)
    return res


def gpu_profile_name(dev: torch.device | str = "cuda") -> str:
    """``gpu-<name>`` of this process's GPU (``gpu-h200`` for an NVIDIA H200).

    Raises:
        GnnpipeError: torch sees no CUDA device.
    """
    if not torch.cuda.is_available():
        raise GnnpipeError("--device cuda: torch sees no CUDA device here (torch.cuda.is_available() is False)")
    return "gpu-" + "-".join(torch.cuda.get_device_name(torch.device(dev)).lower().replace("nvidia", "").split())


def calibrate_device(dev: torch.device | str, name: str = "", quick: bool = False,
                     say: Callable[[str], None] = lambda line: None) -> tuple[HardwareProfile, list[str]]:
    """Measure one GPU for the cost model: the compute half of a profile.

    GEMM, SpMM and copy ceilings (:func:`_gpu_rates`), hashed dropout, the unit fit on larger
    graphs (:data:`UNIT_FIT_CASES_GPU`) and the history path, all timed by the wall clock with
    the device synchronised. Base memory is the device memory still in use once the
    measurements' tensors are freed and the allocator's cache is emptied (the CUDA context,
    and whatever else runs on the GPU), at least 500 MB.

    The links are not measured: one GPU has no peer. ``intra_*``/``inter_*`` are the
    ``h100-nvlink`` profile's data-sheet figures (NVLink 4 in a node, 400 Gb/s between
    nodes), said so in the comments; ``calibrate --network`` or an edit replaces them.

    On the CPU (``dev="cpu"``, with ``quick``) the same code runs at small sizes: the dry run
    of the device check, not a CPU profile (that is :func:`calibrate`).

    Returns:
        ``(profile, comments)`` as :func:`calibrate`.
    """
    dev = torch.device(dev)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise GnnpipeError(f"calibrate_device: {dev} is no CUDA device this process can use "
                           "(torch.cuda.is_available() is False); calibrate a CPU with calibrate()")
    gpu = dev.type == "cuda"
    gpu_name = torch.cuda.get_device_properties(dev).name if gpu else f"CPU dry run ({platform.processor() or 'cpu'})"
    name = name or (gpu_profile_name(dev) if gpu else "gpu-cpu-dry-run")
    say(f"measuring GEMM, SpMM and copy on {gpu_name}")
    total = torch.cuda.mem_get_info(dev)[1] if gpu else psutil.virtual_memory().total
    m = _gpu_rates(dev, quick)
    say("hashed dropout, the unit fit on larger graphs, the history path")
    drop_s = measure_dropout(quick=quick, dev=dev)
    mu = measure_units(m["gemm_flops_s"], m["spmm_by_width"][64], quick=quick, dropout_values_s=drop_s, dev=dev)
    mc = measure_chunk_path(quick=quick, dev=dev)
    # the context and what stays on the device after the work, caches emptied: what a rank
    # holds besides its tensors (at least 500 MB, a CUDA context's usual size)
    if gpu:
        torch.cuda.empty_cache()
    base_mem = max(float(total - torch.cuda.mem_get_info(dev)[0]) if gpu else 0.0, 5e8)
    ref = load_profile("h100-nvlink")  # the links: the shipped profile's data-sheet figures
    prof = HardwareProfile(
        name=name, device="cuda",
        gemm_flops_s=m["gemm_flops_s"], spmm_edge_width_s=mu["spmm_edge_width_s"], mem_bytes_s=mu["mem_bytes_s"],
        unit_overhead_s=mu["unit_overhead_s"],
        intra_bw_bytes_s=ref.intra_bw_bytes_s, intra_latency_s=ref.intra_latency_s,
        inter_bw_bytes_s=ref.inter_bw_bytes_s, inter_latency_s=ref.inter_latency_s,
        devices_per_node=ref.devices_per_node, mem_bytes=float(total), base_mem_bytes=base_mem,
        cores_per_host=float(ref.devices_per_node), gather_bytes_s=mc["gather_bytes_s"],
        chunk_overhead_s=mc["chunk_overhead_s"], dropout_values_s=drop_s,
        description=f"{gpu_name} ({total / 2**30:.0f} GiB), measured; links assumed 8 per node on NVLink 4, "
                    "400 Gb/s between nodes",
        source=f"gnnpipe-plan calibrate --device cuda, {datetime.date.today().isoformat()}, torch {torch.__version__}",
    )
    spmm = ", ".join(f"d={w}: {v / 1e9:.0f} G" for w, v in m["spmm_by_width"].items())
    comments = [
        f"Measured on one {gpu_name} by `gnnpipe-plan calibrate --device cuda` (torch {torch.__version__}, "
        f"CUDA {torch.version.cuda}); wall clock, device synchronised, fastest of the repeats.",
        f"GEMM: [{m['rows']} x 256] @ [256 x 256] float32, {m['gemm_flops_s'] / 1e12:.1f} TFLOP/s.",
        f"SpMM kernel (torch.sparse.mm, random CSR, {m['rows']} rows, degree ~20), edge*width/s by width: {spmm}.",
        f"Hashed dropout, forward + backward, [{20000 * (1 if not gpu else 50) // (4 if quick else 1)} x 128]: {drop_s / 1e9:.1f} G values/s.",
        "spmm_edge_width_s, mem_bytes_s and unit_overhead_s: fitted (NNLS, relative errors) to real gnnpipe units, "
        "4-layer models on random graphs (cost.calibrate.UNIT_FIT_CASES_GPU), after the GEMM and dropout time:",
        *[f"  {case}: measured {t * 1e3:.2f} ms, modelled {f * 1e3:.2f} ms" for case, t, f in mu["fit"]],
        f"Copy bandwidth (read + write): {m['mem_bytes_s'] / 1e9:.0f} GB/s.",
        f"History path (write, gather, cat, scatter-add): {mc['chunk_overhead_s'] * 1e6:.0f} us + bytes / "
        f"{mc['gather_bytes_s'] / 1e9:.0f} GB/s per chunk and unit.",
        f"Memory: {total / 2**30:.1f} GiB on the device; base {base_mem / 2**20:.0f} MiB (context and caches).",
        "Links NOT measured (one GPU, no peer): the h100-nvlink profile's data-sheet figures, "
        f"{ref.intra_bw_bytes_s / 1e9:.0f} GB/s and {ref.intra_latency_s * 1e6:.0f} us in a node of "
        f"{ref.devices_per_node}, {ref.inter_bw_bytes_s / 1e9:.0f} GB/s and {ref.inter_latency_s * 1e6:.0f} us "
        "between nodes.",
    ]
    return prof, comments
