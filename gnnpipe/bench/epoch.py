"""``gnnpipe-bench epoch``: epoch time and its breakdown, against the cost model and planner.

For each case (graph, model, depth, d) and world size (2: graph P=2, pipeline S=2 C=8;
4: graph P=4, pipeline S=4 C=16, hybrid 2×2 C=8), ``runs`` separate training runs of
``epochs`` epochs each (every run a fresh model and executor; the first epoch of each run
is skipped as warm-up). Reported per configuration: the median epoch time over all kept
epochs and the spread (min–max of the per-run medians), the medians of ``compute_s``,
``comm_s`` and ``bubble_s`` (each the maximum over ranks, as ``metrics.jsonl`` records
them; the pipeline's ``comm_s`` includes its receive waits, which are its ``bubble_s``), the cost model's prediction with profile ``cpu-this-machine`` and its relative
error. Per (case, world size): whether the planner's first choice
(:func:`gnnpipe.cost.rank_configs` over the measured topologies, chunks = 4·S) is the
fastest measured configuration. Averages across configurations are geometric means.
"""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path
from typing import Sequence

from gnnpipe.bench import common as C
from gnnpipe.bench.common import BenchError
from gnnpipe.cost import ModelSpec, chunk_counts, graph_stats_from_graph, load_profile, predict, rank_configs
from gnnpipe.dims import ParallelDims

#: name -> (dataset, synth fields, model, layers, hidden)
CASES = {
    "squirrel-gcn16": ("squirrel", {}, "gcn", 16, 100),
    "squirrel-gcnii16": ("squirrel", {}, "gcnii", 16, 100),
    "sbm20k-gcnii16": ("sbm", {"synth_nodes": 20000, "synth_degree": 10.0, "synth_features": 32, "synth_classes": 8},
                       "gcnii", 16, 64),
}
QUICK_CASES = {"sbm2k-gcnii4": ("sbm", {"synth_nodes": 2000, "synth_degree": 10.0, "synth_features": 16, "synth_classes": 4},
                                "gcnii", 4, 32)}


def world_topologies(world: int):
    """Topologies measured at ``world`` ranks (chunks = 4·S as the paper)."""

    ts = [ParallelDims("graph", ways=world), ParallelDims("pipeline", stages=world, chunks=4 * world)]
    if world == 4:
        ts.append(ParallelDims("hybrid", ways=2, stages=2, chunks=8))
    return ts


def case_stats(case: tuple, worlds: Sequence[int] = (2, 4)):
    """(graph, :class:`gnnpipe.cost.GraphStats`) of a case: METIS facts for every world size
    and the per-chunk facts of every measured pipeline / hybrid topology (seed 0, as the
    runs of seed 0 partition)."""
    ds, synth = case[0], case[1]
    graph = C.load_graph(ds, **synth)
    topos = [t for w in worlds for t in world_topologies(w)]
    stats = C.call_quietly(lambda: graph_stats_from_graph(graph, parts=sorted(set(worlds) | {2}), seed=0,
                                                          chunks=chunk_counts(topos)))
    return graph, stats


def predict_case(stats, case: tuple, world: int, prof) -> tuple[dict, str]:
    """The cost model's predictions of a case's measured topologies at ``world`` ranks and
    the planner's first choice among them (:func:`gnnpipe.cost.rank_configs`, chunks = 4·S).

    Returns:
        (``{label: Prediction}``, first choice's label).
    """
    _, _, model, L, d = case
    spec = ModelSpec(model, L, d)
    ranked = rank_configs(stats, spec, world, prof, chunk_factors=(4,), estimate=False)
    measured_labels = {t.short() for t in world_topologies(world)}
    ranked = [p for p in ranked if p.topology.short() in measured_labels]
    return {t.short(): predict(stats, spec, t, prof) for t in world_topologies(world)}, ranked[0].topology.short()


def run(out: Path, quick: bool = False, worlds: Sequence[int] = (2, 4), runs: int = 3, epochs: int = 5,
        only: Sequence[str] | None = None, progress: bool = True) -> tuple[list[dict], str]:
    """Measure, predict, rank; write ``out/epoch/``. Returns (rows, markdown)."""
    C.check_only(only, CASES, "case")
    cases = QUICK_CASES if quick else {k: v for k, v in CASES.items() if not only or k in only}
    if quick:
        worlds, runs, epochs = (4,), 2, 3
    prof = load_profile("cpu-this-machine")
    out_dir = C.sub_dir(out, "epoch", quick)
    jobs, rows, firsts = [], [], {}
    for cname, case in cases.items():
        ds, synth, model, L, d = case
        graph, stats = case_stats(case, worlds)
        for w in worlds:
            preds, firsts[(cname, w)] = predict_case(stats, case, w, prof)
            for t in world_topologies(w):
                p = preds[t.short()]
                row = {"case": cname, "dataset": ds, "model": model, "layers": L, "hidden": d, "world": w,
                       "mode": t.mode, "config": t.short(), "pred_s": p.epoch_s, "pred_compute_s": p.compute_s,
                       "pred_comm_s": p.comm_s, "pred_bubble_s": p.bubble_s, "pred_mem_gib": p.peak_mem_bytes / 2**30}
                row["jobs"] = []
                for r in range(runs):
                    jname = f"{cname}-{t.short()}-r{r}"
                    row["jobs"].append(jname)
                    jobs.append(C.Job(jname, ["--dataset", ds, *C.synth_flags(synth), "--model", model, "--layers", str(L),
                                              "--hidden", str(d), "--epochs", str(epochs), "--eval-every", "100000",
                                              "--seed", str(r), *C.topo_flags(t)], w))
                rows.append(row)
    res = C.run_jobs(jobs, out_dir / "runs", progress=progress, desc="epoch")
    for row in rows:
        eps, per_run, errs = [], [], []
        names = row.pop("jobs")
        row.update(C.load_fields(res[j] for j in names))
        for j in names:
            r = res[j]
            if r["error"]:
                errs.append(r["error"][:300])
                continue
            kept = r["metrics"][1:]
            if kept:
                eps += kept
                per_run.append(statistics.median(e["epoch_time_s"] for e in kept))
        if errs:
            row["error"] = errs[0]
        if not eps:
            continue
        med = statistics.median(e["epoch_time_s"] for e in eps)
        row.update({"measured_s": med, "run_min_s": min(per_run), "run_max_s": max(per_run), "samples": len(eps),
                    "compute_s": statistics.median(e["compute_s"] for e in eps),
                    "comm_s": statistics.median(e["comm_s"] for e in eps),
                    "bubble_s": statistics.median(e["bubble_s"] for e in eps),
                    "peak_rss_mb": max(e["peak_rss_mb"] for e in eps),
                    "rel_err": C.rel_error(row["pred_s"], med)})
    ok = [r for r in rows if "measured_s" in r]
    hits = C.planner_hits(ok, ("case", "world"), measured="measured_s", predicted="pred_s",
                          first_choice={k: v for k, v in firsts.items()})
    md = summarize(rows, hits)
    within = sum(abs(r["rel_err"]) <= 0.25 for r in ok)
    C.write_results(out_dir, rows, md, {"planner": hits, "within_25pct": within, "measured": len(ok),
                                        "planner_hits": sum(h["hit"] for h in hits), "groups": len(hits),
                                        "runs": runs, "epochs": epochs, "profile": prof.name})
    if ok:
        plot(ok, out_dir / "epoch_breakdown.png",
             settings=f"{runs} runs x {epochs - 1} epochs each (first skipped), {os.cpu_count()} cores, profile {prof.name}")
    return rows, md


def repredict(results_json: Path, profile: str = "cpu-this-machine",
              include_loaded: bool = False) -> tuple[list[dict], list[dict], str, int]:
    """Predict the configurations of a stored ``epoch`` result again with the current model
    and ``profile`` (nothing is run): the same :func:`predict_case` the benchmark uses.

    Args:
        results_json: ``results.json`` or its folder.
        profile: profile name or path.
        include_loaded: keep rows measured while the 1-minute load exceeded the cores
            (``under_load``; other processes inflated their times); by default they are
            left out. Rows stored before the load was recorded are kept.

    Returns:
        (rows with the new ``pred_*`` and ``rel_err``, planner hits, markdown summary, the
        number of rows left out as measured under load).
    """


    path = Path(results_json)
    if path.is_dir():
        path = path / "results.json"
    if not path.exists():
        raise BenchError(f"{path}: no stored epoch results; run `gnnpipe-bench epoch` first (it writes "
                         "results/epoch/results.json)")
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise BenchError(f"{path}: not a readable epoch results.json ({e})") from None
    prof = load_profile(profile)
    measured = [dict(r) for r in doc.get("rows", []) if "measured_s" in r]
    rows = [r for r in measured if include_loaded or not r.get("under_load")]
    left_out = len(measured) - len(rows)
    if not rows:
        raise BenchError(f"{path}: no measured rows" + (f" measured without load ({left_out} under load; "
                                                        "--include-loaded keeps them)" if left_out else ""))
    firsts = {}
    for cname in dict.fromkeys(r["case"] for r in rows):
        if cname not in CASES and cname not in QUICK_CASES:
            raise BenchError(f"{path}: case {cname!r} is not one of {', '.join([*CASES, *QUICK_CASES])}")
        case = CASES.get(cname) or QUICK_CASES[cname]
        worlds = sorted({r["world"] for r in rows if r["case"] == cname})
        _, stats = case_stats(case, worlds)
        for w in worlds:
            preds, firsts[(cname, w)] = predict_case(stats, case, w, prof)
            for r in rows:
                if r["case"] == cname and r["world"] == w:
                    p = preds[r["config"]]
                    r.update({"pred_s": p.epoch_s, "pred_compute_s": p.compute_s, "pred_comm_s": p.comm_s,
                              "pred_bubble_s": p.bubble_s, "rel_err": C.rel_error(p.epoch_s, r["measured_s"])})
    hits = C.planner_hits(rows, ("case", "world"), measured="measured_s", predicted="pred_s", first_choice=firsts)
    md = summarize(rows, hits)
    if left_out:
        md += (f"\n\nLeft out {left_out} of {len(measured)} measured row(s) taken while the 1-minute load exceeded the "
               "cores (--include-loaded keeps them).")
    return rows, hits, md, left_out


def summarize(rows: list[dict], hits: list[dict]) -> str:
    ok = [r for r in rows if "measured_s" in r]
    table = []
    for r in rows:
        if "measured_s" not in r:
            table.append([r["case"], r["world"], r["config"], "failed", "", "", "", "", f"{r['pred_s']:.3f}", ""])
            continue
        table.append([r["case"], r["world"], r["config"] + (" *" if r.get("under_load") else ""), f"{r['measured_s']:.3f}",
                      f"{r['run_min_s']:.3f}–{r['run_max_s']:.3f}", f"{r['compute_s']:.3f}", f"{r['comm_s']:.3f}",
                      f"{r['bubble_s']:.3f}", f"{r['pred_s']:.3f}", f"{100 * r['rel_err']:+.0f} %"])
    out = [C.md_table(["case", "ranks", "config", "median s", "run spread", "compute", "comm", "bubble",
                       "predicted s", "error"], table), ""]
    n_loaded = sum(bool(r.get("under_load")) for r in ok)
    if n_loaded:
        out += [f"\\* {n_loaded} of {len(ok)} measured while the 1-minute load exceeded the cores (other processes "
                "inflated their times).", ""]
    if ok:
        within = sum(abs(r["rel_err"]) <= 0.25 for r in ok)
        gm = C.geomean(r["pred_s"] / r["measured_s"] for r in ok)
        gm_abs = C.geomean(max(r["pred_s"], r["measured_s"]) / min(r["pred_s"], r["measured_s"]) for r in ok)
        out.append(f"Predictions within 25 %: {within} of {len(ok)} (target: all). Geometric mean of predicted/measured: "
                   f"{gm:.2f}; of the larger/smaller factor: {gm_abs:.2f}.")
    n_hit = sum(h["hit"] for h in hits)
    out += ["", C.md_table(["case", "ranks", "planner's first choice", "fastest measured", "hit", "first choice / fastest"],
                           [[h["case"], h["world"], h["first_choice"], h["fastest"], h["hit"], f"{h['loss']:.2f}"] for h in hits]),
            "", f"Planner hits: {n_hit} of {len(hits)} (target: ≥ 80 %)."]
    # Geometric-mean speed-ups of pipeline and hybrid over graph parallelism per world size.
    for w in sorted({r["world"] for r in ok}):
        for mode in ("pipeline", "hybrid"):
            ratios = []
            for r in ok:
                if r["world"] == w and r["mode"] == mode:
                    g = [x for x in ok if x["world"] == w and x["case"] == r["case"] and x["mode"] == "graph"]
                    if g:
                        ratios.append(g[0]["measured_s"] / r["measured_s"])
            if ratios:
                out.append(f"\nGeometric mean speed-up of {mode} over graph parallelism at {w} ranks: "
                           f"{C.geomean(ratios):.2f}× over {len(ratios)} case(s).")
    return "\n".join(out)


def plot(rows: list[dict], path: Path, settings: str = "") -> Path:
    """One bar per configuration: the median epoch time (over every kept epoch of every
    run), split into compute / communication outside the bubble / bubble in proportion to
    those parts' medians; a whisker for the spread of the per-run medians, and the
    prediction as a dot.

    The parts are recorded as the maximum over ranks, each from whichever rank is slowest
    in it, so their sum exceeds the epoch time; stacking them raw drew bars taller than the
    epoch. Splitting the median epoch keeps one statistic for the bar's height.

    Args:
        rows: measured rows of :func:`run` (``measured_s``, ``compute_s``, ``comm_s``,
            ``bubble_s``, ``run_min_s``, ``run_max_s``, ``pred_s``; ``under_load`` marks
            the label with ``*``).
        path: the PNG.
        settings: appended to the title (runs, epochs, machine).

    Returns:
        ``path``.
    """
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    plt = C.pyplot()
    fig, ax = plt.subplots(figsize=(max(4.8, 0.55 * len(rows) + 1.5), 4.0), layout="constrained")
    xs = list(range(len(rows)))
    # The pipeline executor counts its receive waits (the bubble) inside comm_s as well, and
    # compute_s = wall − comm_s per rank: the parts are compute, comm − bubble, bubble.
    parts = {"compute": [r["compute_s"] for r in rows],
             "comm": [max(r["comm_s"] - r["bubble_s"], 0.0) for r in rows],
             "bubble": [r["bubble_s"] for r in rows]}
    totals = [sum(p[i] for p in parts.values()) or 1.0 for i in range(len(rows))]
    bottom = [0.0] * len(rows)
    handles, labels = [], []
    names = {"compute": "compute", "comm": "communication (outside the bubble)", "bubble": "bubble (pipeline wait)"}
    for k, vals in parts.items():
        h = [r["measured_s"] * v / t for r, v, t in zip(rows, vals, totals)]
        ax.bar(xs, h, 0.7, bottom=bottom, color=C.PART_COLORS[k])
        bottom = [b + x for b, x in zip(bottom, h)]
        if any(v > 0 for v in vals):  # no legend entry for a part no bar shows
            handles.append(Patch(color=C.PART_COLORS[k]))
            labels.append(names[k])
    med = [r["measured_s"] for r in rows]
    ax.errorbar(xs, med, yerr=[[m - r["run_min_s"] for m, r in zip(med, rows)],
                               [r["run_max_s"] - m for m, r in zip(med, rows)]],
                fmt="none", ecolor="black", elinewidth=1, capsize=3)
    ax.plot(xs, [r["pred_s"] for r in rows], "D", color="black", mfc="white", ms=6)
    handles += [Line2D([], [], color="black", marker="|", ls="none", ms=10),
                Line2D([], [], color="black", marker="D", mfc="white", ls="none")]
    labels += ["spread of the run medians", "predicted"]
    ax.set_xticks(xs)
    ax.set_xticklabels([f"{r['case']}\n{r['config']}" + (" *" if r.get("under_load") else "") for r in rows],
                       rotation=90 if len(rows) > 6 else 0)
    ax.set_ylabel("seconds per epoch")
    ax.set_ylim(0, max(max(r["run_max_s"] for r in rows), max(r["pred_s"] for r in rows)) * 1.08)
    C.legend_below(fig, handles, labels, ncol=3)
    loaded = any(r.get("under_load") for r in rows)
    title = "Epoch time: median epoch, split by the parts' medians (max over ranks)"
    sub = "; ".join(x for x in (settings, "* measured under load" if loaded else "") if x)
    ax.set_title(title + (f"\n{sub}" if sub else ""), fontsize=9.5)
    return C.save_fig(fig, path)
