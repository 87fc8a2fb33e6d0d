"""Launchers and construction: which rank this process is, and its world communicator.

Ranks come from whichever launcher started the process (:func:`detect_launch`): torchrun,
MPICH/hydra or Open MPI ``mpirun``, or Slurm ``srun``. :func:`init_communicator` builds the
world communicator of the kind asked for; :func:`exit_process` ends a rank without
Python's teardown.
"""

from __future__ import annotations

import ctypes
import logging
import os
import re
import sys
from typing import Mapping

import torch

from gnnpipe._base import GnnpipeError
from gnnpipe.comm.base import CommError, CommUsageError, Communicator
from gnnpipe.comm.launch_info import LaunchInfo
from gnnpipe.comm.local import SingleProcessCommunicator
from gnnpipe.comm.torch_backend import init_torch, kill_stopped_peers
from gnnpipe.device import choose

log = logging.getLogger(__name__)

def _env_int(env: Mapping[str, str], name: str, launcher: str) -> int:
    value = env[name]
    try:
        return int(value)
    except ValueError:
        raise GnnpipeError(
            f"environment variable {name}={value!r} (set by {launcher}) is not an integer"
        ) from None


def _slurm_tasks_on_node(env: Mapping[str, str]) -> int | None:
    """Tasks on this node from ``SLURM_TASKS_PER_NODE`` (e.g. ``"2(x3),1"``) and NODEID."""
    spec = env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE")
    if not spec or "SLURM_NODEID" not in env:
        return None
    counts: list[int] = []
    for item in spec.split(","):
        m = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", item.strip())
        if m is None:
            return None
        counts.extend([int(m.group(1))] * int(m.group(2) or 1))
    node = _env_int(env, "SLURM_NODEID", "slurm")
    return counts[node] if 0 <= node < len(counts) else None


def detect_launch(env: Mapping[str, str] | None = None) -> LaunchInfo:
    """Reads rank and world size from the launcher's environment variables.

    Checked in order (the first launcher whose variables are present wins, so torchrun or
    mpirun inside a Slurm allocation is recognised as itself):

    * torchrun: ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``;
    * Open MPI: ``OMPI_COMM_WORLD_RANK``, ``OMPI_COMM_WORLD_SIZE``,
      ``OMPI_COMM_WORLD_LOCAL_RANK``, ``OMPI_COMM_WORLD_LOCAL_SIZE``;
    * MPICH/hydra: ``PMI_RANK``, ``PMI_SIZE``, ``MPI_LOCALRANKID``, ``MPI_LOCALNRANKS``;
    * Slurm srun: ``SLURM_PROCID``, ``SLURM_STEP_NUM_TASKS`` (or ``SLURM_NTASKS``),
      ``SLURM_LOCALID``, and the tasks on this node from ``SLURM_NTASKS_PER_NODE`` or
      ``SLURM_TASKS_PER_NODE`` + ``SLURM_NODEID``;
    * otherwise a single process.

    Where a launcher gives no local information, all ranks are assumed to share this host
    (the safe assumption for dividing cores).

    Args:
        env: the environment to read; ``os.environ`` by default.

    Returns:
        The :class:`LaunchInfo`.

    Raises:
        GnnpipeError: a variable is not an integer, or a rank lies outside its world.
    """
    env = os.environ if env is None else env
    if "RANK" in env and "WORLD_SIZE" in env:
        launcher, keys = "torchrun", ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")
    elif "OMPI_COMM_WORLD_RANK" in env and "OMPI_COMM_WORLD_SIZE" in env:
        launcher, keys = "openmpi", (
            "OMPI_COMM_WORLD_RANK",
            "OMPI_COMM_WORLD_SIZE",
            "OMPI_COMM_WORLD_LOCAL_RANK",
            "OMPI_COMM_WORLD_LOCAL_SIZE",
        )
    elif "PMI_RANK" in env and "PMI_SIZE" in env:
        launcher, keys = "mpich", ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS")
    elif "SLURM_PROCID" in env and ("SLURM_STEP_NUM_TASKS" in env or "SLURM_NTASKS" in env):
        size_key = "SLURM_STEP_NUM_TASKS" if "SLURM_STEP_NUM_TASKS" in env else "SLURM_NTASKS"
        launcher, keys = "slurm", ("SLURM_PROCID", size_key, "SLURM_LOCALID", "")
    else:
        return LaunchInfo(0, 1, 0, 1, "single")

    rank = _env_int(env, keys[0], launcher)
    world = _env_int(env, keys[1], launcher)
    local_rank = _env_int(env, keys[2], launcher) if keys[2] in env else None
    if launcher == "slurm":
        per_node = env.get("SLURM_NTASKS_PER_NODE", "")
        local_world = int(per_node) if per_node.isdigit() else _slurm_tasks_on_node(env)
    else:
        local_world = _env_int(env, keys[3], launcher) if keys[3] in env else None
    if local_rank is None or local_world is None:
        local_rank, local_world = rank, world
    if world < 1 or not 0 <= rank < world:
        raise GnnpipeError(
            f"{launcher} environment: {keys[0]}={rank} must lie in [0, {keys[1]}={world})"
        )
    if local_world < 1 or not 0 <= local_rank < local_world:
        raise GnnpipeError(
            f"{launcher} environment: local rank {local_rank} must lie in "
            f"[0, local world size {local_world})"
        )
    return LaunchInfo(rank, world, local_rank, local_world, launcher)


def threads_per_rank(launch: LaunchInfo | None = None) -> int:
    """Intra-op threads this process should use: its cores divided by the ranks on its host.

    Oversubscription is expensive here (two OpenMP threads competing with another process
    for a core made a sparse aggregation 10x slower), so every rank takes an equal share.

    Args:
        launch: the job layout; :func:`detect_launch` by default.

    Returns:
        ``max(1, len(os.sched_getaffinity(0)) // launch.local_world_size)``.
    """
    launch = detect_launch() if launch is None else launch
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, cores // launch.local_world_size)


def apply_threads(threads: int, launch: LaunchInfo) -> int:
    """Set this rank's intra-op threads; returns the count in force.

    ``--threads N`` wins; otherwise a count the user chose (``OMP_NUM_THREADS``, or a
    ``torch.set_num_threads`` that differs from torch's default) is kept; otherwise the rank
    takes its share of the host's cores (:func:`threads_per_rank`): several
    ranks each using every core run many times slower than one thread each.
    """
    if threads:
        torch.set_num_threads(threads)
    elif not os.environ.get("OMP_NUM_THREADS") and torch.get_num_threads() == _TORCH_DEFAULT_THREADS:
        torch.set_num_threads(threads_per_rank(launch))
    return torch.get_num_threads()


# torch's own choice before anyone set it (read at import: a later set_num_threads is the user's)
_TORCH_DEFAULT_THREADS = torch.get_num_threads()


def init_communicator(kind: str = "torch", device: str | torch.device = "cpu",
                      timeout_s: float = 60.0, init_method: str | None = None,
                      env: Mapping[str, str] | None = None, *, backend: str = "auto",
                      ranks_per_gpu: int = 0) -> Communicator:
    """Builds the world communicator for this process.

    Rendezvous for ``kind="torch"`` (first that applies): ``init_method`` if given
    (``"file:///shared/path"`` or ``"tcp://host:port"``); ``MASTER_ADDR``/``MASTER_PORT``
    from the environment (torchrun sets them; set them yourself under mpirun or srun);
    the file named by ``GNNPIPE_RENDEZVOUS`` (on a filesystem every rank sees, and not left
    over from an earlier run); an in-memory store when the world has one rank.

    Args:
        kind: ``"torch"``, ``"mpi"`` or ``"single"`` (one process, all ops local).
        device: ``"cpu"`` or ``"cuda"``: where the rank computes. With CUDA the rank's GPU and
            the backend come from :func:`gnnpipe.device.choose` (NCCL when each rank of the
            host owns a GPU, else Gloo with messages staged through host memory); the
            communicator's ``compute_device`` names the GPU.
        backend: ``"auto"``, ``"nccl"`` or ``"gloo"`` (torch communicator).
        ranks_per_gpu: ranks of a host sharing one GPU (0: from the local rank count and
            the number of GPUs).
        timeout_s: seconds any operation may block before :class:`CommTimeoutError`.
        init_method: torch rendezvous URL, overriding the environment.
        env: environment to read; ``os.environ`` by default.

    Returns:
        The world :class:`Communicator`.

    Raises:
        CommError: unknown kind, no rendezvous, or the launcher and MPI disagree.
    """
    env = os.environ if env is None else env
    if timeout_s <= 0:
        raise CommUsageError(f"timeout_s must be positive, got {timeout_s}")
    device = torch.device(device)
    if device.type not in ("cpu", "cuda"):
        raise CommUsageError(f"device must be cpu or cuda, got {device}")
    if kind not in ("torch", "mpi", "single"):
        raise CommUsageError(f"communicator kind must be 'torch', 'mpi' or 'single', "
                             f"got {kind!r}")
    launch = detect_launch(env)
    if kind == "single" and launch.world_size != 1:
        raise CommError(f"the single-process communicator was asked for, but "
                        f"{launch.launcher} started {launch.world_size} ranks; use "
                        "--comm torch or --comm mpi")
    # before any collective: a refused placement (two ranks on one GPU with NCCL) fails here
    choice = choose(device.type, kind, launch.local_rank, launch.local_world_size, backend=backend,
                    ranks_per_gpu=ranks_per_gpu)
    if choice.compute.type == "cuda":
        torch.cuda.set_device(choice.compute)
    if kind == "single":
        comm: Communicator = SingleProcessCommunicator(timeout_s, choice.comm)
    elif kind == "mpi":
        # Imported only when asked for: importing mpi4py.MPI initialises MPI, and MPI is an
        # optional piece on machines that run only torch ranks.
        from gnnpipe.comm.mpi_backend import init_mpi

        comm = init_mpi(launch, choice.comm, timeout_s)
    else:
        comm = init_torch(launch, choice.comm, timeout_s, init_method, env)
    comm.compute_device = choice.compute
    return comm


def exit_process(rc: int) -> None:
    """End this rank now: flush output, finalize MPI on success, skip interpreter teardown;
    after a failure, kill the stopped or hung peers the torch communicator found
    (:func:`~gnnpipe.comm.torch_backend.kill_stopped_peers`).

    Python's teardown destroys torch.distributed's C++ objects (Gloo pairs, the store's
    threads) in an unspecified order; measured here, about one clean 2-rank run in five then
    aborted *after* finishing ("terminate called without an active exception", exit 134).
    Every result is written and every communicator closed before this is called, so the
    rest of teardown only risks turning a success into a crash. MPI is finalized first on
    success (hydra reports ranks that exit without it); after a failure it is skipped, as
    finalizing can block on a dead peer and the launcher ends the job anyway.
    """
    try:
        sys.stdout.flush()
        sys.stderr.flush()
        logging.shutdown()
    except Exception:
        pass
    if rc != 0:
        # A failed rank ends the stopped or hung peers its failure census found (they would
        # hold the launcher). Only now, with the error that names them printed: hydra takes
        # this rank down the moment a killed peer is reported.
        kill_stopped_peers()
    if rc == 0 and "mpi4py.MPI" in sys.modules:
        from mpi4py import MPI

        if MPI.Is_initialized() and not MPI.Is_finalized():
            MPI.Finalize()
        if MPI.Is_finalized():
            # After MPI_Finalize, leave through the C library's exit(): it runs the C-level
            # atexit handlers MPI registered (but not Python's teardown). Measured with
            # MPICH's hydra, 4 ranks doing only Barrier, Finalize, os._exit(0): 6 of 10 jobs
            # were reported as "Killed (signal 9)"; with exit(0), 0 of 30
            # (scripts/mpi_exit_repro.sh).
            ctypes.CDLL(None).exit(rc)
    os._exit(rc)
