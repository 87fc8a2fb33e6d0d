"""Benchmark the partitioner (issue 3): time and peak memory at 1M nodes / 20M edges, and
METIS against random edge cut on Squirrel (P = 8).

Memory is measured in a child process that loads the prepared graph fully into RAM
(``mmap=False``), reads its RSS (baseline), runs ``build_plan`` (parts, chunks and
statistics, i.e. everything ``gnnpipe-partition`` does after loading), and reads the
process's peak RSS (``ru_maxrss``, which covers METIS's C allocations too). The increment
``peak − baseline`` is compared with the CSR's bytes (``indptr`` + ``indices``, int64); the
target is at most 4×. Graph generation happens in the parent so its peak is not counted.

The synthetic methods are ``metis`` (``metis_mode="auto"``: coarsen-first multilevel
when plain METIS would not fit the budget), ``metis-plain`` (METIS on the whole graph,
the old path), ``metis-multilevel`` and ``random``. Each line ends with the verdict on
the ≤ 4× target. The quality table (``--quality``) compares the cuts of multilevel,
plain METIS and random on Squirrel, Physics (prepared datasets) and the synthetic graph.

Usage: ``python scripts/bench_partition.py [--nodes 1000000] [--edges 20000000]
[--parts 8] [--chunks 4] [--squirrel PATH] [--methods metis,metis-plain,random]
[--quality squirrel,coauthor_physics]``
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]


def _rss() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


TARGET = 4.0


def _method(m: str) -> tuple[str, str]:
    """Bench method name → (build_plan method, metis_mode)."""
    if m.startswith("metis-"):
        return "metis", m.split("-", 1)[1]
    return m, "auto"


def child(graph_dir: str, parts: int, chunks: int, method: str) -> None:
    from gnnpipe.data.graph import Graph
    from gnnpipe.parallel.alloc import lean_allocator
    from gnnpipe.partition import build_plan, plan_stats

    lean_allocator()  # as gnnpipe-partition does: freed temporaries leave the RSS
    g = Graph.load(graph_dir, mmap=False)
    base = _rss()
    t0 = time.perf_counter()
    m, mode = _method(method)
    plan = build_plan(g, parts, chunks, method=m, seed=0, metis_mode=mode)
    plan.stats = plan_stats(g, plan)
    wall = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    csr = g.indptr.nbytes + g.indices.nbytes
    print(json.dumps({
        "method": method, "nodes": g.num_nodes, "directed_edges": g.num_edges, "parts": parts, "chunks": chunks,
        "wall_s": round(wall, 2), "csr_bytes": csr, "rss_after_load": base, "peak_rss": peak,
        "increment": peak - base, "increment_over_csr": round((peak - base) / csr, 2),
        "target_4x_met": bool((peak - base) / csr <= TARGET), "metis_path": plan.params.get("metis_path"),
        "edge_cut": plan.stats["parts"]["edge_cut"], "part_balance": round(plan.stats["parts"]["balance"], 4),
        "chunk_balance": round(plan.stats["chunks"]["balance"], 4), "halo_sum": plan.stats["parts"]["halo_sum"],
    }))


def squirrel_cuts(path: Path, parts: int) -> dict:
    from gnnpipe.data.graph import Graph
    from gnnpipe.partition import build_plan, plan_stats

    z = np.load(path, allow_pickle=False)
    e = z["edges"]
    n = z["node_labels"].shape[0]
    g = Graph.from_edges(e[:, 0], e[:, 1], n, z["node_features"], z["node_labels"],
                         z["train_masks"][0], z["val_masks"][0], z["test_masks"][0], name="squirrel")
    out = {"nodes": n, "undirected_edges": g.num_edges // 2}
    for m in ("metis", "random"):
        t0 = time.perf_counter()
        st = plan_stats(g, build_plan(g, parts, 1, method=m, seed=0))["parts"]
        out[m] = {"edge_cut": st["edge_cut"], "halo_sum": st["halo_sum"], "balance": round(st["balance"], 4),
                  "seconds": round(time.perf_counter() - t0, 3)}
    return out


def _cuts(g, parts: int, modes=("metis-multilevel", "metis-plain", "random")) -> dict:
    from gnnpipe.partition import build_plan, plan_stats

    out = {"nodes": g.num_nodes, "undirected_edges": g.num_edges // 2}
    for m in modes:
        meth, mode = _method(m)
        t0 = time.perf_counter()
        st = plan_stats(g, build_plan(g, parts, 1, method=meth, seed=0, metis_mode=mode))["parts"]
        out[m] = {"edge_cut": st["edge_cut"], "balance": round(st["balance"], 4),
                  "seconds": round(time.perf_counter() - t0, 2)}
    ml, pl = out[modes[0]]["edge_cut"], out[modes[1]]["edge_cut"]
    out["multilevel_over_plain"] = round(ml / pl, 3) if pl else None
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1_000_000)
    ap.add_argument("--edges", type=int, default=20_000_000, help="directed edges")
    ap.add_argument("--parts", type=int, default=8)
    ap.add_argument("--chunks", type=int, default=4)
    ap.add_argument("--squirrel", type=Path, default=REPO.parent / "shared" / "datasets" / "squirrel" / "squirrel.npz")
    ap.add_argument("--methods", default="metis,random",
                    help="comma-separated: metis (auto), metis-plain, metis-multilevel, random")
    ap.add_argument("--quality", default="",
                    help="comma-separated prepared datasets (e.g. squirrel,coauthor_physics) for the cut table")
    ap.add_argument("--quality-synthetic", action="store_true",
                    help="also the cut table on the synthetic graph (runs plain METIS: slow, GBs)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--method", default="metis", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a.child, a.parts, a.chunks, a.method)
        return
    if a.squirrel.is_file():
        print("squirrel P=%d:" % a.parts, json.dumps(squirrel_cuts(a.squirrel, a.parts)), flush=True)
    from gnnpipe.data.graph import Graph

    for name in filter(None, a.quality.split(",")):
        d = REPO / "datasets" / name
        print(f"quality {name} P={a.parts}:", json.dumps(_cuts(Graph.load(d), a.parts)), flush=True)
    from gnnpipe.data.synthetic import rmat

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        # Few features: the benchmark is about the adjacency.
        g = rmat(a.nodes, a.edges, num_features=4, seed=0)
        g.save(Path(tmp) / "g")
        print(f"generated {g.num_nodes:,} nodes / {g.num_edges:,} directed edges in {time.perf_counter() - t0:.1f} s", flush=True)
        del g
        for m in a.methods.split(","):
            r = subprocess.run([sys.executable, __file__, "--child", str(Path(tmp) / "g"), "--parts", str(a.parts),
                                "--chunks", str(a.chunks), "--method", m], capture_output=True, text=True, check=True)
            res = json.loads(r.stdout.strip().splitlines()[-1])
            print("synthetic:", json.dumps(res), flush=True)
            print(f"  {m}: peak increment {res['increment'] / 1e6:.0f} MB = {res['increment_over_csr']}x CSR "
                  f"({res['csr_bytes'] / 1e6:.0f} MB); target <= {TARGET:g}x "
                  f"{'MET' if res['target_4x_met'] else 'MISSED'}; {res['wall_s']} s; cut {res['edge_cut']:,}", flush=True)
        if a.quality_synthetic:
            print(f"quality synthetic P={a.parts}:", json.dumps(_cuts(Graph.load(Path(tmp) / "g"), a.parts)), flush=True)


if __name__ == "__main__":
    main()
