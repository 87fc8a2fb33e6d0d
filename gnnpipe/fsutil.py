"""Atomic directory writes shared by every on-disk format (graphs, plans).

Pure filesystem code: no torch, no communication.
"""

from __future__ import annotations

import os
import shutil
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from gnnpipe._base import GnnpipeError


@contextmanager
def atomic_directory(path: str | os.PathLike, force: bool = False) -> Iterator[Path]:
    """Yield a temporary sibling directory that replaces ``path`` when the block succeeds.

    Refuses an existing ``path`` unless ``force``. On any failure (an exception, Ctrl-C)
    the temporary directory is removed and ``path`` is left as it was; with ``force`` the old
    directory is moved aside first and put back if the final rename does not happen, so the
    path always holds a complete directory. Write the file that marks completeness last.
    """
    path = Path(path)
    if path.exists() and not force:
        raise GnnpipeError(f"{path}: output directory exists (use --force to replace it)")
    parent = path.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise GnnpipeError(f"{parent}: cannot create output directory ({e.strerror})") from None
    tmp = parent / f".{path.name}.tmp-{uuid.uuid4().hex[:8]}"
    try:
        try:
            tmp.mkdir()
        except OSError as e:
            raise GnnpipeError(f"{parent}: output directory not writable ({e.strerror})") from None
        yield tmp
        if path.exists():
            old = parent / f".{path.name}.old-{uuid.uuid4().hex[:8]}"
            path.rename(old)
            try:
                tmp.rename(path)
            except BaseException:
                old.rename(path)
                raise
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(path)
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
