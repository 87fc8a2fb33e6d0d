"""gnnpipe: distributed full-graph training of deep graph neural networks.

Graph parallelism, GNNPipe pipelined model parallelism (arXiv 2308.10087) and the
hybrid of both, on CPU ranks (Gloo or MPI) or GPUs (NCCL).
"""

__version__ = "0.1.0"


class GnnpipeError(Exception):
    """An error caused by the user's input (file, flag, field), not by a bug.

    CLIs print these as one line and exit non-zero; anything else is a bug and keeps its
    traceback.
    """


def _quiet_known_warnings() -> None:
    # torch warns once per process that sparse CSR is "beta" and that invariant checks are
    # off; every rank would print both. The CSR path is exercised by our own tests.
    import warnings

    warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta state")
    warnings.filterwarnings("ignore", message="Sparse invariant checks are implicitly disabled")
    warnings.filterwarnings("ignore", message=r"`torch\.jit\.script` is deprecated")


_quiet_known_warnings()
