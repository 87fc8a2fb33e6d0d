"""The default roots (data, raw, plans, runs) are folders of the current directory, never the
package's folder, and the catalogue's cards travel with the package: also after a
non-editable ``pip install`` (the slow test)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gnnpipe import roots
from gnnpipe.cli.partition import default_partition_root
from gnnpipe.data import catalog
from gnnpipe.train.rundir import default_run_dir

REPO = Path(__file__).resolve().parents[1]
ENVS = (roots.DATA_ROOT_ENV, roots.RAW_ROOT_ENV, roots.PLAN_ROOT_ENV, roots.RUN_ROOT_ENV, "GNNPIPE_CATALOG")


@pytest.fixture
def bare(tmp_path, monkeypatch):
    """A fresh current directory and no GNNPIPE_* root variable."""
    for k in ENVS:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_defaults_are_folders_of_the_current_directory(bare):
    assert roots.data_root() == bare / "datasets" == catalog.default_data_root()
    assert roots.raw_root() == bare / "datasets" / "raw" == catalog.default_raw_root()
    assert roots.plan_root() == bare / "partition" == default_partition_root()
    assert roots.run_root() == bare / "runs"
    assert default_run_dir("graph", "gcn").parent == bare / "runs"


def test_defaults_follow_the_directory_at_the_time_of_use(bare, monkeypatch):
    (bare / "elsewhere").mkdir()
    monkeypatch.chdir(bare / "elsewhere")
    assert roots.data_root() == bare / "elsewhere" / "datasets"
    assert roots.run_root() == bare / "elsewhere" / "runs"


def test_variables_replace_the_defaults_and_an_empty_one_is_unset(bare, monkeypatch):
    monkeypatch.setenv(roots.DATA_ROOT_ENV, str(bare / "d"))
    monkeypatch.setenv(roots.PLAN_ROOT_ENV, "rel/plans")  # relative: to the current directory
    monkeypatch.setenv(roots.RUN_ROOT_ENV, str(bare / "r"))
    assert roots.data_root() == bare / "d"
    assert roots.raw_root() == bare / "d" / "raw"  # follows the data root
    assert roots.plan_root() == bare / "rel" / "plans"
    assert default_run_dir("pipeline", "gcnii").parent == bare / "r"
    monkeypatch.setenv(roots.RAW_ROOT_ENV, str(bare / "raw-elsewhere"))
    assert roots.raw_root() == bare / "raw-elsewhere"
    monkeypatch.setenv(roots.DATA_ROOT_ENV, "")
    assert roots.data_root() == bare / "datasets"


def test_no_root_lies_in_the_package(bare):
    pkg = Path(roots.__file__).resolve().parent
    for r in (roots.data_root(), roots.raw_root(), roots.plan_root(), roots.run_root()):
        assert pkg not in r.parents and pkg.parent not in r.parents, r


def test_cards_are_package_data(bare):
    assert catalog.catalog_dir() == catalog.CARDS_DIR
    assert Path(catalog.__file__).resolve().parent in catalog.CARDS_DIR.parents
    assert '"data/cards/*.toml"' in (REPO / "pyproject.toml").read_text()  # shipped by setuptools
    assert len(catalog.list_cards()) >= 19


PROBE = """
import json, sys
import gnnpipe, gnnpipe.roots as r
from gnnpipe.data import catalog
from gnnpipe.cli.partition import default_partition_root
print(json.dumps({"pkg": gnnpipe.__file__, "data": str(r.data_root()), "raw": str(r.raw_root()),
                  "plan": str(default_partition_root()), "run": str(r.run_root()),
                  "cards": str(catalog.catalog_dir()), "cora": catalog.get_card("Cora").name,
                  "n": len(catalog.list_cards())}))
"""


def _setuptools_major() -> int:
    try:
        from importlib.metadata import version

        return int(version("setuptools").split(".")[0])
    except Exception:  # not installed, or an odd version string
        return 0


@pytest.mark.slow
def test_non_editable_install_uses_the_current_directory(tmp_path):
    """``pip install --no-deps --target`` of a copy of the source (nothing written into the
    checkout), then, from an empty directory: the package comes from the install, its roots
    are under that directory, and ``gnnpipe-data list`` finds the shipped cards."""
    src = tmp_path / "src"
    src.mkdir()
    for f in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / f, src / f)
    shutil.copytree(REPO / "gnnpipe", src / "gnnpipe", ignore=shutil.ignore_patterns("__pycache__"))
    site = tmp_path / "site"
    env = {k: v for k, v in os.environ.items() if k not in ENVS and k != "PYTHONPATH"}
    # Offline with this venv's setuptools when it reads pyproject's SPDX licence (77+); an
    # older one (Python 3.11's venv ships 65) builds in isolation, as .ci/run's install does.
    isolation = ["--no-build-isolation"] if _setuptools_major() >= 77 else []
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", *isolation,
                          "--no-compile", "--disable-pip-version-check", "--target", str(site), str(src)],
                         env=env, capture_output=True, text=True, timeout=120)
    assert pip.returncode == 0, pip.stderr
    shutil.rmtree(src)  # nothing may still point at the source
    cwd = tmp_path / "work"
    cwd.mkdir()
    env = {**env, "PYTHONPATH": str(site), "OMP_NUM_THREADS": "1"}
    p = subprocess.run([sys.executable, "-c", PROBE], cwd=cwd, env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout)
    assert Path(got["pkg"]).is_relative_to(site), got["pkg"]
    assert got == {**got, "data": str(cwd / "datasets"), "raw": str(cwd / "datasets" / "raw"),
                   "plan": str(cwd / "partition"), "run": str(cwd / "runs"), "cora": "cora"}
    assert Path(got["cards"]).is_relative_to(site) and got["n"] >= 19
    p = subprocess.run([str(site / "bin" / "gnnpipe-data"), "list"], cwd=cwd, env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "ogbn-arxiv" in p.stdout and f"prepared under: {cwd / 'datasets'}" in p.stdout
    assert sorted(x.name for x in cwd.iterdir()) == []  # listing creates no folder
