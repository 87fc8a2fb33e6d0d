"""Docstrings name only parameters that exist: a renamed or dropped parameter whose ``Args:``
entry stayed behind fails here (Google style, as the package writes them).

Read from the source with ``ast``: an entry is a line at the first indentation of the
``Args:`` section, ``name: ...``, ``name (type): ...`` or several names joined by ``,``,
``/`` or ``and`` (``labels, train_mask: ...``); a class's entries are its ``__init__``'s
parameters, or a dataclass's fields.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "gnnpipe"
_ENTRY = re.compile(r"\s*([*\w]+(?:\s*(?:,|/|and)\s*[*\w]+)*)\s*(?:\([^)]*\))?:")
_SECTION_END = re.compile(r"\n\s*\n(?=\S)|\n\s*(?:Returns|Raises|Yields|Attributes|Examples?|Notes?):")


def _params(node) -> set[str] | None:
    if isinstance(node, ast.ClassDef):
        init = next((n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
        if init is None:  # a dataclass: its fields
            return {n.target.id for n in node.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
        node = init
    a = node.args
    names = {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs}
    names.update(x.arg for x in (a.vararg, a.kwarg) if x is not None)
    return names


def stale_args(root: Path) -> list[str]:
    """``file:line name: Args names 'x'`` for every documented name that is no parameter."""
    out = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            doc = ast.get_docstring(node)
            if not doc or "Args:" not in doc:
                continue
            params = _params(node)
            section = _SECTION_END.split(doc.split("Args:", 1)[1])[0]
            indent = None
            for line in section.splitlines():
                if not line.strip():
                    continue
                here = len(line) - len(line.lstrip())
                indent = here if indent is None else indent
                m = _ENTRY.match(line) if here == indent else None
                if not m:
                    continue
                for name in re.split(r"\s*(?:,|/|and)\s*", m.group(1)):
                    name = name.lstrip("*")
                    if name and name not in params:
                        out.append(f"{path.relative_to(root.parent)}:{node.lineno} {node.name}: Args names {name!r}")
    return out


def test_docstrings_name_only_real_parameters():
    bad = stale_args(PKG)
    assert not bad, "docstrings document parameters that do not exist:\n" + "\n".join(bad)


def test_stale_args_finds_a_dropped_parameter(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "m.py").write_text(
        'def f(a, *, b=1):\n    """Do.\n\n    Args:\n        a: kept.\n        b (int): kept.\n'
        '        c, a: c was dropped.\n            d: a continuation line, not an entry.\n\n'
        '    Returns:\n        e: not an argument.\n    """\n\n'
        'class K:\n    """K.\n\n    Args:\n        x: gone.\n    """\n\n    def __init__(self, y):\n        pass\n')
    assert stale_args(pkg) == ["pkg/m.py:1 f: Args names 'c'", "pkg/m.py:14 K: Args names 'x'"]
