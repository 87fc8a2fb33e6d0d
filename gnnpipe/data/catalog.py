"""The dataset catalogue: one TOML card per dataset, and ``prepare`` to build the graph.

A card (``gnnpipe/data/cards/<name>.toml``, shipped as package data; another folder through
the ``GNNPIPE_CATALOG`` environment variable) looks like::

    name = "cora"                  # equals the file stem and the raw folder's name
    title = "Cora"
    format = "planetoid"           # a loader in gnnpipe.data.loaders (see FORMATS)
    source = "kimiyoung/planetoid, data/ (https://github.com/kimiyoung/planetoid)"
    licence = "MIT"

    [options]                      # keyword arguments for the loader (prefix, filename, scheme)
    prefix = "cora"

    [expected]                     # checked after loading; each count is optional
    nodes = 2708
    edges = 10556                  # directed: symmetric, no self-loops, no duplicates
    features = 1433
    classes = 7

    [[files]]                      # one entry per raw file, path relative to the raw folder
    name = "ind.cora.x"
    sha256 = "23cf..."             # optional; a pickle without one is refused

Prepared graphs live under the data root (``GNNPIPE_DATA_ROOT``, default ``./datasets`` of
the current directory; see :mod:`gnnpipe.roots`) as ``<root>/<name>/`` in the :class:`~gnnpipe.data.graph.Graph`
directory format; ``meta.json`` records the card, the split and every raw file's sha256.
"""

from __future__ import annotations

import hashlib
import inspect
import logging
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gnnpipe import roots
from gnnpipe._base import GnnpipeError
from gnnpipe.fsutil import check_replaceable
from gnnpipe.data.graph import META_FILE, Graph, read_meta
from gnnpipe.data.loaders import FORMATS, loader_for

log = logging.getLogger(__name__)

COUNT_FIELDS = ("nodes", "edges", "features", "classes")
_SHA_RE = re.compile(r"^[0-9a-f]{64}$")
_NAME_RE = re.compile(r"^[a-z0-9_]+$")


#: The shipped cards: package data, found wherever the package is installed.
CARDS_DIR = Path(__file__).resolve().parent / "cards"


def catalog_dir() -> Path:
    """The folder of cards: ``$GNNPIPE_CATALOG`` or the package's ``gnnpipe/data/cards``."""
    env = os.environ.get("GNNPIPE_CATALOG")
    return Path(env) if env else CARDS_DIR


def default_raw_root() -> Path:
    """Where raw dataset folders are looked for: :func:`gnnpipe.roots.raw_root`
    (``$GNNPIPE_DATASETS``, else ``<data root>/raw``)."""
    return roots.raw_root()


def default_data_root() -> Path:
    """Where prepared graphs are written: :func:`gnnpipe.roots.data_root`
    (``$GNNPIPE_DATA_ROOT``, else ``./datasets`` of the current directory)."""
    return roots.data_root()


@dataclass(frozen=True)
class Card:
    """One catalogue entry (see the module docstring for the TOML layout).

    Args:
        name: snake_case id, equal to the card's file stem and the raw folder's name.
        title: human name.
        format: loader name, one of :data:`gnnpipe.data.loaders.FORMATS`.
        source: where the raw files come from (repository or URL, as text).
        licence: the publisher's licence, as text.
        files: raw file path (relative to the raw folder) -> sha256, or ``None`` if unknown.
        expected: subset of ``nodes``, ``edges`` (directed), ``features``, ``classes``.
        options: keyword arguments for the loader.
        path: the card file.
    """

    name: str
    title: str
    format: str
    source: str
    licence: str
    files: dict[str, str | None]
    expected: dict[str, int]
    options: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None

    @property
    def sha256(self) -> str:
        """sha256 of the card file itself (recorded in provenance)."""
        return hashlib.sha256(self.path.read_bytes()).hexdigest() if self.path else ""


def parse_card(path: str | Path) -> Card:
    """Read and validate one card file.

    Raises:
        GnnpipeError: naming the card file and the field at fault.
    """
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            d = tomllib.load(fh)
    except OSError as e:
        raise GnnpipeError(f"{path}: cannot read card ({e.strerror})") from None
    except tomllib.TOMLDecodeError as e:
        raise GnnpipeError(f"{path}: not valid TOML ({e})") from None

    def req_str(key: str) -> str:
        v = d.get(key)
        if not isinstance(v, str) or not v:
            raise GnnpipeError(f"{path}: field {key!r} must be a non-empty string, got {v!r}")
        return v

    name = req_str("name")
    if name != path.stem or not _NAME_RE.match(name):
        raise GnnpipeError(f"{path}: field 'name' is {name!r}, expected snake_case equal to the file stem {path.stem!r}")
    fmt = req_str("format")
    if fmt not in FORMATS:
        raise GnnpipeError(f"{path}: field 'format' is {fmt!r}, expected one of {', '.join(FORMATS)}")
    files: dict[str, str | None] = {}
    entries = d.get("files")
    if not isinstance(entries, list) or not entries:
        raise GnnpipeError(f"{path}: field 'files' must be a non-empty list of [[files]] tables")
    for i, e in enumerate(entries):
        if not isinstance(e, dict) or not isinstance(e.get("name"), str) or not e["name"]:
            raise GnnpipeError(f"{path}: files[{i}].name must be a non-empty string, got {e!r}")
        sha = e.get("sha256")
        if sha is not None and (not isinstance(sha, str) or not _SHA_RE.match(sha)):
            raise GnnpipeError(f"{path}: files[{i}].sha256 must be 64 lowercase hex digits, got {sha!r}")
        files[e["name"]] = sha
    expected = d.get("expected", {})
    if not isinstance(expected, dict):
        raise GnnpipeError(f"{path}: field 'expected' must be a table")
    for k, v in expected.items():
        if k not in COUNT_FIELDS:
            raise GnnpipeError(f"{path}: expected.{k} is not a known count (known: {', '.join(COUNT_FIELDS)})")
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise GnnpipeError(f"{path}: expected.{k} must be a non-negative integer, got {v!r}")
    options = d.get("options", {})
    if not isinstance(options, dict):
        raise GnnpipeError(f"{path}: field 'options' must be a table")
    return Card(name=name, title=str(d.get("title", name)), format=fmt, source=req_str("source"),
                licence=req_str("licence"), files=files, expected=dict(expected), options=dict(options),
                path=path)


def list_cards(catalog: str | Path | None = None) -> list[Card]:
    """Every card of the catalogue, sorted by name."""
    folder = Path(catalog) if catalog else catalog_dir()
    if not folder.is_dir():
        raise GnnpipeError(f"{folder}: catalogue folder not found (set GNNPIPE_CATALOG)")
    return [parse_card(p) for p in sorted(folder.glob("*.toml"))]


def get_card(name: str, catalog: str | Path | None = None) -> Card:
    """The card called ``name``; the error lists the known names."""
    folder = Path(catalog) if catalog else catalog_dir()
    p = folder / f"{name}.toml"
    if not p.is_file():
        known = ", ".join(c.name for c in list_cards(folder)) or "none"
        raise GnnpipeError(f"unknown dataset {name!r}: no card {p} (known: {known})")
    return parse_card(p)


def check_counts(card: Card, graph: Graph) -> list[tuple[str, int | None, int, bool]]:
    """Compare a loaded graph with the card's expected counts.

    Returns:
        Rows ``(field, expected or None, actual, ok)`` for every count field.
    """
    actual = {"nodes": graph.num_nodes, "edges": graph.num_edges, "features": graph.num_features,
              "classes": graph.num_classes}
    rows = []
    for k in COUNT_FIELDS:
        exp = card.expected.get(k)
        rows.append((k, exp, actual[k], exp is None or exp == actual[k]))
    return rows


def load_from_card(card: Card, raw_dir: str | Path, split: int | None = None, seed: int = 0,
                   progress: bool = False) -> Graph:
    """Verify and load the raw files of ``card`` from ``raw_dir`` (no count check, no write).

    Args:
        split: fixed split index (heterophilous formats only; default 0).
        seed: split seed (gnn_benchmark only).
    """
    raw_dir = Path(raw_dir)
    if not raw_dir.is_dir():
        raise GnnpipeError(f"{card.name}: raw folder {raw_dir} not found (give --raw DIR)")
    loader = loader_for(card.format)
    params = inspect.signature(loader).parameters
    kwargs: dict[str, Any] = dict(card.options)
    for k in kwargs:
        if k not in params:
            raise GnnpipeError(f"{card.path}: options.{k} is not an option of format {card.format!r}")
    kwargs.update(hashes=card.files, name=card.name)
    if split is not None:
        if "split" not in params:
            raise GnnpipeError(f"{card.name}: --split applies only to datasets with fixed splits "
                               f"(format {card.format!r} has one split)")
        kwargs["split"] = split
    if "seed" in params:
        kwargs["seed"] = seed
    if "progress" in params:
        kwargs["progress"] = progress
    return loader(raw_dir, **kwargs)


def prepare(name: str, raw_dir: str | Path | None = None, root: str | Path | None = None,
            split: int | None = None, force: bool = False, seed: int = 0, progress: bool = False,
            catalog: str | Path | None = None) -> Path:
    """Verify, load, check against the card and save dataset ``name``.

    Args:
        name: card name.
        raw_dir: folder of raw files (default ``default_raw_root() / name``).
        root: data root (default :func:`default_data_root`); output is ``root / name``.
        split: fixed split index for heterophilous datasets.
        force: replace an existing output (only after the new one is complete).
        seed: split seed for gnn_benchmark datasets.
        progress: tqdm bars while parsing large files.

    Returns:
        The prepared graph directory.

    Raises:
        GnnpipeError: missing or mismatching raw files, counts that disagree with the card,
            an existing output without ``force``. Nothing is written in any of these cases.
    """
    card = get_card(name, catalog)
    raw_dir = Path(raw_dir) if raw_dir else default_raw_root() / name
    out = (Path(root) if root else default_data_root()) / name
    check_replaceable(out, "dataset", force)  # fail before the (possibly long) load
    graph = load_from_card(card, raw_dir, split=split, seed=seed, progress=progress)
    for k, exp, act, ok in check_counts(card, graph):
        if not ok:
            raise GnnpipeError(f"{card.name}: {k} disagrees with the card {card.path}: expected {exp}, actual {act}")
    extra = {
        "card": {"name": card.name, "format": card.format, "source": card.source, "licence": card.licence,
                 "path": str(card.path), "sha256": card.sha256},
        "raw_dir": str(raw_dir.resolve()),
        "split_index": split,
        "seed": seed,
    }
    log.info("saving %s to %s", card.name, out)
    return graph.save(out, force=force, extra_meta=extra)


def resolve_dataset(name_or_dir: str | Path, root: str | Path | None = None) -> Path:
    """A prepared graph directory: a path, or a name under the data root.

    Raises:
        GnnpipeError: listing the prepared datasets under the root otherwise.
    """
    p = Path(name_or_dir)
    root = Path(root) if root else default_data_root()
    for cand in (p, root / str(name_or_dir)):
        if cand.is_dir():
            read_meta(cand)  # raises for a half-written or foreign directory
            return cand
    prepared = sorted(d.name for d in root.iterdir() if (d / META_FILE).is_file()) if root.is_dir() else []
    hint = ""
    if (catalog_dir() / f"{name_or_dir}.toml").is_file():
        hint = f"; run: gnnpipe-data prepare {name_or_dir}"
    raise GnnpipeError(
        f"dataset {str(name_or_dir)!r} not found: not a directory and not prepared under {root} "
        f"(prepared there: {', '.join(prepared) or 'none'}){hint}"
    )
