"""Presets (gnnpipe/presets/*.toml): every one parses into a valid TrainConfig whose values
are the file's, its name says its dataset, model, depth and hardware truthfully, its header
says how to run it; ``tiny`` trains end to end in seconds; flags override preset values;
``--config`` takes a path or a preset name; ``--list-presets`` lists them.
"""

from __future__ import annotations

import json
import math
import re
import time
import tomllib
from pathlib import Path

import pytest

from gnnpipe import GnnpipeError
from gnnpipe.config import PRESET_DIR, TrainConfig, list_presets, parse_config

REQUIRED = {"tiny", "sbm-gcnii16-cpu4", "squirrel-gcnii32-cpu4", "squirrel-resgcn32-cpu4",
            "physics-gcnii32-cpu4", "cora-gcn2-cpu4", "cora-gcnii64-cpu4"}
# name part -> (dataset field, model field)
DATASETS = {"sbm": "sbm", "squirrel": "squirrel", "physics": "coauthor_physics", "cora": "cora"}
MODELS = {"gcn": "gcn", "gcnii": "gcnii", "resgcn": "resgcn+", "sage": "sage", "gat": "gat"}
NAMES = sorted(p.stem for p in PRESET_DIR.glob("*.toml"))


def test_the_required_presets_ship():
    assert REQUIRED <= set(NAMES), f"missing: {sorted(REQUIRED - set(NAMES))}"
    assert set(list_presets()) == set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_preset_parses_into_its_values(name):
    path = PRESET_DIR / f"{name}.toml"
    raw = tomllib.loads(path.read_text())
    cfg, _ = parse_config(["--config", name])
    assert isinstance(cfg, TrainConfig)
    for key, value in raw.items():
        assert getattr(cfg, key) == value, f"{name}: {key}"
    # the same through the path
    cfg2, _ = parse_config(["--config", str(path)])
    assert cfg2 == cfg


@pytest.mark.parametrize("name", [n for n in NAMES if n != "tiny"])
def test_preset_name_tells_the_truth(name):
    m = re.fullmatch(r"([a-z]+)-([a-z]+)(\d+)-cpu(\d+)", name)
    assert m, f"{name}: expected <dataset>-<model><layers>-cpu<ranks>"
    ds, model, layers, ranks = m.group(1), m.group(2), int(m.group(3)), int(m.group(4))
    cfg, _ = parse_config(["--config", name])
    assert cfg.dataset == DATASETS[ds]
    assert cfg.model == MODELS[model]
    assert cfg.layers == layers
    # a run on that many ranks is a valid topology for the preset's mode
    if cfg.mode == "pipeline":
        assert (cfg.stages or ranks) == ranks and cfg.ways == 1
    elif cfg.mode == "graph":
        assert (cfg.parts or ranks) == ranks


@pytest.mark.parametrize("name", NAMES)
def test_preset_header_says_what_and_how(name):
    text = (PRESET_DIR / f"{name}.toml").read_text()
    header = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        header.append(line)
    assert header and header[0].startswith(f"# {name}: "), f"{name}: first line names the preset"
    assert any(f"gnnpipe-train --config {name}" in line for line in header), f"{name}: no run command"
    assert list_presets()[name] and not list_presets()[name].startswith(name)


def test_flags_override_preset():
    cfg, _ = parse_config(["--config", "tiny", "--epochs", "3", "--mode", "graph", "--no-shuffle",
                           "--hidden", "8"])
    base, _ = parse_config(["--config", "tiny"])
    assert (cfg.epochs, cfg.mode, cfg.shuffle, cfg.hidden) == (3, "graph", False, 8)
    assert base.epochs != 3 and base.mode != "graph" and base.hidden != 8
    assert cfg.layers == base.layers and cfg.synth_nodes == base.synth_nodes  # the rest stays


def test_config_path_beats_preset_name(tmp_path, monkeypatch):
    # a file of the preset's name in the working directory is what the user meant
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny").write_text('epochs = 2\nlayers = 3\n')
    cfg, _ = parse_config(["--config", "tiny"])
    assert (cfg.epochs, cfg.layers) == (2, 3)
    cfg2, _ = parse_config(["--config", "tiny.toml"])  # no such file here: the preset
    assert cfg2.layers == tomllib.loads((PRESET_DIR / "tiny.toml").read_text())["layers"]


def test_a_bad_value_names_its_config_file_unless_a_flag_set_it(tmp_path):
    f = tmp_path / "mine.toml"
    f.write_text('wire = "int16"\nepochs = 3\n')
    with pytest.raises(GnnpipeError) as e:
        parse_config(["--config", str(f)])
    assert str(e.value).startswith(f"{f}: config field 'wire' = 'int16'")
    # a flag overrides the file's bad value: nothing to blame the file for
    cfg, _ = parse_config(["--config", str(f), "--wire", "int8"])
    assert (cfg.wire, cfg.epochs) == ("int8", 3)
    # the bad value is the flag's: the message does not name the file
    f.write_text("epochs = 3\n")
    with pytest.raises(GnnpipeError) as e:
        parse_config(["--config", str(f), "--lr", "-1"])
    assert str(e.value).startswith("config field 'lr'") and str(f) not in str(e.value)


def test_unknown_config_names_the_presets():
    with pytest.raises(GnnpipeError) as e:
        parse_config(["--config", "no-such-preset"])
    msg = str(e.value)
    assert "no-such-preset" in msg and "tiny" in msg and "squirrel-gcnii32-cpu4" in msg
    with pytest.raises(GnnpipeError, match="not found"):
        parse_config(["--config", "some/dir/tiny"])  # a path is never a preset name


def test_list_presets_flag(capsys):
    with pytest.raises(SystemExit) as e:
        parse_config(["--list-presets"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for name in NAMES:
        assert re.search(rf"^{re.escape(name)}\s+\S", out, re.M), name


def test_tiny_trains_end_to_end_in_seconds(tmp_path):
    from gnnpipe.cli.train import main

    t0 = time.perf_counter()
    rc = main(["--config", "tiny", "--out", str(tmp_path / "run"), "--no-progress", "--threads", "1"])
    took = time.perf_counter() - t0
    assert rc == 0
    raw = tomllib.loads((PRESET_DIR / "tiny.toml").read_text())
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in lines] == list(range(raw["epochs"]))
    assert all(math.isfinite(r["loss"]) for r in lines)
    assert lines[-1]["loss"] < lines[0]["loss"]  # it learns something
    assert "val_acc" in lines[-1]
    resolved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert resolved["model"] == raw["model"] and resolved["layers"] == raw["layers"]
    # ~3 s alone (5 s with the imports); generous because the test machines are shared
    assert took < 120, f"tiny took {took:.1f} s"
