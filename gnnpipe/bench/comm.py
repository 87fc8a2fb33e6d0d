"""``gnnpipe-bench comm``: communication volume per epoch, measured against predicted.

For each graph (Squirrel, Coauthor-Physics and a Reddit-shaped synthetic graph), model and
depth, and each mode on 4 ranks (graph P=4, pipeline S=4 C=16, hybrid 2 ways × 2 stages
C=8), the measured bytes of one training epoch (``bytes_sent`` of ``metrics.jsonl``:
halo = ``halo_fwd + halo_bwd`` (graph parallelism), way = ``way_fwd + way_bwd`` (the
hybrid's way link), pipe = ``pipe_act + pipe_grad``, ``allreduce``; eval and control
traffic excluded) sit beside :func:`gnnpipe.cost.predict`'s bytes, which are
:mod:`gnnpipe.partition.volume`'s formulas on Σ M_p of the same METIS partition the
run makes (same seed). They must be equal to the byte.

Volumes are linear in depth (graph parallelism, the hybrid's way link) or independent of it (the
pipeline), so only a subset of depths is measured (``measured`` column); the others are
predicted. The G/P ratio (halo bytes of graph parallelism over pipeline bytes) is put
beside the paper's (GNNPIPE.md §4), predicted in the paper's setting (8 ranks, 32 layers,
the paper's d) from Σ M_p of our 8-way METIS partition.

``--wire F1,F2`` (formats of :data:`gnnpipe.wire.WIRE_FORMATS`; default float32)
repeats every mode in each wire format (``gnnpipe-train --wire``): predicted bytes count
``row_bytes(d, wire)`` per row, and the measured ones must still equal them. The ``G f32/P``
column then puts float32 graph parallelism's halo bytes over each format's pipeline bytes.

The Reddit-shaped graph is an SBM with Reddit's average degree (~492) and feature width
(602) and 41 classes, but 4,000 nodes instead of 232,965 so that it fits here: its
volumes are Reddit's shape, not Reddit's size.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Sequence

from gnnpipe._base import GnnpipeError
from gnnpipe.bench import common as C
from gnnpipe.cost import ModelSpec, chunk_counts, graph_stats_from_graph, load_profile, predict
from gnnpipe.dims import ParallelDims
from gnnpipe.wire import check_format

log = logging.getLogger(__name__)

#: Reddit: 232,965 nodes, 114,615,892 directed edges (degree 492), 602 features, 41 classes.
REDDIT_SHAPED = {"synth_nodes": 4000, "synth_degree": 492.0, "synth_features": 602, "synth_classes": 41}

#: name -> (dataset, synth fields, models, paper's hidden width)
DATASETS = {
    "squirrel": ("squirrel", {}, ("gcn", "sage", "gcnii"), 1000),
    "physics": ("coauthor_physics", {}, ("gcn", "gcnii"), 100),
    "reddit-shaped": ("sbm", REDDIT_SHAPED, ("gcn", "gcnii"), 100),
}
QUICK = {"sbm-quick": ("sbm", {"synth_nodes": 2000, "synth_degree": 10.0, "synth_features": 32, "synth_classes": 4},
                       ("gcn", "gcnii"), 100)}

#: GNNPIPE.md §4, communication volume per epoch G -> P (8 GPUs, 32 layers).
PAPER_RATIO = {("squirrel", "gcn"): 16.3, ("squirrel", "sage"): 22.5, ("squirrel", "gcnii"): 8.3,
               ("reddit-shaped", "gcn"): 11.9, ("physics", "gcn"): 5.0}

DEPTHS = (8, 16, 32, 64, 128)


def topologies(world: int = 4):
    """The three modes at ``world`` ranks: G world, P world (C = 4·S), H 2×(world/2) (C = 4·S)."""

    ts = [ParallelDims("graph", ways=world), ParallelDims("pipeline", stages=world, chunks=4 * world)]
    if world >= 4 and world % 2 == 0:
        ts.append(ParallelDims("hybrid", ways=2, stages=world // 2, chunks=4 * (world // 2)))
    return ts


def run(out: Path, quick: bool = False, depths: Sequence[int] = DEPTHS, measure: Sequence[int] = (8, 16),
        only: Sequence[str] | None = None, hidden: int = 100, progress: bool = True,
        wire: Sequence[str] = ("float32",)) -> tuple[list[dict], str]:
    """Measure and predict; write ``out/comm/``.

    Args:
        out: the results root.
        quick: one small synthetic graph, depths (4, 8), depth 4 measured.
        depths: depths to tabulate.
        measure: depths to run (the rest are predicted only).
        only: dataset names (keys of :data:`DATASETS`).
        hidden: d of the measured runs.
        progress: tqdm bar.
        wire: wire formats to run every mode in (``--wire``).

    Returns:
        (rows, markdown summary).
    """
    C.check_only(only, DATASETS, "dataset")
    wires = list(dict.fromkeys(wire))
    for w in wires:
        try:
            check_format(w)
        except ValueError as e:
            raise GnnpipeError(f"--wire: {e}") from None
    dsets = QUICK if quick else {k: v for k, v in DATASETS.items() if not only or k in only}
    if quick:
        depths, measure = (4, 8), (4,)
    out_dir = C.sub_dir(out, "comm", quick)
    prof = load_profile("cpu-this-machine")
    topos = topologies(4)
    jobs: list[C.Job] = []
    rows: list[dict[str, Any]] = []
    paper_rows = []
    for name, (ds, synth, models, paper_d) in dsets.items():
        graph = C.load_graph(ds, **synth)
        # Per-chunk facts of the hybrid plans (what a chunk reads; the bytes follow Σ_w M_w).
        stats = C.call_quietly(lambda: graph_stats_from_graph(
            graph, parts=[2, 4, 8], seed=0, chunks={k: v for k, v in chunk_counts(topos).items() if k > 1}))
        for model in models:
            for L, w, t in ((L, w, t) for L in depths for w in wires for t in topos):
                    spec = ModelSpec(model, L, hidden, wire=w)
                    p = predict(stats, spec, t, prof)
                    row = {"dataset": name, "nodes": stats.num_nodes, "edges": stats.num_edges,
                           "features": stats.num_features, "model": model, "layers": L, "hidden": hidden,
                           "mode": t.mode, "config": t.short(), "wire": w, "measured": L in measure,
                           "pred_halo": p.bytes["halo"], "pred_way": p.bytes["way"], "pred_pipe": p.bytes["pipe"],
                           "pred_allreduce": p.bytes["allreduce"], "pred_total": p.bytes["total"]}
                    if t.mode == "hybrid":
                        # What the hybrid executor sends: each boundary row once per way,
                        # Σ_w M_w (predict uses it); the per-chunk Σ_w Σ_k M_{w,k} beside it:
                        # what per-chunk exchanges would have sent.
                        row["sum_m_chunks"] = stats.part(t.ways).chunk_halo[t.chunks]
                        row["sum_m_ways"] = stats.part(t.ways).sum_m
                    rows.append(row)
                    if L in measure:
                        jname = f"{name}-{model}{L}-{t.short()}" + (f"-{w}" if w != "float32" else "")
                        row["job"] = jname
                        argv = ["--dataset", ds, *C.synth_flags(synth), "--model", model, "--layers", str(L),
                                "--hidden", str(hidden), "--epochs", "1", "--eval-every", "1000", "--seed", "0",
                                *C.topo_flags(t), *(["--wire", w] if w != "float32" else [])]
                        jobs.append(C.Job(jname, argv, t.world))
            # The paper's setting: 8 ranks, 32 layers, the paper's d; bytes are exact formulas.
            ps = ModelSpec(model, 32, paper_d)

            g8 = predict(stats, ps, ParallelDims("graph", ways=8), prof).bytes
            p8 = predict(stats, ps, ParallelDims("pipeline", stages=8, chunks=32), prof).bytes
            paper_rows.append({"dataset": name, "model": model, "d": paper_d, "pred_G_halo_8": g8["halo"],
                               "pred_P_8": p8["pipe"], "pred_ratio_8": g8["halo"] / p8["pipe"],
                               "paper_ratio": PAPER_RATIO.get((name, model), float("nan")),
                               "sum_m_8": stats.part(8).sum_m})
    res = C.run_jobs(jobs, out_dir / "runs", progress=progress, desc="comm")
    n_eq = n_meas = 0
    for row in rows:
        if "job" not in row:
            continue
        r = res[row["job"]]
        row.update(C.load_fields([r]))
        n_meas += 1
        if r["error"] or not r["metrics"]:
            row["error"] = (r["error"] or "no metrics")[:300]
            row["equal"] = False
            continue
        m = C.measured_bytes(r["metrics"][0])
        row.update({"meas_halo": m["halo"], "meas_way": m["way"], "meas_pipe": m["pipe"],
                    "meas_allreduce": m["allreduce"], "meas_total": sum(m.values())})
        row["equal"] = all(m[k] == row[f"pred_{k}"] for k in ("halo", "way", "pipe", "allreduce"))
        n_eq += row["equal"]
    md = summarize(rows, paper_rows, n_eq, n_meas, wires)
    hy = [r for r in rows if r["mode"] == "hybrid" and "meas_total" in r]
    if hy:
        ratios = {}
        for r in hy:
            ratios.setdefault(r["dataset"], r["sum_m_chunks"] / max(r["sum_m_ways"], 1))
        md += (f"\n\nHybrid: the executor sends each boundary row once per way, layer and direction, so "
               f"plan.predict counts Σ_w M_w (graph parallelism's halo for the same parts); measured equals "
               f"predicted in {sum(r['equal'] for r in hy)} of {len(hy)} hybrid runs. Per-chunk exchanges "
               "would have sent Σ_w Σ_k M_w,k / Σ_w M_w times as much: "
               + ", ".join(f"{k} {v:.2f}" for k, v in ratios.items()) + ".")
    C.write_results(out_dir, rows, md, {"paper_setting": paper_rows, "measured_equal": n_eq, "measured": n_meas,
                                        "measured_depths": list(measure), "reddit_shaped": REDDIT_SHAPED,
                                        "wire": wires})
    plot([r for r in rows if r["wire"] == wires[0]], out_dir / "comm_volume.png")
    return rows, md


def summarize(rows: list[dict], paper_rows: list[dict], n_eq: int, n_meas: int,
              wires: Sequence[str] = ("float32",)) -> str:
    """The markdown summary: per (dataset, model, depth[, wire]) the bytes of each mode and
    G/P (with several wire formats: float32 graph parallelism's halo over each pipeline)."""
    gib = 2.0 ** 30
    many = list(wires) != ["float32"]
    by: dict[tuple, dict[str, dict]] = {}
    g32: dict[tuple, dict] = {}
    for r in rows:
        w = r.get("wire", "float32")
        by.setdefault((r["dataset"], r["model"], r["layers"], w), {})[r["mode"]] = r
        if r["mode"] == "graph" and w == "float32":
            g32[(r["dataset"], r["model"], r["layers"])] = r
    out = [f"Measured bytes equal predicted bytes in {n_eq} of {n_meas} measured runs "
           "(halo, way link, pipe and all-reduce categories each compared exactly).", ""]
    table = []
    for (ds, model, L, w), modes in by.items():
        g, p, h = modes.get("graph"), modes.get("pipeline"), modes.get("hybrid")
        meas = g["measured"]
        def cell(r):
            if r is None:
                return "–"
            v = r["pred_total"] / gib
            if r["measured"] and "meas_total" in r:
                mv = r["meas_total"] / gib
                if r.get("equal"):
                    return f"{mv:.4f} ="
                return f"{mv:.4f} ≠ {v:.4f}"
            if r["measured"]:
                return "failed"
            return f"{v:.4f}"
        ref = g32.get((ds, model, L), g) if many else g
        ratio = ref["pred_halo"] / p["pred_pipe"] if ref and p and p["pred_pipe"] else float("nan")
        table.append([ds, f"{model}-{L}"] + ([w] if many else []) + ["measured" if meas else "predicted", cell(g),
                     cell(p), cell(h), f"{ratio:.1f}×"])
    out.append(C.md_table(["graph", "model"] + (["wire"] if many else [])
                          + ["bytes", "G4 GiB", "P4 GiB", "H2x2 GiB", "G f32/P halo÷pipe" if many else "G/P halo÷pipe"],
                          table))
    out += ["", "(Measured rows show the measured GiB; `=`: equal to plan.predict to the byte; `≠ X`: plan.predict "
            "said X. Totals include the weight all-reduce.)", "",
            "G/P in the paper's setting (8 ranks, 32 layers, the paper's d; predicted from our METIS Σ M_p):", ""]
    out.append(C.md_table(["graph", "model", "d", "Σ M_p (P=8)", "G halo GiB", "P GiB", "G/P ours", "G/P paper"],
                          [[r["dataset"], r["model"], r["d"], r["sum_m_8"], r["pred_G_halo_8"] / gib, r["pred_P_8"] / gib,
                            f"{r['pred_ratio_8']:.1f}×", (f"{r['paper_ratio']}×" if r["paper_ratio"] == r["paper_ratio"] else "–")]
                           for r in paper_rows]))
    return "\n".join(out)


def plot(rows: list[dict], path: Path) -> Path:
    """Bytes per epoch against depth, one panel per graph: colour = model, line style =
    mode (the same in every panel and plot, :data:`gnnpipe.bench.common.MODEL_COLORS`),
    lines predicted, dots measured; one legend for all panels."""
    from matplotlib.lines import Line2D
    from matplotlib.ticker import NullLocator

    plt = C.pyplot()
    dsets = list(dict.fromkeys(r["dataset"] for r in rows))
    fig, axes = plt.subplots(1, len(dsets), figsize=(3.6 * len(dsets) + 0.6, 3.6), squeeze=False, layout="constrained")
    models = list(dict.fromkeys(r["model"] for r in rows))
    modes = [m for m in C.MODE_STYLES if any(r["mode"] == m for r in rows)]
    for ax, ds in zip(axes[0], dsets):
        for model in models:
            for mode in modes:
                rs = sorted((r for r in rows if r["dataset"] == ds and r["model"] == model and r["mode"] == mode),
                            key=lambda r: r["layers"])
                if not rs:
                    continue
                color = C.MODEL_COLORS.get(model, "black")
                ax.plot([r["layers"] for r in rs], [r["pred_total"] / 2**30 for r in rs], C.MODE_STYLES[mode],
                        color=color, lw=1.4)
                mr = [r for r in rs if "meas_total" in r]
                ax.plot([r["layers"] for r in mr], [r["meas_total"] / 2**30 for r in mr], "o", color=color, ms=4.5)
        n = next(r["nodes"] for r in rows if r["dataset"] == ds)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        layers = sorted({r["layers"] for r in rows if r["dataset"] == ds})
        ax.set_xticks(layers, [str(x) for x in layers])
        ax.xaxis.set_minor_locator(NullLocator())
        C.plain_ticks(ax)
        ax.set_title(f"{ds} ({n:,} nodes)")
        ax.set_xlabel("layers L")
        ax.grid(True, which="major", alpha=0.3)
    axes[0][0].set_ylabel("GiB per epoch, all ranks")
    handles = [Line2D([], [], color=C.MODEL_COLORS.get(m, "black"), lw=2.5) for m in models]
    handles += [Line2D([], [], color="0.3", ls=C.MODE_STYLES[m]) for m in modes]
    handles.append(Line2D([], [], color="0.3", marker="o", ls="none"))
    labels = models + modes + ["measured"]
    C.legend_below(fig, handles, labels, ncol=len(labels))
    hidden = rows[0].get("hidden", "?")
    fig.suptitle(f"Communication per epoch, 4 ranks, d={hidden}: lines predicted, dots measured")
    return C.save_fig(fig, path)
