"""A fuzzer over what users hand gnnpipe (issue 31): config TOML, command lines of every
command and subcommand, prepared-dataset metadata and plan metadata.

Each property: the input is accepted, or refused with a :class:`GnnpipeError` (a CLI: a
non-zero exit with one line on stderr and no traceback); never another exception, never a
hang (Hypothesis' deadline), and nothing outside the test's scratch folder changes. The fast
variants try a few dozen inputs each in the default suite; the ``slow`` ones (``.ci/run``)
try thousands, and print how many they tried.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gnnpipe._base import GnnpipeError
from gnnpipe.config import TrainConfig, parse_config

REPO = Path(__file__).resolve().parents[1]
FIELDS = [f.name for f in fields(TrainConfig)]
TRIED: dict[str, int] = {}

# ------------------------------------------------------------------ values users type
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-10**20, 10**20), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12), st.sampled_from(["", "0", "-1", "1e9", "nan", "inf", "pipeline", "graph", "gcnii", "sbm",
                                           "float32", "int8", "auto", "../x", "/", "~", "tiny", "cuda"]))
toml_values = st.one_of(scalars, st.lists(scalars, max_size=3), st.dictionaries(st.text(max_size=5), scalars, max_size=2))
names = st.one_of(st.sampled_from(FIELDS), st.sampled_from([f.replace("_", "-") for f in FIELDS]),
                  st.text(min_size=1, max_size=10))


def _toml_value(v) -> str | None:
    """TOML text of ``v`` (None: TOML has no null, the key is left out)."""
    if v is None:
        return None
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return {"nan": "nan", "inf": "inf", "-inf": "-inf"}.get(repr(v), repr(v))
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        items = [_toml_value(x) for x in v]
        return "[" + ", ".join(x for x in items if x is not None) + "]"
    if isinstance(v, dict):
        items = [(json.dumps(k), _toml_value(x)) for k, x in v.items()]
        return "{" + ", ".join(f"{k} = {x}" for k, x in items if x is not None) + "}"
    raise AssertionError(v)


def _count(name: str) -> None:
    TRIED[name] = TRIED.get(name, 0) + 1


def _no_traceback(call) -> int | None:
    """Run ``call``; a GnnpipeError or an argparse exit is fine, anything else fails the test."""
    try:
        return call()
    except GnnpipeError:
        return None
    except SystemExit as e:  # argparse refuses: usage line, exit 2 (or 0 for --help)
        assert e.code in (0, 2), f"exit code {e.code}"
        return e.code


@contextlib.contextmanager
def _scratch(tmp: Path):
    """cwd and every gnnpipe root inside ``tmp``; the checkout must not change."""
    old = {k: os.environ.get(k) for k in ("GNNPIPE_DATA_ROOT", "GNNPIPE_PARTITION_ROOT", "GNNPIPE_RUN_ROOT",
                                          "GNNPIPE_PROFILE_DIR", "GNNPIPE_DATASETS")}
    cwd = os.getcwd()
    os.environ.update(GNNPIPE_DATA_ROOT=str(tmp / "datasets"), GNNPIPE_PARTITION_ROOT=str(tmp / "partition"),
                      GNNPIPE_RUN_ROOT=str(tmp / "runs"), GNNPIPE_PROFILE_DIR=str(tmp / "profiles"),
                      GNNPIPE_DATASETS=str(tmp / "raw"))
    os.chdir(tmp)
    try:
        yield
    finally:
        os.chdir(cwd)
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _repo_state() -> list[str]:
    """Top-level names of the checkout (an output landing here, e.g. runs/ or a file, shows)."""
    return sorted(p.name for p in REPO.iterdir() if p.name not in (".pytest_cache", ".hypothesis"))


# ------------------------------------------------------------------ config TOML
def _config_property(tmp_path_factory):
    @given(st.dictionaries(names, toml_values, max_size=6))
    def prop(table):
        _count("config TOML")
        tmp = tmp_path_factory.mktemp("cfg")
        lines = []
        for k, v in table.items():
            text = _toml_value(v)
            if text is not None:
                lines.append(f"{json.dumps(k)} = {text}")
        path = tmp / "c.toml"
        path.write_text("\n".join(lines) + "\n")
        with _scratch(tmp):
            _no_traceback(lambda: parse_config(["--config", str(path)]))
    return prop


@pytest.mark.parametrize("n", [pytest.param(60, id="fast"), pytest.param(3000, id="thousands", marks=pytest.mark.slow)])
def test_config_files_are_accepted_or_refused_in_one_line(n, tmp_path_factory):
    settings(max_examples=n, deadline=None, suppress_health_check=list(HealthCheck), derandomize=n < 100)(
        _config_property(tmp_path_factory))()
    print(f"fuzz: {TRIED.get('config TOML', 0)} config files tried")


# ------------------------------------------------------------------ command lines
OPTIONS = {
    "data": ["list", "prepare", "info", "synth", "sbm", "rmat", "--all", "--raw", "--raw-root", "--root", "--split",
             "--seed", "--force", "--json", "--verify", "--nodes", "--edges", "--out", "--classes", "--features",
             "--homophily", "--degree", "cora", "squirrel", "nope", "--debug"],
    "partition": ["sbm", "cora", "nope", "--parts", "--chunks", "--method", "metis", "random", "--objective", "cut",
                  "--out", "--dry-run", "--seed", "--weights", "degree", "--metis-mode", "--metis-budget", "--force"],
    "plan": ["sbm", "rmat", "reddit", "nope", "--world", "--layers", "--hidden", "--model", "gcnii", "--profile",
             "--stats", "--wire", "auto", "int8", "--accuracy-budget", "--exact", "--json", "--top", "--link-rate",
             "--chunk-factors", "--history-dtype", "validate", "--wire-accuracy", "--estimate-nodes"],
    # gnnpipe-bench's tta and cluster (their runs replaced by a stub: a valid line launches
    # nothing) and report
    "bench": ["--config", "tiny", "squirrel-gcnii32", "--seeds", "--modes", "graph,pipeline", "pipeline,hybrid",
              "--wires", "planner", "int8", "--rates", "unshaped,50mbit", "--local", "--timing-epochs", "--epochs",
              "--timeout", "--plot", "--out", "--train-flags", "--exact-every 2", "--layers 0", "--quick", "--",
              "--hosts", "--ranks-per-host", "--rate", "--delay", "1ms", "--launcher", "mpi", "--sweep", "--graphs",
              "tiny,squirrel", "--models", "gcn", "--layers", "--hidden", "--network", "off", "--no-predict",
              "--profile", "--dataset", "sbm", "--mode", "--doc", "--plots", "--only"],
    "train": ["--config", "tiny", "--mode", "--model", "--layers", "--hidden", "--epochs", "--stages", "--ways",
              "--chunks", "--parts", "--exact", "--wire", "--lr", "--dropout", "--seed", "--plan", "--dataset",
              "--snapshot-period", "--stop-at-val-acc", "--divergence-drop", "--history-dtype", "--device", "--out"],
}
WORDS = st.one_of(st.sampled_from(["1", "0", "-3", "2.5", "nan", "1e12", "abc", "", "x/y", "/dev/null", "4,8",
                                   "100mbit", "1000,2000,16"]), st.text(max_size=8))


def _argv(sub: str):
    return st.lists(st.one_of(st.sampled_from(OPTIONS[sub]), WORDS), max_size=6)


class _Launched(Exception):
    """A fuzzed gnnpipe-bench line got as far as starting its runs (accepted)."""


def _launched(*_a, **_k):
    raise _Launched


def _bench_call(argv: list[str]):
    from unittest import mock

    from gnnpipe.bench import cli, cluster, tta

    def call():
        with mock.patch.object(tta, "run", _launched), mock.patch.object(cluster, "sweep", _launched), \
                mock.patch.object(cluster, "run_job", _launched), mock.patch.object(cluster, "measure_link", _launched):
            try:
                return cli.main(argv)
            except _Launched:
                return 0
    return call


def _cli_call(sub: str, argv: list[str]):
    if sub == "train":  # parsing and validation only: a valid line would start training
        return lambda: parse_config(argv)
    if sub == "bench":  # tta, cluster and report only: the others measure for minutes
        argv = [["tta", "cluster", "report"][len(argv) % 3]] + [a for a in argv if a not in ("--cleanup", "--all")]
        return _bench_call(argv)
    from gnnpipe.cli import data, partition, plan

    main = {"data": data.main, "partition": partition.main, "plan": plan.main}[sub]
    if sub == "plan" and argv[:1] == ["calibrate"]:
        argv = ["--help"]  # calibrate measures the machine for a minute: not fuzzed here
    if sub == "data" and "--all" in argv:
        argv = [a for a in argv if a != "--all"]  # prepares every dataset: too slow per example
    return lambda: main(argv)


@pytest.mark.parametrize("sub", sorted(OPTIONS))
@pytest.mark.parametrize("n", [pytest.param(25, id="fast"), pytest.param(600, id="hundreds", marks=pytest.mark.slow)])
def test_command_lines_never_end_in_a_traceback(sub, n, tmp_path_factory, capsys):
    before = _repo_state()

    @settings(max_examples=n, deadline=None, suppress_health_check=list(HealthCheck), derandomize=n < 100)
    @given(_argv(sub))
    def prop(argv):
        _count(f"{sub} command lines")
        tmp = tmp_path_factory.mktemp(sub)
        with _scratch(tmp):
            rc = _no_traceback(_cli_call(sub, argv))
        err = capsys.readouterr().err
        assert "Traceback" not in err, err
        if rc not in (None, 0):  # lines as a terminal shows them (str.splitlines also splits at \x1c-\x1e)
            assert len([ln for ln in err.strip().split("\n") if ln.strip()]) <= 3, err
        shutil.rmtree(tmp, ignore_errors=True)

    prop()
    assert _repo_state() == before, "a fuzzed command wrote into the checkout"
    print(f"fuzz: {TRIED.get(f'{sub} command lines', 0)} {sub} command lines tried")


# ------------------------------------------------------------------ dataset and plan metadata
@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    from gnnpipe.data.synthetic import sbm
    from gnnpipe.partition import build_plan

    root = tmp_path_factory.mktemp("prepared")
    g = sbm(200, num_classes=3, avg_degree=4, num_features=5, seed=1, name="g")
    g.save(root / "g")
    build_plan(g, parts=2, chunks=2, seed=0).save(root / "plan")
    return root


mutations = st.dictionaries(st.text(max_size=16) | st.sampled_from(
    ["format", "format_version", "name", "num_nodes", "num_edges", "num_features", "num_classes", "content_hash",
     "sparse_features", "files", "meta", "parts", "chunks", "dataset_hash", "params"]), toml_values, max_size=4)


def _load_mutated(prepared: Path, tmp: Path, what: str, change: dict, drop: bool) -> None:
    from gnnpipe.data.graph import Graph
    from gnnpipe.partition import PartitionPlan

    src = prepared / ("g" if what == "dataset" else "plan")
    dst = tmp / src.name
    shutil.copytree(src, dst)
    marker = dst / ("meta.json" if what == "dataset" else "META.json")
    meta = json.loads(marker.read_text())
    if drop and change:
        for k in change:
            meta.pop(k, None)
    else:
        meta.update(change)
    marker.write_text(json.dumps(meta, allow_nan=True))
    if what == "dataset":
        Graph.load(dst, verify=True)
    else:
        PartitionPlan.load(dst)


@pytest.mark.parametrize("what", ["dataset", "plan"])
@pytest.mark.parametrize("n", [pytest.param(40, id="fast"), pytest.param(1500, id="thousands", marks=pytest.mark.slow)])
def test_edited_metadata_is_loaded_or_refused_in_one_line(what, n, prepared, tmp_path_factory):
    @settings(max_examples=n, deadline=None, suppress_health_check=list(HealthCheck), derandomize=n < 100)
    @given(mutations, st.booleans())
    def prop(change, drop):
        _count(f"{what} metadata")
        tmp = tmp_path_factory.mktemp(what)
        _no_traceback(lambda: _load_mutated(prepared, tmp, what, change, drop))
        shutil.rmtree(tmp, ignore_errors=True)

    prop()
    print(f"fuzz: {TRIED.get(f'{what} metadata', 0)} {what} metadata files tried")


def _same_array(a, b) -> bool:
    x, y = np.load(a, allow_pickle=False), np.load(b, allow_pickle=False)
    return x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y)


@pytest.mark.parametrize("n", [pytest.param(30, id="fast"), pytest.param(800, id="hundreds", marks=pytest.mark.slow)])
def test_corrupted_arrays_are_refused_in_one_line(n, prepared, tmp_path_factory):
    """Bytes of an array file overwritten or cut: the verified load refuses it."""
    from gnnpipe.data.graph import Graph

    files = sorted(p.name for p in (prepared / "g").glob("*.npy"))

    @settings(max_examples=n, deadline=None, suppress_health_check=list(HealthCheck), derandomize=n < 100)
    @given(st.sampled_from(files), st.integers(0, 10**6), st.binary(min_size=1, max_size=16), st.booleans())
    @example("test_mask.npy", 69, b"#", False)  # a comment in the header's padding: the same array, loads
    def prop(name, at, junk, cut):
        _count("array files")
        tmp = tmp_path_factory.mktemp("arr")
        dst = tmp / "g"
        shutil.copytree(prepared / "g", dst)
        data = bytearray((dst / name).read_bytes())
        at %= len(data)
        if cut:
            data = data[:at]
        else:
            data[at:at + len(junk)] = junk
        (dst / name).write_bytes(bytes(data))
        try:
            Graph.load(dst, verify=True)
        except GnnpipeError:
            pass
        else:
            # A change numpy's header parser ignores (a '#' comment in the header's space padding)
            # leaves the same array: loading it is right. Any other change must be refused.
            assert _same_array(dst / name, prepared / "g" / name), (
                f"{name}: changed bytes at {at} (cut={cut}) loaded without complaint"
            )
        shutil.rmtree(tmp, ignore_errors=True)

    prop()
    print(f"fuzz: {TRIED.get('array files', 0)} corrupted array files tried")


def test_the_toml_writer_writes_what_tomllib_reads():
    import tomllib

    assert tomllib.loads(f"a = {_toml_value([1, 'x', True, None, 2.5])}\n") == {"a": [1, "x", True, 2.5]}
    assert tomllib.loads(f"a = {_toml_value({'k': float('inf')})}\n") == {"a": {"k": float("inf")}}
    assert np.isnan(tomllib.loads(f"a = {_toml_value(float('nan'))}\n")["a"])
    assert _no_traceback(lambda: (_ for _ in ()).throw(GnnpipeError("x"))) is None
    with pytest.raises(ValueError):  # anything but a GnnpipeError or a usage exit fails the property
        _no_traceback(lambda: int("x"))


# ------------------------------------------------------------------ stored benchmark records
def _tta_dir(d: Path) -> Path:
    """A tta results folder with two graph curves, a pipeline curve and its timing."""
    d.mkdir(parents=True, exist_ok=True)
    curves = [{"mode": "graph", "wire": "float32", "seed": s, "epochs": [4, 9], "val": [0.3, 0.4 + s / 100],
               "test": [0.3, 0.4], "epoch_time_s": [1.0] * 10, "args": ["--epochs", "10"]} for s in (0, 1)]
    curves.append({"mode": "pipeline", "wire": "float32", "seed": 0, "epochs": [4, 9], "val": [0.35, 0.41],
                   "test": [0.3, 0.4], "epoch_time_s": [0.5] * 10, "args": ["--exact-every", "2"]})
    timing = [{"mode": "graph", "wire": "float32", "rate": "unshaped", "epoch_s": 1.0},
              {"mode": "pipeline", "wire": "float32", "rate": "unshaped", "epoch_s": 0.5, "exact_epoch_s": 0.8,
               "exact_every": 2}]
    (d / "curves.jsonl").write_text("".join(json.dumps(c) + "\n" for c in curves))
    (d / "timing.jsonl").write_text("".join(json.dumps(t) + "\n" for t in timing))
    return d


@pytest.mark.parametrize("n", [pytest.param(15, id="fast"), pytest.param(300, id="hundreds", marks=pytest.mark.slow)])
def test_edited_tta_records_are_reported_or_refused_in_one_line(n, tmp_path_factory, capsys):
    """``gnnpipe-bench tta --plot DIR`` over a curves.jsonl or timing.jsonl with bytes
    overwritten, cut, or a field's value replaced: a table, or one line naming the file."""
    from gnnpipe.bench import tta

    base = _tta_dir(tmp_path_factory.mktemp("tta-base"))

    @settings(max_examples=n, deadline=None, suppress_health_check=list(HealthCheck), derandomize=n < 100)
    @given(st.sampled_from(["curves.jsonl", "timing.jsonl"]), st.integers(0, 10**6),
           st.one_of(st.binary(min_size=1, max_size=8).map(lambda b: ("bytes", b)),
                     st.tuples(st.sampled_from(["mode", "wire", "seed", "epochs", "val", "test", "epoch_time_s", "args",
                                                "rate", "epoch_s", "exact_epoch_s"]), toml_values)),
           st.booleans())
    def prop(name, at, change, cut):
        _count("tta records")
        d = tmp_path_factory.mktemp("tta")
        shutil.copytree(base, d, dirs_exist_ok=True)
        f = d / name
        if change[0] == "bytes":
            data = bytearray(f.read_bytes())
            at %= len(data)
            data = data[:at] if cut else data[:at] + change[1] + data[at + len(change[1]):]
            f.write_bytes(bytes(data))
        else:
            lines = f.read_text().splitlines()
            rec = json.loads(lines[at % len(lines)])
            rec[change[0]] = change[1]
            lines[at % len(lines)] = json.dumps(rec)
            f.write_text("\n".join(lines) + "\n")
        code = tta.main(["--plot", str(d)])
        err = capsys.readouterr().err
        assert code in (0, 2), f"{name}: exit {code}\n{err}"
        if code == 2:
            lines = [ln for ln in err.splitlines() if ln.strip()]
            assert len(lines) == 1 and "Traceback" not in err, err
        shutil.rmtree(d, ignore_errors=True)

    prop()
    print(f"fuzz: {TRIED.get('tta records', 0)} edited tta records tried")
