"""The training loop: epochs, evaluation, metrics, checkpoints, progress.

:func:`train` runs on every rank of a launched job (or in one process with a
``SingleProcessCommunicator``) and returns the same summary everywhere. Rank 0 writes
``config.json``, ``metrics.jsonl`` and ``summary.json`` into the run directory; every rank
writes its checkpoint files (:mod:`gnnpipe.checkpoint`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from gnnpipe._base import GnnpipeError
from gnnpipe import checkpoint as ckpt
from gnnpipe import device
from gnnpipe.config import TrainConfig
from gnnpipe.data.graph import Graph
from gnnpipe.data.load import check_splits, load_graph_for, row_normalized
from gnnpipe.parallel.executor import Executor
from gnnpipe.parallel.alloc import lean_allocator
from gnnpipe.train import setup
from gnnpipe.train.guards import FiniteWatch, NonFiniteLossError, agree_on_epoch, agree_on_setup, nonfinite_message
from gnnpipe.train.metrics import Reducer, bytes_delta, epoch_figures, epoch_record, gpu_peaks
from gnnpipe.train.rundir import ActionLog, MetricsFile, append_metrics, write_json_atomic

log = logging.getLogger("gnnpipe.train")

# Committed checkpoints kept per run (the newest included).
KEEP_CHECKPOINTS = 2


def diverging(best_val: float, val: float, drop: float) -> bool:
    """Whether an evaluation's validation accuracy ``val`` fell at least ``drop`` (a fraction)
    below the best so far: the paper's pipeline collapsed that way on ogbn-arxiv (67.7 % to
    14.3 %), so the metrics say so instead of only the final number."""
    return best_val >= 0 and best_val - val >= drop


def train(cfg: TrainConfig, comm, out: Path | None = None, show_progress: bool = False) -> dict:
    """Train on this rank; returns the summary (identical on every rank). See :func:`run_training`."""
    return run_training(cfg, comm, out, show_progress)[0]


def run_training(cfg: TrainConfig, comm, out: Path | None = None, show_progress: bool = False,
                 graph: Graph | None = None, user=None) -> tuple[dict, Executor, Graph]:
    """Train on this rank; returns the summary (identical on every rank), the executor and the graph.

    Args:
        cfg: the resolved configuration.
        comm: this rank's communicator (``SingleProcessCommunicator`` for one process).
        out: run directory (rank 0 writes ``config.json``, ``metrics.jsonl``, ``summary.json``;
            every rank writes its checkpoint files under ``out/checkpoints``).
        show_progress: tqdm bar on rank 0.
        graph: the graph to train on (in memory); None loads the one ``cfg`` names.
        user: a :class:`gnnpipe.models.user.UserChain` to train instead of ``cfg.model``
            (``gnnpipe.fit(layers=[...])``); its modules receive rank 0's initial weights.

    Returns:
        ``(summary, executor, graph)``: the summary holds ``best_val_acc``,
        ``test_acc_at_best_val``, ``best_epoch``, ``final_loss``, ``epochs`` (epochs in the
        history, resumed ones included), ``mean_epoch_time_s``, ``history``.

    Raises:
        SetupError: a rank failed to load the data, build its executor or resume (every rank
            raises it; the checkpoint mismatch message names each differing field).
        NonFiniteLossError: the loss became NaN/Inf (every rank raises it).
    """
    torch.manual_seed(cfg.seed)
    out = Path(out) if out is not None else None
    # Before any tensor of the run exists; off unless asked (--lean-memory or
    # GNNPIPE_MMAP_THRESHOLD): it halves peak RSS on CPU but slows epochs (see the module).
    lean_allocator(cfg.lean_memory)
    run = _set_up(cfg, comm, out, graph, user)
    reduce = Reducer(comm)
    clock = device.Stopwatch(run.ex.device)
    history, start = _resume(run)
    watch = FiniteWatch()
    if run.ex.dims.pipelined:
        run.ex.output_hook = watch
    outputs = _Outputs(run, history, start, show_progress)
    evals = _Evaluations(history)
    stopped_at = None
    try:
        for epoch in range(start, cfg.epochs):
            rec, res, accs = _train_epoch(run, epoch, watch, reduce, clock)
            if accs is not None:
                evals.add(run, epoch, rec, accs)
            history.append(rec)
            outputs.epoch_done(epoch, rec, res, accs)
            if cfg.checkpoint_every and (epoch + 1) % cfg.checkpoint_every == 0:
                # Only reached after a finite epoch: a diverged run keeps its last good one.
                _save_checkpoint(run, epoch, history)
            if accs is not None and cfg.stop_at_val_acc and accs["val_acc"] >= cfg.stop_at_val_acc:
                # Every rank evaluated the same reduced accuracy, so every rank stops here.
                stopped_at = epoch
                break
    finally:
        outputs.close()
    summary = _summary(history, evals, stopped_at)
    if out is not None and run.rank0:
        write_json_atomic(out / "summary.json", {k: v for k, v in summary.items() if k != "history"})
    return summary, run.ex, run.graph


@dataclasses.dataclass
class _Run:
    """One rank's run once it is set up: what every step of :func:`run_training` reads."""

    cfg: TrainConfig
    comm: Any
    out: Path | None
    graph: Graph
    ex: Executor
    plan: Any
    identity: dict  # what a checkpoint of this run must match (gnnpipe.checkpoint.run_identity)
    user: Any  # the user's chain (gnnpipe.models.user.UserChain), or None
    resumed: tuple[Path, dict] | None  # (checkpoint directory, this rank's payload) with --resume

    @property
    def rank0(self) -> bool:
        return self.comm.rank == 0


def _set_up(cfg: TrainConfig, comm, out: Path | None, graph: Graph | None, user) -> _Run:
    """Load the data (or check the caller's graph), build this rank's executor and read the
    checkpoint to resume from (collective: a failure on any rank raises SetupError on every rank)."""
    err: GnnpipeError | None = None
    resumed: tuple[Path, dict] | None = None
    try:
        if graph is None:
            graph = load_graph_for(cfg)
        else:
            check_splits(graph, cfg.dataset)
            if cfg.normalize_features:
                graph = row_normalized(graph)
        ex, plan = setup.executor_for_config(cfg, comm, graph, user)
        identity = ckpt.run_identity(cfg, ex.dims, graph.content_hash, getattr(plan, "params", None))
        if user is not None:  # the config's model fields do not describe the user's chain
            identity["user_layers"] = user.signature()
        if cfg.resume:
            where = ckpt.find_checkpoint(cfg.resume)
            _, payload = ckpt.load_checkpoint(where, comm.rank, identity)
            resumed = (where, payload)
        if cfg.checkpoint_every and out is None:
            raise GnnpipeError("--checkpoint-every needs a run directory (--out)")
    except GnnpipeError as e:
        err = e
    agree_on_setup(comm, err)
    return _Run(cfg, comm, out, graph, ex, plan, identity, user, resumed)


def _resume(run: _Run) -> tuple[list[dict], int]:
    """The history so far and the first epoch to train: with ``--resume``, every rank agrees
    on the checkpoint's epoch, loads its state (executor, random generators) and continues
    after it; otherwise an empty history and epoch 0."""
    if run.resumed is None:
        return [], 0
    where, payload = run.resumed
    agree_on_epoch(run.comm, int(payload["epoch"]), where)
    run.ex.load_state_dict(payload["executor"])
    ckpt.set_rng_state(payload["rng"])
    history = list(payload["history"])
    start = int(payload["epoch"]) + 1
    if run.rank0:
        log.info("resumed from %s: continuing at epoch %d of %d", where, start, run.cfg.epochs)
    return history, start


class _Outputs:
    """What a run writes as it goes: rank 0's ``config.json`` and ``metrics.jsonl`` (in the
    run directory), each rank's ``--profile-actions`` file, rank 0's progress bar."""

    def __init__(self, run: _Run, history: list[dict], start: int, show_progress: bool) -> None:
        cfg, out = run.cfg, run.out
        self.run = run
        self.mfile = _start_run_files(run, history) if out is not None and run.rank0 else None
        self.actions = (ActionLog(out, run.comm.rank, append=run.resumed is not None)
                        if out is not None and cfg.profile_actions else None)
        self.bar = None
        if show_progress and run.rank0:
            model = "user" if run.user is not None else cfg.model
            self.bar = tqdm(total=cfg.epochs, desc=f"{cfg.mode}/{model}-{cfg.layers}", unit="ep", file=sys.stderr)
            self.bar.update(min(start, cfg.epochs))

    def epoch_done(self, epoch: int, rec: dict, res, accs: dict | None) -> None:
        """Record a finished epoch: its metrics line, its actions, the bar."""
        if self.run.out is not None:  # rank 0 appends; every rank learns if that failed (full disk)
            append_metrics(self.run.comm, self.mfile, rec)
        if self.actions is not None:
            self.actions.write(epoch, self.run.ex, res)
        if self.bar is not None:
            post = {"loss": f"{rec['loss']:.4f}"}
            if accs is not None:
                post.update(val=f"{accs['val_acc']:.3f}", test=f"{accs['test_acc']:.3f}")
            self.bar.set_postfix(post)
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        if self.mfile is not None:
            self.mfile.close()
        if self.actions is not None:
            self.actions.close()


def _start_run_files(run: _Run, history: list[dict]) -> MetricsFile:
    """Rank 0 writes ``config.json`` (the resolved configuration) and opens ``metrics.jsonl``
    with the history so far."""
    cfg, graph, out = run.cfg, run.graph, run.out
    out.mkdir(parents=True, exist_ok=True)
    resolved = {
        **cfg.to_dict(),
        "world_size": run.comm.world_size,
        "dataset_name": graph.name,
        "dataset_hash": graph.content_hash,
        "num_nodes": graph.num_nodes,
        "num_edges": graph.num_edges,
        "plan_params": getattr(run.plan, "params", None),
        "resumed_from": str(run.resumed[0]) if run.resumed else None,
    }
    write_json_atomic(out / "config.json", resolved)
    # A resumed run rewrites the file from the checkpoint's history: lines a killed run
    # wrote after its last checkpoint disappear, so the file equals an uninterrupted run's.
    mfile = MetricsFile(out / "metrics.jsonl")  # whole lines only, even on a full disk
    for rec in history:
        mfile.write(json.dumps(rec) + "\n")
    mfile.flush()
    return mfile


class _Evaluations:
    """What the evaluations so far say: the best validation accuracy (with the test accuracy
    and the epoch there) and how many evaluations were diverging (:func:`diverging`)."""

    def __init__(self, history: list[dict]) -> None:
        self.best = {"val_acc": -1.0, "test_acc": None, "epoch": None}
        for rec in history:
            if "val_acc" in rec and rec["val_acc"] > self.best["val_acc"]:
                self.best = {"val_acc": rec["val_acc"], "test_acc": rec["test_acc"], "epoch": rec["epoch"]}
        self.diverging_evals = sum(1 for rec in history if rec.get("diverging"))

    def add(self, run: _Run, epoch: int, rec: dict, accs: dict) -> None:
        """Put an evaluation's accuracies into its epoch's record ``rec``, marked ``diverging``
        when it fell too far below the best; rank 0 warns at the first such evaluation."""
        best = self.best
        rec.update(accs)
        if accs["val_acc"] > best["val_acc"]:
            best = self.best = {"val_acc": accs["val_acc"], "test_acc": accs["test_acc"], "epoch": epoch}
        if diverging(best["val_acc"], accs["val_acc"], run.cfg.divergence_drop):
            rec["diverging"] = True
            self.diverging_evals += 1
            if run.rank0 and self.diverging_evals == 1:
                cfg = run.cfg
                hint = ("; a stale run without exact epochs collapses this way on some graphs (Amazon-Photo "
                        "GCNII-32): leave out --exact-every 0 (the default runs every other epoch exact), or "
                        "--drift-bound 0.7 runs an exact epoch wherever the history drifts (docs/guide.md, "
                        "'Convergence techniques')"
                        if cfg.mode != "graph" and not (cfg.exact or cfg.exact_every or cfg.drift_bound or cfg.exact_from) else "")
                log.warning("epoch %d: validation accuracy %.4f is %.4f below its best (%.4f at epoch %d): "
                            "training may be diverging ('diverging' is set in metrics.jsonl)%s",
                            epoch, accs["val_acc"], best["val_acc"] - accs["val_acc"], best["val_acc"],
                            best["epoch"], hint)


def _train_epoch(run: _Run, epoch: int, watch: FiniteWatch, reduce: Reducer,
                 clock: device.Stopwatch) -> tuple[dict, Any, dict | None]:
    """Train one epoch and evaluate when it is due (every ``--eval-every``-th and the last).

    Returns:
        ``(record, result, accuracies)``: the epoch's ``metrics.jsonl`` record with its
        figures reduced over the ranks (the accuracies not yet in it), this rank's
        :class:`~gnnpipe.parallel.executor.EpochResult`, and the reduced accuracies or None.

    Raises:
        NonFiniteLossError: the reduced loss is NaN or Inf (every rank raises it).
    """
    cfg, comm, ex = run.cfg, run.comm, run.ex
    watch.reset()
    before = comm.stats.snapshot() if hasattr(comm, "stats") else {}
    device.reset_peak_memory(ex.device)
    clock.start()
    cpu0 = time.process_time()
    res = ex.train_epoch(epoch)
    wall = clock.stop()
    res.cpu_s = time.process_time() - cpu0
    evaluated = (epoch + 1) % cfg.eval_every == 0 or epoch == cfg.epochs - 1
    accs = ex.evaluate(epoch) if evaluated else None
    after = comm.stats.snapshot() if hasattr(comm, "stats") else {}
    sums, maxes = reduce(*epoch_figures(res, bytes_delta(before, after), wall))
    loss = sums[0]
    if not np.isfinite(loss):
        # Every rank sees the same reduced loss, so every rank takes this branch.
        raise NonFiniteLossError(nonfinite_message(cfg, comm, ex.dims, watch, res, loss, epoch, run.out))
    rec = epoch_record(epoch, sums, maxes)
    if res.exact:  # a stale run's exact epoch (--exact-every, --drift-bound): the same on every rank
        rec["exact"] = True
    if res.drift is not None:  # --drift-bound: the stale epoch's history drift, already over every rank
        rec["drift"] = res.drift
    if ex.device.type == "cuda":  # this epoch's peak of every rank's GPU memory, MiB
        rec["peak_gpu_mem_mb"] = gpu_peaks(reduce, comm, device.peak_memory(ex.device))
    return rec, res, accs


def _save_checkpoint(run: _Run, epoch: int, history: list[dict]) -> None:
    """Commit the checkpoint after ``epoch`` (collective: every rank writes its file) and keep
    the newest :data:`KEEP_CHECKPOINTS`."""
    cfg, comm = run.cfg, run.comm
    payload = {
        "format": ckpt.FORMAT, "epoch": epoch, "rank": comm.rank,
        "world_size": comm.world_size, "executor": run.ex.state_dict(),
        "rng": ckpt.rng_state(), "history": history, "identity": run.identity,
        "config": cfg.to_dict(), "model_config": dataclasses.asdict(setup.model_config(cfg, run.graph, run.user)),
    }
    ckpt.save_checkpoint(comm, run.out, epoch, payload, run.identity, keep=KEEP_CHECKPOINTS,
                         config=cfg.to_dict())


def _summary(history: list[dict], evals: _Evaluations, stopped_at: int | None) -> dict:
    """The run's summary (the same on every rank): see :func:`run_training`."""
    best = evals.best
    return {
        "best_val_acc": best["val_acc"],
        "test_acc_at_best_val": best["test_acc"],
        "best_epoch": best["epoch"],
        "final_loss": history[-1]["loss"] if history else None,
        "epochs": len(history),
        "stopped_at_val_acc": stopped_at,  # the epoch --stop-at-val-acc ended the run, or None
        "diverging_evals": evals.diverging_evals,
        "mean_epoch_time_s": float(np.mean([h["epoch_time_s"] for h in history[1:]] or [0.0])),
        "history": history,
    }
