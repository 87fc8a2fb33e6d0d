"""Shared pieces of the benchmarks: running configurations, reading metrics, statistics,
markdown tables, CSV/JSON outputs and plots.

Nothing here prints; the CLI prints the tables these functions return.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from gnnpipe._base import GnnpipeError
from gnnpipe.config import TrainConfig
from gnnpipe.data.load import load_graph_for
from gnnpipe.fsutil import atomic_write_bytes, protected_reason
from gnnpipe.partition.plan import build_plan
from gnnpipe.partition.volume import chunk_halo_sum as _count

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[2]


class BenchError(GnnpipeError):
    """A benchmark could not run (a failed launch, a missing result file)."""


def venv_bin() -> Path:
    """The folder of this interpreter's console scripts (``mpirun``, ``gnnpipe-*``)."""
    return Path(sys.executable).parent


# ----------------------------------------------------------------------------- where
def sub_dir(out: Path, sub: str, quick: bool = False) -> Path:
    """The folder benchmark ``sub`` writes: ``out/sub``, or ``out/sub-quick`` for
    ``--quick`` (a one-minute run must never replace a full run's results).

    Returns:
        the folder (not created).
    """
    return Path(out) / (f"{sub}-quick" if quick else sub)


def check_results_root(out: Path) -> None:
    """Refuse an ``--out`` that is a file or lies under one (before anything runs).

    Raises:
        GnnpipeError: naming the file in the way.
    """
    out = Path(out)
    for anc in [out, *out.parents]:
        if anc.exists():
            if not anc.is_dir():
                raise GnnpipeError(f"--out {out}: {anc} is a file; expected the results folder (default results/)")
            break
    # (what counts is where its subfolders land: inside a dataset, a plan or the package is
    # refused; a checkout's root is fine, its benchmark folders go below it)
    why = protected_reason(out / "sub", include_self=False)
    if why is not None:
        raise GnnpipeError(f"--out {out}: {why}; benchmarks write no results there (default results/)")


def check_only(only: Sequence[str] | None, known: Iterable[str], what: str) -> None:
    """Refuse ``--only`` names a benchmark does not have (a typo used to run nothing and
    write empty results over the earlier ones).

    Raises:
        BenchError: naming the unknown names and the known ones.
    """
    known = list(known)
    bad = [n for n in (only or ()) if n not in known]
    if bad:
        raise BenchError(f"--only: unknown {what} {', '.join(map(repr, bad))} (known: {', '.join(known)})")


# ----------------------------------------------------------------------------- load
def load_snapshot() -> dict:
    """The machine's load now: ``{"load": [1, 5, 15-minute averages], "cpus": cores}``.

    Every benchmark records one before and one after each cell: on a shared machine other
    processes take cores, and a time measured at load 7 on 2 cores says little about the
    model (an ``epoch --quick`` at load 6.9 showed -82 to -92 % prediction errors).
    """
    return {"load": [round(x, 2) for x in os.getloadavg()], "cpus": os.cpu_count() or 1}


def warn_if_loaded(snap: Mapping[str, Any], cell: str, after: Mapping[str, Any] | None = None) -> bool:
    """One line on stderr when the 1-minute load of ``snap`` (or of ``after``, the same
    cell's second snapshot) exceeds the cores; returns whether it did."""
    if after is not None and after["load"][0] > snap["load"][0]:
        snap = after
    if snap["load"][0] > snap["cpus"]:
        print(f"gnnpipe-bench: warning: load {snap['load'][0]:.1f} > {snap['cpus']} cores around {cell}: "
              "its times are inflated by other processes", file=sys.stderr, flush=True)
        return True
    return False


def load_fields(outcomes: Iterable[Mapping[str, Any]]) -> dict:
    """The load columns of a result row made of one or more cells (``run_jobs`` outcomes or
    anything with ``load_before`` / ``load_after`` snapshots).

    Returns:
        ``load1_before`` / ``load1_after`` (the largest 1-minute load over the cells),
        ``load_before`` / ``load_after`` (those cells' 1/5/15-minute triples), ``cpu_count``
        and ``under_load`` (a 1-minute load above the cores before or after any cell);
        empty when no cell has a snapshot.
    """
    snaps = [(o["load_before"], o["load_after"]) for o in outcomes if o.get("load_before") and o.get("load_after")]
    if not snaps:
        return {}
    b = max((s[0] for s in snaps), key=lambda x: x["load"][0])
    a = max((s[1] for s in snaps), key=lambda x: x["load"][0])
    cpus = b["cpus"]
    return {"load1_before": b["load"][0], "load1_after": a["load"][0], "load_before": b["load"],
            "load_after": a["load"], "cpu_count": cpus, "under_load": max(b["load"][0], a["load"][0]) > cpus}


def timed_cell(fn: Callable[[], Any], cell: str) -> tuple[Any, dict]:
    """Run one in-process (or single-launch) cell with load snapshots around it.

    Returns:
        (``fn()``, ``{"load_before": snapshot, "load_after": snapshot}``), warning on stderr
        when either is above the cores (one line per cell).
    """
    before = load_snapshot()
    out = fn()
    after = load_snapshot()
    warn_if_loaded(before, cell, after)
    return out, {"load_before": before, "load_after": after}


# ----------------------------------------------------------------------------- running
@dataclass
class Job:
    """One ``gnnpipe-train`` configuration.

    Args:
        name: unique within a benchmark (a folder name).
        argv: ``gnnpipe-train`` flags (``--out`` and ``--no-progress`` are added).
        world: ranks (``mpirun -np``).
        meta: anything the benchmark wants back beside the metrics.
    """

    name: str
    argv: list[str]
    world: int
    meta: dict = field(default_factory=dict)


def run_jobs(jobs: Sequence[Job], run_dir: Path, fresh: bool = False, timeout_s: float = 3600.0,
             progress: bool = True, desc: str = "runs") -> dict[str, dict]:
    """Run every job under the venv's ``mpirun``; return each one's outcome by name.

    Jobs of one world size share one ``mpirun`` of :mod:`gnnpipe.bench.worker` unless
    ``fresh`` (one ``mpirun`` per job: each job's ``peak_rss_mb`` is then its own).

    Args:
        jobs: the configurations.
        run_dir: each job writes into ``run_dir/<name>/``; earlier contents are replaced.
        fresh: one process group per job.
        timeout_s: limit per ``mpirun``.
        progress: tqdm bar on stderr, advanced as jobs finish.
        desc: the bar's label.

    Returns:
        ``{name: {"metrics": [per-epoch dicts], "summary": dict | None, "error": str | None,
        "out": path, "load_before": snapshot, "load_after": snapshot}}``: the machine's load
        (:func:`load_snapshot`) when the job's launch began or the job before it in the same
        launch finished, and when it finished (a line on stderr when above the cores).
    """

    run_dir = Path(run_dir)
    run_dir = Path(run_dir).resolve()  # the ranks run in the checkout: a relative path would not reach them
    run_dir.mkdir(parents=True, exist_ok=True)
    for j in jobs:
        out = run_dir / j.name
        if out.exists():
            shutil.rmtree(out)
    groups: list[list[Job]] = []
    if fresh:
        groups = [[j] for j in jobs]
    else:
        by_world: dict[int, list[Job]] = {}
        for j in jobs:
            by_world.setdefault(j.world, []).append(j)
        groups = list(by_world.values())
    bar = None
    loads: dict[str, dict] = {}
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(jobs), desc=desc, unit="run", file=sys.stderr)
    try:
        for gi, group in enumerate(groups):
            spec = [{"name": j.name, "argv": j.argv, "out": str(run_dir / j.name)} for j in group]
            jf = run_dir / f"jobs-{gi}.json"
            jf.write_text(json.dumps(spec, indent=1))
            cmd = [str(venv_bin() / "mpirun"), "-np", str(group[0].world), sys.executable, "-m",
                   "gnnpipe.bench.worker", str(jf)]
            env = dict(os.environ, OMP_NUM_THREADS="1")
            errf = open(run_dir / f"jobs-{gi}.stderr", "w")
            p = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=errf, stderr=subprocess.STDOUT,
                                 start_new_session=True)
            t0 = time.time()
            done: set[str] = set()
            # Jobs of one launch run one after another: a job's "before" is the launch's
            # start or the previous job's end (the 0.5 s polling makes that approximate).
            last = load_snapshot()
            try:
                while True:
                    rc = p.poll()
                    for j in group:
                        if j.name not in done and _finished(run_dir / j.name):
                            done.add(j.name)
                            now = load_snapshot()
                            loads[j.name] = {"load_before": last, "load_after": now}
                            warn_if_loaded(last, j.name, now)
                            last = now
                            if bar is not None:
                                bar.update(1)
                    if rc is not None:
                        break
                    if time.time() - t0 > timeout_s:
                        _kill_group(p)
                        break
                    time.sleep(0.5)
            finally:
                if p.poll() is None:
                    _kill_group(p)
                errf.close()
            if bar is not None:
                bar.update(len(group) - len(done))
            if p.returncode not in (0, None):
                log.warning("mpirun exited %s; see %s", p.returncode, run_dir / f"jobs-{gi}.stderr")
    finally:
        if bar is not None:
            bar.close()
    results = {}
    for j in jobs:
        out = run_dir / j.name
        err = None
        if (out / "error.txt").exists():
            err = (out / "error.txt").read_text().strip()
        elif not (out / "summary.json").exists():
            tail = ""
            for f in run_dir.glob("jobs-*.stderr"):
                tail = f.read_text()[-1500:] if f.stat().st_size else tail
            err = f"no summary.json (the run died or timed out); stderr tail: {tail}"
        results[j.name] = {
            "metrics": read_metrics(out) if (out / "metrics.jsonl").exists() else [],
            "summary": json.loads((out / "summary.json").read_text()) if (out / "summary.json").exists() else None,
            "error": err, "out": str(out), **loads.get(j.name, {}),
        }
    return results


def _finished(out: Path) -> bool:
    return (out / "summary.json").exists() or (out / "error.txt").exists()


def _kill_group(p: subprocess.Popen) -> None:

    try:
        os.killpg(p.pid, signal.SIGTERM)
        p.wait(10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()


def read_metrics(out: Path) -> list[dict]:
    """The per-epoch records of a run directory's ``metrics.jsonl``.

    Raises:
        BenchError: the file is missing or a line is not JSON (naming the file and line).
    """
    path = Path(out) / "metrics.jsonl"
    if not path.exists():
        raise BenchError(f"{path}: missing (the run wrote no metrics)")
    recs = []
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip():
            try:
                recs.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise BenchError(f"{path}:{i}: not JSON ({e})") from None
    return recs


def measured_bytes(rec: Mapping[str, Any]) -> dict[str, int]:
    """One epoch's bytes by the cost model's categories: ``halo``, ``way``, ``pipe``,
    ``input`` (``--shared-input``), ``allreduce`` (:attr:`gnnpipe.cost.Prediction.bytes`).

    Evaluation, control and metric traffic are left out: the model predicts training. A
    category the record lacks counts 0 (records written before the hybrid's way link had
    its own ``way_fwd``/``way_bwd`` booked it as ``halo``).
    """
    b = rec["bytes_sent"]
    return {"halo": int(b.get("halo_fwd", 0) + b.get("halo_bwd", 0)),
            "way": int(b.get("way_fwd", 0) + b.get("way_bwd", 0)),
            "pipe": int(b.get("pipe_act", 0) + b.get("pipe_grad", 0)),
            "input": int(b.get("input_fwd", 0) + b.get("input_bwd", 0)),
            "allreduce": int(b.get("allreduce", 0))}


# ----------------------------------------------------------------------------- statistics
def geomean(xs: Iterable[float]) -> float:
    """Geometric mean of positive numbers (``exp(mean(log x))``).

    Raises:
        BenchError: empty input or a value that is not positive and finite.
    """
    vals = list(xs)
    if not vals:
        raise BenchError("geomean: no values")
    for v in vals:
        if not (v > 0 and math.isfinite(v)):
            raise BenchError(f"geomean: values must be positive and finite, got {v!r}")
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def median_spread(xs: Sequence[float]) -> tuple[float, float, float]:
    """(median, min, max) of the samples."""
    if not xs:
        raise BenchError("median_spread: no samples")
    return statistics.median(xs), min(xs), max(xs)


def planner_hits(rows: Sequence[Mapping[str, Any]], group: Sequence[str], config: str = "config",
                 predicted: str = "predicted_s", measured: str = "measured_s",
                 first_choice: Mapping[tuple, str] | None = None) -> list[dict]:
    """For every group of rows, is the planner's first choice the fastest measured one?

    Args:
        rows: one row per (group, configuration) with the predicted and measured times.
        group: keys that make a group (e.g. ``("dataset", "model", "world")``).
        config: the key naming the configuration.
        predicted, measured: keys of the two times.
        first_choice: the planner's first choice per group (its key tuple); by default
            the row with the smallest prediction in the group.

    Returns:
        one dict per group: the group's keys, ``first_choice``, ``fastest`` (smallest
        measured), ``hit`` (whether they are the same configuration), ``loss`` (measured
        time of the first choice over the fastest measured time, 1.0 on a hit).
    """
    groups: dict[tuple, list[Mapping[str, Any]]] = {}
    for r in rows:
        groups.setdefault(tuple(r[k] for k in group), []).append(r)
    out = []
    for key, rs in groups.items():
        fastest = min(rs, key=lambda r: r[measured])
        if first_choice is not None and key in first_choice:
            fc = first_choice[key]
        else:
            fc = min(rs, key=lambda r: r[predicted])[config]
        fc_rows = [r for r in rs if r[config] == fc]
        loss = fc_rows[0][measured] / fastest[measured] if fc_rows else float("nan")
        out.append({**dict(zip(group, key)), "first_choice": fc, "fastest": fastest[config],
                    "hit": fc == fastest[config], "loss": loss})
    return out


def rel_error(pred: float, meas: float) -> float:
    """(predicted − measured) / measured."""
    return (pred - meas) / meas


# ----------------------------------------------------------------------------- outputs
def md_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A GitHub markdown table; floats get 3 significant decimals unless preformatted."""
    def fmt(v: Any) -> str:
        if isinstance(v, float):
            if math.isnan(v):
                return "–"
            return f"{v:.3g}" if abs(v) < 1000 else f"{v:,.0f}"
        if isinstance(v, bool):
            return "yes" if v else "no"
        if isinstance(v, int):
            return f"{v:,}"
        return str(v)

    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(fmt(v) for v in r) + " |" for r in rows]
    return "\n".join(lines)


def write_results(out_dir: Path, rows: Sequence[Mapping[str, Any]], summary_md: str, extra: Mapping | None = None) -> None:
    """``results.csv``, ``results.json`` and ``summary.md`` in ``out_dir``.

    The CSV holds the scalar columns (union over rows, first-seen order); the JSON holds
    the rows whole plus ``extra`` (settings, summary figures) and the date.

    Raises:
        BenchError: no rows (earlier results in ``out_dir`` are kept rather than replaced
            by empty ones).
    """
    out_dir = Path(out_dir)
    if not rows:
        raise BenchError(f"no result rows to write; {out_dir} keeps its earlier results")
    out_dir.mkdir(parents=True, exist_ok=True)
    cols: list[str] = []
    for r in rows:
        for k, v in r.items():
            if k not in cols and not isinstance(v, (dict, list)):
                cols.append(k)
    # Each file through a temp file and a rename (fsutil): a full disk leaves the earlier
    # results whole and says so in one line naming the file.
    buf = io.StringIO(newline="")
    w = csv.DictWriter(buf, fieldnames=cols, extrasaction="ignore")
    w.writeheader()
    for r in rows:
        w.writerow({k: r.get(k, "") for k in cols})
    atomic_write_bytes(out_dir / "results.csv", buf.getvalue().encode())
    doc = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "command": " ".join(["gnnpipe-bench", *sys.argv[1:]]),
           **(dict(extra) if extra else {}), "rows": list(rows)}
    atomic_write_bytes(out_dir / "results.json", (json.dumps(doc, indent=1, default=_json_default) + "\n").encode())
    atomic_write_bytes(out_dir / "summary.md", (summary_md.rstrip() + "\n").encode())


def _json_default(o: Any) -> Any:
    if hasattr(o, "item"):
        return o.item()
    return str(o)


# ----------------------------------------------------------------------------- plots
#: One colour per parallel mode and one per model, the same in every plot (Okabe-Ito:
#: distinguishable with colour-blindness and in grey print). A mode and a model never
#: share a plot's colour channel: comm colours models and styles modes with dashes.
MODE_COLORS = {"graph": "#0072B2", "pipeline": "#D55E00", "hybrid": "#009E73"}
MODEL_COLORS = {"gcn": "#0072B2", "sage": "#E69F00", "gat": "#CC79A7", "gcnii": "#D55E00", "resgcn+": "#009E73"}
#: Line style per mode where colour is taken by the model.
MODE_STYLES = {"graph": "-", "pipeline": "--", "hybrid": ":"}
#: Parts of an epoch (stacked bars) and the code paths of the overhead benchmark.
PART_COLORS = {"compute": "#56B4E9", "comm": "#E69F00", "bubble": "#999999"}
PATH_COLORS = {"PyG edge_index": "#999999", "PyG adj_t": "#E69F00", "gnnpipe": "#0072B2", "limit": "#000000"}
#: Text sizes: readable at the width the PNGs are shown in docs/benchmarks.md.
FONT = {"font.size": 9, "axes.titlesize": 10, "axes.labelsize": 9, "xtick.labelsize": 8, "ytick.labelsize": 8,
        "legend.fontsize": 8, "figure.titlesize": 10}


def pyplot():
    """matplotlib.pyplot on the Agg backend (no display needed), with :data:`FONT`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update(FONT)
    return plt


def mode_of(config: str) -> str:
    """The mode of a configuration label (``G4``, ``P4c16``, ``H2x2c8``, ``+bf16`` suffix)."""
    return {"G": "graph", "P": "pipeline", "H": "hybrid"}.get(config[:1], "graph")


def plain_ticks(ax, axis: str = "y") -> None:
    """Plain decimal tick labels on a (log) axis: ``0.37``, not ``3.72×10⁻¹``.

    Major and minor ticks alike (a log axis spanning less than a decade labels only its
    minor ticks, in scientific notation by default).
    """
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    def fmt(v, _pos=None):
        if v <= 0:
            return ""
        return f"{v:,.0f}" if v >= 10 else f"{v:.3g}"

    a = ax.yaxis if axis == "y" else ax.xaxis
    a.set_major_formatter(FuncFormatter(fmt))
    # A narrow log range has one major tick or none: label the minor ticks at 2 and 5
    # times a power of ten (not all eight, which overlap).
    lo, hi = (ax.get_ylim() if axis == "y" else ax.get_xlim())
    if lo > 0 and hi / lo < 100:
        a.set_minor_locator(LogLocator(base=10, subs=(2.0, 3.0, 5.0) if hi / lo < 10 else (2.0, 5.0)))
        a.set_minor_formatter(FuncFormatter(fmt))
    else:
        a.set_minor_formatter(NullFormatter())


def legend_below(fig, handles, labels, ncol: int | None = None) -> None:
    """One legend for the whole figure, below the axes: never over bars or lines, and the
    same for every panel."""
    if not handles:
        return
    fig.legend(handles, labels, loc="outside lower center", ncol=ncol or min(len(handles), 4), frameon=False)


def save_fig(fig, path: Path) -> Path:
    """Save (110 dpi, the whole figure: titles and outside legends included) and close."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    try:
        fig.savefig(buf, format=path.suffix.lstrip(".") or "png", dpi=110, bbox_inches="tight", pad_inches=0.08)
    finally:
        pyplot().close(fig)
    atomic_write_bytes(path, buf.getvalue())  # (a full disk: one line, the earlier plot kept)
    return path


def load_graph(dataset: str, **synth: Any):
    """The graph ``gnnpipe-train --dataset DATASET [--synth-*]`` trains on (same loader)."""

    return load_graph_for(TrainConfig(dataset=dataset, **synth))


def synth_flags(synth: Mapping[str, Any]) -> list[str]:
    """``--synth-nodes`` ... flags for a dict of TrainConfig synth_* fields."""
    out: list[str] = []
    for k, v in synth.items():
        out += ["--" + k.replace("_", "-"), str(v)]
    return out


def topo_flags(topo) -> list[str]:
    """``gnnpipe-train`` flags for a :class:`gnnpipe.dims.ParallelDims`; a pipelined layout's
    epochs all stale (``--exact-every 0``): the epoch, comm, memory and scale benchmarks
    measure the stale epoch, the one the cost model predicts (``gnnpipe-bench tta`` measures
    the default schedule, exact epochs included)."""
    if topo.mode == "graph":
        return ["--mode", "graph"]
    return ["--mode", topo.mode, "--ways", str(topo.ways), "--stages", str(topo.stages), "--chunks", str(topo.chunks),
            "--exact-every", "0"]


def call_quietly(fn: Callable[[], Any]) -> Any:
    """Run ``fn`` with gnnpipe's INFO logging muted (partitioning logs per call)."""
    lg = logging.getLogger("gnnpipe")
    old = lg.level
    lg.setLevel(logging.WARNING)
    try:
        return fn()
    finally:
        lg.setLevel(old)


def chunk_halo_sum(graph, ways: int, chunks: int, seed: int = 0, method: str = "metis") -> int:
    """Σ over ways w and their chunks k of M_{w,k}: distinct neighbours in OTHER ways of
    chunk k's nodes, on the plan ``gnnpipe-train`` builds (same method and seed).

    The rows of other ways the hybrid's chunks read per exchanged layer; they travel once
    per way (:class:`gnnpipe.parallel.pipeline.waylink.WayLink`), so the hybrid's way link bytes follow
    Σ_w M_w instead (:func:`gnnpipe.partition.volume.way_link_bytes`) and this sum over it
    is what per-chunk exchanges would send. The count is
    :func:`gnnpipe.partition.volume.chunk_halo_sum` on the plan.
    """

    plan = call_quietly(lambda: build_plan(graph, ways, chunks, method=method, seed=seed))
    return _count(graph.indptr, graph.indices, plan.part, plan.chunk)
