"""Runs of the same pipeline with a training switch on and off, compared (the tests of
``--shared-input`` and ``--local-carry``: switches that move work and bytes, not numbers)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import torch

from gnnpipe.spawn import run_ranks

ENV = {"PYTHONPATH": str(Path(__file__).resolve().parent.parent)}


def pairs(world: int, runs: list, switch: str) -> list:
    """Each run of ``runs`` (``helpers.rankfns.pipeline_run``'s keywords) with ``switch`` on
    and off, in one launch of ``world`` ranks: per run ``(on, off)``, each a list of the
    ranks' results."""
    both = [dict(r, **{switch: s}) for r in runs for s in (True, False)]
    res = run_ranks("helpers.rankfns:many", world, "torch", args={"fn": "pipeline_run", "runs": both},
                    env=ENV, timeout_s=300)
    return [([rank[2 * i] for rank in res], [rank[2 * i + 1] for rank in res]) for i in range(len(runs))]


def same_training(on: list, off: list, what: str) -> None:
    """The same losses and first-step gradients on every rank, up to the order of sums."""
    np.testing.assert_allclose(on[0]["losses"], off[0]["losses"], rtol=1e-5, err_msg=what)
    for a, b in zip(on, off):
        assert a["grads"].keys() == b["grads"].keys()
        for k in a["grads"]:
            torch.testing.assert_close(a["grads"][k], b["grads"][k], rtol=1e-4, atol=1e-6,
                                       msg=lambda m, k=k: f"{what}, {k}: {m}")


def bag_of_words_graph(path: Path) -> str:
    """A 240-node SBM graph whose 40 features are sparse 0/1 bags of words (Physics' kind),
    saved at ``path``; returns the path as a ``dataset`` value."""
    import scipy.sparse as sp

    from gnnpipe.data import synthetic

    g = synthetic.sbm(num_nodes=240, num_classes=4, avg_degree=6.0, num_features=40, seed=0)
    rng = np.random.default_rng(0)
    bags = sp.csr_matrix((rng.random((240, 40)) < 0.1).astype(np.float32))
    dataclasses.replace(g, features=bags, validate=False, _hash=None).save(path)
    return str(path)
