"""The dataset a training configuration names, loaded and checked.

A built-in synthetic graph (``sbm``, ``rmat``) or a prepared directory (verified against its
content hash unless ``--no-verify-data``), with ``--normalize-features`` applied. Kept apart
from the trainer so that benchmarks, tests and users load data without importing it.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import scipy.sparse as sp

from gnnpipe._base import GnnpipeError
from gnnpipe.config import TrainConfig
from gnnpipe.data import synthetic
from gnnpipe.data.catalog import resolve_dataset
from gnnpipe.data.graph import Graph
from gnnpipe.data.verify import verify_dataset


def load_graph_for(cfg: TrainConfig):
    """The dataset a config names, with ``--normalize-features`` applied."""
    g = _load_graph(cfg)
    check_splits(g, cfg.dataset)
    if cfg.normalize_features:
        g = row_normalized(g)
    return g


def check_splits(graph, dataset: str) -> None:
    """Refuse a dataset whose train, validation or test set is empty (loss 0, accuracy 0/0).

    Raises:
        GnnpipeError: naming the dataset and the empty split(s).
    """
    empty = [name for name in ("train", "val", "test")
             if not np.count_nonzero(np.asarray(getattr(graph, f"{name}_mask")))]
    if empty:
        raise GnnpipeError(f"dataset {dataset!r}: {' and '.join(empty)} set{'s are' if len(empty) > 1 else ' is'} "
                           "empty (no node in the mask); training needs all three")


def row_normalized(g):
    """A copy of ``g`` whose feature rows sum to 1 (all-zero rows stay zero).

    The Planetoid protocol of Kipf & Welling and of GCNII. Pure per-row scaling, so every
    rank computes the same rows whatever the partition.
    """
    f = g.features
    if sp.issparse(f):
        f = sp.csr_matrix(f, dtype=np.float32, copy=True)
        s = np.asarray(f.sum(axis=1)).ravel()
        inv = np.divide(1.0, s, out=np.zeros_like(s), where=s != 0).astype(np.float32)
        f = sp.diags(inv) @ f
        f = sp.csr_matrix(f, dtype=np.float32)
    else:
        f = np.array(f, dtype=np.float32)
        s = f.sum(axis=1, keepdims=True)
        f = np.divide(f, s, out=np.zeros_like(f), where=s != 0)
    # The content hash stays the dataset's: it names the data on disk that plans and
    # checkpoints are tied to (checkpoints also record normalize_features).
    return dataclasses.replace(g, features=f, validate=False, _hash=g.content_hash,
                               meta={**g.meta, "normalized_features": "row-sum"})


def _load_graph(cfg: TrainConfig):
    """The dataset a config names: a built-in synthetic graph or a prepared directory."""
    if cfg.dataset in ("sbm", "rmat"):
        if cfg.dataset == "sbm":
            return synthetic.sbm(
                num_nodes=cfg.synth_nodes, num_classes=cfg.synth_classes,
                avg_degree=cfg.synth_degree, homophily=cfg.synth_homophily, num_features=cfg.synth_features,
                feature_signal=cfg.synth_signal, seed=cfg.seed,
            )
        return synthetic.rmat(
            num_nodes=cfg.synth_nodes, num_edges=int(cfg.synth_nodes * cfg.synth_degree),
            num_classes=cfg.synth_classes, num_features=cfg.synth_features, seed=cfg.seed,
            feature_signal=cfg.synth_signal, homophily=cfg.synth_homophily,
        )
    path = resolve_dataset(cfg.dataset, cfg.root)
    g = Graph.load(path, mmap=True)
    if cfg.verify_data:  # edited arrays would otherwise pass the plan and checkpoint checks
        verify_dataset(path, g)
    return g
