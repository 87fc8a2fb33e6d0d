"""Dataset names as users type them: any case, PyG's and OGB's spellings, the cards' aliases;
one canonical name per dataset in the catalogue, the planner and on disk; an unknown name
answers in one line with the closest known one."""

from __future__ import annotations

import pytest

from gnnpipe._base import GnnpipeError
from gnnpipe.cli.data import main as data_main
from gnnpipe.cli.plan import PUBLISHED, published_name
from gnnpipe.data import catalog
from gnnpipe.data.graph import Graph

from test_loaders import make_catalog

SPELLINGS = {
    "Cora": "cora", "CORA": "cora", "CiteSeer": "citeseer", "PubMed": "pubmed",
    "Coauthor-CS": "coauthor_cs", "CoauthorCS": "coauthor_cs", "coauthor cs": "coauthor_cs",
    "Coauthor-Physics": "coauthor_physics", "CoauthorPhysics": "coauthor_physics",
    "Amazon-Computers": "amazon_computers", "AmazonPhoto": "amazon_photo", "Cora_ML": "cora_ml",
    "ogbn-arxiv": "ogbn-arxiv", "ogbn_arxiv": "ogbn-arxiv", "OGBN-Arxiv": "ogbn-arxiv", "arxiv": "ogbn-arxiv",
    "ogbn-products": "ogbn-products", "ogbn_products": "ogbn-products",
    "Reddit": "reddit", "Squirrel": "squirrel", "Chameleon": "chameleon", "film": "actor", "Actor": "actor",
    "Roman-empire": "roman_empire", "Amazon-ratings": "amazon_ratings", "Tolokers": "tolokers",
}


@pytest.fixture
def shipped(monkeypatch):
    monkeypatch.delenv("GNNPIPE_CATALOG", raising=False)


@pytest.mark.parametrize("typed, canonical", sorted(SPELLINGS.items()))
def test_pyg_and_ogb_spellings_select_the_card(shipped, typed, canonical):
    assert catalog.get_card(typed).name == canonical


def test_every_name_and_alias_selects_one_card(shipped):
    cards = catalog.list_cards()
    keys = [catalog.name_key(n) for c in cards for n in set(map(catalog.name_key, c.names))]
    assert len(keys) == len(set(keys))
    for c in cards:  # a title is a name too, unless it carries a description: "Actor (film)"
        if "(" not in c.title:
            assert catalog.get_card(c.title).name == c.name


def test_unknown_name_is_one_line_with_the_closest_and_the_known(shipped):
    with pytest.raises(GnnpipeError) as e:
        catalog.get_card("Corra")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("unknown dataset 'Corra'; did you mean 'cora'? (known: actor, ")
    assert "ogbn-arxiv" in msg and "reddit" in msg
    with pytest.raises(GnnpipeError, match=r"^unknown dataset 'zzz' \(known: actor, .*tolokers\)$"):
        catalog.get_card("zzz")


def test_cli_prepare_of_an_unknown_name_says_one_line(shipped, capsys):
    assert data_main(["prepare", "pubmd"]) == 2
    err = [l for l in capsys.readouterr().err.splitlines() if l.strip()]
    assert len(err) == 1 and "did you mean 'pubmed'?" in err[0]


def test_planner_and_catalogue_spell_names_alike(shipped):
    """The planner's published graphs carry the catalogue's canonical names, and find them
    under any spelling the catalogue accepts."""
    names = {c.name for c in catalog.list_cards()}
    assert {"reddit", "ogbn-arxiv"} <= set(PUBLISHED) and set(PUBLISHED) - names == {"flickr"}
    assert published_name("ogbn_arxiv") == published_name("Arxiv") == "ogbn-arxiv"
    assert published_name("Reddit") == "reddit" and published_name("FLICKR") == "flickr"
    assert published_name("cora") is None


def test_alias_must_be_unique_across_cards(tmp_path, monkeypatch):
    cat, _ = make_catalog(tmp_path, monkeypatch)
    make_catalog(tmp_path, monkeypatch, name="other")
    p = cat / "other.toml"
    p.write_text(p.read_text().replace('name = "other"', 'name = "other"\naliases = ["T-O-Y"]'))
    with pytest.raises(GnnpipeError, match=r"(toy|other)\.toml: name '(toy|T-O-Y)' also selects card '(other|toy)'; every name"):
        catalog.list_cards()


def test_bad_aliases_are_refused(tmp_path, monkeypatch):
    cat, _ = make_catalog(tmp_path, monkeypatch)
    p = cat / "toy.toml"
    p.write_text(p.read_text().replace('name = "toy"', 'name = "toy"\naliases = "Toy"'))
    with pytest.raises(GnnpipeError, match=r"field 'aliases' must be a list of names"):
        catalog.get_card("toy")


def test_any_spelling_prepares_under_the_canonical_name_from_any_raw_spelling(tmp_path, monkeypatch):
    """``prepare TOY`` reads a raw folder named ``Toy`` and writes ``<root>/toy``; the prepared
    graph is then found as ``tOy``, and also when an older version prepared it as ``Toy``."""
    make_catalog(tmp_path, monkeypatch)
    (tmp_path / "raw" / "toy").rename(tmp_path / "raw" / "Toy")
    out = catalog.prepare("TOY")
    assert out == tmp_path / "root" / "toy" and Graph.load(out).name == "toy"
    assert catalog.resolve_dataset("tOy") == out
    out.rename(tmp_path / "root" / "Toy")
    assert catalog.resolve_dataset("toy") == tmp_path / "root" / "Toy"


def test_an_alias_names_the_raw_folder(tmp_path, monkeypatch):
    cat, _ = make_catalog(tmp_path, monkeypatch)
    p = cat / "toy.toml"
    p.write_text(p.read_text().replace('name = "toy"', 'name = "toy"\naliases = ["plaything"]'))
    (tmp_path / "raw" / "toy").rename(tmp_path / "raw" / "plaything")
    assert catalog.raw_dir_for(catalog.get_card("toy")) == tmp_path / "raw" / "plaything"
    assert catalog.prepare("plaything") == tmp_path / "root" / "toy"
    assert catalog.resolve_dataset("PlayThing") == tmp_path / "root" / "toy"


def test_unprepared_names_say_what_to_run_or_what_was_meant(tmp_path, monkeypatch):
    make_catalog(tmp_path, monkeypatch)
    with pytest.raises(GnnpipeError, match=r"dataset 'TOY' not found: .*; run: gnnpipe-data prepare toy$"):
        catalog.resolve_dataset("TOY")
    with pytest.raises(GnnpipeError, match=r"dataset 'tyo' not found: .*; did you mean 'toy'\? \(catalogue: toy\)$"):
        catalog.resolve_dataset("tyo")


def test_builtin_synthetic_names_match_in_any_case(tmp_path, monkeypatch):
    from gnnpipe.config import TrainConfig

    monkeypatch.chdir(tmp_path)
    assert TrainConfig(dataset="SBM").dataset == "sbm" and TrainConfig(dataset="Rmat").dataset == "rmat"
    (tmp_path / "SBM").mkdir()  # a folder of that name here is the user's dataset, not the generator
    assert TrainConfig(dataset="SBM").dataset == "SBM"
