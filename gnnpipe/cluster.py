"""An emulated multi-host cluster on this machine: network namespaces, a bridge, shaped links.

Each emulated *host* is a network namespace with one interface, ``eth0``, at
``10.201.0.<i+1>/24``. The other end of every host's veth pair sits in a *switch* namespace
of its own, enslaved to a Linux bridge ``br0`` there, so hosts reach each other through the
bridge and nothing is created in (or changed on) the machine's own namespace::

    host ns  gnpc-<pid>-<n>-h0   eth0 ──veth── h0 ┐
    host ns  gnpc-<pid>-<n>-h1   eth0 ──veth── h1 ├─ br0   (switch ns gnpc-<pid>-<n>-sw)
    ...                                           ┘

**Shaping.** A link rate applies to each host's link in both directions: an HTB class with
``rate = ceil = R`` as the root qdisc's default class on egress of *both* veth ends (egress
of ``eth0`` is the host's upload, egress of the switch-side end its download). An optional
one-way delay is a ``netem`` leaf under that class, on both ends (so a round trip between two
hosts crosses four delays: up and down on each side). HTB handles the veth's large GSO
packets without a burst to tune, which TBF needs. ``netem`` is a kernel module
(``sch_netem``) that some kernels and containers lack; a delay then fails with that reason.

**Ranks.** ``k`` ranks per host, rank ``r`` on host ``r // k``. Two launch paths, the
project's own:

* torch.distributed's environment (what :func:`gnnpipe.comm.detect_launch` reads):
  ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR`` (host 0)
  and ``MASTER_PORT``, plus ``GLOO_SOCKET_IFNAME=eth0`` (Gloo would otherwise pick its
  interface from the machine's hostname, which resolves outside the namespaces); each rank
  starts under ``ip netns exec``. See :meth:`Cluster.rank_env` and :meth:`Cluster.launch`.
* MPICH's hydra ``mpirun``, started inside host 0, with ``-launcher ssh -launcher-exec``
  pointing at a small script that runs hydra's proxy for host ``10.201.0.<i+1>`` under
  ``ip netns exec`` of that host instead of over ssh; ``-iface eth0`` makes the proxies
  call back to the bridge address. Hydra treats every address as a node of its own, so
  ranks on different hosts use MPICH's network module (UCX here) and ranks of one host its
  shared memory. UCX itself, though, judges locality by the machine's boot id, which every
  namespace shares: left alone it moves inter-host messages through its own shared memory
  and cross-memory attach, past the shaped link (measured: 25 Gbit/s on a 100 Mbit/s
  link). ``UCX_TLS=tcp,self`` keeps it on TCP over ``eth0`` (measured: 95.6 Mbit/s).
  See :meth:`Cluster.mpirun_argv`.

**Clean-up.** Every name carries this process's pid and a per-process counter, so runs never
collide. :class:`Cluster` is a context manager; it also registers with ``atexit`` and, while
any cluster is up, turns SIGTERM and SIGHUP into ``SystemExit`` in the main thread (SIGINT
already raises ``KeyboardInterrupt``), so ``__exit__`` runs on Ctrl-C, ``kill`` and errors.
Tear-down kills every process still inside the host namespaces (only processes started into
them live there), then deletes the namespaces; the veths and the bridge go with them. After
a SIGKILL nothing can run: :func:`cleanup` removes the leftovers of dead processes by prefix
(``gnnpipe-bench cluster --cleanup``).

Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN) and iproute2's ``ip`` and ``tc``;
:func:`unavailable` says why a cluster cannot be made here. The command lists are pure
functions (:func:`setup_commands`, :func:`shape_commands`, :func:`teardown_commands`),
tested without root.
"""

from __future__ import annotations

import atexit
import itertools
import logging
import os
import re
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from gnnpipe._base import GnnpipeError

log = logging.getLogger(__name__)

#: Every namespace made here starts with this.
PREFIX = "gnpc-"
#: Host addresses are ``SUBNET.<i+1>``: private, and only ever inside our own namespaces.
SUBNET = "10.201.0"
#: The interface of every host, and the bridge in the switch namespace.
HOST_IF = "eth0"
BRIDGE = "br0"
MASTER_PORT = 29500  # fresh namespaces: nothing else is bound there
MAX_HOSTS = 250

_UNITS = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9}
_seq = itertools.count()


class ClusterError(GnnpipeError):
    """The emulated cluster could not be made, shaped or used."""


# --------------------------------------------------------------------------- pure parts


def parse_rate(text: str | None) -> int | None:
    """A link rate in bits per second from ``"200mbit"``, ``"1gbit"``, ``"500kbit"``.

    ``None``, ``""``, ``"0"`` and ``"unshaped"`` mean no shaping (``None``).

    Raises:
        ClusterError: not a number followed by ``bit``, ``kbit``, ``mbit`` or ``gbit``.
    """
    if text is None or str(text).strip().lower() in ("", "0", "unshaped", "none"):
        return None
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([kmg]?)(?:bit)?", str(text).strip().lower())
    if m is None or float(m.group(1)) <= 0:
        raise ClusterError(f"link rate must look like 200mbit, 1gbit or 500kbit (or 'unshaped'), got {text!r}")
    return int(float(m.group(1)) * _UNITS[m.group(2)])


def parse_delay(text: str | None) -> float | None:
    """A one-way delay in milliseconds from ``"1ms"``, ``"500us"``, ``"0.2ms"``; ``None``/``""``/``"0"``: none.

    Raises:
        ClusterError: not a non-negative number followed by ``ms`` or ``us``.
    """
    if text is None or str(text).strip() in ("", "0", "0ms"):
        return None
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(ms|us)?", str(text).strip().lower())
    if m is None:
        raise ClusterError(f"delay must look like 1ms or 500us, got {text!r}")
    ms = float(m.group(1)) / (1000.0 if m.group(2) == "us" else 1.0)
    return ms or None


def rate_text(bps: int | None) -> str:
    """``200mbit`` for 200_000_000; ``unshaped`` for ``None`` (labels and file names)."""
    if bps is None:
        return "unshaped"
    for unit, f in (("gbit", 10**9), ("mbit", 10**6), ("kbit", 10**3)):
        if bps % f == 0:
            return f"{bps // f}{unit}"
    return f"{bps}bit"


@dataclass(frozen=True)
class ClusterSpec:
    """What to build: the names and addresses of every piece follow from these fields.

    Args:
        hosts: emulated hosts (namespaces), ``1 <= hosts <= 250``.
        rate_bps: each host's link rate in bits/s, both directions; ``None``: unshaped.
        delay_ms: one-way delay added on each host's link, both directions; ``None``: none.
        ranks_per_host: ranks started on each host.
        tag: distinguishes this cluster's names from every other's (pid and counter).
    """

    hosts: int
    rate_bps: int | None = None
    delay_ms: float | None = None
    ranks_per_host: int = 1
    tag: str = field(default_factory=lambda: f"{os.getpid()}-{next(_seq)}")

    def __post_init__(self) -> None:
        if not (1 <= self.hosts <= MAX_HOSTS):
            raise ClusterError(f"hosts must be between 1 and {MAX_HOSTS}, got {self.hosts}")
        if self.ranks_per_host < 1:
            raise ClusterError(f"ranks_per_host must be at least 1, got {self.ranks_per_host}")
        if self.rate_bps is not None and self.rate_bps <= 0:
            raise ClusterError(f"rate_bps must be positive or None, got {self.rate_bps}")
        if self.delay_ms is not None and self.delay_ms < 0:
            raise ClusterError(f"delay_ms must be non-negative or None, got {self.delay_ms}")
        if not re.fullmatch(r"[0-9A-Za-z-]+", self.tag):
            raise ClusterError(f"tag must be letters, digits and '-', got {self.tag!r}")

    @property
    def world(self) -> int:
        """Ranks in the job: hosts × ranks per host."""
        return self.hosts * self.ranks_per_host

    @property
    def switch(self) -> str:
        """The switch namespace (holds the bridge and the hosts' peer ends)."""
        return f"{PREFIX}{self.tag}-sw"

    def ns(self, host: int) -> str:
        """Host ``host``'s namespace."""
        return f"{PREFIX}{self.tag}-h{host}"

    def addr(self, host: int) -> str:
        """Host ``host``'s address on the bridge."""
        return f"{SUBNET}.{host + 1}"

    def port(self, host: int) -> str:
        """Name of host ``host``'s veth end in the switch namespace."""
        return f"h{host}"

    def host_of(self, rank: int) -> int:
        """The host rank ``rank`` runs on (ranks fill hosts in order)."""
        return rank // self.ranks_per_host

    @property
    def namespaces(self) -> list[str]:
        """Every namespace of this cluster, switch first."""
        return [self.switch] + [self.ns(h) for h in range(self.hosts)]


def shape_commands(ns: str, dev: str, rate_bps: int | None, delay_ms: float | None) -> list[list[str]]:
    """``tc`` argv lists that shape egress of ``dev`` in namespace ``ns``.

    HTB root qdisc whose default class 1:10 has ``rate = ceil = rate_bps``; with a delay, a
    ``netem delay`` leaf under it. Neither: no commands (the veth's default qdisc).
    A delay without a rate gets netem alone as the root.

    Returns:
        the argv lists, in order.
    """
    tc = ["tc", "-n", ns, "qdisc", "add", "dev", dev]
    delay = ["netem", "delay", f"{delay_ms:g}ms", "limit", "100000"] if delay_ms else []
    if rate_bps is None:
        return [tc + ["root", "handle", "1:", *delay]] if delay else []
    # quantum: with one class it only sets how much is dequeued per round; the default
    # (rate / r2q) exceeds HTB's limit at these rates and makes tc warn.
    cmds = [tc + ["root", "handle", "1:", "htb", "default", "10"],
            ["tc", "-n", ns, "class", "add", "dev", dev, "parent", "1:", "classid", "1:10", "htb",
             "rate", f"{rate_bps}bit", "ceil", f"{rate_bps}bit", "quantum", "60000"]]
    if delay:
        cmds.append(tc + ["parent", "1:10", "handle", "10:", *delay])
    return cmds


def setup_commands(spec: ClusterSpec) -> list[list[str]]:
    """Every ``ip``/``tc`` argv list that builds ``spec``'s cluster, in order.

    Links are created inside the switch namespace and their host ends moved straight into
    the host namespace (``peer name eth0 netns HOST``), so no name ever appears in the
    machine's own namespace.
    """
    sw = spec.switch
    cmds = [["ip", "netns", "add", sw],
            ["ip", "-n", sw, "link", "add", "name", BRIDGE, "type", "bridge"],
            ["ip", "-n", sw, "link", "set", BRIDGE, "up"]]
    for h in range(spec.hosts):
        ns, port = spec.ns(h), spec.port(h)
        cmds += [["ip", "netns", "add", ns],
                 ["ip", "-n", ns, "link", "set", "lo", "up"],
                 ["ip", "-n", sw, "link", "add", "name", port, "type", "veth",
                  "peer", "name", HOST_IF, "netns", ns],
                 ["ip", "-n", sw, "link", "set", port, "master", BRIDGE],
                 ["ip", "-n", sw, "link", "set", port, "up"],
                 ["ip", "-n", ns, "addr", "add", f"{spec.addr(h)}/24", "dev", HOST_IF],
                 ["ip", "-n", ns, "link", "set", HOST_IF, "up"]]
        cmds += shape_commands(ns, HOST_IF, spec.rate_bps, spec.delay_ms)  # host's upload
        cmds += shape_commands(sw, port, spec.rate_bps, spec.delay_ms)  # host's download
    return cmds


def teardown_commands(namespaces: Sequence[str]) -> list[list[str]]:
    """``ip netns del`` for each namespace, hosts before the switch.

    Deleting a namespace destroys the interfaces inside it; a veth's peer goes with it, and
    the bridge with the switch namespace, so these are all that is needed once no process
    is left inside (see :func:`kill_inside`).
    """
    return [["ip", "netns", "del", ns] for ns in sorted(namespaces, key=lambda n: n.endswith("-sw"))]


def ours(names: Sequence[str], prefix: str = PREFIX, only_dead: bool = True) -> list[str]:
    """The namespaces among ``names`` made by this module, optionally only of dead processes.

    Args:
        names: namespace names (``ip netns list``'s first column).
        prefix: only names starting with it.
        only_dead: keep only names whose owner pid (``gnpc-<pid>-...``) no longer runs, so
            a clean-up never pulls the cluster from under a live run.

    Returns:
        the matching names, in input order.
    """
    out = []
    for n in names:
        if not n.startswith(prefix):
            continue
        if only_dead:
            m = re.match(re.escape(prefix) + r"(\d+)-", n)
            if m is not None and _pid_alive(int(m.group(1))):
                continue
        out.append(n)
    return out


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# --------------------------------------------------------------------------- system parts


def _run(cmd: Sequence[str], check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(list(cmd), capture_output=True, text=True)
    if check and r.returncode != 0:
        err = r.stderr.strip() or r.stdout.strip()
        hint = ""
        if "netem" in cmd and "unknown" in err.lower():
            hint = " (the kernel lacks sch_netem: run without --delay)"
        raise ClusterError(f"{' '.join(cmd)} failed: {err}{hint}")
    return r


def unavailable() -> str | None:
    """Why a cluster cannot be made here, or ``None`` when it can (tries one namespace)."""
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"iproute2's '{tool}' is not installed (apt-get install -y iproute2)"
    name = f"{PREFIX}{os.getpid()}-probe"
    r = _run(["ip", "netns", "add", name], check=False)
    if r.returncode != 0:
        return f"'ip netns add' is not permitted here (needs root): {r.stderr.strip()}"
    _run(["ip", "netns", "del", name], check=False)
    return None


def list_namespaces() -> list[str]:
    """Names of the machine's named network namespaces (``ip netns list``)."""
    r = _run(["ip", "netns", "list"], check=False)
    return [line.split()[0] for line in r.stdout.splitlines() if line.strip()]


def kill_inside(ns: str, grace_s: float = 3.0) -> list[int]:
    """SIGTERM, then SIGKILL after ``grace_s``, every process in namespace ``ns``.

    Only processes started into our namespaces live there (a namespace is private to the
    cluster that made it). Returns the pids found.
    """
    def pids() -> list[int]:
        r = _run(["ip", "netns", "pids", ns], check=False)
        return [int(p) for p in r.stdout.split() if p.isdigit() and int(p) != os.getpid()]

    found = pids()
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 2.0)):
        left = pids()
        if not left:
            break
        for p in left:
            try:
                os.kill(p, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait
        while pids() and time.monotonic() < deadline:
            time.sleep(0.05)
    return found


def remove(namespaces: Sequence[str]) -> list[str]:
    """Kill what runs inside, then delete the namespaces; returns those still present after."""
    present = set(list_namespaces())
    todo = [n for n in namespaces if n in present]
    for ns in todo:
        kill_inside(ns)
    for cmd in teardown_commands(todo):
        _run(cmd, check=False)
    present = set(list_namespaces())
    return [n for n in namespaces if n in present]


def cleanup(prefix: str = PREFIX, only_dead: bool = True) -> list[str]:
    """Remove leftover namespaces (and with them veths and bridges) whose names start with ``prefix``.

    Args:
        prefix: default ``gnpc-``, every cluster's.
        only_dead: spare clusters whose owner process still runs (see :func:`ours`).

    Returns:
        the namespaces removed.

    Raises:
        ClusterError: some could not be removed.
    """
    names = ours(list_namespaces(), prefix, only_dead)
    left = remove(names)
    if left:
        raise ClusterError(f"could not remove namespaces {', '.join(left)}")
    return names


# Clusters up in this process, torn down at exit or on a terminating signal.
_live: list["Cluster"] = []
_old_handlers: dict[int, object] = {}
_lock = threading.Lock()


def _terminate(signum: int, frame) -> None:
    # Unwind the main thread so every `with Cluster(...)` runs its __exit__; atexit
    # catches clusters used without one.
    raise SystemExit(128 + signum)


def _install_handlers() -> None:
    if threading.current_thread() is not threading.main_thread() or _old_handlers:
        return
    for sig in (signal.SIGTERM, signal.SIGHUP):
        _old_handlers[sig] = signal.signal(sig, _terminate)


def _restore_handlers() -> None:
    if threading.current_thread() is not threading.main_thread():
        return
    for sig, h in _old_handlers.items():
        signal.signal(sig, h)
    _old_handlers.clear()


@atexit.register
def _teardown_all() -> None:
    for c in list(_live):
        c.close()


_EXEC_SCRIPT = """#!/bin/sh
# Written by gnnpipe.cluster for hydra's -launcher-exec: hydra calls it as it would call
# ssh ("[options] HOST COMMAND..."); it runs COMMAND in HOST's namespace instead.
while [ $# -gt 0 ]; do
  case "$1" in -*) shift ;; *) break ;; esac
done
host=$1; shift
case "$host" in
{cases}
  *) echo "gnnpipe cluster: unknown host $host" >&2; exit 255 ;;
esac
exec ip netns exec "$ns" /bin/sh -c "$*"
"""


class Cluster:
    """The emulated cluster of ``spec``; build with ``with Cluster(spec) as c:``.

    Args:
        spec: hosts, rate, delay, ranks per host.

    Attributes:
        spec: the spec.
        procs: processes started by :meth:`launch` (killed on close).
    """

    def __init__(self, spec: ClusterSpec) -> None:
        self.spec = spec
        self.procs: list[subprocess.Popen] = []
        self._made: list[str] = []
        self._tmp: Path | None = None

    # ---------------------------------------------------------------- life cycle
    def __enter__(self) -> "Cluster":
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def open(self) -> "Cluster":
        """Build every namespace, link and qdisc; on any failure remove what was made.

        Raises:
            ClusterError: a command failed (its argv and stderr in the message).
        """
        with _lock:
            _live.append(self)
            _install_handlers()
        try:
            for cmd in setup_commands(self.spec):
                if cmd[:3] == ["ip", "netns", "add"]:
                    self._made.append(cmd[3])  # before running: a half-made one is removed too
                _run(cmd)
        except BaseException:
            self.close()
            raise
        log.info("cluster %s: %d hosts at %s%s", self.spec.tag, self.spec.hosts, rate_text(self.spec.rate_bps),
                 f", {self.spec.delay_ms:g} ms delay" if self.spec.delay_ms else "")
        return self

    def close(self) -> None:
        """Kill launched processes, delete every namespace; safe to call more than once.

        Raises:
            ClusterError: a namespace survived deletion (its name in the message).
        """
        for p in self.procs:
            _kill_group(p)
        self.procs.clear()
        left = remove(self._made) if self._made else []
        self._made.clear()
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None
        with _lock:
            if self in _live:
                _live.remove(self)
            if not _live:
                _restore_handlers()
        if left:
            raise ClusterError(f"cluster {self.spec.tag}: namespaces {', '.join(left)} survived deletion; "
                               "run 'gnnpipe-bench cluster --cleanup'")

    # ---------------------------------------------------------------- launching
    def exec_prefix(self, host: int) -> list[str]:
        """Prefix a command with this to run it on host ``host``."""
        return ["ip", "netns", "exec", self.spec.ns(host)]

    def rank_env(self, rank: int, port: int = MASTER_PORT) -> dict[str, str]:
        """The torch.distributed launch variables of rank ``rank`` (see :func:`gnnpipe.comm.detect_launch`)."""
        k = self.spec.ranks_per_host
        return {"RANK": str(rank), "WORLD_SIZE": str(self.spec.world), "LOCAL_RANK": str(rank % k),
                "LOCAL_WORLD_SIZE": str(k), "MASTER_ADDR": self.spec.addr(0), "MASTER_PORT": str(port),
                "GLOO_SOCKET_IFNAME": HOST_IF}

    def launch(self, argv: Sequence[str], logs: Path, env: Mapping[str, str] | None = None) -> list[subprocess.Popen]:
        """Start every rank of ``argv`` with the torch.distributed environment.

        Args:
            argv: the command each rank runs (e.g. ``[python, -m, gnnpipe.train, ...]``).
            logs: ``rank<r>.log`` files go here.
            env: base environment (``os.environ`` by default); rank variables are added.

        Returns:
            the processes, rank order (also kept in :attr:`procs`).
        """
        logs = Path(logs)
        logs.mkdir(parents=True, exist_ok=True)
        base = dict(os.environ if env is None else env)
        base.setdefault("OMP_NUM_THREADS", "1")
        base.setdefault("PYTHONUNBUFFERED", "1")
        started = []
        for rank in range(self.spec.world):
            with open(logs / f"rank{rank}.log", "wb") as f:
                p = subprocess.Popen(self.exec_prefix(self.spec.host_of(rank)) + list(argv),
                                     env={**base, **self.rank_env(rank)}, stdout=f, stderr=subprocess.STDOUT,
                                     start_new_session=True)
            started.append(p)
            self.procs.append(p)
        return started

    def exec_script(self) -> Path:
        """The ``-launcher-exec`` script for hydra (written once, removed on close)."""
        if self._tmp is None:
            self._tmp = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{self.spec.tag}-"))
        path = self._tmp / "nsexec.sh"
        if not path.exists():
            cases = "\n".join(f"  {self.spec.addr(h)}) ns={shlex.quote(self.spec.ns(h))} ;;"
                              for h in range(self.spec.hosts))
            path.write_text(_EXEC_SCRIPT.format(cases=cases))
            path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        return path

    def mpirun_argv(self, argv: Sequence[str], mpirun: str | None = None) -> list[str]:
        """The command that runs ``argv`` on every rank with MPICH's hydra across the hosts.

        hydra starts in host 0's namespace (a local host, forked directly); the other hosts'
        proxies start through :meth:`exec_script` in their namespaces and call back to host
        0 over ``eth0`` (``-iface``). Hydra reads one node per host name, so ranks of
        different hosts use MPICH's network module, and shared memory stays within a host.
        ``UCX_TLS=tcp,self``: UCX would otherwise reach other namespaces through shared
        memory, bypassing the shaped link (see the module docstring).

        Args:
            argv: the command each rank runs.
            mpirun: hydra's ``mpirun``; by default the one beside this interpreter (the
                MPICH that mpi4py was built against).

        Returns:
            the argv list to run from the machine's own namespace.
        """
        mpirun = mpirun or str(Path(sys.executable).parent / "mpirun")
        hosts = ",".join(f"{self.spec.addr(h)}:{self.spec.ranks_per_host}" for h in range(self.spec.hosts))
        return self.exec_prefix(0) + [
            mpirun, "-launcher", "ssh", "-launcher-exec", str(self.exec_script()), "-iface", HOST_IF,
            "-hosts", hosts, "-np", str(self.spec.world), "-ppn", str(self.spec.ranks_per_host),
            "-genv", "OMP_NUM_THREADS", "1", "-genv", "FI_TCP_IFACE", HOST_IF,
            "-genv", "UCX_NET_DEVICES", HOST_IF, "-genv", "UCX_TLS", "tcp,self", *argv]


def _kill_group(p: subprocess.Popen) -> None:
    if p.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            return
        try:
            p.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue
