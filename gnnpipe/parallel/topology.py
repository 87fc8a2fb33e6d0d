"""Ways × stages: the one dataclass that owns the process topology (pure maps + groups).

``rank = way · S + stage`` (as the paper): the ranks of one way form a pipeline; the ranks
holding the same stage in every way hold the same layers, exchange boundary vertices
between ways, and all-reduce their weight gradients.
"""

from __future__ import annotations

from dataclasses import dataclass

from gnnpipe import GnnpipeError


@dataclass(frozen=True)
class Topology:
    """``ways`` pipelines of ``stages`` stages each.

    Args:
        ways: D, graph-parallel groups (each owns one part of the plan).
        stages: S, pipeline stages per way.
        world_size: the number of ranks; must equal D·S.
    """

    ways: int
    stages: int
    world_size: int

    def __post_init__(self) -> None:
        if self.ways < 1 or self.stages < 1:
            raise GnnpipeError(f"topology: ways={self.ways} and stages={self.stages} must both be >= 1")
        if self.ways * self.stages != self.world_size:
            raise GnnpipeError(
                f"topology: ways ({self.ways}) x stages ({self.stages}) = {self.ways * self.stages} "
                f"but the world size is {self.world_size}; launch {self.ways * self.stages} ranks "
                f"or change --ways/--stages"
            )

    def rank_of(self, way: int, stage: int) -> int:
        if not (0 <= way < self.ways and 0 <= stage < self.stages):
            raise GnnpipeError(f"topology: (way {way}, stage {stage}) outside {self.ways} x {self.stages}")
        return way * self.stages + stage

    def coords(self, rank: int) -> tuple[int, int]:
        """``rank -> (way, stage)``."""
        if not 0 <= rank < self.world_size:
            raise GnnpipeError(f"topology: rank {rank} outside [0, {self.world_size})")
        return divmod(rank, self.stages)

    def pipeline_groups(self) -> list[list[int]]:
        """One group per way, ranks in stage order."""
        return [[self.rank_of(w, s) for s in range(self.stages)] for w in range(self.ways)]

    def stage_groups(self) -> list[list[int]]:
        """One group per stage, ranks in way order."""
        return [[self.rank_of(w, s) for w in range(self.ways)] for s in range(self.stages)]


def build_groups(comm, topo: Topology):
    """Every process group this rank needs: ``(pipeline comm, stage comm or None)``.

    The pipeline communicator numbers ranks by stage, the stage communicator by way. With one
    way the pipeline communicator is ``comm`` itself and there is no stage communicator.
    Collective over ``comm``: every rank calls it with the same topology.
    """
    if topo.world_size != comm.world_size:
        raise GnnpipeError(f"topology: built for {topo.world_size} ranks, communicator has {comm.world_size}")
    if topo.ways == 1:
        return comm, None
    if topo.stages == 1:
        raise GnnpipeError("topology: one stage per way is graph parallelism; use --mode graph")
    pipe = comm.split_groups(topo.pipeline_groups())
    cross = comm.split_groups(topo.stage_groups())
    return pipe, cross
