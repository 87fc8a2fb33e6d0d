"""Per-epoch figures: reduced over ranks into one ``metrics.jsonl`` line.

Every rank hands its sums (loss share, accuracy counts, bytes by category) and its maxima
(wall, compute, communication and bubble time, peak RSS); rank 0 writes the reduced line.
"""

from __future__ import annotations

import resource

import torch

from gnnpipe.comm import CATEGORIES


def peak_rss_mb() -> float:
    """This process's peak resident memory so far, MiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


class Reducer:
    """Sums and maxima of per-rank epoch figures, through the communicator."""

    def __init__(self, comm) -> None:
        self.comm = comm

    def __call__(self, sums: list[float], maxes: list[float]) -> tuple[list[float], list[float]]:
        s = torch.tensor(sums, dtype=torch.float64)
        m = torch.tensor(maxes, dtype=torch.float64)
        if self.comm.world_size > 1:
            self.comm.all_reduce(s, op="sum", category="metrics")
            self.comm.all_reduce(m, op="max", category="metrics")
        return s.tolist(), m.tolist()


def gpu_peaks(reduce: Reducer, comm, peak_bytes: int | None) -> list[float]:
    """Every rank's peak GPU memory of the epoch, MiB, in rank order (collective)."""
    mine = [0.0] * comm.world_size
    mine[comm.rank] = (peak_bytes or 0) / 2**20
    return [round(v, 1) for v in reduce(mine, [0.0])[0]]


def bytes_delta(before: dict, after: dict) -> dict:
    """Bytes sent per category between two ``comm.stats.snapshot()``s."""
    b = before.get("bytes_sent", {}) if before else {}
    a = after.get("bytes_sent", {}) if after else {}
    return {k: a.get(k, 0) - b.get(k, 0) for k in a}


def epoch_record(epoch: int, sums: list[float], maxes: list[float]) -> dict:
    """One ``metrics.jsonl`` line from the reduced :func:`epoch_figures`."""
    return {
        "epoch": epoch,
        "loss": sums[0],
        "train_acc": sums[1] / max(sums[2], 1),
        "epoch_time_s": maxes[0],
        "compute_s": maxes[1],
        "comm_s": maxes[2],
        "bubble_s": maxes[3],
        "bytes_sent": {c: int(v) for c, v in zip(CATEGORIES, sums[3:])},
        "peak_rss_mb": maxes[4],
    }


def epoch_figures(res, sent: dict, wall: float) -> tuple[list[float], list[float]]:
    """This rank's (sums, maxima) of an epoch, in the order :func:`epoch_record` reads."""
    return ([res.loss, res.train_correct, res.train_total] + [sent.get(c, 0) for c in CATEGORIES],
            [wall, res.compute_s, res.comm_s, res.bubble_s, peak_rss_mb()])
