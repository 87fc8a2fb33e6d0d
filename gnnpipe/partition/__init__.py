"""Partition plans (floor 2): METIS parts and pipeline chunks, halos, layer→stage, plan IO.

Pure numpy (pymetis for METIS); never imports torch.distributed or mpi4py.
"""

from gnnpipe.partition.halo import HaloInfo, LocalPart, chunk_neighbours, load_local_part, part_halo
from gnnpipe.partition.layers import assign_layers, layer_costs
from gnnpipe.partition.plan import (
    METHODS,
    OBJECTIVES,
    PartitionPlan,
    PlanMismatchError,
    build_plan,
    check_plan_matches,
    partition_nodes,
    read_plan_meta,
    relabel_graph,
)
from gnnpipe.partition.stats import VolumeShape, plan_stats
from gnnpipe.partition.volume import graph_parallel_bytes, hybrid_bytes, pipeline_bytes, startup_bytes, way_link_bytes

__all__ = [
    "METHODS",
    "OBJECTIVES",
    "HaloInfo",
    "LocalPart",
    "PartitionPlan",
    "PlanMismatchError",
    "VolumeShape",
    "assign_layers",
    "build_plan",
    "check_plan_matches",
    "chunk_neighbours",
    "graph_parallel_bytes",
    "hybrid_bytes",
    "layer_costs",
    "load_local_part",
    "part_halo",
    "partition_nodes",
    "pipeline_bytes",
    "plan_stats",
    "read_plan_meta",
    "relabel_graph",
    "startup_bytes",
    "way_link_bytes",
]
