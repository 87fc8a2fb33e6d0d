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
import sys
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Sequence

from gnnpipe import GnnpipeError
from gnnpipe.dims import MODES

PRESET_DIR = Path(__file__).resolve().parent / "presets"

#: Built-in models whose first unit aggregates the input features (its halo never travels).
FEATURE_FIRST_MODELS = ("gcn", "sage", "gat")
#: Built-in models whose first unit is a linear map of the input features.
INPUT_LINEAR_MODELS = ("gcnii", "resgcn+")
#: Every built-in model (``--model``); the one definition the model zoo, the volume
#: formulas and the planner use.
MODELS = FEATURE_FIRST_MODELS + INPUT_LINEAR_MODELS
#: Layer libraries the built-in models run on (``--backend``).
BACKENDS = ("pyg", "dgl")


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
    root: str | None = _f(None, "folder of prepared datasets; unset: $GNNPIPE_DATA_ROOT or <repo>/datasets")
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
    stages: int = _m(0, "pipeline stages per way (0: world size / ways)")
    ways: int = _m(1, "hybrid ways (graph-parallel groups of pipelines)")
    chunks: int = _m(0, "pipeline chunks per way (0: 4 x stages, as the paper)")
    parts: int = _m(0, "graph-parallel parts (0: world size)")
    method: str = _m("metis", "on-the-fly partitioning method", choices=("metis", "random", "contiguous"))
    exact: bool = _m(False, "pipeline without staleness (equals the one-process run)")
    shuffle: bool = _m(True, "random chunk order every epoch, same on every stage")
    grad_fix: bool = _m(True, "drop stale cross-chunk gradients, scale fresh ones")
    snapshot_period: int = _m(23, "refresh the historical-embedding snapshot every K epochs (0: off)")
    history_dtype: str = _m("float32", "pipeline/hybrid: storage dtype of the historical embeddings, cross-chunk "
                            "gradients and snapshot (bfloat16 halves them; reads upcast to float32)",
                            choices=("float32", "bfloat16"))
    comm: str = _f("auto", "communicator: torch (Gloo/NCCL), mpi (mpi4py), auto (mpi under mpirun)", choices=("auto", "torch", "mpi"))
    device: str = _f("cpu", "cpu or cuda", choices=("cpu", "cuda"))
    threads: int = _f(0, "intra-op threads per rank (0: cores / ranks on this host)")
    timeout: float = _f(60.0, "seconds a rank waits on a peer before failing")
    out: str | None = _f(None, "run directory for config.json and metrics.jsonl; unset: runs/<mode>-<model>-<time>")
    checkpoint_every: int = _f(0, "checkpoint every N epochs (0: never)")
    resume: str | None = _f(None, "resume from this run/checkpoint directory")
    progress: bool = _f(True, "progress bar on rank 0")
    lean_memory: bool = _f(False, "return freed tensors to the OS at once (glibc mmap threshold 1 MiB): "
                           "about half the peak RSS on CPU, epochs about 2.5x slower")

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        def bad(name: str, value: Any, expected: str) -> None:
            raise GnnpipeError(f"config field {name!r} = {value!r}: expected {expected}")

        if self.mode not in MODES:
            bad("mode", self.mode, f"one of {MODES}")
        if self.model not in MODELS:
            bad("model", self.model, f"one of {MODELS}")
        for name in ("layers", "hidden", "epochs", "eval_every", "ways", "synth_nodes", "synth_classes", "synth_features"):
            if getattr(self, name) < 1:
                bad(name, getattr(self, name), "an integer >= 1")
        for name in ("stages", "chunks", "parts", "threads", "snapshot_period", "checkpoint_every"):
            if getattr(self, name) < 0:
                bad(name, getattr(self, name), "an integer >= 0")
        if self.history_dtype not in ("float32", "bfloat16"):
            bad("history_dtype", self.history_dtype, "'float32' or 'bfloat16'")
        if not 0.0 <= self.dropout < 1.0:
            bad("dropout", self.dropout, "a probability in [0, 1)")
        if self.lr <= 0:
            bad("lr", self.lr, "a positive learning rate")
        if self.timeout <= 0:
            bad("timeout", self.timeout, "a positive number of seconds")
        if self.hidden % self.heads and self.model == "gat":
            bad("hidden", self.hidden, f"a multiple of heads={self.heads} for gat")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


#: The fields marked ``math`` above: the ones that change the numbers of training (a
#: checkpoint records them and a resumed run must match them exactly).
MATH_FIELDS = tuple(f.name for f in fields(TrainConfig) if f.metadata.get("math"))


def build_parser(prog: str = "gnnpipe-train") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
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
        typ = {"int": int, "float": float}.get(str(f.type), str)
        kw: dict[str, Any] = {"dest": f.name, "type": typ, "default": None, "help": f"{help_} (default: {f.default})"}
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
    except tomllib.TOMLDecodeError as e:
        raise GnnpipeError(f"{path}: not valid TOML ({e})") from None
    known = {f.name for f in fields(TrainConfig)}
    data = {k.replace("-", "_"): v for k, v in data.items()}
    unknown = sorted(set(data) - known)
    if unknown:
        raise GnnpipeError(f"{path}: unknown field(s) {', '.join(unknown)}")
    return data


def parse_config(argv: Sequence[str] | None) -> tuple[TrainConfig, argparse.Namespace]:
    """Flags over ``--config`` file over defaults."""
    ns = build_parser().parse_args(list(argv) if argv is not None else None)
    values: dict[str, Any] = {}
    if ns.config:
        values.update(load_toml(ns.config))
    for f in fields(TrainConfig):
        v = getattr(ns, f.name)
        if v is not None:
            values[f.name] = v
    try:
        cfg = TrainConfig(**values)
    except TypeError as e:
        raise GnnpipeError(f"config: {e}") from None
    return cfg, ns
