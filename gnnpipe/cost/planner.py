"""The planner: every feasible layout of a world size, ranked by predicted epoch time,
and the ``gnnpipe-train`` command of a choice.

:func:`rank_configs` fills the partition facts the statistics lack from a synthetic sample
(:func:`gnnpipe.cost.graphstats.estimate_part_info`: that runs METIS), then calls the pure
:func:`gnnpipe.cost.predict.predict` per layout.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Mapping, Sequence

from gnnpipe._base import GnnpipeError
from gnnpipe.cost.graphstats import estimate_part_info
from gnnpipe.cost.inputs import GraphStats, ModelSpec
from gnnpipe.cost.predict import Prediction, predict
from gnnpipe.cost.profile import HardwareProfile
from gnnpipe.cost.units import num_units
from gnnpipe.dims import ParallelDims

#: Default chunk counts are these multiples of the number of stages (the paper used 4·S).
CHUNK_FACTORS = (1, 2, 4, 8)


def feasible_topologies(world: int, spec: ModelSpec, num_nodes: int,
                        chunk_factors: Sequence[int] = CHUNK_FACTORS) -> list[ParallelDims]:
    """Every feasible (mode, D, S, C) for ``world`` ranks.

    Graph: P = world. Pipeline: S = world, needs at least S units. Hybrid: D·S = world with
    D ≥ 2 and S ≥ 2 (S ≤ units). Chunks per way C = f·S for ``f`` in ``chunk_factors``,
    at most the nodes per way.
    """
    if world < 1:
        raise GnnpipeError(f"world: expected at least 1 rank, got {world}")
    n_units = num_units(spec)
    out: list[ParallelDims] = []
    if world <= num_nodes:
        out.append(ParallelDims("graph", ways=world))

    def chunked(mode: str, D: int, S: int) -> None:
        for c in sorted({f * S for f in chunk_factors}):
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
                 progress: Callable[[str], None] | None = None) -> list[Prediction]:
    """Predict every feasible configuration and rank them.

    Missing partition facts (Σ M_p for P = world parts or D ways) are estimated from a
    synthetic graph (:func:`estimate_part_info`) when ``estimate``; ``progress`` (if given)
    receives one line per partition estimated.

    Returns:
        predictions, those that fit memory first, each group by predicted epoch time.
    """
    topos = feasible_topologies(world, spec, stats.num_nodes, chunk_factors)
    need = sorted({t.ways for t in topos if t.ways > 1 and t.ways not in stats.parts})
    # Per-chunk facts (out-of-chunk neighbours, per-chunk halos) the stats lack.
    need_chunks: dict[int, list[int]] = {}
    for t in topos:
        if t.mode != "graph" and (t.ways not in stats.parts or t.chunks not in stats.parts[t.ways].chunk_nbrs):
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
    preds = [predict(stats, spec, t, profile) for t in topos]
    preds.sort(key=lambda p: (not p.fits, p.epoch_s))
    return preds


def train_command(pred: Prediction, dataset: str, spec: ModelSpec, device: str = "cpu",
                  synth: Mapping[str, Any] | None = None) -> str:
    """The ``gnnpipe-train`` command line for a prediction.

    Args:
        pred: the chosen configuration.
        dataset: ``--dataset`` (a prepared name, or ``sbm`` / ``rmat``).
        spec: the planned model.
        device: ``--device`` (the profile's; only ``cuda`` is written, ``cpu`` is the default).
        synth: ``TrainConfig`` ``synth_*`` fields of a built-in synthetic graph (e.g.
            ``{"synth_nodes": 1000000, "synth_degree": 20.0}``), so the command trains the
            graph that was planned and not the 20k-node default.

    Returns:
        one shell line.
    """
    t = pred.topology
    base = f"mpirun -np {t.world} gnnpipe-train --dataset {dataset}"
    for k, v in (synth or {}).items():
        base += f" --{k.replace('_', '-')} {v}"
    base += f" --model {spec.model} --layers {spec.layers} --hidden {spec.hidden}"
    if spec.model == "gat":
        base += f" --heads {spec.heads}"
    if device != "cpu":
        base += f" --device {device}"
    if t.mode == "graph":
        return f"{base} --mode graph --parts {t.ways}"
    dtype = " --history-dtype bfloat16" if spec.history_bytes == 2 else ""
    return f"{base} --mode {t.mode} --ways {t.ways} --stages {t.stages} --chunks {t.chunks}{dtype}"
