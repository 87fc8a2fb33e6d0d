"""``gnnpipe-partition``: build a partition plan (parts × chunks) for a prepared dataset.

Usage::

    gnnpipe-partition DATASET --parts P [--chunks C] [--method metis|random|contiguous]
        [--objective cut|vol] [--seed S] [--weights none|degree] [--out DIR] [--root DIR]
        [--metis-mode auto|plain|multilevel] [--metis-budget BYTES]
        [--model M] [--layers L] [--hidden d] [--json] [--dry-run] [--force] [--debug]

The printed summary predicts the bytes per epoch of the model ``--model``/``--layers``/
``--hidden`` (default gcn, 32 layers, d=100) in GiB, as the benchmarks print them; stats.json
always records them for that default shape (the plan does not depend on the model, and the
same plan serves every model).

``--metis-mode`` picks how METIS runs: ``plain`` on the whole graph, ``multilevel``
(coarsen in numpy first, METIS on the coarse graph, refine while projecting back: a
fraction of plain METIS's memory, some cut quality lost; see docs/partitioner.md), or
``auto`` (default: multilevel when plain METIS's predicted memory exceeds the budget,
by default twice the graph's int64 CSR bytes). META.json records the request
(``metis_mode``, ``metis_budget``) and what ran (``metis_path``).

``DATASET`` is a prepared graph directory or a dataset name under the data root
(``--root``, ``GNNPIPE_DATA_ROOT``, default ``./datasets``; see ``gnnpipe-data``).

Output tree (default ``./partition/<dataset>-<method>-p<P>-c<C>/`` of the current directory;
the environment variable ``GNNPIPE_PARTITION_ROOT`` replaces ``./partition``; see
:mod:`gnnpipe.roots`)::

    <dataset>-<method>-p<P>-c<C>/
        META.json        format, every parameter (parts, chunks, method, objective, seed,
                         vertex_weights, metis_mode, metis_budget, metis_path,
                         gnnpipe_version), dataset name, content hash,
                         nodes and edges; written last, marks the plan complete
        stats.json       part / chunk sizes and balance, edge cut, halo counts M_p and
                         their sum, predicted bytes per epoch for a 32-layer d=100 model
                         (graph parallel by the paper's and by our formula, pipeline)
        assignment.npz   int64 arrays: part, chunk (by ORIGINAL node id), perm
                         (perm[new] = old), inv, part_ptr [P+1], chunk_ptr [P*C+1]

The same inputs and seed give a byte-identical directory. An existing plan with the same
parameters and dataset hash is reused; one with other parameters is refused unless
``--force``. ``--dry-run`` computes and prints, writing nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Sequence

from gnnpipe._base import GnnpipeError
from gnnpipe.cli import ArgumentParser, run_cli
from gnnpipe.data.graph import Graph
from gnnpipe.fsutil import check_replaceable, is_our_output, safe_name
from gnnpipe.roots import plan_root
from gnnpipe.partition.plan import (
    METHODS,
    METIS_MODES,
    OBJECTIVES,
    PartitionPlan,
    build_plan,
    plan_params,
    read_plan_meta,
)
from gnnpipe.partition.stats import plan_stats

#: Params that record results (what ran), not requests: ignored when deciding reuse.
_RESULT_PARAMS = ("metis_path",)

PROG = "gnnpipe-partition"


def default_partition_root() -> Path:
    """``$GNNPIPE_PARTITION_ROOT``, else ``./partition`` (:func:`gnnpipe.roots.plan_root`)."""
    return plan_root()


def _parser() -> argparse.ArgumentParser:
    ap = ArgumentParser(prog=PROG, description="Partition a prepared graph into parts × chunks.")
    ap.add_argument("dataset", help="prepared graph directory or dataset name under the data root")
    ap.add_argument("--parts", "-p", type=int, required=True, help="P: graph-parallel parts / hybrid ways")
    ap.add_argument("--chunks", "-c", type=int, default=1, help="C: pipeline chunks per part (default 1)")
    ap.add_argument("--method", default="metis", help=f"one of {', '.join(METHODS)} (default metis)")
    ap.add_argument("--objective", default="cut", help=f"METIS objective, one of {', '.join(OBJECTIVES)}")
    ap.add_argument("--seed", type=int, default=0, help="METIS / shuffle seed (default 0)")
    ap.add_argument("--weights", default="none", choices=("none", "degree"), help="vertex weights for balance")
    ap.add_argument("--metis-mode", default="auto",
                    help=f"one of {', '.join(METIS_MODES)} (default auto: coarsen first when plain METIS would not fit)")
    ap.add_argument("--metis-budget", type=int, help="bytes METIS may use (default: 2x the graph's int64 CSR)")
    ap.add_argument("--out", type=Path, help="plan directory (default ./partition/<dataset>-<method>-p<P>-c<C>, or under $GNNPIPE_PARTITION_ROOT)")
    ap.add_argument("--root", type=Path, help="data root for dataset names")
    ap.add_argument("--model", default="gcn", help="model of the printed byte prediction (default gcn; not stored)")
    ap.add_argument("--layers", type=int, default=32, help="L of the printed byte prediction (default 32; not stored)")
    ap.add_argument("--hidden", type=int, default=100, help="d of the printed byte prediction (default 100; not stored)")
    ap.add_argument("--json", action="store_true", help="print META and stats as JSON instead of a table")
    ap.add_argument("--dry-run", action="store_true", help="compute and print, write nothing")
    ap.add_argument("--force", action="store_true", help="replace an existing plan with other parameters")
    ap.add_argument("--debug", action="store_true", help="tracebacks and debug logging")
    return ap


def _progress(msg: str) -> None:
    print(f"{PROG}: {msg}", file=sys.stderr, flush=True)


def _resolve(dataset: str, root: Path | None) -> Path:
    p = Path(dataset)
    if (p / "meta.json").is_file():
        return p
    try:
        from gnnpipe.data.catalog import resolve_dataset
    except ImportError:  # catalogue not installed: only directories are accepted
        raise GnnpipeError(f"{dataset}: not a prepared graph directory (meta.json missing)") from None
    return resolve_dataset(dataset, root)


def _check_writable(out: Path) -> None:
    # Find the first existing ancestor and check it is a writable directory, creating
    # nothing: a bad --out must fail before the (possibly long) partitioning.
    anc = out
    while not anc.exists():
        if anc.parent == anc:
            break
        anc = anc.parent
    if not anc.is_dir():
        raise GnnpipeError(f"{out}: cannot create output directory ({anc} is not a directory)")
    if not os.access(anc, os.W_OK | os.X_OK):
        raise GnnpipeError(f"{out}: output directory not writable ({anc} is read-only)")


def _gb(b: float) -> str:
    # GiB, as gnnpipe-bench and gnnpipe-plan's memory columns print bytes.
    return f"{b / 2**30:.3f} GiB"


def model_volume(stats: dict, model: str, layers: int, hidden: int) -> dict:
    """stats.json's ``volume`` section for another model shape: the same formulas
    (:mod:`gnnpipe.partition.volume`) on the plan's Σ M_p, N, F and S.

    Returns:
        a dict shaped like ``stats["volume"]`` (``model_shape`` and the byte counts).
    """
    from gnnpipe.partition import volume

    ms = dict(stats["volume"]["model_shape"])
    ms.update(model=model, layers=layers, hidden=hidden)
    sum_m, F, S, s = stats["parts"]["halo_sum"], ms["features"], ms["stages"], ms["bytes_per_value"]
    return {
        "model_shape": ms,
        "graph_parallel_paper": volume.graph_parallel_bytes(sum_m, F, layers, hidden, s, model, "paper"),
        "graph_parallel_ours": volume.graph_parallel_bytes(sum_m, F, layers, hidden, s, model, "ours"),
        "graph_parallel_ours_startup": volume.startup_bytes(sum_m, F, layers, s, model),
        "pipeline": volume.pipeline_bytes(stats["num_nodes"], hidden, S, s, h0=model == "gcnii"),
    }


def summary_table(stats: dict, meta: dict, shape: tuple[str, int, int] | None = None) -> str:
    """The human summary printed by the CLI.

    Args:
        stats, meta: the plan's stats.json and META.json.
        shape: (model, layers, hidden) of the byte prediction; None: stats.json's own.
    """
    pp, cc, vol = stats["parts"], stats["chunks"], stats["volume"]
    if shape is not None:
        vol = model_volume(stats, *shape)
    ms = vol["model_shape"]
    prm = meta["params"]
    ds = meta["dataset"]
    lines = [
        f"dataset   {ds['name']}  ({ds['num_nodes']:,} nodes, {ds['num_edges']:,} directed edges, hash {ds['content_hash'][:12]})",
        f"plan      {prm['method']} objective={prm['objective']} seed={prm['seed']} weights={prm['vertex_weights']}"
        f"  P={prm['parts']} C={prm['chunks']}"
        + (f"  metis={prm['metis_path']['parts']}/{prm['metis_path']['chunks']} (parts/chunks)" if prm.get("metis_path") else ""),
        "",
        f"{'part':>5} {'nodes':>10} {'edges':>12} {'halo M_p':>10}",
    ]
    for p, (n, e, m) in enumerate(zip(pp["sizes"], pp["edges"], pp["halo"])):
        lines.append(f"{p:>5} {n:>10,} {e:>12,} {m:>10,}")
    und = stats["num_edges"] // 2
    lines += [
        "",
        f"parts     balance {pp['balance']:.3f} (nodes), {pp['edge_balance']:.3f} (edges); "
        f"edge cut {pp['edge_cut']:,} of {und:,} ({100 * pp['edge_cut_fraction']:.1f} %); sum M_p {pp['halo_sum']:,}",
        f"chunks    {len(cc['sizes'])} of {min(cc['sizes']):,}..{max(cc['sizes']):,} nodes, balance {cc['balance']:.3f}; "
        f"chunk cut {cc['edge_cut']:,}; sum of out-of-chunk neighbours {cc['halo_sum']:,}",
        "",
        f"predicted bytes per epoch for the model {ms['model']} L={ms['layers']} d={ms['hidden']} F={ms['features']} "
        f"s={ms['bytes_per_value']} (--model/--layers/--hidden choose it; the plan serves any model):",
        f"  graph parallel, paper  2s·ΣM·(F+(L-1)d)      {_gb(vol['graph_parallel_paper'])}",
        f"  graph parallel, ours   2s·ΣM·n_x·d           {_gb(vol['graph_parallel_ours'])}"
        f"  (+ {_gb(vol['graph_parallel_ours_startup'])} once at start-up)",
        f"  pipeline, S={ms['stages']}           2s·(S-1)·N·d          {_gb(vol['pipeline'])}",
    ]
    return "\n".join(lines)


def _main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.method not in METHODS:
        raise GnnpipeError(f"--method: expected one of {', '.join(METHODS)}, got {args.method!r}")
    if args.objective not in OBJECTIVES:
        raise GnnpipeError(f"--objective: expected one of {', '.join(OBJECTIVES)}, got {args.objective!r}")
    if args.metis_mode not in METIS_MODES:
        raise GnnpipeError(f"--metis-mode: expected one of {', '.join(METIS_MODES)}, got {args.metis_mode!r}")
    if args.metis_budget is not None and args.metis_budget < 1:
        raise GnnpipeError(f"--metis-budget: expected a positive number of bytes, got {args.metis_budget}")
    if args.parts < 1:
        raise GnnpipeError(f"--parts: expected at least 1, got {args.parts}")
    if args.chunks < 1:
        raise GnnpipeError(f"--chunks: expected at least 1, got {args.chunks}")
    from gnnpipe.partition.volume import MODELS

    if args.model not in MODELS:
        raise GnnpipeError(f"--model: expected one of {', '.join(MODELS)}, got {args.model!r}")
    if args.layers < 1 or args.hidden < 1:
        raise GnnpipeError(f"--layers/--hidden: expected at least 1, got {args.layers}/{args.hidden}")
    shape = (args.model, args.layers, args.hidden)
    gdir = _resolve(args.dataset, args.root)
    # A fixed glibc mmap threshold: the partitioner's many large temporaries (row blocks,
    # contractions, METIS's arrays) go back to the system when freed instead of growing
    # the heap (same setting as the training ranks; GNNPIPE_MMAP_THRESHOLD overrides).
    from gnnpipe.parallel.alloc import lean_allocator

    lean_allocator()
    if args.seed < 0:  # (before the load, not from METIS after it)
        raise GnnpipeError(f"--seed: expected an integer >= 0, got {args.seed}")
    _progress(f"loading {gdir}")
    graph = Graph.load(gdir)  # validates shapes and ranges
    for flag, v in (("--parts", args.parts), ("--chunks", args.chunks)):
        if v > graph.num_nodes:
            raise GnnpipeError(f"{flag}: {v} exceeds the {graph.num_nodes} nodes of {gdir}")
    # The name comes from meta.json, which anyone can edit: it must not steer the default
    # output path out of the partition root ("../../x").
    name = safe_name(graph.name or gdir.name, f"{gdir / 'meta.json'}: field 'name'")
    out = args.out or default_partition_root() / f"{name}-{args.method}-p{args.parts}-c{args.chunks}"
    weights = None if args.weights == "none" else args.weights
    params = plan_params(args.parts, args.chunks, args.method, args.objective, args.seed, weights,
                         args.metis_mode, args.metis_budget)

    if not args.dry_run:
        if not (out.exists() or out.is_symlink()):
            check_replaceable(out, "plan", args.force)  # a new folder: not inside a dataset or another plan
        elif not is_our_output(out, "plan"):
            check_replaceable(out, "plan", args.force)  # refuses anything --force may not replace
        elif out.exists() and not args.force:
            old = read_plan_meta(out)
            old_params = {k: v for k, v in old.get("params", {}).items() if k not in _RESULT_PARAMS}
            same_params = old_params == params
            same_data = old.get("dataset", {}).get("content_hash") == graph.content_hash
            if same_params and same_data:
                _progress(f"reusing existing plan {out} (same parameters and dataset hash)")
                plan = PartitionPlan.load(out)
                if not plan.stats:
                    raise GnnpipeError(f"{out / 'stats.json'}: missing or empty, so the plan is incomplete; "
                                       "use --force to rebuild it")
                _print(plan.stats, old, args.json, shape)
                return 0
            diff = [f"{k}: {old.get('params', {}).get(k)!r} → {v!r}" for k, v in params.items()
                    if old.get("params", {}).get(k) != v]
            if not same_data:
                diff.append(f"dataset hash: {old.get('dataset', {}).get('content_hash')} → {graph.content_hash}")
            raise GnnpipeError(f"{out}: holds a plan with other parameters ({'; '.join(diff)}); use --force to replace it")
        _check_writable(out)

    _progress("checking the adjacency is symmetric")
    graph.check_symmetric()
    _progress(f"partitioning {graph.num_nodes:,} nodes into {args.parts} parts × {args.chunks} chunks ({args.method})")
    t0 = time.perf_counter()
    plan = build_plan(graph, args.parts, args.chunks, args.method, args.objective, args.seed, weights,
                      metis_mode=args.metis_mode, metis_budget=args.metis_budget)
    _progress(f"partitioned in {time.perf_counter() - t0:.2f} s")
    _progress("computing plan statistics")
    plan.stats = plan_stats(graph, plan)
    if args.dry_run:
        _progress("dry run: nothing written")
    else:
        plan.save(out, force=args.force)
        _progress(f"wrote {out}")
    _print(plan.stats or {}, plan.meta(), args.json, shape)
    return 0


def _print(stats: dict, meta: dict, as_json: bool, shape: tuple[str, int, int] | None = None) -> None:
    if as_json:
        doc = {"meta": meta, "stats": stats}
        if shape is not None and stats:
            doc["volume_for_model"] = model_volume(stats, *shape)
        print(json.dumps(doc, indent=2, sort_keys=True))
    else:
        print(summary_table(stats, meta, shape if stats else None))


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point with the shared error policy (one line, exit 2, for user errors)."""
    return run_cli(_main, argv, prog=PROG)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
