#!/usr/bin/env python
"""Micro-benchmark of the wire codec (gnnpipe.wire): is compression worth its cost?

For a [rows, dim] float32 message (default 100000 x 128, a large halo or chunk), prints per
wire format the best (and median) encode and decode times, throughput (rows/s and MB/s of float32
input), bytes on the wire, and against float32 on a ``--link-mbit`` link (default 100):
the transfer time saved, the codec's cost (encode on the sender plus decode on the receiver,
both on the critical path unless overlapped), and the break-even link rate
``saved bytes / codec seconds``: on links slower than it the format saves more time than it
costs, on faster links it loses. The machine load is printed with the numbers, since other
processes on a shared machine inflate the times.

Usage: PYTHONPATH=. python scripts/bench_wire.py [--rows N] [--dim D] [--reps R] [--threads T]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from gnnpipe.wire import WIRE_FORMATS, decode, encode, row_bytes


def _times(fn, reps: int) -> list[float]:
    fn()  # warm-up (allocator, first-touch)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1,
                    help="torch intra-op threads (1: as each rank runs on the 2-core machines)")
    ap.add_argument("--link-mbit", type=float, default=100.0, help="link rate for the saving, Mbit/s")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    n, d = args.rows, args.dim
    x = torch.randn(n, d, generator=torch.Generator().manual_seed(0))
    x[::2].relu_()  # half the rows post-ReLU, like forward activations
    gid = torch.randperm(4 * n, generator=torch.Generator().manual_seed(1))[:n]
    key = dict(seed=0, epoch=1, site=2, gid=gid)
    link = args.link_mbit * 1e6 / 8  # bytes/s
    f32_bytes = n * row_bytes(d, "float32")
    print(f"wire codec, [{n}, {d}] float32 ({f32_bytes / 1e6:.1f} MB), {args.threads} thread(s), "
          f"best of {args.reps} (the run least disturbed by other load); load average {os.getloadavg()} on {os.cpu_count()} CPUs; "
          f"torch {torch.__version__}")
    print(f"{'format':>8} {'bytes/row':>9} {'enc ms':>8} {'dec ms':>8} {'rows/s':>10} {'MB/s':>8} "
          f"{'saved @link ms':>14} {'net @link ms':>12} {'break-even':>12}")
    medians = []
    for fmt in WIRE_FORMATS:
        buf = encode(x, fmt, **key)
        te = _times(lambda: encode(x, fmt, **key), args.reps)
        td = _times(lambda: decode(buf, d, fmt), args.reps)
        medians.append((fmt, statistics.median(te), statistics.median(td)))
        t_enc, t_dec = min(te), min(td)
        cost = t_enc + t_dec
        rb = row_bytes(d, fmt)
        saved_bytes = f32_bytes - n * rb
        saved_s = saved_bytes / link
        rate = f"{saved_bytes / cost * 8 / 1e9:9.2f} Gb/s" if saved_bytes and cost > 0 else f"{'-':>12}"
        thr = f"{n / cost:10.3g} {f32_bytes / cost / 1e6:8.0f}" if cost > 0 else f"{'inf':>10} {'inf':>8}"
        print(f"{fmt:>8} {rb:9d} {t_enc * 1e3:8.1f} {t_dec * 1e3:8.1f} {thr} "
              f"{saved_s * 1e3:14.0f} {(saved_s - cost) * 1e3:12.0f} {rate}")
    print("medians (enc/dec ms): " + ", ".join(f"{f} {e * 1e3:.1f}/{dd * 1e3:.1f}" for f, e, dd in medians))
    print(f"saved @link: float32 transfer time minus this format's at {args.link_mbit:g} Mbit/s; "
          "net: saved minus encode+decode; break-even: the link rate below which the format pays. "
          f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
