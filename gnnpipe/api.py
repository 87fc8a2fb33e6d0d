"""The public Python API: train from a Graph object, get the trained model back.

::

    import gnnpipe
    graph = gnnpipe.Graph.from_pyg(data)                  # or gnnpipe.Graph.load(dir)
    res = gnnpipe.fit(graph, mode="pipeline", model="gcnii", layers=16, exact=True)
    res.model(data.x, data.edge_index)                    # an ordinary torch.nn.Module
    res.predict()                                         # exact full-graph logits
    res.metrics[-1]["loss"], res.summary["test_acc_at_best_val"]

    # or your own chain of PyG / DGL layers (gnnpipe.models.user: the rules, the carry protocol)
    res = gnnpipe.fit(graph, layers=[GraphConv(F, 64), GraphConv(64, 64), GraphConv(64, C)],
                      mode="pipeline", exact=True)

:func:`fit` trains in this process's role within whatever launch it runs under: one process,
``mpirun -np N python script.py``, ``torchrun``, ``srun``. It takes every option of
``gnnpipe-train`` as a keyword argument (``gnnpipe-train --help`` lists them; underscores
for dashes) and uses the same trainer (:func:`gnnpipe.train.train`) the command runs, so
there is one path. :func:`launch` starts N local ranks from a notebook or script and returns
rank 0's value. No file is written unless ``out=`` is given.
"""

from __future__ import annotations

import inspect
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from torch import nn

from gnnpipe._base import GnnpipeError
from gnnpipe.comm import apply_threads, detect_launch
from gnnpipe.config import TrainConfig
from gnnpipe.data.graph import Graph
from gnnpipe.models import GNN, ModelConfig, RunCtx, build_model
from gnnpipe.models.block import Block
from gnnpipe.models.user import Layer, UserChain
from gnnpipe.parallel.features import features_to_tensor
from gnnpipe.quiet import known_warnings_silenced
from gnnpipe.spawn import run_ranks
from gnnpipe.train.connect import connect
from gnnpipe.train.run import training_run

__all__ = ["Layer", "Result", "TrainedModel", "UserChain", "fit", "launch"]


class TrainedModel(nn.Module):
    """A trained built-in model as an ordinary module: ``model(x, edge_index) -> logits``.

    Args:
        gnn: the :class:`gnnpipe.models.GNN` (every stage's weights in one place).
        seed: the run's seed (dropout masks are keyed by it in training mode).

    ``state_dict()`` is the plain :class:`~gnnpipe.models.GNN`'s (keys ``gnn.units.<i>...``
    here; ``self.gnn.state_dict()`` loads into ``gnnpipe.models.build_model(config)``).
    """

    def __init__(self, gnn: GNN, seed: int = 0) -> None:
        super().__init__()
        self.gnn = gnn
        self.seed = seed

    @property
    def config(self) -> ModelConfig:
        return self.gnn.cfg

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor, epoch: int = 0) -> torch.Tensor:
        """Logits [N, classes] of every node.

        Args:
            x: [N, F] node features (dense, or a torch sparse CSR tensor).
            edge_index: int64 [2, E]: the graph's edges; they are made symmetric, and
                self-loops and duplicates are dropped, as gnnpipe's Graph format holds them.
            epoch: keys the dropout masks in training mode (ignored in ``eval()`` mode).
        """
        n = int(x.shape[0])
        with known_warnings_silenced():
            block = Block.from_edge_index(edge_index, n)
            return self.gnn(block, x, RunCtx(training=self.training, epoch=epoch, seed=self.seed))


@dataclass
class Result:
    """What :func:`fit` returns (the same on every rank).

    Attributes:
        model: the trained model with every stage's weights: a :class:`TrainedModel`, or for
            ``fit(layers=[...])`` a :class:`gnnpipe.models.user.UserChain` (its
            ``state_dict`` loads into ``nn.ModuleList`` of the same layers).
        metrics: one dict per epoch, as in ``metrics.jsonl``.
        summary: test accuracy at the best validation accuracy, epochs, mean epoch time.
        config: the resolved :class:`gnnpipe.config.TrainConfig`.
        graph: the graph it was trained on (original node ids).
    """

    model: TrainedModel | UserChain
    metrics: list[dict]
    summary: dict
    config: TrainConfig
    graph: Graph = field(repr=False)

    @torch.no_grad()
    def predict(self) -> torch.Tensor:
        """Exact full-graph logits [N, classes] of the trained model, in the graph's node order
        (one process's forward over the whole graph: no history, no staleness)."""
        was = self.model.training
        self.model.eval()
        try:
            with known_warnings_silenced():
                g = self.graph
                # copies: a loaded graph's arrays may be read-only memory maps, which torch warns about
                block = Block.full(torch.from_numpy(np.array(g.indptr, dtype=np.int64)),
                                   torch.from_numpy(np.array(g.indices, dtype=np.int64)))
                x = features_to_tensor(g.features)
                ctx = RunCtx(training=False, epoch=0, seed=self.model.seed)
                if isinstance(self.model, UserChain):
                    return self.model.run(block, x, ctx)
                return self.model.gnn(block, x, ctx)
        finally:
            self.model.train(was)


def fit(graph: Graph | str | None = None, *, comm=None, out: str | os.PathLike | None = None,
        progress: bool = True, **options: Any) -> Result:
    """Train on ``graph`` in this process's role; every rank gets the same :class:`Result`.

    Args:
        graph: a :class:`gnnpipe.Graph` (e.g. from ``Graph.from_pyg``), a prepared dataset's
            name or directory, or None for the built-in synthetic graph (``dataset=``
            options apply then).
        comm: the communicator to train over; by default the one this process's launch
            implies (one process, mpirun, torchrun, srun), made here and closed at the end.
        out: a run directory for ``config.json``, ``metrics.jsonl``, ``summary.json`` and
            checkpoints (locked for the run, as ``gnnpipe-train --out``); none by default.
            ``export="model.pt"`` writes the trained model as ``gnnpipe-train --export`` does.
        progress: a progress bar on rank 0, as ``gnnpipe-train`` shows (``progress=False``:
            none).
        **options: any ``gnnpipe-train`` option, e.g. ``mode="pipeline", model="gcnii",
            layers=16, hidden=64, epochs=100, exact=True, threads=2``. Two more here:
            ``layers=[module, ...]`` (a list, not a count) trains your own chain of PyG / DGL
            layers and row-wise modules instead of ``model`` (:mod:`gnnpipe.models.user`:
            the locality rule, ``gnnpipe.Layer`` for carried tensors); your modules are
            copied, not changed, and every rank starts from rank 0's weights. ``act=``
            names the activation between them (default ``"relu"``).

    Raises:
        GnnpipeError: an option or the data is invalid (one line naming it), or training
            failed on some rank (every rank raises it).
    """
    # torch's sparse-CSR notices mean nothing to the caller; silenced only while fit runs.
    with known_warnings_silenced():
        return _fit(graph, comm, out, progress, options)


def _fit(graph: Graph | str | None, comm, out: str | os.PathLike | None, progress: bool,
         options: dict[str, Any]) -> Result:
    """:func:`fit`'s body."""
    if "dataset" in options and graph is not None:
        raise GnnpipeError("give the data once: either fit(graph, ...) or fit(dataset=...)")
    if isinstance(graph, (str, os.PathLike)):
        options["dataset"], graph = str(graph), None
    if graph is not None and not isinstance(graph, Graph):
        raise GnnpipeError(f"graph: expected a gnnpipe.Graph, a dataset name or a directory, got "
                           f"{type(graph).__name__} (convert with gnnpipe.Graph.from_pyg or from_dgl)")
    if graph is not None:
        options["dataset"] = graph.name or "graph"
    user = _user_chain(options)
    options.setdefault("progress", progress)
    if out is not None:
        options["out"] = str(out)
    try:
        cfg = TrainConfig(**options)
    except TypeError as e:  # an unknown keyword
        raise GnnpipeError(f"fit: {e}; the options are gnnpipe-train's (gnnpipe-train --help)") from None
    if user is not None:
        user.dropout, user.seed = float(cfg.dropout), int(cfg.seed)
    launch_info = detect_launch()
    apply_threads(cfg.threads, launch_info)
    own = comm is None
    if own:
        comm = connect(cfg, launch_info)
    # The command's run, less its printing: a run directory only with out=, the model always
    # gathered (it is returned), the caller's communicator left open, a failed close raised.
    with training_run(cfg, comm, own_comm=own, run_dir=out is not None, graph=graph, user=user,
                      keep_model=True) as done:
        if user is not None:  # it holds the trained weights now
            model: TrainedModel | UserChain = user
        else:
            gnn = build_model(done.model_config, seed=cfg.seed)
            gnn.load_state_dict(done.state)
            model = TrainedModel(gnn, seed=cfg.seed)
    history = done.summary.pop("history")
    return Result(model, history, done.summary, cfg, done.graph)


def _user_chain(options: dict) -> UserChain | None:
    """Take ``layers=[...]`` and ``act=`` out of ``options`` (TrainConfig's ``layers`` is the
    CLI's count): the chain, with ``layers`` set to its length for the config."""
    layers = options.get("layers")
    if isinstance(layers, (list, tuple, nn.ModuleList)):
        shape = [k for k in ("model", "hidden", "heads", "alpha", "lam", "backend") if k in options]
        if shape:
            raise GnnpipeError(f"fit: {', '.join(shape)}= describe a built-in model; with layers=[...] your "
                               "layers are the model (drop them)")
        chain = UserChain(layers, act=options.pop("act", "relu"))  # dropout and seed: from the config
        options["layers"] = len(chain)
        return chain
    if "act" in options:
        raise GnnpipeError("act= applies to your own layers only: fit(graph, layers=[module, ...], act=...)")
    return None


def launch(fn: Callable[..., Any] | str, nprocs: int = 2, comm: str = "torch", *,
           args: dict | None = None, timeout_s: float = 3600.0) -> Any:
    """Run ``fn(comm, **args)`` on ``nprocs`` local ranks and return rank 0's value.

    For notebooks and scripts; on a cluster use ``mpirun``, ``torchrun`` or ``srun`` and call
    :func:`fit` directly. Each rank gets its world communicator as the first argument; pass
    it on (``gnnpipe.fit(graph, comm=comm, ...)``).

    Args:
        fn: a function defined in an importable module or in a script file, or
            ``"package.module:function"``. The ranks import it afresh (a script's
            ``if __name__ == "__main__":`` block does not run there).
        nprocs: ranks to start.
        comm: ``"torch"`` (Gloo) or ``"mpi"`` (the venv's mpirun).
        args: keyword arguments for ``fn`` (anything ``torch.save`` stores).
        timeout_s: limit for the whole run.

    Raises:
        GnnpipeError: ``fn`` cannot be found by the ranks, or a rank failed (its error
            output is in the message).
    """
    target = _target(fn)
    try:
        return run_ranks(target, nprocs, comm, args=args, timeout_s=timeout_s)[0]
    except AssertionError as e:
        raise GnnpipeError(f"launch: {e}") from None


def _target(fn: Callable[..., Any] | str) -> str:
    """``fn`` as the ranks find it: ``module:function`` or ``/path/to/script.py:function``."""
    if isinstance(fn, str):
        return fn
    name = getattr(fn, "__qualname__", "")
    if not callable(fn) or "<" in name or "." in name:
        raise GnnpipeError(f"launch: fn must be a module-level function, got {fn!r}")
    module = fn.__module__
    if module == "__main__":
        path = inspect.getsourcefile(fn)
        if path is None or not Path(path).is_file():
            raise GnnpipeError("launch: a function defined in a notebook cell cannot be imported by the "
                               "ranks; put it in a .py file and import it")
        return f"{Path(path).resolve()}:{name}"
    return f"{module}:{name}"
