"""The package's import graph: no cycles (function-local imports included) and the floors hold.

Read from the source with ``ast``, so an import hidden inside a function counts like one at
the top. ``from pkg import name`` depends on the module ``pkg.name`` when that is a module
(as import-linter counts it), otherwise on ``pkg`` itself; a submodule that imports names
from its own package's ``__init__`` therefore forms a cycle with it, as it does at run time.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "gnnpipe"


def _modules() -> dict[str, Path]:
    mods = {}
    for p in PKG.rglob("*.py"):
        parts = list(p.relative_to(PKG.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = p
    return mods


def _imports(name: str, path: Path, mods: dict) -> set[str]:
    """Modules of the package that ``name`` imports anywhere in its source."""
    pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                src = ".".join(base + ([node.module] if node.module else []))
            else:
                src = node.module or ""
            for a in node.names:
                sub = f"{src}.{a.name}"
                out.add(sub if sub in mods else src)
    return {m for m in out if m in mods and m != name}


def import_graph() -> dict[str, set[str]]:
    mods = _modules()
    return {name: _imports(name, path, mods) for name, path in mods.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_cycle_finder_finds_a_cycle_through_a_function_local_import(tmp_path):
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    # and the parser sees imports inside functions
    src = tmp_path / "m.py"
    src.write_text("def f():\n    from gnnpipe.dims import ParallelDims\n")
    assert _imports("gnnpipe.zz", src, {"gnnpipe.dims": None, "gnnpipe.zz": None}) == {"gnnpipe.dims"}


def test_no_import_cycles_among_gnnpipe_modules():
    found = cycles(import_graph())
    assert not found, "import cycles (function-local imports count):\n" + "\n".join(" -> ".join(c) for c in found)


def doc_floors() -> dict[str, int]:
    """docs/architecture.md's floor diagram: module or package -> floor (parenthesised notes
    dropped; ``cli/`` is the package gnnpipe.cli, ``cost/calibrate`` the module)."""
    doc = (PKG.parent / "docs" / "architecture.md").read_text()
    block = doc.split("```", 2)[1]
    block = re.sub(r"\([^)]*\)", " ", block, flags=re.S)
    floors, current = {}, None
    for line in block.splitlines():
        m = re.match(r"floor (\d+)\s+(.*)", line)
        if m:
            current, line = int(m.group(1)), m.group(2)
        for word in line.split():
            if current is not None:
                floors["gnnpipe." + word.strip("/").replace("/", ".")] = current
    return floors


def _floor_of(module: str, floors: dict[str, int]) -> int | None:
    best = max((p for p in floors if module == p or module.startswith(p + ".")), key=len, default=None)
    return floors[best] if best else None


def code_free_package(path: Path) -> bool:
    """A package's ``__init__.py`` that holds a docstring at most (nothing to place or guard)."""
    return path.name == "__init__.py" and all(isinstance(n, ast.Expr) for n in ast.parse(path.read_text()).body)


def test_architecture_floor_diagram_names_real_modules_and_every_module_has_a_floor():
    floors = doc_floors()
    mods = _modules()
    assert len(set(floors.values())) >= 8, floors
    unknown = sorted(p for p in floors if p not in mods)
    assert not unknown, f"docs/architecture.md's floor diagram names what is no module or package: {unknown}"
    # the package root re-exports lazily, `python -m` entries sit above everything, and a
    # package whose __init__ holds no code has nothing to place
    def placed(m):
        return (m == "gnnpipe" or m.endswith(".__main__") or code_free_package(mods[m])
                or _floor_of(m, floors) is not None)
    homeless = sorted(m for m in mods if not placed(m))
    assert not homeless, f"modules on no floor of docs/architecture.md's diagram: {homeless}"


def test_modules_import_only_from_their_floor_or_below():
    """The diagram's promise: a module imports only from its own floor or the floors below
    (function-local imports count)."""
    floors = doc_floors()
    up = []
    for name, deps in sorted(import_graph().items()):
        if name == "gnnpipe" or name.endswith(".__main__"):
            continue
        mine = _floor_of(name, floors)
        for dep in sorted(deps):
            theirs = _floor_of(dep, floors)
            if mine is not None and theirs is not None and theirs > mine:
                up.append(f"{name} (floor {mine}) imports {dep} (floor {theirs})")
    assert not up, "\n".join(up)


def test_floor_checks_catch_an_upward_import():
    floors = {"gnnpipe.low": 1, "gnnpipe.high": 2, "gnnpipe.high.pkg": 3}
    assert _floor_of("gnnpipe.high.pkg.mod", floors) == 3 and _floor_of("gnnpipe.high.x", floors) == 2
    assert _floor_of("gnnpipe.lower", floors) is None  # a prefix of the name is not its package


# Floors that never talk to the network (docs/architecture.md).
NETWORK_FREE = ("gnnpipe.models", "gnnpipe.schedule", "gnnpipe.data", "gnnpipe.partition", "gnnpipe.dims", "gnnpipe.wire",
                "gnnpipe.config", "gnnpipe.cost")
NETWORK = ("gnnpipe.comm", "torch.distributed", "mpi4py")


@pytest.mark.parametrize("floor", NETWORK_FREE)
def test_math_and_data_floors_do_not_import_the_network(floor):
    mods = _modules()
    bad = []
    for name, path in mods.items():
        if name != floor and not name.startswith(floor + "."):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            bad += [f"{name} imports {n}" for n in names if any(n == x or n.startswith(x + ".") for x in NETWORK)]
    assert not bad, "\n".join(bad)


def test_architecture_doc_names_every_module():
    """docs/architecture.md is where a newcomer finds where a change goes: every module of the
    package (or its package, for cli/, bench/, data/, models/, partition/, comm/) is named."""
    doc = (PKG.parent / "docs" / "architecture.md").read_text()
    missing = []
    for name in sorted(_modules()):
        parts = name.split(".")[1:]
        if not parts or parts[-1] == "__main__":
            continue
        path = "/".join(parts)
        pkg = parts[0] + "/"
        named = f"`{path}" in doc or f"`{path}.py" in doc or f" {path}" in doc
        if not named and not (len(parts) > 1 and parts[0] in ("cli", "bench", "data", "models", "partition")
                              and f"`{pkg}" in doc):
            # a module inside comm/, parallel/ or train/ must be named itself
            if len(parts) > 1 and parts[0] in ("comm", "parallel", "train") and (f"`{parts[-1]}`" in doc or f" {parts[-1]} " in doc):
                continue
            missing.append(path)
    assert not missing, f"docs/architecture.md does not say where these live: {missing}"


# Function-local imports of gnnpipe modules and third-party packages (the standard library
# is free): allowed only where an optional dependency or a command-line tool's start demands
# one (docs/architecture.md). Keys: (importing module, or a package with ".*"; imported
# module or package prefix). Every entry must still match something.
ALLOWED_LOCAL_IMPORTS = {
    # optional pieces
    ("*", "matplotlib"): "plots only; slow to import, and no other code path needs it",
    ("*", "dgl"): "the optional DGL backend and conversions; dgl 1.1.3 is slow and noisy to import",
    ("*", "torch_geometric"): "conversions from PyG and the PyG baseline only",
    ("*", "tqdm"): "progress bars, only where a loop shows one",
    ("gnnpipe.comm.launch", "mpi4py"): "importing mpi4py initialises MPI: only when MPI is asked for",
    ("gnnpipe.comm.launch", "gnnpipe.comm.mpi_backend"): "imports mpi4py (see above)",
    ("gnnpipe.partition.plan", "pymetis"): "a missing pymetis says what to install, only when METIS runs",
    ("gnnpipe.data.convert", "torch"): "the data floor loads and prepares graphs without torch; only "
                                       "conversions from torch formats need it",
    ("gnnpipe.data.graph", "gnnpipe.data.convert"): "Graph.from_pyg/from_dgl/...: conversions pull in torch",
    ("gnnpipe.models", "gnnpipe.models"): "the backend a config names (pyg or dgl) loads only when chosen",
    # fast start and light imports
    ("gnnpipe", "gnnpipe.data.graph"): "lazy public names: `import gnnpipe` loads nothing heavy",
    ("gnnpipe", "gnnpipe.api"): "lazy public names: `import gnnpipe` loads nothing heavy",
    ("gnnpipe.train", "gnnpipe"): "lazy re-exports: importing gnnpipe.train.<module> must not load PyG "
                                  "before gnnpipe-train has initialised MPI (hydra killed runs otherwise)",
    ("gnnpipe.cli.*", "gnnpipe"): "a CLI's --help and errors come before the heavy imports "
                                  "(cli/plan: cost.calibrate loads torch and the test harness)",
    ("gnnpipe.bench.cli", "gnnpipe.bench"): "gnnpipe-bench loads one benchmark's imports, the one it runs",
    ("gnnpipe.bench.worker", "*"): "a benchmark rank's entry: torch and the trainer load in the rank, "
                                   "after the launcher's environment is read",
    ("gnnpipe.spawn", "gnnpipe.comm"): "the harness's rank entry: only the rank process imports the "
                                         "communicator (torch.distributed), never the launching test",
    ("gnnpipe.spawn", "psutil"): "the kill path of the harness only",
    ("gnnpipe.fsutil", "numpy"): "fsutil is otherwise standard library only; numpy for json_default",
}


def _local_imports_of(name: str, path: Path) -> list[tuple[str, str, int]]:
    """(module, imported module, line) of every import inside a function of ``path``,
    standard library excluded."""
    pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
    mods = _modules()
    out: list[tuple[str, str, int]] = []

    def walk(node, in_func):
        for ch in ast.iter_child_nodes(node):
            if in_func and isinstance(ch, (ast.Import, ast.ImportFrom)):
                if isinstance(ch, ast.Import):
                    targets = [a.name for a in ch.names]
                else:  # ``from pkg import name``: the module pkg.name when it is one (as _imports)
                    if ch.level:
                        base = pkg.split(".")[: len(pkg.split(".")) - ch.level + 1]
                        src = ".".join(base + ([ch.module] if ch.module else []))
                    else:
                        src = ch.module or ""
                    targets = sorted({f"{src}.{a.name}" if f"{src}.{a.name}" in mods else src for a in ch.names})
                out.extend((name, t, ch.lineno) for t in targets if t.split(".")[0] not in sys.stdlib_module_names)
            walk(ch, in_func or isinstance(ch, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    walk(ast.parse(path.read_text(), str(path)), False)
    return out


def _local_imports() -> list[tuple[str, str, int]]:
    return [x for name, path in _modules().items() for x in _local_imports_of(name, path)]


def _allowed_by(module: str, target: str):
    for (who, what), _ in ALLOWED_LOCAL_IMPORTS.items():
        who_ok = who == "*" or module == who or (who.endswith(".*") and module.startswith(who[:-1]))
        what_ok = what == "*" or target == what or target.startswith(what + ".")
        if who_ok and what_ok:
            return who, what
    return None


def test_function_local_imports_are_only_the_allowed_ones():
    found = _local_imports()
    bad = [f"{m}:{line} imports {t} inside a function" for m, t, line in found if _allowed_by(m, t) is None]
    assert not bad, ("move these imports to the top of the module, or add an entry with its reason to "
                     "ALLOWED_LOCAL_IMPORTS:\n" + "\n".join(bad))
    used = {_allowed_by(m, t) for m, t, _ in found}
    stale = [k for k in ALLOWED_LOCAL_IMPORTS if k not in used]
    assert not stale, f"allow-list entries that match no import any more (remove them): {stale}"


def test_the_local_import_check_sees_imports_in_methods_and_nested_functions(tmp_path):
    src = tmp_path / "m.py"
    src.write_text("import numpy\nclass A:\n    def f(self):\n        def g():\n            import scipy.sparse\n"
                   "        from . import cost\n        import json\n")
    found = _local_imports_of("gnnpipe.zz", src)
    # not the top-level numpy, not the standard library's json
    assert found == [("gnnpipe.zz", "scipy.sparse", 5), ("gnnpipe.zz", "gnnpipe.cost", 6)]
    assert _allowed_by("gnnpipe.zz", "scipy.sparse") is None
    assert _allowed_by("gnnpipe.cost.predict", "gnnpipe.cost.calibrate") is None
    assert _allowed_by("gnnpipe.cli.plan", "gnnpipe.cost.calibrate") == ("gnnpipe.cli.*", "gnnpipe")


def _defined(path: Path) -> tuple[set[str], dict[str, set[str]]]:
    """Top-level names a module defines (functions, classes, assignments, imports) and each
    class's attributes (methods, fields, properties)."""
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    classes: dict[str, set[str]] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        if isinstance(node, ast.ClassDef):
            attrs = classes.setdefault(node.name, set())
            for item in ast.walk(node):
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    attrs.add(item.name)
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    attrs.add(item.target.id)
                elif isinstance(item, ast.Attribute) and isinstance(item.value, ast.Name) and item.value.id == "self":
                    attrs.add(item.attr)
                elif isinstance(item, ast.Assign):
                    attrs.update(t.id for t in item.targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names, classes


#: The names the docs give instances: ``comm.irecv`` is a method of a Communicator.
INSTANCES = {"comm": "Communicator", "ex": "Executor"}


def doc_reference_problems(doc: str) -> list[str]:
    """Every code reference in ``doc`` that names a place of the package (a path like
    ``parallel/pipeline/stage.py`` or ``cost/planner``, a dotted ``module.name`` such as
    ``schedule.lower``, or ``Class.method``) and does not resolve."""
    mods = _modules()
    index = {m: _defined(p) for m, p in mods.items()}
    all_classes: dict[str, set[str]] = {}
    for _, classes in index.values():
        for c, attrs in classes.items():
            all_classes.setdefault(c, set()).update(attrs)
    by_last: dict[str, list[str]] = {}
    for m in mods:
        by_last.setdefault(m.rsplit(".", 1)[-1], []).append(m)

    def module_for(dotted: str) -> list[str]:
        """Modules a reference's module part may mean: the full dotted name under gnnpipe,
        or (a short name such as ``halo``) any module whose last name it is."""
        full = "gnnpipe." + dotted
        if full in mods:
            return [full]
        if "." not in dotted:
            return by_last.get(dotted, [])
        return []

    def resolves(ref: str) -> bool:
        ref = re.sub(r"\(.*\)$", "", ref).removeprefix("gnnpipe.")
        if ref.split("/")[0] in ("tests", "docs", "scripts", "gnnpipe"):
            return (PKG.parent / ref).exists()
        head, _, attr = ref.partition(".")
        if attr and head in INSTANCES and not module_for(head + "." + attr.split(".")[0]):  # comm.irecv: a Communicator's
            return attr in all_classes.get(INSTANCES[head], set())
        if "/" in ref:
            path = ref[:-3] if ref.endswith(".py") else ref
            path = path.rstrip("/")
            if (PKG / path).is_dir() or (PKG / (path + ".py")).is_file():
                return True
            head, _, attr = path.rpartition(".")  # models/user.UserLayerUnit, models/__init__.build_model
            mod = "gnnpipe." + head.removesuffix("/__init__").replace("/", ".")
            return mod in index and (attr in index[mod][0] or attr in index[mod][1])
        if ref.endswith(".py"):
            return (PKG / ref).is_file() or bool(module_for(ref[:-3]))
        parts = ref.split(".")
        if parts[0][:1].isupper():  # Class.attr
            return len(parts) == 2 and parts[1] in all_classes.get(parts[0], set())
        if module_for(ref):
            return True
        for cut in range(len(parts) - 1, 0, -1):  # module.name[.attr]
            for mod in module_for(".".join(parts[:cut])):
                names, classes = index[mod]
                rest = parts[cut:]
                if rest[0] in names and (len(rest) == 1 or rest[1] in classes.get(rest[0], set())):
                    return True
        return False

    refs = sorted(set(re.findall(r"`([^`\s]+)`", doc)))
    place = re.compile(r"^(?:[a-z_]+/)+[\w.*/()=\[\].]*$|^[a-z_]+(?:\.[A-Za-z_]+)+(?:\(.*\))?$|^[A-Z]\w+\.[a-z_]\w*$")
    skip = re.compile(r"^(?:\.|-|torch|mpi4py|data/cards/\*|fit\()|\.jsonl$")
    return [r for r in refs if place.match(r) and not skip.search(r) and not resolves(r)]


def test_architecture_doc_names_only_what_exists():
    """docs/architecture.md true line by line, where a machine can check: every path, dotted
    name and Class.method it cites exists."""
    bad = doc_reference_problems((PKG.parent / "docs" / "architecture.md").read_text())
    assert not bad, f"docs/architecture.md cites what does not exist: {bad}"


def test_doc_reference_check_catches_a_stale_name():
    assert doc_reference_problems("`schedule.lower` `parallel/pipeline/stage.py` `PipelineStage.forward_chunk`") == []
    assert doc_reference_problems("`schedule.no_such` `parallel/nowhere.py` `PipelineStage.no_method`") == [
        "PipelineStage.no_method", "parallel/nowhere.py", "schedule.no_such"]
