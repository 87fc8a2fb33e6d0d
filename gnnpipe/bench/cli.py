"""``gnnpipe-bench SUB [--out results/] [--quick]``: the paper's experiments, one command each.

Subcommands (each writes ``results.csv``, ``results.json``, ``summary.md`` and PNG plots
into ``<out>/<SUB>/`` — ``<out>/<SUB>-quick/`` with ``--quick`` — and prints the summary
table; nothing outside ``<out>`` is written):

    comm      bytes per epoch of graph / pipeline / hybrid across depths, measured vs predicted
    epoch     epoch time (compute / comm / bubble), 2 and 4 ranks, vs the cost model and planner
    memory    peak memory per rank by mode vs the memory model
    scale     synthetic graphs up to 1M nodes / 20M edges, epoch time and memory per mode
    overhead  one process: gnnpipe against PyG's edge_index and adj_t paths, and the limit
    accuracy  the paper's accuracy protocol (long; --only, --seeds, --epochs)
    report    render docs/benchmarks.md's tables from the stored results (--doc, --plots)

``--quick`` makes each finish in about a minute (tiny graphs, one run). Every cell records
the load average and core count before and after it, and a line on stderr warns when the
1-minute load exceeds the cores.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Sequence

from gnnpipe import GnnpipeError

SUBS = ("comm", "epoch", "memory", "scale", "overhead", "accuracy", "report")


def _ints(s: str) -> list[int]:
    return [int(x) for x in s.split(",") if x]


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="gnnpipe-bench", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("sub", choices=SUBS, help="which benchmark")
    ap.add_argument("--out", type=Path, default=Path("results"), help="results root (default results/)")
    ap.add_argument("--quick", action="store_true", help="tiny version, about a minute (tests)")
    ap.add_argument("--only", nargs="*", default=None, help="names to run (datasets, configurations); default all")
    ap.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bars")
    ap.add_argument("--measure", type=_ints, default=None, help="comm: depths to measure, e.g. 8,16 (default 8,16)")
    ap.add_argument("--runs", type=int, default=None, help="epoch: repeated runs per configuration (default 3)")
    ap.add_argument("--epochs", type=int, default=None, help="epoch: epochs per run (default 5, first skipped); accuracy: override")
    ap.add_argument("--seeds", type=int, nargs="*", default=None, help="accuracy: seeds (default 0)")
    ap.add_argument("--sizes", type=_ints, default=None, help="scale: node counts, e.g. 62500,250000,1000000")
    ap.add_argument("--method", choices=("metis", "random"), default="metis", help="scale: partitioner (default metis)")
    ap.add_argument("--random-above", type=int, default=None,
                    help="scale: partition graphs with more nodes than this randomly (default: never)")
    ap.add_argument("--history-dtype", choices=("float32", "bfloat16"), default="float32",
                    help="scale: pipeline/hybrid history buffers (default float32; such rows are labelled +bf16)")
    ap.add_argument("--doc", type=Path, default=None, help="report: markdown file to fill (default docs/benchmarks.md)")
    ap.add_argument("--plots", action="store_true", help="report: also copy the stored PNGs into the doc's img/")
    ap.add_argument("--debug", action="store_true", help="tracebacks")
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``gnnpipe-bench``; returns the exit status."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.debug else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        # --out is a folder of results: a file there would be overwritten or half-used.
        if args.out.exists() and not args.out.is_dir():
            raise GnnpipeError(f"--out {args.out}: is a file; expected the results folder (default results/)")
        md = _dispatch(args)
    except GnnpipeError as e:
        if args.debug:
            raise
        print(f"gnnpipe-bench {args.sub}: error: {e}", file=sys.stderr)
        return 2
    print(md)
    if args.sub != "report":
        from gnnpipe.bench.common import sub_dir

        print(f"\n(results in {sub_dir(args.out, args.sub, args.quick)}/)")
    return 0


def _dispatch(args: argparse.Namespace) -> str:
    kw = {"quick": args.quick, "progress": args.progress}
    if args.sub == "comm":
        from gnnpipe.bench import comm

        extra = {"measure": args.measure} if args.measure else {}
        return comm.run(args.out, only=args.only, **extra, **kw)[1]
    if args.sub == "epoch":
        from gnnpipe.bench import epoch

        extra = {k: v for k, v in (("runs", args.runs), ("epochs", args.epochs)) if v}
        return epoch.run(args.out, only=args.only, **extra, **kw)[1]
    if args.sub == "memory":
        from gnnpipe.bench import memory

        return memory.run(args.out, only=args.only, **kw)[1]
    if args.sub == "scale":
        from gnnpipe.bench import scale

        extra = {"sizes": args.sizes} if args.sizes else {}
        return scale.run(args.out, method=args.method, random_above=args.random_above, only=args.only,
                         history_dtype=args.history_dtype, **extra, **kw)[1]
    if args.sub == "overhead":
        from gnnpipe.bench import overhead

        return overhead.run(args.out, only=args.only, **kw)[1]
    if args.sub == "report":
        from gnnpipe.bench import common as C
        from gnnpipe.bench import report

        return report.run(args.out, args.doc or C.REPO / "docs" / "benchmarks.md", only=args.only, plots=args.plots)
    from gnnpipe.bench import accuracy

    return accuracy.run(args.out, only=args.only, seeds=args.seeds, epochs=args.epochs, **kw)[1]


if __name__ == "__main__":
    sys.exit(main())
