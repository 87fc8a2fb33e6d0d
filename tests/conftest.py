"""Shared test fixtures.

Real datasets are found through GNNPIPE_DATASETS (default: ../shared/datasets beside the
checkout); tests that need them skip only when that folder is truly absent.
"""

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DATASETS = Path(os.environ.get("GNNPIPE_DATASETS", REPO.parent / "shared" / "datasets"))

# Ranks share the two cores of these machines: one intra-op thread per process.
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="session")
def raw_datasets() -> Path:
    """The folder of real raw datasets; skips when it does not exist at all."""
    if not DATASETS.is_dir():
        pytest.skip(f"real datasets not found at {DATASETS} (set GNNPIPE_DATASETS)")
    return DATASETS
