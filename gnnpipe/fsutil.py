"""Atomic directory writes shared by every on-disk format (graphs, plans), and the rules
for what gnnpipe may replace.

Ownership: ``--force`` replaces only a directory that is recognisably a gnnpipe output of
the kind being written (a dataset with its ``meta.json``, a plan with its ``META.json``, an
empty directory), never a plain file, a symlink, a foreign directory or a system path.
Pure filesystem code: no torch, no communication.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import shutil
import unicodedata
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from gnnpipe._base import GnnpipeError

log = logging.getLogger(__name__)

#: Output kinds and the file whose content identifies a directory as one of ours.
#: ``format`` is the value of that JSON file's "format" field (None: any JSON object).
OUTPUT_KINDS = {
    "dataset": ("meta.json", "gnnpipe-graph", "a prepared gnnpipe dataset"),
    "plan": ("META.json", "gnnpipe-partition", "a gnnpipe partition plan"),
}


def _marker_format(path: Path, marker: str) -> str | None:
    """The "format" field of ``path/marker`` if it is a JSON object, else None."""
    try:
        with open(path / marker) as fh:
            obj = json.load(fh)
    except (OSError, ValueError):
        return None
    if not isinstance(obj, dict):
        return None
    fmt = obj.get("format")
    return fmt if isinstance(fmt, str) else None


def describe(path: Path) -> str:
    """A few words on what is at ``path`` (for refusals)."""
    if path.is_symlink():
        return "a symbolic link"
    if path.is_file():
        return "a file"
    if path.is_dir():
        try:
            n = sum(1 for _ in path.iterdir())
        except OSError:
            return "an unreadable directory"
        return "an empty directory" if n == 0 else f"a directory of {n} {'entry' if n == 1 else 'entries'}"
    return "something that is neither a file nor a directory"


def is_system_path(path: Path) -> bool:
    """``/``, a top-level folder (``/usr``, ``/tmp``), the home directory, or a folder that
    holds the current directory: never an output of ours, whatever its content."""
    try:
        r = path.resolve()
    except (OSError, RuntimeError):
        return True
    if len(r.parts) <= 2:
        return True
    home = Path.home().resolve() if "HOME" in os.environ else None
    if home is not None and r == home:
        return True
    try:
        cwd = Path.cwd().resolve()
    except OSError:
        return False
    return r == cwd or r in cwd.parents


def protected_reason(path: Path, include_self: bool = True) -> str | None:
    """Why ``path`` must not receive a command's outputs, or None.

    Inside a prepared dataset or a partition plan (their content hashes and manifests would
    no longer describe them), inside the installed gnnpipe package, or a checkout's own root
    (a folder holding ``.git``; its ``runs/`` or ``results/`` are fine). With
    ``include_self`` False only what lies above ``path`` counts (a writer that replaces its
    own kind of output, e.g. ``--force`` over a plan, checks ``path`` itself its own way)."""
    try:
        r = Path(path).resolve()
    except (OSError, RuntimeError):
        return None
    package = Path(__file__).resolve().parent
    if r == package or package in r.parents:
        return f"inside the gnnpipe package ({package})"
    for anc in ([r] if include_self else []) + list(r.parents):
        for kind, (_, _, what) in OUTPUT_KINDS.items():
            if is_our_output(anc, kind):
                return f"inside {what} ({anc})"
    if include_self and (r / ".git").exists():
        return "the root of a source checkout"
    return None


def is_our_output(path: Path, kind: str) -> bool:
    """Whether ``path`` is a directory gnnpipe wrote as ``kind`` (see :data:`OUTPUT_KINDS`)."""
    marker, fmt, _ = OUTPUT_KINDS[kind]
    return (path.is_dir() and not path.is_symlink()
            and _marker_format(path, marker) == fmt)


def check_replaceable(path: str | os.PathLike, kind: str, force: bool) -> None:
    """Refuse an existing ``path`` that this write may not replace.

    A missing path is fine. An existing one is replaced only with ``force`` and only when it
    is an empty directory or :func:`is_our_output` of ``kind``; the refusal says what is there.

    Raises:
        GnnpipeError: one line naming the path, what is there and why it stays.
    """
    path = Path(path)
    why = protected_reason(path, include_self=False)
    if why is not None:
        raise GnnpipeError(f"{path}: {why}; gnnpipe writes no output there, choose another output path")
    if not path.exists() and not path.is_symlink():
        for anc in path.parents:  # fail now, not after a long load, when it cannot be made
            if anc.exists():
                if not anc.is_dir():
                    raise GnnpipeError(f"{path}: cannot be created, {anc} is {describe(anc)}; "
                                       "choose another output path")
                break
        return
    what = OUTPUT_KINDS[kind][2]
    here = describe(path)
    if is_system_path(path):
        raise GnnpipeError(f"{path}: a system or working directory ({here}); gnnpipe never replaces it, "
                           "choose another output path")
    ours = is_our_output(path, kind)
    if not (ours or here == "an empty directory"):
        raise GnnpipeError(f"{path}: exists and is {here}, not {what}; gnnpipe will not replace it "
                           "(--force replaces only its own outputs), choose another output path")
    if not force:
        raise GnnpipeError(f"{path}: output directory exists (use --force to replace it)")


def safe_name(name: Any, where: str) -> str:
    """A dataset name read from a file, checked before it becomes part of a path.

    Raises:
        GnnpipeError: ``name`` is not a non-empty string, is ``.``/``..``, holds a path
            separator or a control character, or is longer than 200 characters.
    """
    ok = (isinstance(name, str) and 0 < len(name) <= 200 and name not in (".", "..")
          and not any(c in name for c in ("/", "\\"))
          and not any(unicodedata.category(c).startswith("C") for c in name))
    if not ok:
        raise GnnpipeError(f"{where}: dataset name {name!r} cannot name a folder (expected a non-empty "
                           "name without '/', '\\', '..' or control characters)")
    return name


def write_error(path: Path, e: BaseException) -> GnnpipeError:
    """One line for a failed write (``OSError`` or torch's ``RuntimeError``)."""
    if isinstance(e, OSError):
        why = e.strerror or str(e)
        if e.errno == errno.ENOSPC:
            why = "no space left on device"
    else:
        why = (str(e).strip().splitlines() or [type(e).__name__])[0]
    return GnnpipeError(f"{path}: write failed ({why}); nothing was written")


def atomic_write_bytes(path: Path, data: bytes) -> Path:
    """``data`` into ``path`` through a temp file, fsync and rename: a crash leaves the old
    file or none. On failure one line naming the path, and no temp file is left."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as e:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise write_error(path, e) from None
    return path


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: alive
        return True
    return True


def sweep_stale(path: Path) -> list[Path]:
    """Remove what a killed writer of ``path`` left beside it (:func:`atomic_directory`'s
    ``.NAME.tmp-PID-*`` and ``.NAME.old-PID-*`` of a pid that no longer runs): a temporary
    is deleted; an old copy is deleted when ``path`` exists, else put back as ``path`` (the
    writer died between its two renames). Returns what it removed or restored."""
    parent, done = path.parent, []
    if not parent.is_dir():
        return done
    pat = re.compile(rf"^\.{re.escape(path.name)}\.(tmp|old)-(\d+)-[0-9a-f]{{8}}$")
    for p in sorted(parent.iterdir()):
        m = pat.match(p.name)
        if not m or not p.is_dir() or p.is_symlink() or _pid_alive(int(m.group(2))):
            continue
        if m.group(1) == "old" and not path.exists():
            p.rename(path)
        else:
            shutil.rmtree(p, ignore_errors=True)
        log.info("removed %s, left by a writer (pid %s) that no longer runs", p, m.group(2))
        done.append(p)
    return done


@contextmanager
def atomic_directory(path: str | os.PathLike, force: bool = False, kind: str = "dataset") -> Iterator[Path]:
    """Yield a temporary sibling directory that replaces ``path`` when the block succeeds.

    Refuses an existing ``path`` unless ``force`` and it is a gnnpipe output of ``kind``
    (:func:`check_replaceable`). On any failure (an exception, Ctrl-C, a full disk) the
    temporary directory is removed and ``path`` is left as it was; with ``force`` the old
    directory is moved aside first and put back if the final rename does not happen, so the
    path always holds a complete directory. Write the file that marks completeness last.

    Raises:
        GnnpipeError: a refused ``path``, or a write that failed with ``OSError`` (one line
            naming ``path``; nothing partial is left).
    """
    path = Path(path)
    sweep_stale(path)
    check_replaceable(path, kind, force)
    parent = path.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise GnnpipeError(f"{parent}: cannot create output directory ({e.strerror})") from None
    # The writer's pid is in the name, so a later run can tell a dead writer's leftovers.
    tmp = parent / f".{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        try:
            tmp.mkdir()
        except OSError as e:
            raise GnnpipeError(f"{parent}: output directory not writable ({e.strerror})") from None
        try:
            yield tmp
        except OSError as e:  # a full disk, a quota: one line, and the finally cleans up
            raise write_error(path, e) from None
        # Checked again: something may have appeared at path while we wrote.
        check_replaceable(path, kind, force)
        if path.exists():
            old = parent / f".{path.name}.old-{os.getpid()}-{uuid.uuid4().hex[:8]}"
            path.rename(old)
            try:
                tmp.rename(path)
            except BaseException:
                old.rename(path)
                raise
            shutil.rmtree(old, ignore_errors=True)
        else:
            try:
                tmp.rename(path)
            except OSError as e:
                raise write_error(path, e) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def json_default(o: Any) -> Any:
    """``json.dump(default=...)`` for numpy scalars and arrays and paths in metadata."""
    import numpy as np

    if isinstance(o, np.bool_):
        return bool(o)
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")
