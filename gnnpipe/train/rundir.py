"""Run directories: who may write into ``--out``, and metrics that survive a full disk.

Rules (rank 0 applies them before any data is loaded; every rank learns the outcome through
the same agreement as setup errors, so no rank waits out the timeout):

* rank 0 alone chooses the default name ``runs/<mode>-<model>-<time>`` (``-2``, ``-3`` ...
  when that exists) and broadcasts it: ranks whose clocks straddle a second agree anyway;
* the run holds an advisory lock (``fcntl.flock``) on ``<out>/.gnnpipe.lock`` for its whole
  life, and writes its pid there; a second run on the directory refuses at once, naming it;
* a directory holding a run's outputs (``config.json``, ``metrics.jsonl``, ``summary.json``,
  ``checkpoints/``, ``actions/``) is refused unless ``--resume`` continues that very run, or
  ``--overwrite`` says to delete exactly those outputs and start afresh;
* a file, a path under a file, a read-only place, or a ``config.json`` no run wrote is
  refused with one line (other files in the directory are left alone).

:class:`MetricsFile` appends each epoch's line with one ``os.write``; a write that fails or
falls short is cut back to the previous size, so ``metrics.jsonl`` only ever holds whole lines.

Pure filesystem code plus one broadcast through the communicator it is given.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import shutil
import time
from pathlib import Path

import torch

from gnnpipe._base import GnnpipeError
from gnnpipe.fsutil import atomic_write_bytes, describe, is_system_path, protected_reason
from gnnpipe.roots import run_root
from gnnpipe.train.guards import agree_on_setup

log = logging.getLogger("gnnpipe.rundir")

LOCK_FILE = ".gnnpipe.lock"
#: What a run writes into its directory; ``--overwrite`` removes exactly these.
RUN_OUTPUTS = ("config.json", "metrics.jsonl", "summary.json", "checkpoints", "actions")
#: Bytes of the broadcast run-directory path (Linux's PATH_MAX).
_PATH_BYTES = 4096


class RunLock:
    """The advisory lock of a run directory, held until :meth:`release` or process exit."""

    def __init__(self, path: Path, fd: int, created: list[Path] | None = None) -> None:
        self.path = path
        self.fd = fd
        self.created = created or []  # folders this run made, innermost first

    def release(self) -> None:
        """Drop the lock; a directory this run created and left empty (setup failed) goes too,
        so a refused run leaves nothing behind."""
        if self.fd < 0:
            return
        d = self.path.parent
        if self.created:
            try:
                if {p.name for p in d.iterdir()} == {LOCK_FILE}:
                    self.path.unlink()
                    for folder in self.created:  # d first, then parents made for it (runs/)
                        folder.rmdir()
            except OSError:
                pass  # not empty (someone else's files): left as it is
        if self.fd >= 0:
            try:
                os.close(self.fd)  # closing the descriptor drops the flock
            except OSError:
                pass
            self.fd = -1


def _why(e: OSError) -> str:
    return "no space left on device" if e.errno == errno.ENOSPC else (e.strerror or str(e))


def _file_ancestor(path: Path) -> Path | None:
    """The first ancestor of ``path`` that exists and is not a directory, if any."""
    for anc in [path, *path.parents]:
        if anc.exists():
            return None if anc.is_dir() else anc
    return None


def default_run_dir(mode: str, model: str, root: Path | None = None) -> Path:
    """``<root>/<mode>-<model>-<time>``, with ``-2``, ``-3`` ... when that name is taken;
    ``root`` defaults to :func:`gnnpipe.roots.run_root` (``$GNNPIPE_RUN_ROOT``, else ``./runs``)."""
    base = (run_root() if root is None else root) / f"{mode}-{model}-{time.strftime('%Y%m%d-%H%M%S')}"
    cand, k = base, 2
    while cand.exists() or cand.is_symlink():
        cand = base.with_name(f"{base.name}-{k}")
        k += 1
    return cand


def claim_run_dir(out: Path, resuming_here: bool, overwrite: bool) -> RunLock:
    """Create (if needed), lock and check a run directory; rank 0 only.

    Args:
        out: the run directory.
        resuming_here: ``--resume`` continues the run that lives in ``out``.
        overwrite: ``--overwrite``: delete the outputs of an earlier run in ``out``.

    Returns:
        The held lock.

    Raises:
        GnnpipeError: one line naming ``out``, what is there and the way out.
    """
    if overwrite and resuming_here:
        raise GnnpipeError(f"--out {out}: --overwrite would delete the checkpoints --resume continues "
                           "from; give one of them")
    # A system or working directory is refused whatever it holds, before anything (the lock
    # file included) is written there.
    if out.is_dir() and is_system_path(out):
        raise GnnpipeError(f"--out {out}: a system or working directory; choose a folder of its own for the run")
    why = protected_reason(out)
    if why is not None:
        raise GnnpipeError(f"--out {out}: {why}; a run's files must not go there, choose a folder of its own")
    if (out.exists() or out.is_symlink()) and not out.is_dir():
        raise GnnpipeError(f"--out {out}: exists and is {describe(out)}; a run needs a directory "
                           "(gnnpipe never writes over a file), choose another --out")
    blocker = _file_ancestor(out)
    if blocker is not None:
        raise GnnpipeError(f"--out {out}: cannot be created, {blocker} is {describe(blocker)}; "
                           "choose another --out")
    created = [p for p in [out, *out.parents] if not p.exists()]
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise GnnpipeError(f"--out {out}: cannot create the run directory ({_why(e)})") from None
    lock_path = out / LOCK_FILE
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        for folder in created:
            _rmdir_quiet(folder)
        raise GnnpipeError(f"--out {out}: cannot write there ({_why(e)}); choose another --out") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        os.close(fd)
        if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise GnnpipeError(f"--out {out}: cannot lock {lock_path} ({_why(e)})") from None
        holder = _read_pid(lock_path)
        raise GnnpipeError(f"--out {out}: in use by another run (pid {holder} holds {lock_path}); "
                           "wait for it to finish or choose another --out") from None
    lock = RunLock(lock_path, fd, created)
    try:
        # The pid first, so that a run refused a moment later can name the holder.
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError as e:
            raise GnnpipeError(f"--out {out}: cannot write {lock_path} ({_why(e)}); choose another --out") from None
        _check_contents(out, resuming_here, overwrite)
    except BaseException:
        lock.release()  # removes the directory again if this call created it
        raise
    return lock


def _check_contents(out: Path, resuming_here: bool, overwrite: bool) -> None:
    """Refuse (or, with ``overwrite``, empty) a directory that holds another run's outputs.

    Other files (a launcher's log, say) are left alone and do not stop the run: it adds only
    :data:`RUN_OUTPUTS`, and those must not exist unless they are this run's to continue.
    """
    if is_system_path(out):  # (claim_run_dir refuses it first; kept for other callers)
        raise GnnpipeError(f"--out {out}: a system or working directory; choose a folder of its own for the run")
    names = {p.name for p in out.iterdir()} - {LOCK_FILE}
    outputs = sorted(names & set(RUN_OUTPUTS))
    if not outputs or resuming_here:
        return
    if "config.json" in outputs and not _is_run_config(out / "config.json"):
        raise GnnpipeError(f"--out {out}: holds a config.json that no gnnpipe run wrote; gnnpipe will not "
                           "replace it, choose another --out")
    if not overwrite:
        state = "a finished run (summary.json)" if "summary.json" in names else \
            f"an unfinished run ({', '.join(outputs)})"
        # --resume needs a committed checkpoint: offer it only where one may be.
        resume = f"--resume {out} continues it, " if "checkpoints" in names else ""
        raise GnnpipeError(f"--out {out}: holds {state}; {resume}--overwrite deletes its "
                           f"{', '.join(RUN_OUTPUTS)} and starts afresh, or choose another --out")
    for name in outputs:
        p = out / name
        try:
            shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
        except OSError as e:
            raise GnnpipeError(f"--out {out}: --overwrite could not remove {p} ({_why(e)})") from None
    log.info("--overwrite: removed %s from %s", ", ".join(outputs), out)


def _is_run_config(path: Path) -> bool:
    """Whether ``path`` is a ``config.json`` written by :func:`gnnpipe.train.loop.train`."""
    try:
        obj = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(obj, dict) and "world_size" in obj and "dataset_hash" in obj


def _read_pid(lock_path: Path) -> str:
    try:
        text = lock_path.read_text().strip()
    except OSError:
        return "unknown"
    return text if text.isdigit() else "unknown"


def _rmdir_quiet(p: Path) -> None:
    try:
        p.rmdir()
    except OSError:
        pass


def open_run_dir(comm, cfg, resume_run: Path | None) -> tuple[Path, RunLock | None]:
    """The run directory every rank uses, claimed and locked by rank 0 (collective).

    Args:
        comm: the world communicator.
        cfg: the resolved config (``out``, ``mode``, ``model``, ``overwrite``).
        resume_run: the run directory ``--resume`` points into, if any (the default ``--out``).

    Returns:
        ``(out, lock)``: the same ``out`` on every rank; ``lock`` on rank 0, else None.

    Raises:
        SetupError (every rank): rank 0 could not claim the directory; rank 0 reports it.
    """
    err: GnnpipeError | None = None
    lock = None
    out = None
    if comm.rank == 0:
        try:
            out = Path(cfg.out) if cfg.out else resume_run if resume_run else default_run_dir(cfg.mode, cfg.model)
            if len(str(out).encode()) >= _PATH_BYTES:
                raise GnnpipeError(f"--out: path of {len(str(out).encode())} bytes, expected under {_PATH_BYTES}")
            here = resume_run is not None and out.exists() and out.resolve() == Path(resume_run).resolve()
            lock = claim_run_dir(out, here, bool(getattr(cfg, "overwrite", False)))
        except GnnpipeError as e:
            err = e
    agree_on_setup(comm, err)
    if comm.world_size > 1:
        msg = torch.zeros(_PATH_BYTES, dtype=torch.uint8)
        if comm.rank == 0:
            data = str(out).encode()
            msg[: len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        comm.broadcast(msg, src=0, category="control")
        out = Path(bytes(msg.tolist()).rstrip(b"\0").decode())
    return out, lock


class MetricsWriteError(GnnpipeError):
    """``metrics.jsonl`` could not take an epoch's line; every rank raises it together."""


def append_metrics(comm, mfile: "MetricsFile | None", rec: dict) -> None:
    """Rank 0 appends ``rec`` as one line; every rank learns whether that worked (collective).

    One 8-byte all-reduce per epoch (category ``metrics``, not counted in ``bytes_sent``), so
    that a full disk on rank 0 stops every rank at once with one message, instead of rank 0
    exiting and the others finding a dead peer.

    Raises:
        MetricsWriteError: on every rank when rank 0's write failed (its message on rank 0).
    """
    err: GnnpipeError | None = None
    if mfile is not None:
        try:
            mfile.write(json.dumps(rec) + "\n")
        except GnnpipeError as e:
            err = e
    if comm.world_size > 1:
        t = torch.tensor([1 if err is not None else 0], dtype=torch.int64)
        comm.all_reduce(t, op="max", category="metrics")
        if int(t) and err is None:
            raise MetricsWriteError(f"rank 0 could not append epoch {rec.get('epoch')} to metrics.jsonl")
    if err is not None:
        raise MetricsWriteError(str(err)) from None


class MetricsFile:
    """``metrics.jsonl`` written one whole line at a time (rank 0).

    Each :meth:`write` is one ``os.write`` on an ``O_APPEND`` descriptor; if it fails or
    falls short (a full disk), the file is truncated back to its previous size and a
    one-line :class:`GnnpipeError` names the path. ``flush`` and ``close`` as a file's.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        try:
            self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        except OSError as e:
            raise GnnpipeError(f"{self.path}: cannot write the metrics ({_why(e)})") from None

    def write(self, text: str) -> None:
        data = text.encode()
        size = os.fstat(self.fd).st_size
        try:
            n = os.write(self.fd, data)
            if n != len(data):
                raise OSError(errno.ENOSPC, f"wrote {n} of {len(data)} bytes")
        except OSError as e:
            try:
                os.ftruncate(self.fd, size)
            except OSError:
                pass
            raise GnnpipeError(f"{self.path}: could not append the epoch's metrics ({_why(e)}); "
                               "the file keeps its complete lines") from None

    def flush(self) -> None:
        """Nothing is buffered: each line went to the kernel in one write."""

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def write_json_atomic(path: Path, obj: dict) -> None:
    """``obj`` as JSON through a temp file and a rename; on failure one line, no temp left."""
    atomic_write_bytes(path, (json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n").encode())


class ActionLog:
    """``--profile-actions``: this rank's ``<out>/actions/rank<k>.jsonl``, one line per epoch.

    Each line holds the epoch, the rank's place in the layout (way, stage), its epoch's
    ``compute_s``/``comm_s``/``bubble_s``, its process's CPU seconds over the epoch (``cpu_s``:
    below ``compute_s`` when the rank shared a core) and, on pipeline stages, seconds by kind of work
    (:data:`gnnpipe.parallel.executor.ACTION_KINDS`). Every rank writes its own file, so
    nothing is communicated; a write that fails (a full disk) is reported once and
    profiling stops on that rank, training goes on. A resumed run appends.
    """

    def __init__(self, out: Path, rank: int, append: bool = False) -> None:
        self.path = Path(out) / "actions" / f"rank{rank}.jsonl"
        self.rank = rank
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.f = open(self.path, "a" if append else "w")
        except OSError as e:
            log.warning("--profile-actions: cannot write %s (%s); not profiling rank %d", self.path, _why(e), rank)
            self.f = None

    def write(self, epoch: int, ex, res) -> None:
        if self.f is None:
            return
        dims = ex.dims
        way, stage = dims.coords(self.rank)
        rec = {"epoch": epoch, "rank": self.rank, "mode": dims.mode, "way": way, "stage": stage,
               "compute_s": res.compute_s, "comm_s": res.comm_s, "bubble_s": res.bubble_s,
               "cpu_s": res.cpu_s, "actions": dict(res.actions)}
        try:
            self.f.write(json.dumps(rec) + "\n")
            self.f.flush()
        except OSError as e:
            log.warning("--profile-actions: writing %s failed (%s); profiling of rank %d stops", self.path, _why(e),
                        self.rank)
            self.close()

    def close(self) -> None:
        if self.f is not None:
            try:
                self.f.close()
            except OSError:
                pass
            self.f = None
