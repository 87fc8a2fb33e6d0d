"""The one in-memory and on-disk graph format every stage of gnnpipe reads.

A :class:`Graph` is an undirected graph stored as a symmetric CSR adjacency (both
directions of every edge, no self-loops, no duplicates, sorted neighbour lists), node
features (dense ``float32`` or ``scipy.sparse.csr_matrix``), labels (``int64`` class ids, or
a ``float32`` multi-label matrix), and boolean train/val/test masks.

On disk a prepared graph is a directory::

    meta.json            format version, name, counts, dtypes, content hash, provenance
    indptr.npy           int64 [N+1]
    indices.npy          int64 [2E]
    features.npy         float32 [N, F]            (dense features), or
    features_data.npy    float32 [nnz]             (sparse CSR features)
    features_indices.npy int64 [nnz]
    features_indptr.npy  int64 [N+1]
    labels.npy           int64 [N] or float32 [N, C]
    train_mask.npy, val_mask.npy, test_mask.npy    bool [N]

Every ``.npy`` is memory-mappable, so a graph larger than RAM can be partitioned. Writes
go to a temporary sibling directory that is renamed into place only when complete;
``meta.json`` is written last, and a directory without it is never loaded. A crash
therefore never leaves a half-written dataset that later loads.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from gnnpipe._base import GnnpipeError, __version__
from gnnpipe.fsutil import atomic_directory
from gnnpipe.fsutil import json_default as _json_default

FORMAT_VERSION = 1
META_FILE = "meta.json"
# Order matters: it fixes the content hash.
_ARRAY_FIELDS = ("indptr", "indices", "labels", "train_mask", "val_mask", "test_mask")


class GraphValidationError(GnnpipeError, ValueError):
    """A graph array violates an invariant; the message names the field and the value."""


def _hash_array(h: "hashlib._Hash", name: str, a: np.ndarray, block: int = 1 << 24) -> None:
    a = np.ascontiguousarray(a)
    h.update(f"{name}:{a.dtype.str}:{a.shape};".encode())
    flat = a.reshape(-1).view(np.uint8) if a.size else np.empty(0, np.uint8)
    for start in range(0, flat.size, block):  # streams memory-mapped arrays in blocks
        h.update(flat[start : start + block])


@dataclass(eq=False)
class Graph:
    """An undirected node-classification graph in symmetric CSR form.

    Args:
        indptr: int64 [N+1], CSR row pointers.
        indices: int64 [2E], neighbour ids, sorted within each row, no self-loops.
        features: float32 [N, F], dense ``np.ndarray`` or ``scipy.sparse.csr_matrix``.
        labels: int64 [N] class ids in ``[0, num_classes)``, or float32 [N, C] multi-label
            targets in {0, 1}.
        train_mask, val_mask, test_mask: bool [N].
        name: dataset name (used for default output paths).
        num_classes: number of classes; inferred from ``labels`` when 0.
        meta: provenance (source, split, generator parameters); not part of the hash.
        validate: check every invariant (set False only for data just checked).
    """

    indptr: np.ndarray
    indices: np.ndarray
    features: Any
    labels: np.ndarray
    train_mask: np.ndarray
    val_mask: np.ndarray
    test_mask: np.ndarray
    name: str = "graph"
    num_classes: int = 0
    meta: dict = field(default_factory=dict)
    validate: bool = field(default=True, repr=False)
    _hash: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.indptr = np.asarray(self.indptr)
        self.indices = np.asarray(self.indices)
        if self.indptr.dtype != np.int64:
            self.indptr = self.indptr.astype(np.int64)
        if self.indices.dtype != np.int64:
            self.indices = self.indices.astype(np.int64)
        if sp.issparse(self.features):
            f = sp.csr_matrix(self.features)
            if f.dtype != np.float32:
                f = f.astype(np.float32)
            if self._hash is None and not f.has_canonical_format:
                # One canonical form (each row's column indices sorted and distinct), so that
                # prepared graphs convert to torch's sparse CSR and round-trip through PyG and
                # DGL hash for hash. A loaded graph (its hash known) keeps its arrays as stored:
                # they may be read-only memory maps, and its hash covers them as they are.
                f = f.copy() if f is self.features else f
                f.sum_duplicates()
            self.features = f
        else:
            self.features = np.asarray(self.features)
            if self.features.dtype != np.float32:
                self.features = self.features.astype(np.float32)
        self.labels = np.asarray(self.labels)
        if self.labels.ndim == 1 and self.labels.dtype != np.int64:
            if not np.issubdtype(self.labels.dtype, np.integer):
                raise GraphValidationError(
                    f"labels: expected integer class ids, got dtype {self.labels.dtype}"
                )
            self.labels = self.labels.astype(np.int64)
        elif self.labels.ndim == 2 and self.labels.dtype != np.float32:
            self.labels = self.labels.astype(np.float32)
        for m in ("train_mask", "val_mask", "test_mask"):
            a = np.asarray(getattr(self, m))
            if a.dtype != np.bool_:
                if not (np.issubdtype(a.dtype, np.integer) and a.size and a.min() >= 0 and a.max() <= 1) and a.size:
                    raise GraphValidationError(f"{m}: expected a boolean mask, got dtype {a.dtype}")
                a = a.astype(bool)
            setattr(self, m, a)
        if not self.num_classes:
            if self.labels.ndim == 2:
                self.num_classes = int(self.labels.shape[1])
            else:
                self.num_classes = int(self.labels.max()) + 1 if self.labels.size else 0
        if self.validate:
            self.check()

    # ------------------------------------------------------------------ invariants
    def check(self) -> None:
        """Raise :class:`GraphValidationError` naming the first broken invariant."""
        ip, ix = self.indptr, self.indices
        if ip.ndim != 1 or ip.size < 1:
            raise GraphValidationError(f"indptr: expected a 1-D array of length N+1, got shape {ip.shape}")
        n = ip.size - 1
        if ip[0] != 0:
            raise GraphValidationError(f"indptr: must start at 0, starts at {int(ip[0])}")
        if ip[-1] != ix.size:
            raise GraphValidationError(
                f"indptr: last entry {int(ip[-1])} must equal len(indices) = {ix.size}"
            )
        d = np.diff(ip)
        if d.size and d.min() < 0:
            i = int(np.argmin(d))
            raise GraphValidationError(f"indptr: must be non-decreasing, drops at row {i}")
        if ix.ndim != 1:
            raise GraphValidationError(f"indices: expected 1-D, got shape {ix.shape}")
        if ix.size:
            lo, hi = int(ix.min()), int(ix.max())
            if lo < 0 or hi >= n:
                bad = lo if lo < 0 else hi
                raise GraphValidationError(
                    f"indices: node id {bad} out of range [0, {n}) (the graph has {n} nodes)"
                )
        f = self.features
        if f.ndim != 2 or f.shape[0] != n:
            raise GraphValidationError(f"features: expected shape ({n}, F), got {f.shape}")
        y = self.labels
        if y.ndim == 1:
            if y.shape[0] != n:
                raise GraphValidationError(f"labels: expected length {n}, got {y.shape[0]}")
            if y.size:
                lo, hi = int(y.min()), int(y.max())
                if lo < 0 or hi >= self.num_classes:
                    bad = lo if lo < 0 else hi
                    raise GraphValidationError(
                        f"labels: value {bad} out of range [0, num_classes={self.num_classes})"
                    )
        elif y.ndim == 2:
            if y.shape != (n, self.num_classes):
                raise GraphValidationError(
                    f"labels: multi-label matrix must have shape ({n}, {self.num_classes}), got {y.shape}"
                )
        else:
            raise GraphValidationError(f"labels: expected 1-D or 2-D, got shape {y.shape}")
        for m in ("train_mask", "val_mask", "test_mask"):
            a = getattr(self, m)
            if a.shape != (n,):
                raise GraphValidationError(f"{m}: expected shape ({n},), got {a.shape}")

    def check_symmetric(self) -> None:
        """Check the adjacency is symmetric, sorted, without self-loops or duplicates.

        O(E log E); loaders and generators guarantee it, tests call it.
        """
        n = self.num_nodes
        rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(self.indptr))
        cols = self.indices
        if np.any(rows == cols):
            v = int(rows[rows == cols][0])
            raise GraphValidationError(f"indices: self-loop at node {v}")
        key = rows * n + cols
        if key.size > 1 and np.any(np.diff(key) <= 0):
            i = int(np.nonzero(np.diff(key) <= 0)[0][0])
            raise GraphValidationError(
                f"indices: neighbours of node {int(rows[i])} not strictly increasing (duplicate or unsorted)"
            )
        tkey = np.sort(cols * n + rows)
        if not np.array_equal(key, tkey):
            missing = np.setdiff1d(key, tkey, assume_unique=True)  # u -> v present, v -> u absent
            u, v = (int(missing[0]) // n, int(missing[0]) % n) if missing.size else (-1, -1)
            raise GraphValidationError(
                f"indices: adjacency is not symmetric: {missing.size} of {key.size} directed edges have no reverse "
                f"(first: {u} -> {v}); gnnpipe trains undirected graphs: add the reverse edges "
                "(Graph.from_pyg/from_dgl(..., symmetrize=True))")

    def check_content(self, disjoint_masks: bool = False) -> None:
        """What the arrays hold, beyond their shapes (:meth:`check`): finite features, a
        symmetric simple adjacency, and with ``disjoint_masks`` train/val/test masks that share
        no node (published splits do; a user's own graph may evaluate on its training nodes
        on purpose). Called where data enters (``save``/``prepare``, ``from_pyg``/``from_dgl``,
        a dataset's first verified load); O(E log E + nnz).

        Raises:
            GraphValidationError: the first broken rule, with counts and the first offending
                index.
        """
        f = self.features
        values = f.data if sp.issparse(f) else f
        bad = 0
        first = None
        block = 1 << 22
        flat = values.reshape(-1)
        for lo in range(0, flat.size, block):  # in blocks: a memory map stays mapped, not copied
            nf = ~np.isfinite(flat[lo:lo + block])
            if nf.any():
                if first is None:
                    first = lo + int(np.argmax(nf))
                bad += int(nf.sum())
        if bad:
            if sp.issparse(f):
                row = int(np.searchsorted(f.indptr, first, side="right") - 1)
                where = f"row {row}, column {int(f.indices[first])}"
            else:
                where = f"row {first // max(f.shape[1], 1)}, column {first % max(f.shape[1], 1)}"
            raise GraphValidationError(f"features: {bad} values are NaN or infinite (first at {where}); "
                                       "gnnpipe trains on finite features: impute or drop them first")
        self.check_symmetric()
        if not disjoint_masks:
            return
        names = ("train_mask", "val_mask", "test_mask")
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                both = np.asarray(getattr(self, a), dtype=bool) & np.asarray(getattr(self, b), dtype=bool)
                if both.any():
                    raise GraphValidationError(
                        f"{a}, {b}: {int(both.sum())} nodes are in both (first: node {int(np.argmax(both))}); "
                        "the splits must be disjoint")

    # ------------------------------------------------------------------ shape facts
    @property
    def num_nodes(self) -> int:
        return int(self.indptr.size - 1)

    @property
    def num_edges(self) -> int:
        """Directed edges (each undirected edge counts twice)."""
        return int(self.indices.size)

    @property
    def num_features(self) -> int:
        return int(self.features.shape[1])

    @property
    def sparse_features(self) -> bool:
        return sp.issparse(self.features)

    @property
    def multilabel(self) -> bool:
        return self.labels.ndim == 2

    def degrees(self) -> np.ndarray:
        """int64 [N] number of neighbours (self-loops excluded)."""
        return np.diff(self.indptr)

    def edge_src(self) -> np.ndarray:
        """int64 [2E] the row (source) of each entry of ``indices``."""
        return np.repeat(np.arange(self.num_nodes, dtype=np.int64), self.degrees())

    def adjacency(self) -> sp.csr_matrix:
        """The adjacency as a scipy CSR matrix of ones (float32)."""
        n = self.num_nodes
        return sp.csr_matrix(
            (np.ones(self.num_edges, np.float32), self.indices, self.indptr), shape=(n, n)
        )

    # ------------------------------------------------------------------ content hash
    @property
    def content_hash(self) -> str:
        """sha256 over every array (structure, features, labels, masks), hex."""
        if self._hash is None:
            self._hash = self.compute_hash()
        return self._hash

    def compute_hash(self) -> str:
        h = hashlib.sha256(f"gnnpipe-graph-v{FORMAT_VERSION};".encode())
        for name in ("indptr", "indices"):
            _hash_array(h, name, getattr(self, name))
        if self.sparse_features:
            f = self.features
            _hash_array(h, "features_data", f.data)
            _hash_array(h, "features_indices", f.indices.astype(np.int64, copy=False))
            _hash_array(h, "features_indptr", f.indptr.astype(np.int64, copy=False))
            h.update(f"features_shape:{f.shape};".encode())
        else:
            _hash_array(h, "features", self.features)
        for name in _ARRAY_FIELDS[2:]:
            _hash_array(h, name, getattr(self, name))
        return h.hexdigest()

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_edges(
        cls,
        src: np.ndarray,
        dst: np.ndarray,
        num_nodes: int,
        features: Any,
        labels: np.ndarray,
        train_mask: np.ndarray,
        val_mask: np.ndarray,
        test_mask: np.ndarray,
        **kwargs: Any,
    ) -> "Graph":
        """Build a graph from an edge list: symmetrized, self-loops and duplicates removed.

        Args:
            src, dst: int [E] endpoints, in either or both directions.
            num_nodes: N; every endpoint must lie in ``[0, N)``.
        """
        indptr, indices = symmetric_csr(src, dst, num_nodes)
        return cls(indptr, indices, features, labels, train_mask, val_mask, test_mask, **kwargs)

    # ------------------------------------------------------------------ PyG and DGL
    @classmethod
    def from_pyg(
        cls,
        data: Any,
        *,
        name: str | None = None,
        symmetrize: bool = False,
        clean: bool = False,
        split: int | None = None,
        num_classes: int | None = None,
    ) -> "Graph":
        """Build a graph from a ``torch_geometric.data.Data``.

        Reads ``edge_index``, ``x``, ``y``, ``train_mask``, ``val_mask``, ``test_mask`` and
        ``num_nodes``; the arrays are copied. Sparse ``x`` (torch sparse COO/CSR, or scipy)
        stays sparse (``scipy.sparse.csr_matrix``); dense ``x`` becomes float32. ``y`` is
        int class ids [N] (an [N, 1] column is squeezed) or 0/1 multi-label targets [N, C].

        Args:
            data: a homogeneous ``Data`` (not ``HeteroData``; not ``ToSparseTensor``'s ``adj_t``).
            name: the graph's name; default ``data.name`` when it is a string, else ``"graph"``.
            symmetrize: add the reverse of every edge that lacks one (a directed
                ``edge_index`` is refused otherwise), and drop self-loops and duplicates.
            clean: drop self-loops and duplicate edges (refused otherwise, with their count).
            split: the column to use when the masks are 2-D [N, K] (K splits, e.g. the
                heterophilous datasets' 10); required then, refused for 1-D masks.
            num_classes: default ``data.num_classes`` when set, else ``max(y) + 1``.

        Raises:
            GnnpipeError: naming the attribute and the fix, for a directed graph, self-loops or
                duplicates (without the flags above), missing ``x``/``y``/masks, a wrong dtype
                or shape, or ``HeteroData``.
        """
        from gnnpipe.data import convert

        return convert.from_pyg(cls, data, name=name, symmetrize=symmetrize, clean=clean, split=split,
                                num_classes=num_classes)

    def to_pyg(self) -> Any:
        """This graph as a ``torch_geometric.data.Data`` (copies).

        Returns:
            ``Data`` with ``edge_index`` int64 [2, 2E] (both directions of every edge, sorted
            by source), ``x`` (a dense float32 tensor [N, F], or a ``torch.sparse_csr`` tensor
            when the features are sparse: call ``x.to_dense()`` for layers that need dense
            input), ``y`` (int64 [N] or float32 [N, C]), bool ``train_mask``/``val_mask``/
            ``test_mask`` [N], ``num_nodes``, ``name`` and ``num_classes``.
        """
        from gnnpipe.data import convert

        return convert.to_pyg(self)

    @classmethod
    def from_dgl(
        cls,
        g: Any,
        *,
        name: str | None = None,
        symmetrize: bool = False,
        clean: bool = False,
        split: int | None = None,
        num_classes: int | None = None,
    ) -> "Graph":
        """Build a graph from a homogeneous ``dgl.DGLGraph``.

        Reads ``g.edges()`` and ``g.ndata["feat"]``, ``["label"]``, ``["train_mask"]``,
        ``["val_mask"]``, ``["test_mask"]`` (the names DGL's own datasets use); the same
        conversions, flags and errors as :meth:`from_pyg`. A multi-graph (parallel edges) is
        refused unless ``clean`` or ``symmetrize``; a directed one unless ``symmetrize``.

        Args:
            name: the graph's name (DGL graphs carry none); default ``"graph"``.
        """
        from gnnpipe.data import convert

        return convert.from_dgl(cls, g, name=name, symmetrize=symmetrize, clean=clean, split=split,
                                num_classes=num_classes)

    def to_dgl(self) -> Any:
        """This graph as a ``dgl.DGLGraph`` (int64 ids, copies).

        Returns:
            a graph with both directions of every edge, and ``ndata`` ``"feat"`` (dense
            float32, or a ``torch.sparse_csr`` tensor for sparse features), ``"label"``,
            ``"train_mask"``, ``"val_mask"``, ``"test_mask"``.
        """
        from gnnpipe.data import convert

        return convert.to_dgl(self)

    # ------------------------------------------------------------------ disk format
    def save(self, path: str | os.PathLike, force: bool = False, extra_meta: dict | None = None) -> Path:
        """Write the graph atomically to directory ``path``.

        Refuses an existing ``path`` unless ``force``; with ``force`` the old directory is
        replaced only after the new one is complete.
        """
        path = Path(path)
        self.check_content()  # a prepared dataset is finite, symmetric and has disjoint splits
        with atomic_directory(path, force) as tmp:
            files: dict[str, np.ndarray] = {"indptr": self.indptr, "indices": self.indices}
            if self.sparse_features:
                f = self.features
                files["features_data"] = f.data.astype(np.float32, copy=False)
                files["features_indices"] = f.indices.astype(np.int64, copy=False)
                files["features_indptr"] = f.indptr.astype(np.int64, copy=False)
            else:
                files["features"] = self.features
            for name in _ARRAY_FIELDS[2:]:
                files[name] = getattr(self, name)
            for name, arr in files.items():
                with open(tmp / f"{name}.npy", "wb") as fh:
                    np.save(fh, np.ascontiguousarray(arr), allow_pickle=False)
                    fh.flush()
                    os.fsync(fh.fileno())
            meta = {
                "format": "gnnpipe-graph",
                "format_version": FORMAT_VERSION,
                "gnnpipe_version": __version__,
                "name": self.name,
                "num_nodes": self.num_nodes,
                "num_edges": self.num_edges,
                "num_features": self.num_features,
                "num_classes": self.num_classes,
                "sparse_features": self.sparse_features,
                "multilabel": self.multilabel,
                "content_hash": self.content_hash,
                "files": sorted(f"{k}.npy" for k in files),
                "meta": {**self.meta, **(extra_meta or {})},
            }
            with open(tmp / META_FILE, "w") as fh:  # last: its presence marks completeness
                json.dump(meta, fh, indent=2, sort_keys=True, default=_json_default)
                fh.write("\n")
                fh.flush()
                os.fsync(fh.fileno())
        return path

    @classmethod
    def load(cls, path: str | os.PathLike, mmap: bool = True, verify: bool = False) -> "Graph":
        """Load a prepared graph directory (memory-mapped by default).

        Args:
            verify: recompute the content hash and compare it with ``meta.json``.
        """
        return load_graph(path, mmap=mmap, verify=verify)


def read_meta(path: str | os.PathLike) -> dict:
    """Read and check ``meta.json`` of a prepared graph directory."""
    path = Path(path)
    mf = path / META_FILE
    if not path.is_dir():
        raise GnnpipeError(f"{path}: no such dataset directory")
    if not mf.is_file():
        raise GnnpipeError(
            f"{path}: not a prepared gnnpipe graph ({META_FILE} missing; an interrupted write?)"
        )
    try:
        meta = json.loads(mf.read_text())
    except (OSError, ValueError) as e:
        raise GnnpipeError(f"{mf}: unreadable ({e})") from None
    if not isinstance(meta, dict):
        raise GnnpipeError(f"{mf}: holds a JSON {type(meta).__name__}, expected an object")
    if meta.get("format") != "gnnpipe-graph":
        raise GnnpipeError(f"{mf}: field 'format' is {meta.get('format')!r}, expected 'gnnpipe-graph'")
    if meta.get("format_version") != FORMAT_VERSION:
        raise GnnpipeError(
            f"{mf}: format_version {meta.get('format_version')!r} unsupported (expected {FORMAT_VERSION})"
        )
    for key, kind, what in _META_FIELDS:
        v = meta.get(key)
        ok = isinstance(v, kind) and not (kind is int and isinstance(v, bool)) and not (kind is int and v < 0)
        if not ok:
            raise GnnpipeError(f"{mf}: field {key!r} is {'missing' if key not in meta else repr(v)[:60]}, "
                               f"expected {what} (prepare the dataset again)")
    if "meta" in meta and not isinstance(meta["meta"], dict):
        raise GnnpipeError(f"{mf}: field 'meta' is {repr(meta['meta'])[:60]}, expected an object")
    return meta


#: meta.json's fields that loading reads: (key, type, what the message says is expected).
_META_FIELDS = (
    ("name", str, "a name"),
    ("num_nodes", int, "a node count >= 0"),
    ("num_edges", int, "a directed edge count >= 0"),
    ("num_features", int, "a feature count >= 0"),
    ("num_classes", int, "a class count >= 0"),
    ("content_hash", str, "the sha256 hex of the arrays"),
    ("sparse_features", bool, "true or false"),
)


def load_graph(path: str | os.PathLike, mmap: bool = True, verify: bool = False) -> Graph:
    """Load a prepared graph directory; see :meth:`Graph.load`."""
    path = Path(path)
    meta = read_meta(path)
    mode = "r" if mmap else None

    def arr(name: str) -> np.ndarray:
        f = path / f"{name}.npy"
        if not f.is_file():
            raise GnnpipeError(f"{f}: missing (listed in {path / META_FILE})")
        try:
            return np.load(f, mmap_mode=mode, allow_pickle=False)
        except Exception as e:  # noqa: BLE001 - numpy parses the header with ast/tokenize: a damaged file raises
            # OSError, ValueError, EOFError (cut), SyntaxError or tokenize.TokenError (edited header), ...
            # all of them the file's fault, none a bug of ours.
            raise GnnpipeError(f"{f}: unreadable or truncated ({e})") from None

    if meta["sparse_features"]:
        n = meta["num_nodes"]
        features = sp.csr_matrix(
            (arr("features_data"), arr("features_indices"), arr("features_indptr")),
            shape=(n, meta["num_features"]),
        )
    else:
        features = arr("features")
    g = Graph(
        arr("indptr"),
        arr("indices"),
        features,
        arr("labels"),
        arr("train_mask"),
        arr("val_mask"),
        arr("test_mask"),
        name=meta["name"],
        num_classes=meta["num_classes"],
        meta=meta.get("meta", {}),
        _hash=meta["content_hash"],
    )
    for key, actual in (("num_nodes", g.num_nodes), ("num_edges", g.num_edges), ("num_features", g.num_features)):
        if meta[key] != actual:
            raise GnnpipeError(f"{path / META_FILE}: {key} says {meta[key]}, arrays have {actual}")
    if verify:
        actual = g.compute_hash()
        if actual != meta["content_hash"]:
            raise GnnpipeError(
                f"{path}: content hash mismatch: meta.json says {meta['content_hash']}, arrays hash to {actual}"
            )
    return g


def drop_sorted_duplicates(keys: np.ndarray) -> np.ndarray:
    """The distinct values of a sorted 1-D array, in order (one boolean mask of memory)."""
    if keys.size < 2:
        return keys
    uniq = np.empty(keys.size, dtype=bool)
    uniq[0] = True
    np.not_equal(keys[1:], keys[:-1], out=uniq[1:])
    return keys[uniq]


def symmetric_csr(src: np.ndarray, dst: np.ndarray, num_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """Symmetrize an edge list into CSR (sorted rows), dropping self-loops and duplicates.

    Memory is O(E): one int64 key per directed edge, sorted in place.

    Returns:
        (indptr int64 [N+1], indices int64 [2E'])
    """
    src = np.asarray(src, dtype=np.int64).reshape(-1)
    dst = np.asarray(dst, dtype=np.int64).reshape(-1)
    if src.shape != dst.shape:
        raise GraphValidationError(f"edges: src has {src.size} entries, dst has {dst.size}")
    n = int(num_nodes)
    for nm, a in (("src", src), ("dst", dst)):
        if a.size and (a.min() < 0 or a.max() >= n):
            bad = int(a.min()) if a.min() < 0 else int(a.max())
            raise GraphValidationError(f"edges: {nm} node id {bad} out of range [0, {n})")
    keep = src != dst
    s, d = src[keep], dst[keep]
    key = np.empty(2 * s.size, dtype=np.int64)
    np.multiply(s, n, out=key[: s.size])
    key[: s.size] += d
    np.multiply(d, n, out=key[s.size :])
    key[s.size :] += s
    del s, d, keep
    key.sort(kind="stable" if key.size < 1 << 20 else "quicksort")
    key = drop_sorted_duplicates(key)
    rows = key // n
    indices = key - rows * n
    del key
    counts = np.bincount(rows, minlength=n).astype(np.int64)
    del rows
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    return indptr, indices
