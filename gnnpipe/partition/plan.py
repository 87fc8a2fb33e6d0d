"""Node partitioning (METIS, random, contiguous), two-level plans, relabelling, plan IO.

Over 600 lines: one path from a CSR to a relabelled plan on disk whose pieces share the
plan's id conventions; its sections (level 1, CSR helpers, the plan, level 2) are the seams.

A :class:`PartitionPlan` splits the vertices into ``P`` parts (graph-parallel ranks or
hybrid ways) and every part into ``C`` chunks (pipeline micro-batches), and renumbers the
vertices so that every part and every chunk is a contiguous id range, part-major, the
original order kept inside a chunk. Everything downstream works in these *new* ids;
``perm[new] = old`` maps results back.

On disk a plan is a directory (written atomically, byte-identical for the same inputs)::

    META.json        format, every parameter, dataset name / content hash / N / E, version
    stats.json       sizes, balance, edge cut, halo counts, predicted volumes (plan_stats)
    assignment.npz   part, chunk (by ORIGINAL id), perm, inv, part_ptr, chunk_ptr (int64)
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from gnnpipe._base import GnnpipeError, __version__
from gnnpipe.fsutil import atomic_directory
from gnnpipe.fsutil import json_default as _json_default
from gnnpipe.data.graph import Graph
from gnnpipe.partition import coarsen

log = logging.getLogger(__name__)

METHODS = ("metis", "random", "contiguous")
OBJECTIVES = ("cut", "vol")
#: How METIS is run: ``plain`` on the whole graph, ``multilevel`` (our coarsening first,
#: METIS on the coarse graph; :mod:`gnnpipe.partition.coarsen`), or ``auto``: multilevel
#: when plain METIS's predicted memory exceeds the budget.
METIS_MODES = ("auto", "plain", "multilevel")
#: Default METIS memory budget, in multiples of the graph's int64 CSR bytes: the plan's
#: target is a peak of at most 4 CSRs above the loaded graph; METIS gets 2, our
#: coarsening, refinement, chunking and statistics the rest.
METIS_BUDGET_CSRS = 2
#: Graphs whose plain METIS needs at most this much are never coarsened by ``auto``.
METIS_PLAIN_FLOOR_BYTES = 512 << 20
PLAN_FORMAT = "gnnpipe-partition"
PLAN_FORMAT_VERSION = 1
META_FILE = "META.json"
STATS_FILE = "stats.json"
ASSIGNMENT_FILE = "assignment.npz"
_ASSIGNMENT_KEYS = ("part", "chunk", "perm", "inv", "part_ptr", "chunk_ptr")


class PlanMismatchError(GnnpipeError):
    """A plan was built for another dataset (content hashes differ)."""


# ---------------------------------------------------------------------------- level 1
def _vertex_weights(indptr: np.ndarray, vertex_weights: Any, n: int) -> np.ndarray | None:
    if vertex_weights is None or (isinstance(vertex_weights, str) and vertex_weights == "none"):
        return None
    if isinstance(vertex_weights, str):
        if vertex_weights != "degree":
            raise GnnpipeError(f"vertex_weights: expected None, 'none', 'degree' or an array, got {vertex_weights!r}")
        # Work of a vertex ≈ its edges (aggregation) + itself (dense transform); +1 keeps
        # isolated vertices from weighing nothing.
        return (np.diff(indptr) + 1).astype(np.int64)
    w = np.asarray(vertex_weights)
    if w.shape != (n,):
        raise GnnpipeError(f"vertex_weights: expected shape ({n},), got {w.shape}")
    if not np.all(np.isfinite(w)) or (w.size and w.min() < 0):
        raise GnnpipeError("vertex_weights: expected finite non-negative weights")
    return np.rint(w).astype(np.int64)


def _weights_label(vertex_weights: Any) -> str:
    if vertex_weights is None:
        return "none"
    if isinstance(vertex_weights, str):
        return vertex_weights
    a = np.ascontiguousarray(np.asarray(vertex_weights))
    return "array:sha256:" + hashlib.sha256(a.tobytes()).hexdigest()[:16]


def _fill_empty_parts(part: np.ndarray, parts: int) -> np.ndarray:
    # METIS may leave a part empty on tiny or disconnected graphs; an executor rank with
    # no vertices is useless, so move the last vertex of the largest part into each empty one.
    counts = np.bincount(part, minlength=parts)
    for p in np.flatnonzero(counts == 0):
        big = int(np.argmax(counts))
        v = int(np.flatnonzero(part == big)[-1])
        part[v] = p
        counts[big] -= 1
        counts[p] += 1
        log.debug("part %d was empty; moved vertex %d from part %d", p, v, big)
    return part


def _partition_csr(
    indptr: np.ndarray,
    indices: np.ndarray,
    parts: int,
    method: str,
    objective: str,
    seed: int,
    weights: np.ndarray | None,
    metis_mode: "MetisMode | None" = None,
) -> np.ndarray:
    n = indptr.size - 1
    if parts == 1:
        return np.zeros(n, dtype=np.int64)
    if method == "contiguous":
        if weights is None:
            return (np.arange(n, dtype=np.int64) * parts) // n
        cum = np.cumsum(weights, dtype=np.float64)
        total = cum[-1] if n else 0.0
        bounds = np.searchsorted(cum, total * np.arange(1, parts) / parts, side="left") + 1
        # Every part non-empty: bounds strictly increasing within [1, n-1].
        for k in range(parts - 1):
            lo = bounds[k - 1] + 1 if k else 1
            bounds[k] = min(max(bounds[k], lo), n - (parts - 1 - k))
        part = np.zeros(n, dtype=np.int64)
        for b in bounds:
            part[b:] += 1
        return part
    if method == "random":
        # Balanced and seeded: shuffle, then deal vertices round-robin.
        rng = np.random.default_rng(seed)
        part = np.empty(n, dtype=np.int64)
        part[rng.permutation(n)] = np.arange(n, dtype=np.int64) % parts
        return part
    if metis_mode is None:
        return _fill_empty_parts(_metis(indptr, indices, parts, objective, seed, weights), parts)
    return _metis_auto(indptr, indices, parts, objective, seed, weights, metis_mode)[0]


def _metis(indptr, indices, parts: int, objective: str, seed: int, weights, eweights=None) -> np.ndarray:
    """Plain METIS (pymetis) on a CSR; int64 [n] parts (possibly with an empty part)."""
    try:
        import pymetis
    except ImportError as e:  # pragma: no cover - pymetis is a dependency
        raise ImportError(
            "METIS partitioning needs pymetis: pip install pymetis (or use --method random/contiguous)"
        ) from e
    if parts == 1:
        return np.zeros(indptr.size - 1, dtype=np.int64)
    if not 0 <= int(seed) <= 2**31 - 1:  # METIS keeps its seed in a C int
        raise GnnpipeError(f"seed: expected an integer in [0, 2**31-1] for METIS, got {seed} "
                           "(use a smaller seed or --method random)")
    opts = pymetis.Options(seed=int(seed), objtype=int(pymetis.ObjType.VOL if objective == "vol" else pymetis.ObjType.CUT))
    # pymetis's idx_t is 64-bit: int64 arrays pass without a copy.
    res = pymetis.part_graph(
        parts,
        adjacency=pymetis.CSRAdjacency(np.ascontiguousarray(indptr, dtype=np.int64), np.ascontiguousarray(indices, dtype=np.int64)),
        vweights=weights,
        eweights=None if eweights is None else np.ascontiguousarray(eweights, dtype=np.int64),
        options=opts,
        # Recursive bisection cuts fewer edges and balances better up to 8 parts (METIS's
        # own advice; Squirrel P=8: 61k against 68k); k-way beyond, and always for the
        # volume objective, which only k-way implements.
        recursive=objective == "cut" and parts <= 8,
    )
    return np.asarray(res.vertex_part, dtype=np.int64)


@dataclass(frozen=True)
class MetisMode:
    """How :func:`_partition_csr` runs METIS: ``mode`` (one of :data:`METIS_MODES`) and
    the memory ``budget`` in bytes that METIS itself may use (auto and multilevel)."""

    mode: str = "auto"
    budget: int = 0
    paths: list = field(default_factory=list, compare=False)  # filled: resolved path per call


def _metis_auto(indptr, indices, parts, objective, seed, weights, mm: MetisMode) -> tuple[np.ndarray, str]:
    n, e = indptr.size - 1, int(indptr[-1])
    est = coarsen.estimate_metis_bytes(n, e)
    path = mm.mode
    if path == "auto":
        path = "plain" if est <= max(mm.budget, METIS_PLAIN_FLOOR_BYTES) else "multilevel"
    mm.paths.append(path)
    if path == "plain" or parts == 1:
        log.info("METIS (plain) on %d nodes / %d edges, predicted %.0f MB", n, e, est / 1e6)
        return _fill_empty_parts(_metis(indptr, indices, parts, objective, seed, weights), parts), path
    # Coarsen until METIS on the coarse graph fits the budget.
    target = max(mm.budget // coarsen.METIS_BYTES_PER_EDGE, 1)
    log.info("METIS (multilevel) on %d nodes / %d edges: coarsening to <= %d edges", n, e, target)
    part, info = coarsen.multilevel_partition(
        indptr, indices, parts, seed, weights,
        lambda ip, ix, vw, ew: _metis(ip, ix, parts, objective, seed, vw, ew),
        target_edges=int(target),
    )
    log.info("multilevel: levels %s, cut per level (level, projected, rebalanced, refined) %s", info["levels"], info["cuts"])
    return _fill_empty_parts(part, parts), path


def csr_bytes(num_nodes: int, num_edges: int) -> int:
    """Bytes of an int64 CSR (indptr + indices): the unit of the memory budget."""
    return 8 * (int(num_nodes) + 1) + 8 * int(num_edges)


def _metis_mode(graph: Graph, metis_mode: str, metis_budget: Any) -> MetisMode:
    budget = int(metis_budget) if metis_budget is not None else METIS_BUDGET_CSRS * csr_bytes(graph.num_nodes, graph.num_edges)
    return MetisMode(metis_mode, budget)


def _check_args(n: int, parts: int, method: str, objective: str, metis_mode: str = "auto",
                metis_budget: Any = None) -> None:
    if metis_mode not in METIS_MODES:
        raise GnnpipeError(f"metis_mode: expected one of {', '.join(METIS_MODES)}, got {metis_mode!r}")
    if metis_budget is not None and (not isinstance(metis_budget, (int, np.integer)) or metis_budget < 1):
        raise GnnpipeError(f"metis_budget: expected a positive number of bytes or None, got {metis_budget!r}")
    if method not in METHODS:
        raise GnnpipeError(f"method: expected one of {', '.join(METHODS)}, got {method!r}")
    if objective not in OBJECTIVES:
        raise GnnpipeError(f"objective: expected one of {', '.join(OBJECTIVES)}, got {objective!r}")
    if not isinstance(parts, (int, np.integer)) or parts < 1 or parts > n:
        raise GnnpipeError(f"parts: expected an integer in [1, {n}] (the graph has {n} nodes), got {parts}")


def partition_nodes(
    graph: Graph,
    parts: int,
    method: str = "metis",
    objective: str = "cut",
    seed: int = 0,
    vertex_weights: Any = None,
    metis_mode: str = "auto",
    metis_budget: int | None = None,
) -> np.ndarray:
    """Assign every node to one of ``parts`` parts.

    Args:
        graph: the graph (symmetric CSR).
        parts: P, 1 ≤ P ≤ N.
        method: ``"metis"`` (pymetis: recursive bisection for ``cut`` with P ≤ 8, k-way
            otherwise), ``"random"`` (seeded, balanced
            sizes) or ``"contiguous"`` (id ranges of equal size or equal weight).
        objective: METIS objective, ``"cut"`` (edge cut) or ``"vol"`` (communication volume).
        seed: METIS / shuffle seed.
        vertex_weights: None, ``"degree"`` (degree + 1, balances work rather than
            vertices) or an array [N] of non-negative integers (METIS and contiguous only).
        metis_mode: ``"plain"`` (METIS on the whole graph), ``"multilevel"`` (coarsen in
            numpy first, METIS on the coarse graph, refine while projecting back; see
            :mod:`gnnpipe.partition.coarsen`) or ``"auto"`` (multilevel when plain
            METIS's predicted memory exceeds ``max(metis_budget, 512 MiB)``).
        metis_budget: bytes METIS may use (multilevel coarsens until the coarse graph
            fits); None → twice the graph's int64 CSR bytes (:data:`METIS_BUDGET_CSRS`).

    Returns:
        int64 [N] part id of each node; every part non-empty.

    Raises:
        GnnpipeError: bad ``parts``, ``method``, ``objective`` or weights.
        ImportError: ``method="metis"`` without pymetis.
    """
    n = graph.num_nodes
    _check_args(n, parts, method, objective, metis_mode, metis_budget)
    w = _vertex_weights(graph.indptr, vertex_weights, n)
    mm = _metis_mode(graph, metis_mode, metis_budget)
    return _partition_csr(graph.indptr, graph.indices, int(parts), method, objective, seed, w, mm)


# ---------------------------------------------------------------------------- CSR helpers
def gather_rows(indptr: np.ndarray, indices: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The sub-CSR of the given rows (in that order), columns unchanged.

    Reads only those rows, so ``indices`` may be memory-mapped and larger than RAM.

    Returns:
        (sub_indptr int64 [len(rows)+1], sub_indices int64 [nnz of those rows])
    """
    rows = np.asarray(rows, dtype=np.int64)
    start = np.asarray(indptr[rows], dtype=np.int64)
    counts = np.asarray(indptr[rows + 1], dtype=np.int64) - start
    sub_indptr = np.zeros(rows.size + 1, dtype=np.int64)
    np.cumsum(counts, out=sub_indptr[1:])
    total = int(sub_indptr[-1])
    if total == 0:
        return sub_indptr, np.zeros(0, dtype=np.int64)
    # Position of every wanted entry: row start shifted by its offset inside the row.
    pos = np.repeat(start - sub_indptr[:-1], counts)
    pos += np.arange(total, dtype=np.int64)
    sub = np.asarray(indices[pos], dtype=np.int64)
    return sub_indptr, sub


def _filter_csr(indptr: np.ndarray, keep: np.ndarray) -> np.ndarray:
    cum = np.zeros(keep.size + 1, dtype=np.int64)
    np.cumsum(keep, out=cum[1:])
    return cum[indptr]


# ---------------------------------------------------------------------------- the plan
@dataclass(eq=False)
class PartitionPlan:
    """A two-level partition: ``P`` parts × ``C`` chunks, with the relabelling.

    Args:
        num_parts: P.
        num_chunks: C, chunks per part (global chunk id ``k = p·C + local chunk``).
        perm: int64 [N], ``perm[new] = old``.
        inv: int64 [N], ``inv[old] = new``.
        part_ptr: int64 [P+1], new-id boundaries of the parts.
        chunk_ptr: int64 [P·C+1], new-id boundaries of the chunks.
        part: int64 [N], part of each node by ORIGINAL id.
        chunk: int64 [N], global chunk of each node by ORIGINAL id.
        dataset_hash: content hash of the graph the plan was built for.
        dataset_name: its name.
        params: every parameter (parts, chunks, method, objective, seed, vertex_weights,
            gnnpipe_version).
        num_edges: directed edges of that graph.
        stats: :func:`gnnpipe.partition.stats.plan_stats` output, set by the caller (written
            to stats.json).
    """

    num_parts: int
    num_chunks: int
    perm: np.ndarray
    inv: np.ndarray
    part_ptr: np.ndarray
    chunk_ptr: np.ndarray
    part: np.ndarray
    chunk: np.ndarray
    dataset_hash: str
    dataset_name: str
    params: dict
    num_edges: int = 0
    stats: dict | None = field(default=None, repr=False)

    @property
    def num_nodes(self) -> int:
        return int(self.perm.size)

    def part_range(self, p: int) -> tuple[int, int]:
        """New-id range ``[lo, hi)`` of part ``p``."""
        if not 0 <= p < self.num_parts:
            raise GnnpipeError(f"part: expected an id in [0, {self.num_parts}), got {p}")
        return int(self.part_ptr[p]), int(self.part_ptr[p + 1])

    def chunk_range(self, k: int) -> tuple[int, int]:
        """New-id range ``[lo, hi)`` of global chunk ``k``."""
        nk = self.num_parts * self.num_chunks
        if not 0 <= k < nk:
            raise GnnpipeError(f"chunk: expected an id in [0, {nk}), got {k}")
        return int(self.chunk_ptr[k]), int(self.chunk_ptr[k + 1])

    def part_of_new(self, ids: Any) -> np.ndarray:
        """Part of each NEW id (vectorised)."""
        return np.searchsorted(self.part_ptr, np.asarray(ids), side="right") - 1

    def chunk_of_new(self, ids: Any) -> np.ndarray:
        """Global chunk of each NEW id (vectorised)."""
        return np.searchsorted(self.chunk_ptr, np.asarray(ids), side="right") - 1

    # ------------------------------------------------------------------ IO
    def meta(self) -> dict:
        """The content of META.json (no timestamps: same plan, same bytes)."""
        return {
            "format": PLAN_FORMAT,
            "format_version": PLAN_FORMAT_VERSION,
            "tool": "gnnpipe-partition",
            "gnnpipe_version": __version__,
            "params": self.params,
            "dataset": {
                "name": self.dataset_name,
                "content_hash": self.dataset_hash,
                "num_nodes": self.num_nodes,
                "num_edges": int(self.num_edges),
            },
            "num_parts": int(self.num_parts),
            "num_chunks": int(self.num_chunks),
            "files": sorted([ASSIGNMENT_FILE, STATS_FILE]),
        }

    def save(self, path: str | os.PathLike, force: bool = False) -> Path:
        """Write the plan directory atomically (temporary sibling, then rename).

        Refuses an existing ``path`` unless ``force``. The bytes depend only on the plan.
        """
        path = Path(path)
        with atomic_directory(path, force, kind="plan") as tmp:
            _write_npz(tmp / ASSIGNMENT_FILE, {k: getattr(self, k) for k in _ASSIGNMENT_KEYS})
            _write_json(tmp / STATS_FILE, self.stats or {})
            _write_json(tmp / META_FILE, self.meta())  # last: marks completeness
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> "PartitionPlan":
        """Load and validate a plan directory; errors name the file and the field."""
        path = Path(path)
        meta = read_plan_meta(path)
        af = path / ASSIGNMENT_FILE
        if not af.is_file():
            raise GnnpipeError(f"{af}: missing (listed in {path / META_FILE})")
        try:
            with np.load(af, allow_pickle=False) as z:
                arrs = {}
                for k in _ASSIGNMENT_KEYS:
                    if k not in z.files:
                        raise GnnpipeError(f"{af}: field {k!r} missing (has {sorted(z.files)})")
                    arrs[k] = z[k]
        except GnnpipeError:
            raise
        except Exception as e:  # noqa: BLE001 - a damaged npz: BadZipFile, EOFError, a header numpy cannot parse, ...
            raise GnnpipeError(f"{af}: unreadable or truncated ({type(e).__name__}: {e})") from None
        stats: dict = {}
        sf = path / STATS_FILE
        if sf.is_file():
            try:
                stats = json.loads(sf.read_text())
            except ValueError as e:
                raise GnnpipeError(f"{sf}: unreadable ({e})") from None
        ds = meta.get("dataset", {})
        for k in ("num_parts", "num_chunks", "params"):
            if k not in meta:
                raise GnnpipeError(f"{path / META_FILE}: field {k!r} missing")
        if not isinstance(ds, dict) or not isinstance(stats, dict):
            bad = "dataset" if not isinstance(ds, dict) else STATS_FILE
            raise GnnpipeError(f"{path}: {bad} is not a JSON object")
        try:
            plan = cls(
                num_parts=int(meta["num_parts"]),
                num_chunks=int(meta["num_chunks"]),
                dataset_hash=str(ds.get("content_hash", "")),
                dataset_name=str(ds.get("name", "")),
                params=meta["params"],
                num_edges=int(ds.get("num_edges", 0)),
                stats=stats,
                **arrs,
            )
        except (TypeError, ValueError) as e:  # a hand-edited META.json: a count that is no number
            raise GnnpipeError(f"{path / META_FILE}: malformed ({e})") from None
        plan.validate(where=str(af), num_nodes=ds.get("num_nodes"))
        return plan

    def validate(self, where: str = "plan", num_nodes: int | None = None) -> None:
        """Check every structural invariant in O(N); raise GnnpipeError naming the field."""
        n = self.perm.size
        P, C = self.num_parts, self.num_chunks
        if num_nodes is not None and n != num_nodes:
            raise GnnpipeError(f"{where}: perm has {n} entries, META.json says num_nodes = {num_nodes}")
        if P < 1 or C < 1:
            raise GnnpipeError(f"{where}: num_parts = {P}, num_chunks = {C}; both must be ≥ 1")
        for k in _ASSIGNMENT_KEYS:
            a = getattr(self, k)
            if a.dtype != np.int64 or a.ndim != 1:
                raise GnnpipeError(f"{where}: field {k!r} must be 1-D int64, got {a.dtype} {a.shape}")
        for k, size in (("inv", n), ("part", n), ("chunk", n), ("part_ptr", P + 1), ("chunk_ptr", P * C + 1)):
            if getattr(self, k).size != size:
                raise GnnpipeError(f"{where}: field {k!r} has {getattr(self, k).size} entries, expected {size}")
        if n and (self.perm.min() < 0 or self.perm.max() >= n):
            raise GnnpipeError(f"{where}: field 'perm' has ids outside [0, {n})")
        if not np.array_equal(self.inv[self.perm], np.arange(n)):
            raise GnnpipeError(f"{where}: fields 'perm' and 'inv' are not inverse permutations")
        cp = self.chunk_ptr
        if cp[0] != 0 or cp[-1] != n or np.any(np.diff(cp) <= 0):
            raise GnnpipeError(f"{where}: field 'chunk_ptr' must rise strictly from 0 to {n}")
        if not np.array_equal(self.part_ptr, cp[::C]):
            raise GnnpipeError(f"{where}: field 'part_ptr' disagrees with 'chunk_ptr' every {C} chunks")
        want_chunk = np.repeat(np.arange(P * C, dtype=np.int64), np.diff(cp))
        if not np.array_equal(self.chunk[self.perm], want_chunk):
            raise GnnpipeError(f"{where}: field 'chunk' disagrees with 'perm' and 'chunk_ptr'")
        if not np.array_equal(self.part, self.chunk // C):
            raise GnnpipeError(f"{where}: field 'part' disagrees with 'chunk' (part = chunk // {C})")


def _write_json(path: Path, obj: Any) -> None:
    with open(path, "w") as fh:
        json.dump(obj, fh, indent=2, sort_keys=True, default=_json_default)
        fh.write("\n")
        fh.flush()
        os.fsync(fh.fileno())


def _write_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    # np.savez stamps each member with the current time; a fixed date keeps the bytes a
    # function of the arrays alone (byte-identical plans for the same inputs).
    with open(path, "wb") as fh:
        with zipfile.ZipFile(fh, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
            for name in sorted(arrays):
                info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
                info.external_attr = 0o644 << 16
                with zf.open(info, "w", force_zip64=True) as member:
                    np.lib.format.write_array(member, np.ascontiguousarray(arrays[name]), allow_pickle=False)
        fh.flush()
        os.fsync(fh.fileno())


def read_plan_meta(path: str | os.PathLike) -> dict:
    """Read and check ``META.json`` of a plan directory."""
    path = Path(path)
    mf = path / META_FILE
    if not path.is_dir():
        raise GnnpipeError(f"{path}: no such partition plan directory")
    if not mf.is_file():
        raise GnnpipeError(f"{path}: not a partition plan ({META_FILE} missing; an interrupted write?)")
    try:
        meta = json.loads(mf.read_text())
    except (OSError, ValueError) as e:
        raise GnnpipeError(f"{mf}: unreadable ({e})") from None
    if not isinstance(meta, dict):
        raise GnnpipeError(f"{mf}: holds a JSON {type(meta).__name__}, expected an object")
    if meta.get("format") != PLAN_FORMAT:
        raise GnnpipeError(f"{mf}: field 'format' is {meta.get('format')!r}, expected {PLAN_FORMAT!r}")
    if meta.get("format_version") != PLAN_FORMAT_VERSION:
        raise GnnpipeError(
            f"{mf}: field 'format_version' is {meta.get('format_version')!r}, expected {PLAN_FORMAT_VERSION}"
        )
    return meta


def check_plan_matches(plan: PartitionPlan, graph: Graph) -> None:
    """Refuse a plan built for another dataset.

    Raises:
        PlanMismatchError: the plan's dataset hash differs from ``graph.content_hash``
            (both hashes and both names in the message), or the node counts differ.
    """
    if plan.dataset_hash != graph.content_hash or plan.num_nodes != graph.num_nodes:
        raise PlanMismatchError(
            f"partition plan was built for dataset {plan.dataset_name!r} (content hash "
            f"{plan.dataset_hash}, {plan.num_nodes} nodes) but the graph is {graph.name!r} "
            f"(content hash {graph.content_hash}, {graph.num_nodes} nodes); rebuild the plan "
            f"with gnnpipe-partition"
        )


# ---------------------------------------------------------------------------- level 2
def plan_params(parts: int, chunks: int, method: str, objective: str, seed: int, vertex_weights: Any,
                metis_mode: str = "auto", metis_budget: int | None = None) -> dict:
    """The parameter record stored in META.json and compared for reuse.

    :func:`build_plan` adds ``metis_path`` (how METIS actually ran: ``plain`` or
    ``multilevel`` for the parts and for the chunks), a result rather than an input.
    """
    return {
        "metis_mode": metis_mode,
        "metis_budget": f"{METIS_BUDGET_CSRS}xcsr" if metis_budget is None else int(metis_budget),
        "parts": int(parts),
        "chunks": int(chunks),
        "method": method,
        "objective": objective,
        "seed": int(seed),
        "vertex_weights": _weights_label(vertex_weights),
        "gnnpipe_version": __version__,
    }


def _metis_path(mm: MetisMode, method: str, P: int, C: int) -> dict:
    if method != "metis":
        return {}
    top = mm.paths[0] if P > 1 else "none"
    chunks = sorted(set(mm.paths[1:] if P > 1 else mm.paths)) or ["none"]
    return {"metis_path": {"parts": top if P > 1 else "none", "chunks": "+".join(chunks) if C > 1 else "none"}}


def build_plan(
    graph: Graph,
    parts: int,
    chunks: int = 1,
    method: str = "metis",
    objective: str = "cut",
    seed: int = 0,
    vertex_weights: Any = None,
    metis_mode: str = "auto",
    metis_budget: int | None = None,
) -> PartitionPlan:
    """Partition into ``parts`` parts, each into ``chunks`` chunks, and relabel.

    The chunks of a part come from the same method run on the part's induced subgraph
    (METIS again for ``"metis"``). New ids are part-major, then chunk, then original id.

    Args:
        graph: the graph in original ids (may be memory-mapped).
        parts: P, 1 ≤ P ≤ N.
        chunks: C per part, 1 ≤ C ≤ the smallest part.
        method, objective, seed, vertex_weights: as in :func:`partition_nodes`.
        metis_mode, metis_budget: as in :func:`partition_nodes`; the same budget (by
            default the whole graph's CSR bytes) applies to every part's chunking.

    Returns:
        :class:`PartitionPlan` without statistics (``plan.stats = plan_stats(graph, plan)``
        from :mod:`gnnpipe.partition.stats` adds them before saving).
    """
    n = graph.num_nodes
    _check_args(n, parts, method, objective, metis_mode, metis_budget)
    if not isinstance(chunks, (int, np.integer)) or chunks < 1 or chunks > n:
        raise GnnpipeError(f"chunks: expected an integer in [1, {n}] (the graph has {n} nodes), got {chunks}")
    P, C = int(parts), int(chunks)
    w = _vertex_weights(graph.indptr, vertex_weights, n)
    log.info("partitioning %d nodes into %d parts (%s)", n, P, method)
    mm = _metis_mode(graph, metis_mode, metis_budget)
    part = _partition_csr(graph.indptr, graph.indices, P, method, objective, seed, w, mm)
    order = np.argsort(part, kind="stable")  # part-major, original order inside
    part_sizes = np.bincount(part, minlength=P)
    small = int(part_sizes.min())
    if C > small:
        p = int(np.argmin(part_sizes))
        raise GnnpipeError(f"chunks: {C} chunks per part exceed the {small} nodes of part {p}")
    chunk = part * C
    if C > 1:
        part_ptr = np.zeros(P + 1, dtype=np.int64)
        np.cumsum(part_sizes, out=part_ptr[1:])
        # Local index of every node inside its part, shared by all parts' subgraphs.
        local = np.empty(n, dtype=np.int64)
        local[order] = np.arange(n, dtype=np.int64) - np.repeat(part_ptr[:-1], part_sizes)
        for p in range(P):
            log.info("chunking part %d/%d (%d nodes)", p + 1, P, int(part_sizes[p]))
            rows = order[part_ptr[p] : part_ptr[p + 1]]
            sip, six = gather_rows(graph.indptr, graph.indices, rows)
            keep = part[six] == p
            sip = _filter_csr(sip, keep)
            six = local[six[keep]]
            del keep
            wp = w[rows] if w is not None else None
            cl = _partition_csr(sip, six, C, method, objective, seed, wp, mm)
            del sip, six
            chunk[rows] += cl
        del local
    perm = np.argsort(chunk, kind="stable")
    inv = np.empty(n, dtype=np.int64)
    inv[perm] = np.arange(n, dtype=np.int64)
    chunk_ptr = np.zeros(P * C + 1, dtype=np.int64)
    np.cumsum(np.bincount(chunk, minlength=P * C), out=chunk_ptr[1:])
    plan = PartitionPlan(
        num_parts=P,
        num_chunks=C,
        perm=perm,
        inv=inv,
        part_ptr=chunk_ptr[::C].copy(),
        chunk_ptr=chunk_ptr,
        part=part,
        chunk=chunk,
        dataset_hash=graph.content_hash,
        dataset_name=graph.name,
        params={**plan_params(P, C, method, objective, seed, vertex_weights, metis_mode, metis_budget),
                **_metis_path(mm, method, P, C)},
        num_edges=graph.num_edges,
    )
    return plan


def relabel_graph(graph: Graph, plan: PartitionPlan) -> Graph:
    """The graph in the plan's new id space (CSR rows and columns permuted, rows sorted).

    Features (dense or sparse CSR), labels and masks are permuted the same way; the
    content hash changes, so the result carries ``meta["relabelled_from"]``.

    Returns:
        :class:`Graph` with ``new = plan.inv[old]``.
    """
    check_plan_matches(plan, graph)
    n = graph.num_nodes
    ip, ix = gather_rows(graph.indptr, graph.indices, plan.perm)
    ix = plan.inv[ix]
    # Sort each row: rows are grouped already, so a global sort on (row, col) keys works.
    key = np.repeat(np.arange(n, dtype=np.int64), np.diff(ip)) * n + ix
    key.sort()
    ix = key - (key // n) * n
    del key
    f = graph.features
    feats = f[plan.perm] if sp.issparse(f) else np.asarray(f[plan.perm])
    return Graph(
        ip,
        ix,
        feats,
        np.asarray(graph.labels[plan.perm]),
        np.asarray(graph.train_mask[plan.perm]),
        np.asarray(graph.val_mask[plan.perm]),
        np.asarray(graph.test_mask[plan.perm]),
        name=graph.name,
        num_classes=graph.num_classes,
        meta={**graph.meta, "relabelled_from": graph.content_hash},
    )
