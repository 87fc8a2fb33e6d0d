"""Measure this machine and write ./profiles/cpu-this-machine.toml (or $GNNPIPE_PROFILE_DIR).

Same as ``gnnpipe-plan calibrate``; see :func:`gnnpipe.cli.plan.calibrate_main`::

    OMP_NUM_THREADS=1 python scripts/calibrate.py [--out FILE] [--thorough] [--no-p2p]
"""

import sys

from gnnpipe.cli import run_cli
from gnnpipe.cli.plan import calibrate_main

if __name__ == "__main__":
    sys.exit(run_cli(calibrate_main, prog="calibrate"))
