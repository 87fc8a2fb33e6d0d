"""Measure a network link for the cost model: ``gnnpipe-plan calibrate --network``.

On an emulated cluster (:mod:`gnnpipe.cluster`: one rank per host, each host's link shaped
to ``rate`` in both directions) two ranks ping-pong messages of a few sizes over Gloo
(torch.distributed's environment, launched inside the namespaces), and every rank then
runs all-to-alls in which it sends the same total bytes spread over its peers. Per size the
median one-way time. The bandwidth is a least-squares line ``t = a + bytes / bandwidth``
(:func:`fit_link`) over the sizes from 1/16 of the largest up (:func:`bulk`: smaller ones
ride on the shaper's burst); the per-message latency is the one-way time of an 8-byte
message, which carries no payload to speak of. The all-to-all's slope over the
point-to-point slope is ``a2a_factor`` (the cost model's
:attr:`gnnpipe.cost.profile.HardwareProfile.a2a_factor`: how much longer an all-to-all's
network bytes take than the same bytes point-to-point).

:func:`measure_network` runs it all and returns the figures; :func:`apply` writes them into
a profile; the CLI (:mod:`gnnpipe.cli.plan`) only parses, writes and prints. Needs root
(network namespaces); :func:`unavailable` says why not. Everything the cluster makes is
removed on exit (see :class:`gnnpipe.cluster.Cluster`).

A rank of the measurement is the test harness's rank entry (``python -m gnnpipe.spawn
gnnpipe.cost.netcal:_rank_fn RUN_DIR --comm torch``, as ``calibrate``'s ranks): it builds the
communicator, so nothing in :mod:`gnnpipe.cost` imports the network.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np
import torch

from gnnpipe import cluster as CL
from gnnpipe._base import GnnpipeError
from gnnpipe.cost.profile import HardwareProfile

#: Transfer time of the largest message at the link rate (the sizes scale with the rate).
LARGEST_S = 0.12
#: Largest message without shaping, and the bounds on the largest message.
MAX_BYTES, MIN_LARGEST = 16 * 2**20, 64 * 2**10


def sizes_for(rate_bps: int | None, quick: bool = False) -> list[int]:
    """Message sizes (bytes) for a link of ``rate_bps``: 8 bytes, then the largest (about
    :data:`LARGEST_S` of transfer at the rate) over 64, 8, 4, 2 and 1; ``quick``: over 8, 2 and 1.

    Returns:
        sizes, ascending, multiples of 4 (float32 buffers).
    """
    top = MAX_BYTES if rate_bps is None else int(rate_bps / 8 * LARGEST_S)
    top = max(MIN_LARGEST, min(MAX_BYTES, top)) // 4 * 4
    divs = (8, 2, 1) if quick else (64, 8, 4, 2, 1)
    return sorted({8, *(max(top // d // 4 * 4, 8) for d in divs)})


def fit_link(times: Mapping[int, float]) -> tuple[float, float]:
    """Ordinary least squares ``t = intercept + bytes / bandwidth`` over ``{bytes: seconds}``.

    Returns:
        ``(bandwidth bytes/s, intercept s)``.

    Raises:
        GnnpipeError: fewer than two sizes, or times that do not grow with the size.
    """
    if len(times) < 2:
        raise GnnpipeError(f"need at least two message sizes to fit a link, got {len(times)}")
    n = np.array(sorted(times), dtype=float)
    t = np.array([times[int(k)] for k in n], dtype=float)
    slope_, icpt = np.polyfit(n, t, 1)
    if not slope_ > 0:
        raise GnnpipeError(f"message times do not grow with the size ({dict(zip(n.astype(int).tolist(), t.tolist()))}): "
                           "the link cannot be fitted (is the machine busy?)")
    return float(1.0 / slope_), float(icpt)


def bulk(times: Mapping[int, float]) -> dict[int, float]:
    """The sizes the bandwidth is fitted over: at least 1/16 of the largest. Smaller ones
    ride on the shaper's burst allowance (HTB lets a few tens of kB through at line speed:
    measured, 23 kB crossed a 100 Mbit/s link at 175 Mbit/s) and would inflate the rate."""
    top = max(times)
    return {k: v for k, v in times.items() if k >= top // 16}


def slope(times: Mapping[int, float]) -> float:
    """Seconds per byte of :func:`fit_link`."""
    return 1.0 / fit_link(times)[0]


# --------------------------------------------------------------------------- one rank
def _rank_fn(comm, sizes: Sequence[int], a2a_sizes: Sequence[int], reps: int) -> dict:
    """One rank (under :mod:`gnnpipe.spawn`'s entry): warm-up, ping-pong between ranks 0
    and 1, then all-to-alls. Returns ``{"p2p": {bytes: s}, "a2a": {bytes: s}}`` (one-way
    medians; every rank returns its own, rank 0's are used)."""
    torch.set_num_threads(1)
    me, world = comm.rank, comm.world_size
    p2p: dict[int, float] = {}
    for n in [max(sizes)] + sizes:  # the first pass over the largest warms TCP up, not counted
        buf = torch.zeros(n // 4, dtype=torch.float32)
        ts = []
        for _ in range(reps if n > 64 else 4 * reps):
            comm.barrier()
            t0 = time.perf_counter()
            if me == 0:
                comm.send(buf, 1, tag=1)
                comm.recv(buf, 1, tag=2)
            elif me == 1:
                comm.recv(buf, 0, tag=1)
                comm.send(buf, 0, tag=2)
            ts.append((time.perf_counter() - t0) / 2.0)
        p2p[n] = statistics.median(ts)
    a2a: dict[int, float] = {}
    peers = max(world - 1, 1)
    for n in a2a_sizes:  # each rank sends n bytes in all, n / peers to each
        per = max(n // peers // 4, 1)
        send = [torch.zeros(per if j != me else 0) for j in range(world)]
        recv = [torch.zeros(per if j != me else 0) for j in range(world)]
        ts = []
        for _ in range(reps + 1):
            comm.barrier()
            t0 = time.perf_counter()
            comm.all_to_all(send, recv)
            ts.append(time.perf_counter() - t0)
        a2a[per * 4 * peers] = statistics.median(ts[1:])
    comm.barrier()
    return {"p2p": p2p, "a2a": a2a, "world": world}


# --------------------------------------------------------------------------- driver
def unavailable() -> str | None:
    """Why the network cannot be measured here (``None`` when it can)."""
    if hasattr(os, "geteuid") and os.geteuid() != 0:
        return "it needs root to make network namespaces (run it as root, e.g. in the container or with sudo)"
    why = CL.unavailable()
    return None if why is None else f"the emulated cluster cannot be made here: {why}"


@dataclasses.dataclass
class NetworkFit:
    """What :func:`measure_network` found.

    Attributes:
        rate_bps: the shaping (None: unshaped).
        hosts: emulated hosts (one rank each).
        bw_bytes_s, latency_s: the point-to-point bandwidth (fit) and per-message latency.
        a2a_factor: all-to-all slope over point-to-point slope.
        a2a_latency_s: the all-to-all fit's intercept.
        p2p, a2a: ``{bytes: one-way median seconds}``.
        wall_s: the whole measurement, cluster set-up and tear-down included.
        load1: the 1-minute load average before and after, and the cores.
    """

    rate_bps: int | None
    hosts: int
    bw_bytes_s: float
    latency_s: float
    a2a_factor: float
    a2a_latency_s: float
    p2p: dict[int, float]
    a2a: dict[int, float]
    wall_s: float
    load1: tuple[float, float]
    cores: int

    def lines(self) -> list[str]:
        """Comment lines for the profile: how each figure was found."""
        rate = CL.rate_text(self.rate_bps)
        eff = f" ({self.bw_bytes_s * 8 / self.rate_bps:.0%} of the rate)" if self.rate_bps else ""
        return [
            f"Network (gnnpipe-plan calibrate --network --rate {rate} --hosts {self.hosts}): emulated hosts "
            f"(gnnpipe.cluster), one rank each, Gloo; load {self.load1[0]:.1f} -> {self.load1[1]:.1f} on "
            f"{self.cores} cores.",
            f"  point-to-point: bw {self.bw_bytes_s * 8 / 1e6:.1f} Mbit/s{eff} (least squares t = a + bytes/bw "
            f"over the sizes >= 1/16 of the largest), latency {self.latency_s * 1e6:.0f} us (8-byte one-way); "
            "one-way medians by bytes: " + ", ".join(f"{k}: {v:.3g}" for k, v in sorted(self.p2p.items())),
            f"  all-to-all among {self.hosts} hosts (each rank sends the bytes in all): slope x{self.a2a_factor:.2f} "
            f"point-to-point's (a2a_factor); one-way medians by bytes: "
            + ", ".join(f"{k}: {v:.3g}" for k, v in sorted(self.a2a.items())),
        ]


def measure_network(rate_bps: int | None = 100_000_000, hosts: int = 2, quick: bool = False,
                    reps: int | None = None, timeout_s: float = 120.0,
                    say: Callable[[str], None] = lambda line: None) -> NetworkFit:
    """Build an emulated cluster of ``hosts`` hosts shaped to ``rate_bps``, measure, tear down.

    Args:
        rate_bps: link rate per host, both directions (None: unshaped).
        hosts: at least 2; ranks 0 and 1 ping-pong, every rank joins the all-to-alls.
        quick: 3 sizes instead of 6 (tests).
        reps: repetitions per size (default 5, quick 3).
        timeout_s: limit on the ranks.
        say: progress lines.

    Raises:
        GnnpipeError: no root or namespaces here (one line saying why), fewer than 2 hosts,
            a rank failed (its log tail), or the fit failed.
    """
    if hosts < 2:
        raise GnnpipeError(f"--hosts: a link needs at least 2 hosts, got {hosts}")
    why = unavailable()
    if why is not None:
        raise GnnpipeError(f"calibrate --network: {why}")
    sizes = sizes_for(rate_bps, quick)
    a2a_sizes = [s for s in sizes if s >= max(sizes) // 16]
    args = {"sizes": sizes, "a2a_sizes": a2a_sizes, "reps": reps or (3 if quick else 5)}
    load0, t0 = os.getloadavg()[0], time.monotonic()
    say(f"{hosts} emulated hosts at {CL.rate_text(rate_bps)}: point-to-point and all-to-all, "
        f"{len(sizes)} sizes up to {max(sizes) / 2**20:.2f} MiB")
    with tempfile.TemporaryDirectory(prefix="gnnpipe-netcal-") as tmp:
        run = Path(tmp)
        torch.save(args, run / "args.pt")
        argv = [sys.executable, "-m", "gnnpipe.spawn", "gnnpipe.cost.netcal:_rank_fn", str(run),
                "--comm", "torch", "--timeout-s", "60"]
        env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(
            [str(Path(__file__).resolve().parents[2])] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])))
        with CL.Cluster(CL.ClusterSpec(hosts, rate_bps)) as c:
            procs = c.launch(argv, run / "logs", env=env)
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline and any(p.poll() is None for p in procs):
                time.sleep(0.05)
            codes = [p.poll() for p in procs]
        result = run / "rank0.pt"
        if codes != [0] * len(procs) or not result.is_file():
            tails = " | ".join(f"{f.name}: " + " / ".join(f.read_text(errors="replace").strip().splitlines()[-3:])
                               for f in sorted((run / "logs").glob("*.log")))
            what = "timed out" if None in codes else f"exit codes {codes}"
            raise GnnpipeError(f"calibrate --network: the ranks failed ({what}): {tails[-1500:]}")
        res = torch.load(result, weights_only=False)
    p2p = {int(k): float(v) for k, v in res["p2p"].items()}
    a2a = {int(k): float(v) for k, v in res["a2a"].items()}
    bw, _ = fit_link(bulk(p2p))
    lat = p2p[min(p2p)]
    a_bw, a_lat = fit_link(a2a)
    factor = slope(a2a) / slope(bulk(p2p))
    return NetworkFit(rate_bps, hosts, bw, lat, float(factor), a_lat, p2p, a2a, time.monotonic() - t0,
                      (load0, os.getloadavg()[0]), os.cpu_count() or 1)


def apply(profile: HardwareProfile, fit: NetworkFit) -> HardwareProfile:
    """``profile`` with the measured link: ``inter_bw_bytes_s``, ``inter_latency_s``, ``a2a_factor``."""
    return dataclasses.replace(profile, inter_bw_bytes_s=fit.bw_bytes_s, inter_latency_s=fit.latency_s,
                               a2a_factor=fit.a2a_factor)

