"""Process groups of a :class:`gnnpipe.dims.ParallelDims` layout (collective set-up)."""

from __future__ import annotations

from gnnpipe._base import GnnpipeError
from gnnpipe.dims import ParallelDims


def build_groups(comm, dims: ParallelDims):
    """Every process group this rank needs: ``(pipeline comm, stage comm or None)``.

    The pipeline communicator numbers ranks by stage, the stage communicator by way. With one
    way the pipeline communicator is ``comm`` itself and there is no stage communicator.
    Collective over ``comm``: every rank calls it with the same layout.
    """
    if dims.world != comm.world_size:
        raise GnnpipeError(f"{dims.label()} is laid out for {dims.world} ranks, the communicator has {comm.world_size}")
    if dims.ways == 1:
        return comm, None
    if dims.stages == 1:
        raise GnnpipeError("one stage per way is graph parallelism; use --mode graph")
    pipe = comm.split_groups(dims.pipeline_groups())
    cross = comm.split_groups(dims.stage_groups())
    return pipe, cross
