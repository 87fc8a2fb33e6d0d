"""The size limits issue 30 set for the modules a newcomer reads first: no function over 100
lines and no constructor over 10 parameters in ``gnnpipe/parallel/``, ``gnnpipe/train/`` and
``gnnpipe/api.py``. Read from the source (no module runs)."""

from __future__ import annotations

import ast
from pathlib import Path

import gnnpipe.api
import gnnpipe.parallel.build
import gnnpipe.train.run

MAX_LINES, MAX_PARAMS = 100, 10


def _files() -> list[Path]:
    parallel = Path(gnnpipe.parallel.build.__file__).parent
    train = Path(gnnpipe.train.run.__file__).parent
    return sorted(parallel.rglob("*.py")) + sorted(train.rglob("*.py")) + [Path(gnnpipe.api.__file__)]


def shape_problems(source: str, name: str) -> list[str]:
    """Every function of ``source`` over :data:`MAX_LINES` lines and every ``__init__`` over
    :data:`MAX_PARAMS` parameters (``self`` not counted)."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        lines = node.end_lineno - node.lineno + 1
        if lines > MAX_LINES:
            out.append(f"{name}:{node.lineno} {node.name} is {lines} lines (at most {MAX_LINES})")
        a = node.args
        params = [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs if p.arg not in ("self", "cls")]
        if node.name == "__init__" and len(params) > MAX_PARAMS:
            out.append(f"{name}:{node.lineno} __init__ takes {len(params)} parameters (at most {MAX_PARAMS})")
    return out


def test_no_long_function_and_no_wide_constructor_where_newcomers_read():
    files = _files()
    assert len(files) > 15 and any(f.name == "runtime.py" for f in files)
    problems = [p for f in files for p in shape_problems(f.read_text(), f.name)]
    assert not problems, "\n".join(problems)


def test_the_check_finds_a_long_function_and_a_wide_constructor():
    long_fn = "def f():\n" + "    x = 1\n" * MAX_LINES
    wide = "class A:\n    def __init__(self, " + ", ".join(f"a{i}" for i in range(MAX_PARAMS + 1)) + "):\n        pass\n"
    assert shape_problems(long_fn, "x.py") == [f"x.py:1 f is {MAX_LINES + 1} lines (at most {MAX_LINES})"]
    assert shape_problems(wide, "y.py") == [f"y.py:2 __init__ takes {MAX_PARAMS + 1} parameters (at most {MAX_PARAMS})"]
    assert shape_problems("def g(a, b):\n    return a\n", "z.py") == []
