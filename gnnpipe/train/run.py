"""One training run, from its run directory to its teardown: the sequence ``gnnpipe-train``
and :func:`gnnpipe.fit` share once the communicator exists (:mod:`gnnpipe.train.connect`).

:func:`training_run` opens and locks the run directory, trains
(:func:`gnnpipe.train.loop.run_training`), gathers the trained model and exports it, hands
the result to the caller's ``with`` block, then releases the directory and closes the
communicator, the latter only after success.
"""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path
from typing import Any, Callable, Iterator

from gnnpipe.config import TrainConfig
from gnnpipe.data.graph import Graph
from gnnpipe.export import save_model
from gnnpipe.models import ModelConfig
from gnnpipe.train.loop import run_training
from gnnpipe.train.rundir import open_run_dir
from gnnpipe.train.setup import gather_model_state, model_config


@dataclasses.dataclass
class FinishedRun:
    """What a finished run hands its caller (the same on every rank)."""

    summary: dict  # run_training's summary, "history" included
    out: Path | None  # the run directory, or None without one
    graph: Graph  # the graph it trained on
    model_config: ModelConfig  # the trained model (the user's chain: its description)
    # The trained model's weights, when gathered (keep_model or --export): the built-in model's
    # state_dict (keys units.<i>.*), or the user's chain's own (it loads into
    # nn.ModuleList(layers)); None when not gathered.
    state: dict | None


@contextlib.contextmanager
def training_run(cfg: TrainConfig, comm, *, own_comm: bool, resume_run: Path | None = None,
                 run_dir: bool = True, graph: Graph | None = None, user=None, keep_model: bool = False,
                 on_start: Callable[[Path | None], Any] | None = None,
                 quiet_close: bool = False) -> Iterator[FinishedRun]:
    """Train in this process's role and export; the ``with`` block gets the :class:`FinishedRun`.

    The block runs after training and export and before the teardown (the run directory's
    lock released, an own communicator closed); an error in it counts as the run's failure.

    Args:
        cfg: the resolved configuration.
        comm: the world communicator.
        own_comm: the communicator was made for this run: close it at the end. A caller's
            (``fit(comm=...)``) stays open.
        resume_run: the run directory ``--resume`` points into (the default run directory).
        run_dir: open a run directory (rank 0 claims and locks ``cfg.out``, else
            ``resume_run``, else a new one under the runs root); False: none, so nothing is
            written but the export (``fit`` without ``out=``).
        graph: the graph to train on; None loads the one ``cfg`` names.
        user: the user's chain of layers to train instead of ``cfg.model`` (``fit(layers=[...])``);
            it receives the trained weights.
        keep_model: gather the trained model on every rank even without ``--export`` (``fit``
            returns it; the command gathers only to export, a collective it otherwise skips).
        on_start: called with the run directory once it is open, before training (the
            command's log line).
        quiet_close: ignore an error in closing the communicator (the command: the run is
            done and reported, its exit code stays 0; ``fit`` raises it to its caller).

    Raises:
        GnnpipeError: whatever set-up, training or the export raised (every rank raises it
            where :func:`~gnnpipe.train.loop.run_training` says so).
    """
    lock = None
    ok = False
    try:
        out = None
        if run_dir:
            # Rank 0 names, checks and locks the run directory; every rank gets its name.
            out, lock = open_run_dir(comm, cfg, resume_run)
        if on_start is not None:
            on_start(out)
        summary, ex, used = run_training(cfg, comm, out=out, show_progress=cfg.progress, graph=graph, user=user)
        mcfg = model_config(cfg, used, user)
        state = None
        if keep_model or cfg.export:
            # every rank takes part in gathering the stages' weights; rank 0 writes the file
            state = gather_model_state(ex, comm, mcfg.num_units)
            if user is not None:
                user.load_units_state(state)
                state = user.state_dict()  # the export loads into nn.ModuleList(layers)
            if cfg.export and comm.rank == 0:
                save_model(cfg.export, state, mcfg, cfg.to_dict())
        yield FinishedRun(summary, out, used, mcfg, state)
        ok = True
    finally:
        if lock is not None:
            lock.release()
        # Close only after success: tearing down a process group whose peer died (or that
        # Ctrl-C interrupted mid-operation) can abort the process (exit -6) instead of
        # leaving with the caller's error; after a failure the rank leaves without teardown.
        if own_comm and (ok or comm.world_size == 1):  # no peer to lose in one process
            try:
                comm.close()
            except Exception:
                if not quiet_close:
                    raise
