"""Property-based tests (hypothesis) of the graph format in gnnpipe/data/graph.py.

Random graphs of every flavour (dense or sparse features, single- or multi-label, empty
graphs, isolated nodes) check the invariants every later stage relies on: the CSR built by
``symmetric_csr`` matches a brute-force set of pairs, save/load preserves every array and
the content hash, the hash sees every element, validation names the broken field, and an
interrupted save never leaves anything that loads.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from gnnpipe import GnnpipeError
from gnnpipe.data.graph import Graph, GraphValidationError, symmetric_csr

PROPS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
MASKS = ("train_mask", "val_mask", "test_mask")


# ---------------------------------------------------------------------- strategies
@st.composite
def edge_lists(draw, max_nodes: int = 25, max_edges: int = 80):
    n = draw(st.integers(0, max_nodes))
    if n == 0:
        return 0, np.zeros(0, np.int64), np.zeros(0, np.int64)
    pairs = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=max_edges))
    src = np.array([p[0] for p in pairs], dtype=np.int64)
    dst = np.array([p[1] for p in pairs], dtype=np.int64)
    return n, src, dst


@st.composite
def graphs(draw, min_nodes: int = 0, min_edges: int = 0):
    """A valid Graph: random symmetric structure, dense or sparse features, any label kind."""
    n, src, dst = draw(edge_lists())
    assume(n >= min_nodes)
    indptr, indices = symmetric_csr(src, dst, n)
    assume(indices.size >= min_edges)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    f = draw(st.integers(1, 6))
    if draw(st.booleans()):
        dense = rng.standard_normal((n, f)).astype(np.float32)
        dense[rng.random((n, f)) < 0.6] = 0.0
        features = sp.csr_matrix(dense)
    else:
        features = rng.standard_normal((n, f)).astype(np.float32)
    if draw(st.booleans()):
        c = draw(st.integers(1, 5))
        labels = (rng.random((n, c)) < 0.4).astype(np.float32)
        num_classes = c
    else:
        k = draw(st.integers(1, 5))
        labels = rng.integers(0, k, n).astype(np.int64)
        num_classes = k  # explicit: some classes may be absent from a small graph
    masks = [rng.random(n) < 0.5 for _ in MASKS]
    return Graph(indptr, indices, features, labels, *masks, name=f"g{n}", num_classes=num_classes)


def arrays_of(g: Graph) -> dict[str, np.ndarray]:
    """Every array that the content hash must cover, by on-disk name."""
    out = {"indptr": g.indptr, "indices": g.indices}
    if g.sparse_features:
        out["features_data"] = g.features.data
        out["features_indices"] = g.features.indices
        out["features_indptr"] = g.features.indptr
    else:
        out["features"] = g.features
    out["labels"] = g.labels
    for m in MASKS:
        out[m] = getattr(g, m)
    return out


def rebuild(g: Graph, **replace) -> Graph:
    """A new Graph with the same content, some arrays replaced (no validation)."""
    kw = dict(
        indptr=g.indptr, indices=g.indices, features=g.features, labels=g.labels,
        train_mask=g.train_mask, val_mask=g.val_mask, test_mask=g.test_mask,
        name=g.name, num_classes=g.num_classes,
    )
    kw.update(replace)
    return Graph(**kw, validate=False)


# ---------------------------------------------------------------------- symmetric_csr
@PROPS
@given(edge_lists())
def test_symmetric_csr_matches_brute_force(case):
    n, src, dst = case
    indptr, indices = symmetric_csr(src, dst, n)
    assert indptr.dtype == np.int64 and indices.dtype == np.int64
    assert indptr.shape == (n + 1,) and indptr[0] == 0 and indptr[-1] == indices.size
    expected = {(u, v) for u, v in zip(src.tolist(), dst.tolist()) if u != v}
    expected |= {(v, u) for u, v in expected}
    got = [(u, int(v)) for u in range(n) for v in indices[indptr[u] : indptr[u + 1]]]
    assert got == sorted(expected)  # sorted rows, each pair once, both directions
    # and the Graph's own checker agrees
    if n:
        z = np.zeros(n, bool)
        Graph(indptr, indices, np.zeros((n, 1), np.float32), np.zeros(n, np.int64), z, z, z).check_symmetric()


@PROPS
@given(edge_lists(), st.randoms(use_true_random=False))
def test_symmetric_csr_ignores_edge_order_and_direction(case, rnd):
    n, src, dst = case
    order = list(range(src.size))
    rnd.shuffle(order)
    flip = np.array([rnd.random() < 0.5 for _ in order], dtype=bool)
    s2, d2 = src[order].copy(), dst[order].copy()
    s2[flip], d2[flip] = dst[order][flip], src[order][flip]
    a, b = symmetric_csr(src, dst, n), symmetric_csr(s2, d2, n)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])


@PROPS
@given(st.integers(1, 20), st.integers(0, 5), st.sampled_from(["src", "dst"]), st.booleans())
def test_symmetric_csr_rejects_out_of_range_endpoints(n, off, which, negative):
    bad = -1 - off if negative else n + off
    src, dst = np.zeros(3, np.int64), np.zeros(3, np.int64)
    (src if which == "src" else dst)[1] = bad
    with pytest.raises(GraphValidationError, match=rf"^edges: {which} node id {bad} out of range"):
        symmetric_csr(src, dst, n)


# ---------------------------------------------------------------------- save / load
def assert_same_graph(a: Graph, b: Graph) -> None:
    aa, bb = arrays_of(a), arrays_of(b)
    assert aa.keys() == bb.keys()
    for k in aa:
        x, y = np.asarray(aa[k]), np.asarray(bb[k])
        if k in ("features_indices", "features_indptr"):  # scipy may pick int32 or int64
            assert np.array_equal(x, y), k
        else:
            assert x.dtype == y.dtype and x.shape == y.shape, k
            assert np.array_equal(x, y), k
    assert (a.name, a.num_classes, a.num_nodes, a.num_edges) == (b.name, b.num_classes, b.num_nodes, b.num_edges)


@PROPS
@given(graphs(), st.booleans())
def test_save_load_round_trip(g, mmap):
    with tempfile.TemporaryDirectory() as d:
        path = g.save(Path(d) / "g", extra_meta={"source": "hypothesis"})
        h = Graph.load(path, mmap=mmap, verify=True)
        assert_same_graph(g, h)
        assert h.sparse_features == g.sparse_features and h.multilabel == g.multilabel
        assert h.content_hash == g.content_hash  # from meta.json
        assert h.compute_hash() == g.content_hash  # recomputed from the loaded arrays
        assert h.meta["source"] == "hypothesis"
        assert sorted(p.name for p in Path(d).iterdir()) == ["g"]  # no temp dirs left


@PROPS
@given(graphs())
def test_force_save_over_its_own_memory_mapped_source(g):
    # The common "re-prepare in place" case: the arrays being written are mmaps of the
    # directory being replaced.
    with tempfile.TemporaryDirectory() as d:
        g.save(Path(d) / "g")
        h = Graph.load(Path(d) / "g", mmap=True)
        h.save(Path(d) / "g", force=True)
        assert Graph.load(Path(d) / "g", verify=True).content_hash == g.content_hash
        assert sorted(p.name for p in Path(d).iterdir()) == ["g"]


# ---------------------------------------------------------------------- content hash
@PROPS
@given(graphs(), st.data())
def test_hash_changes_when_any_single_element_changes(g, data):
    fields = {k: v for k, v in arrays_of(g).items() if np.asarray(v).size}
    name = data.draw(st.sampled_from(sorted(fields)), label="field")
    arr = np.array(fields[name])  # a writable copy
    i = data.draw(st.integers(0, arr.size - 1), label="index")
    flat = arr.reshape(-1)
    if arr.dtype == np.bool_:
        flat[i] = not flat[i]
    else:
        flat[i] = flat[i] + 1
    if name.startswith("features_"):
        # Set the CSR part after construction: scipy's constructor would reject e.g. a
        # shifted indptr, but the hash must see it whatever the matrix holds.
        changed = rebuild(g, features=g.features.copy())
        setattr(changed.features, name[len("features_"):], arr)
    else:
        changed = rebuild(g, **{name: arr})
    assert changed.compute_hash() != g.content_hash


@PROPS
@given(graphs())
def test_hash_depends_on_content_only(g):
    copy = rebuild(
        g,
        indptr=g.indptr.copy(),
        indices=g.indices.copy(),
        features=g.features.copy(),
        labels=g.labels.copy(),
        name="another-name",
    )
    copy.meta = {"provenance": "differs"}
    assert copy.compute_hash() == g.content_hash


def test_hash_distinguishes_array_boundaries():
    # The same bytes split differently between fields must not collide.
    z = np.zeros(2, bool)
    a = Graph(np.array([0, 1, 2]), np.array([1, 0]), np.zeros((2, 1), np.float32), np.array([0, 1]), z, z, z)
    b = rebuild(a, train_mask=np.array([True, False]), val_mask=np.array([False, False]))
    c = rebuild(a, train_mask=np.array([False, False]), val_mask=np.array([True, False]))
    assert len({a.content_hash, b.compute_hash(), c.compute_hash()}) == 3


# ---------------------------------------------------------------------- validation
@PROPS
@given(graphs(min_edges=2), st.data())
def test_indices_out_of_range_named(g, data):
    n = g.num_nodes
    bad = data.draw(st.one_of(st.integers(n, n + 100), st.integers(-100, -1)), label="bad")
    ix = g.indices.copy()
    ix[data.draw(st.integers(0, ix.size - 1), label="pos")] = bad
    with pytest.raises(GraphValidationError, match=rf"^indices: node id {bad} out of range \[0, {n}\)"):
        Graph(g.indptr, ix, g.features, g.labels, g.train_mask, g.val_mask, g.test_mask, num_classes=g.num_classes)


@PROPS
@given(graphs(min_nodes=1), st.sampled_from(MASKS), st.data())
def test_mask_wrong_length_named(g, mask, data):
    n = g.num_nodes
    length = data.draw(st.integers(0, n + 5).filter(lambda m: m != n), label="length")
    kw = {m: getattr(g, m) for m in MASKS}
    kw[mask] = np.zeros(length, bool)
    with pytest.raises(GraphValidationError, match=rf"^{mask}: expected shape \({n},\), got \({length},\)"):
        Graph(g.indptr, g.indices, g.features, g.labels, num_classes=g.num_classes, **kw)


@PROPS
@given(graphs(min_nodes=1), st.data())
def test_labels_out_of_range_named(g, data):
    assume(not g.multilabel)
    k = g.num_classes
    bad = data.draw(st.one_of(st.integers(k, k + 50), st.integers(-50, -1)), label="bad")
    y = g.labels.copy()
    y[data.draw(st.integers(0, y.size - 1), label="pos")] = bad
    with pytest.raises(GraphValidationError, match=rf"^labels: value {bad} out of range \[0, num_classes={k}\)"):
        Graph(g.indptr, g.indices, g.features, y, g.train_mask, g.val_mask, g.test_mask, num_classes=k)


@PROPS
@given(graphs(), st.integers(1, 50))
def test_indptr_not_starting_at_zero_named(g, shift):
    with pytest.raises(GraphValidationError, match=rf"^indptr: must start at 0, starts at {shift}"):
        Graph(g.indptr + shift, g.indices, g.features, g.labels, g.train_mask, g.val_mask, g.test_mask,
              num_classes=g.num_classes)


@PROPS
@given(graphs(min_nodes=1))
def test_multilabel_wrong_width_named(g):
    assume(g.multilabel)
    wide = np.zeros((g.num_nodes, g.num_classes + 1), np.float32)
    with pytest.raises(GraphValidationError, match=r"^labels: multi-label matrix must have shape"):
        Graph(g.indptr, g.indices, g.features, wide, g.train_mask, g.val_mask, g.test_mask,
              num_classes=g.num_classes)


# ---------------------------------------------------------------------- atomic writes
def small_graph(seed: int = 0) -> Graph:
    rng = np.random.default_rng(seed)
    n = 12
    ip, ix = symmetric_csr(rng.integers(0, n, 30), rng.integers(0, n, 30), n)
    return Graph(ip, ix, rng.standard_normal((n, 3)).astype(np.float32), rng.integers(0, 3, n),
                 rng.random(n) < 0.5, rng.random(n) < 0.5, rng.random(n) < 0.5, name=f"s{seed}")


def fail_after_first_np_save(monkeypatch, exc: BaseException) -> list[str]:
    calls: list[str] = []
    real = np.save

    def flaky(file, arr, *a, **kw):
        calls.append(getattr(file, "name", str(file)))
        if len(calls) > 1:
            raise exc
        return real(file, arr, *a, **kw)

    monkeypatch.setattr(np, "save", flaky)
    return calls


# A full disk becomes one GnnpipeError naming the path (issue #13); Ctrl-C stays itself.
INTERRUPTS = [(OSError(28, "No space left on device"), GnnpipeError), (KeyboardInterrupt(), KeyboardInterrupt)]


@pytest.mark.parametrize("exc,raised", INTERRUPTS)
def test_interrupted_save_leaves_nothing_loadable(tmp_path, monkeypatch, exc, raised):
    g = small_graph()
    calls = fail_after_first_np_save(monkeypatch, exc)
    with pytest.raises(raised):
        g.save(tmp_path / "g")
    assert len(calls) == 2  # it really was interrupted after one file
    monkeypatch.undo()
    assert list(tmp_path.iterdir()) == []  # neither the target nor a temp dir
    with pytest.raises(GnnpipeError):
        Graph.load(tmp_path / "g")


@pytest.mark.parametrize("exc,raised", INTERRUPTS)
def test_interrupted_force_save_keeps_the_old_graph(tmp_path, monkeypatch, exc, raised):
    old, new = small_graph(0), small_graph(1)
    old.save(tmp_path / "g")
    fail_after_first_np_save(monkeypatch, exc)
    with pytest.raises(raised):
        new.save(tmp_path / "g", force=True)
    monkeypatch.undo()
    assert [p.name for p in tmp_path.iterdir()] == ["g"]
    assert Graph.load(tmp_path / "g", verify=True).content_hash == old.content_hash


def test_force_save_interrupted_between_renames_keeps_a_graph_at_path(tmp_path, monkeypatch):
    old, new = small_graph(0), small_graph(1)
    old.save(tmp_path / "g")
    real = Path.rename
    calls = []

    def rename(self, target):
        calls.append((self.name, Path(target).name))
        if len(calls) == 2:  # the tmp -> path rename, after path -> .old
            raise KeyboardInterrupt
        return real(self, target)

    monkeypatch.setattr(Path, "rename", rename)
    with pytest.raises(KeyboardInterrupt):
        new.save(tmp_path / "g", force=True)
    monkeypatch.undo()
    # Either graph is acceptable, but something complete must still be at the path.
    assert Graph.load(tmp_path / "g", verify=True).content_hash in {old.content_hash, new.content_hash}


def test_save_refuses_existing_directory_without_force(tmp_path):
    old, new = small_graph(0), small_graph(1)
    old.save(tmp_path / "g")
    with pytest.raises(GnnpipeError, match=r"output directory exists \(use --force"):
        new.save(tmp_path / "g")
    assert Graph.load(tmp_path / "g", verify=True).content_hash == old.content_hash
    new.save(tmp_path / "g", force=True)
    assert Graph.load(tmp_path / "g", verify=True).content_hash == new.content_hash
    assert [p.name for p in tmp_path.iterdir()] == ["g"]  # the old copy is gone too


def test_save_refuses_even_a_non_graph_directory(tmp_path):
    (tmp_path / "g").mkdir()
    (tmp_path / "g" / "precious.txt").write_text("keep me")
    with pytest.raises(GnnpipeError, match="exists"):
        small_graph().save(tmp_path / "g")
    assert (tmp_path / "g" / "precious.txt").read_text() == "keep me"


def test_load_without_meta_json_names_the_problem(tmp_path):
    small_graph().save(tmp_path / "g")
    (tmp_path / "g" / "meta.json").unlink()
    with pytest.raises(GnnpipeError, match=r"meta\.json missing"):
        Graph.load(tmp_path / "g")
    with pytest.raises(GnnpipeError, match="no such dataset directory"):
        Graph.load(tmp_path / "absent")


def test_load_detects_tampered_array_with_verify(tmp_path):
    g = small_graph()
    g.save(tmp_path / "g")
    y = np.load(tmp_path / "g" / "labels.npy")
    y[0] = (y[0] + 1) % 3
    np.save(tmp_path / "g" / "labels.npy", y)
    with pytest.raises(GnnpipeError, match="content hash mismatch"):
        Graph.load(tmp_path / "g", verify=True)


def test_meta_json_is_plain_json(tmp_path):
    g = small_graph()
    g.save(tmp_path / "g", extra_meta={"n": np.int64(3), "x": np.float32(0.5), "arr": np.arange(2)})
    meta = json.loads((tmp_path / "g" / "meta.json").read_text())
    assert meta["meta"] == {"n": 3, "x": 0.5, "arr": [0, 1]}
    assert meta["content_hash"] == g.content_hash


def test_meta_with_numpy_bool_saves(tmp_path):
    small_graph().save(tmp_path / "g", extra_meta={"flag": np.bool_(True)})
    assert Graph.load(tmp_path / "g").meta["flag"] is True
