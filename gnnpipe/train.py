"""The trainer and ``gnnpipe-train`` (floor 4/5): epochs, evaluation, metrics, progress.

Launch it any way you like; every rank runs the same command::

    mpirun -np 4 gnnpipe-train                       # the README's main job (pipeline GCNII)
    mpirun -np 4 gnnpipe-train --mode graph --dataset cora --model gcn --layers 2
    torchrun --nproc-per-node 4 -m gnnpipe.train --mode graph ...
    gnnpipe-train --mode graph ...                   # one process

Outputs (rank 0) in ``--out`` (default ``runs/<mode>-<model>-<time>``): ``config.json`` (the
resolved configuration, world size, dataset and plan hashes), ``metrics.jsonl`` (one line per
epoch: ``epoch``, ``loss``, ``train_acc``, ``val_acc``/``test_acc`` when evaluated,
``epoch_time_s``, ``compute_s``, ``comm_s``, ``bubble_s``, ``bytes_sent`` by category summed
over ranks, ``peak_rss_mb`` max over ranks) and ``summary.json`` (test accuracy at the best
validation accuracy).

Checkpoints (:mod:`gnnpipe.checkpoint`): ``--checkpoint-every N`` commits
``<out>/checkpoints/epoch-<E>/`` (one file per rank, ``COMMIT.json`` last) at the end of every
N-th epoch and keeps the newest two; ``--resume DIR`` (a run directory or one checkpoint)
continues at epoch E+1 after checking that every setting that changes the numbers matches,
and rewrites ``metrics.jsonl`` from the saved history so the file equals an uninterrupted
run's. A NaN or Inf loss stops the run, naming the epoch and (pipeline) the first stage whose
output was non-finite; no checkpoint is written after such an epoch.
"""

from __future__ import annotations

import json
import logging
import os
import resource
import sys
import time
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from gnnpipe import GnnpipeError
from gnnpipe.config import TrainConfig, parse_config

log = logging.getLogger("gnnpipe.train")

# Fixed order so every rank reduces the same vector.
CATEGORIES = ("halo_fwd", "halo_bwd", "pipe_act", "pipe_grad", "allreduce", "control", "eval")


# Committed checkpoints kept per run (the newest included).
KEEP_CHECKPOINTS = 2


class SetupError(GnnpipeError):
    """A setup failure every rank agreed on; rank 0 reports it, the others exit quietly."""


class NonFiniteLossError(GnnpipeError):
    """The loss became NaN or Inf; every rank raises it with the same message."""


class _FiniteWatch:
    """Remembers whether this rank's pipeline stage produced a non-finite output this epoch.

    The last stage computes the loss, so a NaN born on stage 0 only shows there. Checking
    each chunk's output (one pass over [n_k, d], small beside the aggregation) lets the
    error name the stage where it first appeared. Graph-parallel executors need no watch:
    every rank computes its own part of the loss.
    """

    def __init__(self, ex) -> None:
        self.bad = False
        self.ex = ex
        self.stage = getattr(ex, "stage", None)
        if self.stage is None or not hasattr(self.stage, "forward_chunk"):
            self.stage = None
            return
        inner = self.stage.forward_chunk

        def forward_chunk(k, h_in, carry_in, training=True):
            out, carry = inner(k, h_in, carry_in, training)
            if training and not self.bad and not bool(torch.isfinite(out.detach()).all()):
                self.bad = True
            return out, carry

        # An instance attribute shadows the method for this stage object only.
        self.stage.forward_chunk = forward_chunk

    def reset(self) -> None:
        self.bad = False


def _nonfinite_message(cfg: TrainConfig, comm, watch: _FiniteWatch, res, loss: float,
                       epoch: int, out: Path | None) -> str:
    """Where the non-finite loss came from (collective: every rank calls it)."""
    world = comm.world_size
    mine = watch.bad if watch.stage is not None else not np.isfinite(res.loss)
    flags = torch.zeros(world, dtype=torch.float64)
    flags[comm.rank] = 1.0 if mine else 0.0
    if world > 1:
        comm.all_reduce(flags, op="sum", category="control")
    hit = [k for k in range(world) if flags[k] > 0]
    if watch.stage is not None:
        S = int(getattr(watch.ex, "S", world))  # stages per way; rank = way * S + stage
        if hit:
            way, stage = min((divmod(k, S) for k in hit), key=lambda ws: (ws[1], ws[0]))
            where = f"first non-finite output on stage {stage} of {S}"
            if stage == S - 1:
                where += " (last)"
            if world > S:
                where += f", way {way}"
        else:
            where = f"every stage's output finite; the loss on stage {S - 1} (last) is not"
    else:
        where = f"non-finite local loss on rank(s) {', '.join(map(str, hit))}" if hit else "ranks' losses finite, their sum is not"
    msg = f"loss became {loss} at epoch {epoch} (mode {cfg.mode}; {where}); stopping"
    if out is not None and cfg.checkpoint_every:
        from gnnpipe.checkpoint import list_checkpoints

        done = list_checkpoints(out)
        msg += (f"; last good checkpoint: {done[-1][1]}" if done else "; no checkpoint was written yet")
    return msg + ". Lower --lr or check the input features"


def _agree_on_epoch(comm, epoch: int, where: Path) -> None:
    """Every rank resumes from the same epoch (each resolved ``latest`` on its own)."""
    if comm.world_size == 1:
        return
    t = torch.tensor([epoch, -epoch], dtype=torch.int64)
    comm.all_reduce(t, op="max", category="control")
    if int(t[0]) != epoch or int(-t[1]) != epoch:
        raise GnnpipeError(f"ranks resolved --resume to different checkpoints (epochs "
                           f"{int(-t[1])}..{int(t[0])}, rank {comm.rank} found {where}); "
                           "pass the checkpoint directory itself")


def agree_on_setup(comm, err: GnnpipeError | None) -> None:
    """Every rank learns whether any rank failed to set up, and why (no rank hangs waiting).

    The lowest failing rank's message is broadcast; every rank raises it, so rank 0 prints
    it and every process exits non-zero.
    """
    if comm.world_size == 1:
        if err is not None:
            raise err
        return
    failing = torch.tensor([comm.rank if err is not None else comm.world_size], dtype=torch.int64)
    comm.all_reduce(failing, op="min", category="control")
    r = int(failing)
    if r == comm.world_size:
        return
    msg = torch.zeros(2048, dtype=torch.uint8)
    if comm.rank == r:
        data = str(err).encode()[:2048]
        msg[: len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    comm.broadcast(msg, src=r, category="control")
    text = bytes(msg.tolist()).rstrip(b"\0").decode(errors="replace")
    if comm.rank == r:
        raise SetupError(str(err) if r == 0 else f"rank {r}: {err}") from err
    raise SetupError(text if r == 0 else f"rank {r}: {text}")


def load_graph_for(cfg: TrainConfig):
    """The dataset a config names, with ``--normalize-features`` applied."""
    from gnnpipe.rundir import check_splits

    g = _load_graph(cfg)
    check_splits(g, cfg.dataset)
    if cfg.normalize_features:
        g = row_normalized(g)
    return g


def row_normalized(g):
    """A copy of ``g`` whose feature rows sum to 1 (all-zero rows stay zero).

    The Planetoid protocol of Kipf & Welling and of GCNII. Pure per-row scaling, so every
    rank computes the same rows whatever the partition.
    """
    import dataclasses

    import scipy.sparse as sp

    f = g.features
    if sp.issparse(f):
        f = sp.csr_matrix(f, dtype=np.float32, copy=True)
        s = np.asarray(f.sum(axis=1)).ravel()
        inv = np.divide(1.0, s, out=np.zeros_like(s), where=s != 0).astype(np.float32)
        f = sp.diags(inv) @ f
        f = sp.csr_matrix(f, dtype=np.float32)
    else:
        f = np.array(f, dtype=np.float32)
        s = f.sum(axis=1, keepdims=True)
        f = np.divide(f, s, out=np.zeros_like(f), where=s != 0)
    # The content hash stays the dataset's: it names the data on disk that plans and
    # checkpoints are tied to (checkpoints also record normalize_features).
    return dataclasses.replace(g, features=f, validate=False, _hash=g.content_hash,
                               meta={**g.meta, "normalized_features": "row-sum"})


def _load_graph(cfg: TrainConfig):
    """The dataset a config names: a built-in synthetic graph or a prepared directory."""
    from gnnpipe.data.graph import Graph

    if cfg.dataset in ("sbm", "rmat"):
        from gnnpipe.data import synthetic

        if cfg.dataset == "sbm":
            return synthetic.sbm(
                num_nodes=cfg.synth_nodes, num_classes=cfg.synth_classes,
                avg_degree=cfg.synth_degree, homophily=cfg.synth_homophily, num_features=cfg.synth_features,
                feature_signal=cfg.synth_signal, seed=cfg.seed,
            )
        return synthetic.rmat(
            num_nodes=cfg.synth_nodes, num_edges=int(cfg.synth_nodes * cfg.synth_degree),
            num_classes=cfg.synth_classes, num_features=cfg.synth_features, seed=cfg.seed,
            feature_signal=cfg.synth_signal, homophily=cfg.synth_homophily,
        )
    from gnnpipe.data.catalog import resolve_dataset

    path = resolve_dataset(cfg.dataset, cfg.root)
    g = Graph.load(path, mmap=True)
    if cfg.verify_data:  # edited arrays would otherwise pass the plan and checkpoint checks
        from gnnpipe.data.verify import verify_dataset

        verify_dataset(path, g)
    return g


def plan_for(cfg: TrainConfig, graph, parts: int, chunks: int):
    """Load ``cfg.plan`` (checked against the dataset) or partition in memory."""
    from gnnpipe.partition import PartitionPlan, build_plan, check_plan_matches

    if cfg.plan:
        plan = PartitionPlan.load(cfg.plan)
        check_plan_matches(plan, graph)
        if plan.num_parts != parts:
            raise GnnpipeError(
                f"plan {cfg.plan} has {plan.num_parts} parts but this run needs {parts} "
                f"(world size / mode); partition again with --parts {parts}"
            )
        if chunks and plan.num_chunks != chunks:
            raise GnnpipeError(
                f"plan {cfg.plan} has {plan.num_chunks} chunks per part but --chunks is {chunks}"
            )
        return plan
    if parts > graph.num_nodes:
        raise GnnpipeError(f"cannot split {graph.num_nodes} nodes into {parts} parts")
    method = cfg.method if parts > 1 or chunks > 1 else "contiguous"
    return build_plan(graph, parts=parts, chunks=max(chunks, 1), method=method, seed=cfg.seed)


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


class _Reducer:
    """Sums and maxima of per-rank epoch figures, through the communicator."""

    def __init__(self, comm) -> None:
        self.comm = comm

    def __call__(self, sums: list[float], maxes: list[float]) -> tuple[list[float], list[float]]:
        s = torch.tensor(sums, dtype=torch.float64)
        m = torch.tensor(maxes, dtype=torch.float64)
        if self.comm.world_size > 1:
            self.comm.all_reduce(s, op="sum", category="metrics")
            self.comm.all_reduce(m, op="max", category="metrics")
        return s.tolist(), m.tolist()


def build_executor(cfg: TrainConfig, comm, graph):
    """The executor for ``cfg.mode`` on this rank, with its model and optimizer."""
    from gnnpipe.models import ModelConfig, build_model

    mcfg = ModelConfig(
        model=cfg.model, in_dim=graph.num_features, num_classes=graph.num_classes,
        layers=cfg.layers, hidden=cfg.hidden, heads=cfg.heads, dropout=cfg.dropout,
        alpha=cfg.alpha, lam=cfg.lam, backend=cfg.backend, multilabel=graph.multilabel,
    )
    world = comm.world_size
    num_train = int(np.count_nonzero(np.asarray(graph.train_mask)))
    if cfg.mode == "graph":
        from gnnpipe.parallel.graph_parallel import GraphParallelExecutor, gather_feature_rows
        from gnnpipe.partition import load_local_part

        parts = cfg.parts or world
        if parts != world:
            raise GnnpipeError(f"--mode graph needs one rank per part: world size is {world}, parts is {parts}")
        plan = plan_for(cfg, graph, parts, 0)
        local = load_local_part(graph, plan, comm.rank)
        halo_rows = plan.perm[np.asarray(local.halo.recv_ids, dtype=np.int64)]
        halo_x = gather_feature_rows(graph.features, halo_rows)
        model = build_model(mcfg, seed=cfg.seed)
        opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        ex = GraphParallelExecutor(comm, local, halo_x, model, opt, num_train, seed=cfg.seed,
                                   multilabel=graph.multilabel, device=cfg.device)
        return ex, plan
    if cfg.mode in ("pipeline", "hybrid"):
        from gnnpipe.parallel.pipeline import build_pipeline_executor

        return build_pipeline_executor(cfg, comm, graph, mcfg, num_train)
    raise GnnpipeError(f"unknown mode {cfg.mode!r}")


def train(cfg: TrainConfig, comm, out: Path | None = None, show_progress: bool = False) -> dict:
    """Train on this rank; returns the summary (identical on every rank).

    Args:
        cfg: the resolved configuration.
        comm: this rank's communicator (``SingleProcessCommunicator`` for one process).
        out: run directory (rank 0 writes ``config.json``, ``metrics.jsonl``, ``summary.json``;
            every rank writes its checkpoint files under ``out/checkpoints``).
        show_progress: tqdm bar on rank 0.

    Returns:
        ``best_val_acc``, ``test_acc_at_best_val``, ``best_epoch``, ``final_loss``, ``epochs``
        (epochs in the history, resumed ones included), ``mean_epoch_time_s``, ``history``.

    Raises:
        SetupError: a rank failed to load the data, build its executor or resume (every rank
            raises it; the checkpoint mismatch message names each differing field).
        NonFiniteLossError: the loss became NaN/Inf (every rank raises it).
    """
    from gnnpipe import checkpoint as ckpt
    from gnnpipe.rundir import MetricsFile, append_metrics

    torch.manual_seed(cfg.seed)
    out = Path(out) if out is not None else None
    err: GnnpipeError | None = None
    resumed: tuple[Path, dict] | None = None
    from gnnpipe.parallel.alloc import lean_allocator

    # Before any tensor of the run exists; off unless asked (--lean-memory or
    # GNNPIPE_MMAP_THRESHOLD): it halves peak RSS on CPU but slows epochs (see the module).
    lean_allocator(cfg.lean_memory)
    try:
        graph = load_graph_for(cfg)
        ex, plan = build_executor(cfg, comm, graph)
        identity = ckpt.run_identity(cfg, comm.world_size, graph.content_hash,
                                     getattr(plan, "params", None))
        if cfg.resume:
            where = ckpt.find_checkpoint(cfg.resume)
            commit, payload = ckpt.load_checkpoint(where, comm.rank, identity)
            resumed = (where, payload)
        if cfg.checkpoint_every and out is None:
            raise GnnpipeError("--checkpoint-every needs a run directory (--out)")
    except GnnpipeError as e:
        err = e
    agree_on_setup(comm, err)
    rank0 = comm.rank == 0
    reduce = _Reducer(comm)
    history: list[dict] = []
    start = 0
    if resumed is not None:
        where, payload = resumed
        _agree_on_epoch(comm, int(payload["epoch"]), where)
        ex.load_state_dict(payload["executor"])
        ckpt.set_rng_state(payload["rng"])
        history = list(payload["history"])
        start = int(payload["epoch"]) + 1
        if rank0:
            log.info("resumed from %s: continuing at epoch %d of %d", where, start, cfg.epochs)
    watch = _FiniteWatch(ex)
    mfile = None
    if out is not None and rank0:
        out.mkdir(parents=True, exist_ok=True)
        resolved = {
            **cfg.to_dict(),
            "world_size": comm.world_size,
            "dataset_name": graph.name,
            "dataset_hash": graph.content_hash,
            "num_nodes": graph.num_nodes,
            "num_edges": graph.num_edges,
            "plan_params": getattr(plan, "params", None),
            "resumed_from": str(resumed[0]) if resumed else None,
        }
        _atomic_json(out / "config.json", resolved)
        # A resumed run rewrites the file from the checkpoint's history: lines a killed run
        # wrote after its last checkpoint disappear, so the file equals an uninterrupted run's.
        mfile = MetricsFile(out / "metrics.jsonl")  # whole lines only, even on a full disk
        for rec in history:
            mfile.write(json.dumps(rec) + "\n")
        mfile.flush()
    bar = None
    if show_progress and rank0:
        from tqdm import tqdm

        bar = tqdm(total=cfg.epochs, desc=f"{cfg.mode}/{cfg.model}-{cfg.layers}", unit="ep", file=sys.stderr)
    best = {"val_acc": -1.0, "test_acc": None, "epoch": None}
    for rec in history:
        if "val_acc" in rec and rec["val_acc"] > best["val_acc"]:
            best = {"val_acc": rec["val_acc"], "test_acc": rec["test_acc"], "epoch": rec["epoch"]}
    if bar is not None:
        bar.update(min(start, cfg.epochs))
    try:
        for epoch in range(start, cfg.epochs):
            watch.reset()
            before = comm.stats.snapshot() if hasattr(comm, "stats") else {}
            t0 = time.perf_counter()
            res = ex.train_epoch(epoch)
            wall = time.perf_counter() - t0
            evaluated = (epoch + 1) % cfg.eval_every == 0 or epoch == cfg.epochs - 1
            accs = ex.evaluate(epoch) if evaluated else None
            after = comm.stats.snapshot() if hasattr(comm, "stats") else {}
            sent = _bytes_delta(before, after)
            bubble = float(getattr(res, "bubble_s", 0.0))
            sums, maxes = reduce(
                [res.loss, res.train_correct, res.train_total] + [sent.get(c, 0) for c in CATEGORIES],
                [wall, res.compute_s, res.comm_s, bubble, peak_rss_mb()],
            )
            loss = sums[0]
            if not np.isfinite(loss):
                # Every rank sees the same reduced loss, so every rank takes this branch.
                raise NonFiniteLossError(_nonfinite_message(cfg, comm, watch, res, loss, epoch, out))
            rec = {
                "epoch": epoch,
                "loss": loss,
                "train_acc": sums[1] / max(sums[2], 1),
                "epoch_time_s": maxes[0],
                "compute_s": maxes[1],
                "comm_s": maxes[2],
                "bubble_s": maxes[3],
                "bytes_sent": {c: int(v) for c, v in zip(CATEGORIES, sums[3:])},
                "peak_rss_mb": maxes[4],
            }
            if accs is not None:
                rec.update(accs)
                if accs["val_acc"] > best["val_acc"]:
                    best = {"val_acc": accs["val_acc"], "test_acc": accs["test_acc"], "epoch": epoch}
            history.append(rec)
            if out is not None:  # rank 0 appends; every rank learns if that failed (full disk)
                append_metrics(comm, mfile, rec)
            if bar is not None:
                post = {"loss": f"{loss:.4f}"}
                if accs is not None:
                    post.update(val=f"{accs['val_acc']:.3f}", test=f"{accs['test_acc']:.3f}")
                bar.set_postfix(post)
                bar.update(1)
            if cfg.checkpoint_every and (epoch + 1) % cfg.checkpoint_every == 0:
                # Only reached after a finite epoch: a diverged run keeps its last good one.
                payload = {
                    "format": ckpt.FORMAT, "epoch": epoch, "rank": comm.rank,
                    "world_size": comm.world_size, "executor": ex.state_dict(),
                    "rng": ckpt.rng_state(), "history": history, "identity": identity,
                    "config": cfg.to_dict(),
                }
                ckpt.save_checkpoint(comm, out, epoch, payload, identity, keep=KEEP_CHECKPOINTS,
                                     config=cfg.to_dict())
    finally:
        if bar is not None:
            bar.close()
        if mfile is not None:
            mfile.close()
    summary = {
        "best_val_acc": best["val_acc"],
        "test_acc_at_best_val": best["test_acc"],
        "best_epoch": best["epoch"],
        "final_loss": history[-1]["loss"] if history else None,
        "epochs": len(history),
        "mean_epoch_time_s": float(np.mean([h["epoch_time_s"] for h in history[1:]] or [0.0])),
        "history": history,
    }
    if out is not None and rank0:
        _atomic_json(out / "summary.json", {k: v for k, v in summary.items() if k != "history"})
    return summary


def _bytes_delta(before: dict, after: dict) -> dict:
    b = before.get("bytes_sent", {}) if before else {}
    a = after.get("bytes_sent", {}) if after else {}
    return {k: a.get(k, 0) - b.get(k, 0) for k in a}


def _atomic_json(path: Path, obj: dict) -> None:
    from gnnpipe.rundir import write_json_atomic

    write_json_atomic(path, obj)  # a full disk is one line, and no .tmp is left


def config_for_resume(argv: Sequence[str], cfg: TrainConfig) -> tuple[TrainConfig, Path]:
    """``--resume``: settings given neither as flags nor in ``--config`` come from the checkpoint.

    So ``gnnpipe-train --resume runs/X`` continues run X as it was, and ``--resume runs/X
    --epochs 500`` extends it. Settings that change the math may still be given; the
    trainer then refuses the checkpoint, naming them.

    Returns:
        ``(config, run directory)``: the run directory is where the checkpoint lives
        (``--out`` defaults to it, so the run continues in place).
    """
    from dataclasses import fields

    from gnnpipe.checkpoint import find_checkpoint, read_commit
    from gnnpipe.config import build_parser, load_toml

    where = find_checkpoint(cfg.resume)
    saved = read_commit(where).get("config") or {}
    known = {f.name for f in fields(TrainConfig)}
    # --overwrite is never inherited: it deletes, so it must be asked for each time.
    values = {k: v for k, v in saved.items() if k in known and k not in ("resume", "out", "overwrite")}
    ns = build_parser().parse_args(list(argv))
    if ns.config:
        values.update(load_toml(ns.config))
    for name in known:
        if getattr(ns, name) is not None:
            values[name] = getattr(ns, name)
    try:
        return TrainConfig(**values), where.parent.parent
    except TypeError as e:
        raise GnnpipeError(f"{where}/COMMIT.json config: {e}") from None


def _check_device(device: str) -> None:
    """Refuse ``--device cuda`` where torch has no CUDA device (before any rank uses it)."""
    if device == "cuda" and not torch.cuda.is_available():
        built = "a CPU-only build" if torch.version.cuda is None else f"CUDA {torch.version.cuda}, no device visible"
        raise GnnpipeError(f"config field 'device' = 'cuda': no CUDA device available (torch {torch.__version__}, "
                           f"{built}); use --device cpu")


def _agreed_errors() -> tuple[type, ...]:
    """Errors every rank raises together (rank 0 alone reports them)."""
    from gnnpipe.checkpoint import CheckpointWriteError
    from gnnpipe.rundir import MetricsWriteError

    return (CheckpointWriteError, MetricsWriteError)


def main(argv: Sequence[str] | None = None) -> int:
    """``gnnpipe-train``: see the module docstring."""
    from gnnpipe.comm import detect_launch, init_communicator, threads_per_rank

    args = list(sys.argv[1:] if argv is None else argv)
    launch = detect_launch()
    rank0 = launch.rank == 0
    debug = "--debug" in args or os.environ.get("GNNPIPE_DEBUG") == "1"
    logging.basicConfig(
        level=logging.DEBUG if debug else logging.INFO,
        format=f"[rank {launch.rank}] %(levelname)s %(name)s: %(message)s",
    )
    if not rank0 and not debug:
        logging.getLogger().setLevel(logging.WARNING)
    comm = None
    run_lock = None
    ok = False
    try:
        if rank0:
            cfg, _ = parse_config(args)
        else:  # usage errors and --help: rank 0 alone speaks
            import contextlib
            import io

            with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
                cfg, _ = parse_config(args)
        resume_run = None
        if cfg.resume:
            try:
                cfg, resume_run = config_for_resume(args, cfg)
            except GnnpipeError as e:  # every rank sees the same files: rank 0 alone speaks
                raise SetupError(str(e)) from e
        _check_device(cfg.device)
        torch.set_num_threads(cfg.threads or threads_per_rank(launch))
        kind = cfg.comm
        if kind == "auto":
            kind = "mpi" if launch.launcher in ("mpich", "openmpi") else "torch"
        comm = init_communicator(kind, device=cfg.device, timeout_s=cfg.timeout)
        from gnnpipe.rundir import open_run_dir

        # Rank 0 names, checks and locks the run directory; every rank gets its name.
        out, run_lock = open_run_dir(comm, cfg, resume_run)
        if rank0:
            log.info("world %d (%s, %s communicator), mode %s, model %s-%d d=%d, dataset %s -> %s",
                     comm.world_size, launch.launcher, kind, cfg.mode, cfg.model, cfg.layers,
                     cfg.hidden, cfg.dataset, out)
        summary = train(cfg, comm, out=out, show_progress=cfg.progress)
        if rank0:
            print(
                f"done: {summary['epochs']} epochs, final loss {summary['final_loss']:.4f}, "
                f"best val acc {summary['best_val_acc']:.4f} at epoch {summary['best_epoch']}, "
                f"test acc there {summary['test_acc_at_best_val']:.4f}, "
                f"mean epoch {summary['mean_epoch_time_s']:.3f} s; metrics in {out}/metrics.jsonl"
            )
        ok = True
        return 0
    except GnnpipeError as e:
        if debug:
            raise
        if rank0:
            print(f"gnnpipe-train: error: {e}", file=sys.stderr)
        elif comm is not None and not isinstance(e, (SetupError, NonFiniteLossError, _agreed_errors())):  # this rank's own failures (timeouts, dead peers)
            print(f"gnnpipe-train [rank {launch.rank}]: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"gnnpipe-train [rank {launch.rank}]: interrupted", file=sys.stderr)
        return 130
    finally:
        if run_lock is not None:
            run_lock.release()
        # Close only after success: tearing down a process group whose peer died (or that
        # Ctrl-C interrupted mid-operation) can abort the process (exit -6) instead of
        # leaving with our error code; after a failure the rank exits without teardown.
        if comm is not None and (ok or comm.world_size == 1):  # no peer to lose in one process
            try:
                comm.close()
            except Exception:
                pass


def entry() -> None:
    """Console-script entry: exits without Python's teardown (see ``comm.exit_process``)."""
    from gnnpipe.comm import exit_process

    # Deep residual stacks drift into denormals, which are ~10x slower on CPUs. Process-wide
    # state, so only the console entry sets it (in-process callers such as tests keep theirs).
    torch.set_flush_denormal(True)
    exit_process(main())


if __name__ == "__main__":
    entry()
