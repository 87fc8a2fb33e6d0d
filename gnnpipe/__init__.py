"""gnnpipe: distributed full-graph training of deep graph neural networks.

Graph parallelism, GNNPipe pipelined model parallelism (arXiv 2308.10087) and the
hybrid of both, on CPU ranks (Gloo or MPI) or GPUs (NCCL).
"""

from gnnpipe._base import GnnpipeError, __version__

__all__ = ["Graph", "GnnpipeError", "__version__"]


def __getattr__(name: str):
    # Lazy so that `import gnnpipe` stays light (no numpy/scipy until a Graph is wanted).
    # gnnpipe.data.graph imports gnnpipe._base, not this module, so this is no cycle.
    if name == "Graph":
        from gnnpipe.data.graph import Graph

        return Graph
    raise AttributeError(f"module 'gnnpipe' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | {"Graph"})
