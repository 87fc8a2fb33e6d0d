"""Local ranks of a Python function: real processes, started as a launcher would start them.

What :func:`gnnpipe.launch` (a notebook's or script's ranks), ``gnnpipe-plan calibrate``
(ranks that measure the links) and the tests (real ranks, no mocks) stand on. A caller names
a function ``"package.module:function"`` taking ``(comm, **args)``; the
harness starts ``world_size`` processes the way a user would (a torchrun-like environment
for ``comm="torch"``, the venv's ``mpirun`` for ``comm="mpi"``), each builds its world
communicator with :func:`gnnpipe.comm.init_communicator`, calls the function and saves its
return value with ``torch.save``. :func:`run_ranks` returns the values in rank order or
raises an ``AssertionError`` carrying every rank's stderr tail. :func:`spawn_ranks` hands
back the running processes, for fault tests that kill a rank and watch the others.

Each run lives in a fresh temporary directory::

    args.pt            the keyword arguments (torch.save)
    rank<k>.pid        process id of rank k, written first thing
    rank<k>.pt         rank k's return value, written atomically on success
    rank<k>.stderr     rank k's stdout and stderr (torchrun launch)
    mpirun.stderr      every rank's output, lines prefixed "[k]" (mpirun launch)
    mpirun.stdout
    rendezvous         the torch file store when torch ranks run under mpirun

Children run with ``OMP_NUM_THREADS=1`` (the test machines have two cores shared by every
rank) and in their own process group, which is killed as a whole on timeout.

Run as a module it is the child entry point::

    python -m gnnpipe.spawn MODULE:FUNCTION RUN_DIR --comm torch|mpi [--timeout-s T]
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Mapping

import torch

_STDERR_TAIL = 4000


def _free_port() -> int:
    # The port is free now; rank 0's store binds it a moment later. Another process could
    # take it in between, which is rare enough for tests.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _resolve(fn: str) -> Callable[..., Any]:
    """``"package.module:function"`` or ``"/path/to/script.py:function"`` -> the function.

    A script is imported under a name of its own, not ``__main__``, so its
    ``if __name__ == "__main__":`` block does not run again in every rank.
    """
    module, sep, name = fn.rpartition(":")
    if not sep or not module or not name:
        raise ValueError(f"fn must look like 'package.module:function', got {fn!r}")
    if module.endswith(".py"):
        spec = importlib.util.spec_from_file_location("_gnnpipe_launched_script", module)
        if spec is None or spec.loader is None:
            raise ValueError(f"fn: cannot import {module}")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod  # pickled values of the script's classes find it
        spec.loader.exec_module(mod)
        return getattr(mod, name)
    return getattr(importlib.import_module(module), name)


def _mpirun() -> str:
    path = Path(sys.executable).parent / "mpirun"
    if not path.exists():
        raise FileNotFoundError(f"no mpirun next to {sys.executable}; install the mpich "
                                "wheel into this virtualenv (pip install mpich)")
    return str(path)


def _tail(path: Path, limit: int = _STDERR_TAIL) -> str:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return "(no output)"
    text = data[-limit:].decode(errors="replace")
    return ("…" if len(data) > limit else "") + text


class RankProcesses:
    """Running ranks started by :func:`spawn_ranks`.

    Attributes:
        world_size: number of ranks.
        launcher: ``"torchrun"`` (one process per rank) or ``"mpirun"``.
        run_dir: the run's directory (see the module docstring).
        procs: one ``Popen`` per rank (torchrun) or the single ``mpirun`` ``Popen``.
    """

    def __init__(self, world_size: int, launcher: str, run_dir: Path,
                 procs: list[subprocess.Popen], cleanup: bool) -> None:
        self.world_size = world_size
        self.launcher = launcher
        self.run_dir = run_dir
        self.procs = procs
        self._cleanup = cleanup

    # -- per-rank access

    def pid(self, rank: int, timeout_s: float = 30.0) -> int:
        """Process id of ``rank`` (waits for the child to report it)."""
        path = self.run_dir / f"rank{rank}.pid"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if path.exists() and path.read_text().strip():
                return int(path.read_text())
            if all(p.poll() is not None for p in self.procs):
                break
            time.sleep(0.02)
        raise AssertionError(f"rank {rank} never reported its pid\n{self.report()}")

    def kill_rank(self, rank: int, sig: int = signal.SIGKILL) -> None:
        """Sends ``sig`` to ``rank``'s process only."""
        os.kill(self.pid(rank), sig)

    def wait_file(self, name: str, timeout_s: float = 30.0) -> Path:
        """Waits until a rank creates ``run_dir/name`` (a simple rendezvous for tests)."""
        path = self.run_dir / name
        deadline = time.monotonic() + timeout_s
        while not path.exists():
            if time.monotonic() > deadline or all(p.poll() is not None for p in self.procs):
                raise AssertionError(f"{name} never appeared\n{self.report()}")
            time.sleep(0.02)
        return path

    def stderr(self, rank: int | None = None) -> str:
        """Stderr tail of ``rank`` (torchrun), or of mpirun (every rank's lines)."""
        if self.launcher == "mpirun":
            return _tail(self.run_dir / "mpirun.stderr") + _tail(self.run_dir / "mpirun.stdout")
        return _tail(self.run_dir / f"rank{rank}.stderr")

    # -- lifetime

    def wait(self, timeout_s: float, fail_grace_s: float | None = None) -> list[int | None]:
        """Waits for every process; returns their exit codes (``None``: still running).

        Args:
            timeout_s: overall limit.
            fail_grace_s: once one process has failed, wait at most this much longer for
                the others (they should notice the failure and exit on their own).
        """
        deadline = time.monotonic() + timeout_s
        while True:
            codes = [p.poll() for p in self.procs]
            if all(c is not None for c in codes):
                return codes
            now = time.monotonic()
            if fail_grace_s is not None and any(c not in (None, 0) for c in codes):
                deadline = min(deadline, now + fail_grace_s)
                fail_grace_s = None
            if now > deadline:
                return codes
            time.sleep(0.02)

    def kill(self) -> None:
        """Kills every process this run started, launcher and ranks alike (no zombies)."""
        import psutil

        victims = kill_process_tree([p for p in self.procs if p.poll() is None])
        for k in range(self.world_size):  # ranks that re-parented themselves
            path = self.run_dir / f"rank{k}.pid"
            try:
                pid = int(path.read_text())
                # Only if the pid still belongs to this run (pids get reused).
                if str(self.run_dir) in psutil.Process(pid).cmdline():
                    os.kill(pid, signal.SIGKILL)
            except (FileNotFoundError, ValueError, ProcessLookupError, psutil.Error):
                pass
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        psutil.wait_procs(victims, timeout=5)

    def results(self) -> list[Any]:
        """Every rank's return value, in rank order."""
        out = []
        for k in range(self.world_size):
            path = self.run_dir / f"rank{k}.pt"
            if not path.exists():
                raise AssertionError(f"rank {k} returned no result\n{self.report()}")
            out.append(torch.load(path, weights_only=False))
        return out

    def report(self, codes: list[int | None] | None = None) -> str:
        """Exit codes and stderr tails of every rank, for failure messages."""
        codes = [p.poll() for p in self.procs] if codes is None else codes
        if self.launcher == "mpirun":
            return f"mpirun exit code {codes[0]}\n--- mpirun output ---\n{self.stderr()}"
        parts = []
        for k in range(self.world_size):
            parts.append(f"--- rank {k}: exit code {codes[k]} ---\n{self.stderr(k)}")
        return "\n".join(parts)

    def close(self) -> None:
        """Kills what still runs and removes the run directory (if the harness made it)."""
        self.kill()
        for p in self.procs:
            for f in (p.stdout, p.stderr):
                if f is not None:
                    f.close()
        if self._cleanup:
            shutil.rmtree(self.run_dir, ignore_errors=True)

    def __enter__(self) -> "RankProcesses":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def kill_process_tree(procs: list) -> list:
    """SIGKILL each process's group and every descendant; returns the descendants.

    Hydra's proxy puts itself in a session of its own, out of reach of a signal to mpirun's
    group: every descendant is collected first, then all are killed. The processes must have
    been started with ``start_new_session=True`` (their pid is their group id).
    """
    import psutil

    victims: list = []
    for p in procs:
        try:
            victims += psutil.Process(p.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            pass
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for v in victims:
        try:
            v.kill()
        except psutil.NoSuchProcess:
            pass
    return victims


def spawn_ranks(fn: str, world_size: int, comm: str = "torch",
                args: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None,
                comm_timeout_s: float = 60.0, run_dir: str | Path | None = None,
                launcher: str | None = None) -> RankProcesses:
    """Starts ``world_size`` ranks running ``fn(comm, **args)`` and returns at once.

    Args:
        fn: ``"package.module:function"``, importable in the children.
        world_size: number of ranks (at least 1).
        comm: ``"torch"`` (Gloo, torchrun-like environment with a free ``MASTER_PORT``) or
            ``"mpi"`` (the ``mpirun`` next to ``sys.executable``).
        args: keyword arguments for ``fn`` (anything ``torch.save`` can store).
        env: extra environment variables for the children.
        comm_timeout_s: the communicator's timeout in the children.
        run_dir: directory for the run's files; a fresh temporary one (removed by
            :meth:`RankProcesses.close`) by default.
        launcher: ``"torchrun"`` (the torchrun environment, one ``Popen`` per rank) or
            ``"mpirun"``; by default torchrun for ``comm="torch"`` and mpirun for ``"mpi"``.
            ``comm="torch", launcher="mpirun"`` exercises the torch rendezvous under
            mpirun: a file in the run directory named by ``GNNPIPE_RENDEZVOUS``.

    Returns:
        The :class:`RankProcesses`; use it as a context manager so nothing outlives the test.
    """
    if comm not in ("torch", "mpi"):
        raise ValueError(f"comm must be 'torch' or 'mpi', got {comm!r}")
    if world_size < 1:
        raise ValueError(f"world_size must be at least 1, got {world_size}")
    launcher = launcher or ("torchrun" if comm == "torch" else "mpirun")
    if launcher not in ("torchrun", "mpirun") or (comm, launcher) == ("mpi", "torchrun"):
        raise ValueError(f"cannot run comm={comm!r} under launcher={launcher!r}")
    _resolve(fn)  # fail here, in the test, rather than in every child
    cleanup = run_dir is None
    rdir = Path(tempfile.mkdtemp(prefix="gnnpipe-ranks-") if run_dir is None else run_dir)
    rdir.mkdir(parents=True, exist_ok=True)
    torch.save(dict(args or {}), rdir / "args.pt")

    base = {k: v for k, v in os.environ.items()
            if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                         "MASTER_ADDR", "MASTER_PORT", "PMI_RANK", "PMI_SIZE")}
    base.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    base.update(env or {})
    child = [sys.executable, "-m", "gnnpipe.spawn", fn, str(rdir), "--comm", comm,
             "--timeout-s", str(comm_timeout_s)]
    procs: list[subprocess.Popen] = []
    try:
        if launcher == "torchrun":
            port = str(_free_port())
            for k in range(world_size):
                cenv = dict(base, RANK=str(k), WORLD_SIZE=str(world_size), LOCAL_RANK=str(k),
                            LOCAL_WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1",
                            MASTER_PORT=port)
                with open(rdir / f"rank{k}.stderr", "wb") as err:
                    procs.append(subprocess.Popen(child, env=cenv, stdout=err,
                                                  stderr=subprocess.STDOUT,
                                                  start_new_session=True))
        else:
            # Hydra's mpirun works as root here without extra flags; -prepend-rank marks
            # every output line with its rank.
            cmd = [_mpirun(), "-prepend-rank", "-np", str(world_size)] + child
            if comm == "torch":
                base["GNNPIPE_RENDEZVOUS"] = str(rdir / "rendezvous")
            with open(rdir / "mpirun.stdout", "wb") as out, \
                    open(rdir / "mpirun.stderr", "wb") as err:
                procs.append(subprocess.Popen(cmd, env=base, stdout=out, stderr=err,
                                              start_new_session=True))
    except BaseException:
        RankProcesses(world_size, launcher, rdir, procs, cleanup).close()
        raise
    return RankProcesses(world_size, launcher, rdir, procs, cleanup)


def run_ranks(fn: str, world_size: int, comm: str = "torch",
              args: Mapping[str, Any] | None = None, timeout_s: float = 120.0,
              env: Mapping[str, str] | None = None, comm_timeout_s: float = 60.0,
              fail_grace_s: float = 15.0, launcher: str | None = None) -> list[Any]:
    """Runs ``fn(comm, **args)`` on ``world_size`` real ranks and returns their results.

    Args:
        fn: ``"package.module:function"``; the function takes the world communicator and
            the keyword arguments and returns anything ``torch.save`` can store.
        world_size: number of ranks.
        comm: ``"torch"`` or ``"mpi"``.
        args: keyword arguments for ``fn``.
        timeout_s: limit for the whole run; then every process is killed.
        env: extra environment variables for the children.
        comm_timeout_s: the communicator's timeout in the children.
        fail_grace_s: after one rank fails, how long the others get to exit by themselves.
        launcher: see :func:`spawn_ranks`.

    Returns:
        The return values, in rank order.

    Raises:
        AssertionError: a rank exited non-zero or the run timed out; the message holds every
            rank's exit code and stderr tail.
    """
    with spawn_ranks(fn, world_size, comm, args, env, comm_timeout_s,
                     launcher=launcher) as ranks:
        codes = ranks.wait(timeout_s, fail_grace_s=fail_grace_s)
        if any(c is None for c in codes):
            ranks.kill()
            raise AssertionError(
                f"{fn} on {world_size} {comm} ranks did not finish within {timeout_s:.0f} s "
                f"(killed)\n{ranks.report(codes)}"
            )
        if any(c != 0 for c in codes):
            raise AssertionError(f"{fn} on {world_size} {comm} ranks failed\n"
                                 f"{ranks.report(codes)}")
        return ranks.results()


def _child_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gnnpipe.spawn")
    parser.add_argument("fn")
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--comm", choices=("torch", "mpi"), required=True)
    parser.add_argument("--timeout-s", type=float, default=60.0)
    a = parser.parse_args(argv)

    from gnnpipe.comm import detect_launch, init_communicator

    launch = detect_launch()
    rank = launch.rank
    (a.run_dir / f"rank{rank}.pid.tmp").write_text(str(os.getpid()))
    os.replace(a.run_dir / f"rank{rank}.pid.tmp", a.run_dir / f"rank{rank}.pid")
    try:
        fn = _resolve(a.fn)
        args = torch.load(a.run_dir / "args.pt", weights_only=False)
        comm = init_communicator(a.comm, timeout_s=a.timeout_s)
        result = fn(comm, **args)
        tmp = a.run_dir / f"rank{rank}.pt.tmp"
        torch.save(result, tmp)
        os.replace(tmp, a.run_dir / f"rank{rank}.pt")
        comm.close()
    except BaseException:
        sys.stderr.write(f"rank {rank}: {a.fn} failed:\n{traceback.format_exc()}")
        sys.stderr.flush()
        # Skip interpreter teardown: finalising MPI or destroying a process group with a
        # failed peer can block, and the other ranks learn of the failure from our exit.
        os._exit(1)
    from gnnpipe.comm import exit_process

    exit_process(0)  # skip interpreter teardown: it can abort after a clean run
    return 0


if __name__ == "__main__":
    sys.exit(_child_main())
