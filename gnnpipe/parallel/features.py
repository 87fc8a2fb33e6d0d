"""Input-feature rows: gathered from the (memory-mapped) dataset, dense or sparse.

Features are constant, so they never travel: every rank reads the rows it needs (its part
and halo in graph mode, the first stage's chunks in pipeline mode) once at start-up.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch


def features_to_tensor(f, device: torch.device | str = "cpu") -> torch.Tensor:
    """Node features (dense ndarray or scipy CSR) as a float32 tensor (sparse stays sparse CSR)."""
    if sp.issparse(f):
        f = sp.csr_matrix(f)
        t = torch.sparse_csr_tensor(
            torch.from_numpy(np.asarray(f.indptr, dtype=np.int64)),
            torch.from_numpy(np.asarray(f.indices, dtype=np.int64)),
            torch.from_numpy(np.asarray(f.data, dtype=np.float32)),
            size=f.shape,
        )
        return t.to(device)
    return torch.from_numpy(np.ascontiguousarray(f, dtype=np.float32)).to(device)


def gather_feature_rows(features, rows: np.ndarray):
    """Rows of a (possibly memory-mapped) dense or sparse feature matrix, in order."""
    rows = np.asarray(rows, dtype=np.int64)
    if sp.issparse(features):
        return sp.csr_matrix(features)[rows]
    order = np.argsort(rows, kind="stable")  # sorted reads are sequential on a memmap
    out = np.empty((rows.size, features.shape[1]), dtype=np.float32)
    out[order] = np.asarray(features[rows[order]], dtype=np.float32)
    return out


def concat_rows(a, b):
    """Stack two feature blocks (both dense or both scipy sparse)."""
    if sp.issparse(a):
        return sp.vstack([a, b], format="csr")
    return np.concatenate([a, b], axis=0)


def feature_rows(x, ids: np.ndarray | torch.Tensor):
    """Rows ``ids`` of a dense tensor, or of a scipy / torch sparse CSR matrix, as a tensor."""
    import scipy.sparse as sp

    ids = np.asarray(ids, dtype=np.int64)
    if sp.issparse(x):
        return features_to_tensor(sp.csr_matrix(x)[ids])
    if isinstance(x, torch.Tensor):
        return x.index_select(0, torch.from_numpy(ids))
    return torch.from_numpy(np.ascontiguousarray(np.asarray(x)[ids], dtype=np.float32))
