"""``gnnpipe-train``: parse, launch-aware set-up, run the trainer, print one line.

Launch it any way you like; every rank runs the same command::

    mpirun -np 4 gnnpipe-train                       # the README's main job (pipeline GCNII)
    mpirun -np 4 gnnpipe-train --mode graph --dataset cora --model gcn --layers 2
    torchrun --nproc-per-node 4 -m gnnpipe.train --mode graph ...
    gnnpipe-train --mode graph ...                   # one process

What a run writes and how checkpoints and resume work: :mod:`gnnpipe.train`.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
import time
import traceback
from dataclasses import fields
from pathlib import Path
from typing import Sequence

import torch

from gnnpipe._base import GnnpipeError
from gnnpipe.checkpoint import ABSENT_MEANS, CheckpointWriteError, find_checkpoint, read_commit
from gnnpipe.cli import quiet_known_warnings
from gnnpipe.comm import apply_threads, detect_launch, exit_process
from gnnpipe.config import TrainConfig, build_parser, load_toml, parse_config
from gnnpipe.train.guards import NonFiniteLossError, SetupError
from gnnpipe.train.connect import comm_kind, connect
from gnnpipe.train.rundir import MetricsWriteError

log = logging.getLogger("gnnpipe.train")


def config_for_resume(argv: Sequence[str], cfg: TrainConfig) -> tuple[TrainConfig, Path]:
    """``--resume``: settings given neither as flags nor in ``--config`` come from the checkpoint.

    So ``gnnpipe-train --resume runs/X`` continues run X as it was, and ``--resume runs/X
    --epochs 500`` extends it. Settings that change the math may still be given; the
    trainer then refuses the checkpoint, naming them.

    Returns:
        ``(config, run directory)``: the run directory is where the checkpoint lives
        (``--out`` defaults to it, so the run continues in place).
    """
    where = find_checkpoint(cfg.resume)
    saved = read_commit(where).get("config") or {}
    known = {f.name for f in fields(TrainConfig)}
    # --overwrite is never inherited: it deletes, so it must be asked for each time.
    values = {k: v for k, v in saved.items() if k in known and k not in ("resume", "out", "overwrite")}
    # a field the checkpoint's config predates had the value it means then, not today's default
    # (a run from before --exact-every had no exact epochs)
    values.update({k: v for k, v in ABSENT_MEANS.items() if k not in values and k in known})
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


def main(argv: Sequence[str] | None = None) -> int:
    """``gnnpipe-train``: see the module docstring."""
    quiet_known_warnings()
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
    try:
        if rank0:
            cfg, _ = parse_config(args)
        else:  # usage errors and --help: rank 0 alone speaks
            with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
                cfg, _ = parse_config(args)
        if cfg.export and not Path(cfg.export).parent.is_dir():
            raise SetupError(f"--export {cfg.export}: folder {Path(cfg.export).parent} does not exist")
        resume_run = None
        if cfg.resume:
            try:
                cfg, resume_run = config_for_resume(args, cfg)
            except GnnpipeError as e:  # every rank sees the same files: rank 0 alone speaks
                raise SetupError(str(e)) from e
        apply_threads(cfg.threads, launch)  # --threads, else the user's OMP_NUM_THREADS, else a share of the cores
        # (refuses --device cuda without a GPU, and NCCL with two ranks on one GPU, before any collective)
        comm = connect(cfg, launch)
        # The trainer (and with it PyG, seconds of imports) is loaded only now, so that bad
        # input and a failed rendezvous are reported without waiting for it.
        from gnnpipe.train.run import training_run

        def announce(out: Path | None) -> None:
            if rank0:
                log.info("world %d (%s, %s communicator), mode %s, model %s-%d d=%d, dataset %s -> %s",
                         comm.world_size, launch.launcher, comm_kind(cfg, launch), cfg.mode, cfg.model,
                         cfg.layers, cfg.hidden, cfg.dataset, out)

        # The communicator is closed only after success, and a failing close leaves the exit code 0.
        with training_run(cfg, comm, own_comm=True, resume_run=resume_run, on_start=announce,
                          quiet_close=True) as done:
            if rank0:
                if cfg.export:
                    log.info("exported the trained model to %s", cfg.export)
                print(done_line(done.summary, cfg, done.out))
        return 0
    except GnnpipeError as e:
        if debug:
            raise
        if rank0:
            print(f"gnnpipe-train: error: {e}", file=sys.stderr)
        elif comm is not None and not isinstance(e, (SetupError, NonFiniteLossError, CheckpointWriteError, MetricsWriteError)):  # this rank's own failures (timeouts, dead peers)
            print(f"gnnpipe-train [rank {launch.rank}]: error: {e}", file=sys.stderr)
        else:
            let_rank0_speak()
        return 2
    except KeyboardInterrupt:
        print(f"gnnpipe-train [rank {launch.rank}]: interrupted", file=sys.stderr)
        return 130

def done_line(summary: dict, cfg: TrainConfig, out: Path) -> str:
    """Rank 0's one line at the end of a run."""
    return (
        f"done: {summary['epochs']} epochs, final loss {summary['final_loss']:.4f}, "
        f"best val acc {summary['best_val_acc']:.4f} at epoch {summary['best_epoch']}, "
        f"test acc there {summary['test_acc_at_best_val']:.4f}, "
        f"mean epoch {summary['mean_epoch_time_s']:.3f} s; metrics in {out}/metrics.jsonl"
        + (f" (stopped after epoch {summary['stopped_at_val_acc']}: validation accuracy reached "
           f"--stop-at-val-acc {cfg.stop_at_val_acc})" if summary.get("stopped_at_val_acc") is not None else "")
        + (f"; {summary['diverging_evals']} evaluation(s) fell {cfg.divergence_drop} or more below the best "
           "validation accuracy (diverging)" if summary.get("diverging_evals") else "")
    )


#: Seconds a silent rank waits before leaving on an error rank 0 reports.
RANK0_GRACE_S = 2.0


def let_rank0_speak() -> None:
    """A rank other than 0 that leaves silently on an error every rank meets (a bad flag, a
    missing dataset: rank 0 alone prints it) waits a moment first. A launcher that stops the
    job at its first exit (torchrun) would otherwise kill rank 0 before its one line."""
    if detect_launch().rank != 0:
        time.sleep(RANK0_GRACE_S)


def entry() -> None:
    """Console-script entry: exits without Python's teardown (see ``comm.exit_process``)."""
    # Deep residual stacks drift into denormals, which are ~10x slower on CPUs. Process-wide
    # state, so only the console entry sets it (in-process callers such as tests keep theirs).
    torch.set_flush_denormal(True)
    try:
        rc = main()
    except SystemExit as e:  # argparse's --help and usage errors
        if isinstance(e.code, str):
            print(e.code, file=sys.stderr)
        rc = e.code if isinstance(e.code, int) else int(e.code is not None)
        if rc:
            let_rank0_speak()  # (ranks other than 0 parsed silently)
    except BaseException:  # a bug: report it, then leave without teardown like any failure
        traceback.print_exc()
        rc = 1
    exit_process(rc)
