"""Hardware profiles: the machine as the cost model sees it, and where profiles live.

:class:`HardwareProfile` (throughputs, links, memory; :data:`PROFILE_FIELDS` and the
optional :data:`PROFILE_OPTIONAL`), read from TOML by :func:`load_profile`: a path, or a
name looked up in the user profile directory (:func:`user_profiles_dir`,
``$GNNPIPE_PROFILE_DIR`` or ``./profiles``, where ``gnnpipe-plan calibrate`` writes) and then
among the shipped ``gnnpipe/profiles/*.toml``. :func:`profile_toml` writes one.
"""

from __future__ import annotations

import math
import os
import tomllib
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any, Sequence

from gnnpipe._base import GnnpipeError

PROFILE_FIELDS = {
    "gemm_flops_s": "achieved dense GEMM throughput, FLOP/s",
    "spmm_edge_width_s": "achieved CSR SpMM throughput, edges x width per second",
    "mem_bytes_s": "achieved memory bandwidth (elementwise ops), bytes/s",
    "unit_overhead_s": "fixed cost of one pass of one unit over one chunk, s",
    "intra_bw_bytes_s": "point-to-point bandwidth between devices of one node, bytes/s",
    "intra_latency_s": "point-to-point latency within a node, s",
    "inter_bw_bytes_s": "network bandwidth of one node (shared by its devices), bytes/s",
    "inter_latency_s": "latency between nodes, s",
    "devices_per_node": "devices (ranks) per node",
    "mem_bytes": "usable memory per device, bytes",
    "base_mem_bytes": "fixed memory per rank (runtime, context, allocator slack), bytes",
}
#: Optional fields (older profiles load without them) and their defaults: a field's
#: default is a number, or the name of the field whose value it copies.
PROFILE_OPTIONAL = {
    "cores_per_host": ("compute units of a node that ranks share; more ranks than this on a node "
                       "slow every rank's compute by ranks/cores", "devices_per_node"),
    "gather_bytes_s": ("row gathers and scatters (index_select, index_add_, cat), bytes/s", "mem_bytes_s"),
    "chunk_overhead_s": ("fixed cost of the pipeline's history path per chunk per aggregating unit "
                         "(forward write + gather, backward scatter), s", 0.0),
    "coll_overhead_s": ("fixed software cost of one blocking collective (all-to-all, all-reduce), s", 0.0),
    "oversub_wait_s": ("extra wait per blocking collective when a node runs more ranks than cores "
                       "(peers descheduled), s", 0.0),
    "shared_slowdown": ("compute slow-down when every core of a node runs a rank (shared memory "
                        "bandwidth and caches), >= 1", 1.0),
    "oversub_slowdown": ("further slow-down per rank beyond the fair share ranks/cores when ranks "
                         "outnumber cores (context switches, cache refills), >= 1", 1.0),
    "dropout_values_s": ("hashed dropout, forward + backward, values/s (0: as elementwise work at "
                         "mem_bytes_s)", 0.0),
    "a2a_factor": ("an all-to-all's inter-node bytes take this many times as long as the same bytes "
                   "point-to-point (gnnpipe-plan calibrate --network), > 0", 1.0),
    "cpu_share_ranks": ("ranks that share one node's cores whatever the links say: emulated hosts "
                        "on one machine (gnnpipe.cluster) run every rank on its cores (0: devices_per_node)", 0),
}


@dataclass(frozen=True)
class HardwareProfile:
    """A machine, as the cost model sees it (see :data:`PROFILE_FIELDS`)."""

    name: str
    gemm_flops_s: float
    spmm_edge_width_s: float
    mem_bytes_s: float
    unit_overhead_s: float
    intra_bw_bytes_s: float
    intra_latency_s: float
    inter_bw_bytes_s: float
    inter_latency_s: float
    devices_per_node: int
    mem_bytes: float
    base_mem_bytes: float = 0.0
    description: str = ""
    source: str = ""
    cores_per_host: float = 0.0  # 0: devices_per_node (one core or GPU per rank)
    gather_bytes_s: float = 0.0  # 0: mem_bytes_s
    chunk_overhead_s: float = 0.0
    coll_overhead_s: float = 0.0
    oversub_wait_s: float = 0.0
    shared_slowdown: float = 1.0
    oversub_slowdown: float = 1.0
    dropout_values_s: float = 0.0  # 0: ELEM_PASSES·s/2 bytes per value at mem_bytes_s
    a2a_factor: float = 1.0  # 1: an all-to-all moves bytes as fast as point-to-point
    cpu_share_ranks: int = 0  # 0: devices_per_node (a node's ranks are the ones sharing its cores)
    #: ``gnnpipe-train --device`` on this machine (``cpu`` or ``cuda``): the planner's
    #: recommended command carries it.
    device: str = "cpu"

    def __post_init__(self) -> None:
        if self.device not in ("cpu", "cuda"):
            raise GnnpipeError(f"profile {self.name!r}: device must be 'cpu' or 'cuda', got {self.device!r}")
        if not self.cores_per_host:
            object.__setattr__(self, "cores_per_host", float(self.devices_per_node))
        if not self.gather_bytes_s:
            object.__setattr__(self, "gather_bytes_s", float(self.mem_bytes_s))

    def ranks_on_host(self, world: int) -> int:
        """Ranks sharing the busiest node's cores (consecutive ranks fill a node; with
        ``cpu_share_ranks``, that many whatever the links: emulated hosts on one machine)."""
        return max(1, min(world, int(self.cpu_share_ranks or self.devices_per_node)))

    def slowdown(self, world: int) -> float:
        """Factor on every rank's compute for ``world`` ranks.

        Up to one rank per core: ``shared_slowdown`` when every core is busy (linear in
        the busy cores before that); beyond, the ranks time-share the cores:
        ``shared_slowdown · oversub_slowdown · ranks / cores``.
        """
        r, c = self.ranks_on_host(world), self.cores_per_host
        if r <= 1:
            return 1.0
        if r <= c:
            return 1.0 + (self.shared_slowdown - 1.0) * (r - 1) / max(c - 1, 1)
        return self.shared_slowdown * self.oversub_slowdown * r / c

    def link(self, a: int, b: int) -> tuple[float, float]:
        """(bandwidth, latency) between ranks ``a`` and ``b`` (consecutive ranks per node)."""
        if a // self.devices_per_node == b // self.devices_per_node:
            return self.intra_bw_bytes_s, self.intra_latency_s
        return self.inter_bw_bytes_s, self.inter_latency_s


def with_link(profile: HardwareProfile, rate_bps: int | None, ranks_per_host: int = 1,
              latency_s: float | None = None) -> HardwareProfile:
    """``profile`` with every ``ranks_per_host`` ranks on a host of their own, hosts joined
    by links of ``rate_bps`` bits/s per host in each direction (``gnnpipe-plan --link-rate``).

    Pure: a new profile; ``inter_bw_bytes_s`` = ``rate_bps / 8`` (``None``, an unshaped
    link: the profile's own), ``devices_per_node`` = ``ranks_per_host``, ``inter_latency_s``
    = ``latency_s`` when measured, else the profile's. Compute, intra-host links and cores
    per host stay the profile's: a host here is a machine like the profile's, of which
    ``ranks_per_host`` ranks share the cores.

    Raises:
        GnnpipeError: a non-positive rate, ranks per host below 1, or a negative latency.
    """
    if rate_bps is not None and not rate_bps > 0:
        raise GnnpipeError(f"link rate must be positive bits/s, got {rate_bps!r}")
    if int(ranks_per_host) != ranks_per_host or ranks_per_host < 1:
        raise GnnpipeError(f"ranks per host must be a positive integer, got {ranks_per_host!r}")
    if latency_s is not None and not (math.isfinite(latency_s) and latency_s >= 0):
        raise GnnpipeError(f"link latency must be a non-negative number of seconds, got {latency_s!r}")
    bw = profile.inter_bw_bytes_s if rate_bps is None else rate_bps / 8.0
    rate = "unshaped" if rate_bps is None else f"{rate_bps / 1e6:g}mbit"
    return replace(profile, inter_bw_bytes_s=float(bw), devices_per_node=int(ranks_per_host),
                   inter_latency_s=float(profile.inter_latency_s if latency_s is None else latency_s),
                   name=f"{profile.name}@{rate}",
                   description=f"{profile.description}; {ranks_per_host} rank(s) per host, {rate} links per host")


def profiles_dir() -> Path:
    """The folder of the shipped profiles (``gnnpipe/profiles``)."""
    return Path(str(resources.files("gnnpipe") / "profiles"))


#: Environment variable naming the user profile directory (``gnnpipe-plan calibrate``
#: writes there; :func:`load_profile` looks there before the shipped profiles).
PROFILE_DIR_ENV = "GNNPIPE_PROFILE_DIR"


def user_profiles_dir() -> Path:
    """The user profile directory: ``$GNNPIPE_PROFILE_DIR``, else ``./profiles``.

    Calibrated profiles live here, never in the package: the shipped files are tracked and
    hand-merged, and a measurement of one machine must not rewrite them.
    """
    return Path(os.environ.get(PROFILE_DIR_ENV) or "profiles")


def list_profiles() -> list[str]:
    """Names of the profiles :func:`load_profile` finds by name (user ones and shipped)."""
    names: set[str] = set()
    for d in (user_profiles_dir(), profiles_dir()):
        if d.is_dir():
            names.update(p.stem for p in d.glob("*.toml"))
    return sorted(names)


def load_profile(name_or_path: str | os.PathLike) -> HardwareProfile:
    """Read a hardware profile TOML: a path, or the name of a profile in
    :func:`user_profiles_dir` (first) or among the shipped ones.

    The file has a ``[profile]`` table with ``name``, ``description``, ``source`` and every
    field of :data:`PROFILE_FIELDS` (numbers).

    Raises:
        GnnpipeError: unknown name, unreadable file, or a missing / non-positive field
            (naming the file and the field).
    """
    p = Path(name_or_path)
    if not p.is_file():
        cands = [d / f"{name_or_path}.toml" for d in (user_profiles_dir(), profiles_dir())]
        found = [c for c in cands if c.is_file()]
        if not found:
            raise GnnpipeError(
                f"profile {str(name_or_path)!r}: not a file, not in {user_profiles_dir()}/ and not shipped "
                f"(known: {', '.join(list_profiles()) or 'none'})"
            )
        p = found[0]
    try:
        data = tomllib.loads(p.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise GnnpipeError(f"{p}: unreadable profile ({e})") from None
    tab = data.get("profile")
    if not isinstance(tab, dict):
        raise GnnpipeError(f"{p}: expected a [profile] table")
    kw: dict[str, Any] = {}
    for k in PROFILE_FIELDS:
        if k not in tab:
            raise GnnpipeError(f"{p}: field profile.{k} missing ({PROFILE_FIELDS[k]})")
        v = tab[k]
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v < 0 or (
            v == 0 and k not in ("unit_overhead_s", "intra_latency_s", "inter_latency_s", "base_mem_bytes")
        ):
            raise GnnpipeError(f"{p}: field profile.{k} must be a positive number, got {v!r}")
        kw[k] = v
    for k, (what, default) in PROFILE_OPTIONAL.items():
        if k not in tab:
            continue  # HardwareProfile fills the default
        v = tab[k]
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v < 0 or (
            v == 0 and k in ("cores_per_host", "gather_bytes_s", "a2a_factor")
        ) or (k.endswith("_slowdown") and v < 1) or (k == "cpu_share_ranks" and v != int(v)):
            raise GnnpipeError(f"{p}: field profile.{k} must be a positive number, got {v!r} ({what})")
        kw[k] = int(v) if k == "cpu_share_ranks" else float(v)
    kw["devices_per_node"] = int(kw["devices_per_node"])
    dev = tab.get("device", "cpu")
    if dev not in ("cpu", "cuda"):
        raise GnnpipeError(f"{p}: field profile.device must be 'cpu' or 'cuda', got {dev!r}")
    return HardwareProfile(
        name=str(tab.get("name", p.stem)), description=str(tab.get("description", "")),
        source=str(tab.get("source", "")), device=dev, **kw,
    )


def profile_toml(profile: HardwareProfile, comments: Sequence[str] = ()) -> str:
    """A profile as TOML text (what ``calibrate`` writes)."""
    lines = [f"# {c}" for c in comments]
    lines.append("[profile]")
    for k in ("name", "description", "source"):
        v = getattr(profile, k).replace("\\", "\\\\").replace('"', '\\"')
        lines.append(f'{k} = "{v}"')
    lines.append(f'device = "{profile.device}"  # gnnpipe-train --device')
    for k, what in PROFILE_FIELDS.items():
        v = getattr(profile, k)
        lines.append(f"{k} = {int(v) if k == 'devices_per_node' else float(v):.6g}  # {what}"
                     if k != "devices_per_node" else f"{k} = {int(v)}  # {what}")
    for k, (what, _) in PROFILE_OPTIONAL.items():
        lines.append(f"{k} = {float(getattr(profile, k)):.6g}  # {what}")
    return "\n".join(lines) + "\n"
