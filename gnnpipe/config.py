"""Training configuration: one dataclass, one docstring per field, one CLI built from it.

Every field becomes a ``--flag`` (underscores become dashes); booleans that default to True
get a ``--no-...`` form. ``--config FILE.toml`` loads values first, flags override them;
``--config NAME`` names a preset shipped in ``gnnpipe/presets/NAME.toml`` when no file
``NAME`` exists (``--list-presets`` lists them). The resolved configuration is written to
``<out>/config.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar, Sequence

from gnnpipe._base import GnnpipeError
from gnnpipe.dims import MODES
from gnnpipe.extras import require_dgl

#: The wire formats of ``--wire`` (:mod:`gnnpipe.wire` encodes them and re-exports
#: this tuple).
WIRE_FORMATS = ("float32", "bfloat16", "int8", "int4")

PRESET_DIR = Path(__file__).resolve().parent / "presets"

#: ``--exact-every`` of a stale run that does not set it (docs/convergence-notes.md section 18
#: gives the measurements that chose it).
DEFAULT_EXACT_EVERY = 2


def default_exact_every(mode: str, exact: bool = False, drift_bound: float = 0.0) -> int:
    """The ``--exact-every`` a run gets when it does not set one: :data:`DEFAULT_EXACT_EVERY`
    in the stale modes (pipeline, hybrid), 0 where the run is exact anyway (``--exact``,
    graph parallelism) or ``--drift-bound`` chooses the exact epochs."""
    return 0 if mode == "graph" or exact or drift_bound else DEFAULT_EXACT_EVERY


#: ``--grad-scale`` of a run that does not set one: the paper's 2 under its every-epoch-stale
#: schedule, 1 where exact epochs come every N (docs/convergence-notes.md section 19 gives
#: the measurements that chose it), but for :data:`GRAD_SCALE_2_MODELS`.
DEFAULT_GRAD_SCALE_STALE = 2.0
DEFAULT_GRAD_SCALE_WITH_EXACT = 1.0
#: Built-in models that keep the paper's 2 under exact epochs too: ResGCN+-32 reached the
#: target on fewer seeds at 1 on Squirrel and on Amazon-Photo (section 19).
GRAD_SCALE_2_MODELS = ("resgcn+",)


def default_grad_scale(exact_every: int, model: str = "gcnii") -> float:
    """The ``--grad-scale`` a run gets when it does not set one: the paper's 2 compensates, in
    expectation, for the stale cross-chunk gradients the fix drops (a neighbour is fresh with
    probability about 1/2); with ``--exact-every N`` every N-th epoch carries every gradient
    exactly, and the undoubled stale steps between them trained better (measured, not derived:
    GCNII-32 on Squirrel, Amazon-Photo and Coauthor-Physics and the guide's chain of GraphConv
    layers reached the target on as many seeds or more, in as few epochs or fewer, at 1), but
    for ResGCN+ (:data:`GRAD_SCALE_2_MODELS`), which did worse at 1. A chain of the user's own
    layers (``fit(layers=[...])``) takes 1 with exact epochs, as the guide's chain measured."""
    return DEFAULT_GRAD_SCALE_WITH_EXACT if exact_every and model not in GRAD_SCALE_2_MODELS \
        else DEFAULT_GRAD_SCALE_STALE


#: Built-in models whose first unit aggregates the input features (its halo never travels).
FEATURE_FIRST_MODELS = ("gcn", "sage", "gat")
#: Built-in models whose first unit is a linear map of the input features.
INPUT_LINEAR_MODELS = ("gcnii", "resgcn+")
#: Every built-in model (``--model``); the one definition the model zoo, the volume
#: formulas and the planner use.
MODELS = FEATURE_FIRST_MODELS + INPUT_LINEAR_MODELS
#: Models whose units are linear in their source rows, so that boundary sampling's zero and
#: scaled rows equal dropped and reweighted edges (:mod:`gnnpipe.partition.sampling`).
SAMPLED_MODELS = ("gcn", "sage", "gcnii")
#: The model name of a chain of the user's own layers (:mod:`gnnpipe.models.user`); not a
#: ``--model`` choice: only the Python API's ``fit(layers=[...])`` makes one.
USER_MODEL = "user"
#: Layer libraries the built-in models run on (``--backend``).
BACKENDS = ("pyg", "dgl")
#: ``--dataset`` names of the built-in synthetic graphs (generated, never prepared).
SYNTHETIC_DATASETS = ("sbm", "rmat")


def _f(default: Any, help: str, **kw: Any) -> Any:
    return field(default=default, metadata={"help": help, **kw})


def _m(default: Any, help: str, **kw: Any) -> Any:
    """A field that changes the numbers of training: a resumed run must match it exactly
    (see :data:`MATH_FIELDS`)."""
    return _f(default, help, math=True, **kw)


@dataclass
class TrainConfig:
    """Everything a training run depends on (written to ``<out>/config.json``)."""

    dataset: str = _m("sbm", "prepared dataset name (under --root) or directory; 'sbm' / 'rmat' generate the built-in synthetic graph")
    root: str | None = _f(None, "folder of prepared datasets; unset: $GNNPIPE_DATA_ROOT or ./datasets")
    synth_nodes: int = _m(20000, "nodes of the built-in synthetic graph")
    synth_degree: float = _m(10.0, "average degree of the built-in synthetic graph")
    synth_classes: int = _m(8, "classes of the built-in synthetic graph")
    synth_features: int = _m(32, "feature width of the built-in synthetic graph")
    synth_homophily: float = _m(0.8, "sbm: expected fraction of edges inside a class")
    synth_signal: float = _m(1.0, "sbm/rmat: class-mean separation of the features (noise units)")
    normalize_features: bool = _m(False, "row-normalize input features to sum 1 (the Planetoid protocol of GCN/GCNII)")
    plan: str | None = _m(None, "partition plan directory; unset: partition on the fly in memory")
    mode: str = _m("pipeline", "parallelism", choices=MODES)
    model: str = _m("gcnii", "model type", choices=MODELS)
    backend: str = _m("pyg", "layer library", choices=BACKENDS)
    layers: int = _m(16, "graph (aggregation) layers")
    hidden: int = _m(32, "hidden width d")
    heads: int = _m(4, "attention heads (gat)")
    dropout: float = _m(0.5, "dropout probability")
    alpha: float = _m(0.1, "GCNII initial-residual weight alpha")
    lam: float = _m(0.5, "GCNII identity-mapping strength lambda")
    lr: float = _m(0.01, "Adam learning rate")
    weight_decay: float = _m(0.0, "Adam weight decay")
    epochs: int = _f(60, "training epochs")
    seed: int = _m(0, "seed for weights, dropout, chunk order and on-the-fly partitioning")
    eval_every: int = _f(10, "exact full-graph evaluation every N epochs (and at the last)")
    stop_at_val_acc: float = _f(0.0, "stop after the first evaluation whose validation accuracy reaches this "
                                     "fraction, e.g. 0.38 (0: train every epoch)")
    divergence_drop: float = _f(0.2, "mark an evaluation 'diverging' in the metrics (and warn) when its "
                                     "validation accuracy is this fraction below the best so far")
    stages: int = _m(0, "pipeline stages per way (0: world size / ways)")
    ways: int = _m(1, "hybrid ways (graph-parallel groups of pipelines)")
    chunks: int = _m(0, "pipeline chunks per way (0: 4 x stages, as the paper)")
    parts: int = _m(0, "graph-parallel parts (0: world size)")
    method: str = _m("metis", "on-the-fly partitioning method", choices=("metis", "random", "contiguous"))
    exact: bool = _m(False, "pipeline without staleness (equals the one-process run)")
    shuffle: bool = _m(True, "random chunk order every epoch, same on every stage")
    grad_fix: bool = _m(True, "drop stale cross-chunk gradients, scale fresh ones")
    grad_scale: float | None = _m(None, "with grad_fix: factor of the fresh cross-chunk gradients in stale epochs; "
                                  f"unset: {DEFAULT_GRAD_SCALE_WITH_EXACT:g} with --exact-every N (the exact epochs "
                                  "carry every gradient; resgcn+ keeps 2), the paper's "
                                  f"{DEFAULT_GRAD_SCALE_STALE:g} otherwise (a neighbour is fresh with probability "
                                  "about 1/2); chosen by measurement, docs/convergence-notes.md section 19")
    refresh_epochs: int = _m(0, "pipeline/hybrid: before each of the first N epochs, refill the history with an exact "
                             "forward (no gradient) of the current weights and the epoch's dropout masks, so those "
                             "epochs' forwards are exact (one extra forward each)")
    exact_every: int | None = _m(None, "pipeline/hybrid: epochs 0, N, 2N, ... run exact (the whole graph, or a "
                                 "hybrid way's whole part, as one chunk: exact forward and backward, the stages take "
                                 "turns instead of overlapping) and write the history the stale epochs between them "
                                 "read; 0: off, the paper's every-epoch-stale schedule; unset: "
                                 f"{DEFAULT_EXACT_EVERY} in the stale modes (chosen by measurement: without it the stale "
                                 "modes reach exact training's accuracy on no Squirrel seed and collapse on "
                                 "Amazon-Photo), 0 with --exact, --drift-bound or --mode graph; "
                                 "docs/convergence-notes.md section 18")
    drift_bound: float = _m(0.0, "pipeline/hybrid: epoch 0 runs exact, and so does every epoch after a stale epoch "
                            "whose history rows moved by more than this fraction (RMS relative change of the rows "
                            "it rewrote; about 0.45 where the stale pipeline trains, 1 and more where it collapses); "
                            "0: off; not with --exact-every; docs/convergence-notes.md")
    exact_from: int = _m(0, "pipeline/hybrid: every epoch from E on runs exact (a cool-down: the run ends on exact "
                         "training's objective; with --exact-every or --drift-bound, those choose the epochs "
                         "before E); 0: off; docs/convergence-notes.md")
    snapshot_period: int = _m(0, "refresh the historical-embedding snapshot every K epochs (0: off, the default: the "
                              "paper's K = 23 keeps stale rows up to K epochs old, which cost 2 points of Squirrel "
                              "GCNII-32 at 60 epochs; docs/convergence-notes.md)")
    history_dtype: str = _m("float32", "pipeline/hybrid: storage dtype of the historical embeddings, cross-chunk "
                            "gradients and snapshot (bfloat16 halves them; reads upcast to float32)",
                            choices=("float32", "bfloat16"))
    wire: str = _m("float32", "format of every training message that carries embeddings or their gradients (halos, "
                   "pipeline chunk activations, rows between hybrid ways): float32 exact; bfloat16 rounds; int8/int4 "
                   "quantise each row with a scale and offset, stochastic rounding keyed by seed (evaluation and the "
                   "weight all-reduce stay float32)", choices=WIRE_FORMATS)
    boundary_sample: float = _m(1.0, "graph and hybrid mode: each epoch only a seeded random fraction P of each part's "
                                "boundary rows travels (scaled by 1/P; their gradients return), as BNS-GCN samples "
                                "boundary nodes (hybrid: the rows between ways in stale epochs); gcn, sage and gcnii "
                                "only; 1: every row (exact)")
    shared_input: bool = _f(False, "pipeline/hybrid: every stage of a way transforms a share of the first layer's "
                            "input rows (its dense transform of wide raw features) and sends them to stage 0, "
                            "instead of stage 0 doing it all (gcn/sage wider in than --hidden, gat); stale "
                            "training's numbers up to rounding; pays on fast links (docs/benchmarks.md)")
    local_carry: bool = _f(False, "pipeline/hybrid: every stage computes the carry the input layer writes (gcnii's "
                           "h0) from the features itself, instead of receiving it beside the rows: stage 0 sends the "
                           "input layer's weights and gets its gradient back (smaller when the graph has more nodes "
                           "than features); stale epochs only; stale training's numbers up to rounding; pays on slow "
                           "links (docs/benchmarks.md)")
    comm: str = _f("auto", "communicator: torch (Gloo/NCCL), mpi (mpi4py), auto (mpi under mpirun)", choices=("auto", "torch", "mpi"))
    device: str = _f("cpu", "cpu or cuda (each rank on GPU (local rank // ranks per GPU))", choices=("cpu", "cuda"))
    comm_backend: str = _f("auto", "--device cuda with --comm torch: nccl (one rank per GPU), gloo (messages staged "
                           "through host memory; ranks may share a GPU), auto (nccl when every rank of a host owns "
                           "a GPU)", choices=("auto", "nccl", "gloo"))
    ranks_per_gpu: int = _f(0, "--device cuda: ranks of a host sharing one GPU (0: ranks on the host / GPUs, rounded up)")
    threads: int = _f(0, "intra-op threads per rank (0: cores / ranks on this host)")
    timeout: float = _f(60.0, "seconds a rank waits on a peer before failing")
    out: str | None = _f(None, "run directory for config.json and metrics.jsonl; unset: ./runs/<mode>-<model>-<time> ($GNNPIPE_RUN_ROOT replaces ./runs)")
    export: str | None = _f(None, "after training, write the whole trained model (every stage's weights in one "
                            "state_dict that loads into gnnpipe.models.build_model) to this file")
    checkpoint_every: int = _f(0, "checkpoint every N epochs (0: never)")
    resume: str | None = _f(None, "resume from this run/checkpoint directory")
    progress: bool = _f(True, "progress bar on rank 0")
    profile_actions: bool = _f(False, "every rank appends its seconds per kind of work to <out>/actions/rank<k>.jsonl "
                               "each epoch (pipeline and hybrid stages: forward, backward, history gather, codec, "
                               "waits, optimizer); scripts/action_profile.py RUN prints them per stage")
    lean_memory: bool = _f(False, "return freed tensors to the OS at once (glibc mmap threshold 1 MiB): "
                           "about half the peak RSS on CPU, epochs 2.6-3.4x slower (docs/benchmarks.md, scale)")
    verify_data: bool = _f(True, "recompute a prepared dataset's content hash and refuse it if its arrays changed "
                           "(cached by file size and mtime in <dataset>/.verified.json; --no-verify-data skips it)")
    overwrite: bool = _f(False, "start afresh in an --out that holds an earlier run: deletes its config.json, "
                         "metrics.jsonl, summary.json and checkpoints/ (nothing else); without it such an --out is refused")

    def __post_init__(self) -> None:
        check_field_types(self)
        if self.exact_every is None:  # resolved here, so config.json records what ran
            self.exact_every = default_exact_every(self.mode, self.exact, self.drift_bound)
        if self.grad_scale is None:  # after exact_every: the scale follows the schedule
            self.grad_scale = default_grad_scale(self.exact_every, self.model)
        # The built-in synthetic graphs match in any case, like the catalogue's names
        # (a folder of that name in the current directory still wins).
        if self.dataset.lower() in SYNTHETIC_DATASETS and not os.path.exists(self.dataset):
            self.dataset = self.dataset.lower()
        check_ranges(self)
        self.validate()
        check_sizes(self)

    def validate(self) -> None:
        def bad(name: str, value: Any, expected: str) -> None:
            raise _bad(name, value, expected)

        if self.mode not in MODES:
            bad("mode", self.mode, f"one of {MODES}")
        try:  # model, layers, hidden, heads: validated where they are defined
            self.model_shape
        except ModelConfigError as e:
            bad(e.field, e.value, e.expected)
        for name in ("epochs", "eval_every", "ways", "synth_nodes", "synth_classes", "synth_features"):
            if getattr(self, name) < 1:
                bad(name, getattr(self, name), "an integer >= 1")
        for name in ("stages", "chunks", "parts", "threads", "snapshot_period", "refresh_epochs", "exact_every",
                     "exact_from", "checkpoint_every",
                     "ranks_per_gpu"):
            if getattr(self, name) < 0:
                bad(name, getattr(self, name), "an integer >= 0")
        if self.history_dtype not in ("float32", "bfloat16"):
            bad("history_dtype", self.history_dtype, "'float32' or 'bfloat16'")
        if self.exact and self.wire != "float32":
            raise GnnpipeError(f"--exact keeps float32 on the wire; --wire {self.wire} is lossy "
                               "(drop --exact or use --wire float32)")
        if not (isinstance(self.boundary_sample, (int, float)) and 0.0 < self.boundary_sample <= 1.0):
            bad("boundary_sample", self.boundary_sample, "a fraction in (0, 1] (1: every boundary row)")
        why = _boundary_sample_problem(self) if self.boundary_sample < 1.0 else None
        if why:
            raise GnnpipeError(f"--boundary-sample {self.boundary_sample:g} {why} (drop --boundary-sample)")
        if self.shared_input and (self.mode == "graph" or self.exact):
            raise GnnpipeError("--shared-input shares a pipeline's first layer between its stages: "
                               + ("graph parallelism already splits it over the parts, not --mode graph"
                                  if self.mode == "graph" else
                                  "it sums the weight gradient in per-stage shares, which --exact forbids")
                               + " (drop --shared-input)")
        if self.local_carry and (self.mode == "graph" or self.exact):
            raise GnnpipeError("--local-carry computes a pipeline's carry on each of its stages: "
                               + ("graph parallelism moves no carry between stages, not --mode graph"
                                  if self.mode == "graph" else
                                  "it sums the input layer's weight gradient in per-stage shares, which --exact "
                                  "forbids")
                               + " (drop --local-carry)")
        if self.exact_every and self.mode == "graph":
            raise GnnpipeError(f"--exact-every {self.exact_every}: exact epochs between stale ones are for the stale "
                               "modes (--mode pipeline or hybrid); graph parallelism is always exact, not "
                               "--mode graph (drop --exact-every; a pipeline run's config.json records the "
                               "schedule it ran: set exact_every = 0 there to reuse it)")
        if self.exact_from and self.mode == "graph":
            raise GnnpipeError(f"--exact-from {self.exact_from}: exact epochs after stale ones are for the stale "
                               "modes (--mode pipeline or hybrid); graph parallelism is always exact, not "
                               "--mode graph (drop --exact-from)")
        if not (isinstance(self.drift_bound, (int, float)) and math.isfinite(self.drift_bound)
                and self.drift_bound >= 0):
            bad("drift_bound", self.drift_bound, "a number >= 0 (0: off)")
        if self.drift_bound and self.mode == "graph":
            raise GnnpipeError(f"--drift-bound {self.drift_bound:g}: exact epochs between stale ones are for the "
                               "stale modes (--mode pipeline or hybrid); graph parallelism is always exact, not "
                               "--mode graph (drop --drift-bound)")
        if self.drift_bound and self.exact_every:
            raise GnnpipeError(f"--drift-bound {self.drift_bound:g} and --exact-every {self.exact_every} each choose "
                               "the exact epochs: keep one of them")
        if not 0.0 <= self.dropout < 1.0:
            bad("dropout", self.dropout, "a probability in [0, 1)")
        if self.lr <= 0:
            bad("lr", self.lr, "a positive learning rate")
        if not 0.0 <= self.stop_at_val_acc <= 1.0:
            bad("stop_at_val_acc", self.stop_at_val_acc, "a validation accuracy in [0, 1] (0: off)")
        if not 0.0 < self.divergence_drop <= 1.0:
            bad("divergence_drop", self.divergence_drop, "a fraction of accuracy in (0, 1]")
        if self.timeout <= 0:
            bad("timeout", self.timeout, "a positive number of seconds")
        if self.backend == "dgl":
            require_dgl("--backend dgl")

    @property
    def model_shape(self) -> "ModelShape":
        """The model these settings train (:class:`ModelShape`, validated)."""
        return ModelShape(self.model, self.layers, self.hidden, self.heads)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _boundary_sample_problem(cfg: "TrainConfig") -> str | None:
    """Why ``--boundary-sample`` below 1 cannot run with the rest of ``cfg`` (None: it can)."""
    if cfg.mode not in ("graph", "hybrid"):
        return f"samples the rows between parts (--mode graph or hybrid), not --mode {cfg.mode}"
    if cfg.exact:
        return "drops boundary rows, which --exact forbids"
    if cfg.mode == "hybrid" and cfg.ways < 2:
        return f"samples the rows between the hybrid's ways; --ways {cfg.ways} has none"
    if cfg.mode == "hybrid" and cfg.refresh_epochs:
        return ("samples the rows a stale epoch reads; --refresh-epochs rewrites every row exactly before the "
                "epoch, so the two do not combine")
    if cfg.model not in SAMPLED_MODELS:
        return (f"scales the sampled rows, which equals dropping edges only for layers linear in their "
                f"inputs ({', '.join(SAMPLED_MODELS)}), not --model {cfg.model}")
    return None


#: The fields marked ``math`` above: the ones that change the numbers of training (a
#: checkpoint records them and a resumed run must match them exactly).
MATH_FIELDS = tuple(f.name for f in fields(TrainConfig) if f.metadata.get("math"))


# ------------------------------------------------------------------ validation at the edge
# Kept apart from TrainConfig.validate so that adding fields or metadata does not touch it:
# the checks are driven by each field's declared type, not by a list of names.

#: Largest value an int field may hold: torch and numpy store them as int64.
INT_MAX = 2**63 - 1


class ConfigFieldError(GnnpipeError):
    """One config field's value is wrong; ``field`` names it, so that :func:`parse_config`
    can say which file it came from when a ``--config`` file set it."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


def _bad(name: str, value: Any, expected: str) -> ConfigFieldError:
    return ConfigFieldError(name, f"config field {name!r} = {value!r}: expected {expected}")


# ------------------------------------------------------------------ the one model description

class ModelConfigError(ConfigFieldError, ValueError):
    """A model option is invalid (a :class:`ModelShape`'s or a
    :class:`gnnpipe.models.ModelConfig`'s); ``field`` names it and the message shows the value.
    A :class:`ConfigFieldError`, so that a ``--config`` file that set it is named too."""


def bad_model_field(name: str, value: Any, expected: str) -> ModelConfigError:
    """The error of one bad model field: ``NAME: expected ..., got VALUE`` (``value`` and
    ``expected`` kept, so that :class:`TrainConfig` words it as its other fields)."""
    e = ModelConfigError(name, f"{name}: expected {expected}, got {value!r}")
    e.value, e.expected = value, expected
    return e


@dataclass(frozen=True)
class ModelShape:
    """The one model description: which model, and its shape.

    Defined and validated here only; the others are built from it:
    :attr:`TrainConfig.model_shape` (the run settings' model), :class:`gnnpipe.models.ModelConfig`
    (its ``shape``, with the data's widths and the layers' options: what
    :func:`gnnpipe.models.build_model` builds) and :class:`gnnpipe.cost.ModelSpec` (a shape with
    the byte widths of the wire and the history: what the cost model predicts).

    Args:
        model: one of :data:`MODELS`, or :data:`USER_MODEL` (a chain of the user's layers:
            ``layers`` counts its units, ``hidden`` is the width of its carried tensors).
        layers: L, graph (aggregation) layers.
        hidden: d, the hidden width (for gat the concatenation of all heads).
        heads: gat's attention heads of the hidden layers; must divide ``hidden`` (ignored by
            the other models).

    Raises:
        ModelConfigError: naming the field and the value.
    """

    model: str
    layers: int
    hidden: int
    heads: int = 1

    #: The models this kind of description may name (the cost model's: built-in ones only).
    known_models: ClassVar[tuple[str, ...]] = MODELS + (USER_MODEL,)

    def __post_init__(self) -> None:
        if self.model not in self.known_models:
            raise bad_model_field("model", self.model, "one of " + ", ".join(self.known_models))
        for name in ("layers", "hidden", "heads"):  # (heads before the division below)
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise bad_model_field(name, v, "an integer >= 1")
        if self.model == "gat" and self.hidden % self.heads:
            raise bad_model_field("hidden", self.hidden, f"a width divisible by heads={self.heads} for gat")

    @classmethod
    def of(cls, run: Any, **kw: Any):
        """This class built from ``run``'s shape fields (anything with ``model``, ``layers``,
        ``hidden`` and ``heads``: a :class:`ModelShape`, a ``TrainConfig``, a ``ModelConfig``)
        and ``kw`` (the subclass's fields, or replacements)."""
        return cls(**{**{f.name: getattr(run, f.name) for f in fields(ModelShape)}, **kw})

    @property
    def num_units(self) -> int:
        """Units the model is made of: one per layer, plus input and output linears for the
        models that start with one (the pipeline splits the model at unit boundaries)."""
        return self.layers if self.model in FEATURE_FIRST_MODELS + (USER_MODEL,) else self.layers + 2

    @property
    def h0(self) -> bool:
        """GCNII forwards its initial residual beside the activations."""
        return self.model == "gcnii"


def check_field_types(cfg: "TrainConfig") -> None:
    """Every field holds a value of its declared type, whether from a flag, TOML or Python.

    ``bool`` fields take only booleans (TOML ``"false"`` is a string, and a true one); ``int``
    fields only integers (not ``3.7``, not ``true``) within int64; ``float`` fields finite
    numbers (ints are converted); ``str`` fields strings (a path given as a number is refused;
    ``os.PathLike`` is converted); ``choices`` from the field's metadata are enforced here too,
    since TOML values do not pass through argparse.

    Raises:
        GnnpipeError: naming the field, the value and what was expected.
    """
    for f in fields(cfg):
        v = getattr(cfg, f.name)
        typ = str(f.type).replace(" ", "")
        optional = typ.endswith("|None")
        base = typ[: -len("|None")] if optional else typ
        if v is None:
            if not optional:
                raise _bad(f.name, v, f"a value of type {base}")
            continue
        if base == "bool":
            if not isinstance(v, bool):
                raise _bad(f.name, v, "a boolean (TOML true/false, not a string or a number)")
        elif base == "int":
            if isinstance(v, bool) or not isinstance(v, int):
                raise _bad(f.name, v, "an integer")
            if not -INT_MAX - 1 <= v <= INT_MAX:
                raise _bad(f.name, v, "an integer within int64 (|value| < 2**63)")
        elif base == "float":
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise _bad(f.name, v, "a number")
            if not math.isfinite(v):
                raise _bad(f.name, v, "a finite number")
            setattr(cfg, f.name, float(v))
        elif base == "str":
            if isinstance(v, os.PathLike):
                v = os.fspath(v)
                setattr(cfg, f.name, v)
            if not isinstance(v, str):
                raise _bad(f.name, v, "a string")
            if "\0" in v:
                raise _bad(f.name, v, "a string without NUL characters")
            if v == "":
                raise _bad(f.name, v, "a non-empty string" + (" (leave it out for the default)" if optional else ""))
        choices = f.metadata.get("choices")
        if choices is not None and v not in choices:
            raise _bad(f.name, v, f"one of {', '.join(map(str, choices))}")


def check_ranges(cfg: "TrainConfig") -> None:
    """Bounds :meth:`TrainConfig.validate` does not cover (``seed``, the synthetic graph's
    knobs, Adam's weight decay)."""
    if not 0 <= cfg.seed <= INT_MAX:
        raise _bad("seed", cfg.seed, "an integer in 0..2**63-1")
    if cfg.timeout > 365 * 86400:  # larger values overflow the communicators' timedelta
        raise _bad("timeout", cfg.timeout, "at most a year of seconds (31536000)")
    if cfg.threads > 4096:
        raise _bad("threads", cfg.threads, "at most 4096 intra-op threads")
    if cfg.weight_decay < 0:
        raise _bad("weight_decay", cfg.weight_decay, "a number >= 0")
    if cfg.synth_degree <= 0:
        raise _bad("synth_degree", cfg.synth_degree, "a positive average degree")
    if not 0.0 <= cfg.synth_homophily <= 1.0:
        raise _bad("synth_homophily", cfg.synth_homophily, "a fraction in [0, 1]")
    if cfg.alpha < 0 or cfg.alpha > 1:
        raise _bad("alpha", cfg.alpha, "a weight in [0, 1]")
    if cfg.lam < 0:
        raise _bad("lam", cfg.lam, "a number >= 0")
    if cfg.grad_scale < 0:
        raise _bad("grad_scale", cfg.grad_scale, "a number >= 0")


def machine_bytes() -> int:
    """Physical memory of this host (0 when the system does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def estimate_bytes(cfg: "TrainConfig", num_nodes: int | None = None, num_features: int | None = None,
                   world: int | None = None) -> dict[str, int]:
    """A lower bound of one rank's memory, by part, before anything is allocated.

    Deliberately low (so no run that fits is refused): the weights with their gradients and
    Adam's two moments, for the built-in synthetic graph its CSR and features (every rank
    builds the whole graph), and with a known ``world`` one float32 [N/world, d] activation
    per layer.
    """
    d, L = cfg.hidden, cfg.layers
    f = num_features if num_features is not None else cfg.synth_features
    est = {"weights": 4 * 4 * (f * d + L * d * d)}  # param, grad, Adam m and v
    n = num_nodes
    if cfg.dataset in SYNTHETIC_DATASETS:
        n = cfg.synth_nodes
        edges = int(n * cfg.synth_degree)
        est["graph"] = 8 * (n + 1) + 8 * edges + 4 * n * cfg.synth_features
    if n is not None and world:
        est["activations"] = 4 * L * d * -(-n // max(world, 1))
    return est


def check_sizes(cfg: "TrainConfig", num_nodes: int | None = None, num_features: int | None = None,
                world: int | None = None) -> None:
    """Refuse sizes one rank could never allocate, with the estimate (see :func:`estimate_bytes`)."""
    have = machine_bytes()
    if not have:
        return
    est = estimate_bytes(cfg, num_nodes, num_features, world)
    need = sum(est.values())
    if need > have:
        parts = ", ".join(f"{k} {v / 2**30:.1f} GiB" for k, v in est.items())
        raise GnnpipeError(
            f"config: one rank needs at least {need / 2**30:.1f} GiB ({parts}) but this machine has "
            f"{have / 2**30:.1f} GiB (hidden={cfg.hidden}, layers={cfg.layers}"
            + (f", synth_nodes={cfg.synth_nodes}, synth_features={cfg.synth_features}" if cfg.dataset in SYNTHETIC_DATASETS else "")
            + "); use smaller sizes or more ranks")


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose usage errors are one line: ``PROG: error: MESSAGE (see PROG --help)``.

    argparse's default prints the whole usage synopsis first, which for a CLI with many
    options buries the line that says what was wrong. Subparsers inherit the class.
    """

    def error(self, message: str):  # type: ignore[override]
        # argparse echoes the user's arguments as given: a newline in one would break the
        # one-line error, so line breaks are shown escaped (as Python writes them)
        message = message.replace("\r", "\\r").replace("\n", "\\n")
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser(prog: str = "gnnpipe-train") -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog=prog,
        description="Full-graph training of deep GNNs: graph parallelism, GNNPipe pipeline, hybrid. "
        "Run with mpirun -np N, torchrun --nproc-per-node N, srun, or as one process.",
    )
    p.add_argument("--config", default=None,
                   help="TOML file of field = value, or the name of a shipped preset (flags override it) (default: none)")
    p.add_argument("--list-presets", action=_ListPresets, help="list the shipped presets and exit")
    p.add_argument("--debug", action="store_true", help="tracebacks and debug logs (default: off)")
    for f in fields(TrainConfig):
        flag = "--" + f.name.replace("_", "-")
        help_ = f.metadata.get("help", "")
        if f.type in ("bool", bool):
            p.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction, default=None, help=f"{help_} (default: {f.default})")
            continue
        typ = {"int": int, "float": float}.get(str(f.type).replace(" | None", ""), str)
        shown = "see above" if f.default is None and typ is not str else f.default
        kw: dict[str, Any] = {"dest": f.name, "type": typ, "default": None, "help": f"{help_} (default: {shown})"}
        if "choices" in f.metadata:
            kw["choices"] = f.metadata["choices"]
        p.add_argument(flag, **kw)
    return p


def list_presets() -> dict[str, str]:
    """Shipped presets: ``{name: first line of its comment header}``, sorted by name."""
    out = {}
    for f in sorted(PRESET_DIR.glob("*.toml")):
        first = next((ln.lstrip("# ").strip() for ln in f.read_text().splitlines() if ln.startswith("#")), "")
        if first.startswith(f.stem + ":"):  # headers start "# <name>: <what it is for>"
            first = first[len(f.stem) + 1 :].strip()
        out[f.stem] = first
    return out


def resolve_config_file(name_or_path: str | Path) -> Path:
    """``--config`` argument -> file: an existing path, else the preset of that name.

    Raises:
        GnnpipeError: neither a file nor a preset; the message lists the presets.
    """
    path = Path(name_or_path)
    if path.is_file():
        return path
    stem = path.name[:-5] if path.name.endswith(".toml") else path.name
    preset = PRESET_DIR / f"{stem}.toml"
    if path.parent == Path(".") and preset.is_file():
        return preset
    raise GnnpipeError(f"{name_or_path}: config file not found, and no preset of that name "
                       f"(presets: {', '.join(list_presets()) or 'none'})")


class _ListPresets(argparse.Action):
    """``--list-presets``: prints every preset with its one-line description, exits 0."""

    def __init__(self, option_strings, dest, **kw):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kw)

    def __call__(self, parser, namespace, values, option_string=None):
        presets = list_presets()
        width = max((len(n) for n in presets), default=0)
        lines = [f"{n:<{width}}  {d}" for n, d in presets.items()]
        # A listing, like --help: stdout, not stderr.
        sys.stdout.write("\n".join(lines + [f"(in {PRESET_DIR}; use --config NAME)"]) + "\n")
        parser.exit(0)


def load_toml(path: str | Path) -> dict:
    path = resolve_config_file(path)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise GnnpipeError(f"{path}: config file not found") from None
    except UnicodeDecodeError:
        raise GnnpipeError(f"{path}: not a text file (TOML must be UTF-8)") from None
    except OSError as e:
        raise GnnpipeError(f"{path}: cannot read the config file ({e.strerror})") from None
    except tomllib.TOMLDecodeError as e:
        raise GnnpipeError(f"{path}: not valid TOML ({e})") from None
    known = {f.name for f in fields(TrainConfig)}
    spelled: dict[str, list[str]] = {}
    for k in data:
        spelled.setdefault(k.replace("-", "_"), []).append(k)
    twice = {name: ks for name, ks in spelled.items() if len(ks) > 1}
    if twice:
        name, ks = sorted(twice.items())[0]
        raise GnnpipeError(f"{path}: field {name!r} is given {len(ks)} times ({', '.join(map(repr, ks))}); "
                           "keep one")
    data = {k.replace("-", "_"): v for k, v in data.items()}
    unknown = sorted(set(data) - known)
    if unknown:
        raise GnnpipeError(f"{path}: unknown field(s) {', '.join(unknown)}")
    return data


def parse_config(argv: Sequence[str] | None) -> tuple[TrainConfig, argparse.Namespace]:
    """Flags over ``--config`` file over defaults."""
    ns = build_parser().parse_args(list(argv) if argv is not None else None)
    values: dict[str, Any] = load_toml(ns.config) if ns.config else {}
    from_file = set(values)
    for f in fields(TrainConfig):
        v = getattr(ns, f.name)
        if v is not None:
            values[f.name] = v
            from_file.discard(f.name)
    try:
        cfg = TrainConfig(**values)
    except TypeError as e:
        raise GnnpipeError(f"config: {e}") from None
    except ConfigFieldError as e:
        if e.field in from_file:  # name the file the bad value came from
            raise GnnpipeError(f"{resolve_config_file(ns.config)}: {e}") from None
        raise
    return cfg, ns
