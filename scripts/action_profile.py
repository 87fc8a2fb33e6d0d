"""Where a pipeline's epoch goes, per stage: the table of a ``--profile-actions`` run.

    mpirun -np 4 gnnpipe-train --mode pipeline ... --profile-actions --out runs/p
    python scripts/action_profile.py runs/p [runs/g ...]

Reads ``<run>/actions/rank<k>.jsonl`` and prints, per rank (way, stage), the median over
the epochs after the first of each kind of work (seconds), then the epoch's compute and
communication-wait medians and the rank's CPU seconds (``cpu_s``: a rank that shared its core
with others computed for longer than the CPU it got). Kinds: ``forward``/``backward`` (units' compute, the history
gather included), ``gather`` (neighbour rows into each chunk's source rows), ``encode``/
``decode`` (wire format, packing), ``wait_recv`` (waiting for the neighbour stage),
``wait_send``, ``optimizer`` (cross-way all-reduce and step), ``input`` (``--shared-input``:
the stage's share of the first layer), ``other``. A graph-parallel
run has no per-kind figures; its compute and wait columns are shown alone.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

KINDS = ("forward", "backward", "gather", "encode", "decode", "wait_recv", "wait_send", "optimizer", "input", "other")


def table(run: Path) -> str:
    files = sorted((run / "actions").glob("rank*.jsonl"), key=lambda p: int(p.stem[4:]))
    if not files:
        raise SystemExit(f"{run}: no actions/rank*.jsonl (train with --profile-actions --out {run})")
    head = ["rank", "way", "stage", *KINDS, "compute_s", "comm_s", "cpu_s"]
    rows = []
    for f in files:
        recs = [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
        recs = recs[1:] if len(recs) > 1 else recs  # the first epoch warms up
        med = lambda get: statistics.median(get(r) for r in recs)  # noqa: E731
        r0 = recs[0]
        rows.append([str(r0["rank"]), str(r0["way"]), str(r0["stage"]),
                     *(f"{med(lambda r, k=k: r['actions'].get(k, 0.0)):.3f}" if r0["actions"] else "–" for k in KINDS),
                     f"{med(lambda r: r['compute_s']):.3f}", f"{med(lambda r: r['comm_s']):.3f}",
                     f"{med(lambda r: r['cpu_s']):.3f}" if r0.get("cpu_s") is not None else "–"])
    lines = [f"{run} ({r0['mode']}, median of {len(recs)} epochs, seconds)",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="run directories trained with --profile-actions")
    for run in ap.parse_args(argv).runs:
        print(table(run) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
