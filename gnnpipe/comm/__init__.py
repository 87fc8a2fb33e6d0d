"""The one door to the network: communicators over torch.distributed and MPI.

This package is the only part of gnnpipe that imports ``torch.distributed`` or ``mpi4py``.
Every executor receives a :class:`Communicator` and never learns which library moves its
bytes. One interface (:mod:`.base`: semantics, timeouts, byte accounting), three backends:

* :class:`TorchCommunicator` (:mod:`.torch_backend`) — Gloo on CPU and NCCL on CUDA;
* :class:`MpiCommunicator` (:mod:`.mpi_backend`, imported only when asked for: importing it
  initialises MPI);
* :class:`SingleProcessCommunicator` (:mod:`.local`) — world size 1, every operation local.

:mod:`.launch` reads the launcher's environment and builds the world communicator.
"""

from gnnpipe.comm.base import (CATEGORIES, MAX_TAG, CommError, CommStats, CommTimeoutError, CommUsageError,
                               Communicator, PeerFailedError, Work)
from gnnpipe.comm.launch import apply_threads, detect_launch, exit_process, init_communicator, threads_per_rank
from gnnpipe.comm.launch_info import LaunchInfo
from gnnpipe.comm.local import SingleProcessCommunicator
from gnnpipe.comm.torch_backend import TorchCommunicator

__all__ = [
    "CATEGORIES", "MAX_TAG", "CommError", "CommStats", "CommTimeoutError", "CommUsageError", "Communicator",
    "LaunchInfo", "PeerFailedError", "SingleProcessCommunicator", "TorchCommunicator", "Work", "detect_launch",
    "apply_threads", "exit_process", "init_communicator", "threads_per_rank",
]
