"""gnnpipe: distributed full-graph training of deep graph neural networks.

Graph parallelism, GNNPipe pipelined model parallelism (arXiv 2308.10087) and the
hybrid of both, on CPU ranks (Gloo or MPI) or GPUs (NCCL).

The public API (see :mod:`gnnpipe.api`)::

    gnnpipe.Graph        the graph format (Graph.from_pyg / from_dgl / load)
    gnnpipe.fit          train in this process's role; returns a Result
    gnnpipe.launch       start N local ranks from a notebook or script
    gnnpipe.Result       .model, .metrics, .summary, .predict()
    gnnpipe.Layer        one of your own layers with options (fit(layers=[...]): reads, writes, act, dropout)
"""

from gnnpipe._base import GnnpipeError, __version__

__all__ = ["Graph", "GnnpipeError", "Layer", "Result", "TrainedModel", "__version__", "fit", "launch"]

# The public names load on first use, so `import gnnpipe` stays light (no torch, numpy or
# scipy until one is wanted) and changes no global state. No module of the package imports
# this one (they import gnnpipe._base), so these imports are no cycle.
_API = ("fit", "launch", "Layer", "Result", "TrainedModel")


def __getattr__(name: str):
    if name == "Graph":
        from gnnpipe.data.graph import Graph

        return Graph
    if name in _API:
        from gnnpipe import api

        return getattr(api, name)
    raise AttributeError(f"module 'gnnpipe' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | {"Graph", *_API})
