"""Tests of the synthetic SBM and R-MAT generators (gnnpipe.data.synthetic)."""

from __future__ import annotations

import inspect
import logging

import numpy as np
import pytest

from gnnpipe import GnnpipeError
from gnnpipe.data.graph import Graph
from gnnpipe.data.synthetic import rmat, sbm

GENERATORS = {
    "sbm": lambda seed=0, **kw: sbm(3000, avg_degree=12.0, seed=seed, **kw),
    "rmat": lambda seed=0, **kw: rmat(3000, 36000, seed=seed, **kw),
}


def edge_homophily(g: Graph) -> float:
    """Fraction of directed edges whose endpoints share a label (computed independently)."""
    src = np.repeat(np.arange(g.num_nodes), np.diff(g.indptr))
    return float(np.mean(g.labels[src] == g.labels[g.indices]))


def nearest_class_mean_accuracy(g: Graph) -> float:
    """Fit class means on the train mask, classify test nodes by the nearest mean."""
    x, y = np.asarray(g.features), g.labels
    means = np.stack([x[g.train_mask & (y == c)].mean(0) for c in range(g.num_classes)])
    xt = x[g.test_mask]
    d2 = (xt**2).sum(1)[:, None] - 2 * xt @ means.T + (means**2).sum(1)[None]
    return float(np.mean(d2.argmin(1) == y[g.test_mask]))


# ---------------------------------------------------------------------- determinism
@pytest.mark.parametrize("gen", GENERATORS)
def test_same_seed_same_hash_different_seed_different(gen):
    make = GENERATORS[gen]
    g1, g2, g3 = make(seed=7), make(seed=7), make(seed=8)
    assert g1.content_hash == g2.content_hash
    assert g1.compute_hash() == g2.compute_hash()
    assert g1.content_hash != g3.content_hash
    # Not just the features: the structure itself differs between seeds.
    assert not np.array_equal(g1.indices, g3.indices)


@pytest.mark.parametrize("gen", GENERATORS)
def test_feature_width_does_not_change_structure(gen):
    # Separate random streams: a different F must leave edges, labels and split alone.
    a, b = GENERATORS[gen](num_features=16), GENERATORS[gen](num_features=40)
    for field in ("indptr", "indices", "labels", "train_mask", "val_mask", "test_mask"):
        assert np.array_equal(getattr(a, field), getattr(b, field)), field
    assert a.features.shape == (3000, 16) and b.features.shape == (3000, 40)


# ---------------------------------------------------------------------- sizes and format
@pytest.mark.parametrize(
    "n,deg", [(3000, 12.0), (1001, 7.3), (50, 3.0), (9, 8.0), (1, 0.0)]
)
def test_sbm_sizes_exact(n, deg):
    k = min(4, n)
    g = sbm(n, num_classes=k, avg_degree=deg, num_features=5)
    want = int(round(deg * n)) // 2 * 2  # contract: 2*floor(round(avg_degree*N)/2)
    assert g.num_nodes == n
    assert g.num_edges == want
    assert g.features.shape == (n, 5) and g.features.dtype == np.float32
    assert g.labels.dtype == np.int64 and g.num_classes == k


@pytest.mark.parametrize("n,e", [(3000, 36000), (1000, 9999), (4097, 20000), (64, 400), (3, 6)])
def test_rmat_sizes_exact(n, e):
    g = rmat(n, e, num_classes=min(8, n), num_features=4)
    assert g.num_nodes == n  # not rounded up to a power of two
    assert g.num_edges == e // 2 * 2


def test_rmat_complete_graph_reachable_and_overfull_refused():
    # 3 nodes hold 6 directed edges at most; exactly that is reachable, more is refused.
    assert rmat(3, 6, num_classes=2).num_edges == 6
    with pytest.raises(GnnpipeError, match="num_edges"):
        rmat(3, 8, num_classes=2)
    with pytest.raises(GnnpipeError, match="num_edges"):
        sbm(3, num_classes=2, avg_degree=3.0)


def test_sbm_short_of_edges_logs_warning(caplog):
    # One class of size 2 can hold one edge only when homophily=1: the request cannot be met.
    with caplog.at_level(logging.WARNING, logger="gnnpipe.data.synthetic"):
        g = sbm(4, num_classes=2, avg_degree=3.0, homophily=1.0)
    assert g.num_edges == 4  # the two within-class edges, both directions
    assert "distinct undirected edges" in caplog.text


@pytest.mark.parametrize(
    "make",
    [
        lambda: sbm(2000, avg_degree=15, seed=3),
        lambda: sbm(500, num_classes=1, avg_degree=30),
        lambda: sbm(40, num_classes=7, avg_degree=20, homophily=0.0),
        lambda: rmat(2000, 30000, seed=3),
        lambda: rmat(777, 20000, a=0.45, b=0.15, c=0.15, num_classes=5),
        lambda: rmat(128, 8000, homophily=1.0),
    ],
)
def test_symmetric_sorted_no_self_loops(make):
    g = make()
    g.check()
    g.check_symmetric()  # symmetric, strictly increasing rows, no self-loop


def test_masks_are_a_random_partition_with_the_requested_sizes():
    g = sbm(1000, train_frac=0.5, val_frac=0.3, seed=1)
    total = g.train_mask.astype(int) + g.val_mask + g.test_mask
    assert np.all(total == 1)
    assert (g.train_mask.sum(), g.val_mask.sum(), g.test_mask.sum()) == (500, 300, 200)
    # Random, not the first 500 ids.
    assert 0 < g.train_mask[:500].sum() < 500


def test_meta_records_generator_and_every_parameter():
    for fn, g in ((sbm, sbm(100, seed=4, homophily=0.3)), (rmat, rmat(100, 500, seed=4, b=0.2))):
        assert g.meta["generator"] == fn.__name__
        params = set(inspect.signature(fn).parameters) - {"name"}
        assert params <= set(g.meta["params"]), params - set(g.meta["params"])
        assert g.meta["params"]["seed"] == 4
    assert sbm(100, homophily=0.3).meta["params"]["homophily"] == 0.3
    assert rmat(100, 500, b=0.2).meta["params"]["b"] == 0.2


def test_save_load_round_trip(tmp_path):
    g = rmat(500, 4000, seed=2, name="r")
    g.save(tmp_path / "r")
    h = Graph.load(tmp_path / "r", verify=True)
    assert h.content_hash == g.content_hash
    assert h.meta["params"] == g.meta["params"]
    assert h.name == "r"


@pytest.mark.parametrize(
    "call,field",
    [
        (lambda: sbm(10, homophily=1.5), "homophily"),
        (lambda: sbm(4, num_classes=8), "num_classes"),
        (lambda: sbm(0), "num_nodes"),
        (lambda: sbm(10, avg_degree=-1), "avg_degree"),
        (lambda: sbm(10, train_frac=0.9, val_frac=0.2), "train_frac"),
        (lambda: sbm(10, num_features=0), "num_features"),
        (lambda: rmat(10, 20, a=0.6, b=0.3, c=0.3), "a \\+ b \\+ c"),
        (lambda: rmat(10, -2), "num_edges"),
        (lambda: rmat(10, 20, homophily=-0.1), "homophily"),
        (lambda: rmat(10.5, 20), "num_nodes"),
    ],
)
def test_bad_parameters_name_the_field(call, field):
    with pytest.raises(GnnpipeError, match=f"^{field}"):
        call()


# ---------------------------------------------------------------------- statistical behaviour
def test_sbm_homophily_knob():
    lo = edge_homophily(sbm(4000, avg_degree=10, homophily=0.1, seed=5))
    hi = edge_homophily(sbm(4000, avg_degree=10, homophily=0.9, seed=5))
    # 20k undirected edges: the binomial standard error is ~0.003.
    assert abs(lo - 0.1) < 0.02
    assert abs(hi - 0.9) < 0.02


def test_sbm_balanced_classes_and_poisson_like_degrees():
    g = sbm(8000, num_classes=8, avg_degree=10)
    assert np.bincount(g.labels).tolist() == [1000] * 8
    deg = g.degrees()
    assert abs(deg.mean() - 10) < 1e-9
    assert deg.max() < 3 * deg.mean()  # Poisson(10): P(deg >= 30) ~ 1e-7 per node


def test_rmat_homophily_knob():
    h0 = edge_homophily(rmat(4096, 40000, homophily=0.0, seed=5))
    h9 = edge_homophily(rmat(4096, 40000, homophily=0.9, seed=5))
    assert h0 < 0.35  # plain R-MAT with the default (a, b, c) barely correlates blocks
    assert h9 >= 0.9 - 0.02
    assert h9 > h0 + 0.5


def test_rmat_heavy_tailed_degrees():
    g = rmat(4096, 40000, seed=1)
    deg = g.degrees()
    assert deg.max() > 20 * deg.mean()
    # Versus an SBM of the same size, whose maximum stays near its mean.
    s = sbm(4096, avg_degree=deg.mean(), seed=1).degrees()
    assert deg.max() > 10 * s.max()
    # A power law leaves many low-degree nodes: the median is below the mean.
    assert np.median(deg) < 0.6 * deg.mean()


def test_rmat_ids_do_not_encode_degree():
    # Ids are shuffled: the top-degree nodes are spread over the id range, not at 0.
    deg = rmat(4096, 40000, seed=2).degrees()
    top = np.argsort(deg)[-50:]
    assert top.mean() > 1000 and top.mean() < 3096


def test_rmat_classes_cover_all_labels_with_bounded_imbalance():
    for k in (8, 5, 3):
        g = rmat(4096, 20000, num_classes=k, seed=0)
        counts = np.bincount(g.labels, minlength=k)
        assert counts.size == k and counts.min() > 0
        assert counts.max() <= 2.3 * counts.min()


@pytest.mark.parametrize("gen", GENERATORS)
def test_features_carry_label_signal(gen):
    acc = nearest_class_mean_accuracy(GENERATORS[gen](feature_signal=2.0))
    assert acc > 0.6  # chance is 1/8
    acc0 = nearest_class_mean_accuracy(GENERATORS[gen](feature_signal=0.0))
    assert acc0 < 0.25  # no signal: chance level, up to noise


def test_default_signal_is_informative_but_not_trivial():
    # Signal 1 is meant to leave room for neighbour aggregation to help.
    acc = nearest_class_mean_accuracy(sbm(4000))
    assert 0.2 < acc < 0.8
