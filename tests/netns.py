"""Two emulated hosts on this machine: network namespaces joined by a veth pair.

Used by ``test_multinode.py``. Needs root (or CAP_NET_ADMIN) and iproute2's ``ip``. Every
name carries a prefix with this process's pid, so concurrent runs never collide, and
:class:`TwoHosts` removes everything it made on exit, even after a failure (deleting a
namespace deletes the veth end inside it, and with it the peer).

Only private addresses of the namespaces made here are used (``10.200.<n>.1`` and ``.2``);
nothing on the machine's own interfaces changes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def netns_unavailable() -> str | None:
    """Why namespaces cannot be made here (``None`` when they can): tries to make one."""
    if shutil.which("ip") is None:
        return "iproute2's 'ip' is not installed (apt-get install -y iproute2)"
    name = f"gnptest-probe-{os.getpid()}"
    r = _ip("netns", "add", name, check=False)
    if r.returncode != 0:
        return f"'ip netns add' is not permitted here: {r.stderr.strip()}"
    _ip("netns", "del", name, check=False)
    return None


@dataclass
class TwoHosts:
    """Namespaces ``ns[0]``, ``ns[1]`` with addresses ``addr[0]``, ``addr[1]`` on ``ifname[i]``.

    Use as a context manager; :meth:`exec_prefix` gives the command prefix that runs a
    process on host ``i``; :meth:`cut` takes the link down (both sides stop hearing each
    other, no connection is reset: the situation of a pulled cable).
    """

    subnet: int = 200
    tag: str = field(default_factory=lambda: str(os.getpid()))

    def __post_init__(self) -> None:
        self.ns = [f"gnptest-{self.tag}-a", f"gnptest-{self.tag}-b"]
        # Interface names have at most 15 characters.
        self.ifname = [f"gnp{self.tag[-8:]}a", f"gnp{self.tag[-8:]}b"]
        self.addr = [f"10.{self.subnet}.0.1", f"10.{self.subnet}.0.2"]
        self._made: list[str] = []

    def __enter__(self) -> "TwoHosts":
        try:
            for ns in self.ns:
                _ip("netns", "add", ns)
                self._made.append(ns)
                _ip("-n", ns, "link", "set", "lo", "up")
            _ip("link", "add", self.ifname[0], "netns", self.ns[0], "type", "veth",
                "peer", "name", self.ifname[1], "netns", self.ns[1])
            for ns, ifn, addr in zip(self.ns, self.ifname, self.addr):
                _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", ifn)
                _ip("-n", ns, "link", "set", ifn, "up")
        except subprocess.CalledProcessError as e:
            self.__exit__()
            raise RuntimeError(f"setting up namespaces failed: {' '.join(e.cmd)}: "
                               f"{e.stderr.strip()}") from e
        return self

    def exec_prefix(self, host: int) -> list[str]:
        """Prefix a command with this to run it inside host ``host``'s namespace."""
        return ["ip", "netns", "exec", self.ns[host]]

    def cut(self) -> None:
        """Takes both ends of the link down."""
        for ns, ifn in zip(self.ns, self.ifname):
            _ip("-n", ns, "link", "set", ifn, "down", check=False)

    def __exit__(self, *exc: object) -> None:
        for ns in reversed(self._made):
            _ip("netns", "del", ns, check=False)
        self._made.clear()


def leftover_namespaces() -> list[str]:
    """Names of this process's namespaces still present (should be none after exit)."""
    r = _ip("netns", "list", check=False)
    mine = f"gnptest-{os.getpid()}-"
    return [line.split()[0] for line in r.stdout.splitlines() if line.startswith(mine)]
