"""Graph format, loaders for the published layouts, dataset catalogue, synthetic graphs."""

from gnnpipe.data.graph import Graph, GraphValidationError, load_graph
from gnnpipe.data.stats import graph_info
from gnnpipe.data.synthetic import rmat, sbm

__all__ = ["Graph", "GraphValidationError", "load_graph", "graph_info", "rmat", "sbm"]
