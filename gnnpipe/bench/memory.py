"""``gnnpipe-bench memory``: peak memory per rank by mode, beside the memory model.

Every configuration runs in its own ``mpirun`` (the peak RSS, ``ru_maxrss``, is a
process' lifetime maximum, so runs must not share processes) for 2 epochs; the measured
figure is ``peak_rss_mb`` of ``metrics.jsonl``, the largest rank's. RSS includes the
interpreter, torch and PyG (about 0.3 GB per rank, the profile's ``base_mem_bytes``) and
the mapped pages of the dataset that rank touched. Pipeline and hybrid runs take their
history snapshot every epoch (``--snapshot-period 1``) so that two epochs reach the
steady state of a long run (which holds it from epoch 23 on). Runs use ``--lean-memory``
(freed tensors go back to the system at once), so RSS follows what the rank holds, which
is what the model counts; the default allocator keeps freed heap memory and peaks up to
about 2x higher (see :mod:`gnnpipe.parallel.alloc`). The prediction is
:func:`gnnpipe.cost.predict`'s ``peak_mem_bytes`` (the busiest rank) with profile
``cpu-this-machine``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from gnnpipe.bench import common as C
from gnnpipe.bench.epoch import world_topologies
from gnnpipe.cost import ModelSpec, chunk_counts, graph_stats_from_graph, load_profile, predict

#: name -> (dataset, synth fields, model, layers, hidden)
CASES = {
    "squirrel-gcnii32": ("squirrel", {}, "gcnii", 32, 100),
    "physics-gcn16": ("coauthor_physics", {}, "gcn", 16, 100),
    "sbm200k-gcn16": ("sbm", {"synth_nodes": 200000, "synth_degree": 10.0, "synth_features": 32, "synth_classes": 8},
                      "gcn", 16, 64),
}
QUICK_CASES = {"sbm2k-gcnii4": ("sbm", {"synth_nodes": 2000, "synth_degree": 10.0, "synth_features": 16, "synth_classes": 4},
                                "gcnii", 4, 32)}


def run(out: Path, quick: bool = False, world: int = 4, only: Sequence[str] | None = None,
        progress: bool = True) -> tuple[list[dict], str]:
    """Measure and predict; write ``out/memory/``. Returns (rows, markdown)."""
    C.check_only(only, CASES, "case")
    cases = QUICK_CASES if quick else {k: v for k, v in CASES.items() if not only or k in only}
    topos = world_topologies(world)
    if quick:
        topos = topos[:2]
    prof = load_profile("cpu-this-machine")
    out_dir = C.sub_dir(out, "memory", quick)
    jobs, rows = [], []
    for cname, (ds, synth, model, L, d) in cases.items():
        graph = C.load_graph(ds, **synth)
        stats = C.call_quietly(lambda: graph_stats_from_graph(graph, parts=[2, world], seed=0,
                                                              chunks=chunk_counts(topos)))
        spec = ModelSpec(model, L, d)
        for t in topos:
            p = predict(stats, spec, t, prof)
            worst = max(p.per_stage, key=lambda s: s.mem_bytes)
            jname = f"{cname}-{t.short()}"
            rows.append({"case": cname, "model": model, "layers": L, "hidden": d, "nodes": stats.num_nodes,
                         "edges": stats.num_edges, "config": t.short(), "mode": t.mode, "job": jname,
                         "pred_mb": p.peak_mem_bytes / 2**20,
                         "pred_breakdown_mb": {k: v / 2**20 for k, v in worst.mem.items()}})
            # Snapshot every epoch: the history snapshot (taken every 23 epochs by default)
            # is then held in epoch 2, so 2 epochs show a long run's steady state.
            snap = ["--snapshot-period", "1"] if t.mode != "graph" else []
            jobs.append(C.Job(jname, ["--lean-memory", "--dataset", ds, *C.synth_flags(synth), "--model", model, "--layers", str(L),
                                      "--hidden", str(d), "--epochs", "2", "--eval-every", "100000", *snap,
                                      *C.topo_flags(t)], t.world))
    res = C.run_jobs(jobs, out_dir / "runs", fresh=True, progress=progress, desc="memory")
    for row in rows:
        r = res[row.pop("job")]
        row.update(C.load_fields([r]))
        if r["error"] or not r["metrics"]:
            row["error"] = (r["error"] or "no metrics")[:300]
            continue
        row["measured_mb"] = max(e["peak_rss_mb"] for e in r["metrics"])
        row["rel_err"] = C.rel_error(row["pred_mb"], row["measured_mb"])
    md = summarize(rows)
    C.write_results(out_dir, rows, md, {"world": world, "profile": prof.name})
    ok = [r for r in rows if "measured_mb" in r]
    if ok:
        plot(ok, out_dir / "memory.png", settings=f"{world} ranks, --lean-memory, 2 epochs (history snapshot every epoch)")
    return rows, md


def summarize(rows: list[dict]) -> str:
    ok = [r for r in rows if "measured_mb" in r]
    table = [[r["case"], r["config"], f"{r['measured_mb']:.0f}" if "measured_mb" in r else "failed",
              f"{r['pred_mb']:.0f}", f"{100 * r['rel_err']:+.0f} %" if "rel_err" in r else "",
              ", ".join(f"{k} {v:.0f}" for k, v in sorted(r["pred_breakdown_mb"].items(), key=lambda kv: -kv[1])[:3])]
             for r in rows]
    md = C.md_table(["case", "config", "peak RSS MB (max rank)", "predicted MB", "error", "largest predicted parts (MB)"], table)
    if ok:
        within = sum(abs(r["rel_err"]) <= 0.25 for r in ok)
        md += (f"\n\nWithin 25 %: {within} of {len(ok)}; geometric mean predicted/measured "
               f"{C.geomean(r['pred_mb'] / r['measured_mb'] for r in ok):.2f}.")
    return md


def plot(rows: list[dict], path: Path, settings: str = "") -> Path:
    """Measured peak RSS of the busiest rank per configuration (bars coloured by mode,
    :data:`gnnpipe.bench.common.MODE_COLORS`) with the memory model's prediction as a dot.

    Args:
        rows: rows of :func:`run` with ``measured_mb`` and ``pred_mb``.
        path: the PNG.
        settings: appended to the title (ranks, allocator).

    Returns:
        ``path``.
    """
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    plt = C.pyplot()
    fig, ax = plt.subplots(figsize=(max(4.8, 0.55 * len(rows) + 1.5), 3.8), layout="constrained")
    xs = list(range(len(rows)))
    modes = [C.mode_of(r["config"]) for r in rows]
    ax.bar(xs, [r["measured_mb"] / 1024 for r in rows], 0.7, color=[C.MODE_COLORS[m] for m in modes])
    ax.plot(xs, [r["pred_mb"] / 1024 for r in rows], "D", color="black", mfc="white", ms=6)
    ax.set_xticks(xs)
    ax.set_xticklabels([f"{r['case']}\n{r['config']}" for r in rows], rotation=90 if len(rows) > 6 else 0)
    ax.set_ylabel("GiB, busiest rank")
    ax.set_ylim(0, max(max(r["measured_mb"], r["pred_mb"]) for r in rows) / 1024 * 1.1)
    ax.yaxis.set_major_formatter(lambda v, _pos: f"{v:.2g}")
    shown = [m for m in C.MODE_COLORS if m in modes]
    handles = [Patch(color=C.MODE_COLORS[m]) for m in shown] + [
        Line2D([], [], color="black", marker="D", mfc="white", ls="none")]
    C.legend_below(fig, handles, [f"{m}: measured peak RSS" for m in shown] + ["predicted"])
    ax.set_title("Peak memory per rank: measured (max over ranks) and predicted" + (f"\n{settings}" if settings else ""),
                 fontsize=9.5)
    return C.save_fig(fig, path)
