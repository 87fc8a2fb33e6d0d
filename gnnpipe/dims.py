"""The parallel layout: one validated ``ParallelDims`` (ways × stages ranks, chunks per way).

Every part of gnnpipe that needs the layout takes it from here: the trainer resolves it
once from the configuration and the world size (:meth:`ParallelDims.from_config`), the
executors read their coordinates and process groups from it, checkpoints record it, and
the planner enumerates candidates of it. The defaults live only in
:meth:`ParallelDims.resolve`:

* stages = world / ways (pipeline and hybrid);
* chunks = 4 · stages (as the paper), and 1 in exact mode;
* parts = world (graph mode: one rank per part).

Ranks are numbered ``rank = way · S + stage`` (as the paper): the ranks of one way form a
pipeline; the ranks holding the same stage in every way hold the same layers, exchange
boundary rows between ways, and all-reduce their weight gradients. Graph parallelism is
the case of ``P`` ways of one stage each, pipeline parallelism one way of ``S`` stages.

Pure: no communication, no I/O (process groups are built from these rank lists by
:func:`gnnpipe.parallel.groups.build_groups`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gnnpipe._base import GnnpipeError

MODES = ("graph", "pipeline", "hybrid")


@dataclass(frozen=True)
class ParallelDims:
    """How the world's ranks are used.

    Args:
        mode: one of :data:`MODES`.
        ways: D, the graph parts (graph mode: the number of parts P; pipeline: 1).
        stages: S, pipeline stages per way (graph mode: 1).
        chunks: C, pipeline chunks per way (graph mode: 1).

    Raises:
        GnnpipeError: a factor below 1 or a combination the mode does not allow; the message
            shows every factor.
    """

    mode: str
    ways: int = 1
    stages: int = 1
    chunks: int = 1

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise GnnpipeError(f"mode: expected one of {', '.join(MODES)}, got {self.mode!r}")
        for k in ("ways", "stages", "chunks"):
            v = getattr(self, k)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise GnnpipeError(f"{k}: expected an integer >= 1, got {v!r}")
        if self.mode == "graph" and (self.stages != 1 or self.chunks != 1):
            raise GnnpipeError(f"graph mode: stages and chunks must be 1, got stages={self.stages} chunks={self.chunks}")
        if self.mode == "pipeline" and self.ways != 1:
            raise GnnpipeError(f"pipeline mode: ways must be 1, got {self.ways} (use hybrid)")
        if self.mode == "hybrid" and (self.ways < 2 or self.stages < 2):
            raise GnnpipeError(
                f"hybrid mode needs ways >= 2 and stages >= 2, got ways={self.ways} stages={self.stages} "
                f"(world {self.world} = {self.ways} x {self.stages}); use graph or pipeline mode"
            )

    # ------------------------------------------------------------------ resolution
    @classmethod
    def resolve(cls, mode: str, world: int, *, ways: int = 1, stages: int = 0, chunks: int = 0,
                parts: int = 0, exact: bool = False) -> "ParallelDims":
        """The layout a run of ``world`` ranks uses, with every default filled in.

        Args:
            mode: one of :data:`MODES`.
            world: the number of ranks launched.
            ways: hybrid ways (must be 1 in pipeline mode; ignored in graph mode).
            stages: stages per way; 0 means world / ways (ignored in graph mode).
            chunks: chunks per way; 0 means 4 · stages; exact mode always runs 1.
            parts: graph-mode parts; 0 means world, and anything else must equal it.
            exact: no staleness (one chunk per way).

        Raises:
            GnnpipeError: the factors do not multiply to ``world``, or the mode cannot use
                them; the message names the flags to change.
        """
        if mode not in MODES:
            raise GnnpipeError(f"mode: expected one of {', '.join(MODES)}, got {mode!r}")
        if world < 1:
            raise GnnpipeError(f"world size: expected >= 1 ranks, got {world}")
        if mode == "graph":
            parts = parts or world
            if parts != world:
                raise GnnpipeError(f"--mode graph needs one rank per part: world size is {world}, parts is {parts}")
            return cls("graph", ways=parts)
        if mode == "hybrid" and ways < 2:
            raise GnnpipeError("--mode hybrid needs --ways >= 2 (one way is --mode pipeline)")
        if mode == "pipeline" and ways != 1:
            raise GnnpipeError(f"--ways {ways} applies to --mode hybrid only")
        S = stages or max(world // ways, 1)
        if mode == "pipeline" and S != world:
            raise GnnpipeError(f"--mode pipeline runs one stage per rank: world size is {world}, --stages is {S}")
        if ways * S != world:
            raise GnnpipeError(
                f"ways ({ways}) x stages ({S}) = {ways * S} but the world size is {world}; "
                f"launch {ways * S} ranks or change --ways/--stages"
            )
        if mode == "hybrid" and S < 2:
            raise GnnpipeError(f"--mode hybrid with {ways} ways of one stage each is graph parallelism; "
                               "use --mode graph")
        C = 1 if exact else (chunks or 4 * S)
        return cls(mode, ways=ways, stages=S, chunks=C)

    @classmethod
    def from_config(cls, cfg: Any, world: int) -> "ParallelDims":
        """:meth:`resolve` from a :class:`gnnpipe.config.TrainConfig` (or anything with its
        ``mode, ways, stages, chunks, parts, exact`` fields)."""
        return cls.resolve(cfg.mode, world, ways=cfg.ways, stages=cfg.stages, chunks=cfg.chunks,
                           parts=cfg.parts, exact=cfg.exact)

    # ------------------------------------------------------------------ sizes
    @property
    def world(self) -> int:
        """Ranks: ways × stages."""
        return self.ways * self.stages

    @property
    def parts(self) -> int:
        """Graph parts of the plan: the ways (1 in pipeline mode)."""
        return self.ways

    @property
    def plan_chunks(self) -> int:
        """Chunks per part a partition plan must have; 0 when any will do (graph mode)."""
        return 0 if self.mode == "graph" else self.chunks

    @property
    def pipelined(self) -> bool:
        """Whether ranks run pipeline stages (pipeline and hybrid modes)."""
        return self.mode != "graph"

    def label(self) -> str:
        """Short human label, e.g. ``hybrid D=2 S=4 C=16``."""
        if self.mode == "graph":
            return f"graph P={self.ways}"
        if self.mode == "pipeline":
            return f"pipeline S={self.stages} C={self.chunks}"
        return f"hybrid D={self.ways} S={self.stages} C={self.chunks}"

    def short(self) -> str:
        """Compact name for tables and folders: ``G4``, ``P4c16``, ``H2x2c8``."""
        if self.mode == "graph":
            return f"G{self.ways}"
        if self.mode == "pipeline":
            return f"P{self.stages}c{self.chunks}"
        return f"H{self.ways}x{self.stages}c{self.chunks}"

    # ------------------------------------------------------------------ coordinates
    def coords(self, rank: int) -> tuple[int, int]:
        """``rank -> (way, stage)``."""
        if not 0 <= rank < self.world:
            raise GnnpipeError(f"rank {rank} outside [0, {self.world}) ({self.label()})")
        return divmod(rank, self.stages)

    def rank_of(self, way: int, stage: int) -> int:
        """``(way, stage) -> rank``."""
        if not (0 <= way < self.ways and 0 <= stage < self.stages):
            raise GnnpipeError(f"(way {way}, stage {stage}) outside {self.ways} x {self.stages}")
        return way * self.stages + stage

    def pipeline_groups(self) -> list[list[int]]:
        """One group per way, ranks in stage order."""
        return [[self.rank_of(w, s) for s in range(self.stages)] for w in range(self.ways)]

    def stage_groups(self) -> list[list[int]]:
        """One group per stage, ranks in way order."""
        return [[self.rank_of(w, s) for w in range(self.ways)] for s in range(self.stages)]
