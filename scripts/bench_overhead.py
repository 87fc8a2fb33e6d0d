#!/usr/bin/env python
"""Thin wrapper: the benchmark lives in :mod:`gnnpipe.bench.overhead` (also ``gnnpipe-bench overhead``)."""

from gnnpipe.bench.overhead import main

if __name__ == "__main__":
    main()
