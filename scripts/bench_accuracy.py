#!/usr/bin/env python
"""Thin wrapper: the benchmark lives in :mod:`gnnpipe.bench.accuracy` (also ``gnnpipe-bench accuracy``)."""

import sys

from gnnpipe.bench.accuracy import main

if __name__ == "__main__":
    sys.exit(main())
