"""Installing beside a user's own stack: honest ranges in pyproject.toml, the light torch
pinned only in constraints.txt, DGL an optional extra with a one-line refusal when missing.

(That the package installs and passes the fast tests on a second Python is shown by
.ci/run itself, which builds a second environment on Python 3.12.)
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from gnnpipe._base import GnnpipeError
from gnnpipe.config import TrainConfig

REPO = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def _reqs(lines) -> dict[str, Requirement]:
    return {Requirement(r).name.lower().replace("_", "-"): Requirement(r) for r in lines}


@pytest.mark.parametrize("python", ["3.11", "3.12", "3.13"])
def test_every_supported_python_is_admitted(python):
    assert SpecifierSet(PROJECT["requires-python"]).contains(python)


def test_the_package_pins_no_torch_and_needs_no_dgl():
    deps = _reqs(PROJECT["dependencies"])
    torch = deps["torch"]
    # a user's own torch 2.9 or newer is kept, whatever its local build tag
    for have in ("2.9.1", "2.11.0", "2.13.0", "2.15.0"):
        assert torch.specifier.contains(have), (str(torch), have)
    assert "dgl" not in deps, "DGL must stay an optional extra (gnnpipe[dgl])"
    dgl = _reqs(PROJECT["optional-dependencies"]["dgl"])["dgl"]
    assert dgl.specifier.contains("1.1.3") and not dgl.specifier.contains("2.1.0")


def _constraints() -> list[Requirement]:
    out = []
    for line in (REPO / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            out.append(Requirement(line))
    return out


@pytest.mark.parametrize("python", ["3.11", "3.12", "3.13"])
def test_constraints_pin_one_tested_torch_per_python_inside_the_package_range(python):
    env = {"python_version": python, "python_full_version": python + ".0"}
    pins = [r for r in _constraints() if r.name == "torch" and (r.marker is None or r.marker.evaluate(env))]
    assert len(pins) == 1, pins
    (version,) = [s.version for s in pins[0].specifier]
    assert _reqs(PROJECT["dependencies"])["torch"].specifier.contains(version)


def test_asking_for_the_dgl_backend_without_dgl_says_how_to_install_it(monkeypatch):
    monkeypatch.setattr("gnnpipe.extras.has_dgl", lambda: False)
    with pytest.raises(GnnpipeError, match=r"^--backend dgl needs DGL.*pip install 'gnnpipe\[dgl\]'.*--backend pyg"):
        TrainConfig(backend="dgl").validate()
    from gnnpipe.models import ModelConfig, build_model

    with pytest.raises(GnnpipeError, match=r"gnnpipe\[dgl\]"):
        build_model(ModelConfig(model="gcn", in_dim=4, num_classes=2, layers=2, hidden=4, backend="dgl"), seed=0)


def test_the_trainer_refuses_the_dgl_backend_in_one_line_where_dgl_is_missing(tmp_path):
    # a child process where `import dgl` finds nothing: a meta-path finder that hides it
    hide = tmp_path / "sitecustomize.py"
    hide.write_text(
        "import sys\n"
        "class _Hide:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'dgl' or name.startswith('dgl.'):\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, _Hide())\n"
    )
    env = {"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    p = subprocess.run([sys.executable, "-m", "gnnpipe.train", "--config", "tiny", "--backend", "dgl",
                        "--out", str(tmp_path / "run")], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                       env=env)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "gnnpipe[dgl]" in lines[0], p.stderr
    assert not (tmp_path / "run").exists()


def test_fit_and_the_conversions_print_no_third_party_notice_and_leave_filters_alone(tmp_path):
    """torch's sparse-CSR notices are silenced while gnnpipe works, in a user's own process
    with default warning filters; the user's own warnings still show afterwards."""
    code = (
        "import warnings, numpy as np, scipy.sparse as sp, gnnpipe\n"
        "from gnnpipe.data.synthetic import sbm\n"
        "g = sbm(300, num_classes=3, avg_degree=4, num_features=6, seed=1, name='s')\n"
        "g = gnnpipe.Graph(g.indptr, g.indices, sp.csr_matrix(g.features), g.labels, g.train_mask, g.val_mask,\n"
        "                  g.test_mask, name='s', num_classes=3)\n"
        "d = g.to_pyg()\n"
        "r = gnnpipe.fit(g, mode='pipeline', model='gcn', layers=2, hidden=8, epochs=2, progress=False)\n"
        "r.predict()\n"
        "warnings.warn('mine')\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "Sparse CSR" not in p.stderr and "Sparse invariant" not in p.stderr, p.stderr
    assert "UserWarning: mine" in p.stderr
