"""The shared input layer measured: graph parallelism, the pipeline, and the pipeline with
``--shared-input`` (or, with ``--third local``, ``--local-carry``), on the emulated cluster,
as ratios inside one run (issue 33).

    sudo .venv/bin/python scripts/bench_shared_input.py --rates unshaped,50mbit \\
        --config "squirrel sage 4 256" --config "squirrel sage 16 100" [--reps 2] [--out DIR]
    sudo .venv/bin/python scripts/bench_shared_input.py --third local --rates 50mbit \\
        --config "coauthor_physics gcnii 32 100"

Each ``--config "DATASET MODEL LAYERS HIDDEN"`` trains 4 epochs (``--epochs``) on 4
emulated hosts × 1 rank (``gnnpipe-bench cluster``) in each mode at each rate, the modes in
turn (A B C A B C ... for ``--reps``), and takes the median epoch of epochs 1 to the end of
each run, then the median over the reps. It prints one markdown row per configuration and
rate: each mode's epoch seconds and MiB per epoch, and the pipelines' epochs as multiples of
graph parallelism's (below 1: faster), the cost model's epoch for each (the shipped profile
at the link's rate, as ``gnnpipe-bench cluster`` predicts) and whether the fastest predicted
mode is the measured fastest, with the 1-minute load before and after. The pipeline runs 4
stages and 16 chunks. Root (network namespaces).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

PIPELINE = ["--mode", "pipeline", "--stages", "4", "--chunks", "16", "--exact-every", "0"]  # the stale epoch
MODES = {"graph": ["--mode", "graph"], "pipeline": PIPELINE}
THIRD = {"shared": "--shared-input", "local": "--local-carry"}
ROW = re.compile(r"^\| (\d+)x(\d+) \| (\S+) \| ([0-9.]+) \| ([0-9.]+) \| ([0-9.]+) \| ([0-9.]+) \| ([0-9.]+) \|")


def load() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


def predicted(out: Path) -> float | None:
    """The planner's epoch for a finished job (``gnnpipe-bench cluster``'s predictor on its
    ``cell.json``: the shipped profile at the job's link rate)."""
    from gnnpipe.bench.cluster import make_predictor

    global _PREDICT
    if _PREDICT is None:
        _PREDICT = make_predictor()
    row = json.loads((out / "cell.json").read_text())
    return _PREDICT(row, row.get("rate_bps"))


_PREDICT = None


def one(cfg: list[str], mode: str, rate: str, epochs: int, out: Path) -> tuple[float, float]:
    """(median epoch s, MiB per epoch) of one cluster job."""
    dataset, model, layers, hidden = cfg
    cmd = [sys.executable, "-m", "gnnpipe.bench", "cluster", "--rate", rate, "--out", str(out), "--",
           "--dataset", dataset, "--model", model, "--layers", layers, "--hidden", hidden, "--dropout", "0.5",
           "--lr", "0.005", "--weight-decay", "0", "--epochs", str(epochs), "--eval-every", "1000000",
           *MODES[mode]]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    for line in res.stdout.splitlines():
        m = ROW.match(line)
        if m:
            return float(m.group(4)), float(m.group(8))
    raise SystemExit(f"{' '.join(cmd)}: no result row (exit {res.returncode})\n{res.stdout[-2000:]}\n{res.stderr[-3000:]}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", action="append", required=True, help='"DATASET MODEL LAYERS HIDDEN"')
    ap.add_argument("--rates", default="unshaped,50mbit")
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--third", choices=sorted(THIRD), default="shared",
                    help="the third mode: the pipeline with --shared-input (default) or --local-carry")
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--out", default=None, help="keep the run directories here (default: a temporary one)")
    ap.add_argument("--reuse", action="store_true",
                    help="a job whose run directory under --out holds its cell.json is read, not run again "
                         "(to score the planner on earlier runs)")
    args = ap.parse_args(argv)
    third = f"pipeline+{args.third}"
    MODES[third] = PIPELINE + [THIRD[args.third]]
    ab = "p+" + args.third[0]
    if os.geteuid() != 0 and not args.reuse:
        raise SystemExit("bench_shared_input: needs root (network namespaces)")
    configs = []
    for c in args.config:
        parts = c.split()
        if len(parts) != 4 or not parts[2].isdigit() or not parts[3].isdigit():
            raise SystemExit(f"--config {c!r}: expected \"DATASET MODEL LAYERS HIDDEN\", e.g. \"squirrel sage 4 256\"")
        configs.append(parts)
    root = Path(args.out or tempfile.mkdtemp(prefix="gnnpipe-shared-"))
    print(f"4 emulated hosts x 1 rank; median epoch of epochs 1-{args.epochs - 1}, median of {args.reps} rep(s); "
          f"runs under {root}")
    print(f"| config | link | graph s | pipeline s | {third} s | MiB/epoch g / p / {ab} "
          f"| pipeline vs graph | {ab} vs graph | {ab} vs pipeline | predicted g / p / {ab} s "
          "| planner's pick: measured fastest? | load before → after |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    picks = [0, 0]
    for cfg in configs:
        for rate in args.rates.split(","):
            before, after = load(), None
            got: dict = {m: [] for m in MODES}
            mib: dict = {}
            for k in range(args.reps):
                for mode in MODES:
                    name = f"{'-'.join(cfg)}-{rate}-{mode}-{k}"
                    cell = root / name / "cell.json"
                    if args.reuse and cell.exists():  # (with the load it recorded)
                        c = json.loads(cell.read_text())
                        t, b = float(c["epoch_s"]), c["bytes_train"] / 2**20
                        if mode == "graph" and k == 0:
                            before = f"{c['load1_before']:.2f}"
                        after = f"{c['load1_after']:.2f}"
                    else:
                        t, b = one(cfg, mode, rate, args.epochs, root / name)
                    got[mode].append(t)
                    mib[mode] = b
            med = {m: statistics.median(v) for m, v in got.items()}
            g, p, s = med["graph"], med["pipeline"], med[third]
            pred = {m: predicted(root / f"{'-'.join(cfg)}-{rate}-{m}-0") for m in MODES}
            pick = verdict = "–"
            if None not in pred.values():
                pick = min(pred, key=pred.get)
                ok = med[pick] == min(med.values())
                picks[0] += ok
                picks[1] += 1
                verdict = f"{pick}: {'yes' if ok else f'no ({min(med, key=med.get)} is)'}"
            ptxt = " / ".join("–" if pred[m] is None else f"{pred[m]:.3f}" for m in MODES)
            print(f"| {cfg[0]} {cfg[1].upper()}-{cfg[2]} d={cfg[3]} | {rate} | {g:.3f} | {p:.3f} | {s:.3f} | "
                  f"{mib['graph']:.1f} / {mib['pipeline']:.1f} / {mib[third]:.1f} | "
                  f"{p / g:.2f}× | {s / g:.2f}× | {s / p:.2f}× | {ptxt} | {verdict} | {before} → {after or load()} |", flush=True)
    print(f"\nthe planner's pick (the fastest predicted of the three) is the measured fastest in {picks[0]} of "
          f"{picks[1]} rows")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
