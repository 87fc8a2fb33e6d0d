"""Checking that a prepared dataset's arrays still hash to ``meta.json``'s content hash.

Plans and checkpoints are tied to a dataset by that hash, so an array edited after
``prepare`` would pass both checks and train on other data. Recomputing the hash streams
every array once (sha256 over memory-mapped blocks, about 1-2 s per GB); the result is
cached in ``<dataset>/.verified.json`` keyed by every file's size and mtime, so a run on an
unchanged dataset pays one ``stat`` per file. The cache is only a shortcut: a key that does
not match (any file rewritten, touched or resized) means hashing again.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from pathlib import Path

from gnnpipe._base import GnnpipeError
from gnnpipe.data.graph import META_FILE, read_meta

log = logging.getLogger(__name__)

CACHE_FILE = ".verified.json"


def _key(path: Path, meta: dict) -> dict[str, list[int]]:
    """``{file: [size, mtime_ns]}`` for meta.json and every array file it lists."""
    names = [META_FILE, *sorted(meta.get("files", []))]
    key = {}
    for n in names:
        try:
            st = (path / n).stat()
        except OSError:
            return {}
        key[n] = [st.st_size, st.st_mtime_ns]
    return key


def verify_dataset(path: str | os.PathLike, graph, meta: dict | None = None) -> bool:
    """Refuse a prepared dataset whose arrays no longer hash to its recorded content hash.

    Args:
        path: the prepared graph directory ``graph`` was loaded from.
        graph: the loaded :class:`~gnnpipe.data.graph.Graph` (memory-mapped is fine).
        meta: its parsed ``meta.json`` (read again when None).

    Returns:
        True when the hash was recomputed, False when the cache vouched for it.

    Raises:
        GnnpipeError: the arrays hash to something else (both hashes named, and the way out).
    """
    path = Path(path)
    meta = meta if meta is not None else read_meta(path)
    want = meta.get("content_hash")
    key = _key(path, meta)
    cache = path / CACHE_FILE
    try:
        cached = json.loads(cache.read_text())
        if key and cached.get("key") == key and cached.get("content_hash") == want:
            return False
    except (OSError, ValueError, AttributeError):
        pass
    actual = graph.compute_hash()
    if actual != want:
        raise GnnpipeError(f"dataset {path}: content hash mismatch: meta.json says {want}, the arrays hash to "
                           f"{actual} (a file changed after prepare); prepare it again, or pass "
                           "--no-verify-data to train on it anyway")
    try:  # a dataset written before save() checked its content: checked once, then cached
        graph.check_content()
    except GnnpipeError as e:
        raise GnnpipeError(f"dataset {path}: {e}") from None
    if key:
        # Best effort (a read-only dataset folder just hashes every time); a unique temp
        # name and a rename, since every rank of a run may get here at once.
        tmp = path / f"{CACHE_FILE}.{uuid.uuid4().hex[:8]}.tmp"
        try:
            tmp.write_text(json.dumps({"key": key, "content_hash": want}) + "\n")
            os.replace(tmp, cache)
        except OSError as e:
            log.debug("cannot cache the verified hash in %s (%s)", cache, e)
            try:
                tmp.unlink()
            except OSError:
                pass
    return True
