"""Multi-node for real: two emulated hosts (network namespaces joined by a veth pair),
two ranks each, Gloo between them over 10.200.0.1 / 10.200.0.2.

* A 2-host x 2-rank run of ``gnnpipe-train`` (graph mode, 4 parts; pipeline mode, 4 stages)
  gives the same loss curve as the same 4 ranks on one host over loopback: the placement
  of ranks on hosts must not change the arithmetic (same world, same reduction order).
* Cutting the link mid-run (both veth ends down: no reset reaches anyone, as with a pulled
  cable) makes every rank on both sides exit non-zero with an error within the timeout.

Needs root for ``ip netns``; skipped (with the reason) only where adding a namespace fails.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers.netns import TwoHosts, leftover_namespaces, netns_unavailable

pytestmark = pytest.mark.netns

TIMEOUT_S = 10  # gnnpipe-train --timeout: the bound a rank waits on a silent peer
# Small enough that 4 ranks on 2 cores start and train in seconds; 4 layers so that the
# pipeline has a layer per stage.
COMMON = ["--dataset", "sbm", "--synth-nodes", "600", "--synth-features", "8",
          "--synth-classes", "4", "--model", "gcn", "--layers", "4", "--hidden", "16",
          "--eval-every", "1000", "--no-progress", "--comm", "torch",
          "--timeout", str(TIMEOUT_S), "--threads", "1"]


@pytest.fixture(scope="module")
def hosts():
    why = netns_unavailable()
    if why is not None:
        pytest.skip(why)
    with TwoHosts() as h:
        yield h
    assert leftover_namespaces() == [], "namespaces left behind"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(out: Path, args: list[str], hosts: TwoHosts | None) -> list[subprocess.Popen]:
    """Four ranks: 0, 1 on host 0 and 2, 3 on host 1 (or all on loopback without hosts)."""
    out.mkdir(parents=True, exist_ok=True)
    port = 29500 if hosts is not None else _free_port()  # fresh namespaces: nothing bound
    procs = []
    for rank in range(4):
        host = rank // 2
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="4", LOCAL_RANK=str(rank % 2),
                   LOCAL_WORLD_SIZE="2", OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1",
                   MASTER_PORT=str(port))
        prefix: list[str] = []
        if hosts is not None:
            # Gloo picks its interface from the hostname, which resolves outside the
            # namespace; name the veth explicitly.
            env.update(MASTER_ADDR=hosts.addr[0], GLOO_SOCKET_IFNAME=hosts.ifname[host])
            prefix = hosts.exec_prefix(host)
        else:
            env.update(MASTER_ADDR="127.0.0.1", GLOO_SOCKET_IFNAME="lo")
        log = open(out / f"rank{rank}.log", "wb")
        procs.append(subprocess.Popen(
            prefix + [sys.executable, "-m", "gnnpipe.train", *args, "--out", str(out)],
            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        log.close()
    return procs


def _logs(out: Path) -> str:
    return "\n".join(f"--- rank {r} ---\n{(out / f'rank{r}.log').read_text(errors='replace')[-3000:]}"
                     for r in range(4) if (out / f"rank{r}.log").exists())


def _wait_all(procs, out: Path, limit_s: float) -> list[int | None]:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline and any(p.poll() is None for p in procs):
        time.sleep(0.05)
    return [p.poll() for p in procs]


def _kill(procs) -> None:
    import psutil

    # The launch scripts put their launcher in a process group of its own, out of reach
    # of killpg on the script: collect every descendant first.
    for p in procs:
        try:
            for child in psutil.Process(p.pid).children(recursive=True):
                child.kill()
        except psutil.Error:
            pass
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        p.wait(timeout=10)


def _losses(out: Path) -> list[float]:
    return [json.loads(line)["loss"] for line in (out / "metrics.jsonl").read_text().splitlines()]


def _run(out: Path, args: list[str], hosts: TwoHosts | None) -> list[float]:
    procs = _start(out, args, hosts)
    try:
        codes = _wait_all(procs, out, 150)
        assert codes == [0, 0, 0, 0], f"exit codes {codes}\n{_logs(out)}"
    finally:
        _kill(procs)
    return _losses(out)


# ~35 s each (8 processes start on 2 cores): graph mode in the default run, pipeline slow.
@pytest.mark.parametrize("mode", ["graph", pytest.param("pipeline", marks=pytest.mark.slow)])
def test_two_hosts_equal_one_host(hosts, tmp_path, mode):
    args = COMMON + ["--mode", mode, "--epochs", "4"]
    two = _run(tmp_path / "two-hosts", args, hosts)
    one = _run(tmp_path / "one-host", args, None)
    assert len(two) == len(one) == 4
    # Same world size and ranks, same Gloo reduction order: the numbers match to fp32
    # rounding (in practice bit for bit); a wrong halo or a missing stage would not.
    for e, (a, b) in enumerate(zip(two, one)):
        assert a == pytest.approx(b, rel=1e-6, abs=1e-7), f"epoch {e}: {a} vs {b}"
    assert two[-1] < two[0], f"loss did not fall: {two}"  # it trained at all


@pytest.mark.slow  # ~50 s: two torchrun agents and a one-host reference
def test_torchrun_script_across_two_hosts(hosts, tmp_path):
    # scripts/launch/torchrun.sh's static multi-node rendezvous, run once per host as a
    # user would, gives the same losses as the 4 ranks on one host.
    args = COMMON + ["--mode", "graph", "--epochs", "3"]
    out = tmp_path / "torchrun"
    out.mkdir()
    script = str(Path(__file__).resolve().parents[1] / "scripts" / "launch" / "torchrun.sh")
    procs = []
    for host in (0, 1):
        with open(out / f"host{host}.log", "wb") as log:
            procs.append(subprocess.Popen(
                hosts.exec_prefix(host) + [
                    script, "--nproc-per-node", "2", "--nnodes", "2", "--node-rank", str(host),
                    "--master-addr", hosts.addr[0], "--master-port", "29400",
                    "--iface", hosts.ifname[host], "--", *args, "--out", str(out)],
                env=dict(os.environ, OMP_NUM_THREADS="1",
                         GNNPIPE_VENV=str(Path(sys.executable).parents[1])),
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
    try:
        codes = _wait_all(procs, out, 180)
        text = "\n".join((out / f"host{h}.log").read_text(errors="replace")[-3000:] for h in (0, 1))
        assert codes == [0, 0], f"{codes}\n{text}"
    finally:
        _kill(procs)
    one = _run(tmp_path / "one-host", args, None)
    assert _losses(out) == pytest.approx(one, rel=1e-6, abs=1e-7)


@pytest.mark.slow  # ~30 s
def test_cut_link_fails_both_sides_within_timeout(hosts, tmp_path):
    out = tmp_path / "cut"
    procs = _start(out, COMMON + ["--mode", "pipeline", "--epochs", "100000"], hosts)
    try:
        metrics = out / "metrics.jsonl"
        deadline = time.monotonic() + 120
        while not (metrics.exists() and len(metrics.read_text().splitlines()) >= 2):
            assert time.monotonic() < deadline and all(p.poll() is None for p in procs), \
                f"the run did not reach epoch 1\n{_logs(out)}"
            time.sleep(0.05)
        hosts.cut()
        cut_at = time.monotonic()
        # Every rank waits at most TIMEOUT_S on its silent peer, then up to 4 s for the
        # failure census; rank 0, which hosts the store, lingers up to TIMEOUT_S + 4 s more
        # for the silent side. Allow for a loaded machine on top, but not for a hang.
        codes = _wait_all(procs, out, 2 * TIMEOUT_S + 8 + 20)
        took = time.monotonic() - cut_at
        print(f"all 4 ranks exited {took:.1f} s after the cut (timeout {TIMEOUT_S} s)")
        assert None not in codes, f"ranks still running {took:.0f} s after the cut: {codes}\n{_logs(out)}"
        assert all(c != 0 for c in codes), f"exit codes {codes}\n{_logs(out)}"
        for r in range(4):
            text = (out / f"rank{r}.log").read_text(errors="replace")
            assert "error:" in text and "Traceback" not in text, f"rank {r}:\n{text[-3000:]}"
            # The error names the operation and a peer: timed out, or a closed connection.
            assert "timed out" in text or "closed" in text or "failed" in text, text[-3000:]
            # The census blames the other side: host 0 has no word from ranks 2 and 3;
            # host 1 cannot reach the store, which lives in rank 0 on host 0.
            if r < 2:
                assert "failure census: no failure report" in text and "ranks 2, 3" in text, text[-3000:]
            else:
                assert "failure census: the rendezvous store cannot be reached" in text, text[-3000:]
    finally:
        _kill(procs)
    hosts.__exit__()  # the link is gone; nothing else in this module needs the hosts
