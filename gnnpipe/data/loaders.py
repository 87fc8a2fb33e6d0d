"""Loaders for the published raw layouts of node-classification datasets.

Every loader returns a :class:`gnnpipe.data.graph.Graph` whose adjacency is symmetrized,
with duplicates and self-loops removed (self-loops are a model choice, added later), and
verifies each raw file's sha256 against the hashes it is given (from the catalogue card)
*before* parsing it:

* a hash that disagrees is an error naming the file, the expected and the actual digest;
* a pickle (Planetoid) whose hash is unknown is refused: unpickling runs code;
* an npz or csv file whose hash is unknown is read after a logged warning (``np.load``
  with ``allow_pickle=False`` cannot run code).

Layouts:

=================  ===========================================================  ==============
format             files                                                        split
=================  ===========================================================  ==============
``planetoid``      ``ind.<p>.{x,y,tx,ty,allx,ally,graph,test.index}``           standard
``heterophilous``  one npz: ``node_features``, ``node_labels``, ``edges``,      10 fixed
                   ``{train,val,test}_masks``
``gnn_benchmark``  one npz: ``adj_*`` CSR, ``attr_*`` CSR (or ``attr_matrix``),  seeded 20/30
                   ``labels``                                                   per class
``ogb_node``       ``raw/{edge,node-feat,node-label}.csv.gz``,                  published
                   ``split/<scheme>/{train,valid,test}.csv.gz``
``reddit``         ``reddit_data.npz`` + ``reddit_graph.npz`` (scipy COO)       node_types
=================  ===========================================================  ==============

This module is floor 1: it never imports ``torch.distributed`` or ``mpi4py`` and never
prints (``progress=True`` draws a tqdm bar on stderr, for the CLI).
"""

from __future__ import annotations

import gzip
import hashlib
import logging
import pickle
import warnings
import zipfile
import zlib
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np
import scipy.sparse as sp

from gnnpipe._base import GnnpipeError
from gnnpipe.data.graph import Graph

log = logging.getLogger(__name__)

Hashes = Mapping[str, "str | None"]

# Exceptions a truncated or corrupt npz/gzip/pickle raises somewhere inside numpy, zipfile,
# gzip, zlib or pickle; all become one GnnpipeError naming the file.
_CORRUPT = (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error, pickle.UnpicklingError,
            IndexError, TypeError, AttributeError)


# ---------------------------------------------------------------------------- checksums
def sha256_file(path: str | Path, block: int = 1 << 22) -> str:
    """Hex sha256 of a file, read in blocks (memory stays flat for large files)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(block):
            h.update(chunk)
    return h.hexdigest()


def _require(raw_dir: Path, rel: str) -> Path:
    p = raw_dir / rel
    if not p.is_file():
        raise GnnpipeError(f"missing file {rel!r} (looked for {p})")
    return p


def verify_file(raw_dir: Path, rel: str, hashes: Hashes | None, pickle_file: bool = False) -> str:
    """Check one raw file's sha256 against the catalogue before it is parsed.

    Args:
        raw_dir: the dataset's raw folder.
        rel: the file's path relative to ``raw_dir`` (the key in ``hashes``).
        hashes: relative path -> expected sha256 (``None`` or absent: unknown).
        pickle_file: refuse the file when its hash is unknown (unpickling runs code).

    Returns:
        The file's actual sha256 (recorded in the prepared graph's provenance).
    """
    path = _require(raw_dir, rel)
    actual = sha256_file(path)
    expected = (hashes or {}).get(rel)
    if expected:
        if actual != expected.lower():
            raise GnnpipeError(
                f"{path}: checksum mismatch: expected sha256 {expected.lower()}, actual {actual}"
            )
    elif pickle_file:
        raise GnnpipeError(
            f"{path}: refusing to unpickle a file whose sha256 is not in the catalogue card "
            f"(actual {actual}); add it to the card's [[files]] entry after checking the source"
        )
    else:
        log.warning("%s: no sha256 in the catalogue card; reading it unverified (actual %s)", path, actual)
    return actual


# ---------------------------------------------------------------------------- npz helpers
def _open_npz(path: Path) -> Any:
    try:
        return np.load(path, allow_pickle=False)
    except _CORRUPT as e:
        raise GnnpipeError(f"{path}: not a readable npz file, truncated or corrupt ({e})") from None


def _npz_array(z: Any, path: Path, key: str) -> np.ndarray:
    if key not in z.files:
        raise GnnpipeError(f"{path}: array {key!r} missing (has: {', '.join(z.files)})")
    try:
        return z[key]
    except _CORRUPT as e:
        raise GnnpipeError(f"{path}: array {key!r} unreadable, truncated or corrupt ({e})") from None


def _check_len(path: Path, field: str, a: np.ndarray, n: int, axis: int = 0) -> None:
    if a.ndim <= axis or a.shape[axis] != n:
        raise GnnpipeError(f"{path}: {field} has shape {a.shape}, expected {n} along axis {axis}")


# ---------------------------------------------------------------------------- Planetoid
class _PlanetoidUnpickler(pickle.Unpickler):
    """Unpickler that resolves only the classes the Planetoid files use.

    Defence in depth: the sha256 check already ties each file to the published bytes; this
    keeps a file that somehow passed it from reaching arbitrary callables.
    """

    def find_class(self, module: str, name: str) -> Any:
        allowed: dict[tuple[str, str], Any] = {
            ("numpy", "ndarray"): np.ndarray,
            ("numpy", "dtype"): np.dtype,
            ("numpy.core.multiarray", "_reconstruct"): np._core.multiarray._reconstruct,
            ("numpy._core.multiarray", "_reconstruct"): np._core.multiarray._reconstruct,
            ("scipy.sparse.csr", "csr_matrix"): sp.csr_matrix,
            ("scipy.sparse._csr", "csr_matrix"): sp.csr_matrix,
            ("collections", "defaultdict"): __import__("collections").defaultdict,
            ("__builtin__", "list"): list,
            ("builtins", "list"): list,
            # Protocol-2 pickles written by Python 3 encode bytes through _codecs.encode.
            ("_codecs", "encode"): __import__("codecs").encode,
        }
        try:
            return allowed[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(f"global {module}.{name} is not allowed in a Planetoid file") from None


def _unpickle(path: Path) -> Any:
    try:
        with open(path, "rb") as fh:
            return _PlanetoidUnpickler(fh, encoding="latin1").load()
    except _CORRUPT as e:
        raise GnnpipeError(f"{path}: corrupt or truncated pickle ({type(e).__name__}: {e})") from None


def load_planetoid(raw_dir: str | Path, prefix: str, *, hashes: Hashes | None = None, name: str | None = None) -> Graph:
    """Load Planetoid ``ind.<prefix>.*`` (Cora, CiteSeer, PubMed) with the standard split.

    The construction follows the GCN reference (tkipf/gcn ``load_data``) and PyG: node
    features are ``allx`` followed by ``tx``; the test rows are then permuted so that row
    ``test.index[i]`` holds the ``i``-th test row in sorted order. The test ids need not be
    contiguous (CiteSeer has 15 isolated nodes without a test row): the test block spans
    ``min(test.index) .. max(test.index)`` and the missing rows are zero feature rows with
    an all-zero one-hot label. Labels are the argmax of the one-hot rows, so padded nodes
    get label 0, as in PyG; they are in no mask.

    Split: train = ``range(len(y))`` (20 per class), val = the next 500 ids, test =
    ``test.index`` (1000 ids).

    Args:
        raw_dir: folder holding the eight ``ind.<prefix>.*`` files.
        prefix: ``cora``, ``citeseer`` or ``pubmed``.
        hashes: file name -> sha256. The pickles are refused unless their hash is known
            and matches.
        name: graph name (default ``prefix``).

    Returns:
        A :class:`Graph` with sparse CSR bag-of-words features ``float32 [N, F]``.
    """
    raw_dir = Path(raw_dir)
    names = ["x", "y", "tx", "ty", "allx", "ally", "graph"]
    files = {n: f"ind.{prefix}.{n}" for n in names + ["test.index"]}
    for n in names + ["test.index"]:  # every file exists and matches before any is parsed
        _require(raw_dir, files[n])
    raw_hashes = {files[n]: verify_file(raw_dir, files[n], hashes, pickle_file=(n != "test.index")) for n in files}

    obj = {n: _unpickle(raw_dir / files[n]) for n in names}
    ti_path = raw_dir / files["test.index"]
    try:
        test_index = np.loadtxt(ti_path, dtype=np.int64, ndmin=1)
    except _CORRUPT as e:
        raise GnnpipeError(f"{ti_path}: not a list of integer node ids ({e})") from None

    def mat(n: str) -> Any:
        m = obj[n]
        if not (sp.issparse(m) or isinstance(m, np.ndarray)) or m.ndim != 2:
            raise GnnpipeError(f"{raw_dir / files[n]}: expected a 2-D matrix, got {type(m).__name__}")
        return m

    x, y, tx, ty, allx, ally = (mat(n) for n in ("x", "y", "tx", "ty", "allx", "ally"))
    graph = obj["graph"]
    if not isinstance(graph, dict):
        raise GnnpipeError(f"{raw_dir / files['graph']}: expected an adjacency dict, got {type(graph).__name__}")
    num_classes = int(ally.shape[1])
    for n, a, b in (("tx", tx, ty), ("allx", allx, ally), ("x", x, y)):
        if a.shape[0] != b.shape[0]:
            raise GnnpipeError(
                f"{raw_dir / files[n]}: {a.shape[0]} rows but its labels have {b.shape[0]}"
            )
    if test_index.size != tx.shape[0]:
        raise GnnpipeError(f"{ti_path}: {test_index.size} test ids, but tx has {tx.shape[0]} rows")

    sorted_test = np.sort(test_index)
    lo, hi = int(sorted_test[0]), int(sorted_test[-1])
    n_all = int(allx.shape[0])
    if lo < n_all:
        raise GnnpipeError(f"{ti_path}: test id {lo} overlaps allx (which has {n_all} rows)")
    # Pad the test block to span lo..hi: missing ids get zero rows (GCN reference).
    span = hi - lo + 1
    pad = sp.csr_matrix((np.ones(tx.shape[0], np.float32), (sorted_test - lo, np.arange(tx.shape[0]))),
                        shape=(span, tx.shape[0]))
    tx_ext = (pad @ sp.csr_matrix(tx, dtype=np.float32)).tocsr()
    ty_ext = np.zeros((span, ty.shape[1]), dtype=ty.dtype)
    ty_ext[sorted_test - lo] = np.asarray(ty)
    # Ids between allx and the test block (none in the published files) are zero rows too.
    gap = lo - n_all
    features = sp.vstack(
        [sp.csr_matrix(allx, dtype=np.float32), sp.csr_matrix((gap, allx.shape[1]), dtype=np.float32), tx_ext]
    ).tocsr()
    onehot = np.vstack([np.asarray(ally), np.zeros((gap, ally.shape[1]), ally.dtype), ty_ext])
    n = features.shape[0]
    perm = np.arange(n)
    perm[test_index] = sorted_test
    features = features[perm]
    labels = np.asarray(onehot.argmax(axis=1)).reshape(-1)[perm].astype(np.int64)

    keys = np.fromiter(graph.keys(), dtype=np.int64, count=len(graph))
    degs = np.fromiter((len(graph[k]) for k in graph), dtype=np.int64, count=len(graph))
    src = np.repeat(keys, degs)
    dst = np.fromiter((v for k in graph for v in graph[k]), dtype=np.int64, count=int(degs.sum()))
    for arr in (src, dst):
        if arr.size and (arr.min() < 0 or arr.max() >= n):
            bad = int(arr.max()) if arr.max() >= n else int(arr.min())
            raise GnnpipeError(f"{raw_dir / files['graph']}: node id {bad} outside [0, {n})")

    def mask(ids: np.ndarray) -> np.ndarray:
        m = np.zeros(n, dtype=bool)
        m[ids] = True
        return m

    ny = int(y.shape[0])
    if ny + 500 > n_all:
        raise GnnpipeError(f"{raw_dir / files['allx']}: {n_all} rows, need at least len(y)+500 = {ny + 500}")
    return Graph.from_edges(
        src, dst, n, features, labels,
        mask(np.arange(ny)), mask(np.arange(ny, ny + 500)), mask(test_index),
        name=name or prefix, num_classes=num_classes,
        meta={"raw_files": raw_hashes, "split": "planetoid-standard"},
    )


# ---------------------------------------------------------------------------- heterophilous
def load_heterophilous(raw_dir: str | Path, filename: str, *, split: int = 0, hashes: Hashes | None = None,
                       name: str | None = None) -> Graph:
    """Load a heterophilous-graphs npz (yandex-research/heterophilous-graphs).

    Keys: ``node_features`` float [N, F], ``node_labels`` int [N], ``edges`` int [E, 2]
    (each undirected edge once), ``train_masks``/``val_masks``/``test_masks`` bool [10, N].
    Binary datasets (tolokers, minesweeper, questions) keep int class ids {0, 1}.

    Args:
        raw_dir: folder holding ``filename``.
        split: which of the fixed splits to use, ``0 <= split < num_splits``.
        hashes: file name -> sha256 (unknown: read with a warning; npz cannot run code).

    Returns:
        A :class:`Graph` with dense ``float32 [N, F]`` features.
    """
    raw_dir = Path(raw_dir)
    sha = verify_file(raw_dir, filename, hashes)
    path = raw_dir / filename
    with _open_npz(path) as z:
        x = _npz_array(z, path, "node_features")
        y = _npz_array(z, path, "node_labels")
        edges = _npz_array(z, path, "edges")
        masks = {m: _npz_array(z, path, f"{m}_masks") for m in ("train", "val", "test")}
    n = int(x.shape[0]) if x.ndim == 2 else -1
    if n < 0:
        raise GnnpipeError(f"{path}: node_features has shape {x.shape}, expected [N, F]")
    _check_len(path, "node_labels", y, n)
    if edges.ndim != 2 or edges.shape[1] != 2:
        raise GnnpipeError(f"{path}: edges has shape {edges.shape}, expected [E, 2]")
    for m, a in masks.items():
        if a.ndim == 1:  # some releases store a single split as [N]
            a = a[None, :]
            masks[m] = a
        _check_len(path, f"{m}_masks", a, n, axis=1)
    num_splits = int(masks["train"].shape[0])
    if not 0 <= split < num_splits:
        raise GnnpipeError(f"{path}: split {split} out of range: valid splits are 0..{num_splits - 1}")
    if not np.issubdtype(y.dtype, np.integer):
        if np.issubdtype(y.dtype, np.floating) and np.all(y == np.round(y)):
            y = y.astype(np.int64)
        else:
            raise GnnpipeError(f"{path}: node_labels has dtype {y.dtype}, expected integer class ids")
    return Graph.from_edges(
        edges[:, 0], edges[:, 1], n, x.astype(np.float32, copy=False), y,
        masks["train"][split], masks["val"][split], masks["test"][split],
        name=name or Path(filename).stem,
        meta={"raw_files": {filename: sha}, "split": f"heterophilous-fixed-{split}", "num_splits": num_splits},
    )


# ---------------------------------------------------------------------------- gnn-benchmark
def per_class_split(labels: np.ndarray, num_classes: int, train_per_class: int, val_per_class: int,
                    seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Seeded split: ``train_per_class`` train and ``val_per_class`` val nodes per class, rest test.

    One permutation of all nodes (``np.random.default_rng(seed)``) fixes the order; each
    class takes its first ``train_per_class`` nodes in that order for training and the next
    ``val_per_class`` for validation. A class with fewer nodes gives what it has: training
    first, then validation, and nothing to test.

    Returns:
        (train_mask, val_mask, test_mask), bool [N] each, disjoint, covering every node.
    """
    n = labels.shape[0]
    perm = np.random.default_rng(seed).permutation(n)
    train = np.zeros(n, dtype=bool)
    val = np.zeros(n, dtype=bool)
    lp = labels[perm]
    for c in range(num_classes):
        idx = perm[lp == c]
        train[idx[:train_per_class]] = True
        val[idx[train_per_class : train_per_class + val_per_class]] = True
    return train, val, ~(train | val)


def load_gnn_benchmark(raw_dir: str | Path, filename: str, *, seed: int = 0, hashes: Hashes | None = None,
                       name: str | None = None, train_per_class: int = 20, val_per_class: int = 30) -> Graph:
    """Load a gnn-benchmark npz (shchur/gnn-benchmark: Coauthor, Amazon, Cora-ML).

    Reads only ``adj_{data,indices,indptr,shape}``, ``attr_{data,indices,indptr,shape}`` (or a
    dense ``attr_matrix``) and ``labels``; ``class_names`` is a pickled object array in some
    files and is never touched. The adjacency is directed in some files: it is symmetrized.
    The whole graph is kept (no largest-connected-component step), matching the counts in
    the catalogue. Split: :func:`per_class_split` with ``seed``.

    Returns:
        A :class:`Graph` with sparse CSR ``float32 [N, F]`` features.
    """
    raw_dir = Path(raw_dir)
    sha = verify_file(raw_dir, filename, hashes)
    path = raw_dir / filename
    with _open_npz(path) as z:
        def csr(prefix: str) -> sp.csr_matrix:
            parts = [_npz_array(z, path, f"{prefix}_{k}") for k in ("data", "indices", "indptr", "shape")]
            try:
                return sp.csr_matrix(tuple(parts[:3]), shape=tuple(int(s) for s in parts[3]))
            except _CORRUPT as e:
                raise GnnpipeError(f"{path}: {prefix}_* do not form a CSR matrix ({e})") from None

        adj = csr("adj")
        if "attr_data" in z.files:
            feats: Any = csr("attr").astype(np.float32)
        else:
            feats = _npz_array(z, path, "attr_matrix").astype(np.float32)
        labels = _npz_array(z, path, "labels")
    n = adj.shape[0]
    if adj.shape != (n, n):
        raise GnnpipeError(f"{path}: adj_shape is {adj.shape}, expected a square matrix")
    _check_len(path, "attr", feats, n)
    _check_len(path, "labels", labels, n)
    if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
        raise GnnpipeError(f"{path}: labels has shape {labels.shape} dtype {labels.dtype}, expected int [N]")
    coo = adj.tocoo()
    keep = coo.data != 0  # an explicit zero is not an edge
    num_classes = int(labels.max()) + 1 if labels.size else 0
    train, val, test = per_class_split(labels, num_classes, train_per_class, val_per_class, seed)
    return Graph.from_edges(
        coo.row[keep], coo.col[keep], n, feats, labels, train, val, test,
        name=name or Path(filename).stem, num_classes=num_classes,
        meta={"raw_files": {filename: sha},
              "split": f"per-class-{train_per_class}-{val_per_class}-seed{seed}", "seed": seed},
    )


# ---------------------------------------------------------------------------- OGB
def _read_csv_gz(path: Path, dtype: Any, width: int | None, progress: bool = False,
                 block: int = 1 << 25) -> np.ndarray:
    """Parse a gzipped headerless numeric CSV into ``dtype [rows, width]`` (or ``[rows]``).

    Reads complete lines in blocks of about ``block`` bytes and parses each with
    ``np.fromstring`` after turning newlines into separators: several times faster than
    ``np.loadtxt`` and memory stays at one block plus the result.
    """
    out: list[np.ndarray] = []
    cols = width or 1
    rows = 0
    try:
        from tqdm import tqdm

        bar = tqdm(total=path.stat().st_size, unit="B", unit_scale=True, desc=path.name, disable=not progress,
                   leave=False)
        with open(path, "rb") as raw, gzip.GzipFile(fileobj=raw) as fh:
            while True:
                lines = fh.readlines(block)
                if not lines:
                    break
                chunk = b"".join(lines)
                nl = len(lines)
                text = chunk.replace(b"\r", b"").replace(b"\n", b",").rstrip(b",").decode("ascii")
                with warnings.catch_warnings():
                    warnings.simplefilter("error")  # malformed text warns and stops short
                    vals = np.fromstring(text, dtype=dtype, sep=",") if text else np.empty(0, dtype)
                if vals.size != nl * cols:
                    raise GnnpipeError(
                        f"{path}: lines {rows + 1}..{rows + nl}: expected {cols} numbers per line, "
                        f"parsed {vals.size} values from {nl} lines"
                    )
                out.append(vals.reshape(nl, cols) if width else vals)
                rows += nl
                bar.update(raw.tell() - bar.n)
        bar.close()
    except GnnpipeError:
        raise
    except (*_CORRUPT, DeprecationWarning, UnicodeDecodeError) as e:
        raise GnnpipeError(f"{path}: truncated or corrupt gzip/csv ({type(e).__name__}: {e})") from None
    if not out:
        return np.empty((0, cols) if width else (0,), dtype)
    return np.concatenate(out)


def load_ogb_node(raw_dir: str | Path, *, scheme: str | None = None, hashes: Hashes | None = None,
                  name: str | None = None, progress: bool = False,
                  schemes: tuple[str, ...] = ("time", "sales_ranking", "species", "throughput")) -> Graph:
    """Load the OGB node-property raw layout (ogbn-arxiv, ogbn-products).

    Files (headerless CSV, gzipped): ``raw/edge.csv.gz`` (``src,dst`` per line),
    ``raw/node-feat.csv.gz`` (F floats per line), ``raw/node-label.csv.gz`` (one class id
    per line; ``nan`` is not accepted), ``split/<scheme>/{train,valid,test}.csv.gz`` (one
    node id per line). Edges are symmetrized (arxiv is a directed citation graph).

    Args:
        scheme: split folder name; default: the first of ``schemes`` present under
            ``split/`` (``time`` for arxiv, ``sales_ranking`` for products), else the only
            folder there.
        progress: draw a tqdm bar per file (for the CLI).

    Returns:
        A :class:`Graph` with dense ``float32 [N, F]`` features.
    """
    raw_dir = Path(raw_dir)
    split_root = raw_dir / "split"
    if scheme is None:
        present = sorted(p.name for p in split_root.iterdir() if p.is_dir()) if split_root.is_dir() else []
        if not present:
            raise GnnpipeError(f"missing split folder (looked for {split_root}/<scheme>/)")
        scheme = next((s for s in schemes if s in present), present[0] if len(present) == 1 else None)
        if scheme is None:
            raise GnnpipeError(f"{split_root}: several split schemes {present}; choose one")
    rels = {
        "edge": "raw/edge.csv.gz", "feat": "raw/node-feat.csv.gz", "label": "raw/node-label.csv.gz",
        **{s: f"split/{scheme}/{s}.csv.gz" for s in ("train", "valid", "test")},
    }
    for rel in rels.values():
        _require(raw_dir, rel)
    raw_hashes = {rel: verify_file(raw_dir, rel, hashes) for rel in rels.values()}
    # Width from the first line: node-feat has no header.
    fpath = raw_dir / rels["feat"]
    try:
        with gzip.open(fpath, "rb") as fh:
            first = fh.readline().strip()
    except _CORRUPT as e:
        raise GnnpipeError(f"{fpath}: truncated or corrupt gzip/csv ({type(e).__name__}: {e})") from None
    width = len(first.split(b",")) if first else 0
    if width == 0:
        raise GnnpipeError(f"{fpath}: empty: expected one line of features per node")
    feats = _read_csv_gz(fpath, np.float32, width, progress)
    n = feats.shape[0]
    labels = _read_csv_gz(raw_dir / rels["label"], np.float64, None, progress)
    _check_len(raw_dir / rels["label"], "labels", labels, n)
    if np.isnan(labels).any() or np.any(labels != np.round(labels)):
        raise GnnpipeError(f"{raw_dir / rels['label']}: labels must be integer class ids (found nan or fraction)")
    labels = labels.astype(np.int64)
    edges = _read_csv_gz(raw_dir / rels["edge"], np.int64, 2, progress)
    masks = []
    for s in ("train", "valid", "test"):
        ids = _read_csv_gz(raw_dir / rels[s], np.int64, None, progress)
        if ids.size and (ids.min() < 0 or ids.max() >= n):
            raise GnnpipeError(f"{raw_dir / rels[s]}: node id {int(ids.max())} outside [0, {n})")
        m = np.zeros(n, dtype=bool)
        m[ids] = True
        masks.append(m)
    if edges.size and (edges.min() < 0 or edges.max() >= n):
        bad = int(edges.max()) if edges.max() >= n else int(edges.min())
        raise GnnpipeError(f"{raw_dir / rels['edge']}: node id {bad} outside [0, {n}) (node-feat has {n} rows)")
    return Graph.from_edges(
        edges[:, 0], edges[:, 1], n, feats, labels, *masks,
        name=name or raw_dir.name,
        meta={"raw_files": raw_hashes, "split": f"ogb-{scheme}"},
    )


# ---------------------------------------------------------------------------- Reddit
def load_reddit(raw_dir: str | Path, *, hashes: Hashes | None = None, name: str | None = None) -> Graph:
    """Load the Reddit layout used by PyG and DGL (``reddit_data.npz``, ``reddit_graph.npz``).

    ``reddit_data.npz``: ``feature`` float [N, 602], ``label`` int [N], ``node_types`` [N]
    with 1 = train, 2 = val, 3 = test (as PyG's ``Reddit.process``). ``reddit_graph.npz`` is
    a ``scipy.sparse.save_npz`` COO matrix; its ``row``, ``col`` and ``shape`` arrays are read
    directly with ``allow_pickle=False`` (``sp.load_npz`` would allow nothing worse, but this
    keeps one reading path).

    Returns:
        A :class:`Graph` with dense ``float32 [N, 602]`` features.
    """
    raw_dir = Path(raw_dir)
    for rel in ("reddit_data.npz", "reddit_graph.npz"):
        _require(raw_dir, rel)
    raw_hashes = {rel: verify_file(raw_dir, rel, hashes) for rel in ("reddit_data.npz", "reddit_graph.npz")}
    dpath, gpath = raw_dir / "reddit_data.npz", raw_dir / "reddit_graph.npz"
    with _open_npz(dpath) as z:
        x = _npz_array(z, dpath, "feature")
        y = _npz_array(z, dpath, "label")
        types = _npz_array(z, dpath, "node_types")
    with _open_npz(gpath) as z:
        row = _npz_array(z, gpath, "row")
        col = _npz_array(z, gpath, "col")
        shape = _npz_array(z, gpath, "shape")
        if "format" in z.files:
            fmt = _npz_array(z, gpath, "format")
            fmt = fmt.item().decode() if isinstance(fmt.item(), bytes) else str(fmt.item())
            if fmt != "coo":
                raise GnnpipeError(f"{gpath}: sparse format {fmt!r}, expected 'coo'")
    if x.ndim != 2:
        raise GnnpipeError(f"{dpath}: feature has shape {x.shape}, expected [N, F]")
    n = int(x.shape[0])
    _check_len(dpath, "label", y, n)
    _check_len(dpath, "node_types", types, n)
    if tuple(int(s) for s in shape) != (n, n):
        raise GnnpipeError(f"{gpath}: shape is {tuple(int(s) for s in shape)}, expected ({n}, {n}) from reddit_data.npz")
    if row.shape != col.shape:
        raise GnnpipeError(f"{gpath}: row has {row.size} entries, col has {col.size}")
    bad_types = np.setdiff1d(np.unique(types), [1, 2, 3])
    if bad_types.size:
        raise GnnpipeError(f"{dpath}: node_types has value {int(bad_types[0])}, expected 1 (train), 2 (val), 3 (test)")
    return Graph.from_edges(
        row, col, n, x.astype(np.float32, copy=False), y.astype(np.int64),
        types == 1, types == 2, types == 3,
        name=name or "reddit",
        meta={"raw_files": raw_hashes, "split": "reddit-node_types"},
    )


def loader_for(fmt: str) -> Callable[..., Graph]:
    """The loader function for a catalogue ``format`` value."""
    table: dict[str, Callable[..., Graph]] = {
        "planetoid": load_planetoid,
        "heterophilous": load_heterophilous,
        "gnn_benchmark": load_gnn_benchmark,
        "ogb_node": load_ogb_node,
        "reddit": load_reddit,
    }
    if fmt not in table:
        raise GnnpipeError(f"unknown dataset format {fmt!r} (known: {', '.join(sorted(table))})")
    return table[fmt]


FORMATS = ("planetoid", "heterophilous", "gnn_benchmark", "ogb_node", "reddit")
