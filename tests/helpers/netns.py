"""Two emulated hosts for ``test_multinode.py``: a 2-host :class:`gnnpipe.cluster.Cluster`.

The namespaces, bridge, addresses and clean-up are the package's (see its docstring: names
carry this process's pid, everything is removed on exit, even after a failure); this adds
the small interface the multi-node tests use: per-host namespace, interface and address
lists, an exec prefix, and :meth:`TwoHosts.cut`, which pulls the cable.

Needs root (or CAP_NET_ADMIN) and iproute2.
"""

from __future__ import annotations

import os

from gnnpipe import cluster


def netns_unavailable() -> str | None:
    """Why namespaces cannot be made here (``None`` when they can): tries to make one."""
    return cluster.unavailable()


class TwoHosts(cluster.Cluster):
    """Hosts 0 and 1, unshaped: namespaces ``ns[i]``, interfaces ``ifname[i]``, addresses ``addr[i]``.

    Use as a context manager; :meth:`exec_prefix` gives the command prefix that runs a
    process on host ``i``; :meth:`cut` takes the link down (both sides stop hearing each
    other, no connection is reset: the situation of a pulled cable).
    """

    def __init__(self) -> None:
        super().__init__(cluster.ClusterSpec(hosts=2))
        self.ns = [self.spec.ns(0), self.spec.ns(1)]
        self.ifname = [cluster.HOST_IF, cluster.HOST_IF]
        self.addr = [self.spec.addr(0), self.spec.addr(1)]

    def cut(self) -> None:
        """Takes both hosts' interfaces down."""
        for ns in self.ns:
            cluster._run(["ip", "-n", ns, "link", "set", cluster.HOST_IF, "down"], check=False)


def leftover_namespaces() -> list[str]:
    """Names of this process's namespaces still present (should be none after exit)."""
    mine = f"{cluster.PREFIX}{os.getpid()}-"
    return [n for n in cluster.list_namespaces() if n.startswith(mine)]
