"""--normalize-features: rows sum to 1, zero rows stay zero, the dataset hash is kept."""

import numpy as np
import scipy.sparse as sp

from gnnpipe.data.graph import Graph
from gnnpipe.data.load import row_normalized


def _graph(features) -> Graph:
    n = features.shape[0]
    src = np.arange(n - 1)
    return Graph.from_edges(src, src + 1, n, features, np.zeros(n, np.int64), np.ones(n, bool),
                            np.zeros(n, bool), np.zeros(n, bool))


def test_dense_and_sparse_rows_sum_to_one():
    x = np.array([[1, 3, 0], [0, 0, 0], [2, 2, 4]], np.float32)
    for f in (x, sp.csr_matrix(x)):
        g = _graph(f)
        h = row_normalized(g)
        dense = h.features.toarray() if sp.issparse(h.features) else h.features
        np.testing.assert_allclose(dense, [[0.25, 0.75, 0], [0, 0, 0], [0.25, 0.25, 0.5]], rtol=1e-6)
        assert sp.issparse(h.features) == sp.issparse(f)
        assert h.content_hash == g.content_hash  # plans and checkpoints stay tied to the data
        assert (g.features.toarray() if sp.issparse(f) else g.features)[0, 1] == 3  # input untouched
