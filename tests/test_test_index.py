"""tests/README.md's index stays true: every module of the package has a row, every test file
is in a row, and every test a row names reaches that row's modules (through its imports, the
helpers it imports, or the command it runs), so "which tests guard this module?" has an
answer that is not stale."""

from __future__ import annotations

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent

from test_imports import _imports, _modules, code_free_package, import_graph  # noqa: E402

#: Console scripts and launchers a test may run instead of importing: the module each enters.
COMMANDS = {"gnnpipe-train": "gnnpipe.cli.train", "gnnpipe.train": "gnnpipe.cli.train",
            "torchrun.sh": "gnnpipe.cli.train", "mpirun.sh": "gnnpipe.cli.train",
            "gnnpipe-data": "gnnpipe.cli.data", "gnnpipe-plan": "gnnpipe.cli.plan",
            "gnnpipe-bench": "gnnpipe.bench.cli", "gnnpipe.bench": "gnnpipe.bench.cli"}
WHOLE = "the package as a whole"


def index_rows() -> list[tuple[str, list[str]]]:
    """(module or folder as written, test files) per row of tests/README.md's table."""
    rows = []
    for line in (TESTS / "README.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 2 or cells[0] in ("module", "---") or not line.startswith("|"):
            continue
        rows.append((cells[0].strip("`"), re.findall(r"`([^`]+)`", cells[1])))
    return rows


def row_modules(key: str, mods) -> set[str]:
    """The package modules a row's key names: ``parallel/halo.py`` one, ``data/`` a folder's."""
    if key.endswith("/"):
        pkg = "gnnpipe." + key.rstrip("/").replace("/", ".")
        return {m for m in mods if m == pkg or m.startswith(pkg + ".")}
    name = "gnnpipe." + key.removesuffix(".py").replace("/", ".")
    return {name} if name in mods else set()


def reach(test: Path, mods: dict, graph: dict) -> set[str]:
    """Package modules a test file loads: its imports (and its helpers' in tests/), the modules
    of the commands it runs, and all they import in turn."""
    start: set[str] = set()
    seen_files: set[Path] = set()
    todo = [test]
    while todo:
        f = todo.pop()
        if f in seen_files or not f.is_file():
            continue
        seen_files.add(f)
        text = f.read_text()
        start |= _imports("tests." + f.stem, f, mods)
        start |= _root_names(text)
        for node in ast.walk(ast.parse(text)):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module]
            if isinstance(node, ast.Constant) and isinstance(node.value, str):  # run_ranks("helpers.rankfns:fn", ...)
                names.append(node.value.partition(":")[0])
            for n in names:  # a helper in tests/ (helpers.rankfns) or a test module
                if n and all(part.isidentifier() for part in n.split(".")):
                    todo.append(TESTS / (n.replace(".", "/") + ".py"))
        start |= {mod for cmd, mod in COMMANDS.items() if cmd in text}
    out, todo2 = set(), list(start)
    while todo2:
        m = todo2.pop()
        if m in out:
            continue
        out.add(m)
        if m != "gnnpipe":  # the root's re-exports are lazy: _root_names says which load
            todo2 += list(graph.get(m, ()))
    return out


#: What ``from gnnpipe import name`` loads (the root package re-exports lazily).
ROOT_NAMES = {"GnnpipeError": "gnnpipe._base", "__version__": "gnnpipe._base", "Graph": "gnnpipe.data.graph"}


def _root_names(text: str) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom) and node.module == "gnnpipe" and not node.level:
            out |= {ROOT_NAMES.get(a.name, "gnnpipe.api") for a in node.names}
        elif isinstance(node, ast.Import) and any(a.name == "gnnpipe" for a in node.names):
            out.add("gnnpipe.api")  # gnnpipe.fit(...) and the like
    return out


def index_problems() -> list[str]:
    mods = _modules()
    graph = import_graph()
    rows = index_rows()
    problems = []
    named = {t for _, tests in rows for t in tests}
    for t in sorted(p.name for p in TESTS.glob("test_*.py")):
        if t not in named:
            problems.append(f"{t} is in no row")
    covered: set[str] = set()
    for key, tests in rows:
        for t in tests:
            if not (TESTS / t).is_file():
                problems.append(f"row {key}: {t} does not exist")
        if key == WHOLE:
            continue
        mine = row_modules(key, mods)
        if not mine:
            problems.append(f"row {key}: no such module or folder")
            continue
        covered |= mine
        for t in tests:
            if (TESTS / t).is_file() and not (reach(TESTS / t, mods, graph) & mine):
                problems.append(f"row {key}: {t} does not load it")
    for m in sorted(mods):
        if m == "gnnpipe" or m.endswith("__main__") or m in covered:
            continue
        if code_free_package(mods[m]):
            continue
        if not any(m.startswith(c + ".") for c in covered):
            problems.append(f"{m} has no row")
    return problems


def test_the_test_index_is_true():
    problems = index_problems()
    assert not problems, "tests/README.md's index:\n" + "\n".join(problems)


def test_row_resolution_and_reach(tmp_path):
    mods = _modules()
    assert row_modules("parallel/pipeline/", mods) >= {"gnnpipe.parallel.pipeline.stage", "gnnpipe.parallel.pipeline.runtime"}
    assert row_modules("schedule.py", mods) == {"gnnpipe.schedule"} and row_modules("nowhere.py", mods) == set()
    t = tmp_path / "test_x.py"
    t.write_text("from gnnpipe.parallel import build\n")
    got = reach(t, mods, import_graph())
    assert "gnnpipe.parallel.pipeline.runtime" in got and "gnnpipe.bench.cli" not in got
    t.write_text("from gnnpipe import GnnpipeError\n")  # the root's lazy re-exports load only what is named
    assert reach(t, mods, import_graph()) == {"gnnpipe", "gnnpipe._base"}
    t.write_text("import subprocess\nsubprocess.run(['gnnpipe-bench', 'tta'])\n")
    assert "gnnpipe.bench.cli" in reach(t, mods, import_graph())
