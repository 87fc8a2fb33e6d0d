"""Per-epoch time of gnnpipe's one-process models against PyG's two CPU paths.

For Squirrel and Coauthor-Physics, GCN-32 and GCNII-32 (d=100, dropout 0.5, Adam step),
at 1 and 2 intra-op threads, it times one training epoch (forward + backward + step) of:

- ``pyg_edge_index``: plain PyG layers on ``edge_index`` (PyG's default scatter path),
  dense features, ``F.dropout``;
- ``pyg_adj_t``: the same PyG layers fed a cached, pre-normalised CSR ``adj_t`` (PyG's
  fastest CPU path), dense features;
- ``gnnpipe``: :func:`gnnpipe.models.build_model` on ``Block.full`` (CSR SpMM with cached
  transpose, hashed dropout, bag-of-words features kept sparse);

and the limit of this machine: the epoch's FLOPs divided by the measured GEMM and SpMM
throughput (element-wise work counted as free). It prints a table and writes
``results/overhead.json``; it reports ratios and asserts nothing.

Raw data are read directly from ``--datasets`` (default ``$GNNPIPE_DATASETS`` or
``../shared/datasets``). ``gnnpipe-bench overhead`` (:func:`run`) writes
``results/overhead/`` (CSV, JSON, summary.md, a plot); the old script interface stays::

    python scripts/bench_overhead.py [--datasets DIR] [--epochs 3] [--threads 1 2]
        [--skip-edge-index] [--out results/overhead.json]

Target (issue 7): gnnpipe ≤ 0.6× the fastest PyG path (``adj_t``) for GCN-32 d=100 on
Squirrel and Physics.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn.functional as Fn

from gnnpipe.data.graph import symmetric_csr
from gnnpipe.models import Block, ModelConfig, RunCtx, build_model, loss_fn

REPO = Path(__file__).resolve().parents[2]


def default_datasets() -> Path:
    """Raw dataset root: ``$GNNPIPE_DATASETS`` or ``<repo>/../shared/datasets``."""
    import os

    return Path(os.environ.get("GNNPIPE_DATASETS", REPO.parent / "shared" / "datasets"))
D, L, P = 100, 32, 0.5


def load(name: str, root: Path):
    if name == "squirrel":
        z = np.load(root / "squirrel" / "squirrel.npz", allow_pickle=False)
        e = z["edges"]
        n = z["node_features"].shape[0]
        ip, ix = symmetric_csr(e[:, 0], e[:, 1], n)
        x = sp.csr_matrix(z["node_features"])
        y = z["node_labels"]
        train = z["train_masks"][0]
    else:
        z = np.load(root / "coauthor_physics" / "ms_academic_phy.npz", allow_pickle=False)
        shape = tuple(int(s) for s in z["adj_shape"])
        a = sp.csr_matrix((z["adj_data"], z["adj_indices"], z["adj_indptr"]), shape=shape).tocoo()
        n = shape[0]
        ip, ix = symmetric_csr(a.row, a.col, n)
        x = sp.csr_matrix((z["attr_data"], z["attr_indices"], z["attr_indptr"]),
                          shape=tuple(int(s) for s in z["attr_shape"]))
        y = z["labels"]
        train = np.random.default_rng(0).random(n) < 0.1  # timing only
    x = x.astype(np.float32)
    return ip, ix, x, torch.as_tensor(y), torch.as_tensor(train)


def torch_csr(m: sp.csr_matrix) -> torch.Tensor:
    return torch.sparse_csr_tensor(torch.as_tensor(m.indptr.astype(np.int64)),
                                   torch.as_tensor(m.indices.astype(np.int64)),
                                   torch.as_tensor(m.data), m.shape)


class PygStack(torch.nn.Module):
    """Plain PyG GCN / GCNII the way PyG's examples write them."""

    def __init__(self, model: str, fin: int, c: int):
        super().__init__()
        from torch_geometric.nn import GCN2Conv, GCNConv

        self.model = model
        if model == "gcn":
            dims = [fin] + [D] * (L - 1) + [c]
            self.convs = torch.nn.ModuleList(
                GCNConv(dims[i], dims[i + 1], cached=True) for i in range(L))
        else:
            self.lin0, self.lin1 = torch.nn.Linear(fin, D), torch.nn.Linear(D, c)
            self.convs = torch.nn.ModuleList(
                GCN2Conv(D, 0.1, 0.5, i + 1, cached=True) for i in range(L))

    def forward(self, x, adj):
        if self.model == "gcn":
            for i, conv in enumerate(self.convs):
                x = conv(Fn.dropout(x, P, self.training), adj)
                if i < L - 1:
                    x = x.relu()
            return x
        x = x0 = self.lin0(Fn.dropout(x, P, self.training)).relu()
        for conv in self.convs:
            x = conv(Fn.dropout(x, P, self.training), x0, adj).relu()
        return self.lin1(Fn.dropout(x, P, self.training))


def time_epochs(step, epochs: int) -> float:
    step(0)  # warm-up: caches, allocator, lazy structures
    ts = []
    for e in range(epochs):
        t = time.perf_counter()
        step(e + 1)
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def rates(ip, ix, x_csr: torch.Tensor, n: int) -> dict:
    """Measured GEMM (GFLOP/s), adjacency SpMM and feature SpMM throughput."""
    def best(f, k=5):
        f()
        return min((lambda t0: (f(), time.perf_counter() - t0)[1])(time.perf_counter()) for _ in range(k))

    a = torch.sparse_csr_tensor(torch.as_tensor(ip), torch.as_tensor(ix),
                                torch.ones(ix.size), (n, n))
    h, w = torch.randn(n, D), torch.randn(D, D)
    g = best(lambda: h @ w)
    s = best(lambda: torch.sparse.mm(a, h))
    wf = torch.randn(x_csr.shape[1], D)
    sf = best(lambda: torch.sparse.mm(x_csr, wf))
    return {"gemm_gflops": 2 * n * D * D / g / 1e9, "spmm_gflops": 2 * ix.size * D / s / 1e9,
            "feat_spmm_gflops": 2 * x_csr._nnz() * D / sf / 1e9}


def limit_seconds(model: str, n: int, nnz: int, nnz_x: int, c: int, r: dict) -> float:
    """FLOPs of one epoch / measured throughput; element-wise work counted as free."""
    gemm = lambda rows, i, o: 2.0 * rows * i * o  # noqa: E731
    g_fl = s_fl = f_fl = 0.0
    f_fl += 2 * (2.0 * nnz_x * D)  # input transform: forward + weight gradient
    if model == "gcn":
        g_fl += 3 * gemm(n, D, D) * (L - 2) + 3 * gemm(n, D, c)  # fwd, dX, dW
        s_fl += 2 * (2.0 * nnz * D) * (L - 1) + 2 * (2.0 * nnz * c)  # first layer: no dX
    else:
        g_fl += 3 * gemm(n, D, D) * L + 3 * gemm(n, D, c)
        s_fl += 2 * (2.0 * nnz * D) * L
    return (g_fl / (r["gemm_gflops"] * 1e9) + s_fl / (r["spmm_gflops"] * 1e9)
            + f_fl / (r["feat_spmm_gflops"] * 1e9))


def bench(name, root, model, threads, epochs, skip_edge_index) -> dict:
    torch.set_num_threads(threads)
    ip, ix, x, y, train = load(name, root)
    n, c = x.shape[0], int(y.max()) + 1
    xs = torch_csr(x)
    res: dict = {"dataset": name, "model": f"{model}-{L}", "threads": threads, "nodes": n,
                 "edges": int(ix.size), "features": x.shape[1], "feature_nnz": int(x.nnz)}

    # gnnpipe
    block = Block.full(ip, ix)
    m = build_model(ModelConfig(model, x.shape[1], c, layers=L, hidden=D, dropout=P), 0)
    opt = torch.optim.Adam(m.parameters(), lr=1e-3)

    def ours(ep):
        opt.zero_grad()
        loss_fn(m(block, xs, RunCtx(True, ep, 0)), y, train).backward()
        opt.step()
    res["gnnpipe_s"] = time_epochs(ours, epochs)

    # PyG paths (dense features, as PyG layers take them)
    xd = torch.as_tensor(x.toarray())
    deg = np.diff(ip).astype(np.float32) + 1
    rows = np.repeat(np.arange(n), np.diff(ip))
    norm = 1 / np.sqrt(deg[rows] * deg[ix])
    ahat = sp.csr_matrix((norm, ix, ip), shape=(n, n)) + sp.diags(1 / deg).tocsr()
    adj_t = torch_csr(ahat.astype(np.float32).tocsr())
    ei = torch.as_tensor(np.stack([ix, rows]))
    for label, adj in (("pyg_adj_t", adj_t), ("pyg_edge_index", ei)):
        if label == "pyg_edge_index" and skip_edge_index:
            continue
        pm = PygStack(model, x.shape[1], c)
        if label == "pyg_adj_t":  # pre-normalised: the layers must not normalise again
            for conv in pm.convs:
                conv.normalize = False
        popt = torch.optim.Adam(pm.parameters(), lr=1e-3)

        def step(ep, pm=pm, popt=popt, adj=adj):
            pm.train()
            popt.zero_grad()
            Fn.cross_entropy(pm(xd, adj)[train], y[train]).backward()
            popt.step()
        res[f"{label}_s"] = time_epochs(step, epochs if label == "pyg_adj_t" else 1)

    r = rates(ip, ix, xs, n)
    res.update(r)
    res["limit_s"] = limit_seconds(model, n, int(ix.size), int(x.nnz), c, r)
    res["ratio_vs_adj_t"] = res["gnnpipe_s"] / res["pyg_adj_t_s"]
    if "pyg_edge_index_s" in res:
        res["ratio_vs_edge_index"] = res["gnnpipe_s"] / res["pyg_edge_index_s"]
    res["ratio_vs_limit"] = res["gnnpipe_s"] / res["limit_s"]
    return res


def plot(rows: list[dict], path: Path, settings: str = "") -> Path:
    """Seconds per epoch of each code path (bars, one colour per path everywhere:
    :data:`gnnpipe.bench.common.PATH_COLORS`) per (dataset, model, threads). A path no row
    measured (PyG's edge_index in ``--quick``) gets no bar and no legend entry.

    Args:
        rows: rows of :func:`run`.
        path: the PNG.
        settings: the title's second line (model shape, epochs).

    Returns:
        ``path``.
    """
    from matplotlib.patches import Patch

    from gnnpipe.bench import common as C

    plt = C.pyplot()
    series = [(k, lab) for k, lab in (("pyg_edge_index_s", "PyG edge_index"), ("pyg_adj_t_s", "PyG adj_t"),
                                      ("gnnpipe_s", "gnnpipe"), ("limit_s", "limit"))
              if any(k in r for r in rows)]
    fig, ax = plt.subplots(figsize=(max(4.8, 1.4 * len(rows) + 1.5), 3.8), layout="constrained")
    xs = list(range(len(rows)))
    w = 0.8 / len(series)
    for i, (key, lab) in enumerate(series):
        off = (i - (len(series) - 1) / 2) * w
        pts = [(x + off, r[key]) for x, r in zip(xs, rows) if key in r]
        ax.bar([p[0] for p in pts], [p[1] for p in pts], w, color=C.PATH_COLORS[lab])
    ax.set_xticks(xs)
    ax.set_xticklabels([f"{r['dataset']} {r['model']}\n{r['threads']} thread(s)" for r in rows])
    ax.set_xlim(-0.8, len(rows) - 0.2)  # one group (--quick): bars of the usual width, not the whole axis
    ax.set_yscale("log")
    # Room below the smallest bar: on a log axis the bottom is arbitrary, and a bar ending
    # at the axis' edge reads as zero.
    vals = [r[k] for r in rows for k, _ in series if k in r]
    ax.set_ylim(min(vals) / 2, max(vals) * 1.3)
    C.plain_ticks(ax)
    ax.set_ylabel("seconds per epoch")
    C.legend_below(fig, [Patch(color=C.PATH_COLORS[lab]) for _, lab in series], [lab for _, lab in series])
    ax.set_title("One process: gnnpipe against PyG and the machine's limit" + (f"\n{settings}" if settings else ""),
                 fontsize=9.5)
    return C.save_fig(fig, path)


def run(out: Path, quick: bool = False, only=None, progress: bool = True, threads=(1,), epochs: int = 3,
        datasets: Path | None = None) -> tuple[list[dict], str]:
    """``gnnpipe-bench overhead``: every (dataset, model) at each thread count; write ``out/overhead/``.

    Args:
        out: results root.
        quick: Squirrel GCN only, 1 timed epoch, without PyG's slow edge_index path.
        only: names among ``squirrel-gcn``, ``squirrel-gcnii``, ``physics-gcn``, ``physics-gcnii``.
        progress: tqdm bar.
        threads: intra-op thread counts.
        epochs: timed epochs per fast path (median).
        datasets: raw dataset root.

    Returns:
        (rows, markdown summary).
    """
    from tqdm import tqdm

    from gnnpipe.bench import common as C

    root = datasets or default_datasets()
    combos = [(ds, m) for ds in ("squirrel", "physics") for m in ("gcn", "gcnii")]
    if quick:
        combos, epochs = [("squirrel", "gcn")], 1
    elif only:
        C.check_only(only, [f"{ds}-{m}" for ds, m in combos], "configuration")
        combos = [c for c in combos if f"{c[0]}-{c[1]}" in only]
    rows = []
    todo = [(t, ds, m) for t in threads for ds, m in combos]
    for thr, ds, m in tqdm(todo, desc="overhead", disable=not progress):
        r, load = C.timed_cell(lambda: bench(ds, root, m, thr, epochs, quick), f"{ds}-{m} {thr} thread(s)")
        rows.append({**r, **C.load_fields([load])})
    table = [[r["dataset"], r["model"], r["threads"], r.get("pyg_edge_index_s", float("nan")), r["pyg_adj_t_s"],
              r["gnnpipe_s"], r["limit_s"], f"{r['ratio_vs_adj_t']:.2f}",
              f"{r['ratio_vs_edge_index']:.3f}" if "ratio_vs_edge_index" in r else "–", f"{r['ratio_vs_limit']:.2f}",
              "yes" if r["ratio_vs_adj_t"] <= 0.6 else "no"] for r in rows]
    md = C.md_table(["dataset", "model", "threads", "PyG edge_index s", "PyG adj_t s", "gnnpipe s", "limit s",
                     "gnnpipe/adj_t", "gnnpipe/edge_index", "gnnpipe/limit", "≤ 0.6× adj_t"], table)
    gm = C.geomean(r["ratio_vs_adj_t"] for r in rows)
    md += f"\n\nGeometric mean gnnpipe/adj_t: {gm:.2f} over {len(rows)} configuration(s)."
    out_dir = C.sub_dir(out, "overhead", quick)
    C.write_results(out_dir, rows, md, {"d": D, "layers": L, "dropout": P, "epochs": epochs})
    plot(rows, out_dir / "overhead.png", settings=f"{L} layers, d={D}, dropout {P}, median of {epochs} epoch(s)")
    return rows, md


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--datasets", type=Path, default=default_datasets())
    ap.add_argument("--epochs", type=int, default=3, help="timed epochs (median) per fast path")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--datasets-list", nargs="+", default=["squirrel", "physics"])
    ap.add_argument("--models", nargs="+", default=["gcn", "gcnii"])
    ap.add_argument("--skip-edge-index", action="store_true", help="skip PyG's slow default path")
    ap.add_argument("--out", type=Path, default=REPO / "results" / "overhead.json")
    a = ap.parse_args(argv)
    rows = []
    hdr = f"{'dataset':9} {'model':9} {'thr':>3} {'edge_index':>10} {'adj_t':>7} {'gnnpipe':>8} {'limit':>7} {'/adj_t':>7} {'/e_idx':>7} {'/limit':>7}"
    print(hdr)
    for thr in a.threads:
        for ds in a.datasets_list:
            for mdl in a.models:
                r = bench(ds, a.datasets, mdl, thr, a.epochs, a.skip_edge_index)
                rows.append(r)
                ei = r.get("pyg_edge_index_s", float("nan"))
                print(f"{ds:9} {r['model']:9} {thr:>3} {ei:10.3f} {r['pyg_adj_t_s']:7.3f} "
                      f"{r['gnnpipe_s']:8.3f} {r['limit_s']:7.3f} {r['ratio_vs_adj_t']:7.2f} "
                      f"{r.get('ratio_vs_edge_index', float('nan')):7.3f} {r['ratio_vs_limit']:7.2f}",
                      flush=True)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps({"d": D, "layers": L, "dropout": P, "runs": rows}, indent=2) + "\n")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
