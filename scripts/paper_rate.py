"""The paper-equivalent link rate of a cluster sweep, and graph ÷ pipeline there.

The paper's Reddit GCN breakdown for graph parallelism is 222 ms of compute and 634 ms of
communication: communication 2.86x compute. For each (graph, model) of a sweep this finds
the link rate at which graph parallelism's *measured* communication is 2.86x its measured
compute (communication time scales as 1/rate between two measured rates; log-linear
interpolation of comm/compute in the rate), and the measured graph ÷ pipeline epoch ratio
at that rate (interpolated the same way between the two measured rates around it; a rate
that was itself measured is read directly).

    python scripts/paper_rate.py results/cluster/sweep-<time>/rows.jsonl [--graphs squirrel,reddit-shaped]

Prints a markdown table: per (graph, model), each shaped rate's comm/compute and G ÷ P, the
paper-equivalent rate and G ÷ P there.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

PAPER_RATIO = 634.0 / 222.0  # graph parallelism's communication over compute, Reddit GCN


def _interp(x0: float, y0: float, x1: float, y1: float, x: float) -> float:
    """y at x on the line through (log x0, y0), (log x1, y1)."""
    if x0 == x1:
        return y0
    t = (math.log(x) - math.log(x0)) / (math.log(x1) - math.log(x0))
    return y0 + t * (y1 - y0)


def derive(rows: list[dict], graphs: list[str] | None = None) -> list[dict]:
    """Per (graph, model): the measured ratios by rate and the paper-equivalent rate."""
    ok = [r for r in rows if "error" not in r and r.get("rate_bps") and r.get("wire", "float32") == "float32"]
    out = []
    for g, m in dict.fromkeys((r["graph"], r["model"]) for r in ok):
        if graphs and g not in graphs:
            continue
        by = {}
        for r in ok:
            if (r["graph"], r["model"]) == (g, m):
                by.setdefault(r["rate_bps"], {})[r["mode"]] = r
        pts = []  # (rate, comm/compute of graph, G / P)
        for bps in sorted(by):
            cell = by[bps]
            if "graph" in cell and "pipeline" in cell and cell["graph"]["compute_s"] > 0:
                gr = cell["graph"]
                pts.append((bps, gr["comm_s"] / gr["compute_s"], gr["epoch_s"] / cell["pipeline"]["epoch_s"]))
        rate = gp = None
        for (b0, c0, q0), (b1, c1, q1) in zip(pts, pts[1:]):
            # comm/compute falls as the rate rises; find where it crosses the paper's ratio
            if (c0 - PAPER_RATIO) * (c1 - PAPER_RATIO) <= 0 and c0 != c1:
                # comm ∝ 1/rate: log(comm/compute) is linear in log(rate)
                t = (math.log(PAPER_RATIO) - math.log(c0)) / (math.log(c1) - math.log(c0))
                rate = math.exp(math.log(b0) + t * (math.log(b1) - math.log(b0)))
                gp = _interp(b0, q0, b1, q1, rate)
                break
        out.append({"graph": g, "model": m, "points": pts, "rate_bps": rate, "g_over_p": gp})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("rows", type=Path, help="a cluster sweep's rows.jsonl")
    ap.add_argument("--graphs", help="only these graphs, comma-separated")
    a = ap.parse_args(argv)
    try:
        rows = [json.loads(line) for line in a.rows.read_text().splitlines() if line.strip()]
    except (OSError, json.JSONDecodeError) as e:
        print(f"paper_rate: {a.rows}: cannot read the sweep's rows ({e})", file=sys.stderr)
        return 2
    res = derive(rows, a.graphs.split(",") if a.graphs else None)
    print(f"Paper ratio (communication / compute of graph parallelism): {PAPER_RATIO:.2f}\n")
    print("| graph | model | by rate: G comm/compute, G ÷ P | paper-equivalent rate | G ÷ P there |")
    print("|---|---|---|---|---|")
    for r in res:
        pts = "; ".join(f"{b / 1e6:g} Mbit/s: {c:.2f}, {q:.2f}" for b, c, q in r["points"])
        rate = f"{r['rate_bps'] / 1e6:.0f} Mbit/s" if r["rate_bps"] else "not bracketed"
        gp = f"{r['g_over_p']:.2f}" if r["g_over_p"] is not None else "–"
        print(f"| {r['graph']} | {r['model']} | {pts} | {rate} | {gp} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
