"""Graph format, loaders for the published layouts, dataset catalogue, synthetic graphs."""

from gnnpipe.data.graph import Graph, GraphValidationError, load_graph

__all__ = ["Graph", "GraphValidationError", "load_graph"]
