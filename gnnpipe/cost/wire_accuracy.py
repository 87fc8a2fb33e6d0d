"""The expected accuracy loss of each wire format: the shipped prior, or measured runs.

``gnnpipe-plan --wire auto`` ranks only the formats whose expected loss (test-accuracy points
against float32) is within the accuracy budget, and every row it prints carries that loss.
:data:`PRIOR` is what it uses by default (:data:`WIRE_ACCURACY_PRIOR`).
:func:`from_results` reads the accuracy benchmark's results instead (``gnnpipe-bench accuracy
--wire float32,bfloat16,int8,int4`` writes ``results/accuracy.json``; ``gnnpipe-plan
--wire-accuracy FILE``), so the planner's expected losses are this user's measurements.

From measured runs, per lossy format: for every configuration run both in that format and in
float32, the differences of test accuracy on the same seeds (:func:`paired_diffs`: the
seed-to-seed spread is as large as the formats' effect, so unpaired means would mostly measure
it); the format's expected loss is the largest mean loss over those configurations (0 when the
format never lost on average). Configurations of the planned model are used when there are
any, every configuration otherwise; a format with no paired runs keeps the prior, and the
source line says which did.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from gnnpipe._base import GnnpipeError
from gnnpipe.config import WIRE_FORMATS

#: Expected test-accuracy loss of each wire format against float32, in points: a
#: PRIOR, one figure per format whatever the model. This repository's accuracy runs with
#: ``--wire`` (docs/benchmarks.md: GCNII-32 and ResGCN+-32 on Squirrel and Physics in every
#: mode over 3 seeds) moved GCNII's and Physics ResGCN+'s mean test accuracy by at most 0.20
#: points with int8 (within the prior's 0.3) and 0.1 with bfloat16, but Squirrel ResGCN+'s by
#: 0.7-3.3 points with int8 (its hybrid -3.27 ± 0.79): the loss depends on the model and the
#: data, which is why the planner says where its figures come from and takes a user's own
#: runs (``--wire-accuracy``) over this prior. AdaQP
#: (MLSys 2023) reports stochastic low-bit (2-8 bit) boundary messages within
#: 0.30 points of float32, so int8 (255 levels, stochastic rounding, per-row scale and offset)
#: takes 0.3; int4 (15 levels) about three times that, 1.0, since Sylvie's logs show the loss
#: of coarse messages growing with depth (these models are 16-128 layers deep); bfloat16 rounds
#: to nearest (relative error <= 2**-9 per value, not unbiased): 0.1, so that an accuracy
#: budget of 0 admits float32 alone. ``--wire-accuracy`` replaces them with a user's runs.
WIRE_ACCURACY_PRIOR = {"float32": 0.0, "bfloat16": 0.1, "int8": 0.3, "int4": 1.0}
#: How the planner's output labels those figures.
WIRE_ACCURACY_SOURCE = ("prior: float32 0, bfloat16 0.1, int8 0.3 (AdaQP's published <= 0.30 for stochastic "
                        "low-bit messages), int4 1.0 points; measured here over 3 seeds, GCNII-32 (Squirrel, "
                        "Physics) and ResGCN+-32 on Physics moved by at most 0.20 in int8, but ResGCN+-32 on "
                        "Squirrel lost 0.7-3.3 points in int8 (docs/benchmarks.md, accuracy with --wire): "
                        "measure your model and pass --wire-accuracy")


@dataclass(frozen=True)
class WireAccuracy:
    """Expected test-accuracy loss per wire format (points against float32) and where it
    comes from.

    Attributes:
        loss: format -> expected loss, every format of :data:`WIRE_FORMATS` (float32: 0).
        source: one line for the planner's output.
        measured: the formats whose figure was measured (the others keep the prior).
    """

    loss: Mapping[str, float] = field(default_factory=lambda: dict(WIRE_ACCURACY_PRIOR))
    source: str = WIRE_ACCURACY_SOURCE
    measured: frozenset = frozenset()

    @property
    def kind(self) -> str:
        """``"measured"`` when at least one format's figure was measured, else ``"prior"``."""
        return "measured" if self.measured else "prior"

    def kind_of(self, fmt: str) -> str:
        """Where ``fmt``'s figure comes from: ``"measured"`` or ``"prior"`` (float32's 0 is
        neither measured nor assumed; it is labelled like the rest)."""
        return "measured" if fmt in self.measured else "prior"

    def __post_init__(self) -> None:
        missing = [f for f in WIRE_FORMATS if f not in self.loss]
        if missing:
            raise GnnpipeError(f"internal: expected accuracy loss missing for {', '.join(missing)}")


#: The planner's default.
PRIOR = WireAccuracy()

#: Shipped measurements that replace the prior for one built-in model: the largest mean loss
#: (points, paired by seed) over this repository's 3-seed runs of that model with ``--wire``
#: (docs/benchmarks.md, "Accuracy with compressed messages", 2026-12-05). ResGCN+-32 on
#: Squirrel lost 3.27 points in int8 (the hybrid, every seed 2.6-4.1 below float32) and 9.89
#: in int4 (the pipeline, one seed), so ``--wire auto`` does not offer them for ``resgcn+``
#: within the default budget unless a user's own runs (``--wire-accuracy``) say otherwise.
SHIPPED_MEASURED: dict[str, dict[str, float]] = {"resgcn+": {"int8": 3.27, "int4": 9.89}}


#: Boundary sampling (``--boundary-sample``, graph mode): fraction -> model -> (expected
#: test-accuracy loss in points against every row, the layers of the measured model, where
#: the figure comes from). Only measured fractions are offered by the planner, and only
#: under an explicit ``--accuracy-budget``; a model not measured, or deeper than measured,
#: takes the worst measured figure (:func:`sample_figure`): the loss grows with depth. Measured with ``gnnpipe-bench accuracy --only squirrel-gcnii32-bns10
#: squirrel-gcnii32-graph squirrel-sage4-bns10 squirrel-sage4-graph --seeds 0 1 2``
#: (2026-12-06, docs/benchmarks.md "boundary sampling"). GCNII-32: 26.06 ± 4.93 % test
#: against 39.74 ± 0.47 %, paired by seed -9.42 / -13.25 / -18.34 points; the training loss
#: spiked (to 1.8e5 on one seed): the n/k = 10 factor of the sampled rows compounds over
#: 32 layers. SAGE-4 (d = 256): 51.33 ± 0.89 % against 50.78 ± 0.75 %, paired +0.86 / -0.19
#: / +0.96: no loss, as BNS-GCN published for 3-4-layer GraphSAGE; in the stale hybrid
#: (2 ways x 2 stages x 8 chunks, the rows between ways sampled) 51.36 ± 0.20 % against
#: 50.43 ± 1.26 %, paired +2.31 / +0.29 / +0.19. GCNII-32 was measured in graph mode only.
BOUNDARY_SAMPLE_LOSS: dict[float, dict[str, tuple[float, int, str]]] = {
    0.1: {
        "gcnii": (13.67, 32, "measured in graph mode on Squirrel GCNII-32, 4 parts, 3 seeds, 150 epochs: 26.06 % test against "
                             "39.74 % (docs/benchmarks.md, 'boundary sampling')"),
        "sage": (0.0, 4, "measured on Squirrel SAGE-4 (d = 256), 3 seeds, 150 epochs: graph mode, 4 parts, 51.33 % test "
                         "against 50.78 %; stale hybrid, 2 ways x 2 stages, 51.36 % against 50.43 % "
                         "(docs/benchmarks.md, 'boundary sampling')"),
    },
}


def sample_figure(fraction: float, model: str, layers: int = 1) -> tuple[float, str]:
    """``(expected loss in points, where it comes from)`` of boundary sampling at
    ``fraction`` for ``model`` of ``layers`` layers: 0 at 1.0 (every row); the model's
    measured figure when it was measured at that depth or deeper; otherwise the worst
    figure measured at that fraction, saying so.

    Raises:
        GnnpipeError: ``fraction`` was never measured.
    """
    if fraction >= 1.0:
        return 0.0, "every boundary row"
    figs = BOUNDARY_SAMPLE_LOSS.get(fraction)
    if not figs:
        raise GnnpipeError(f"boundary sample {fraction:g}: no measured accuracy loss (measured: "
                           f"{', '.join(f'{f:g}' for f in BOUNDARY_SAMPLE_LOSS)})")
    if model in figs and layers <= figs[model][1]:
        return figs[model][0], figs[model][2]
    worst = max(figs, key=lambda m: figs[m][0])
    what = (f"{model} with {layers} layers (measured up to {figs[model][1]})" if model in figs else model)
    return figs[worst][0], f"not measured for {what}: the worst measured, {worst}'s ({figs[worst][2]})"


def sample_loss(fraction: float, model: str, layers: int = 1) -> float:
    """The expected loss of :func:`sample_figure`."""
    return sample_figure(fraction, model, layers)[0]


def prior_for(model: str | None) -> WireAccuracy:
    """The planner's default for ``model``: the prior, with this repository's own
    measurements of that model (:data:`SHIPPED_MEASURED`) where it has them."""
    shipped = SHIPPED_MEASURED.get(model or "", {})
    if not shipped:
        return PRIOR
    loss = {**WIRE_ACCURACY_PRIOR, **shipped}
    figs = ", ".join(f"{f} {v:g}" for f, v in shipped.items())
    return WireAccuracy(loss=loss, measured=frozenset(shipped),
                        source=f"measured for --model {model} in this repository's runs ({figs} points lost, "
                               "Squirrel 32 layers, docs/benchmarks.md 'accuracy with --wire'); the others: "
                               + WIRE_ACCURACY_SOURCE)


def split_wire(name: str) -> tuple[str, str]:
    """A result name of the accuracy benchmark: ``"squirrel-gcnii32-pipeline+int8"`` ->
    ``("squirrel-gcnii32-pipeline", "int8")``; a name without ``+`` is float32."""
    base, _, wire = name.partition("+")
    return base, wire or "float32"


def paired_diffs(results: Sequence[Mapping[str, Any]], name: str, base: str) -> list[float]:
    """Test accuracy of ``name`` minus ``base``'s (points), one per seed both ran: a lossy
    wire row is compared with float32 on the same seeds only (seed-to-seed spread is as large
    as the formats' effect)."""
    acc: dict[str, dict] = {}
    for r in results:
        if r.get("ok") and r.get("name") in (name, base):
            acc.setdefault(r["name"], {})[r["seed"]] = 100 * r["test_acc"]
    a, b = acc.get(name, {}), acc.get(base, {})
    return [a[s] - b[s] for s in sorted(set(a) & set(b))]


def _model_of(row: Mapping[str, Any]) -> str | None:
    """The ``--model`` of a run, from the command the benchmark recorded."""
    words = str(row.get("command", "")).split()
    return words[words.index("--model") + 1] if "--model" in words[:-1] else None


def from_results(path: str | Path, model: str | None = None) -> WireAccuracy:
    """Expected losses measured by the accuracy benchmark (see the module docstring).

    Args:
        path: a results file of ``gnnpipe-bench accuracy`` (a JSON list of runs with
            ``name``, ``seed``, ``ok``, ``test_acc`` and ``command``).
        model: the planned model: its configurations are used when the file has any.

    Raises:
        GnnpipeError: the file is missing, is not such a list, or pairs no lossy run with a
            float32 run of the same configuration and seed.
    """
    p = Path(path)
    what = f"--wire-accuracy {p}"
    try:
        rows = json.loads(p.read_text())
    except FileNotFoundError:
        raise GnnpipeError(f"{what}: no such file (gnnpipe-bench accuracy --wire float32,int8,... writes "
                           "results/accuracy.json)") from None
    except IsADirectoryError:
        raise GnnpipeError(f"{what}: a folder; expected the accuracy benchmark's results file "
                           "(results/accuracy.json)") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise GnnpipeError(f"{what}: not a JSON results file ({e})") from None
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise GnnpipeError(f"{what}: expected a JSON list of runs (objects with name, seed, ok, test_acc), "
                           f"got {type(rows).__name__}")
    for i, r in enumerate(rows):
        if r.get("ok") and not (isinstance(r.get("name"), str) and isinstance(r.get("test_acc"), (int, float))
                                and "seed" in r):
            raise GnnpipeError(f"{what}: run {i} lacks a name, a seed or a numeric test_acc: {json.dumps(r)[:200]}")
    pairs: dict[str, dict[str, list[float]]] = {}  # format -> configuration -> paired diffs
    models: dict[str, str | None] = {}
    for r in rows:
        base, fmt = split_wire(r.get("name", ""))
        if fmt == "float32" or not r.get("ok"):
            continue
        if fmt not in WIRE_FORMATS:
            raise GnnpipeError(f"{what}: run {r['name']!r} names wire format {fmt!r}, not one of "
                               f"{', '.join(WIRE_FORMATS)}")
        diffs = paired_diffs(rows, r["name"], base)
        if diffs:
            pairs.setdefault(fmt, {})[base] = diffs
            models[base] = _model_of(r)
    if not pairs:
        raise GnnpipeError(f"{what}: no lossy run has a float32 run of the same configuration and seed to "
                           "compare with (run gnnpipe-bench accuracy --wire float32,int8,...)")
    loss, said = dict(WIRE_ACCURACY_PRIOR), []
    for fmt in WIRE_FORMATS[1:]:
        configs = pairs.get(fmt, {})
        mine = {c: d for c, d in configs.items() if model is not None and models.get(c) == model}
        use = mine or configs
        if not use:
            said.append(f"{fmt} {loss[fmt]:.2f} (prior: not measured)")
            continue
        means = {c: statistics.mean(d) for c, d in use.items()}
        worst = min(means, key=means.get)
        loss[fmt] = max(0.0, -means[worst])
        seeds = sum(len(d) for d in use.values())
        scope = (f"{model} " if mine else "") + ("configuration" if len(use) == 1 else "configurations")
        said.append(f"{fmt} {loss[fmt]:.2f} (worst mean of {len(use)} {scope}, {seeds} seed pairs: {worst})")
    return WireAccuracy(loss, f"measured in {p}: " + "; ".join(said), frozenset(pairs))
