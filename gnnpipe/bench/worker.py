"""Rank entry point of the benchmarks: run a list of ``gnnpipe-train`` configurations.

Run under ``mpirun -np N python -m gnnpipe.bench.worker JOBS.json``. ``JOBS.json`` is a
list of ``{"name": str, "argv": [gnnpipe-train flags], "out": run directory}``; every
rank parses each job's flags with :func:`gnnpipe.config.parse_config` and calls
:func:`gnnpipe.train.train` exactly as ``gnnpipe-train`` does, so a job's
``metrics.jsonl`` and ``summary.json`` are what ``mpirun -np N gnnpipe-train ARGV --out
OUT`` would write. One process serves many jobs because starting 4 ranks (imports of
torch and PyG on 2 shared cores) costs ~20 s, more than most benchmark runs; the memory and
scale benchmarks pass one job per worker so that ``peak_rss_mb`` (the process' lifetime
maximum) belongs to that job alone.

A job whose setup fails on any rank (every rank agrees, see
:func:`gnnpipe.train.agree_on_setup`) leaves ``<out>/error.txt`` and the worker moves on;
any other failure ends the worker with a non-zero status.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    import torch

    from gnnpipe._base import GnnpipeError
    from gnnpipe.comm import detect_launch, init_communicator, threads_per_rank
    from gnnpipe.config import parse_config
    from gnnpipe.train import train

    args = sys.argv[1:] if argv is None else argv
    jobs = json.loads(Path(args[0]).read_text())
    launch = detect_launch()
    logging.basicConfig(level=logging.WARNING, format=f"[rank {launch.rank}] %(levelname)s %(name)s: %(message)s")
    kind = "mpi" if launch.launcher in ("mpich", "openmpi") else ("torch" if launch.world_size > 1 else "single")
    comm = init_communicator(kind, timeout_s=600.0)
    torch.set_flush_denormal(True)
    try:
        for job in jobs:
            out = Path(job["out"])
            try:
                cfg, _ = parse_config(list(job["argv"]) + ["--no-progress"])
                torch.set_num_threads(cfg.threads or threads_per_rank(launch))
                train(cfg, comm, out=out, show_progress=False)
            except GnnpipeError as e:
                if comm.rank == 0:
                    out.mkdir(parents=True, exist_ok=True)
                    (out / "error.txt").write_text(f"{e}\n")
    finally:
        comm.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
