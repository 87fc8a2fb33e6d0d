"""Shared test fixtures.

Real datasets are found through GNNPIPE_DATASETS (default: ../shared/datasets beside the
checkout); tests that need them skip only when that folder is truly absent, and fail instead
when GNNPIPE_REQUIRE_DATA=1 (set by .ci/run: in CI the data is always there, so a skip there
would hide a broken path).
"""

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DATASETS = Path(os.environ.get("GNNPIPE_DATASETS", REPO.parent / "shared" / "datasets"))

# Ranks share the two cores of these machines: one intra-op thread per process.
os.environ.setdefault("OMP_NUM_THREADS", "1")


def pytest_collection_modifyitems(config, items):
    """Tests marked ``cuda`` skip, with the reason, where torch sees no GPU (CI has none;
    their CPU counterparts are tests/test_placement.py and tests/test_device.py).

    Tests marked ``dgl`` skip, with the reason, where DGL (the optional extra
    ``gnnpipe[dgl]``, Python 3.11 wheels only) is not installed, unless
    GNNPIPE_REQUIRE_DGL=1 (set by .ci/run's Python 3.11 environment, which installs it):
    there a missing DGL fails them instead of hiding them."""
    import torch

    from gnnpipe.extras import DGL_INSTALL, has_dgl

    no_gpu = pytest.mark.skip(reason=f"needs a CUDA GPU; torch {torch.__version__} sees none")
    no_dgl = pytest.mark.skip(reason=f"needs DGL, not installed here ({DGL_INSTALL})")
    skip_dgl = not has_dgl() and os.environ.get("GNNPIPE_REQUIRE_DGL") != "1"
    for item in items:
        if "cuda" in item.keywords and not torch.cuda.is_available():
            item.add_marker(no_gpu)
        if "dgl" in item.keywords and skip_dgl:
            item.add_marker(no_dgl)


@pytest.fixture(scope="session")
def raw_datasets() -> Path:
    """The folder of real raw datasets; skips when it does not exist at all."""
    if not DATASETS.is_dir():
        why = f"real datasets not found at {DATASETS} (set GNNPIPE_DATASETS)"
        if os.environ.get("GNNPIPE_REQUIRE_DATA") == "1":
            pytest.fail(why + "; GNNPIPE_REQUIRE_DATA=1 forbids skipping")
        pytest.skip(why)
    return DATASETS


@pytest.fixture(scope="session")
def prepared_root(raw_datasets, tmp_path_factory) -> Path:
    """A data root holding Cora prepared from the raw files (for distributed tests).

    Sets GNNPIPE_DATA_ROOT for this process (children inherit it) for the session.
    """
    from gnnpipe.data.catalog import prepare

    root = tmp_path_factory.mktemp("data-root")
    prepare("cora", raw_dir=raw_datasets / "cora", root=root)
    old = os.environ.get("GNNPIPE_DATA_ROOT")
    os.environ["GNNPIPE_DATA_ROOT"] = str(root)
    yield root
    if old is None:
        os.environ.pop("GNNPIPE_DATA_ROOT", None)
    else:
        os.environ["GNNPIPE_DATA_ROOT"] = old
