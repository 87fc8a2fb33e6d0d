"""The communicator a training run uses (``gnnpipe-train`` and :func:`gnnpipe.fit` make it here).

Light on purpose: ``gnnpipe-train`` makes its communicator before it loads the trainer, so
that MPI is initialised before PyG loads and a failed rendezvous is reported without
waiting for seconds of imports.
"""

from __future__ import annotations

from gnnpipe.comm import LaunchInfo, init_communicator
from gnnpipe.config import TrainConfig


def comm_kind(cfg: TrainConfig, launch: LaunchInfo) -> str:
    """The communicator ``--comm`` names; ``auto`` is MPI under ``mpirun`` (MPICH's hydra,
    Open MPI), else torch."""
    if cfg.comm != "auto":
        return cfg.comm
    return "mpi" if launch.launcher in ("mpich", "openmpi") else "torch"


def connect(cfg: TrainConfig, launch: LaunchInfo):
    """This process's world communicator for a run of ``cfg`` (every rank of the launch calls it).

    Raises:
        GnnpipeError: ``--device cuda`` without a GPU, NCCL with two ranks on one GPU (both
            refused before any collective), a failed rendezvous.
    """
    return init_communicator(comm_kind(cfg, launch), device=cfg.device, timeout_s=cfg.timeout,
                             backend=cfg.comm_backend, ranks_per_gpu=cfg.ranks_per_gpu)
