"""Where this process sits in the job, as the launcher told it.
"""

from __future__ import annotations

from dataclasses import dataclass

@dataclass(frozen=True)
class LaunchInfo:
    """Where this process sits in the job, as the launcher told it.

    Args:
        rank: global rank of this process, ``0 <= rank < world_size``.
        world_size: number of processes in the job.
        local_rank: rank among the processes on this host (selects the GPU).
        local_world_size: processes on this host (divides the cores).
        launcher: ``"torchrun"``, ``"mpich"``, ``"openmpi"``, ``"slurm"`` or ``"single"``.
    """

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    launcher: str
