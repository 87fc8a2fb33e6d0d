"""``gnnpipe-bench tta``: wall time to a target accuracy, per mode, wire format and link.

Users buy a trained model, not an epoch. For one configuration (``--config``, e.g. Squirrel
GCNII-32), every mode (graph, pipeline, hybrid) in every wire format (``--wires``; ``planner``
stands for the format ``gnnpipe-plan --wire auto`` picks for that mode and link) and seed::

    gnnpipe-bench tta --config squirrel-gcnii32 --seeds 0 1 2 --rates unshaped,50mbit
    gnnpipe-bench tta --config squirrel-gcnii32 --local        # no emulated cluster: curves only
    gnnpipe-bench tta --plot results/tta/squirrel-gcnii32      # redraw and re-summarise

1. **Curves.** Graph parallelism in float32 (exact training) runs first, for the
   configuration's epochs, evaluating every ``--eval-every`` epochs. The **target** is the
   mean over the seeds of its best validation accuracy minus :data:`TARGET_MARGIN`
   (0.5 point). Every other run stops at its first evaluation that reaches the target
   (``gnnpipe-train --stop-at-val-acc``) or after the configuration's epochs (the budget).
   Curves run on the emulated cluster with unshaped links (4 hosts × 1 rank), or with
   ``--local`` under this machine's ``mpirun`` (the same numbers: the links change no bit).
2. **Epoch times.** Per (mode, wire, link): ``--timing-epochs`` epochs without evaluation on
   the emulated cluster at that rate; the median epoch after the first
   (:func:`gnnpipe.bench.cluster.epoch_summary`).
3. **Time to target** = epochs to the target × that link's median epoch. Training is
   deterministic, so a run's accuracy at each epoch does not depend on the link
   (``tests/test_tta.py`` checks the bits for a small configuration); the curve measured once
   holds at every rate, and its wall time at a rate follows from the epoch time measured
   there. Evaluation time is not counted: it is the same exact inference in every mode, as
   often as the user likes. The curve runs' own summed epoch times (unshaped) are reported
   beside, as a check of step 3.

A run that never reaches the target is reported as not reached, with its best validation
accuracy, never as a blank. Results go to ``<out>/tta/<config>/`` (``-quick`` with
``--quick``): ``curves.jsonl`` and ``timing.jsonl`` (appended as each run ends, so an
interrupted benchmark keeps what it measured; a rerun skips the runs already there),
``results.csv``/``results.json``/``summary.md`` and ``tta.png`` (validation accuracy against
wall time, one line per mode and wire, the seeds' range shaded, one panel per link).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from gnnpipe import cluster as CL
from gnnpipe._base import GnnpipeError
from gnnpipe.bench import common as C
from gnnpipe.bench.accuracy import COMMON_DEEP
from gnnpipe.bench.cluster import (MODE_COLORS, MODES, WIRE_STYLE, check_train_args, epoch_summary, machine_load,
                                   make_predictor, mode_flags, run_job)
from gnnpipe.cli import ArgumentParser, run_cli
from gnnpipe.config import WIRE_FORMATS, TrainConfig, default_exact_every
from gnnpipe.cost import WIRE_MIN_GAIN, prior_for, wire_choices

log = logging.getLogger(__name__)

#: The target: exact graph parallelism's best validation accuracy (mean over seeds) minus this.
TARGET_MARGIN = 0.005
#: World of every run: 4 hosts × 1 rank (the cluster benchmark's).
WORLD = 4

#: name -> (gnnpipe-train flags with the run length, evaluation period). The deep ones are the
#: accuracy benchmark's configurations (its flags, its epochs); ``tiny`` is for tests.
CONFIGS: dict[str, tuple[list[str], int]] = {
    "tiny": (["--dataset", "sbm", "--synth-nodes", "600", "--synth-features", "16", "--synth-classes", "4",
              "--model", "gcnii", "--layers", "4", "--hidden", "16", "--epochs", "12"], 2),
}
# Squirrel and Physics are the paper's (and the ones tuned on); Chameleon (heterophilous)
# and Amazon-Photo (homophilous) check the same on graphs nothing was tuned on.
for _ds, _short, _epochs in (("squirrel", "squirrel", 150), ("coauthor_physics", "physics", 60),
                             ("chameleon", "chameleon", 150), ("amazon_photo", "photo", 60)):
    for _model, _mname in (("gcnii", "gcnii32"), ("resgcn+", "resgcn32")):
        CONFIGS[f"{_short}-{_mname}"] = (["--dataset", _ds, "--model", _model, *COMMON_DEEP, "--epochs", str(_epochs)], 5)


# --------------------------------------------------------------------------- pure parts
def target_of(graph_curves: Sequence[Mapping[str, Any]]) -> float:
    """Mean over seeds of exact graph parallelism's best validation accuracy, minus the margin."""
    if not graph_curves:
        raise GnnpipeError("no float32 graph-parallel curve to take the target from")
    return statistics.mean(max(c["val"]) for c in graph_curves) - TARGET_MARGIN


def epochs_to(curve: Mapping[str, Any], target: float) -> int | None:
    """Epochs trained (1-based) when the curve first reached ``target``; None if never."""
    for epoch, v in zip(curve["epochs"], curve["val"]):
        if v >= target:
            return epoch + 1
    return None


def _flag_value(args: Sequence[str], flag: str) -> str | None:
    """The value of ``flag`` in a run's gnnpipe-train flags (``FLAG V`` or ``FLAG=V``), or None."""
    args, value = [str(a) for a in args], None
    for i, a in enumerate(args):  # the last one counts, as for argparse
        if a == flag and i + 1 < len(args):
            value = args[i + 1]
        elif a.startswith(flag + "="):
            value = a.split("=", 1)[1]
    return value


def _without_flag(args: Sequence[str], flag: str) -> list[str]:
    """``args`` without ``flag`` and its value (``--flag V`` or ``--flag=V``)."""
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a == flag:
            skip = True
        elif not a.startswith(flag + "="):
            out.append(a)
    return out


def _count_flag(args: Sequence[str], flag: str) -> int:
    """An integer flag >= 0 of a run's gnnpipe-train flags (0: absent)."""
    v = _flag_value(args, flag)
    if v is None:
        return 0
    try:
        n = int(v)
    except ValueError:
        n = -1
    if n < 0:
        raise GnnpipeError(f"{flag} {v!r}: expected an integer >= 0")
    return n


def exact_every_of(args: Sequence[str]) -> int:
    """The ``--exact-every`` a run with these gnnpipe-train flags trains with: the flag's
    value, or gnnpipe-train's default for the run's mode (0: no exact epochs among the stale
    ones)."""
    if _flag_value(args, "--exact-every") is not None:
        return _count_flag(args, "--exact-every")
    return default_exact_every(_flag_value(args, "--mode") or TrainConfig.mode, "--exact" in args, drift_bounded(args))


def _every_of(rec: Mapping[str, Any]) -> int:
    """A stored curve's ``--exact-every``: the value it recorded, or for a record written
    before curves recorded it, its flag's (the default was 0 then)."""
    if "exact_every" in rec:
        return int(rec["exact_every"])
    return _count_flag(rec.get("args", ()), "--exact-every")


def drift_bounded(args: Sequence[str]) -> bool:
    """Whether a run's gnnpipe-train flags choose its exact epochs by ``--drift-bound``."""
    v = _flag_value(args, "--drift-bound")
    if v is None:
        return False
    try:
        return float(v) > 0
    except ValueError:
        raise GnnpipeError(f"--drift-bound {v!r}: expected a number >= 0") from None


def exact_from_of(args: Sequence[str]) -> int:
    """The ``--exact-from`` of a run's gnnpipe-train flags (0: none)."""
    return _count_flag(args, "--exact-from")


def marks_exact_epochs(args: Sequence[str]) -> bool:
    """Whether a run's exact epochs are its own, read from its metrics' marks
    (``--drift-bound``, ``--exact-from``), rather than every ``--exact-every``'th."""
    return drift_bounded(args) or exact_from_of(args) > 0


def _is_exact(rec: Mapping[str, Any], exact_every: int) -> bool:
    # metrics.jsonl marks a stale run's exact epochs ("exact"); records written before it did
    # are --exact-every's epochs e % N == 0
    if "exact" in rec:
        return bool(rec["exact"])
    return bool(exact_every) and rec["epoch"] % exact_every == 0


def epoch_times(metrics: Sequence[Mapping[str, Any]], exact_every: int) -> dict[str, float]:
    """Median epoch time of a run's records, the first epoch left out where the kind has
    others: ``epoch_s`` over its stale epochs and, with ``exact_every`` or epochs marked
    ``exact`` (``--drift-bound``'s), ``exact_epoch_s`` over its exact ones (marked, or
    epochs ``e % exact_every == 0``), which cost more (the stages take turns). A kind the
    run never trained (a curve stopped at its target early) takes the other's time."""
    def median(kind_exact: bool) -> float | None:
        for eps in (metrics[1:], metrics):  # the first epoch only where it is the kind's one
            ts = [float(r["epoch_time_s"]) for r in eps if _is_exact(r, exact_every) == kind_exact]
            if ts:
                return statistics.median(ts)
        return None

    if not metrics:
        raise GnnpipeError("the run wrote no epochs to metrics.jsonl")
    stale, exact = median(False), median(True)
    out = {"epoch_s": stale if stale is not None else exact}
    if exact_every or any(r.get("exact") for r in metrics):
        out["exact_epoch_s"] = exact if exact is not None else stale
    return out


def seconds_to(epochs: int, epoch_s: float, exact_epoch_s: float | None = None, exact_every: int = 0,
               exact_epochs: Sequence[int] | None = None) -> float:
    """Wall time of the first ``epochs`` epochs: ``epoch_s`` each, ``exact_epoch_s`` for the
    exact ones: those listed in ``exact_epochs`` (a run's own, ``--drift-bound``), else those
    of ``exact_every``."""
    if exact_epoch_s is None or (not exact_every and exact_epochs is None):
        return epochs * epoch_s
    if exact_epochs is not None:
        n_exact = sum(1 for e in exact_epochs if e < epochs)
    else:
        n_exact = (epochs + exact_every - 1) // exact_every  # epochs 0, N, 2N, ... below ``epochs``
    return n_exact * exact_epoch_s + (epochs - n_exact) * epoch_s


def mean_sd(xs: Sequence[float]) -> tuple[float, float]:
    return statistics.mean(xs), (statistics.stdev(xs) if len(xs) > 1 else 0.0)


def summarize(curves: Sequence[Mapping[str, Any]], timing: Sequence[Mapping[str, Any]],
              rates: Sequence[str]) -> tuple[list[dict], float]:
    """One row per (mode, wire, rate): epochs and seconds to the target over the seeds.

    Returns:
        (rows, target). A row's ``tta_s`` is the mean over the seeds that reached the target
        (``reached`` of ``seeds``); ``speedup`` is graph parallelism's float32 ``tta_s`` at the
        same rate over the row's, when both reached it on every seed.
    """
    target = target_of([c for c in curves if c["mode"] == "graph" and c["wire"] == "float32"])
    epoch_s = {(t["mode"], t["wire"], t["rate"]): t["epoch_s"] for t in timing if "epoch_s" in t}
    exact_s = {(t["mode"], t["wire"], t["rate"]): t["exact_epoch_s"] for t in timing if "exact_epoch_s" in t}
    # a (mode, wire) is reported at the links it was timed at (failed timings included): the
    # planner's wire of one link is not run at the others
    timed = {(t["mode"], t["wire"], t["rate"]) for t in timing}
    rows = []
    for mode, wire in sorted({(c["mode"], c["wire"]) for c in curves}, key=lambda k: (MODES.index(k[0]), k[1])):
        runs = sorted((c for c in curves if (c["mode"], c["wire"]) == (mode, wire)), key=lambda c: c["seed"])
        to = [epochs_to(c, target) for c in runs]
        args = runs[0].get("args", ())
        every = _every_of(runs[0])
        drift, since, marked = drift_bounded(args), exact_from_of(args), marks_exact_epochs(args)
        hit = [e for e in to if e is not None]
        own = [c.get("exact_epochs") if marked else None for c, e in zip(runs, to) if e is not None]
        summed = [sum(c["epoch_time_s"][: e]) for c, e in zip(runs, to) if e is not None]
        for rate in rates:
            if (mode, wire, rate) not in timed and any(t[:2] == (mode, wire) for t in timed):
                continue  # timed at other links only (the planner's pick for one link)
            row = {"mode": mode, "wire": wire, "rate": rate, "seeds": len(runs), "reached": len(hit),
                   "target_val": target, "epochs_to_target": to,
                   "best_val": [max(c["val"]) for c in runs], "epoch_s": epoch_s.get((mode, wire, rate))}
            if every or marked:
                row["exact_every"], row["exact_epoch_s"] = every, exact_s.get((mode, wire, rate))
            if drift:
                row["drift_bound"] = True
            if since:
                row["exact_from"] = since
            if hit:
                row["epochs_mean"], row["epochs_sd"] = mean_sd(hit)
                if row["epoch_s"] is not None and (not (every or marked) or row["exact_epoch_s"] is not None):
                    row["tta_s"], row["tta_sd"] = mean_sd([seconds_to(e, row["epoch_s"], row.get("exact_epoch_s"), every,
                                                                      ex)
                                                           for e, ex in zip(hit, own)])
                if rate in ("unshaped", "local") and summed:  # the rate the curves ran at
                    row["summed_s"] = statistics.mean(summed)
            rows.append(row)
    for r in rows:
        ref = next((g for g in rows if g["mode"] == "graph" and g["wire"] == "float32" and g["rate"] == r["rate"]), None)
        if ref and "tta_s" in ref and "tta_s" in r and ref["reached"] == ref["seeds"] and r["reached"] == r["seeds"]:
            r["speedup"] = ref["tta_s"] / r["tta_s"]
    return rows, target


def table(rows: Sequence[Mapping[str, Any]], target: float) -> str:
    out = []
    for r in rows:
        if r["reached"]:
            eps = f"{r['epochs_mean']:.1f} ± {r['epochs_sd']:.1f}"
            tta = f"{r['tta_s']:.1f} ± {r['tta_sd']:.1f}" if "tta_s" in r else "no epoch time"
        else:
            lo, hi = 100 * min(r["best_val"]), 100 * max(r["best_val"])
            best = f"{hi:.2f} %" if len(r["best_val"]) == 1 else f"{lo:.2f}–{hi:.2f} % over the seeds"
            eps, tta = "not reached", f"not reached (best val {best})"
        if r["reached"] and r["reached"] < r["seeds"]:
            tta += f" ({r['seeds'] - r['reached']} seed(s) never reached it)"
        ep = "–" if r["epoch_s"] is None else f"{r['epoch_s']:.3f}"
        if r.get("exact_every") or r.get("drift_bound") or r.get("exact_from"):
            ex = "–" if r.get("exact_epoch_s") is None else f"{r['exact_epoch_s']:.3f}"
            ep += f" (exact every {r['exact_every']}: {ex})" if r.get("exact_every") else f" (exact: {ex})"
        out.append([r["mode"], r["wire"], r["rate"], f"{r['reached']}/{r['seeds']}", eps, ep, tta,
                     f"{r['speedup']:.2f}×" if "speedup" in r else "–",
                     f"{r['summed_s']:.1f}" if "summed_s" in r else "–"])
    return (f"Target: validation accuracy {100 * target:.2f} % (exact graph parallelism's best, mean over "
            f"seeds, minus {100 * TARGET_MARGIN:.1f} point).\n\n"
            + C.md_table(["mode", "wire", "link", "seeds reaching", "epochs to target", "epoch s",
                          "time to target s (mean ± sd)", "vs graph float32", "summed epochs s (curve run)"], out))


def plot(curves: Sequence[Mapping[str, Any]], rows: Sequence[Mapping[str, Any]], target: float,
         rates: Sequence[str], path: Path) -> Path:
    """Validation accuracy against wall time (epochs × the link's epoch time), one panel per
    link, one line per mode and wire (mean over seeds), the seeds' range shaded."""
    plt = C.pyplot()
    fig, axes = plt.subplots(1, len(rates), figsize=(5.5 * len(rates), 4.4), squeeze=False, layout="constrained")
    handles, labels = [], []
    for ax, rate in zip(axes[0], rates):
        for r in rows:
            if r["rate"] != rate:
                continue
            runs = [c for c in curves if (c["mode"], c["wire"]) == (r["mode"], r["wire"])]
            epoch_s = r["epoch_s"]
            if epoch_s is None and rate in ("unshaped", "local"):  # not timed: the curve runs' own epochs
                epoch_s = statistics.median(t for c in runs for t in c["epoch_time_s"][1:] or c["epoch_time_s"])
            if epoch_s is None:
                continue
            points: dict[int, list[float]] = {}
            for c in runs:
                for e, v in zip(c["epochs"], c["val"]):
                    points.setdefault(e, []).append(100 * v)
            own = (runs[0].get("exact_epochs") if r.get("drift_bound") or r.get("exact_from")
                   else None)  # (the first seed's, for the mean)

            def at(e: int, own=own) -> float:
                return seconds_to(e + 1, epoch_s, r.get("exact_epoch_s"), r.get("exact_every", 0), own)

            # The mean and range only while every seed still runs (a run stops at the target:
            # a mean over the seeds left would jump); after that each seed's own thin line.
            xs = sorted(e for e, vs in points.items() if len(vs) == len(runs))
            style = WIRE_STYLE.get(r["wire"], "o-")
            color = MODE_COLORS.get(r["mode"], "k")
            for c in runs:
                tail = [(e, v) for e, v in zip(c["epochs"], c["val"]) if not xs or e >= xs[-1]]
                if len(tail) > 1:
                    ax.plot([at(e) for e, _ in tail], [100 * v for _, v in tail], "-", color=color, lw=0.7, alpha=0.6)
            t = [at(e) for e in xs]
            (h,) = ax.plot(t, [statistics.mean(points[e]) for e in xs], style, color=color, ms=3, lw=1.4)
            ax.fill_between(t, [min(points[e]) for e in xs], [max(points[e]) for e in xs], color=color, alpha=0.15)
            label = f"{r['mode']} {r['wire']}" + (f", exact every {r['exact_every']}" if r.get("exact_every") else
                                                  ", drift-bounded exact epochs" if r.get("drift_bound") else "")
            label += f", exact from {r['exact_from']}" if r.get("exact_from") else ""
            if label not in labels:
                handles.append(h)
                labels.append(label)
        ax.axhline(100 * target, color="k", ls="--", lw=0.8)
        ax.text(ax.get_xlim()[1], 100 * target, " target", va="bottom", ha="right", fontsize=8)
        ax.set_xlabel("wall time, training only (s)")
        ax.set_ylabel("validation accuracy (%)")
        ax.set_title(f"link {rate}")
        ax.grid(alpha=0.3)
    C.legend_below(fig, handles, labels)
    return C.save_fig(fig, path)


# --------------------------------------------------------------------------- running
def planner_wire(flags: Sequence[str], mode: str, rate: str, predict) -> str:
    """The wire ``gnnpipe-plan --wire auto`` would pick for ``mode`` at ``rate``: the fastest
    predicted epoch over the formats within the default accuracy budget, a lossy format
    ranking as if :data:`gnnpipe.cost.WIRE_MIN_GAIN` slower (the planner's order)."""
    model = flags[list(flags).index("--model") + 1] if "--model" in flags else None
    allowed, _ = wire_choices("auto", accuracy=prior_for(model))
    rate_bps = CL.parse_rate(rate)
    best, best_key = "float32", None
    for w in allowed:
        pred = predict({"args": [*flags, *mode_flags(mode, WORLD), "--wire", w], "world": WORLD,
                        "ranks_per_host": 1}, rate_bps)
        if pred is None:
            continue
        key = pred * (1.0 + WIRE_MIN_GAIN if w != "float32" else 1.0)
        if best_key is None or key < best_key:
            best, best_key = w, key
    return best


def check_train_flags(base: Sequence[str], train_flags: Sequence[str], mode: str) -> None:
    """Parse ``base + train_flags`` as gnnpipe-train would (nothing runs).

    Raises:
        GnnpipeError: naming ``--train-flags`` and the mode, with gnnpipe-train's one line.
    """
    if train_flags:
        check_train_args([*base, *train_flags], f"--train-flags {' '.join(train_flags)!r} in --mode {mode}")


#: The fields a stored record must have, with their types (a hand-edited or cut file is
#: refused in one line naming the file, the line and the field, not a traceback).
_CURVE_FIELDS = {"mode": str, "wire": str, "seed": int, "epochs": list, "val": list, "test": list,
                 "epoch_time_s": list}
_TIMING_FIELDS = {"mode": str, "wire": str, "rate": str}


def _read_jsonl(path: Path, fields: Mapping[str, type] | None = None) -> list[dict]:
    """A stored ``curves.jsonl`` or ``timing.jsonl`` (none: []).

    Raises:
        GnnpipeError: a line that is not a JSON object with ``fields`` of their types, or
            lists of numbers of unequal length where a curve needs them equal.
    """
    if not path.is_file():
        return []
    if fields is None:
        fields = _CURVE_FIELDS if path.name == "curves.jsonl" else _TIMING_FIELDS
    recs = []
    try:
        text = path.read_text()
    except UnicodeDecodeError as e:
        raise GnnpipeError(f"{path}: not a text file ({e.reason} at byte {e.start})") from None
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise GnnpipeError(f"{path}, line {n}: not JSON ({e.msg}); remove the line to rerun that run") from None
        if not isinstance(rec, dict):
            raise GnnpipeError(f"{path}, line {n}: expected a JSON object, got {type(rec).__name__}")
        for key, typ in fields.items():
            if not isinstance(rec.get(key), typ) or isinstance(rec.get(key), bool):
                raise GnnpipeError(f"{path}, line {n}: field {key!r} should be a {typ.__name__}, "
                                   f"got {rec.get(key)!r:.60}")
        if rec["mode"] not in MODES or rec["wire"] not in WIRE_FORMATS:
            raise GnnpipeError(f"{path}, line {n}: mode {rec['mode']!r:.30} and wire {rec['wire']!r:.30} should be "
                               f"one of {', '.join(MODES)} and one of {', '.join(WIRE_FORMATS)}")
        if "rate" in fields and rec["rate"] != "local":
            try:
                CL.parse_rate(rec["rate"])
            except GnnpipeError:
                raise GnnpipeError(f"{path}, line {n}: rate {rec['rate']!r:.30} is not a link rate") from None
        every = rec.get("exact_every", 0)
        if isinstance(every, bool) or not isinstance(every, int) or not 0 <= every < 2**63:
            raise GnnpipeError(f"{path}, line {n}: exact_every {every!r:.30} should be an integer >= 0 "
                               "(0: no exact epochs)")
        # (the list fields are a curve's; a timing record's "epochs" counts its timed epochs)
        nums = [rec[k] for k in ("epochs", "val", "test", "epoch_time_s") if k in fields]
        if any(not all(_finite(x) for x in xs) for xs in nums):
            raise GnnpipeError(f"{path}, line {n}: epochs, val, test and epoch_time_s must hold finite numbers")
        if "epoch_time_s" in fields:  # seconds are floats: an integer of 19 digits times the epochs leaves int64
            rec["epoch_time_s"] = [float(t) for t in rec["epoch_time_s"]]
        if "val" in fields and (len(rec["val"]) != len(rec["epochs"]) or not rec["val"]):
            raise GnnpipeError(f"{path}, line {n}: {len(rec['epochs'])} epochs but {len(rec['val'])} "
                               "validation accuracies (expected as many, at least one)")
        if "val" in fields and len(rec["test"]) != len(rec["val"]):
            raise GnnpipeError(f"{path}, line {n}: {len(rec['val'])} validation but {len(rec['test'])} "
                               "test accuracies (expected as many)")
        eps = rec["epochs"] if "val" in fields else []
        if not all(isinstance(e, int) and e >= 0 for e in eps) or any(b <= a for a, b in zip(eps, eps[1:])):
            raise GnnpipeError(f"{path}, line {n}: field 'epochs' should hold increasing epoch counts "
                               f"(integers >= 0), got {rec['epochs']!r:.60}")
        if "args" in rec and not (isinstance(rec["args"], list) and all(isinstance(a, str) for a in rec["args"])):
            raise GnnpipeError(f"{path}, line {n}: field 'args' should be a list of gnnpipe-train flags")
        ex = rec.get("exact_epochs", [])
        if not (isinstance(ex, list) and all(isinstance(e, int) and not isinstance(e, bool) and e >= 0 for e in ex)):
            raise GnnpipeError(f"{path}, line {n}: field 'exact_epochs' should be a list of epochs (integers >= 0), "
                               f"got {ex!r:.60}")
        for key in ("epoch_s", "exact_epoch_s"):
            v = rec.get(key)
            if v is None:
                continue
            if not (_finite(v) and v > 0):
                raise GnnpipeError(f"{path}, line {n}: field {key!r} should be a positive number, got {v!r:.60}")
            rec[key] = float(v)
        recs.append(rec)
    return recs


def _finite(x: Any) -> bool:
    """A JSON number (not a bool) that is finite as a float (an integer too large for a float is not)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return False
    try:
        return math.isfinite(float(x))
    except OverflowError:
        return False


def _append(path: Path, rec: Mapping[str, Any]) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(rec) + "\n")


def _curve_of(out: Path, mode: str, wire: str, seed: int) -> dict:
    recs = C.read_metrics(out)
    evald = [r for r in recs if "val_acc" in r]
    if not evald:
        raise GnnpipeError(f"{out}: the run evaluated no epoch")
    return {"mode": mode, "wire": wire, "seed": seed, "epochs": [r["epoch"] for r in evald],
            "val": [r["val_acc"] for r in evald], "test": [r["test_acc"] for r in evald],
            "epoch_time_s": [r["epoch_time_s"] for r in recs], "trained": len(recs), "out": str(out),
            "diverging": any(r.get("diverging") for r in recs),
            "exact_epochs": [r["epoch"] for r in recs if r.get("exact")]}


def _train(args: list[str], out: Path, local: bool, rate: str, timeout_s: float) -> None:
    if out.exists():  # an earlier, interrupted attempt: its run directory would be refused
        shutil.rmtree(out)
    if local:
        cmd = [str(C.venv_bin() / "mpirun"), "-np", str(WORLD), sys.executable, "-m", "gnnpipe.train", *args,
               "--out", str(out), "--no-progress"]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s,
                           env=dict(os.environ, OMP_NUM_THREADS="1"))
        if p.returncode != 0:
            raise GnnpipeError(f"training failed (exit {p.returncode}); {' '.join(cmd)}\n{p.stderr[-2000:]}")
        return
    run_job(CL.ClusterSpec(WORLD, CL.parse_rate(rate), None, 1), args, out, "torch", timeout_s)


def run(out: Path, config: str, seeds: Sequence[int] = (0, 1, 2), modes: Sequence[str] = MODES,
        wires: Sequence[str] = ("float32",), rates: Sequence[str] = ("unshaped", "50mbit"), local: bool = False,
        timing_epochs: int = 4, epochs: int | None = None, quick: bool = False,
        timeout_s: float = 7200.0, train_flags: Sequence[str] = ()) -> tuple[list[dict], str]:
    """Run the benchmark (see the module docstring); returns (rows, markdown).

    ``train_flags``: more ``gnnpipe-train`` flags for every run but the exact reference
    (graph parallelism in float32), e.g. a convergence switch of the stale modes to measure;
    give such a run its own ``out``."""
    if config not in CONFIGS:
        raise GnnpipeError(f"--config {config!r}: expected one of {', '.join(CONFIGS)}")
    for w in wires:
        if w != "planner" and w not in WIRE_FORMATS:
            raise GnnpipeError(f"--wires: {w!r} is not one of {', '.join(WIRE_FORMATS)} or 'planner'")
    for rate in rates:
        CL.parse_rate(rate)
    if local:
        rates = ["local"]
    elif (why := CL.unavailable()) is not None:
        raise GnnpipeError(f"the emulated cluster needs root and iproute2 ({why}); use --local for the curves only")
    base, eval_every = CONFIGS[config]
    base = list(base)
    if epochs is not None:
        base[base.index("--epochs") + 1] = str(epochs)
    for mode in modes:  # a flag gnnpipe-train refuses would fail a run hours in: refuse it now
        if mode != "graph" or any(w != "float32" for w in wires):  # (the exact reference takes none)
            check_train_flags([*base, *mode_flags(mode, WORLD)], train_flags, mode)
    d = C.sub_dir(Path(out), "tta", quick) / config
    d.mkdir(parents=True, exist_ok=True)
    curves_f, timing_f = d / "curves.jsonl", d / "timing.jsonl"
    predict = make_predictor() if "planner" in wires and not local else None
    combos = []  # (mode, wire, rates it is timed at)
    for mode in modes:
        for w in wires:
            if w == "planner":
                for rate in rates:
                    combos.append((mode, planner_wire(base, mode, rate, predict) if predict else "float32", [rate]))
            else:
                combos.append((mode, w, list(rates)))
    merged: dict[tuple[str, str], list[str]] = {}
    for mode, w, rs in combos:
        merged.setdefault((mode, w), [])
        merged[(mode, w)] += [r for r in rs if r not in merged[(mode, w)]]
    if ("graph", "float32") not in merged:
        merged = {("graph", "float32"): [], **merged}  # the target's reference always runs
    done = {(c["mode"], c["wire"], c["seed"]) for c in _read_jsonl(curves_f)}
    curve_rate = "local" if local else "unshaped"

    def curve(mode: str, w: str, seed: int, stop: float | None) -> None:
        if (mode, w, seed) in done:
            return
        args = [*base, "--eval-every", str(eval_every), "--seed", str(seed), *mode_flags(mode, WORLD),
                *(["--wire", w] if w != "float32" else []),
                *(["--stop-at-val-acc", f"{stop:.6f}"] if stop is not None else []),
                *(train_flags if stop is not None else [])]
        run_dir = d / "runs" / f"{mode}-{w}-seed{seed}"
        t0, before = time.monotonic(), machine_load()
        _train(args, run_dir, local, curve_rate, timeout_s)
        rec = {**_curve_of(run_dir, mode, w, seed), "args": args, "exact_every": exact_every_of(args),
               "wall_s": time.monotonic() - t0,
               "load1_before": before["load1"], "load1_after": machine_load()["load1"], "cores": before["cores"]}
        _append(curves_f, rec)
        done.add((mode, w, seed))
        print(f"tta {config}: {mode} {w} seed {seed}: best val {max(rec['val']):.4f} after {rec['trained']} "
              f"epochs ({rec['wall_s']:.0f} s)", file=sys.stderr)

    for seed in seeds:
        curve("graph", "float32", seed, None)
    target = target_of([c for c in _read_jsonl(curves_f) if c["mode"] == "graph" and c["wire"] == "float32"])
    for (mode, w) in merged:
        for seed in seeds:
            curve(mode, w, seed, target)
    timed = {(t["mode"], t["wire"], t["rate"]) for t in _read_jsonl(timing_f)}
    if not local:
        for (mode, w), rs in merged.items():
            for rate in rs or list(rates):
                if (mode, w, rate) in timed:
                    continue
                args = [*base, "--eval-every", "1000000", "--seed", "0", *mode_flags(mode, WORLD),
                        *(["--wire", w] if w != "float32" else []),
                        *(train_flags if (mode, w) != ("graph", "float32") else [])]
                every, drift, since = exact_every_of(args), drift_bounded(args), exact_from_of(args)
                # with exact epochs: two of each kind after the first epoch, whatever --timing-epochs says
                # (--drift-bound: as many as the drift asks for, at most every other epoch; --exact-from:
                # its cool-down moved to the run's last two epochs)
                n = (max(timing_epochs, 2 * every + 1) if every else max(timing_epochs, 5) if drift else
                     timing_epochs)
                if since:
                    args = [a for a in _without_flag(args, "--exact-from")] + ["--exact-from", str(n)]
                    n += 2
                args[args.index("--epochs") + 1] = str(n)
                run_dir = d / "timing" / f"{mode}-{w}-{rate}"
                before = machine_load()
                try:
                    _train(args, run_dir, False, rate, timeout_s)
                    metrics = C.read_metrics(run_dir)
                    rec = {"mode": mode, "wire": w, "rate": rate, **epoch_summary(metrics),
                           **epoch_times(metrics, every), "exact_every": every,
                           "load1_before": before["load1"], "load1_after": machine_load()["load1"],
                           "cores": before["cores"]}
                except GnnpipeError as e:
                    rec = {"mode": mode, "wire": w, "rate": rate, "error": str(e)[:2000]}
                    log.warning("timing %s %s %s failed: %s", mode, w, rate, str(e).splitlines()[0])
                _append(timing_f, rec)
    else:
        for c in _read_jsonl(curves_f):  # --local: the curve runs' own epochs are the timing
            if (c["mode"], c["wire"], "local") not in timed:
                every, own = _every_of(c), marks_exact_epochs(c.get("args", ()))
                marked = set(c.get("exact_epochs", ())) if own else None
                recs = [{"epoch": e, "epoch_time_s": t, **({"exact": e in marked} if own else {})}
                        for e, t in enumerate(c["epoch_time_s"])]
                _append(timing_f, {"mode": c["mode"], "wire": c["wire"], "rate": "local", "exact_every": every,
                                   **epoch_times(recs, every)})
                timed.add((c["mode"], c["wire"], "local"))
    return report(d, rates)


def report(d: Path, rates: Sequence[str] | None = None) -> tuple[list[dict], str]:
    """Summarise, tabulate and plot what ``d`` holds (also ``gnnpipe-bench tta --plot DIR``)."""
    curves, timing = _read_jsonl(d / "curves.jsonl"), _read_jsonl(d / "timing.jsonl")
    if not curves:
        raise GnnpipeError(f"{d}: no curves.jsonl with runs in it (run gnnpipe-bench tta first)")
    if rates is None:
        rates = list(dict.fromkeys(t["rate"] for t in timing)) or ["unshaped"]
    rows, target = summarize(curves, timing, rates)
    md = f"## tta — {d.name}\n\n" + table(rows, target)
    diverged = sorted({f"{c['mode']} {c['wire']} seed {c['seed']}" for c in curves if c.get("diverging")})
    md += "\n\nRuns marked diverging (validation fell 20 points below its best): " + (", ".join(diverged) or "none")
    C.write_results(d, rows, md, {"target_val": target})
    plot(curves, rows, target, rates, d / "tta.png")
    return rows, md


def build_parser() -> argparse.ArgumentParser:
    ap = ArgumentParser(prog="gnnpipe-bench tta", description=__doc__.split("\n\n")[0],
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="squirrel-gcnii32", help=f"one of {', '.join(CONFIGS)} (default squirrel-gcnii32)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="seeds (default 0 1 2)")
    ap.add_argument("--modes", default=",".join(MODES), help="comma-separated modes (default graph,pipeline,hybrid)")
    ap.add_argument("--wires", default="float32",
                    help="comma-separated wire formats; 'planner': the one gnnpipe-plan --wire auto picks per mode "
                         "and link (default float32)")
    ap.add_argument("--rates", default="unshaped,50mbit", help="links to time, per host (default unshaped,50mbit)")
    ap.add_argument("--local", action="store_true", help="no emulated cluster: curves under mpirun, local epoch times")
    ap.add_argument("--timing-epochs", type=int, default=4, help="epochs of each timing run (default 4, first skipped)")
    ap.add_argument("--epochs", type=int, default=None, help="override the configuration's epochs (the budget)")
    ap.add_argument("--timeout", type=float, default=7200.0, help="seconds per run (default 7200)")
    ap.add_argument("--out", type=Path, default=Path("results"), help="results root (default results/)")
    ap.add_argument("--quick", action="store_true", help="results under tta-quick/ (with --config tiny: seconds)")
    ap.add_argument("--plot", type=Path, default=None, metavar="DIR", help="only re-summarise and redraw a stored DIR")
    ap.add_argument("--train-flags", default="", metavar="'FLAGS'",
                    help="more gnnpipe-train flags for every run but the exact reference, e.g. "
                         "'--snapshot-period 0' (use its own --out)")
    ap.add_argument("--debug", action="store_true", help="tracebacks")
    return ap


def _split(s: str) -> list[str]:
    return [x for x in s.split(",") if x]


def main(argv: Sequence[str] | None = None) -> int:
    """``gnnpipe-bench tta``; bad arguments and failures are one line (:func:`gnnpipe.cli.run_cli`)."""
    return run_cli(_main, argv, prog="gnnpipe-bench tta")


def _main(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.timing_epochs < 2:  # the first epoch is left out of the median
        raise GnnpipeError(f"--timing-epochs: expected an integer >= 2, got {args.timing_epochs}")
    if args.epochs is not None and args.epochs < 1:
        raise GnnpipeError(f"--epochs: expected an integer >= 1, got {args.epochs}")
    if not (math.isfinite(args.timeout) and args.timeout > 0):
        raise GnnpipeError(f"--timeout: expected a positive number of seconds, got {args.timeout}")
    try:
        train_flags = shlex.split(args.train_flags)
    except ValueError as e:
        raise GnnpipeError(f"--train-flags {args.train_flags!r}: {e} (quote it as one shell word)") from None
    if args.plot is not None:
        _, md = report(args.plot)
    else:
        modes = _split(args.modes)
        bad = [m for m in modes if m not in MODES]
        if bad or not modes:
            raise GnnpipeError(f"--modes: expected names from {', '.join(MODES)}, got {args.modes!r}")
        if min(args.seeds) < 0:
            raise GnnpipeError(f"--seeds: expected integers >= 0, got {args.seeds}")
        C.check_results_root(args.out.resolve())
        _, md = run(args.out.resolve(), args.config, args.seeds, modes, _split(args.wires), _split(args.rates),
                    args.local, args.timing_epochs, args.epochs, args.quick, args.timeout,
                    train_flags)
    print(md)
    return 0
