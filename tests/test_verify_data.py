"""Training verifies a prepared dataset's content hash, cached by file size and mtime."""

from __future__ import annotations

import numpy as np
import pytest

from gnnpipe import GnnpipeError
from gnnpipe.config import TrainConfig
from gnnpipe.data import synthetic
from gnnpipe.data.graph import Graph
from gnnpipe.data.verify import CACHE_FILE, verify_dataset


@pytest.fixture
def ds(tmp_path):
    synthetic.sbm(num_nodes=400, num_classes=4, avg_degree=6.0, num_features=8, seed=0).save(tmp_path / "ds")
    return tmp_path / "ds"


def test_hash_is_cached_and_recomputed_when_a_file_changes(ds):
    assert verify_dataset(ds, Graph.load(ds)) is True  # hashed
    assert (ds / CACHE_FILE).is_file()
    assert verify_dataset(ds, Graph.load(ds)) is False  # the cache vouched
    lab = np.load(ds / "labels.npy")
    lab[3] = (lab[3] + 1) % 4
    np.save(ds / "labels.npy", lab)
    with pytest.raises(GnnpipeError, match="content hash mismatch.*--no-verify-data"):
        verify_dataset(ds, Graph.load(ds))


def test_a_stale_cache_is_not_trusted(ds):
    verify_dataset(ds, Graph.load(ds))
    f = np.load(ds / "features.npy")
    f[0, 0] += 1.0
    np.save(ds / "features.npy", f)  # new size/mtime: the cached key no longer matches
    with pytest.raises(GnnpipeError, match="content hash mismatch"):
        verify_dataset(ds, Graph.load(ds))


def test_trainer_loads_verified_and_opt_out(ds):
    from gnnpipe.data.load import load_graph_for

    lab = np.load(ds / "labels.npy")
    lab[0] = (lab[0] + 1) % 4
    np.save(ds / "labels.npy", lab)
    with pytest.raises(GnnpipeError, match="content hash mismatch"):
        load_graph_for(TrainConfig(dataset=str(ds)))
    g = load_graph_for(TrainConfig(dataset=str(ds), verify_data=False))
    assert g.num_nodes == 400
