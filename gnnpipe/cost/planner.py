"""The planner: every feasible layout of a world size (and wire format), ranked by predicted
epoch time, and the ``gnnpipe-train`` command of a choice.

Wire formats (``--wire``, issue 20): :func:`wire_choices` turns ``gnnpipe-plan --wire`` and
``--accuracy-budget`` into the formats to rank; :func:`rank_configs` predicts every layout in
each of them and tags each prediction with the format's expected accuracy loss
(:mod:`gnnpipe.cost.wire_accuracy`: the prior, or a user's measured runs).

:func:`rank_configs` fills the partition facts the statistics lack from a synthetic sample
(:func:`gnnpipe.cost.graphstats.estimate_part_info`: that runs METIS), then calls the pure
:func:`gnnpipe.cost.predict.predict` per layout.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Callable, Mapping, Sequence

from gnnpipe._base import GnnpipeError
from gnnpipe.config import SAMPLED_MODELS, WIRE_FORMATS
from gnnpipe.cost.graphstats import estimate_part_info
from gnnpipe.cost.inputs import GraphStats, ModelSpec
from gnnpipe.cost.predict import Prediction, carries_locally, predict, shares_input, with_exact_epochs
from gnnpipe.cost.profile import HardwareProfile
from gnnpipe.cost.units import num_units
from gnnpipe.cost.wire_accuracy import BOUNDARY_SAMPLE_LOSS, PRIOR, WireAccuracy, sample_figure, sample_loss
from gnnpipe.dims import ParallelDims

#: Default chunk counts are these multiples of the number of stages (the paper used 4·S).
CHUNK_FACTORS = (1, 2, 4, 8)

#: A lossy wire format ranks as if its epoch took this fraction longer: it is chosen over
#: float32 only where the model predicts it about 5 % faster. The cost model is judged
#: within 25 % of measured epochs (docs/benchmarks.md ``epoch``), so a predicted gain of a
#: few percent is no reason to give up accuracy (Squirrel GCN-32 at 1 Gbit/s: int8 2 % faster).
WIRE_MIN_GAIN = 0.05
#: ``gnnpipe-plan --wire auto``'s accuracy budget when none is given, in points (issue 20's
#: bar for int8: within 0.5 points of float32).
DEFAULT_ACCURACY_BUDGET = 0.5


def wire_choices(wire: str = "float32", accuracy_budget: float | None = None,
                 exact: bool = False, accuracy: WireAccuracy = PRIOR) -> tuple[list[str], list[str]]:
    """The wire formats to rank for ``gnnpipe-plan --wire`` / ``--accuracy-budget`` / ``--exact``.

    ``auto``: every format whose expected loss (``accuracy``: the prior unless measured runs
    are given, :mod:`gnnpipe.cost.wire_accuracy`) is within the budget (default
    :data:`DEFAULT_ACCURACY_BUDGET`), float32 alone with ``exact``. A named
    format: that one, refused with one line when it is lossy under ``exact`` or its
    expected loss exceeds a given budget.

    Returns:
        ``(formats, left_out)``: the formats in :data:`WIRE_FORMATS` order, and one line per
        format ``auto`` left out, saying why.

    Raises:
        GnnpipeError: an unknown format, a negative or non-finite budget, a lossy format
            with ``exact``, a named format over the budget.
    """
    if accuracy_budget is not None and not (math.isfinite(accuracy_budget) and accuracy_budget >= 0):
        raise GnnpipeError(f"--accuracy-budget: expected a number of points >= 0, got {accuracy_budget!r}")
    if wire == "auto":
        if exact:
            return ["float32"], [f"{', '.join(f for f in WIRE_FORMATS if f != 'float32')} (--exact keeps float32 "
                                 "on the wire)"]
        budget = DEFAULT_ACCURACY_BUDGET if accuracy_budget is None else accuracy_budget
        keep, out = [], []
        for f in WIRE_FORMATS:
            cost = accuracy.loss[f]
            if cost > budget:
                out.append(f"{f}: expected loss {cost:.2f} points ({accuracy.kind_of(f)}) > accuracy budget {budget:g}")
            else:
                keep.append(f)
        return keep, out
    if wire not in WIRE_FORMATS:
        raise GnnpipeError(f"--wire: expected auto or one of {', '.join(WIRE_FORMATS)}, got {wire!r}")
    if exact and wire != "float32":
        raise GnnpipeError(f"--exact keeps float32 on the wire; --wire {wire} is lossy "
                           "(drop --exact or use --wire float32)")
    cost = accuracy.loss[wire]
    if accuracy_budget is not None and cost > accuracy_budget:
        raise GnnpipeError(f"--wire {wire}: expected loss {cost:.2f} points ({accuracy.kind_of(wire)}) exceeds "
                           f"--accuracy-budget {accuracy_budget:g} (raise the budget, or --wire auto to choose "
                           "within it)")
    return [wire], []


def sample_choices(model: str, accuracy_budget: float | None, exact: bool = False,
                   layers: int = 1) -> tuple[list[float], list[str]]:
    """The boundary-sampling fractions to rank in graph mode and the stale hybrid
    (``--boundary-sample``): 1.0, and
    the measured ones (:data:`gnnpipe.cost.wire_accuracy.BOUNDARY_SAMPLE_LOSS`) only under an
    explicit ``--accuracy-budget`` that admits their expected loss, for a model the sampling
    serves (:data:`gnnpipe.config.SAMPLED_MODELS`) and without ``exact``.

    Returns:
        ``(fractions, left_out)``: 1.0 first, and one line per fraction left out, saying why
        (none when no budget was given: sampling is not considered at all then).
    """
    keep, out = [1.0], []
    if accuracy_budget is None:
        return keep, out
    for frac in sorted(BOUNDARY_SAMPLE_LOSS):
        loss, source = sample_figure(frac, model, layers)
        why = None
        if exact:
            why = "--exact keeps every boundary row"
        elif model not in SAMPLED_MODELS:
            why = f"serves {', '.join(SAMPLED_MODELS)}, not {model}"
        elif not math.isfinite(loss):
            why = "its accuracy loss is not measured"
        elif loss > accuracy_budget:
            why = (f"expected loss {loss:.2f} points ({'the worst measured' if source.startswith('not') else 'measured'})"
                   f" > accuracy budget {accuracy_budget:g}")
        if why:
            out.append(f"boundary sample {frac:g}: {why}")
        else:
            keep.append(frac)
    return keep, out


def feasible_topologies(world: int, spec: ModelSpec, num_nodes: int,
                        chunk_factors: Sequence[int] = CHUNK_FACTORS, exact: bool = False) -> list[ParallelDims]:
    """Every feasible (mode, D, S, C) for ``world`` ranks.

    Graph: P = world. Pipeline: S = world, needs at least S units. Hybrid: D·S = world with
    D ≥ 2 and S ≥ 2 (S ≤ units). Chunks per way C = f·S for ``f`` in ``chunk_factors``,
    at most the nodes per way; ``exact`` (no staleness): C = 1, as ``gnnpipe-train --exact``.
    """
    if world < 1:
        raise GnnpipeError(f"world: expected at least 1 rank, got {world}")
    n_units = num_units(spec)
    out: list[ParallelDims] = []
    if world <= num_nodes:
        out.append(ParallelDims("graph", ways=world))

    def chunked(mode: str, D: int, S: int) -> None:
        for c in ([1] if exact else sorted({f * S for f in chunk_factors})):
            if c * D <= num_nodes:
                out.append(ParallelDims(mode, ways=D, stages=S, chunks=c))

    if world >= 2 and n_units >= world:
        chunked("pipeline", 1, world)
    for D in range(2, world // 2 + 1):
        if world % D == 0:
            S = world // D
            if S >= 2 and S <= n_units:
                chunked("hybrid", D, S)
    return out


def rank_configs(stats: GraphStats, spec: ModelSpec, world: int, profile: HardwareProfile,
                 chunk_factors: Sequence[int] = CHUNK_FACTORS, estimate: bool = True,
                 estimate_nodes: int = 20000, seed: int = 0,
                 progress: Callable[[str], None] | None = None, wires: Sequence[str] = (),
                 exact: bool = False, accuracy: WireAccuracy = PRIOR,
                 samples: Sequence[float] = (1.0,), exact_every: int = 0) -> list[Prediction]:
    """Predict every feasible configuration and rank them.

    Missing partition facts (Σ M_p for P = world parts or D ways) are estimated from a
    synthetic graph (:func:`estimate_part_info`) when ``estimate``; ``progress`` (if given)
    receives one line per partition estimated.

    Args:
        wires: the wire formats to rank every layout in (default: ``spec.wire``'s alone;
            :func:`wire_choices` makes the list); each prediction carries its ``wire`` and
            ``accuracy_cost`` (``accuracy.loss``: the prior by default).
        exact: plan ``gnnpipe-train --exact`` (one chunk per way; float32 wire only).
        samples: the boundary-sampling fractions to rank in graph mode and the stale hybrid
            (:func:`sample_choices`);
            a fraction below 1 adds its measured expected loss to the prediction's
            ``accuracy_cost``.
        exact_every: plan ``gnnpipe-train --exact-every N`` (N >= 2): a pipelined layout's
            prediction is the mean epoch of its cycle of stale and exact epochs
            (:func:`gnnpipe.cost.predict.with_exact_epochs`); graph mode is exact anyway. 0 (the
            default here) plans the paper's every-epoch-stale schedule; ``gnnpipe-plan`` passes
            ``gnnpipe-train``'s default (:func:`gnnpipe.config.default_exact_every`).

    Returns:
        predictions, those that fit memory first, each group by predicted epoch time, a
        lossy wire's counted :data:`WIRE_MIN_GAIN` longer (:func:`rank_key`; ties: the smaller
        expected accuracy loss first).

    Raises:
        GnnpipeError: a lossy wire with ``exact``, missing partition facts without ``estimate``.
    """
    wires = list(wires) or [spec.wire]
    if exact and any(w != "float32" for w in wires):
        raise GnnpipeError("--exact keeps float32 on the wire; a lossy wire format cannot be planned with it")
    if exact_every and (exact or exact_every < 2):
        raise GnnpipeError(f"--exact-every {exact_every}: " + ("--exact already makes every epoch exact" if exact
                                                               else "expected N >= 2 (N = 1 is --exact)"))
    topos = feasible_topologies(world, spec, stats.num_nodes, chunk_factors, exact=exact)
    need = sorted({t.ways for t in topos if t.ways > 1 and t.ways not in stats.parts})
    # Per-chunk facts (out-of-chunk neighbours, per-chunk halos) the stats lack; with exact
    # epochs also those of one chunk per way.
    need_chunks: dict[int, list[int]] = {}
    for t in topos + ([replace(t, chunks=1) for t in topos if t.mode != "graph"] if exact_every else []):
        if t.mode != "graph" and (t.ways not in stats.parts or t.chunks not in stats.parts[t.ways].chunk_nbrs) \
                and t.chunks not in need_chunks.get(t.ways, []):
            need_chunks.setdefault(t.ways, []).append(t.chunks)
    if need or need_chunks:
        if not estimate and need:
            raise GnnpipeError(f"graph stats for {stats.name!r}: no partition facts for {need} parts")
        if estimate:
            est = estimate_part_info(stats.num_nodes, stats.num_edges, need, sample_nodes=estimate_nodes,
                                     seed=seed, chunks=need_chunks, progress=progress)
            merged = []
            for e in est:
                have = stats.parts.get(e.parts) if e.parts > 1 or 1 in stats.parts else None
                if have is None:
                    merged.append(e)
                else:  # keep the real partition's facts, add the estimated chunk facts
                    merged.append(replace(have, chunk_halo={**e.chunk_halo, **have.chunk_halo},
                                          chunk_nbrs={**e.chunk_nbrs, **have.chunk_nbrs},
                                          source=have.source + " (chunk facts estimated)"))
            stats = stats.with_parts(merged)
    # A pipelined layout whose first layer can be shared is ranked with and without
    # --shared-input, one whose input layer writes a carry (gcnii) with and without
    # --local-carry: they only move work and bytes, so they need no accuracy budget.
    exact_epoch: dict = {}  # (layout, wire) -> its one-chunk epoch, shared by the variants

    def one(t: ParallelDims, s: ModelSpec) -> Prediction:
        pred = predict(stats, s, t, profile)
        if exact_every and t.mode != "graph":
            # The exact epochs keep stage 0's own input path, relay the carry and send every
            # row (no sampling), so one prediction serves every variant.
            key = (t, s.wire)
            if key not in exact_epoch:
                exact_epoch[key] = predict(stats, replace(s, shared_input=False, local_carry=False,
                                                          boundary_sample=1.0),
                                           replace(t, chunks=1), profile)
            pred = with_exact_epochs(pred, exact_epoch[key], exact_every, profile)
        return pred

    def variants(t: ParallelDims) -> list[tuple[bool, bool]]:  # (shared input, local carry)
        out = [(False, False)]
        if not exact and shares_input(stats, spec, t):
            out.append((True, False))
        if not exact and carries_locally(spec, t):
            out.append((False, True))
        return out

    preds = [replace(one(t, replace(spec, wire=w, boundary_sample=p, shared_input=sh, local_carry=lc)),
                     accuracy_cost=accuracy.loss[w] + sample_loss(p, spec.model, spec.layers))
             for t in topos for w in wires for p in (samples if samples_rows(t) else (1.0,))
             for sh, lc in variants(t)]
    preds.sort(key=rank_key)
    return preds


def samples_rows(t: ParallelDims) -> bool:
    """Whether boundary sampling has rows to sample in layout ``t``: graph mode's halo, the
    stale hybrid's rows between ways (the pipeline has no boundary between parts)."""
    return t.mode == "graph" or (t.mode == "hybrid" and t.ways > 1 and t.chunks > 1)


def rank_key(p: Prediction) -> tuple:
    """The planner's order: fitting first, then epoch time with a lossy wire's (or boundary
    sampling's) counted :data:`WIRE_MIN_GAIN` longer, then the smaller expected accuracy loss."""
    lossy = p.wire != "float32" or p.boundary_sample < 1.0
    return (not p.fits, p.epoch_s * (1.0 + WIRE_MIN_GAIN if lossy else 1.0), p.accuracy_cost)


def train_command(pred: Prediction, dataset: str, spec: ModelSpec, device: str = "cpu",
                  synth: Mapping[str, Any] | None = None, exact: bool = False) -> str:
    """The ``gnnpipe-train`` command line for a prediction.

    Args:
        pred: the chosen configuration.
        dataset: ``--dataset`` (a prepared name, or ``sbm`` / ``rmat``).
        spec: the planned model.
        device: ``--device`` (the profile's; only ``cuda`` is written, ``cpu`` is the default).
        synth: ``TrainConfig`` ``synth_*`` fields of a built-in synthetic graph (e.g.
            ``{"synth_nodes": 1000000, "synth_degree": 20.0}``), so the command trains the
            graph that was planned and not the 20k-node default.
        exact: ``--exact`` (pipeline and hybrid; graph parallelism is exact anyway).

    Returns:
        one shell line; ``--wire X`` when the prediction's wire is not float32,
        ``--shared-input`` when the prediction shares the first layer, ``--local-carry``
        when it computes the carry on every stage; a stale layout's ``--exact-every N``
        always (0: every epoch stale).

    Raises:
        GnnpipeError: ``exact`` with a lossy wire, or a stale layout (chunks > 1).
    """
    t = pred.topology
    if exact and (pred.wire != "float32" or t.chunks > 1):
        raise GnnpipeError(f"--exact: {t.label()} with --wire {pred.wire} is not an exact configuration "
                           "(one chunk per way, float32 wire)")
    wire = f" --wire {pred.wire}" if pred.wire != "float32" else ""
    base = f"mpirun -np {t.world} gnnpipe-train --dataset {dataset}"
    for k, v in (synth or {}).items():
        base += f" --{k.replace('_', '-')} {v}"
    base += f" --model {spec.model} --layers {spec.layers} --hidden {spec.hidden}"
    if spec.model == "gat":
        base += f" --heads {spec.heads}"
    if device != "cpu":
        base += f" --device {device}"
    if t.mode == "graph":
        bns = f" --boundary-sample {pred.boundary_sample:g}" if pred.boundary_sample < 1.0 else ""
        return f"{base} --mode graph --parts {t.ways}{wire}{bns}"
    if exact:
        return f"{base} --mode {t.mode} --ways {t.ways} --stages {t.stages} --exact"
    dtype = " --history-dtype bfloat16" if spec.history_bytes == 2 else ""
    shared = " --shared-input" if pred.shared_input else ""
    shared += " --local-carry" if pred.local_carry else ""
    shared += f" --boundary-sample {pred.boundary_sample:g}" if pred.boundary_sample < 1.0 else ""
    # Written even where it is gnnpipe-train's default or 0, so the command runs the schedule
    # that was predicted whatever the default.
    every = f" --exact-every {pred.exact_every}"
    return (f"{base} --mode {t.mode} --ways {t.ways} --stages {t.stages} --chunks {t.chunks}{dtype}{wire}{shared}"
            f"{every}")
