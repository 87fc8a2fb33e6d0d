"""Every dataset folder in the shared raw datasets prepares, and ``info --json`` matches the
counts in that folder's own README table (parsed here, not copied)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gnnpipe.cli.data import main
from gnnpipe.data import catalog
from gnnpipe.data.graph import Graph

pytestmark = pytest.mark.realdata


def readme_counts(raw: Path) -> dict[str, tuple[int, int, int, int]]:
    """folder -> (nodes, directed edges, features, classes) from the README's first table."""
    out = {}
    for line in (raw / "README.md").read_text().splitlines():
        m = re.match(r"^\|\s*`([a-z0-9_]+)/`\s*\|", line)
        if not m:
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        # ... | nodes | edges | features | classes | used in
        out[m.group(1)] = tuple(int(c.replace(",", "")) for c in cells[-5:-1])
    return out


@pytest.fixture(scope="module")
def prepared(raw_datasets, tmp_path_factory):
    root = tmp_path_factory.mktemp("prepared")
    folders = sorted(p.name for p in raw_datasets.iterdir() if p.is_dir())
    for name in folders:
        rc = main(["prepare", name, "--raw", str(raw_datasets / name), "--root", str(root)])
        assert rc == 0, name
    return root, folders


def test_every_folder_has_a_card_and_a_readme_row(raw_datasets):
    folders = sorted(p.name for p in raw_datasets.iterdir() if p.is_dir())
    table = readme_counts(raw_datasets)
    assert folders and set(folders) <= set(table)
    names = {c.name for c in catalog.list_cards()}
    assert set(folders) <= names


def test_info_matches_readme(raw_datasets, prepared, capsys):
    root, folders = prepared
    table = readme_counts(raw_datasets)
    for name in folders:
        capsys.readouterr()
        assert main(["info", name, "--root", str(root), "--json", "--verify"]) == 0
        info = json.loads(capsys.readouterr().out)
        assert (info["nodes"], info["edges"], info["features"], info["classes"]) == table[name], name


def test_planetoid_standard_splits(prepared):
    root, folders = prepared
    sizes = {"cora": (140, 500, 1000), "citeseer": (120, 500, 1000)}  # 20 per class x 7 / x 6
    for name, want in sizes.items():
        if name not in folders:
            continue
        g = Graph.load(root / name)
        assert (int(g.train_mask.sum()), int(g.val_mask.sum()), int(g.test_mask.sum())) == want
        assert g.sparse_features
    if "citeseer" in folders:
        from gnnpipe.data.stats import graph_info

        assert graph_info(Graph.load(root / "citeseer"))["isolated_nodes"] == 48  # README


def test_raw_hashes_recorded(raw_datasets, prepared):
    root, folders = prepared
    sums = {}
    for line in (raw_datasets / "SHA256SUMS").read_text().splitlines():
        h, f = line.split()
        d, fn = f.split("/", 1)
        sums.setdefault(d, {})[fn] = h
    for name in folders:
        assert Graph.load(root / name).meta["raw_files"] == sums[name], name


def _round_trip_every_prepared(prepared, to, back):
    root, folders = prepared
    for name in folders:
        card = catalog.get_card(name)
        g = Graph.load(root / card.name)  # read-only memory maps, as a user gets them
        assert g.content_hash == Graph.load(root / card.name, verify=True).content_hash
        again = back(to(g), name=g.name)
        assert again.content_hash == g.content_hash, f"{name}: round trip changed the graph"
        # the conversion copied: the prepared files still verify
        Graph.load(root / card.name, verify=True)


def test_every_prepared_dataset_round_trips_through_pyg_hash_for_hash(prepared):
    """Sparse features (Cora, CiteSeer, Amazon-Photo, Physics) reach torch's CSR with sorted,
    distinct column indices (torch refuses anything else), from read-only memory maps."""
    _round_trip_every_prepared(prepared, Graph.to_pyg, Graph.from_pyg)


@pytest.mark.dgl
def test_every_prepared_dataset_round_trips_through_dgl_hash_for_hash(prepared):
    _round_trip_every_prepared(prepared, Graph.to_dgl, Graph.from_dgl)
