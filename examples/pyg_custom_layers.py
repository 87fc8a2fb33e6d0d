"""Train your own chain of PyG layers with gnnpipe, exactly, and check it against plain PyG.

Run it in one process, or on N ranks (each rank runs this whole script)::

    .venv/bin/python examples/pyg_custom_layers.py
    .venv/bin/mpirun -np 2 .venv/bin/python examples/pyg_custom_layers.py

It builds a ``torch_geometric.data.Data`` (a small synthetic stochastic-block-model graph:
no download), a chain of 8 ``GraphConv(aggr="mean")`` layers, trains it with
``gnnpipe.fit(graph, layers=..., exact=True)`` in pipeline mode (one stage per rank) and in
graph mode (one part per rank), and prints each epoch's loss next to a plain PyG training
loop's over the same initial weights, then PASS or FAIL (relative difference <= 1e-5).
"""

from __future__ import annotations

import copy
import sys

import torch
from torch import nn
from torch_geometric.nn import GraphConv

import gnnpipe
from gnnpipe.comm import detect_launch
from gnnpipe.data import synthetic

EPOCHS, HIDDEN, DEPTH, LR = 10, 32, 8, 0.01
TOL = 1e-5


def make_data():
    """A PyG ``Data`` with features, labels and train/val/test masks (what a user brings)."""
    return synthetic.sbm(num_nodes=1000, num_classes=4, avg_degree=8, num_features=16, seed=0).to_pyg()


def make_layers(num_features: int, num_classes: int) -> list[nn.Module]:
    """8 GraphConv layers; ``aggr="mean"`` keeps activations in range over 8 hops and is local
    (node v's output reads only v's row and its incoming edges), so it runs exactly on
    gnnpipe's sub-graphs."""
    torch.manual_seed(0)
    widths = [num_features] + [HIDDEN] * (DEPTH - 1) + [num_classes]
    return [GraphConv(a, b, aggr="mean") for a, b in zip(widths[:-1], widths[1:])]


def plain_pyg(data, layers) -> list[float]:
    """The loop a PyG user writes: same layers and weights, ReLU between, Adam, no dropout."""
    model = nn.ModuleList(copy.deepcopy(layers))
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    losses = []
    for _ in range(EPOCHS):
        h = data.x
        for i, conv in enumerate(model):
            h = conv(h, data.edge_index)
            if i < len(model) - 1:
                h = h.relu()
        loss = nn.functional.cross_entropy(h[data.train_mask], data.y[data.train_mask])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def main() -> int:
    data = make_data()
    graph = gnnpipe.Graph.from_pyg(data, name="sbm-example")
    layers = make_layers(data.num_features, int(data.y.max()) + 1)
    want = plain_pyg(data, layers)
    got = {}
    for mode in ("pipeline", "graph"):
        # fit copies the layers (they keep their initial weights) and, under mpirun, gives
        # every rank rank 0's initial weights
        res = gnnpipe.fit(graph, layers=layers, mode=mode, exact=True, epochs=EPOCHS, lr=LR, dropout=0.0,
                          eval_every=EPOCHS, progress=False)
        got[mode] = [m["loss"] for m in res.metrics]
    launch = detect_launch()  # every rank holds the same Result: rank 0 prints
    ok = all(abs(g - w) <= TOL * abs(w) for losses in got.values() for g, w in zip(losses, want))
    if launch.rank == 0:
        print(f"{DEPTH} x GraphConv on {graph.num_nodes} nodes, exact, {launch.world_size} rank(s); "
              f"test accuracy {res.summary['test_acc_at_best_val']:.3f}")
        print(f"{'epoch':>5} {'plain PyG':>12} {'pipeline':>12} {'graph':>12}")
        for e, w in enumerate(want):
            print(f"{e:>5} {w:>12.6f} {got['pipeline'][e]:>12.6f} {got['graph'][e]:>12.6f}")
        print(("PASS" if ok else "FAIL") + f": gnnpipe's losses equal plain PyG's to {TOL:g} relative")
        # the trained model is an ordinary module: same logits as predict()
        res.model.eval()
        with torch.no_grad():
            same = torch.allclose(res.model(data.x, data.edge_index), res.predict(), atol=1e-5)
        print(("PASS" if same else "FAIL") + ": Result.model(x, edge_index) equals Result.predict()")
        ok = ok and same
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
