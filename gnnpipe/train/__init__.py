"""The trainer: epochs, evaluation, metrics, checkpoints, progress (``gnnpipe-train`` runs it).

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

__all__ = ["KEEP_CHECKPOINTS", "NonFiniteLossError", "SetupError", "agree_on_setup", "executor_for_config",
           "load_graph_for", "model_config", "plan_for", "row_normalized", "train"]


def __getattr__(name: str):
    # Lazy: importing one of gnnpipe.train's modules (the command imports guards and rundir
    # before it starts) does not pull in the trainer and the model libraries with it.
    if name in ("load_graph_for", "row_normalized"):
        from gnnpipe.data import load

        return getattr(load, name)
    if name in ("NonFiniteLossError", "SetupError", "agree_on_setup"):
        from gnnpipe.train import guards

        return getattr(guards, name)
    if name in ("KEEP_CHECKPOINTS", "train"):
        from gnnpipe.train import loop

        return getattr(loop, name)
    if name in ("executor_for_config", "model_config", "plan_for"):
        from gnnpipe.train import setup

        return getattr(setup, name)
    raise AttributeError(f"module 'gnnpipe.train' has no attribute {name!r}")
