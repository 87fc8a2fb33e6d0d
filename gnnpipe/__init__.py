"""gnnpipe: distributed full-graph training of deep graph neural networks.

Graph parallelism, GNNPipe pipelined model parallelism (arXiv 2308.10087) and the
hybrid of both, on CPU ranks (Gloo or MPI) or GPUs (NCCL).

The public API (see :mod:`gnnpipe.api`)::

    gnnpipe.Graph        the graph format (Graph.from_pyg / from_dgl / load)
    gnnpipe.fit          train in this process's role; returns a Result
    gnnpipe.launch       start N local ranks from a notebook or script
    gnnpipe.Result       .model, .metrics, .summary, .predict()
"""

from gnnpipe._base import GnnpipeError, __version__

__all__ = ["Graph", "GnnpipeError", "Result", "TrainedModel", "__version__", "fit", "launch"]

# Where each public name lives. They are loaded on first use, so `import gnnpipe` stays light
# (no torch, numpy or scipy until one is wanted) and changes no global state; no module of the
# package imports this one (they import gnnpipe._base), so this is no import cycle.
_LAZY = {"Graph": "gnnpipe.data.graph", "fit": "gnnpipe.api", "launch": "gnnpipe.api",
         "Result": "gnnpipe.api", "TrainedModel": "gnnpipe.api"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'gnnpipe' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
