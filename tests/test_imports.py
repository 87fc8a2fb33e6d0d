"""The package's import graph: no cycles (function-local imports included) and the floors hold.

Read from the source with ``ast``, so an import hidden inside a function counts like one at
the top. ``from pkg import name`` depends on the module ``pkg.name`` when that is a module
(as import-linter counts it), otherwise on ``pkg`` itself; a submodule that imports names
from its own package's ``__init__`` therefore forms a cycle with it, as it does at run time.
"""

from __future__ import annotations

import ast
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


# Floors that never talk to the network (docs/architecture.md).
NETWORK_FREE = ("gnnpipe.models", "gnnpipe.schedule", "gnnpipe.data", "gnnpipe.partition", "gnnpipe.dims",
                "gnnpipe.config", "gnnpipe.plan")
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
