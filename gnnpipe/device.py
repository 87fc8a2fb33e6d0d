"""The rank's compute device, and how its communicator reaches it.

One owner for the few decisions that differ between a CPU and a GPU:

* :func:`choose` — which device a rank computes on (``cuda:i`` from its local rank, the
  number of GPUs and how many ranks share one) and which communicator backend moves its
  messages: NCCL when every rank on the host owns a GPU, otherwise Gloo (or MPI) over host
  memory, each message staged through the host. NCCL with two ranks on one GPU is refused
  here, before any collective, in one line that names the way out.
* :func:`synchronize`, :class:`Stopwatch`, :func:`peak_memory`, :func:`reset_peak_memory` —
  what timing and memory figures need on a GPU (no-ops or ``None`` on a CPU).

Placement itself is the executor builder's (:mod:`gnnpipe.parallel.build`: ``Block.to``,
``ChunkInfo.to``, ``device=`` on every buffer); ``tests/test_placement.py`` checks that
nothing in the hot loop makes a tensor elsewhere.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
import torch

from gnnpipe._base import GnnpipeError

#: ``--comm-backend`` values: ``auto`` (NCCL when each rank owns a GPU, Gloo otherwise),
#: ``nccl``, ``gloo``.
COMM_BACKENDS = ("auto", "nccl", "gloo")


@dataclass(frozen=True)
class DeviceChoice:
    """Where one rank computes and how its messages travel.

    Attributes:
        compute: the device the model, the graph and every buffer live on.
        comm: the device of the communicator's buffers: ``compute`` for NCCL, the CPU for
            Gloo and MPI (a message on a GPU is copied through the host, see
            :meth:`gnnpipe.comm.base.Communicator._staged`).
        backend: ``"nccl"``, ``"gloo"``, ``"mpi"`` or ``"single"``.
        ranks_per_gpu: ranks of this host on one GPU (0 on a CPU).
    """

    compute: torch.device
    comm: torch.device
    backend: str
    ranks_per_gpu: int = 0

    @property
    def staged(self) -> bool:
        """Messages cross the host (compute on a GPU, communicator on the CPU)."""
        return self.compute.type != "cpu" and self.comm.type == "cpu"


def choose(device: str, kind: str, local_rank: int, local_size: int, *, backend: str = "auto",
           ranks_per_gpu: int = 0, device_count: int | None = None,
           nccl_available: bool | None = None) -> DeviceChoice:
    """This rank's :class:`DeviceChoice`.

    Args:
        device: ``"cpu"`` or ``"cuda"`` (the config's ``device``).
        kind: the communicator kind, ``"torch"``, ``"mpi"`` or ``"single"``.
        local_rank, local_size: this rank's index among the ranks of its host, and their number.
        backend: ``"auto"``, ``"nccl"`` or ``"gloo"`` (torch communicator only).
        ranks_per_gpu: ranks of a host that share one GPU (0: ``ceil(local_size / GPUs)``);
            rank ``r`` of the host uses GPU ``(r // ranks_per_gpu) % GPUs``.
        device_count, nccl_available: what torch reports (given in tests).

    Raises:
        GnnpipeError: CUDA asked for where there is none; NCCL asked for where two ranks
            share a GPU; a ranks-per-GPU that needs more GPUs than the host has; an unknown
            backend.
    """
    if backend not in COMM_BACKENDS:
        raise GnnpipeError(f"config field 'comm_backend' = {backend!r}: expected one of {COMM_BACKENDS}")
    if ranks_per_gpu < 0:
        raise GnnpipeError(f"config field 'ranks_per_gpu' = {ranks_per_gpu}: expected an integer >= 0")
    cpu = torch.device("cpu")
    host_kind = {"torch": "gloo", "mpi": "mpi", "single": "single"}.get(kind, kind)
    if device == "cpu":
        if backend == "nccl":
            raise GnnpipeError("config field 'comm_backend' = 'nccl' needs --device cuda (NCCL moves GPU memory); "
                               "on the CPU leave it at auto (Gloo)")
        return DeviceChoice(cpu, cpu, host_kind)
    if device != "cuda":
        raise GnnpipeError(f"config field 'device' = {device!r}: expected cpu or cuda")
    count = torch.cuda.device_count() if device_count is None else int(device_count)
    if count < 1:
        built = "a CPU-only build" if torch.version.cuda is None else f"CUDA {torch.version.cuda}, no device visible"
        raise GnnpipeError(f"config field 'device' = 'cuda': no CUDA device available (torch {torch.__version__}, "
                           f"{built}); use --device cpu")
    per = ranks_per_gpu or max(1, math.ceil(local_size / count))
    if math.ceil(local_size / per) > count:
        raise GnnpipeError(f"--ranks-per-gpu {per}: {local_size} ranks on this host need "
                           f"{math.ceil(local_size / per)} GPUs, the host has {count}; use --ranks-per-gpu "
                           f"{math.ceil(local_size / count)} or more, or 0 (automatic)")
    compute = torch.device("cuda", (local_rank // per) % count)
    if kind != "torch":
        if backend == "nccl":
            raise GnnpipeError(f"config field 'comm_backend' = 'nccl' needs --comm torch; --comm {kind} moves "
                               "messages through host memory")
        return DeviceChoice(compute, cpu, host_kind, per)
    if nccl_available is None:
        nccl_available = bool(torch.distributed.is_available() and torch.distributed.is_nccl_available())
    if backend == "nccl":
        if per > 1:
            raise GnnpipeError(f"--comm-backend nccl: {local_size} ranks on this host share {count} GPU(s) "
                               f"({per} per GPU) and NCCL refuses two ranks on one GPU ('Duplicate GPU'); use "
                               f"--comm-backend gloo (messages staged through host memory) or start at most "
                               f"{count} rank(s) per host")
        if not nccl_available:
            raise GnnpipeError(f"--comm-backend nccl: this torch ({torch.__version__}) has no NCCL; use "
                               "--comm-backend gloo")
        return DeviceChoice(compute, compute, "nccl", per)
    if backend == "auto" and per == 1 and nccl_available:
        return DeviceChoice(compute, compute, "nccl", per)
    return DeviceChoice(compute, cpu, "gloo", per)


def synchronize(device: torch.device | str) -> None:
    """Wait for the device's queued work (a no-op on a CPU): call before reading a clock."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Stopwatch:
    """Seconds of device work between :meth:`start` and :meth:`stop`: CUDA events on a GPU
    (``stop`` waits for the device), the host clock on a CPU."""

    def __init__(self, device: torch.device | str) -> None:
        self.device = torch.device(device)
        self._t0 = 0.0
        self._ev = None

    def start(self) -> None:
        if self.device.type == "cuda":
            self._ev = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            self._ev[0].record()
        else:
            self._t0 = time.perf_counter()

    def stop(self) -> float:
        if self._ev is not None:
            self._ev[1].record()
            self._ev[1].synchronize()
            return self._ev[0].elapsed_time(self._ev[1]) / 1000.0
        return time.perf_counter() - self._t0


def peak_memory(device: torch.device | str) -> int | None:
    """Bytes of device memory allocated at the peak since the last reset (None on a CPU)."""
    device = torch.device(device)
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    return None


def reset_peak_memory(device: torch.device | str) -> None:
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def upload(rows, device: torch.device | str) -> torch.Tensor:
    """Host-computed index data (a numpy int64 array) as a tensor on ``device``.

    The one deliberate host-to-device transfer in the training loop (a pipeline stage's
    rows of its epoch input transform, chosen on the host so that the device is never read
    back): a copy, never a wait for device values. On the CPU the array's own memory.
    """
    t = torch.from_numpy(rows)
    dev = torch.device(device)
    return t if dev.type == "cpu" else t.to(dev, non_blocking=True)
