"""The dataset catalogue: one TOML card per dataset, and ``prepare`` to build the graph.

A card (``gnnpipe/data/cards/<name>.toml``, shipped as package data; another folder through
the ``GNNPIPE_CATALOG`` environment variable) looks like::

    name = "cora"                  # the canonical name; equals the file stem
    title = "Cora"
    aliases = ["..."]              # optional: other names users type (see below)
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

Names: users type PyG's and OGB's spellings (``Cora``, ``CiteSeer``, ``Coauthor-CS``,
``CoauthorCS``, ``ogbn_arxiv``), so a name matches a card when both agree after
:func:`name_key` (lower case, ``-``/``_``/spaces dropped), or when it is one of the card's
``aliases``. The canonical name is the publisher's id where it has one (``ogbn-arxiv``) and
snake_case otherwise; prepared graphs and plans carry it. A raw folder may be named by any of
the card's names (``<raw root>/ogbn_arxiv`` or ``arxiv`` serves ``ogbn-arxiv``).

Prepared graphs live under the data root (``GNNPIPE_DATA_ROOT``, default ``./datasets`` of
the current directory; see :mod:`gnnpipe.roots`) as ``<root>/<name>/`` in the :class:`~gnnpipe.data.graph.Graph`
directory format; ``meta.json`` records the card, the split and every raw file's sha256.
"""

from __future__ import annotations

import difflib
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
_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]*$")


def name_key(name: str) -> str:
    """What two spellings of one dataset name share: lower case, only letters and digits
    (``Coauthor-CS``, ``coauthor_cs`` and ``CoauthorCS`` all give ``coauthorcs``)."""
    return re.sub(r"[^0-9a-z]", "", str(name).lower())


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
        name: canonical name (lower case, digits, ``_`` or ``-``), equal to the card's file stem.
        title: human name.
        format: loader name, one of :data:`gnnpipe.data.loaders.FORMATS`.
        source: where the raw files come from (repository or URL, as text).
        licence: the publisher's licence, as text.
        files: raw file path (relative to the raw folder) -> sha256, or ``None`` if unknown.
        expected: subset of ``nodes``, ``edges`` (directed), ``features``, ``classes``.
        options: keyword arguments for the loader.
        path: the card file.
        aliases: other names that select this card (besides every spelling of ``name`` that
            :func:`name_key` equates).
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
    aliases: tuple[str, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        """The canonical name, then the aliases."""
        return (self.name, *self.aliases)

    def matches(self, name: str) -> bool:
        """Whether ``name`` is a spelling of this card's name or of one of its aliases."""
        key = name_key(name)
        return bool(key) and any(key == name_key(n) for n in self.names)

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
        raise GnnpipeError(f"{path}: field 'name' is {name!r}, expected lower-case letters, digits, '_' or '-', equal to the file stem {path.stem!r}")
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
    aliases = d.get("aliases", [])
    if not isinstance(aliases, list) or not all(isinstance(a, str) and name_key(a) for a in aliases):
        raise GnnpipeError(f"{path}: field 'aliases' must be a list of names with a letter or digit, got {aliases!r}")
    return Card(name=name, title=str(d.get("title", name)), format=fmt, source=req_str("source"),
                licence=req_str("licence"), files=files, expected=dict(expected), options=dict(options),
                path=path, aliases=tuple(aliases))


def list_cards(catalog: str | Path | None = None) -> list[Card]:
    """Every card of the catalogue, sorted by name.

    Raises:
        GnnpipeError: a bad card, or two cards claiming one name (after :func:`name_key`).
    """
    folder = Path(catalog) if catalog else catalog_dir()
    if not folder.is_dir():
        raise GnnpipeError(f"{folder}: catalogue folder not found (set GNNPIPE_CATALOG)")
    cards = [parse_card(p) for p in sorted(folder.glob("*.toml"))]
    owner: dict[str, str] = {}
    for c in cards:
        for n in c.names:
            other = owner.setdefault(name_key(n), c.name)
            if other != c.name:
                raise GnnpipeError(f"{c.path}: name {n!r} also selects card {other!r}; "
                                   "every name and alias must select one card")
    return cards


def find_card(name: str, catalog: str | Path | None = None) -> Card | None:
    """The card that ``name`` selects (any spelling of its name or aliases), or None."""
    folder = Path(catalog) if catalog else catalog_dir()
    p = folder / f"{name}.toml"
    if _NAME_RE.match(name) and p.is_file():  # the canonical name: no need to read every card
        return parse_card(p)
    return next((c for c in list_cards(folder) if c.matches(name)), None)


def close_name(name: str, names: list[str]) -> str | None:
    """The one of ``names`` closest to ``name`` (``difflib``, on :func:`name_key`), if any is close."""
    by_key = {name_key(n): n for n in names}
    hit = difflib.get_close_matches(name_key(name), list(by_key), n=1, cutoff=0.6)
    return by_key[hit[0]] if hit else None


def unknown_name_message(name: str, catalog: str | Path | None = None) -> str:
    """One line: ``name`` is not in the catalogue, the closest name if any, and every known name."""
    cards = list_cards(catalog)
    close = close_name(name, [n for c in cards for n in c.names])
    canon = next((c.name for c in cards if close is not None and c.matches(close)), None)
    hint = f"; did you mean {canon!r}?" if canon else ""
    known = ", ".join(c.name for c in cards) or "none"
    return f"unknown dataset {name!r}{hint} (known: {known})"


def get_card(name: str, catalog: str | Path | None = None) -> Card:
    """The card ``name`` selects, matched as :func:`find_card` does; the error names the
    closest known name and lists them all."""
    card = find_card(name, catalog)
    if card is None:
        raise GnnpipeError(unknown_name_message(name, catalog))
    return card


def _named_dir(root: Path, names: list[str], marker: str | None = None) -> Path | None:
    """The folder under ``root`` named by the first of ``names`` (exact spelling), else the one
    sub-folder whose name any of them equals after :func:`name_key`; with ``marker``, only
    folders that hold that file count."""
    def ok(d: Path) -> bool:
        return d.is_dir() and (marker is None or (d / marker).is_file())

    for n in names:
        if n and "/" not in n and n not in (".", "..") and ok(root / n):
            return root / n
    keys = {name_key(n) for n in names} - {""}
    if not keys or not root.is_dir():
        return None
    hits = sorted(d for d in root.iterdir() if name_key(d.name) in keys and ok(d))
    return hits[0] if len(hits) == 1 else None


def raw_dir_for(card: Card, raw_root: str | Path | None = None, typed: str | None = None) -> Path:
    """The raw folder of ``card`` under ``raw_root`` (default :func:`default_raw_root`): the
    one named by the card's name, the name as the user typed it, or an alias, in any
    spelling; ``<raw root>/<name>`` when none exists (the loader then says it is missing)."""
    root = Path(raw_root) if raw_root else default_raw_root()
    return _named_dir(root, [card.name, typed or "", *card.aliases]) or root / card.name


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
        raise GnnpipeError(f"{card.name}: raw folder {raw_dir} not found: put the raw files there (from "
                           f"{card.source}), or name their folder with --raw DIR, or the folder of raw "
                           f"dataset folders with --raw-root DIR or ${roots.RAW_ROOT_ENV}")
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
        name: card name, or any spelling or alias of it (the output takes the canonical name).
        raw_dir: folder of raw files (default :func:`raw_dir_for`: ``<raw root>/<name>``).
        root: data root (default :func:`default_data_root`); output is ``root / card.name``.
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
    raw_dir = Path(raw_dir) if raw_dir else raw_dir_for(card, typed=name)
    out = (Path(root) if root else default_data_root()) / card.name
    check_replaceable(out, "dataset", force)  # fail before the (possibly long) load
    graph = load_from_card(card, raw_dir, split=split, seed=seed, progress=progress)
    for k, exp, act, ok in check_counts(card, graph):
        if not ok:
            raise GnnpipeError(f"{card.name}: {k} disagrees with the card {card.path}: expected {exp}, actual {act}")
    try:  # the publisher's files: finite, symmetric, disjoint splits (save checks the first two again)
        graph.check_content(disjoint_masks=True)
    except GnnpipeError as e:
        raise GnnpipeError(f"{card.name} ({raw_dir}): {e}") from None
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

    A name matches a prepared folder spelled differently (``Cora`` finds ``<root>/cora``) and
    any name or alias of the card it selects (``ogbn_arxiv`` finds ``<root>/ogbn-arxiv``, and
    a folder prepared as ``ogbn_arxiv`` before the canonical name changed).

    Raises:
        GnnpipeError: one line listing the prepared datasets under the root, the closest
            name, and the ``gnnpipe-data prepare`` command for a known card otherwise.
    """
    p = Path(name_or_dir)
    root = Path(root) if root else default_data_root()
    for cand in (p, root / str(name_or_dir)):
        if cand.is_dir():
            read_meta(cand)  # raises for a half-written or foreign directory
            return cand
    text = str(name_or_dir)
    try:
        card = find_card(text) if name_key(text) else None
    except GnnpipeError:  # a broken or missing catalogue must not hide a prepared graph
        card = None
    names = [text, *(card.names if card else ())]
    found = _named_dir(root, names, marker=META_FILE) if p.name == text else None
    if found is not None:
        read_meta(found)
        return found
    prepared = sorted(d.name for d in root.iterdir() if (d / META_FILE).is_file()) if root.is_dir() else []
    if card is not None:
        hint = f"; run: gnnpipe-data prepare {card.name}"
    else:
        try:
            cards = list_cards()
        except GnnpipeError:
            cards = []
        close = close_name(text, prepared + [n for c in cards for n in c.names])
        canon = next((c.name for c in cards if close is not None and c.matches(close)), close)
        hint = (f"; did you mean {canon!r}?" if canon else "") + (
            f" (catalogue: {', '.join(c.name for c in cards)})" if cards else "")
    raise GnnpipeError(
        f"dataset {text!r} not found: not a directory and not prepared under {root} "
        f"(prepared there: {', '.join(prepared) or 'none'}){hint}"
    )
