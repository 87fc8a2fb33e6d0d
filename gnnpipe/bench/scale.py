"""``gnnpipe-bench scale``: epoch time and peak memory per rank against graph size.

R-MAT graphs of growing size (average degree 20: up to 1M nodes / 20M directed edges; 64
features, 8 classes), GCN with 16 layers and d=64 on 4 ranks, in each mode (graph P=4,
pipeline S=4 C=16, hybrid 2×2 C=8). Each graph is generated once with ``gnnpipe-data
synth rmat`` into ``<out>/scale/data/`` and partitioned once per layout with
``gnnpipe-partition`` (METIS by default; ``--method random`` is the cheap fallback; the
table says which was used). Every point runs in its own ``mpirun`` for 2 epochs (the
second is reported) so that ``peak_rss_mb`` is its own, with ``--lean-memory`` (RSS follows
what a rank holds; see :mod:`gnnpipe.parallel.alloc`: epochs are slower for it). A point whose predicted memory
(:func:`gnnpipe.cost.predict`, summed over its 4 ranks on this one machine: :func:`ranks_memory`)
times :data:`MEM_SAFETY` of its mode exceeds 85 % of the memory available now is skipped and marked so, instead of driving the
shared machine out of memory.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Sequence

import numpy as np
import psutil

from gnnpipe.bench import common as C
from gnnpipe.bench.epoch import world_topologies
from gnnpipe.cost import GraphStats, ModelSpec, PartInfo, chunk_facts_of_plan, load_profile, predict
from gnnpipe.data.graph import Graph
from gnnpipe.partition import PartitionPlan
from gnnpipe.partition.stats import group_cut_and_halo

SIZES = (31_250, 62_500, 125_000, 250_000, 1_000_000)
#: A point runs only if this multiple of the predicted memory of its 4 ranks fits in 85 %
#: of the memory available (the memory model counts every term the executors hold; it
#: came within 15 % on the memory and scale benchmarks): a guard for the shared machine,
#: not a correction.
MEM_SAFETY = {"graph": 1.1, "pipeline": 1.1, "hybrid": 1.1}
DEGREE = 20
FEATURES, CLASSES, MODEL, LAYERS, HIDDEN = 64, 8, "gcn", 16, 64


def _cli(name: str, args: list[str], log_path: Path) -> float:
    t0 = time.time()
    with open(log_path, "a") as f:
        p = subprocess.run([str(C.venv_bin() / name), *args], cwd=C.REPO, stdout=f, stderr=subprocess.STDOUT,
                           env=dict(os.environ, OMP_NUM_THREADS="1"))
    if p.returncode != 0:
        raise C.BenchError(f"{name} {' '.join(args)} failed (exit {p.returncode}); see {log_path}")
    return time.time() - t0


def prepare(data: Path, n: int, method: str, topos, log_path: Path) -> tuple[Path, dict, dict]:
    """Generate the graph and its plans once; returns (graph dir, {label: plan dir}, timings)."""
    gdir = data / f"rmat-{n}"
    times = {}
    if not (gdir / "meta.json").exists():
        times["generate_s"] = _cli("gnnpipe-data", ["synth", "rmat", "--nodes", str(n), "--edges", str(DEGREE * n),
                                                    "--features", str(FEATURES), "--classes", str(CLASSES),
                                                    "--out", str(gdir), "--force"], log_path)
    plans = {}
    for t in topos:
        parts, chunks = (t.ways, 1) if t.mode == "graph" else (t.ways, t.chunks)
        pdir = data / f"rmat-{n}-{method}-p{parts}-c{chunks}"
        if not (pdir / "META.json").exists():
            times[f"partition_{t.short()}_s"] = _cli("gnnpipe-partition", [str(gdir), "--parts", str(parts), "--chunks",
                                                                           str(chunks), "--method", method, "--out",
                                                                           str(pdir), "--force"], log_path)
        plans[t.short()] = pdir
    return gdir, plans, times


def _stats(gdir: Path, plans: dict, topos):
    """GraphStats with the partition facts of the plans on disk (no METIS rerun)."""


    g = Graph.load(gdir, mmap=True)
    stats = GraphStats(int(g.num_nodes), int(g.num_edges), int(g.num_features), int(g.num_classes), None, g.name or "rmat")
    infos = {}
    for t in sorted(topos, key=lambda t: t.mode == "graph"):  # chunked plans first
        plan = PartitionPlan.load(plans[t.short()])
        if t.ways == 1:
            ch, cn = chunk_facts_of_plan(g, plan)
            infos[1] = PartInfo(1, 0, int(g.num_nodes), int(g.num_edges), 0, "whole graph", {t.chunks: ch}, {t.chunks: cn})
            continue
        have = infos.get(t.ways)
        chunk_halo, chunk_nbrs = (dict(have.chunk_halo), dict(have.chunk_nbrs)) if have else ({}, {})
        if t.mode != "graph":
            chunk_halo[t.chunks], chunk_nbrs[t.chunks] = chunk_facts_of_plan(g, plan)
        if have is None:
            _, halo = group_cut_and_halo(g, plan, "part")
            deg = np.diff(np.asarray(g.indptr))
            edges = np.bincount(plan.part, weights=deg, minlength=t.ways)
            have = PartInfo(t.ways, int(halo.sum()), int(np.diff(plan.part_ptr).max()), int(edges.max()),
                            int(halo.max()), plan.params.get("method", "?"))
        infos[t.ways] = PartInfo(have.parts, have.sum_m, have.max_nodes, have.max_edges, have.max_halo, have.source,
                                 chunk_halo, chunk_nbrs)
    return stats.with_parts(list(infos.values()))


def run(out: Path, quick: bool = False, sizes: Sequence[int] = SIZES, method: str = "metis",
        progress: bool = True, random_above: int | None = None,
        only: Sequence[str] | None = None, mem_fraction: float = 0.85,
        history_dtype: str = "float32") -> tuple[list[dict], str]:
    """Generate, partition, run; write ``out/scale/``. Returns (rows, markdown).

    ``random_above``: graphs with more nodes than this are partitioned randomly whatever
    ``method`` says (METIS on 1M nodes / 20M edges needs ~2 min per plan on a quiet
    machine and far longer on a loaded one); the ``partitioner`` column says which ran.
    ``only``: configuration labels to run (e.g. ``G4``); only their plans are made.
    ``history_dtype``: pipeline and hybrid points hold their history buffers in this dtype
    (``bfloat16`` halves them; such points are labelled ``<config>+bf16``).
    ``mem_fraction``: a point runs if :data:`MEM_SAFETY` × the predicted memory of its
    ranks (:func:`ranks_memory`; in graph mode the busiest part's times the parts, so the
    guard is conservative there) fits in this share of the memory available now.
    """

    if quick:
        sizes, method = (2000,), "random"
    C.check_only(only, [t.short() for t in world_topologies(4)], "configuration")
    out_dir = C.sub_dir(out, "scale", quick)
    data = out_dir / "data"
    data.mkdir(parents=True, exist_ok=True)
    log_path = out_dir / "prepare.log"
    topos = [t for t in world_topologies(4) if not only or t.short() in only]
    if not topos:
        raise C.BenchError(f"--only {' '.join(only or [])}: no such configuration (have "
                           f"{', '.join(t.short() for t in world_topologies(4))})")
    prof = load_profile("cpu-this-machine")
    spec = ModelSpec(MODEL, LAYERS, HIDDEN)
    bf16 = history_dtype == "bfloat16"
    rows = []
    base_method = method
    for n in sizes:
        method = "random" if random_above is not None and n > random_above else base_method
        gdir, plans, times = prepare(data, n, method, topos, log_path)
        stats = C.call_quietly(lambda: _stats(gdir, plans, topos))
        for t in topos:
            lean = bf16 and t.mode != "graph"
            p = predict(stats, dataclasses.replace(spec, history_bytes=2 if lean else 4), t, prof)
            label = t.short() + ("+bf16" if lean else "")
            row = {"nodes": n, "edges": stats.num_edges, "config": label, "mode": t.mode, "partitioner": method,
                   "pred_s": p.epoch_s, "pred_mem_mb": p.peak_mem_bytes / 2**20, **times}
            need = ranks_memory(p, t)
            row["pred_total_mb"] = need / 2**20
            avail = psutil.virtual_memory().available
            if MEM_SAFETY[t.mode] * need > mem_fraction * avail:
                row["skipped"] = (f"skipped: {MEM_SAFETY[t.mode]} x predicted {need / 2**30:.1f} GiB for {t.world} ranks "
                                  f"> {100 * mem_fraction:.0f} % of the {avail / 2**30:.1f} GiB available")
                rows.append(row)
                (out_dir / "partial.json").write_text(json.dumps(rows, indent=1))
                continue
            name = f"rmat{n}-{label}"
            dtype_flags = ["--history-dtype", "bfloat16"] if lean else []
            res = C.run_jobs([C.Job(name, ["--lean-memory", "--dataset", str(gdir), "--plan", str(plans[t.short()]), "--model", MODEL,
                                           "--layers", str(LAYERS), "--hidden", str(HIDDEN), "--epochs", "2",
                                           "--eval-every", "100000", *C.topo_flags(t), *dtype_flags], t.world)],
                             out_dir / "runs", fresh=True, progress=progress, desc=f"scale {n:,} {t.short()}",
                             timeout_s=3600)[name]
            row.update(C.load_fields([res]))
            if res["error"] or not res["metrics"]:
                row["error"] = (res["error"] or "no metrics")[:300]
            else:
                last = res["metrics"][-1]
                row.update({"epoch_s": last["epoch_time_s"], "compute_s": last["compute_s"], "comm_s": last["comm_s"],
                            "bubble_s": last["bubble_s"], "peak_rss_mb": max(e["peak_rss_mb"] for e in res["metrics"]),
                            "bytes_total": sum(C.measured_bytes(last).values())})
            rows.append(row)
            (out_dir / "partial.json").write_text(json.dumps(rows, indent=1))
    # Points of other sizes or configurations from an earlier run stay (``--sizes`` and
    # ``--only`` rerun a subset).
    old = out_dir / "results.json"
    if old.exists() and not quick:
        done = {(r["nodes"], r["config"]) for r in rows}
        kept = [r for r in json.loads(old.read_text()).get("rows", []) if (r.get("nodes"), r.get("config")) not in done]
        rows = sorted(kept + rows, key=lambda r: (r["nodes"], r["config"]))
    md = summarize(rows)
    C.write_results(out_dir, rows, md, {"model": f"{MODEL}-{LAYERS} d={HIDDEN}", "degree": DEGREE, "features": FEATURES,
                                        "world": 4, "partitioner": method})
    plot(rows, out_dir / "scale.png", settings=f"{MODEL.upper()}-{LAYERS} d={HIDDEN}, degree {DEGREE}, 4 ranks on "
                                                f"{os.cpu_count()} cores, --lean-memory, 2 epochs")
    return rows, md


def ranks_memory(pred, topo) -> float:
    """Predicted bytes of all ``topo.world`` ranks together: every stage's own prediction
    (the busiest way's, for each way) in pipeline and hybrid mode; the busiest part's times
    the parts in graph mode (the only part the model describes)."""
    if topo.mode == "graph":
        return pred.peak_mem_bytes * topo.world
    return topo.ways * sum(x.mem_bytes for x in pred.per_stage)


def summarize(rows: list[dict]) -> str:
    table = []
    for r in rows:
        if "epoch_s" in r:
            table.append([f"{r['nodes']:,}", f"{r['edges']:,}", r["config"], r["partitioner"], f"{r['epoch_s']:.2f}",
                          f"{r['compute_s']:.2f} / {r['comm_s']:.2f} / {r['bubble_s']:.2f}", f"{r['peak_rss_mb']:.0f}",
                          f"{r['pred_s']:.2f}", f"{r['pred_mem_mb']:.0f}"])
        else:
            table.append([f"{r['nodes']:,}", f"{r['edges']:,}", r["config"], r["partitioner"],
                          r.get("skipped", "failed: " + r.get("error", "")[:80]), "", "", f"{r['pred_s']:.2f}",
                          f"{r['pred_mem_mb']:.0f}"])
    return C.md_table(["nodes", "edges", "config", "partitioner", "epoch s", "compute / comm / bubble s",
                       "peak RSS MB (max rank)", "predicted s", "predicted MB"], table)


def plot(rows: list[dict], path: Path, settings: str = "") -> Path:
    """Epoch time and peak RSS (busiest rank) against nodes, one line per configuration:
    colour = mode (:data:`gnnpipe.bench.common.MODE_COLORS`), dashed = bfloat16 history;
    one legend for both panels.

    Args:
        rows: rows of :func:`run` (points without ``epoch_s`` were skipped or failed and
            are not drawn).
        path: the PNG.
        settings: the title's second line (model, degree, ranks, cores).

    Returns:
        ``path``.
    """
    from matplotlib.lines import Line2D

    plt = C.pyplot()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(8.4, 3.6), layout="constrained")
    handles, labels = [], []
    for cfg in dict.fromkeys(r["config"] for r in rows):
        rs = sorted((r for r in rows if r["config"] == cfg and "epoch_s" in r), key=lambda r: r["nodes"])
        if not rs:
            continue
        style = dict(color=C.MODE_COLORS[C.mode_of(cfg)], ls="--" if cfg.endswith("+bf16") else "-", marker="o", ms=4)
        a1.plot([r["nodes"] for r in rs], [r["epoch_s"] for r in rs], **style)
        a2.plot([r["nodes"] for r in rs], [r["peak_rss_mb"] / 1024 for r in rs], **style)
        handles.append(Line2D([], [], **style))
        labels.append(cfg)
    from matplotlib.ticker import NullLocator

    sizes = sorted({r["nodes"] for r in rows if "epoch_s" in r})
    for a, y in ((a1, "seconds per epoch"), (a2, "peak RSS GiB, busiest rank")):
        a.set_xscale("log")
        a.set_yscale("log")
        # The measured sizes are the x ticks (a log axis's own labels crowd or vanish).
        a.set_xticks(sizes, [f"{n / 1000:g}k" if n < 10**6 else f"{n / 10**6:g}M" for n in sizes])
        a.xaxis.set_minor_locator(NullLocator())
        if len(sizes) == 1:
            a.set_xlim(sizes[0] / 2, sizes[0] * 2)
        a.set_xlabel("nodes")
        a.set_ylabel(y)
        a.grid(True, which="major", alpha=0.3)
        C.plain_ticks(a, "y")
    a1.set_title("epoch time")
    a2.set_title("memory")
    C.legend_below(fig, handles, labels, ncol=max(len(labels), 1))
    fig.suptitle("Scaling on R-MAT graphs" + (f": {settings}" if settings else ""))
    return C.save_fig(fig, path)
