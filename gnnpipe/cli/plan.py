"""``gnnpipe-plan``: rank every parallel configuration by predicted epoch time.

Usage::

    gnnpipe-plan DATASET --world N --layers L --hidden d --model M [--profile P]
        [--heads H] [--history-dtype float32|bfloat16] [--chunk-factors 1,2,4,8] [--json] [--top K] [--root DIR]
        [--link-rate RATE [--ranks-per-host K]]        (ranks on hosts of their own, RATE links per host)
        [--wire auto|float32|bfloat16|int8|int4 [--accuracy-budget POINTS] [--wire-accuracy FILE]]
        [--exact | --exact-every N]
    gnnpipe-plan --stats N,E,F[,CLASSES[,NNZ]] --world N ...     (a graph that is not here)
    gnnpipe-plan reddit --world 8 ...                  (published statistics, see PUBLISHED)
    gnnpipe-plan calibrate [--out FILE] [--thorough]   (measure this machine, write ./profiles/cpu-this-machine.toml)
    gnnpipe-plan calibrate --network [--rate 100mbit] [--hosts 2]   (root: measure an emulated shaped link)
    gnnpipe-plan validate RESULTS [--profile P]        (re-predict a stored `gnnpipe-bench epoch`)

``DATASET`` is a prepared graph directory or name (Σ M_p then comes from METIS plans of the
real graph), or one of the names in :data:`PUBLISHED` (Σ M_p estimated from a synthetic
graph of the same shape, see :func:`gnnpipe.cost.graphstats.estimate_part_info`). ``--profile`` is a
profile name, looked up in the user profile directory (``$GNNPIPE_PROFILE_DIR``, default
``./profiles/``, where ``calibrate`` writes) and then among the shipped ones
(``gnnpipe/profiles/*.toml``), or a TOML path; the default is ``cpu-this-machine``. Configurations that do not fit a device's memory are listed after the
others with the reason. The first fitting one is printed as a ``gnnpipe-train`` command.

``--link-rate RATE`` (``100mbit``, ``1gbit``, ``unshaped``; :func:`gnnpipe.cluster.parse_rate`)
plans for ranks on hosts of their own, ``--ranks-per-host`` (default 1) per host, joined by
links of RATE per host in each direction: the profile through
:func:`gnnpipe.cost.profile.with_link` (bandwidth = RATE, the profile's per-message latency,
which ``calibrate --network`` measures).

``--wire`` (issue 20) is the format of the training messages: ``float32`` (the default, as
``gnnpipe-train``'s), one lossy format, or ``auto``: rank every layout in every format whose
expected accuracy loss is within ``--accuracy-budget`` points (default 0.5 with ``auto``),
a lossy format counted 5 % slower (:data:`gnnpipe.cost.planner.WIRE_MIN_GAIN`: it must be
predicted that much faster than float32 to be chosen). The
expected losses are :data:`gnnpipe.cost.wire_accuracy.WIRE_ACCURACY_PRIOR`, a prior (compared with
the accuracy benchmark's runs with ``--wire``), or, with ``--wire-accuracy FILE``, measured: the
worst mean loss over the configurations of that results file of ``gnnpipe-bench accuracy --wire
...`` (paired by seed; the planned model's configurations when it has any;
:func:`gnnpipe.cost.wire_accuracy.from_results`); the output says which. Each row shows its format, bytes
per epoch and expected loss; predicted times send the format's bytes and pay its encode and
decode (:mod:`gnnpipe.cost.predict`), so on a fast link float32 stays first. ``--exact`` plans
``gnnpipe-train --exact`` (one chunk per way) and keeps float32 on the wire: a lossy ``--wire``
is refused with one line, ``auto`` considers float32 alone.
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
from gnnpipe.bench.epoch import repredict
from gnnpipe.cluster import parse_rate
from gnnpipe.cli import ArgumentParser, run_cli
from gnnpipe.config import DEFAULT_EXACT_EVERY, WIRE_FORMATS
from gnnpipe.fsutil import protected_reason
from gnnpipe.cost import (DEFAULT_ACCURACY_BUDGET, PROFILE_DIR_ENV, WIRE_ACCURACY_PRIOR, WIRE_MIN_GAIN, GraphStats,
                          WireAccuracy, wire_accuracy_from_results, prior_for, ModelSpec, chunk_counts, feasible_topologies,
                          graph_stats_from_graph, load_profile, profile_toml, profiles_dir, rank_configs, train_command,
                          user_profiles_dir, sample_choices, sample_figure, wire_choices, with_link)
from gnnpipe.data.catalog import find_card, name_key, resolve_dataset
from gnnpipe.data.graph import Graph

PROG = "gnnpipe-plan"

#: Published statistics of the paper's graphs that are not prepared here:
#: (nodes, directed edges, features, classes). Keys are the catalogue's canonical names
#: (``ogbn-arxiv``); any spelling the catalogue accepts finds them (:func:`published_name`).
#: Reddit and Flickr: DGL's RedditDataset / FlickrDataset and PyG's Reddit docs
#: (232,965 / 114,615,892 / 602 / 41; 89,250 / 899,756 / 500 / 7).
#: ogbn-arxiv: OGB lists 169,343 nodes and 1,166,243 directed citations, 128 features,
#: 40 classes; symmetrized (as every graph here) that is 2,332,486 directed edges.
PUBLISHED = {
    "reddit": (232965, 114615892, 602, 41),
    "flickr": (89250, 899756, 500, 7),
    "ogbn-arxiv": (169343, 2332486, 128, 40),
}


def published_name(name: str) -> str | None:
    """The key of :data:`PUBLISHED` that ``name`` spells (any case, ``-``/``_``, or a
    catalogue alias: ``Reddit``, ``ogbn_arxiv``, ``arxiv``), or None."""
    try:
        card = find_card(name) if name_key(name) else None
    except GnnpipeError:  # a broken catalogue still leaves the published names
        card = None
    keys = {name_key(n) for n in (name, *(card.names if card else ()))}
    return next((p for p in PUBLISHED if name_key(p) in keys), None)


#: Default size of the synthetic sample that stands in for a graph that is not here. METIS
#: runs once per plan on it (about 30 plans at 64 ranks) and its time grows with the edges:
#: Reddit's degree (492) at 20,000 nodes is 9.8M edges and took 22 minutes at 64 ranks, at
#: 2,000 nodes (1M edges) 6 s, with the same ranking. Denser graphs get fewer nodes.
ESTIMATE_EDGE_BUDGET = 1_000_000
ESTIMATE_MAX_NODES = 20000
#: The sample keeps at least this many nodes, and 8 per rank (parts x chunks must fit in it).
ESTIMATE_MIN_NODES = 1000
#: Dataset names that ``gnnpipe-train`` generates (``--synth-*``) instead of loading.
SYNTHETIC = ("sbm", "rmat")


def auto_estimate_nodes(num_nodes: int, num_edges: int, world: int) -> int:
    """Nodes of the synthetic sample for a graph of ``num_nodes`` / ``num_edges`` (directed)
    planned at ``world`` ranks: at most :data:`ESTIMATE_EDGE_BUDGET` edges at the graph's
    average degree, between ``max(ESTIMATE_MIN_NODES, 8·world)`` and :data:`ESTIMATE_MAX_NODES`
    (never more than the graph).

    Returns:
        the sample's node count.
    """
    deg = max(num_edges / max(num_nodes, 1), 1.0)
    n = min(ESTIMATE_MAX_NODES, int(ESTIMATE_EDGE_BUDGET / deg))
    return int(min(num_nodes, max(n, ESTIMATE_MIN_NODES, 8 * world)))


def _parser() -> argparse.ArgumentParser:
    ap = ArgumentParser(prog=PROG, description="Rank graph / pipeline / hybrid configurations by predicted epoch time.")
    ap.add_argument("dataset", nargs="?", help="prepared dataset name or directory, or one of: " + ", ".join(PUBLISHED))
    ap.add_argument("--stats", help="N,E,F[,CLASSES[,NNZ]] for a graph that is not here (E directed)")
    ap.add_argument("--world", type=int, required=True, help="number of ranks (devices)")
    ap.add_argument("--layers", type=int, default=32, help="graph layers L (default 32)")
    ap.add_argument("--hidden", type=int, default=100, help="hidden width d (default 100)")
    ap.add_argument("--model", default="gcn", help="gcn, sage, gat, gcnii or resgcn+ (default gcn)")
    ap.add_argument("--heads", type=int, default=1, help="gat heads (default 1)")
    ap.add_argument("--history-dtype", choices=("float32", "bfloat16"), default="float32",
                    help="pipeline/hybrid history buffers as gnnpipe-train would hold them (default float32)")
    ap.add_argument("--profile", default="cpu-this-machine", help="profile name or TOML path (default cpu-this-machine)")
    ap.add_argument("--link-rate", default=None,
                    help="plan for ranks on hosts of their own joined by links of this rate per host, both directions "
                         "(e.g. 100mbit, 1gbit, unshaped); default: the profile's links")
    ap.add_argument("--ranks-per-host", type=int, default=None,
                    help="with --link-rate: ranks on each host (default 1)")
    ap.add_argument("--wire", default="float32", choices=("auto", *WIRE_FORMATS),
                    help="wire format of the training messages to plan: float32 (default), bfloat16, int8, int4, or "
                         "auto: rank every layout in every format within --accuracy-budget")
    ap.add_argument("--accuracy-budget", type=float, default=None, metavar="POINTS",
                    help="largest accepted expected accuracy loss of a wire format, in points (default "
                         f"{DEFAULT_ACCURACY_BUDGET:g} with --wire auto); the expected losses are a prior "
                         "(docs/benchmarks.md compares it with a measured run): " + ", ".join(f"{k} {v:g}" for k, v in WIRE_ACCURACY_PRIOR.items())
                         + "; --wire-accuracy measures them")
    ap.add_argument("--wire-accuracy", type=Path, default=None, metavar="FILE",
                    help="take the wire formats' expected accuracy losses from measured runs: a results file of "
                         "gnnpipe-bench accuracy --wire float32,int8,... (results/accuracy.json); the worst mean "
                         "loss over its configurations, paired by seed, the planned model's when it has any")
    ap.add_argument("--exact", action="store_true",
                    help="plan gnnpipe-train --exact (no staleness: one chunk per way; float32 wire only)")
    ap.add_argument("--exact-every", type=int, default=None, metavar="N",
                    help="plan gnnpipe-train --exact-every N (N >= 2): a pipeline or hybrid layout's epoch is the "
                         "mean of N - 1 stale epochs and one exact; 0: every epoch stale (the paper's schedule) "
                         f"(default: gnnpipe-train's, {DEFAULT_EXACT_EVERY}; 0 with --exact)")
    ap.add_argument("--chunk-factors", default="1,2,4,8", help="chunks per way = factor x stages (default 1,2,4,8)")
    ap.add_argument("--top", type=int, default=0, help="print only the K best (0: all)")
    ap.add_argument("--json", action="store_true", help="machine-readable output")
    ap.add_argument("--root", type=Path, help="data root for dataset names")
    ap.add_argument("--estimate-nodes", type=int, default=None,
                    help="nodes of the synthetic sample for Σ M_p estimates of a graph that is not here (default: "
                         f"as many as keep it under {ESTIMATE_EDGE_BUDGET:,} edges, at most {ESTIMATE_MAX_NODES:,}; "
                         "larger samples take longer, minutes at 20,000 nodes of Reddit's degree)")
    ap.add_argument("--seed", type=int, default=0, help="METIS / generator seed")
    ap.add_argument("--debug", action="store_true", help="tracebacks and debug logging")
    return ap


def _ints(flag: str, text: str, lo: int, hi: int) -> list[int]:
    try:
        vals = [int(x) for x in text.split(",")]
    except ValueError:
        raise GnnpipeError(f"{flag}: expected comma-separated integers, got {text!r}") from None
    if not lo <= len(vals) <= hi:
        raise GnnpipeError(f"{flag}: expected {lo} to {hi} integers, got {len(vals)} in {text!r}")
    return vals


def synth_fields(stats) -> dict:
    """``gnnpipe-train`` ``synth_*`` fields that generate a graph of these statistics
    (``--dataset sbm|rmat``): nodes, average degree (directed edges per node), features,
    classes."""
    return {"synth_nodes": stats.num_nodes, "synth_degree": round(stats.num_edges / stats.num_nodes, 4),
            "synth_features": stats.num_features, "synth_classes": stats.num_classes}


def _stats(args, spec=None, factors: Sequence[int] = (1, 2, 4, 8), exact: bool = False):
    """(:class:`GraphStats`, the dataset name for the command, ``synth_*`` fields or None)."""
    if args.stats:
        v = _ints("--stats", args.stats, 3, 5)
        if any(x < 0 for x in v) or v[0] < 1 or v[2] < 1:
            raise GnnpipeError(f"--stats: expected positive N and F and non-negative E, got {args.stats!r}")
        st = GraphStats(v[0], v[1], v[2], v[3] if len(v) > 3 else 2, v[4] if len(v) > 4 else None,
                        name=args.dataset or "graph")
        # A built-in synthetic name trains the graph gnnpipe-train generates: the command
        # must carry the planned sizes, not leave the 20,000-node default.
        synth = synth_fields(st) if (args.dataset or "").lower() in SYNTHETIC else None
        return st, args.dataset or "DATASET", synth
    if not args.dataset:
        raise GnnpipeError("give a DATASET (prepared name or directory, or one of "
                           f"{', '.join(PUBLISHED)}) or --stats N,E,F")
    try:
        gdir = resolve_dataset(args.dataset, args.root)
    except GnnpipeError:
        pub = published_name(args.dataset)
        if pub is not None:
            n, e, f, k = PUBLISHED[pub]
            return GraphStats(n, e, f, k, name=pub), pub, None
        if args.dataset.lower() in SYNTHETIC:
            raise GnnpipeError(f"{args.dataset}: a generated graph; give its size with --stats N,E,F[,CLASSES]") from None
        raise
    graph = Graph.load(gdir)
    ways = {args.world} | {d for d in range(2, args.world // 2 + 1) if args.world % d == 0}
    ways = {w for w in ways if 1 < w <= graph.num_nodes}
    # Per-chunk facts (out-of-chunk neighbours, per-chunk halos) of every pipeline and
    # hybrid plan the planner will rank: the time model and the hybrid bytes need them.
    chunks = chunk_counts(feasible_topologies(args.world, spec, graph.num_nodes, factors, exact=exact)) if spec else {}
    print(f"{PROG}: partitioning {graph.name} with METIS into {sorted(ways)} parts"
          + (f" and chunks {chunks}" if chunks else ""), file=sys.stderr)
    return graph_stats_from_graph(graph, sorted(ways), seed=args.seed, chunks=chunks), args.dataset, None


def _mb(b: float) -> str:
    return f"{b / 1e6:,.1f}"


def wire_lines(wires: Sequence[str], left_out: Sequence[str], requested: str, budget: float | None,
               exact: bool = False, accuracy: WireAccuracy = WireAccuracy()) -> list[str]:
    """The header lines that say which wire formats were ranked, which were left out and
    where their expected accuracy losses come from."""
    if requested == "auto" and exact:
        how = "auto, --exact"
    elif requested == "auto":
        how = f"auto within an accuracy budget of {DEFAULT_ACCURACY_BUDGET if budget is None else budget:g} points"
    elif requested == "float32":
        how = "--wire auto also ranks bfloat16, int8 and int4 within --accuracy-budget"
    else:
        how = f"--wire {requested}"
    lines = [f"wire     {', '.join(wires)} ({how})" + (f"; left out: {'; '.join(left_out)}" if left_out else "")]
    if requested != "float32":
        lines.append(f"accuracy expected loss per wire format is {'a ' if accuracy.kind == 'prior' else ''}"
                     f"{accuracy.source}")
    if any(w != "float32" for w in wires):
        lines.append(f"ranking  a lossy wire ranks as if {WIRE_MIN_GAIN:.0%} slower: chosen only where predicted "
                     "that much faster than float32")
    return lines


def _wire_cost(best, preds, accuracy: WireAccuracy = WireAccuracy(), model: str = "", layers: int = 1) -> str:
    """What the recommendation's wire format (and boundary sampling) saves and costs against
    float32 with every boundary row, in the same layout."""
    sampled = best.boundary_sample < 1.0
    if best.wire == "float32" and not sampled:
        return ""
    ref = next((p for p in preds if p.wire == "float32" and p.boundary_sample >= 1.0 and p.topology == best.topology),
               None)
    what = " ".join(([f"--wire {best.wire}"] if best.wire != "float32" else [])
                    + ([f"--boundary-sample {best.boundary_sample:g}"] if sampled else []))
    vs = (f" against {_mb(ref.bytes['total'])} MB and {ref.epoch_s * 1e3:.1f} ms in float32"
          + (" with every boundary row" if sampled else "") if ref else "")
    kind = "a prior" if accuracy.kind_of(best.wire) == "prior" else "measured"
    whence = ([f"{best.wire} {kind}" if sampled else kind] if best.wire != "float32" else [])
    if sampled:
        whence.append(f"sampling: {sample_figure(best.boundary_sample, model, layers)[1]}")
    return (f" {what}: {_mb(best.bytes['total'])} MB and {best.epoch_s * 1e3:.1f} ms per epoch{vs}; "
            f"expected accuracy loss {best.accuracy_cost:.2f} points ({'; '.join(whence)})")


def _wire_label(p) -> str:
    """A row's wire format, with ``+bns P`` under boundary sampling, ``+shared`` with the
    first layer shared by the stages (``--shared-input``) and ``+local`` with the carry
    computed on every stage (``--local-carry``)."""
    return (p.wire + (f"+bns{p.boundary_sample:g}" if p.boundary_sample < 1.0 else "")
            + ("+shared" if p.shared_input else "") + ("+local" if p.local_carry else ""))


def sample_lines(samples: Sequence[float], left_out: Sequence[str], model: str, layers: int) -> list[str]:
    """The header line that says whether boundary sampling (graph mode, the stale hybrid)
    was ranked, and where its expected loss comes from."""
    ranked = [s for s in samples if s < 1.0]
    if not ranked and not left_out:
        return []
    said = "; ".join("{:g}: expected loss {:.2f} points, {}".format(s, *sample_figure(s, model, layers))
                     for s in ranked)
    return [f"sampling --boundary-sample (graph mode, stale hybrid) {said or 'not ranked'}"
            + (f"; left out: {'; '.join(left_out)}" if left_out else "")]


def format_table(preds, stats, spec, profile, dataset: str, top: int = 0, synth: dict | None = None,
                 wire_info: Sequence[str] = (), exact: bool = False, accuracy: WireAccuracy = WireAccuracy()) -> str:
    """The human table: one line per configuration (layout and wire format), the rejected
    ones with their reason, and the ``gnnpipe-train`` command of the best that fits (with
    ``synth`` flags for a generated graph, the profile's device, ``--wire`` and ``--exact``)."""
    lines = [
        f"graph    {stats.name}: N={stats.num_nodes:,} E={stats.num_edges:,} F={stats.num_features:,}"
        + (f" (sparse, nnz {stats.sparse_nnz:,})" if stats.sparse_nnz is not None else ""),
        f"model    {spec.model} L={spec.layers} d={spec.hidden}" + (f" heads={spec.heads}" if spec.model == "gat" else "")
        + (" (exact: no staleness)" if exact else ""),
        f"profile  {profile.name}: {profile.description}",
        *wire_info,
        "",
        f"{'#':>3} {'configuration':<26} {'wire':<13} {'epoch ms':>9} {'compute':>8} {'comm':>8} {'bubble':>8} "
        f"{'MB/epoch':>10} {'acc -pts':>8} {'peak GiB':>9}  fits",
    ]
    fitting = [p for p in preds if p.fits]
    shown = preds[:top] if top else preds
    for i, p in enumerate(shown, 1):
        lines.append(
            f"{i:>3} {p.topology.label():<26} {_wire_label(p):<13} {p.epoch_s * 1e3:>9.1f} {p.compute_s * 1e3:>8.1f} "
            f"{p.comm_s * 1e3:>8.1f} {p.bubble_s * 1e3:>8.1f} {_mb(p.bytes['total']):>10} {p.accuracy_cost:>8.2f} "
            f"{p.peak_mem_bytes / 2**30:>9.2f}  " + ("yes" if p.fits else f"no: {p.reason}")
        )
    notes = sorted({n for p in shown for n in p.notes})
    if notes:
        lines += [""] + [f"note: {n}" for n in notes]
    lines.append("")
    if fitting:
        lines.append("recommended:" + _wire_cost(fitting[0], preds, accuracy, spec.model, spec.layers))
        lines.append("  " + train_command(fitting[0], dataset, spec, device=profile.device, synth=synth, exact=exact))
    else:
        lines.append("no configuration fits the profile's memory; use more devices or a smaller model")
    return "\n".join(lines)


def link_profile(profile, link_rate: str | None, ranks_per_host: int | None):
    """``profile`` as ``--link-rate`` / ``--ranks-per-host`` ask (unchanged without them).

    Raises:
        GnnpipeError: a bad rate, ranks per host below 1, or ``--ranks-per-host`` alone.
    """
    if link_rate is None:
        if ranks_per_host is not None:
            raise GnnpipeError("--ranks-per-host: only with --link-rate (ranks on hosts joined by links of that rate)")
        return profile
    try:
        bps = parse_rate(link_rate)
    except GnnpipeError as e:
        raise GnnpipeError(f"--link-rate: {e}") from None
    k = 1 if ranks_per_host is None else ranks_per_host
    if k < 1:
        raise GnnpipeError(f"--ranks-per-host: expected at least 1, got {k}")
    return with_link(profile, bps, k)


#: Deepest model the planner is asked about (the paper's models have 16-128 layers).
MAX_LAYERS = 65536


def _written_by_calibrate(path: Path) -> bool:
    """Whether ``path`` is a profile ``gnnpipe-plan calibrate`` wrote (its ``source`` says so)."""
    import tomllib

    try:
        prof = tomllib.loads(path.read_text()).get("profile", {})
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False
    return isinstance(prof, dict) and str(prof.get("source", "")).startswith("gnnpipe-plan calibrate")


def _check_out_file(out: Path) -> None:
    """An output file path whose folder exists or can be made, and which is not a folder;
    an existing file is replaced only when an earlier ``calibrate`` wrote it (a profile the
    user wrote by hand, or any other file, is theirs)."""
    if out.is_dir():
        raise GnnpipeError(f"--out {out}: is a directory; give a file name")
    why = protected_reason(out, include_self=False)
    if why is not None:
        raise GnnpipeError(f"--out {out}: {why}; choose another file")
    if out.is_symlink() or (out.exists() and not _written_by_calibrate(out)):
        raise GnnpipeError(f"--out {out}: exists and was not written by gnnpipe-plan calibrate; gnnpipe never "
                           "replaces a file of yours: choose another --out or move it away")
    for anc in out.parents:
        if anc.exists():
            if not anc.is_dir():
                raise GnnpipeError(f"--out {out}: {anc} is a file, not a folder")
            break


def _main(argv: Sequence[str] | None = None) -> int:
    argv = list(argv or [])
    if argv and argv[0] == "calibrate":
        return calibrate_main(argv[1:])
    if argv and argv[0] == "validate":
        return validate_main(argv[1:])
    args = _parser().parse_args(argv)
    if args.world < 1:
        raise GnnpipeError(f"--world: expected at least 1 rank, got {args.world}")
    # A bound at the edge: the planner's loops grow with the depth.
    if not 1 <= args.layers <= MAX_LAYERS:
        raise GnnpipeError(f"--layers: expected an integer in [1, {MAX_LAYERS}], got {args.layers}")
    if args.top < 0:
        raise GnnpipeError(f"--top: expected >= 0, got {args.top}")
    if args.seed < 0:  # (checked here, before a graph is sampled, not by the sampler)
        raise GnnpipeError(f"--seed: expected an integer >= 0, got {args.seed}")
    if args.exact_every is None:  # gnnpipe-train's default, so the command runs what was planned
        args.exact_every = 0 if args.exact else DEFAULT_EXACT_EVERY
    if args.exact_every and (args.exact or args.exact_every < 2):
        raise GnnpipeError(f"--exact-every {args.exact_every}: " + (
            "--exact already makes every epoch exact (keep one of them)" if args.exact
            else "expected an integer N >= 2 (0: off; N = 1 is --exact)"))
    factors = _ints("--chunk-factors", args.chunk_factors, 1, 16)
    if min(factors) < 1:
        raise GnnpipeError(f"--chunk-factors: expected positive factors, got {args.chunk_factors!r}")
    spec = ModelSpec.of(args, wire="float32")  # (the formats to rank come from wire_choices below)
    accuracy = (wire_accuracy_from_results(args.wire_accuracy, args.model) if args.wire_accuracy is not None
                else prior_for(args.model))
    wires, wires_out = wire_choices(args.wire, args.accuracy_budget, args.exact, accuracy)
    samples, samples_out = sample_choices(spec.model, args.accuracy_budget, args.exact, spec.layers)
    try:
        profile = load_profile(args.profile)
    except UnicodeDecodeError:  # a binary file given as --profile
        raise GnnpipeError(f"--profile {args.profile}: not a text file (TOML must be UTF-8)") from None
    profile = link_profile(profile, args.link_rate, args.ranks_per_host)
    stats, dataset, synth = _stats(args, spec, factors, exact=args.exact)
    t0 = time.perf_counter()
    est_nodes = args.estimate_nodes
    if est_nodes is not None and est_nodes < 2:
        raise GnnpipeError(f"--estimate-nodes: expected at least 2, got {est_nodes}")
    estimated = not stats.parts and args.world > 1
    if est_nodes is None:
        est_nodes = auto_estimate_nodes(stats.num_nodes, stats.num_edges, args.world)
    if estimated:
        n_s = min(est_nodes, stats.num_nodes)
        print(f"{PROG}: no partition of {stats.name} here: Σ M_p and chunk facts are estimated from a {n_s:,}-node R-MAT "
              f"graph of the same average degree ({stats.num_edges / stats.num_nodes:.1f}), scaled by "
              f"{stats.num_nodes / n_s:.1f}" + ("" if args.estimate_nodes else "; --estimate-nodes N for a larger, "
                                                 "slower sample"), file=sys.stderr)

    def progress(line: str) -> None:
        print(f"{PROG}: [{time.perf_counter() - t0:5.1f} s] {line}", file=sys.stderr, flush=True)

    preds = rank_configs(stats, spec, args.world, profile, chunk_factors=factors,
                         estimate_nodes=est_nodes, seed=args.seed, progress=progress, wires=wires, exact=args.exact,
                         accuracy=accuracy, samples=samples, exact_every=args.exact_every)
    if not preds:
        raise GnnpipeError(f"--world {args.world}: no feasible configuration for {stats.num_nodes} nodes")
    if args.json:
        fitting = [p for p in preds if p.fits]
        out = {
            "graph": {"name": stats.name, "num_nodes": stats.num_nodes, "num_edges": stats.num_edges,
                      "num_features": stats.num_features, "num_classes": stats.num_classes,
                      "sparse_nnz": stats.sparse_nnz},
            "model": {"model": spec.model, "layers": spec.layers, "hidden": spec.hidden, "heads": spec.heads},
            "profile": profile.name,
            "world": args.world,
            "exact": args.exact,
            "exact_every": args.exact_every,
            "wire": {"requested": args.wire, "ranked": wires, "left_out": wires_out,
                     "accuracy_budget": (DEFAULT_ACCURACY_BUDGET if args.wire == "auto" and args.accuracy_budget is None
                                         else args.accuracy_budget),
                     "expected_accuracy_loss": dict(accuracy.loss), "expected_accuracy_source": accuracy.source,
                     "expected_accuracy_kind": accuracy.kind,
                     "expected_accuracy_measured": sorted(accuracy.measured)},
            # graph mode's boundary sampling: the fractions ranked (1.0: every row), and why others were not
            "boundary_sample": {"ranked": samples, "left_out": samples_out,
                                "expected_accuracy_loss": {f"{s:g}": sample_figure(s, spec.model, spec.layers)[0]
                                                           for s in samples if s < 1},
                                "source": {f"{s:g}": sample_figure(s, spec.model, spec.layers)[1]
                                           for s in samples if s < 1}},
            # each prediction: "wire", "bytes" (halo, way, pipe, allreduce, total: the volume
            # formulas in that format), "codec_s" and "accuracy_cost" (points, expected_accuracy_kind)
            "predictions": [p.to_dict() for p in (preds[: args.top] if args.top else preds)],
            "recommended": (train_command(fitting[0], dataset, spec, device=profile.device, synth=synth,
                                          exact=args.exact) if fitting else None),
            "estimate_nodes": min(est_nodes, stats.num_nodes) if estimated else None,
            "seconds": time.perf_counter() - t0,
        }
        print(json.dumps(out, indent=1, default=str))
    else:
        print(format_table(preds, stats, spec, profile, dataset, args.top, synth=synth,
                           wire_info=wire_lines(wires, wires_out, args.wire, args.accuracy_budget, args.exact, accuracy)
                           + sample_lines(samples, samples_out, spec.model, spec.layers),
                           accuracy=accuracy,
                           exact=args.exact))
    return 0


# ----------------------------------------------------------------------------- calibrate
def calibrate_main(argv: Sequence[str] | None = None) -> int:
    """``gnnpipe-plan calibrate``: measure this machine and write a profile TOML."""
    ap = ArgumentParser(prog=f"{PROG} calibrate", description=(
        "Measure this machine; write a hardware profile into the user profile directory "
        f"(${PROFILE_DIR_ENV}, default ./profiles/), where the planner finds it before the shipped ones."))
    ap.add_argument("--out", type=Path, default=None,
                    help=f"profile file (default <${PROFILE_DIR_ENV} or ./profiles>/cpu-this-machine.toml, or "
                         "gpu-<name>.toml with --device cuda; never the shipped gnnpipe/profiles/)")
    ap.add_argument("--thorough", action="store_true",
                    help="larger problems, more repetitions and 3 contention rounds (several minutes; the default "
                         "takes under a minute on an idle machine)")
    ap.add_argument("--quick", action="store_true", help=argparse.SUPPRESS)  # the old name of the default
    ap.add_argument("--no-p2p", action="store_true", help="skip the 2-process Gloo measurement")
    ap.add_argument("--network", action="store_true",
                    help="measure only the network (root): bandwidth, per-message latency and all-to-all against "
                         "point-to-point between emulated hosts (gnnpipe.cluster) over links shaped to --rate; write "
                         "them into --profile's inter_bw_bytes_s, inter_latency_s and a2a_factor")
    ap.add_argument("--rate", default="100mbit", help="--network: link rate per host, e.g. 100mbit, 1gbit, unshaped "
                                                       "(default 100mbit)")
    ap.add_argument("--hosts", type=int, default=2, help="--network: emulated hosts, one rank each (default 2)")
    ap.add_argument("--profile", default="cpu-this-machine",
                    help="--network: the profile the link figures go into (default cpu-this-machine; written to the "
                         "user profile directory unless --out says otherwise)")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                    help="cuda: measure this process's GPU instead (GEMM, SpMM, copy, units, history path; the links "
                         "are the h100-nvlink profile's data-sheet figures) and write gpu-<name>.toml")
    ap.add_argument("--debug", action="store_true")
    args = ap.parse_args(argv)
    if args.network:
        if args.device != "cpu":
            raise GnnpipeError("--network measures the emulated hosts' links, not a GPU: drop --device cuda")
        return _calibrate_network(args)
    if args.device == "cuda":  # (torch loads here, after --help and the argument errors)
        from gnnpipe.cost.calibrate import gpu_profile_name

        name = gpu_profile_name()
    else:
        name = "cpu-this-machine"
    out = args.out or user_profiles_dir() / f"{name}.toml"
    # The shipped profiles are tracked, hand-merged files: a measurement never rewrites one.
    if out.resolve().parent == profiles_dir().resolve():
        raise GnnpipeError(f"--out {out}: that is a shipped profile; write to {user_profiles_dir()}/ "
                           f"(or set ${PROFILE_DIR_ENV}) and pass --profile NAME or the path")
    _check_out_file(out)  # before minutes of measuring, not after
    t_start = time.perf_counter()
    load0 = os.getloadavg()[0]
    # torch, the models and the test harness load only for this subcommand (the planner's
    # start stays fast).
    from gnnpipe.cost import calibrate as cal

    say = lambda line: print(f"{PROG}: {line}", file=sys.stderr)  # noqa: E731
    if args.device == "cuda":
        prof, comments = cal.calibrate_device("cuda", name, quick=not args.thorough, say=say)
    else:
        prof, comments = cal.calibrate(thorough=args.thorough, p2p=not args.no_p2p, say=say)
    cores = os.cpu_count() or 1
    text = profile_toml(prof, comments)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
    except OSError as e:
        raise GnnpipeError(f"{out}: cannot write the profile ({e.strerror})") from None
    print(text)
    print(f"{PROG}: wrote {out} in {time.perf_counter() - t_start:.0f} s (load {load0:.1f} -> "
          f"{os.getloadavg()[0]:.1f} on {cores} cores); {how_to_use(out, prof.name)}", file=sys.stderr)
    return 0


def how_to_use(out: Path, name: str) -> str:
    """How the planner reaches a profile just written to ``out``: by ``name`` when ``out`` is
    where ``--profile name`` looks first, else by its path (a name would read another file)."""
    by_name = user_profiles_dir() / f"{name}.toml"
    if by_name.resolve() == out.resolve():
        return (f"the planner's --profile {name} now reads it"
                + ("" if os.environ.get(PROFILE_DIR_ENV) or by_name.is_absolute()
                   else f" while the current directory is {Path.cwd()}"))
    shipped = " or the shipped profile" if (profiles_dir() / f"{name}.toml").is_file() else ""
    return f"pass --profile {out} to the planner (--profile {name} reads {by_name}{shipped}, not this file)"


def _calibrate_network(args) -> int:
    """``calibrate --network``: measure the emulated link, write it into the profile, print."""
    try:
        rate_bps = parse_rate(args.rate)
    except GnnpipeError as e:
        raise GnnpipeError(f"--rate: {e}") from None
    if args.hosts < 2:
        raise GnnpipeError(f"--hosts: a link needs at least 2 hosts, got {args.hosts}")
    try:
        base = load_profile(args.profile)
    except UnicodeDecodeError:
        raise GnnpipeError(f"--profile {args.profile}: not a text file (TOML must be UTF-8)") from None
    out = args.out or user_profiles_dir() / f"{base.name}.toml"
    if out.resolve().parent == profiles_dir().resolve():
        raise GnnpipeError(f"--out {out}: that is a shipped profile; write to {user_profiles_dir()}/ "
                           f"(or set ${PROFILE_DIR_ENV}) and pass --profile NAME or the path")
    _check_out_file(out)
    from gnnpipe.cost import netcal

    why = netcal.unavailable()
    if why is not None:
        raise GnnpipeError(f"calibrate --network: {why}")
    fit = netcal.measure_network(rate_bps, args.hosts, quick=args.quick,
                                 say=lambda line: print(f"{PROG}: {line}", file=sys.stderr))
    # Keep the base profile's own comments (how its other figures were found), then ours.
    src = Path(args.profile) if Path(args.profile).is_file() else next(
        (d / f"{args.profile}.toml" for d in (user_profiles_dir(), profiles_dir())
         if (d / f"{args.profile}.toml").is_file()), None)
    old, skip = [], False
    for ln in (src.read_text().splitlines() if src else []):
        if ln.startswith("# Network (gnnpipe-plan calibrate --network"):  # an earlier network measurement
            skip = True
        elif not (skip and ln.startswith("#   ")):
            skip = False
            if ln.startswith("#"):
                old.append(ln[2:] if ln.startswith("# ") else ln[1:])
    text = profile_toml(netcal.apply(base, fit), old + fit.lines())
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
    except OSError as e:
        raise GnnpipeError(f"{out}: cannot write the profile ({e.strerror})") from None
    print("\n".join(fit.lines()))
    print(f"{PROG}: wrote {out} in {fit.wall_s:.0f} s: inter_bw_bytes_s {fit.bw_bytes_s:.4g} "
          f"({fit.bw_bytes_s * 8 / 1e6:.1f} Mbit/s), inter_latency_s {fit.latency_s:.3g}, "
          f"a2a_factor {fit.a2a_factor:.3g}; {how_to_use(out, base.name)}", file=sys.stderr)
    return 0


def validate_main(argv: Sequence[str] | None = None) -> int:
    """``gnnpipe-plan validate RESULTS``: the epoch benchmark's predictions again, for its
    stored measurements, with the current model and a profile (nothing is run)."""
    ap = ArgumentParser(prog=f"{PROG} validate",
                                 description="Re-predict a stored `gnnpipe-bench epoch` result (results.json or its folder).")
    ap.add_argument("results", type=Path, help="results/<run>/epoch/results.json or its folder")
    ap.add_argument("--profile", default="cpu-this-machine", help="profile name or TOML path")
    ap.add_argument("--json", action="store_true", help="rows and planner hits as JSON")
    ap.add_argument("--include-loaded", action="store_true",
                    help="keep rows measured while the 1-minute load exceeded the cores (left out by default)")
    args = ap.parse_args(argv)
    try:
        rows, hits, md, left_out = repredict(args.results, args.profile, include_loaded=args.include_loaded)
    except UnicodeDecodeError:
        raise GnnpipeError(f"{args.results} or --profile {args.profile}: not a UTF-8 text file") from None
    if args.json:
        print(json.dumps({"rows": rows, "planner": hits, "left_out_under_load": left_out}, indent=1, default=str))
    else:
        print(md)
    if left_out:
        print(f"{PROG} validate: left out {left_out} row(s) measured under load (--include-loaded keeps them)",
              file=sys.stderr)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point with the shared error policy (one line, exit 2, for user errors)."""
    return run_cli(_main, argv, prog=PROG)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
