"""Where gnnpipe reads and writes by default: the data, raw, plan and run roots.

Like PyG's ``root="data"``, every default is a folder of the **current directory at the
time of use**, never the package's folder (a ``pip install`` puts that in site-packages).
An environment variable replaces each default; a command-line option replaces both::

    root   holds                          default          environment variable      option
    data   prepared graphs  <root>/<name>  ./datasets       GNNPIPE_DATA_ROOT         --root
    raw    raw files        <root>/<name>  <data root>/raw  GNNPIPE_DATASETS          --raw-root, --raw
    plans  partition plans                 ./partition      GNNPIPE_PARTITION_ROOT    --out
    runs   run directories                 ./runs           GNNPIPE_RUN_ROOT          --out

An empty variable counts as unset. The paths returned are absolute (resolved against the
current directory when called), so messages say where a file went.
"""

from __future__ import annotations

import os
from pathlib import Path

DATA_ROOT_ENV = "GNNPIPE_DATA_ROOT"
RAW_ROOT_ENV = "GNNPIPE_DATASETS"
PLAN_ROOT_ENV = "GNNPIPE_PARTITION_ROOT"
RUN_ROOT_ENV = "GNNPIPE_RUN_ROOT"


def _root(env: str, default: str | Path) -> Path:
    value = os.environ.get(env)
    return Path(os.path.abspath(value if value else default))


def data_root() -> Path:
    """Prepared graphs: ``$GNNPIPE_DATA_ROOT``, else ``./datasets``."""
    return _root(DATA_ROOT_ENV, "datasets")


def raw_root() -> Path:
    """Raw dataset folders (one per dataset): ``$GNNPIPE_DATASETS``, else ``<data root>/raw``."""
    return _root(RAW_ROOT_ENV, data_root() / "raw")


def plan_root() -> Path:
    """Partition plans: ``$GNNPIPE_PARTITION_ROOT``, else ``./partition``."""
    return _root(PLAN_ROOT_ENV, "partition")


def run_root() -> Path:
    """Run directories: ``$GNNPIPE_RUN_ROOT``, else ``./runs``."""
    return _root(RUN_ROOT_ENV, "runs")
