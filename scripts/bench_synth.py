"""Time and peak memory of the synthetic generators at benchmark scale.

Runs each generator in its own child process (so one's peak RSS does not hide the
other's) and prints, per generator: wall time, peak RSS of the child
(``resource.getrusage(RUSAGE_SELF).ru_maxrss``), RSS after imports alone, and the bytes of
the CSR arrays (indptr + indices) and of the dense features it produced.

Usage::

    python scripts/bench_synth.py [--nodes 1000000] [--edges 20000000] [--only sbm|rmat]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time


def _child(gen: str, nodes: int, edges: int, seed: int) -> dict:
    from gnnpipe.data.synthetic import rmat, sbm

    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
    t0 = time.perf_counter()
    if gen == "sbm":
        g = sbm(nodes, avg_degree=edges / nodes, seed=seed)
    else:
        g = rmat(nodes, edges, seed=seed)
    wall = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    deg = g.degrees()
    return {
        "generator": gen,
        "nodes": g.num_nodes,
        "directed_edges": g.num_edges,
        "requested_edges": edges,
        "wall_s": round(wall, 2),
        "peak_rss_bytes": peak,
        "import_rss_bytes": base,
        "csr_bytes": int(g.indptr.nbytes + g.indices.nbytes),
        "feature_bytes": int(g.features.nbytes),
        "max_degree": int(deg.max()),
        "isolated": int((deg == 0).sum()),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=1_000_000)
    p.add_argument("--edges", type=int, default=20_000_000, help="directed edges")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--only", choices=("sbm", "rmat"))
    p.add_argument("--child", choices=("sbm", "rmat"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(_child(args.child, args.nodes, args.edges, args.seed)))
        return 0
    mib = 1 << 20
    print(f"{'gen':5} {'nodes':>9} {'edges':>10} {'wall s':>7} {'peak RSS MiB':>12} "
          f"{'import MiB':>10} {'CSR MiB':>8} {'feat MiB':>8} {'max deg':>8}")
    for gen in [args.only] if args.only else ["sbm", "rmat"]:
        out = subprocess.run(
            [sys.executable, __file__, "--child", gen, "--nodes", str(args.nodes),
             "--edges", str(args.edges), "--seed", str(args.seed)],
            check=True, capture_output=True, text=True, env=os.environ,
        )
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{gen:5} {r['nodes']:>9} {r['directed_edges']:>10} {r['wall_s']:>7.2f} "
              f"{r['peak_rss_bytes'] / mib:>12.0f} {r['import_rss_bytes'] / mib:>10.0f} "
              f"{r['csr_bytes'] / mib:>8.0f} {r['feature_bytes'] / mib:>8.0f} {r['max_degree']:>8}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
