"""``gnnpipe-bench cluster``: training on an emulated multi-host cluster with shaped links.

One job (prints the run directory and the epoch-time summary)::

    gnnpipe-bench cluster --hosts 4 --rate 200mbit [--delay 1ms] [--ranks-per-host 1] \\
        [--launcher torch|mpi] -- --dataset squirrel --mode pipeline --layers 32 --epochs 6

A sweep over link rates × modes × graphs × models (one cluster per rate, one job per cell)::

    gnnpipe-bench cluster --sweep --rates 25mbit,50mbit,100mbit,200mbit,500mbit,unshaped \\
        --modes graph,pipeline,hybrid --graphs squirrel,physics,reddit-shaped --models gcn,gcnii

``--wires float32,int8`` runs every cell in each wire format (``gnnpipe-train --wire``); the
table gives every cell's speed-up over graph parallelism in float32 on the same graph, model
and link (issue 20), and the plot draws the lossy formats with their own markers.
``--samples 1,0.1`` runs the graph and hybrid cells also with ``--boundary-sample 0.1``
(issue 33; the pipeline has no rows between parts to sample, so its cells run once);
``planner.md`` then scores the planner's choice of sampling under ``--accuracy-budget``
(:func:`score_sample_choice`), as it scores the wire formats.

Leftovers of runs that were SIGKILLed: ``gnnpipe-bench cluster --cleanup``.

The cluster is :mod:`gnnpipe.cluster` (needs root; the error says why it cannot be made).
Outputs go under ``--out`` (default ``results/cluster/``): a job to ``run-<time>-<rate>/``
(``gnnpipe-train``'s run directory plus ``rank<r>.log`` and ``cell.json``); a sweep to
``sweep-<time>/``: ``rows.jsonl`` (one row per cell, appended as each finishes, so an
interrupted sweep keeps what it measured), ``results.csv``/``results.json``/``summary.md``,
``epoch_vs_rate.png``, ``planner.md`` (:func:`score_planner`: the cost model's first choice
per group against the measured fastest, predicted against measured epochs) and
``runs/<cell>/``.

Per cell: the median epoch time over the epochs after the first, the medians of
``compute_s``, ``comm_s`` and ``bubble_s`` (``metrics.jsonl``: the maximum over ranks; the
pipeline's ``comm_s`` includes its receive waits, which are its ``bubble_s``), the bytes of
one training epoch by category (``bytes_sent``, summed over ranks), and the load average
(1 min) and core count before and after the cell: the machine is shared, and a cell measured
under load says so.

Predicted lines: :func:`plot` takes a ``predict(row, rate_bps)`` hook;
:func:`make_predictor` is the planner's (the cell's ``gnnpipe-train`` flags, its graph's
METIS facts, and the profile through :func:`gnnpipe.cost.with_link` at the cell's rate and
ranks per host). The sweep and ``--plot`` use it (``--profile``; ``--no-predict`` draws
measured points only).

The network of each rate is measured, not assumed: before the first cell of a rate the sweep
runs :func:`gnnpipe.cost.netcal.measure_network` on a cluster of the sweep's hosts at that
rate (point-to-point bandwidth and latency, all-to-all against point-to-point), writes it to
``sweep-<time>/network/<rate>.json`` and copies it into every row of that rate (``network``);
the predictor takes a row's measured link over the nominal ``rate / 8`` (``--network quick``:
fewer sizes; ``off``: nominal). The emulated hosts share this machine's cores: the predictor
sets the profile's ``cpu_share_ranks`` to the cell's world, so the compute slows down as it
does for that many ranks on one host while the links stay the hosts' own.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
from dataclasses import asdict, replace
import logging
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from gnnpipe import cluster as CL
from gnnpipe._base import GnnpipeError
from gnnpipe.bench import common as C
from gnnpipe.cli import run_cli
from gnnpipe.config import WIRE_FORMATS, ArgumentParser, parse_config
from gnnpipe.cost import (DEFAULT_ACCURACY_BUDGET, WIRE_MIN_GAIN, ModelSpec, chunk_counts, graph_stats_from_graph,
                          load_profile, predict, sample_choices, wire_choices, with_link)
from gnnpipe.cost import netcal
from gnnpipe.data.load import load_graph_for
from gnnpipe.dims import ParallelDims

log = logging.getLogger(__name__)

#: name -> gnnpipe-train flags of the graph. ``tiny`` is for tests and smoke runs.
GRAPHS: dict[str, list[str]] = {
    "tiny": ["--dataset", "sbm", "--synth-nodes", "600", "--synth-features", "16", "--synth-classes", "4"],
    "squirrel": ["--dataset", "squirrel"],
    "physics": ["--dataset", "coauthor_physics"],
    # Reddit's degree and width at 4,000 nodes, as in the comm benchmark.
    "reddit-shaped": ["--dataset", "sbm", "--synth-nodes", "4000", "--synth-degree", "492.0",
                      "--synth-features", "602", "--synth-classes", "41"],
}
MODES = ("graph", "pipeline", "hybrid")
#: One colour per mode on every panel.
MODE_COLORS = {"graph": "tab:blue", "pipeline": "tab:orange", "hybrid": "tab:green"}
#: Marker and line style of each lossy wire format (float32 is "o-").
WIRE_STYLE = {"bfloat16": "s:", "int8": "^:", "int4": "v:"}
DEFAULT_RATES = ("25mbit", "50mbit", "100mbit", "200mbit", "500mbit", "unshaped")

#: ``predict(row, rate_bps) -> seconds or None``: the cost model's epoch time for a cell's
#: configuration at a link rate (``None``: unshaped). The hook for issue 12 part 4.
PredictFn = Callable[[Mapping[str, Any], "int | None"], "float | None"]


# --------------------------------------------------------------------------- pure parts
def mode_flags(mode: str, world: int) -> list[str]:
    """``gnnpipe-train`` flags of a mode at ``world`` ranks: G world; P world stages, 4·S
    chunks; H 2 ways × world/2 stages, 4·S chunks (as the comm and epoch benchmarks).

    Raises:
        ClusterError: unknown mode, or hybrid on an odd or too small world.
    """
    if mode == "graph":
        return ["--mode", "graph"]
    if mode == "pipeline":
        return ["--mode", "pipeline", "--stages", str(world), "--chunks", str(4 * world)]
    if mode == "hybrid":
        if world < 4 or world % 2:
            raise CL.ClusterError(f"hybrid needs an even world of at least 4 ranks (2 ways), got {world}")
        s = world // 2
        return ["--mode", "hybrid", "--ways", "2", "--stages", str(s), "--chunks", str(4 * s)]
    raise CL.ClusterError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")


def epoch_summary(metrics: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Medians of a run's per-epoch records, the first epoch left out when there are more.

    Args:
        metrics: ``metrics.jsonl``'s records.

    Returns:
        ``epoch_s``, ``compute_s``, ``comm_s``, ``bubble_s`` (medians), ``epochs`` (records
        used) and ``bytes`` (the last epoch's ``bytes_sent`` by category, summed over ranks;
        every training epoch sends the same) with ``bytes_total``.

    Raises:
        ClusterError: no records.
    """
    if not metrics:
        raise CL.ClusterError("the run wrote no epochs to metrics.jsonl")
    eps = list(metrics[1:]) if len(metrics) > 1 else list(metrics)
    med = {k: statistics.median(float(e.get(k, 0.0)) for e in eps)
           for k in ("epoch_time_s", "compute_s", "comm_s", "bubble_s")}
    b = {k: int(v) for k, v in metrics[-1].get("bytes_sent", {}).items()}
    return {"epoch_s": med["epoch_time_s"], "compute_s": med["compute_s"], "comm_s": med["comm_s"],
            "bubble_s": med["bubble_s"], "epochs": len(eps), "bytes": b,
            "bytes_train": sum(C.measured_bytes({"bytes_sent": b}).values())}


def sweep_cells(rates: Sequence[str], modes: Sequence[str], graphs: Sequence[str],
                models: Sequence[str], wires: Sequence[str] = ("float32",),
                samples: Sequence[float] = (1.0,)) -> list[dict[str, Any]]:
    """Every (rate, graph, model, mode, wire, sample) cell, rates outermost (one cluster per
    rate); a boundary-sampling fraction below 1 only for the modes with boundary rows to
    sample (graph, hybrid).

    Raises:
        ClusterError: an unknown graph, mode or wire format, a bad rate or fraction.
    """
    for s in samples:
        if not (isinstance(s, (int, float)) and 0.0 < s <= 1.0):
            raise CL.ClusterError(f"boundary-sample fraction must be in (0, 1] (1: every row), got {s!r}")
    for w in wires:
        if w not in WIRE_FORMATS:
            raise CL.ClusterError(f"wire format must be one of {', '.join(WIRE_FORMATS)}, got {w!r}")
    for g in graphs:
        if g not in GRAPHS:
            raise CL.ClusterError(f"graph must be one of {', '.join(GRAPHS)}, got {g!r}")
    for m in modes:
        if m not in MODES:
            raise CL.ClusterError(f"mode must be one of {', '.join(MODES)}, got {m!r}")
    return [{"rate": CL.rate_text(CL.parse_rate(r)), "rate_bps": CL.parse_rate(r), "graph": g, "model": mo, "mode": m,
             "wire": w, "sample": float(s)}
            for r in rates for g in graphs for mo in models for m in modes for w in dict.fromkeys(wires)
            for s in dict.fromkeys(samples) if s == 1.0 or m != "pipeline"]


def _sample(r: Mapping[str, Any]) -> float:
    """A row's boundary-sampling fraction (rows of sweeps before it was a dimension: 1)."""
    return float(r.get("sample", 1.0))


def _variant(r: Mapping[str, Any]) -> str:
    """A row's wire format, and its sampling fraction where below 1 ("float32 P=0.1")."""
    return r.get("wire", "float32") + (f" P={_sample(r):g}" if _sample(r) < 1.0 else "")


def crossovers(points: Mapping[str, Sequence[tuple[float, float]]], a: str = "graph", b: str = "pipeline") -> list[float]:
    """x positions where ``a``'s and ``b``'s measured times change order (log-x midpoint).

    Args:
        points: mode -> [(x, epoch seconds)] sorted by x.
    """
    pa, pb = dict(points.get(a, [])), dict(points.get(b, []))
    xs = sorted(set(pa) & set(pb))
    out = []
    for x0, x1 in zip(xs, xs[1:]):
        if (pa[x0] - pb[x0]) * (pa[x1] - pb[x1]) < 0:
            out.append((x0 * x1) ** 0.5)
    return out


def make_predictor(profile: str = "cpu-this-machine") -> PredictFn:
    """The planner's epoch time for a cell (a :data:`PredictFn`): the cell's recorded
    ``gnnpipe-train`` flags (``row["args"]``) give the graph, model and layout; the profile
    goes through :func:`gnnpipe.cost.with_link` at ``rate_bps`` with the cell's ranks per
    host (``None``: the profile's own links); where the row carries the link measured at its
    own rate (``row["network"]``, written by :func:`sweep`), its bandwidth, latency and
    ``a2a_factor`` replace the nominal ones. Graph statistics (METIS) are computed once per
    graph and layout. A cell without flags (a failed one), or one the model cannot
    predict, gets ``None`` (logged).
    """
    base = load_profile(profile)
    graphs: dict[str, Any] = {}
    stats: dict[str, Any] = {}

    def fn(row: Mapping[str, Any], rate_bps: int | None) -> float | None:
        args = row.get("args")
        if not args or not row.get("world"):
            return None
        try:
            cfg, _ = parse_config(list(args))
            world = int(row["world"])
            topo = ParallelDims.from_config(cfg, world)
            gkey = json.dumps([cfg.dataset, cfg.synth_nodes, cfg.synth_degree, cfg.synth_features,
                               cfg.synth_classes, cfg.seed], default=str)
            key = f"{gkey} {topo.ways} {topo.chunks if topo.mode != 'graph' else 0}"
            if gkey not in graphs:
                graphs[gkey] = load_graph_for(cfg)
            if key not in stats:
                stats[key] = C.call_quietly(lambda: graph_stats_from_graph(
                    graphs[gkey], sorted({topo.ways, 2}), seed=cfg.seed, chunks=chunk_counts([topo])))
            spec = ModelSpec.of(cfg)
            # the links are the emulated hosts' own; the cores are this machine's, shared by
            # every rank of the cell (cpu_share_ranks)
            prof = replace(with_link(base, rate_bps, int(row.get("ranks_per_host", 1))), cpu_share_ranks=world)
            net = row.get("network")
            if net and rate_bps == row.get("rate_bps"):
                prof = replace(prof, inter_bw_bytes_s=float(net["bw_bytes_s"]),
                               inter_latency_s=float(net["latency_s"]), a2a_factor=float(net["a2a_factor"]))
            return predict(stats[key], spec, topo, prof).epoch_s
        except (GnnpipeError, KeyError, ValueError) as e:
            log.warning("no prediction for %s: %s", row.get("cell", row.get("mode")), str(e).splitlines()[0])
            return None

    return fn


# --------------------------------------------------------------------------- running
def machine_load() -> dict[str, float]:
    """The 1-minute load average and the core count (the machine is shared)."""
    return {"load1": os.getloadavg()[0], "cores": os.cpu_count() or 1}


def train_argv(args: Sequence[str], out: Path, launcher: str) -> list[str]:
    """The command every rank runs: ``python -m gnnpipe.train ARGS --out OUT --no-progress``,
    with ``--comm`` matching the launcher unless ``args`` names one."""
    argv = [sys.executable, "-m", "gnnpipe.train", *args]
    if "--comm" not in args:
        argv += ["--comm", "mpi" if launcher == "mpi" else "torch"]
    return argv + ["--out", str(out), "--no-progress"]


def run_job(spec: CL.ClusterSpec, args: Sequence[str], out: Path, launcher: str = "torch",
            timeout_s: float = 3600.0) -> dict[str, Any]:
    """Build the cluster, run ``gnnpipe-train ARGS`` on every rank, tear it down.

    Args:
        spec: hosts, rate, delay, ranks per host.
        args: ``gnnpipe-train`` flags (``--out``, ``--no-progress`` and ``--comm`` are added).
        out: the run directory (rank logs beside gnnpipe-train's outputs).
        launcher: ``"torch"`` (torch.distributed environment under ``ip netns exec``) or
            ``"mpi"`` (hydra across the namespaces).
        timeout_s: the whole job's limit.

    Returns:
        the cell: spec fields, ``out``, load before/after and :func:`epoch_summary`'s fields.

    Raises:
        ClusterError: no cluster here, a rank failed (with the log tails), or the time ran out.
    """
    why = CL.unavailable()
    if why is not None:
        raise CL.ClusterError(f"the emulated cluster needs root and iproute2: {why}")
    if launcher not in ("torch", "mpi"):
        raise CL.ClusterError(f"launcher must be 'torch' or 'mpi', got {launcher!r}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    before = machine_load()
    t0 = time.monotonic()
    with CL.Cluster(spec) as c:
        argv = train_argv(args, out, launcher)
        if launcher == "torch":
            procs = c.launch(argv, out)
        else:
            with open(out / "mpirun.log", "wb") as f:
                procs = [subprocess.Popen(c.mpirun_argv(argv), stdout=f, stderr=subprocess.STDOUT,
                                          start_new_session=True, env=dict(os.environ, OMP_NUM_THREADS="1"))]
            c.procs.extend(procs)
        codes = _wait(procs, timeout_s)
        if codes != [0] * len(procs):
            tails = "\n".join(f"--- {f.name} ---\n{f.read_text(errors='replace')[-1500:]}"
                              for f in sorted(out.glob("*.log")))
            what = "timed out" if None in codes else f"exit codes {codes}"
            raise CL.ClusterError(f"training on the cluster failed ({what}); logs in {out}\n{tails}")
    wall = time.monotonic() - t0
    row = {"hosts": spec.hosts, "ranks_per_host": spec.ranks_per_host, "world": spec.world,
           "rate": CL.rate_text(spec.rate_bps), "rate_bps": spec.rate_bps, "delay_ms": spec.delay_ms,
           "launcher": launcher, "args": list(args), "out": str(out), "wall_s": wall,
           "load1_before": before["load1"], "cores": before["cores"], "load1_after": machine_load()["load1"],
           **epoch_summary(C.read_metrics(out))}
    (out / "cell.json").write_text(json.dumps(row, indent=1) + "\n")
    return row


def _wait(procs: Sequence, timeout_s: float, grace_s: float = 30.0) -> list[int | None]:
    """Exit codes once all exit; after one fails the rest get ``grace_s`` (they time out on it)."""
    deadline = time.monotonic() + timeout_s
    failed_at = None
    while time.monotonic() < deadline:
        codes = [p.poll() for p in procs]
        if None not in codes:
            return codes
        if failed_at is None and any(c not in (None, 0) for c in codes):
            failed_at = time.monotonic()
        if failed_at is not None and time.monotonic() - failed_at > grace_s:
            break
        time.sleep(0.1)
    return [p.poll() for p in procs]


def _cell_name(cell: Mapping[str, Any], layers: int) -> str:
    wire = cell["wire"]
    return (f"{cell['graph']}-{cell['model']}{layers}-{cell['mode']}" + (f"+{wire}" if wire != "float32" else "")
            + (f"+p{_sample(cell):g}" if _sample(cell) < 1.0 else "") + f"-{cell['rate']}")


def _cell_args(cell: Mapping[str, Any], layers: int, hidden: int, epochs: int, world: int,
               extra: Sequence[str]) -> list[str]:
    """A sweep cell's gnnpipe-train arguments: a pipelined cell's epochs all stale
    (``--exact-every 0``, the epoch the cost model predicts; ``extra`` may set another)."""
    wire = cell["wire"]
    return [*GRAPHS[cell["graph"]], "--model", cell["model"], "--layers", str(layers), "--hidden", str(hidden),
            "--epochs", str(epochs), "--eval-every", "1000000", "--seed", "0", *mode_flags(cell["mode"], world),
            *(["--exact-every", "0"] if cell["mode"] != "graph" else []),
            *(["--wire", wire] if wire != "float32" else []),
            *(["--boundary-sample", f"{_sample(cell):g}"] if _sample(cell) < 1.0 else []), *extra]


def sweep(out: Path, rates: Sequence[str] = DEFAULT_RATES, modes: Sequence[str] = MODES,
          graphs: Sequence[str] = ("squirrel", "physics", "reddit-shaped"), models: Sequence[str] = ("gcn", "gcnii"),
          hosts: int = 4, ranks_per_host: int = 1, delay: str | None = None, layers: int = 32, hidden: int = 100,
          epochs: int = 6, extra: Sequence[str] = (), launcher: str = "torch", timeout_s: float = 3600.0,
          predict: PredictFn | None = None, wires: Sequence[str] = ("float32",),
          network: str = "full", samples: Sequence[float] = (1.0,),
          accuracy_budget: float = DEFAULT_ACCURACY_BUDGET) -> tuple[list[dict], Path]:
    """Run every cell; write ``out/sweep-<time>/`` (see the module docstring).

    A cell that fails is recorded with its ``error`` and the sweep goes on.

    Args:
        out: the results root of this benchmark (``results/cluster``).
        rates, modes, graphs, models: the grid (graphs: keys of :data:`GRAPHS`).
        hosts, ranks_per_host, delay: the cluster of every cell.
        layers, hidden, epochs: the model and run length of every cell.
        extra: more ``gnnpipe-train`` flags for every cell.
        launcher: ``"torch"`` or ``"mpi"``.
        timeout_s: limit per cell.
        predict: the cost model's epoch time per cell (see :data:`PredictFn`).
        wires: wire formats of the boundary messages (``gnnpipe-train --wire``), each cell
            run in every one.
        network: measure each rate's link before its first cell (``"full"``, ``"quick"``:
            fewer sizes) or not (``"off"``); see the module docstring.
        samples: boundary-sampling fractions (``--boundary-sample``): each graph and hybrid
            cell is run with every one.
        accuracy_budget: the planner's budget (points) when ``planner.md`` scores its choice
            of sampling.

    Returns:
        (rows, the sweep's directory).
    """
    for flag, vals in (("--rates", rates), ("--modes", modes), ("--graphs", graphs), ("--models", models),
                       ("--wires", wires), ("--samples", samples)):
        if not vals:
            raise CL.ClusterError(f"{flag}: give at least one (comma-separated)")
    cells = sweep_cells(rates, modes, graphs, models, wires, samples)
    if network not in ("full", "quick", "off"):
        raise CL.ClusterError(f"--network must be full, quick or off, got {network!r}")
    world = hosts * ranks_per_host
    for m in modes:
        mode_flags(m, world)  # fail before the first cell, not in the middle
    for cell in cells:  # every cell's flags as gnnpipe-train reads them, before the first runs
        check_train_args(_cell_args(cell, layers, hidden, epochs, world, extra), f"sweep cell {_cell_name(cell, layers)}")
    d = Path(out) / time.strftime("sweep-%Y%m%d-%H%M%S")
    d.mkdir(parents=True, exist_ok=True)
    rows = []
    links: dict[str, dict[str, Any]] = {}
    for cell in cells:
        if network != "off" and hosts >= 2 and cell["rate"] not in links:
            links[cell["rate"]] = measure_link(cell["rate_bps"], hosts, d / "network", quick=network == "quick")
        name = _cell_name(cell, layers)
        args = _cell_args(cell, layers, hidden, epochs, world, extra)
        spec = CL.ClusterSpec(hosts, cell["rate_bps"], CL.parse_delay(delay), ranks_per_host)
        try:
            row = {**cell, "layers": layers, "hidden": hidden,
                   **run_job(spec, args, d / "runs" / name, launcher, timeout_s)}
        except CL.ClusterError as e:
            row = {**cell, "layers": layers, "hidden": hidden, "error": str(e)[:2000], **machine_load()}
            log.warning("cell %s failed: %s", name, str(e).splitlines()[0])
        row["cell"] = name
        if links.get(cell["rate"]):
            row["network"] = links[cell["rate"]]
        rows.append(row)
        with open(d / "rows.jsonl", "a") as f:
            f.write(json.dumps(row) + "\n")
    md = summarize(rows)
    C.write_results(d, rows, md, {"hosts": hosts, "ranks_per_host": ranks_per_host, "delay": delay,
                                  "epochs": epochs, "launcher": launcher})
    plot(rows, d / "epoch_vs_rate.png", predict=predict)
    if predict is not None:
        (d / "planner.md").write_text(score_planner(rows, predict, accuracy_budget)[0] + "\n")
    return rows, d


def measure_link(rate_bps: int | None, hosts: int, out: Path, quick: bool = False) -> dict[str, Any]:
    """Measure the emulated link at ``rate_bps`` among ``hosts`` hosts (one rank each) and
    write the whole fit to ``out/<rate>.json``.

    Returns:
        what the predictor takes (``bw_bytes_s``, ``latency_s``, ``a2a_factor``) and the load,
        or ``{}`` when the measurement failed (logged, and its error written instead: the
        sweep goes on with the nominal link).
    """
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{CL.rate_text(rate_bps)}.json"
    try:
        fit = netcal.measure_network(rate_bps, hosts, quick=quick)
    except GnnpipeError as e:
        log.warning("network at %s not measured: %s", CL.rate_text(rate_bps), str(e).splitlines()[0])
        path.write_text(json.dumps({"rate_bps": rate_bps, "hosts": hosts, "error": str(e)[:2000]}, indent=1) + "\n")
        return {}
    path.write_text(json.dumps(asdict(fit), indent=1) + "\n")
    log.info("network at %s: %.1f Mbit/s, latency %.0f us, all-to-all x%.2f", CL.rate_text(rate_bps),
             fit.bw_bytes_s * 8 / 1e6, fit.latency_s * 1e6, fit.a2a_factor)
    return {"bw_bytes_s": fit.bw_bytes_s, "latency_s": fit.latency_s, "a2a_factor": fit.a2a_factor,
            "load1": list(fit.load1)}


def score_planner(rows: Sequence[Mapping[str, Any]], predict: PredictFn,
                  accuracy_budget: float = DEFAULT_ACCURACY_BUDGET) -> tuple[str, dict]:
    """How the cost model did on a sweep: per (graph, model, link, wire, sample) group, the mode the
    model ranks first among the group's measured cells against the measured fastest; per
    cell, the predicted epoch against the measured one.

    Returns:
        (a markdown section: the groups' table and the counts, ``counts``: ``groups``,
        ``hits``, ``cells``, ``within_25``, and ``wins`` by measured fastest mode).
    """
    groups: dict[tuple, list] = {}
    cells = within = 0
    for r in rows:
        if "error" in r:
            continue
        pred = predict(r, r.get("rate_bps"))
        if pred is None:
            continue
        cells += 1
        within += abs(pred / r["epoch_s"] - 1.0) <= 0.25
        key = (r.get("graph"), r.get("model"), r["rate"], _variant(r))
        groups.setdefault(key, []).append((r.get("mode"), r["epoch_s"], pred))
    table, hits, wins = [], 0, {}
    for (graph, model, rate, wire), cs in groups.items():
        if len(cs) < 2:
            continue
        fastest = min(cs, key=lambda c: c[1])[0]
        chosen = min(cs, key=lambda c: c[2])[0]
        hits += fastest == chosen
        wins[fastest] = wins.get(fastest, 0) + 1
        table.append([graph, model, rate, wire, fastest, chosen, "✓" if fastest == chosen else "✗",
                      "  ".join(f"{m} {t:.2f}/{p_:.2f}" for m, t, p_ in cs)])
    counts = {"groups": len(table), "hits": hits, "cells": cells, "within_25": within, "wins": wins}
    md = C.md_table(["graph", "model", "link", "wire", "measured fastest", "model's first", "", "mode measured/predicted s"],
                    table)
    md += (f"\n\nThe model's first choice is the measured fastest in {hits} of {len(table)} groups; "
           f"predicted epochs are within 25 % of the measured in {within} of {cells} cells. "
           f"Measured fastest: " + ", ".join(f"{m} in {n}" for m, n in sorted(wins.items())) + ".")
    wire_md, wire_counts = score_wire_choice([r for r in rows if _sample(r) == 1.0], predict)
    if wire_md:
        md += "\n\n" + wire_md
        counts["wire"] = wire_counts
    sample_md, sample_counts = score_sample_choice(rows, predict, accuracy_budget)
    if sample_md:
        md += "\n\n" + sample_md
        counts["sample"] = sample_counts
    return md, counts


def score_sample_choice(rows: Sequence[Mapping[str, Any]], predict: PredictFn,
                        accuracy_budget: float = DEFAULT_ACCURACY_BUDGET) -> tuple[str, dict]:
    """The planner's choice of (mode, boundary-sampling fraction) per (graph, model, link,
    wire) on a sweep with sampled cells, against the measured epochs.

    The candidates are the fractions ``gnnpipe-plan --accuracy-budget`` ranks for the
    model at its depth (:func:`gnnpipe.cost.sample_choices`: 1, and a measured fraction
    whose expected loss is within the budget); the planner's order is
    :func:`gnnpipe.cost.planner.rank_key`'s (a sampled cell counts
    :data:`gnnpipe.cost.WIRE_MIN_GAIN` slower); the measured fastest is taken over the same
    candidates. A group whose model the budget refuses sampling still counts: its choice is
    among the cells with every row.

    Returns:
        ("" when no group has a sampled cell, else a markdown section), ``counts``:
        ``groups``, ``hits`` (same mode and fraction as the fastest), ``sampled_chosen``,
        ``refused`` (groups where the budget left sampling out) and ``regret`` (the
        largest chosen ÷ fastest measured epoch).
    """
    groups: dict[tuple, list] = {}
    for r in rows:
        if "error" in r:
            continue
        pred = predict(r, r.get("rate_bps"))
        if pred is not None:
            groups.setdefault((r.get("graph"), r.get("model"), r["rate"], r.get("wire", "float32")), []).append(
                (r.get("mode"), _sample(r), r["epoch_s"], pred, int(r.get("layers", 1))))
    table, hits, sampled, refused, regret = [], 0, 0, 0, 1.0
    for (graph, model, rate, wire), cs in groups.items():
        if all(c[1] == 1.0 for c in cs):
            continue
        allowed, _ = sample_choices(str(model), accuracy_budget, layers=cs[0][4])
        cands = [c for c in cs if c[1] in allowed]
        if len(cands) < 2:  # nothing to choose between: not a group of the table, nor a refusal
            continue
        refused += len(allowed) == 1
        fastest = min(cands, key=lambda c: c[2])
        chosen = min(cands, key=lambda c: c[3] * (1.0 + WIRE_MIN_GAIN if c[1] < 1.0 or wire != "float32" else 1.0))
        every = min((c for c in cands if c[1] == 1.0), key=lambda c: c[2], default=None)
        hits += fastest[:2] == chosen[:2]
        sampled += chosen[1] < 1.0
        ratio = chosen[2] / fastest[2]
        regret = max(regret, ratio)
        table.append([graph, model, rate, wire, f"{fastest[0]} P={fastest[1]:g}", f"{fastest[2]:.3f}",
                      f"{chosen[0]} P={chosen[1]:g}", f"{chosen[2]:.3f}", f"{ratio:.2f}",
                      "–" if every is None else f"{every[0]} {every[2]:.3f}"])
    if not table:
        return "", {}
    counts = {"groups": len(table), "hits": hits, "sampled_chosen": sampled, "refused": refused, "regret": regret}
    md = (f"Boundary-sampling choice (the fractions the planner ranks under --accuracy-budget {accuracy_budget:g} "
          f"for each model at its depth; a sampled cell ranks as if {WIRE_MIN_GAIN:.0%} slower):\n\n")
    md += C.md_table(["graph", "model", "link", "wire", "measured fastest", "s", "planner's first", "measured s",
                      "chosen ÷ fastest", "fastest with every row, s"], table)
    md += (f"\n\nThe planner's first (mode, fraction) is the measured fastest in {hits} of {len(table)} groups; "
           f"it chose sampling in {sampled}; its choice is at most {regret:.2f}× the fastest measured epoch"
           + (f"; in {refused} the budget left sampling out (the choice is then among every-row cells)" if refused
              else "") + ".")
    return md, counts


def score_wire_choice(rows: Sequence[Mapping[str, Any]], predict: PredictFn,
                      accuracy_budget: float | None = None) -> tuple[str, dict]:
    """The planner's choice of (mode, wire) per (graph, model, link) on a sweep with several
    wire formats, against the measured epochs.

    The planner's order is :func:`gnnpipe.cost.planner.rank_key`'s (a lossy format counts
    :data:`gnnpipe.cost.WIRE_MIN_GAIN` slower) over the formats ``gnnpipe-plan --wire auto``
    ranks within ``accuracy_budget`` (default: the planner's); the measured fastest is taken
    over the same formats. ``chosen ÷ fastest`` is the measured epoch of the planner's first
    choice over the fastest measured one (1.00: it chose the fastest).

    Returns:
        ("" when no group has two wire formats, else a markdown section), ``counts``:
        ``groups``, ``hits`` (same mode and wire as the fastest), ``lossy_chosen`` (groups
        where the planner chose a lossy format), and ``regret`` (the largest chosen ÷ fastest).
    """
    allowed, _ = wire_choices("auto", accuracy_budget)
    groups: dict[tuple, list] = {}
    for r in rows:
        wire = r.get("wire", "float32")
        if "error" in r or wire not in allowed:
            continue
        pred = predict(r, r.get("rate_bps"))
        if pred is None:
            continue
        groups.setdefault((r.get("graph"), r.get("model"), r["rate"]), []).append(
            (r.get("mode"), wire, r["epoch_s"], pred))
    table, hits, lossy, regret = [], 0, 0, 1.0
    for (graph, model, rate), cs in groups.items():
        if len({c[1] for c in cs}) < 2:
            continue
        fastest = min(cs, key=lambda c: c[2])
        chosen = min(cs, key=lambda c: c[3] * (1.0 + WIRE_MIN_GAIN if c[1] != "float32" else 1.0))
        best32 = min((c for c in cs if c[1] == "float32"), key=lambda c: c[2], default=None)
        hits += fastest[:2] == chosen[:2]
        lossy += chosen[1] != "float32"
        ratio = chosen[2] / fastest[2]
        regret = max(regret, ratio)
        table.append([graph, model, rate, f"{fastest[0]} {fastest[1]}", f"{fastest[2]:.3f}",
                      f"{chosen[0]} {chosen[1]}", f"{chosen[2]:.3f}", f"{ratio:.2f}",
                      "–" if best32 is None else f"{best32[0]} {best32[2]:.3f}"])
    if not table:
        return "", {}
    counts = {"groups": len(table), "hits": hits, "lossy_chosen": lossy, "regret": regret}
    md = ("Wire choice (formats within the planner's accuracy budget: " + ", ".join(allowed) + "; a lossy "
          f"format ranks as if {WIRE_MIN_GAIN:.0%} slower):\n\n")
    md += C.md_table(["graph", "model", "link", "measured fastest", "s", "planner's first", "measured s",
                      "chosen ÷ fastest", "fastest float32, s"], table)
    md += (f"\n\nThe planner's first (mode, wire) is the measured fastest in {hits} of {len(table)} groups; "
           f"it chose a lossy format in {lossy}; its choice is at most {regret:.2f}× the fastest measured epoch.")
    return md, counts


def summarize(rows: Sequence[Mapping[str, Any]]) -> str:
    """A markdown table: one line per cell (epoch time, breakdown, MiB per epoch, load) and
    its speed-up over graph parallelism in float32 on the same graph, model and link
    (``G f32 ÷ cell``: above 1, the cell is faster)."""
    ref = {(r.get("graph"), r.get("model"), r["rate"]): r["epoch_s"] for r in rows
           if "error" not in r and r.get("mode") == "graph" and _variant(r) == "float32"}
    table = []
    for r in rows:
        head = [r.get("graph", "–"), r.get("model", "–"), r.get("mode", "–"), _variant(r), r["rate"]]
        if "error" in r:
            table.append([*head, "failed", "", "", "", "", "", ""])
            continue
        g = ref.get((r.get("graph"), r.get("model"), r["rate"]))
        table.append([*head, f"{r['epoch_s']:.3f}",
                      f"{r['compute_s']:.3f}", f"{r['comm_s']:.3f}", f"{r['bubble_s']:.3f}",
                      f"{r['bytes_train'] / 2**20:.2f}", f"{g / r['epoch_s']:.2f}" if g else "",
                      f"{r['load1_before']:.1f}→{r['load1_after']:.1f}/{r['cores']}"])
    return C.md_table(["graph", "model", "mode", "wire", "link", "epoch s", "compute s", "comm s", "bubble s",
                       "MiB/epoch", "G f32 ÷ cell", "load/cores"], table)


def plot(rows: Sequence[Mapping[str, Any]], path: Path, predict: PredictFn | None = None) -> Path:
    """Epoch time against link rate, one panel per (graph, model), one colour per mode.

    Measured cells are dots joined by a thin line; ``predict`` (when given) adds a dashed
    line per mode. The unshaped cells sit at the right, one step past the fastest rate,
    labelled ``unshaped``. A dotted vertical line marks where graph and pipeline change order
    (float32). Lossy wire formats are drawn in the mode's colour, open markers on a dotted
    line (no predicted line); boundary-sampled cells likewise, crosses on a dash-dotted line.
    Up to 3 panels a row, log time axis; one legend below the panels.

    Returns:
        the PNG's path.
    """
    plt = C.pyplot()
    from matplotlib.ticker import LogLocator, NullFormatter

    every = [r for r in rows if "error" not in r]
    ok = [r for r in every if _sample(r) == 1.0]  # the sampled cells get lines of their own
    panels = list(dict.fromkeys((r["graph"], r["model"]) for r in every)) or [("none", "")]
    shaped = sorted({r["rate_bps"] for r in every if r["rate_bps"]}) or [10**8]
    x_unshaped = shaped[-1] * 4  # a slot to the right of the fastest shaped rate

    def x_of(bps):
        return (bps if bps else x_unshaped) / 1e6

    # at most 3 panels a row; epoch times span 1-80 s, so a log axis shows the fast modes too
    ncol = min(3, len(panels))
    nrow = -(-len(panels) // ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(4.6 * ncol, 3.3 * nrow + 0.4), squeeze=False, layout="constrained")
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    for ax, (g, m) in zip(axes.flat, panels):
        pts: dict[str, list[tuple[float, float]]] = {}
        for mode in MODES:
            for wire in WIRE_FORMATS[1:]:
                rs = sorted((r for r in ok if (r["graph"], r["model"], r["mode"], r.get("wire", "float32"))
                             == (g, m, mode, wire)), key=lambda r: x_of(r["rate_bps"]))
                if rs:
                    ax.plot(*zip(*[(x_of(r["rate_bps"]), r["epoch_s"]) for r in rs]), WIRE_STYLE[wire],
                            color=MODE_COLORS[mode], lw=0.8, ms=4, mfc="white", label=f"{mode} --wire {wire}")
            for variant in sorted({_variant(r) for r in every if _sample(r) < 1.0}):
                rs = sorted((r for r in every if (r["graph"], r["model"], r["mode"], _variant(r)) == (g, m, mode, variant)),
                            key=lambda r: x_of(r["rate_bps"]))
                if rs:
                    ax.plot(*zip(*[(x_of(r["rate_bps"]), r["epoch_s"]) for r in rs]), "x-.",
                            color=MODE_COLORS[mode], lw=0.8, ms=5, label=f"{mode} {variant}")
            rs = sorted((r for r in ok if (r["graph"], r["model"], r["mode"], r.get("wire", "float32"))
                         == (g, m, mode, "float32")), key=lambda r: x_of(r["rate_bps"]))
            if not rs:
                continue
            xy = [(x_of(r["rate_bps"]), r["epoch_s"]) for r in rs]
            pts[mode] = xy
            ax.plot(*zip(*xy), "o-", color=MODE_COLORS[mode], lw=0.8, ms=4, label=f"{mode} measured")
            if predict is not None:
                pr = [(x_of(r["rate_bps"]), predict(r, r["rate_bps"])) for r in rs]
                pr = [(x, y) for x, y in pr if y is not None]
                if pr:
                    ax.plot(*zip(*pr), "--", color=MODE_COLORS[mode], lw=1.2, label=f"{mode} predicted")
        for x in crossovers(pts):
            ax.axvline(x, color="grey", ls=":", lw=1)
        ax.set_xscale("log")
        ticks = [x_of(b) for b in shaped] + [x_unshaped / 1e6]
        ax.set_xticks(ticks)
        ax.set_xticklabels([f"{b / 1e6:g}" for b in shaped] + ["unshaped"], fontsize=7)
        ax.minorticks_off()
        first = next((r for r in every if (r["graph"], r["model"]) == (g, m)), {})
        shape = f"{m}-{first['layers']} d={first['hidden']}" if "layers" in first else m
        hosts = f", {first['hosts']} hosts × {first.get('ranks_per_host', 1)} rank" if "hosts" in first else ""
        ax.set_title(f"{g} {shape}{hosts}", fontsize=9)
        ax.set_xlabel("link rate per host (Mbit/s)")
        ax.set_ylabel("epoch time (s, log)")
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))  # 1 2 5 10 20 50: plain numbers
        ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.grid(True, which="major", axis="y", lw=0.3, alpha=0.5)
    handles, labels = axes[0][0].get_legend_handles_labels()
    C.legend_below(fig, handles, labels, ncol=3)
    return C.save_fig(fig, path)


# --------------------------------------------------------------------------- CLI
def build_parser() -> argparse.ArgumentParser:
    ap = ArgumentParser(prog="gnnpipe-bench cluster", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--hosts", type=int, default=4, help="emulated hosts (default 4)")
    ap.add_argument("--ranks-per-host", type=int, default=1, help="ranks on each host (default 1)")
    ap.add_argument("--rate", default="unshaped", help="link rate per host, both directions, e.g. 200mbit (default unshaped)")
    ap.add_argument("--delay", default=None, help="one-way delay on each host's link, e.g. 1ms (needs sch_netem)")
    ap.add_argument("--launcher", choices=("torch", "mpi"), default="torch",
                    help="torch.distributed environment under ip netns exec (default), or MPICH hydra's mpirun")
    ap.add_argument("--out", type=Path, default=None,
                    help="run directory of one job (default results/cluster/run-<time>-<rate>); results root of a sweep "
                         "(default results/cluster)")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds per job (default 3600)")
    ap.add_argument("--sweep", action="store_true", help="run the grid of --rates x --modes x --graphs x --models")
    ap.add_argument("--rates", default=",".join(DEFAULT_RATES), help="sweep: link rates, comma-separated")
    ap.add_argument("--modes", default=",".join(MODES), help="sweep: modes, comma-separated")
    ap.add_argument("--graphs", default="squirrel,physics,reddit-shaped", help=f"sweep: graphs ({', '.join(GRAPHS)})")
    ap.add_argument("--models", default="gcn,gcnii", help="sweep: models, comma-separated")
    ap.add_argument("--wires", default="float32",
                    help=f"sweep: wire formats of boundary messages, comma-separated from {','.join(WIRE_FORMATS)} "
                         "(default float32)")
    ap.add_argument("--samples", default="1",
                    help="sweep: boundary-sampling fractions (--boundary-sample) of the graph and hybrid cells, "
                         "comma-separated, e.g. 1,0.1 (default 1: every row)")
    ap.add_argument("--accuracy-budget", type=float, default=DEFAULT_ACCURACY_BUDGET,
                    help="sweep and --plot: the planner's accuracy budget (points) when planner.md scores its "
                         f"choice of sampling (default {DEFAULT_ACCURACY_BUDGET:g})")
    ap.add_argument("--layers", type=int, default=32, help="sweep: layers (default 32)")
    ap.add_argument("--hidden", type=int, default=100, help="sweep: hidden width (default 100)")
    ap.add_argument("--epochs", type=int, default=6, help="sweep: epochs per cell, the first not counted (default 6)")
    ap.add_argument("--cleanup", action="store_true",
                    help="remove leftover namespaces of dead runs (with --all: of every run) and exit")
    ap.add_argument("--all", action="store_true", help="--cleanup: also clusters of processes still running")
    ap.add_argument("--plot", type=Path, default=None,
                    help="redraw a sweep's plot from its rows.jsonl, score the cost model on it (planner.md) and exit")
    ap.add_argument("--profile", default="cpu-this-machine",
                    help="sweep and --plot: the cost model's profile for the predicted lines (default cpu-this-machine)")
    ap.add_argument("--no-predict", action="store_true", help="sweep and --plot: measured points only")
    ap.add_argument("--network", choices=("full", "quick", "off"), default="full",
                    help="sweep: measure each rate's link before its cells, for the predicted lines "
                         "(default full; quick: fewer sizes; off: the nominal rate / 8)")
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    """``gnnpipe-bench cluster ...``; returns the exit status. Bad arguments and failures
    are one line (:func:`gnnpipe.cli.run_cli`)."""
    return run_cli(_entry, argv, prog="gnnpipe-bench cluster")


def _entry(argv: Sequence[str]) -> int:
    argv = list(argv)
    train_args: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, train_args = argv[:i], argv[i + 1:]
    args = build_parser().parse_args(argv)
    if not (math.isfinite(args.timeout) and args.timeout > 0):
        raise GnnpipeError(f"--timeout: expected a positive number of seconds, got {args.timeout}")
    if not (math.isfinite(args.accuracy_budget) and args.accuracy_budget >= 0):
        raise GnnpipeError(f"--accuracy-budget: expected points of accuracy >= 0, got {args.accuracy_budget}")
    if args.out is not None:
        C.check_results_root(args.out)
    return _main(args, train_args)


def check_train_args(train_args: Sequence[str], where: str) -> None:
    """Parse a job's gnnpipe-train arguments as the trainer will (nothing runs), so a bad
    flag is one line now rather than every rank's log after the cluster was built.

    Raises:
        GnnpipeError: naming ``where`` (the job or cell), with gnnpipe-train's own line.
    """
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            parse_config(list(train_args))
    except SystemExit:  # argparse's usage error, already one line
        lines = err.getvalue().strip().splitlines()
        raise GnnpipeError(f"{where}: {lines[-1] if lines else 'refused by gnnpipe-train'}") from None
    except GnnpipeError as e:
        raise GnnpipeError(f"{where}: {e}") from None


def read_rows(path: Path) -> list[dict]:
    """A sweep's ``rows.jsonl`` (for ``--plot``).

    Raises:
        GnnpipeError: missing, not a file, not JSON lines of objects, or no rows.
    """
    path = Path(path)
    if not path.is_file():
        raise GnnpipeError(f"--plot {path}: {'a folder' if path.is_dir() else 'no such file'}; expected a sweep's "
                           "rows.jsonl (results/cluster/sweep-*/rows.jsonl)")
    rows = []
    try:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if line.strip():
                row = json.loads(line)
                if not isinstance(row, dict) or "mode" not in row or "rate" not in row:
                    raise GnnpipeError(f"--plot {path}: line {n} is not a sweep row (no mode and rate)")
                rows.append(row)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise GnnpipeError(f"--plot {path}: not a sweep's rows.jsonl ({e})") from None
    if not rows:
        raise GnnpipeError(f"--plot {path}: no rows in it")
    return rows


def _split(s: str) -> list[str]:
    return [x.strip() for x in s.split(",") if x.strip()]


def _fractions(s: str) -> list[float]:
    """``--samples``: comma-separated fractions in (0, 1]."""
    out = []
    for x in _split(s):
        try:
            v = float(x)
        except ValueError:
            v = float("nan")
        if not 0.0 < v <= 1.0:
            raise GnnpipeError(f"--samples {s!r}: {x!r} is not a fraction in (0, 1] (1: every boundary row)")
        out.append(v)
    return out


def _main(args: argparse.Namespace, train_args: list[str]) -> int:
    if args.cleanup:
        gone = CL.cleanup(only_dead=not args.all)
        print(f"removed {len(gone)} namespaces" + (f": {', '.join(gone)}" if gone else ""))
        return 0
    if args.plot is not None:
        rows = read_rows(args.plot)
        predictor = None if args.no_predict else make_predictor(args.profile)
        print(plot(rows, args.plot.parent / "epoch_vs_rate.png", predict=predictor))
        if predictor is not None:  # and how the cost model ranked the measured cells
            md = score_planner(rows, predictor, args.accuracy_budget)[0]
            (args.plot.parent / "planner.md").write_text(md + "\n")
            print(md)
        return 0
    if args.sweep:
        rows, d = sweep(args.out or Path("results/cluster"), _split(args.rates), _split(args.modes),
                        _split(args.graphs), _split(args.models), hosts=args.hosts, ranks_per_host=args.ranks_per_host,
                        delay=args.delay, layers=args.layers, hidden=args.hidden, epochs=args.epochs,
                        extra=train_args, launcher=args.launcher, timeout_s=args.timeout,
                        predict=None if args.no_predict else make_predictor(args.profile), wires=_split(args.wires),
                        network=args.network, samples=_fractions(args.samples), accuracy_budget=args.accuracy_budget)
        print(summarize(rows))
        print(f"\n(results in {d}/)")
        return 0 if all("error" not in r for r in rows) else 1
    if not train_args:
        raise CL.ClusterError("no gnnpipe-train arguments: put them after '--', e.g. "
                              "gnnpipe-bench cluster --hosts 4 --rate 200mbit -- --config tiny --mode graph")
    spec = CL.ClusterSpec(args.hosts, CL.parse_rate(args.rate), CL.parse_delay(args.delay), args.ranks_per_host)
    check_train_args(train_args, "gnnpipe-train arguments after '--'")
    out = args.out or Path("results/cluster") / time.strftime(f"run-%Y%m%d-%H%M%S-{CL.rate_text(spec.rate_bps)}")
    r = run_job(spec, train_args, out, args.launcher, args.timeout)
    print(C.md_table(["hosts x ranks", "link", "epoch s (median)", "compute s", "comm s", "bubble s", "MiB/epoch",
                      "load/cores"],
                     [[f"{r['hosts']}x{r['ranks_per_host']}", r["rate"], f"{r['epoch_s']:.3f}", f"{r['compute_s']:.3f}",
                       f"{r['comm_s']:.3f}", f"{r['bubble_s']:.3f}", f"{r['bytes_train'] / 2**20:.2f}",
                       f"{r['load1_before']:.1f}→{r['load1_after']:.1f}/{r['cores']}"]]))
    print(f"\n(run directory {out}/)")
    return 0
