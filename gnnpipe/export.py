"""One file for a trained model: every stage's weights in one ``state_dict``.

Training spreads a model over ranks (a pipeline stage holds only its block of units), and
checkpoints keep one file per rank. An exported model is one ``torch.save`` file::

    {"format": "gnnpipe-model", "format_version": 1,
     "model_config": {...},      # gnnpipe.models.ModelConfig fields
     "state_dict": {...},        # keys units.<i>.*: loads into build_model(ModelConfig(**model_config))
                                 # (model "user", fit(layers=[...]): keys <i>.*, nn.ModuleList(layers))
     "train_config": {...}}      # the run's settings, for the record

written by ``gnnpipe-train --export FILE`` (after training), by
``gnnpipe merge-checkpoint RUN`` (from a run's newest committed checkpoint), or by
:func:`save_model` from :attr:`gnnpipe.api.Result.model`. :func:`load_model` gives back the
plain, un-parallelised :class:`gnnpipe.models.GNN`.
"""

from __future__ import annotations

import dataclasses
import io
import os
from pathlib import Path

import torch

from gnnpipe._base import GnnpipeError
from gnnpipe.checkpoint import find_checkpoint, read_commit, read_rank_payload
from gnnpipe.fsutil import atomic_write_bytes
from gnnpipe.models import GNN, USER_MODEL, ModelConfig, build_model

FORMAT = "gnnpipe-model"
FORMAT_VERSION = 1


def save_model(path: str | os.PathLike, state_dict: dict, model_config: ModelConfig | dict,
               train_config: dict | None = None) -> Path:
    """Write one model file atomically (a crash leaves the old file or none, never half).

    Args:
        path: the file to write (its folder must exist).
        state_dict: the whole model's weights (keys ``units.<i>.*``).
        model_config: its :class:`~gnnpipe.models.ModelConfig` (or that as a dict).
        train_config: the run's settings, stored for the record.
    """
    mc = dataclasses.asdict(model_config) if isinstance(model_config, ModelConfig) else dict(model_config)
    payload = {"format": FORMAT, "format_version": FORMAT_VERSION, "model_config": mc,
               "state_dict": {k: v.detach().cpu() for k, v in state_dict.items()},
               "train_config": dict(train_config or {})}
    buf = io.BytesIO()
    torch.save(payload, buf)
    return atomic_write_bytes(Path(path), buf.getvalue())


def load_model(path: str | os.PathLike) -> GNN:
    """The plain :class:`~gnnpipe.models.GNN` of a model file, weights loaded.

    Raises:
        GnnpipeError: not a gnnpipe model file, or its weights do not fit its config.
    """
    path = Path(path)
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise GnnpipeError(f"{path}: no such model file") from None
    except Exception as e:  # noqa: BLE001 - any unreadable file is the user's input
        raise GnnpipeError(f"{path}: not a readable model file ({type(e).__name__})") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise GnnpipeError(f"{path}: not a {FORMAT} file (format {payload.get('format') if isinstance(payload, dict) else None!r})")
    if payload.get("model_config", {}).get("model") == USER_MODEL:
        raise GnnpipeError(f"{path}: a chain of your own layers; load torch.load(path)['state_dict'] into "
                           "nn.ModuleList(your layers)")
    try:
        gnn = build_model(ModelConfig(**payload["model_config"]), seed=0)
        gnn.load_state_dict(payload["state_dict"])
    except (TypeError, RuntimeError) as e:
        raise GnnpipeError(f"{path}: weights do not fit the stored model config ({e})") from None
    return gnn


def merge_checkpoint(run_or_ckpt: str | os.PathLike) -> tuple[dict, dict, dict]:
    """The whole model of a run's checkpoint, from its per-rank files.

    Args:
        run_or_ckpt: a run directory (its newest committed checkpoint is used) or one
            checkpoint directory.

    Returns:
        ``(state_dict, model_config, train_config)``.

    Raises:
        GnnpipeError: no committed checkpoint, a damaged rank file (size or sha256), a
            checkpoint written before model configs were recorded, or units missing.
    """
    where = find_checkpoint(run_or_ckpt)
    commit = read_commit(where)
    units: dict[int, dict] = {}
    model_config = None
    for k in range(int(commit["world_size"])):
        payload = read_rank_payload(where, commit, k)
        model_config = model_config or payload.get("model_config")
        state = payload["executor"]
        if state.get("kind") == "graph":  # every graph-parallel rank holds the whole model
            sd = state["model"]
            for key, v in sd.items():
                _, i, rest = key.split(".", 2)
                units.setdefault(int(i), {})[rest] = v
            break
        for pos, sd in enumerate(state["units"]):
            units.setdefault(int(state["first_unit"]) + pos, sd)  # hybrid: every way holds the same
    if model_config is None:
        raise GnnpipeError(f"{where}: written before checkpoints recorded the model config; "
                           "re-run with this version of gnnpipe to export it")
    user = model_config.get("model") == USER_MODEL
    n = int(model_config["layers"]) if user else len(build_model(ModelConfig(**model_config), seed=0).units)
    if sorted(units) != list(range(n)):
        raise GnnpipeError(f"{where}: the rank files hold units {sorted(units)}, expected 0..{n - 1}")
    if user:  # keys of nn.ModuleList(layers), as fit(layers=...) exports: <i>.<the module's own key>
        state_dict = {f"{i}.{key.removeprefix('module.')}": v for i, sd in sorted(units.items()) for key, v in sd.items()}
    else:
        state_dict = {f"units.{i}.{key}": v for i, sd in sorted(units.items()) for key, v in sd.items()}
    return state_dict, model_config, commit.get("config") or {}
