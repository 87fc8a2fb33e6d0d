"""``gnnpipe-data``: list, prepare, inspect and synthesize datasets.

Usage::

    gnnpipe-data list [--root DIR] [--raw-root DIR]
    gnnpipe-data prepare NAME [--raw DIR] [--root DIR] [--split K] [--seed S] [--force]
    gnnpipe-data prepare --all [--raw-root DIR] [--root DIR] [--force]
    gnnpipe-data info NAME_OR_DIR [--root DIR] [--json] [--verify]
    gnnpipe-data synth sbm --nodes N --classes C --avg-degree D --homophily H \\
        --features F --signal S --seed S --out DIR [--force]
    gnnpipe-data synth rmat --nodes N --edges E [--a --b --c] --classes C --features F \\
        --seed S --out DIR [--force]

Every subcommand takes ``--debug`` (full traceback on error). User errors print one line
on stderr and exit 2; nothing is written when a step fails (outputs are renamed into place
only once complete).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Sequence

from gnnpipe._base import GnnpipeError
from gnnpipe.cli import ArgumentParser, run_cli
from gnnpipe.data import catalog
from gnnpipe.data.graph import META_FILE, Graph, load_graph
from gnnpipe.data.stats import graph_info
from gnnpipe.fsutil import check_replaceable, safe_name
from gnnpipe.data.load import check_splits


def _table(rows: list[list[str]], header: list[str]) -> str:
    cols = list(zip(header, *rows)) if rows else [(h,) for h in header]
    widths = [max(len(str(c)) for c in col) for col in cols]
    lines = ["  ".join(str(h).ljust(w) for h, w in zip(header, widths)).rstrip()]
    lines += ["  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    return "\n".join(lines)


def _fmt(v: object) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:.4f}"
    return str(v)


# ---------------------------------------------------------------------------- list
def cmd_list(args: argparse.Namespace) -> int:
    root = Path(args.root) if args.root else catalog.default_data_root()
    raw_root = Path(args.raw_root) if args.raw_root else catalog.default_raw_root()
    rows = []
    for c in catalog.list_cards():
        e = c.expected
        rows.append([c.name, c.format] + [_fmt(e.get(k)) for k in catalog.COUNT_FIELDS] + [
            "yes" if catalog.raw_dir_for(c, raw_root).is_dir() else "-",
            "yes" if (root / c.name / META_FILE).is_file() else "-",
        ])
    print(_table(rows, ["name", "format", "nodes", "edges", "features", "classes", "raw", "prepared"]))
    print(f"\nraw folders: {raw_root}\nprepared under: {root}")
    return 0


# ---------------------------------------------------------------------------- prepare
def _prepare_one(name: str, raw: Path | None, args: argparse.Namespace) -> Path:
    out = catalog.prepare(name, raw_dir=raw, root=args.root, split=args.split, force=args.force,
                          seed=args.seed, progress=sys.stderr.isatty())
    card = catalog.get_card(name)
    g = load_graph(out)
    rows = [[k, _fmt(exp), _fmt(act), "ok" if exp is not None else "(not in card)"]
            for k, exp, act, _ in catalog.check_counts(card, g)]
    print(f"{card.name}: prepared {out}")
    print(_table(rows, ["count", "card", "loaded", "check"]))
    return out


def cmd_prepare(args: argparse.Namespace) -> int:
    if args.all:
        if args.name or args.raw:
            raise GnnpipeError("prepare --all takes no NAME and no --raw (use --raw-root DIR)")
        raw_root = Path(args.raw_root) if args.raw_root else catalog.default_raw_root()
        root = Path(args.root) if args.root else catalog.default_data_root()
        failed = []
        raws = {c.name: catalog.raw_dir_for(c, raw_root) for c in catalog.list_cards()}
        todo = [name for name, raw in raws.items() if raw.is_dir()]
        if not todo:
            raise GnnpipeError(f"prepare --all: no raw dataset folder of any card under {raw_root}")
        for name in todo:
            try:
                check_replaceable(root / name, "dataset", args.force)
            except GnnpipeError as e:  # says whether --force would replace it
                print(f"{name}: skipped, {e}")
                continue
            try:
                _prepare_one(name, raws[name], args)
            except GnnpipeError as e:
                if args.debug:
                    raise
                print(f"gnnpipe-data: error: {e}", file=sys.stderr)
                failed.append(name)
        if failed:
            print(f"gnnpipe-data: {len(failed)} of {len(todo)} failed: {', '.join(failed)}", file=sys.stderr)
            return 1
        return 0
    if not args.name:
        raise GnnpipeError("prepare: give a dataset NAME or --all")
    if args.raw and args.raw_root:
        raise GnnpipeError("prepare: give --raw DIR (this dataset's raw folder) or --raw-root DIR (the folder "
                           "of raw dataset folders), not both")
    raw = Path(args.raw) if args.raw else None
    if raw is None and args.raw_root:
        raw = catalog.raw_dir_for(catalog.get_card(args.name), args.raw_root, typed=args.name)
    _prepare_one(args.name, raw, args)
    return 0


# ---------------------------------------------------------------------------- info
def cmd_info(args: argparse.Namespace) -> int:
    path = catalog.resolve_dataset(args.dataset, args.root)
    g = Graph.load(path, verify=args.verify)
    if args.verify:
        g.check_symmetric()
    info = {"path": str(path), **graph_info(g)}
    if args.verify:
        info["verified"] = True
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        width = max(len(k) for k in info)
        for k, v in info.items():
            print(f"{k.ljust(width)}  {_fmt(v)}")
    return 0


# ---------------------------------------------------------------------------- synth
def cmd_synth(args: argparse.Namespace) -> int:
    try:
        from gnnpipe.data import synthetic
    except ImportError as e:
        raise GnnpipeError(f"synthetic generators unavailable: {e}") from None
    out = Path(args.out)
    check_replaceable(out, "dataset", args.force)  # before generating: a refusal costs nothing
    if args.name is not None:
        safe_name(args.name, "--name")
    # Only the flags given are passed: the generators own their defaults.
    names = {"nodes": "num_nodes", "edges": "num_edges", "classes": "num_classes", "avg_degree": "avg_degree",
             "homophily": "homophily", "features": "num_features", "signal": "feature_signal", "seed": "seed",
             "train_frac": "train_frac", "val_frac": "val_frac", "a": "a", "b": "b", "c": "c", "name": "name"}
    kwargs = {kw: getattr(args, flag) for flag, kw in names.items() if getattr(args, flag, None) is not None}
    gen = synthetic.sbm if args.kind == "sbm" else synthetic.rmat
    for flag, kw in names.items():
        v = kwargs.get(kw)
        if isinstance(v, float) and not math.isfinite(v):
            raise GnnpipeError(f"--{flag.replace('_', '-')}: expected a finite number, got {v}")
    _check_synth_size(args.kind, kwargs)
    try:
        g = gen(**kwargs)
    except ValueError as e:  # the generators validate their parameters with ValueError
        if isinstance(e, GnnpipeError):
            raise
        raise GnnpipeError(f"synth {args.kind}: {e}") from None
    check_splits(g, g.name)  # e.g. --train-frac 0: a dataset no run could train on
    g.save(out, force=args.force, extra_meta={"generator": args.kind})
    print(f"{args.kind}: wrote {out} ({g.num_nodes:,} nodes, {g.num_edges:,} directed edges, "
          f"hash {g.content_hash[:12]})")
    return 0


def _check_synth_size(kind: str, kw: dict) -> None:
    """Refuse a graph this machine cannot hold, with the estimate, before generating it.

    A lower bound: float32 features, the int64 CSR (both directions) and the int64 edge keys
    sorted while symmetrising; the generators need more than this at their peak.
    """
    from gnnpipe.config import machine_bytes

    n = kw.get("num_nodes", 0)
    f = kw.get("num_features", 64)
    deg = kw.get("avg_degree", 10.0)
    if not all(isinstance(v, (int, float)) and math.isfinite(v) and v >= 0 for v in (n, f, deg)):
        return  # the generator names the bad value
    e = kw.get("num_edges", 0) if kind == "rmat" else int(n * deg / 2)
    if not isinstance(e, int) or e < 0:
        return
    need = 4 * n * f + 8 * (n + 1) + 2 * 8 * 2 * e + 2 * 8 * 2 * e
    have = machine_bytes()
    if have and need > have:
        raise GnnpipeError(f"synth {kind}: {n:.4g} nodes, {e:.4g} edges and {f} features need at least "
                           f"{need / 2**30:.4g} GiB but this machine has {have / 2**30:.1f} GiB; "
                           "choose smaller --nodes/--edges/--features")


# ---------------------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", help="show the full traceback on error")
    p = ArgumentParser(prog="gnnpipe-data", description="List, prepare, inspect and synthesize graph datasets.",
                                parents=[common])
    sub = p.add_subparsers(dest="cmd", required=True)

    s = sub.add_parser("list", parents=[common], help="the catalogue, with raw and prepared status")
    s.add_argument("--root", help="data root of prepared graphs (default: $GNNPIPE_DATA_ROOT or ./datasets)")
    s.add_argument("--raw-root", help="folder of raw dataset folders (default: $GNNPIPE_DATASETS or <data root>/raw)")
    s.set_defaults(func=cmd_list)

    s = sub.add_parser("prepare", parents=[common], help="verify, load, check and save a dataset")
    s.add_argument("name", nargs="?", help="dataset name, any case, PyG's and OGB's spellings accepted "
                                          "(see `gnnpipe-data list`)")
    s.add_argument("--all", action="store_true", help="every card whose raw folder exists under --raw-root")
    s.add_argument("--raw", help="raw folder (default: <raw root>/NAME)")
    s.add_argument("--raw-root", help="folder of raw dataset folders, one per dataset (default: $GNNPIPE_DATASETS, "
                   "else <data root>/raw)")
    s.add_argument("--root", help="data root; output goes to ROOT/NAME")
    s.add_argument("--split", type=int, default=None, help="fixed split index (heterophilous datasets; default 0)")
    s.add_argument("--seed", type=int, default=0, help="split seed (gnn-benchmark datasets; default 0)")
    s.add_argument("--force", action="store_true", help="replace an existing output")
    s.set_defaults(func=cmd_prepare)

    s = sub.add_parser("info", parents=[common], help="counts and statistics of a prepared graph")
    s.add_argument("dataset", metavar="NAME_OR_DIR")
    s.add_argument("--root", help="data root to look NAME up in")
    s.add_argument("--json", action="store_true", help="print JSON")
    s.add_argument("--verify", action="store_true", help="recompute the content hash and check symmetry")
    s.set_defaults(func=cmd_info)

    s = sub.add_parser("synth", parents=[common], help="generate a synthetic graph")
    kinds = s.add_subparsers(dest="kind", required=True)
    k = kinds.add_parser("sbm", parents=[common], help="stochastic block model with label-correlated features")
    k.add_argument("--nodes", type=int, default=10_000, help="number of nodes (default 10000)")
    k.add_argument("--avg-degree", type=float, help="mean degree")
    k2 = kinds.add_parser("rmat", parents=[common], help="R-MAT power-law graph")
    k2.add_argument("--nodes", type=int, default=1 << 16, help="number of nodes (default 65536)")
    k2.add_argument("--edges", type=int, default=1 << 20, help="directed edges wanted (default 1048576)")
    k2.add_argument("--a", type=float, help="R-MAT quadrant probability a")
    k2.add_argument("--b", type=float, help="R-MAT quadrant probability b")
    k2.add_argument("--c", type=float, help="R-MAT quadrant probability c")
    for k_ in (k, k2):
        k_.add_argument("--classes", type=int, help="number of classes")
        k_.add_argument("--homophily", type=float, help="edge homophily knob in [0, 1]")
        k_.add_argument("--features", type=int, help="feature width")
        k_.add_argument("--signal", type=float, help="feature signal strength (class-mean scale)")
        k_.add_argument("--train-frac", type=float, help="training fraction")
        k_.add_argument("--val-frac", type=float, help="validation fraction")
        k_.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
        k_.add_argument("--name", default=None, help="graph name (default: the generator's)")
        k_.add_argument("--out", required=True, help="output directory")
        k_.add_argument("--force", action="store_true", help="replace an existing output")
    s.set_defaults(func=cmd_synth)
    return p


def _main(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``gnnpipe-data``; returns the exit status."""
    return run_cli(_main, argv, prog="gnnpipe-data")


if __name__ == "__main__":
    sys.exit(main())
