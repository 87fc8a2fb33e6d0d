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
    cluster   training on emulated hosts with shaped links (root): one job, or --sweep over
              link rates x modes x graphs x models (own flags: gnnpipe-bench cluster --help)
    tta       wall time to a target accuracy per mode, wire and link (own flags:
              gnnpipe-bench tta --help)
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

from gnnpipe._base import GnnpipeError
from gnnpipe.bench import common as C
from gnnpipe.cli import ArgumentParser
from gnnpipe.config import WIRE_FORMATS

SUBS = ("comm", "epoch", "memory", "scale", "overhead", "accuracy", "cluster", "tta", "report")


def _ints(s: str) -> list[int]:
    return [int(x) for x in s.split(",") if x]


def build_parser() -> argparse.ArgumentParser:
    ap = ArgumentParser(prog="gnnpipe-bench", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("sub", choices=SUBS, help="which benchmark")
    ap.add_argument("--out", type=Path, default=Path("results"), help="results root (default results/)")
    ap.add_argument("--quick", action="store_true", help="tiny version, about a minute (tests)")
    ap.add_argument("--only", nargs="*", default=None, help="names to run (datasets, configurations); default all")
    ap.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bars")
    ap.add_argument("--measure", type=_int_list, default=None, help="comm: depths to measure, e.g. 8,16 (default 8,16)")
    ap.add_argument("--wire", type=_wire_list, default=None,
                    help="comm: wire formats to run every mode in; accuracy: to run every configuration "
                         "in (a lossy one is compared with float32, so list it too); comma-separated from "
                         "float32,bfloat16,int8,int4 (default float32)")
    ap.add_argument("--runs", type=int, default=None, help="epoch: repeated runs per configuration (default 3)")
    ap.add_argument("--epochs", type=int, default=None, help="epoch: epochs per run (default 5, first skipped); accuracy: override")
    ap.add_argument("--seeds", type=int, nargs="*", default=None, help="accuracy: seeds (default 0)")
    ap.add_argument("--keep-done", action="store_true",
                    help="accuracy: skip a configuration and seed already run with the same command "
                         "(in <out>/accuracy.json), e.g. float32 rows when adding --wire float32,int8")
    ap.add_argument("--sizes", type=_int_list, default=None, help="scale: node counts, e.g. 62500,250000,1000000")
    ap.add_argument("--method", choices=("metis", "random"), default="metis", help="scale: partitioner (default metis)")
    ap.add_argument("--random-above", type=int, default=None,
                    help="scale: partition graphs with more nodes than this randomly (default: never)")
    ap.add_argument("--history-dtype", choices=("float32", "bfloat16"), default="float32",
                    help="scale: pipeline/hybrid history buffers (default float32; such rows are labelled +bf16)")
    ap.add_argument("--doc", type=Path, default=None, help="report: markdown file to fill (default docs/benchmarks.md)")
    ap.add_argument("--plots", action="store_true", help="report: also copy the stored PNGs into the doc's img/")
    ap.add_argument("--debug", action="store_true", help="tracebacks")
    return ap


def _known_names(sub: str) -> list[str] | None:
    """The names ``--only`` may give for ``sub`` (None: the benchmark checks them itself)."""
    if sub == "comm":
        from gnnpipe.bench import comm

        return list(comm.DATASETS)
    if sub in ("epoch", "memory"):
        import importlib

        return list(importlib.import_module(f"gnnpipe.bench.{sub}").CASES)
    if sub == "overhead":
        return [f"{ds}-{m}" for ds in ("squirrel", "physics") for m in ("gcn", "gcnii")]
    return None


def check_args(args: argparse.Namespace) -> None:
    """Refuse bad arguments before a benchmark runs (and before it writes over earlier results).

    Raises:
        GnnpipeError: an ``--out`` that is a file or lies under one, a count below 1, or an
            ``--only`` name the benchmark does not have (which used to run nothing and write
            empty results over the old ones).
    """
    C.check_results_root(Path(args.out))
    if getattr(args, "keep_done", False) and args.sub != "accuracy":
        raise GnnpipeError(f"--keep-done: only gnnpipe-bench accuracy keeps runs already done, not {args.sub}")
    for flag, v in (("--runs", args.runs), ("--epochs", args.epochs), ("--random-above", args.random_above)):
        if v is not None and v < 1:
            raise GnnpipeError(f"{flag}: expected an integer >= 1, got {v}")
    for flag, vs in (("--measure", args.measure), ("--sizes", args.sizes), ("--seeds", args.seeds)):
        if vs is not None and (not vs or min(vs) < (0 if flag == "--seeds" else 1)):
            raise GnnpipeError(f"{flag}: expected {'integers >= 0' if flag == '--seeds' else 'positive integers'}, got {vs}")
    if args.only is not None and not args.quick:
        if not args.only:
            raise GnnpipeError("--only: give at least one name (or leave --only out to run all)")
        known = _known_names(args.sub)
        if known is not None:  # the same check each benchmark's run() makes, before anything starts
            C.check_only(args.only, known, "name(s)")


def _wire_list(s: str) -> list[str]:
    """``--wire`` for argparse: comma-separated wire formats."""
    got = [x for x in s.split(",") if x]
    bad = [x for x in got if x not in WIRE_FORMATS]
    if not got or bad:
        raise argparse.ArgumentTypeError(f"expected comma-separated formats from {','.join(WIRE_FORMATS)}, got {s!r}")
    return got


def _int_list(s: str) -> list[int]:
    """``_ints`` for argparse: a bad list is a usage error, not a traceback."""
    try:
        return _ints(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {s!r}") from None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``gnnpipe-bench``; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["cluster"]:
        # Its own flags and a '--' tail of gnnpipe-train arguments: its own parser.
        from gnnpipe.bench import cluster

        return cluster.main(argv[1:])
    if argv[:1] == ["tta"]:
        from gnnpipe.bench import tta

        return tta.main(argv[1:])
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.debug else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        check_args(args)
        args.out = Path(args.out).resolve()  # from any working directory; every part of a run sees the same
        rows, md = _dispatch(args)
    except GnnpipeError as e:
        if args.debug:
            raise
        print(f"gnnpipe-bench {args.sub}: error: {e}", file=sys.stderr)
        return 2
    print(md)
    if args.sub == "report":
        return 0
    from gnnpipe.bench.common import sub_dir

    where = sub_dir(args.out, args.sub, args.quick)
    print(f"\n(results in {where}/)")
    failed = failed_rows(rows)
    if rows is not None and (failed or not rows):
        what = ", ".join(failed[:8]) + (f" and {len(failed) - 8} more" if len(failed) > 8 else "")
        print(f"gnnpipe-bench {args.sub}: error: " + (f"{len(failed)} of {len(rows)} configuration(s) failed: {what}"
              if rows else "no configuration produced a result") + f"; their logs are under {where}/",
              file=sys.stderr)
        return 1
    return 0


def failed_rows(rows) -> list[str]:
    """Names of the result rows that record a failure (an ``error``, or ``ok`` false)."""
    out = []
    for r in rows or []:
        if isinstance(r, dict) and (r.get("error") or r.get("ok") is False):
            out.append(str(r.get("name") or r.get("config") or r.get("cell") or r.get("mode") or "?"))
    return out


def _dispatch(args: argparse.Namespace) -> tuple[list | None, str]:
    """(result rows, or None for report; the markdown summary)."""
    if args.sub == "cluster":
        raise GnnpipeError("'cluster' takes its own flags: put it first, e.g. "
                           "gnnpipe-bench cluster --hosts 4 --rate 200mbit -- --config tiny")
    kw = {"quick": args.quick, "progress": args.progress}
    if args.sub == "comm":
        from gnnpipe.bench import comm

        extra = {"measure": args.measure} if args.measure else {}
        if args.wire:
            extra["wire"] = args.wire
        return comm.run(args.out, only=args.only, **extra, **kw)
    if args.sub == "epoch":
        from gnnpipe.bench import epoch

        extra = {k: v for k, v in (("runs", args.runs), ("epochs", args.epochs)) if v}
        return epoch.run(args.out, only=args.only, **extra, **kw)
    if args.sub == "memory":
        from gnnpipe.bench import memory

        return memory.run(args.out, only=args.only, **kw)
    if args.sub == "scale":
        from gnnpipe.bench import scale

        extra = {"sizes": args.sizes} if args.sizes else {}
        return scale.run(args.out, method=args.method, random_above=args.random_above, only=args.only,
                         history_dtype=args.history_dtype, **extra, **kw)
    if args.sub == "overhead":
        from gnnpipe.bench import overhead

        return overhead.run(args.out, only=args.only, **kw)
    if args.sub == "report":
        from gnnpipe.bench import report

        return None, report.run(args.out, args.doc or C.REPO / "docs" / "benchmarks.md", only=args.only, plots=args.plots)
    from gnnpipe.bench import accuracy

    extra = {"wire": args.wire} if args.wire else {}
    return accuracy.run(args.out, only=args.only, seeds=args.seeds, epochs=args.epochs, keep_done=args.keep_done,
                        **extra, **kw)


if __name__ == "__main__":
    sys.exit(main())
