"""The dropout hash in one block against cache-sized blocks (docs/benchmarks.md, "Hashed dropout
in cache-sized blocks"): one thread, CPU time, best of 5, M values per second.

    python scripts/bench_hash.py
"""

from __future__ import annotations

import time

import torch

from gnnpipe.models import ops


def rate(n: int, cols: int, rows_per_block: int) -> float:
    best = float("inf")
    for _ in range(5):
        t = time.thread_time()
        for lo in range(0, n, rows_per_block):
            ops._keep_from_keys(*_keys(torch.arange(lo, min(n, lo + rows_per_block)), cols), 2**23)
        best = min(best, time.thread_time() - t)
    return n * cols / best / 1e6


def _keys(gid: torch.Tensor, cols: int):
    kr, kc = ops.stream_keys(0, 1, 0)
    return ops.row_keys(gid, kr), ops.row_keys(torch.arange(cols), kc)


def main() -> None:
    torch.set_num_threads(1)
    print(f"1-minute load {open('/proc/loadavg').read().split()[0]}")
    for n, cols in ((5201, 2089), (50000, 100)):
        print(f"[{n} x {cols}]: one block {rate(n, cols, n):.0f} M values/s, "
              f"blocks of 2**19 values {rate(n, cols, ops.hash_block_rows(cols)):.0f} M values/s")


if __name__ == "__main__":
    main()
