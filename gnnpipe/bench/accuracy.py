"""Accuracy benchmark: the paper's protocol on the datasets we have, in every mode.

``gnnpipe-bench accuracy [--only NAME ...] [--seeds 0 1 2] [--epochs N] [--wire float32,int8]``
(:func:`run`) or
``python scripts/bench_accuracy.py`` (:func:`main`, the original interface).

Each configuration runs ``gnnpipe-train`` under the venv's ``mpirun`` (4 ranks unless the
configuration says otherwise) and reads its ``summary.json``: test accuracy at the best
validation accuracy (exact full-graph evaluation every ``eval_every`` epochs). Results go
to ``results/accuracy/<name>/seed<k>/`` (one run directory per configuration and seed),
``results/accuracy.json`` (every run so far, merged) and ``results/accuracy/`` (results.csv,
results.json, summary.md); ``--quick`` writes only under ``results/accuracy-quick/``.

    gnnpipe-bench accuracy --only cora-gcn2-graph --seeds 0 1 2
    python scripts/bench_accuracy.py --list
    python scripts/bench_accuracy.py --only cora-gcn2-graph cora-gcnii64-graph
    python scripts/bench_accuracy.py --group pipeline --seeds 0 1 2

``--wire float32,int8`` runs every configuration in each format; a lossy format's row
(``<name>+int8``) is compared with the same configuration in float32 (issue 20's targets:
bfloat16 within 0.2 points, int8 within 0.5; int4 reported).

Nothing outside ``results/`` is written: ``gnnpipe-bench report`` renders the table into
``docs/benchmarks.md`` (between ``<!-- accuracy:begin -->`` and ``<!-- accuracy:end -->``,
:func:`fill_doc`) when asked.

Targets (issues 4 and 5): Cora GCN-2 graph-parallel ≥ 80.5 %, Cora GCNII-64 ≥ 84.5 %;
pipeline (4 stages, 16 chunks) within 1.5 points of graph-parallel for GCNII and ResGCN+
(32 layers, d=100) on Squirrel and Physics, and ≥ the paper's pipeline numbers − 2.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

from gnnpipe._base import GnnpipeError
from gnnpipe.bench import common as C
from gnnpipe.config import SAMPLED_MODELS
from gnnpipe.cost.wire_accuracy import paired_diffs, split_wire
from gnnpipe.wire import check_format

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
log = logging.getLogger(__name__)

# name -> (group, ranks, gnnpipe-train flags, target note)
# The paper trains 5000 (Squirrel) / 300 (Physics) epochs at lr 1e-3 on 8 GPUs; on 2 CPU cores
# we keep its model shape and dropout and shorten the schedule (lr 5e-3, 150 / 60 epochs).
# Graph, pipeline and hybrid runs share every hyperparameter, so the comparison stands.
COMMON_DEEP = ["--layers", "32", "--hidden", "100", "--dropout", "0.5", "--lr", "0.005", "--weight-decay", "0"]
#: Configurations held to a bound other than :data:`WITHIN` (points of graph parallelism's mean).
WITHIN_OF: dict[str, float] = {}
CONFIGS: dict[str, tuple[str, int, list[str], str]] = {
    "cora-gcn2-graph": ("anchor", 4, ["--dataset", "cora", "--normalize-features", "--mode", "graph", "--model", "gcn", "--layers", "2",
                                       "--hidden", "16", "--dropout", "0.5", "--lr", "0.01", "--weight-decay", "5e-4",
                                       "--epochs", "200", "--eval-every", "1"], ">= 80.5 (Kipf & Welling 81.5)"),
    "cora-gcnii64-graph": ("anchor", 4, ["--dataset", "cora", "--normalize-features", "--mode", "graph", "--model", "gcnii", "--layers", "64",
                                          "--hidden", "64", "--dropout", "0.6", "--lr", "0.01", "--weight-decay", "5e-4",
                                          "--alpha", "0.1", "--lam", "0.5", "--epochs", "600", "--eval-every", "5"],
                           ">= 84.5 (GCNII paper 85.5)"),
}
for ds, epochs, ev in (("squirrel", 150, 5), ("coauthor_physics", 60, 5)):
    short = "physics" if ds == "coauthor_physics" else ds
    for model, mname in (("gcnii", "gcnii32"), ("resgcn+", "resgcn32")):
        base = ["--dataset", ds, "--model", model, *COMMON_DEEP, "--epochs", str(epochs), "--eval-every", str(ev)]
        layouts = {"pipeline": base + ["--mode", "pipeline", "--stages", "4", "--chunks", "16"],
                   "hybrid": base + ["--mode", "hybrid", "--ways", "2", "--stages", "2", "--chunks", "8"]}
        CONFIGS[f"{short}-{mname}-graph"] = ("deep", 4, base + ["--mode", "graph"], "graph-parallel reference")
        # The paper's schedule, every epoch stale (--exact-every 0; gnnpipe-train's default
        # became every 2nd epoch exact after these rows were measured).
        CONFIGS[f"{short}-{mname}-pipeline"] = ("pipeline", 4, layouts["pipeline"] + ["--exact-every", "0"],
                                                "within 1.5 of graph; >= paper P - 2")
        CONFIGS[f"{short}-{mname}-hybrid"] = ("hybrid", 4, layouts["hybrid"] + ["--exact-every", "0"],
                                              "within 1.5 of graph")
        # Issue 29's remedy for the stale modes (docs/convergence-notes.md, sections 10-12, 18):
        # every 2nd epoch exact, gnnpipe-train's default. Held to issue 29's bound, 0.5 points
        # of graph parallelism. And with the exact cool-down over the second half (section 16):
        # every epoch from epochs / 2 on exact.
        for mode in ("pipeline", "hybrid"):
            CONFIGS[f"{short}-{mname}-{mode}-exact2"] = (mode, 4, layouts[mode] + ["--exact-every", "2"],
                                                          "within 0.5 of graph")
            WITHIN_OF[f"{short}-{mname}-{mode}-exact2"] = 0.5
            cool = f"{short}-{mname}-{mode}-exact2-from{epochs // 2}"
            CONFIGS[cool] = (mode, 4, CONFIGS[f"{short}-{mname}-{mode}-exact2"][2] + ["--exact-from", str(epochs // 2)],
                             "within 0.5 of graph")
            WITHIN_OF[cool] = 0.5
        if model in SAMPLED_MODELS:  # boundary sampling (issue 33): BNS-GCN's P = 0.1, graph mode
            CONFIGS[f"{short}-{mname}-bns10"] = ("sampled", 4, base + ["--mode", "graph", "--boundary-sample", "0.1"],
                                                 "graph mode, 10 % of boundary rows: the loss the planner quotes")

# A shallow, wide model (issue 33: where boundary sampling is published to work, BNS-GCN's
# 3-4-layer GraphSAGE): every row against 10 % of the boundary rows, graph mode.
_SHALLOW = ["--dataset", "squirrel", "--model", "sage", "--layers", "4", "--hidden", "256", "--dropout", "0.5",
            "--lr", "0.005", "--weight-decay", "0", "--epochs", "150", "--eval-every", "5", "--mode", "graph"]
CONFIGS["squirrel-sage4-graph"] = ("sampled", 4, _SHALLOW, "graph-parallel reference (shallow)")
CONFIGS["squirrel-sage4-bns10"] = ("sampled", 4, _SHALLOW + ["--boundary-sample", "0.1"],
                                   "graph mode, 10 % of boundary rows: the loss the planner quotes")
# The stale hybrid samples its rows between ways (2 ways x 2 stages x 8 chunks), against itself with every row.
_SHALLOW_HYBRID = _SHALLOW[:-2] + ["--mode", "hybrid", "--ways", "2", "--stages", "2", "--chunks", "8",
                                   "--exact-every", "0"]
CONFIGS["squirrel-sage4-hybrid"] = ("sampled", 4, _SHALLOW_HYBRID, "within 1.5 of graph")
CONFIGS["squirrel-sage4-hybrid-bns10"] = ("sampled", 4, _SHALLOW_HYBRID + ["--boundary-sample", "0.1"],
                                          "hybrid, 10 % of the rows between ways")

PAPER_P = {"squirrel-gcnii32": 38.04, "squirrel-resgcn32": 37.56, "physics-gcnii32": 94.03, "physics-resgcn32": 92.80}

#: ``--wire`` variants (issue 20): how far (points, mean over seeds) a lossy wire format may move
#: a configuration's accuracy from the same configuration in float32; int4 is reported only.
WIRE_WITHIN = {"bfloat16": 0.2, "int8": 0.5}


def variant(name: str, wire: str) -> str:
    """The result name of configuration ``name`` run with ``--wire wire``."""
    return name if wire == "float32" else f"{name}+{wire}"


def _mode(name: str) -> str:
    """The colour a configuration is drawn in: its mode, the third part of its name
    (``squirrel-gcnii32-hybrid-exact2`` -> hybrid); other variants (``bns10``) as graph."""
    mode = split_wire(name)[0].split("-")[2]
    return mode if mode in C.MODE_COLORS else "graph"


def _flags(name: str) -> list[str]:
    base, wire = split_wire(name)
    flags = list(CONFIGS[base][2])
    return flags if wire == "float32" else flags + ["--wire", wire]


def _command(name: str, seed: int, out_root: Path, epochs: int | None = None) -> tuple[list[str], int, Path]:
    """(the ``mpirun`` command line of one run, its epochs, its run directory)."""
    base, _ = split_wire(name)
    ranks = CONFIGS[base][1]
    flags = _flags(name)
    if epochs is not None:  # --epochs override: replace the configuration's own value
        flags = list(flags)
        flags[flags.index("--epochs") + 1] = str(epochs)
    n_epochs = int(flags[flags.index("--epochs") + 1])
    out = out_root / name / f"seed{seed}"
    cmd = [str(VENV_BIN / "mpirun"), "-np", str(ranks), str(VENV_BIN / "gnnpipe-train"), *flags,
           "--seed", str(seed), "--out", str(out), "--no-progress"]
    return cmd, n_epochs, out


def done_already(results: list[dict], name: str, seed: int, out_root: Path, epochs: int | None = None) -> bool:
    """Whether ``results`` hold a successful run of configuration ``name`` and ``seed`` with
    the very command this run would use (same flags, epochs and run directory)."""
    cmd = " ".join(_command(name, seed, out_root, epochs)[0][2:])
    return any(r.get("ok") and r["name"] == name and r["seed"] == seed and r.get("command") == cmd for r in results)


def run_one(name: str, seed: int, out_root: Path, timeout: int, epochs: int | None = None) -> dict:
    base, wire = split_wire(name)
    target = CONFIGS[base][3] if wire == "float32" else _wire_target(base, wire)
    cmd, n_epochs, out = _command(name, seed, out_root, epochs)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    t0 = time.time()
    p = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    wall = time.time() - t0
    if p.returncode != 0:
        return {"name": name, "seed": seed, "ok": False, "error": p.stderr[-2000:], "wall_s": wall, "epochs": n_epochs}
    s = json.loads((out / "summary.json").read_text())
    return {"name": name, "seed": seed, "ok": True, "test_acc": s["test_acc_at_best_val"],
            "best_val_acc": s["best_val_acc"], "best_epoch": s["best_epoch"],
            "mean_epoch_time_s": s["mean_epoch_time_s"], "wall_s": wall, "target": target, "epochs": n_epochs,
            "command": " ".join(cmd[2:])}


#: How far (test-accuracy points, mean over seeds) pipeline and hybrid may fall below graph parallelism.
WITHIN = 1.5


def _wire_target(base: str, wire: str) -> str:
    if wire in WIRE_WITHIN:
        return f"within {WIRE_WITHIN[wire]} of {base} in float32"
    return "reported (no target)"


def summarize(results: list[dict]) -> str:
    """The markdown table: mean ± sd (sample sd over seeds) of the test accuracy per
    configuration, and for pipeline and hybrid rows the difference of their mean from the
    graph-parallel row's mean of the same dataset and model, with whether it stays within
    :data:`WITHIN` points either way; its target; and (when a run was shorter than the configuration's
    schedule, e.g. ``--quick``) that the target is not reachable in that many epochs."""

    by: dict[str, list[dict]] = {}
    for r in results:
        by.setdefault(r["name"], []).append(r)
    means = {name: statistics.mean(100 * r["test_acc"] for r in rs if r.get("ok"))
             for name, rs in by.items() if any(r.get("ok") for r in rs)}
    lines = ["| config | seeds | test acc % (mean ± sd) | vs graph (points) | target | mean epoch s |",
             "|---|---|---|---|---|---|"]
    for name, rs in by.items():
        base, wire = split_wire(name)
        ok = [r for r in rs if r.get("ok")]
        if not ok:
            tgt = CONFIGS[base][3] if wire == "float32" else _wire_target(base, wire)
            lines.append(f"| {name} | {len(rs)} | FAILED | | {tgt} | |")
            continue
        accs = [100 * r["test_acc"] for r in ok]
        sd = statistics.stdev(accs) if len(accs) > 1 else 0.0
        ep = statistics.mean(r["mean_epoch_time_s"] for r in ok)
        tgt = CONFIGS[base][3] if wire == "float32" else _wire_target(base, wire)
        # "<dataset>-<model>-<mode>[-<variant>]": compared with "<dataset>-<model>-graph"
        key, mode = base.split("-")[:2], base.split("-")[2]
        key = "-".join(key)
        if key in PAPER_P and mode == "pipeline":
            tgt += f" (paper P {PAPER_P[key]})"
        flags = CONFIGS[base][2]
        full = int(flags[flags.index("--epochs") + 1])
        ran = {r.get("epochs", full) for r in ok}
        if min(ran) < full:
            tgt += f" — for {full} epochs; this run had {min(ran)}, not a test of the target"
        delta = ""
        if wire != "float32":
            diffs = paired_diffs(results, name, base)
            if diffs:
                d = statistics.mean(diffs)
                lim = WIRE_WITHIN.get(wire)
                verdict = "" if lim is None else (" (within" if abs(d) <= lim else " (outside") + f" {lim})"
                spread = f" ± {statistics.stdev(diffs):.2f}" if len(diffs) > 1 else ""
                delta = f"{d:+.2f}{spread} vs float32 on {len(diffs)} seed{'s' if len(diffs) > 1 else ''}{verdict}"
        elif base != f"{key}-graph" and f"{key}-graph" in means:
            d = means[name] - means[f"{key}-graph"]
            lim = WITHIN_OF.get(base, WITHIN)
            verdict = "within" if abs(d) <= lim else ("below by more than" if d < 0 else "above by more than")
            delta = f"{d:+.2f} ({verdict} {lim})"
        lines.append(f"| {name} | {len(ok)} | {statistics.mean(accs):.2f} ± {sd:.2f} | {delta} | {tgt} | {ep:.3f} |")
    return "\n".join(lines)


def plot(results: list[dict], path: Path) -> Path:
    """Test accuracy per configuration: mean over seeds (bar, coloured by mode, with ± sd
    over seeds when there are several), one dot per seed, and the configuration's numeric
    target as a tick (in the legend only when one is drawn). A configuration run for fewer
    epochs than its schedule says so under its label (its target is not being tested).

    Args:
        results: run records of :func:`run_one` (failed runs are left out).
        path: the PNG.

    Returns:
        ``path``.
    """

    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch


    by: dict[str, list[dict]] = {}
    for r in results:
        if r.get("ok"):
            by.setdefault(r["name"], []).append(r)
    names = [n for n in CONFIGS if n in by]  # lossy wire rows: plot_wire
    plt = C.pyplot()
    fig, ax = plt.subplots(figsize=(max(4.8, 0.6 * len(names) + 1.5), 4.0), layout="constrained")
    short = targets = False
    labels = []
    for x, name in enumerate(names):
        accs = [100 * r["test_acc"] for r in by[name]]
        mode = _mode(name)
        ax.bar(x, statistics.mean(accs), 0.7, color=C.MODE_COLORS[mode],
               yerr=statistics.stdev(accs) if len(accs) > 1 else None, capsize=3, ecolor="0.35")
        ax.plot([x] * len(accs), accs, "o", color="black", ms=3.5)
        m = re.match(r">= ([0-9.]+)", CONFIGS[name][3])
        if m:
            ax.plot([x - 0.4, x + 0.4], [float(m.group(1))] * 2, color="black", lw=1.5, ls="--")
            targets = True
        flags = CONFIGS[name][2]
        full = int(flags[flags.index("--epochs") + 1])
        ran = min(r.get("epochs", full) for r in by[name])
        label = name
        if ran < full:
            label += f"\n{ran} of {full} epochs:\ntarget not tested"
            short = True
        labels.append(label)
    ax.set_xticks(range(len(names)), labels, rotation=90 if len(names) > 4 else 0)
    ax.set_xlim(-0.8, len(names) - 0.2)  # one configuration (--quick): a bar of the usual width
    ax.set_ylabel("test accuracy % at best validation")
    ax.set_ylim(0, 100)
    modes = [m for m in C.MODE_COLORS if any(_mode(n) == m for n in names)]
    C.legend_below(fig, [Patch(color=C.MODE_COLORS[m]) for m in modes]
                   + [Line2D([], [], color="black", marker="o", ls="none")]
                   + ([Line2D([], [], color="black", ls="--")] if targets else []),
                   modes + ["one seed"] + (["target"] if targets else []))
    seeds = sorted({r["seed"] for rs in by.values() for r in rs})
    ax.set_title(f"Accuracy, seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}" + (": a shortened run, not a test of the targets"
                                                                     if short else ""), fontsize=9.5)
    return C.save_fig(fig, path)


WIRE_ORDER = ("bfloat16", "int8", "int4")
WIRE_COLORS = {"bfloat16": "#56B4E9", "int8": "#E69F00", "int4": "#CC79A7"}


def plot_wire(results: list[dict], path: Path) -> Path | None:
    """Each lossy wire format's test accuracy minus the same configuration's in float32
    (:func:`paired_diffs`: mean over the seeds both ran, ± their sd, a dot per seed), one
    group of bars per configuration, with issue 20's bounds (bfloat16 ±0.2, int8 ±0.5
    points) as bands. None when no configuration has a lossy row and its float32 row.

    Returns:
        ``path``, or None.
    """
    from matplotlib.patches import Patch

    diff: dict[tuple[str, str], list[float]] = {}
    for n in CONFIGS:
        for w in WIRE_ORDER:
            d = paired_diffs(results, variant(n, w), n)
            if d:
                diff[(n, w)] = d
    bases = [n for n in CONFIGS if any((n, w) in diff for w in WIRE_ORDER)]
    if not bases:
        return None
    wires = [w for w in WIRE_ORDER if any((n, w) in diff for n in bases)]
    plt = C.pyplot()
    fig, ax = plt.subplots(figsize=(max(5.0, 0.9 * len(bases) + 1.5), 3.6), layout="constrained")
    width = 0.8 / len(wires)
    for i, w in enumerate(wires):
        have = [(x, diff[(n, w)]) for x, n in enumerate(bases) if (n, w) in diff]
        xs = [x + (i - (len(wires) - 1) / 2) * width for x, _ in have]
        ax.bar(xs, [statistics.mean(d) for _, d in have], width * 0.9, color=WIRE_COLORS[w],
               yerr=[statistics.stdev(d) if len(d) > 1 else 0.0 for _, d in have], capsize=2, ecolor="0.35")
        for x, (_, d) in zip(xs, have):  # one dot per seed
            ax.plot([x] * len(d), d, "o", color="black", ms=2.5)
    for w, lim in WIRE_WITHIN.items():
        if w in wires:
            ax.axhspan(-lim, lim, color=WIRE_COLORS[w], alpha=0.12, lw=0)
    ax.axhline(0, color="black", lw=0.8)
    ax.set_xticks(range(len(bases)), [n.replace("-", "\n", 1) for n in bases], fontsize=7)
    ax.set_ylabel("test accuracy − float32's (points)")
    seeds = sorted({r["seed"] for r in results if r.get("ok")})
    ax.set_title(f"--wire against float32, same configuration, seed{'s' if len(seeds) > 1 else ''} "
                 f"{', '.join(map(str, seeds))}; bands: issue 20's bounds", fontsize=9)
    C.legend_below(fig, [Patch(color=WIRE_COLORS[w]) for w in wires]
                   + [Patch(color=WIRE_COLORS[w], alpha=0.25) for w in WIRE_WITHIN if w in wires],
                   [f"--wire {w}" for w in wires] + [f"{w} bound ±{WIRE_WITHIN[w]}" for w in WIRE_WITHIN if w in wires],
                   ncol=5)
    return C.save_fig(fig, path)

MARK_BEGIN, MARK_END = "<!-- accuracy:begin -->", "<!-- accuracy:end -->"


def fill_doc(doc: Path, md: str) -> bool:
    """Replace the text between the accuracy markers of ``doc``; False when absent."""
    if not doc.exists():
        return False
    text = doc.read_text()
    if MARK_BEGIN not in text or MARK_END not in text:
        return False
    a, rest_ = text.split(MARK_BEGIN, 1)
    _, b = rest_.split(MARK_END, 1)
    doc.write_text(f"{a}{MARK_BEGIN}\n{md}\n{MARK_END}{b}")
    return True


def run(out: Path, quick: bool = False, only=None, seeds=None, epochs: int | None = None, progress: bool = True,
        timeout: int = 7200, wire=("float32",), keep_done: bool = False) -> tuple[list[dict], str]:
    """``gnnpipe-bench accuracy``: run the configurations, merge into ``out/accuracy.json``
    (``--quick``: ``out/accuracy-quick/accuracy.json``); nothing outside ``out`` is written.

    Args:
        out: results root (runs in ``out/accuracy/<name>/seed<k>``).
        quick: Cora GCN-2 graph-parallel only, 20 epochs, one seed.
        only: configuration names (default: all of :data:`CONFIGS`).
        seeds: default ``[0]``.
        epochs: override every configuration's epoch count.
        wire: wire formats to run each configuration in (``--wire``; a lossy one is
            compared with the same configuration in float32, which must be run too).
        progress: tqdm bar over (configuration, seed).
        timeout: seconds per run.
        keep_done: skip a (configuration, seed) whose successful run with the same command is
            already in the results file (``--keep-done``: add a lossy ``--wire`` beside
            float32 rows already run, or go on after an interrupted run).

    Returns:
        (all results in the JSON file, markdown table).
    """
    from tqdm import tqdm


    C.check_only(only, CONFIGS, "configuration")
    names = ["cora-gcn2-graph"] if quick else (only or list(CONFIGS))
    seeds = [0] if quick or not seeds else list(seeds)
    epochs = 20 if quick else epochs
    out = Path(out)
    # A quick run must never overwrite a real result of the same configuration and seed;
    # everything it writes stays in its own folder.
    sub = C.sub_dir(out, "accuracy", quick).name
    results_file = out / sub / "accuracy.json" if quick else out / "accuracy.json"
    results = json.loads(results_file.read_text()) if results_file.exists() else []
    for w in wire:
        try:
            check_format(w)
        except ValueError as e:
            raise GnnpipeError(f"--wire: {e}") from None
    names = [variant(n, w) for n in names for w in dict.fromkeys(wire)]
    todo = [(n, s) for n in names for s in seeds]
    if keep_done:
        kept = [(n, s) for n, s in todo if done_already(results, n, s, out / sub, epochs)]
        if kept:
            log.info("--keep-done: %d run(s) already in %s, not run again: %s", len(kept), results_file,
                     ", ".join(f"{n} seed {s}" for n, s in kept))
        todo = [x for x in todo if x not in kept]
    for name, seed in tqdm(todo, desc="accuracy", disable=not progress):
        r, load = C.timed_cell(lambda: run_one(name, seed, out / sub, timeout, epochs), f"{name} seed {seed}")
        r.update(C.load_fields([load]))
        results = [x for x in results if not (x["name"] == name and x["seed"] == seed)] + [r]
        results_file.parent.mkdir(parents=True, exist_ok=True)
        results_file.write_text(json.dumps(results, indent=2) + "\n")
    md = summarize(results)
    C.write_results(out / sub, results, md, {"seeds": seeds, "epochs_override": epochs})
    if any(r.get("ok") and split_wire(r["name"])[1] == "float32" for r in results):
        plot(results, out / sub / "accuracy.png")
    plot_wire(results, out / sub / "accuracy_wire.png")
    return results, md


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", nargs="*", default=None, help="configuration names")
    ap.add_argument("--group", choices=("anchor", "deep", "pipeline", "hybrid", "sampled"), default=None)
    ap.add_argument("--seeds", nargs="*", type=int, default=[0])
    ap.add_argument("--out", default=str(REPO / "results"))
    ap.add_argument("--timeout", type=int, default=7200, help="seconds per run")
    ap.add_argument("--list", action="store_true")
    a = ap.parse_args()
    if a.list:
        for n, (g, r, f, t) in CONFIGS.items():
            print(f"{n:28s} {g:9s} {r} ranks  target: {t}")
        return 0
    names = a.only or [n for n, c in CONFIGS.items() if a.group is None or c[0] == a.group]
    _, md = run(Path(a.out), only=names, seeds=a.seeds, timeout=a.timeout)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
